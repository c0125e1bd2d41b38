// Naive double-precision reference implementations of the backend ops, written from the math in
// docs/qwen35-architecture.md (§2–§5) and the contracts in src/backend/backend.h. They use no
// production code (not even util/half.h), so a shared bug cannot hide in both.
// Everything is plain loops over std::vector<double>; speed is not a goal.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace df::ref {

// --- scalar helpers ---
double silu(double x);      // x / (1 + e^-x)
double sigmoid(double x);   // 1 / (1 + e^-x)
double softplus(double x);  // log(1 + e^x), evaluated without overflow or cancellation

// IEEE binary16, round-to-nearest-even, written independently of util/half.h.
uint16_t f16_bits(double x);   // overflow -> inf, NaN -> quiet NaN
double f16_value(uint16_t h);  // exact
double bf16_value(uint16_t h);  // exact

// --- dense ops ---
// y[r][o] = sum_k W[o][k] x[r][k]; W is n_out × n_in row-major, x rows × n_in.
std::vector<double> matmul(const std::vector<double>& W, int64_t n_out, int64_t n_in, const std::vector<double>& x,
                           int rows);
// out = x * (mean(x^2) + eps)^-1/2 * w for one vector of length dim.
void rms_norm(const double* x, const double* w, int dim, double eps, double* out);
// NeoX rotary embedding of one head vector (length >= n_rot), in place, at position pos.
void rope_neox(double* head, int n_rot, double pos, double theta);

// --- attention ---
// Causal softmax attention of one query head vector against keys/values of positions 0..n_ctx-1:
// k[j] and v[j] point to the head_dim values of position j (already rounded to f16 by the caller).
// If p is given, it receives the softmax weights.
void attention_head(const double* q, const std::vector<const double*>& k, const std::vector<const double*>& v,
                    int head_dim, double scale, double* out, std::vector<double>* p = nullptr);

// --- Gated DeltaNet ---
// Causal depthwise conv + SiLU. state: (K-1) × channels time-major (updated in place to the last
// K-1 inputs of [state | x]); x: rows × channels; w: channels × K; out: rows × channels.
void conv1d_silu(const std::vector<double>& x, int rows, int channels, const std::vector<double>& w, int kernel,
                 std::vector<double>& state, std::vector<double>& out);
// x / max(|x|, eps) * scale for one vector, in place.
void l2_normalize(double* x, int dim, double eps, double scale);

struct GdnDims {
  int n_k, n_v, d_k, d_v;
};
// Per-token delta rule of §4.2 step 7 (GGUF head order: value head h reads key head h % n_k).
// qkv: rows × (2 n_k d_k + n_v d_v) as [q | k | v]; g, beta: rows × n_v;
// S: n_v × d_k × d_v (S[h][i key][j value]), updated in place; out: rows × n_v d_v.
void gdn_delta_rule(const GdnDims& d, const std::vector<double>& qkv, const std::vector<double>& g,
                    const std::vector<double>& beta, int rows, std::vector<double>& S, std::vector<double>& out);

// rms_norm(x; w, eps) * silu(z) for one head vector.
void gated_rms_norm(const double* x, const double* z, const double* w, int dim, double eps, double* out);

}  // namespace df::ref
