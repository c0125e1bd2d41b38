// Per-format quantizers behind quantize_row and quantize_activation_row (internal to
// src/quant). Each encodes nb blocks of its format from src into dst.
#pragma once
#include <cstdint>

namespace df::quant {

// Activation formats; rounding identical to ggml's reference quantizers
// (quantize_row_q8_0_ref / q8_1_ref / q8_K_ref), bit for bit.
void quantize_q8_0(const float* x, void* dst, int64_t nb);
void quantize_q8_1(const float* x, void* dst, int64_t nb);
void quantize_q8_k(const float* x, void* dst, int64_t nb);

// Legacy 32-element weight formats (ggml's reference rounding).
void quantize_q4_0(const float* x, void* dst, int64_t nb);
void quantize_q4_1(const float* x, void* dst, int64_t nb);
void quantize_q5_0(const float* x, void* dst, int64_t nb);
void quantize_q5_1(const float* x, void* dst, int64_t nb);

// K-quants: per-sub-block scale searches, then 6/4/8-bit scale quantization.
void quantize_q2_k(const float* x, void* dst, int64_t nb);
void quantize_q3_k(const float* x, void* dst, int64_t nb);
void quantize_q4_k(const float* x, void* dst, int64_t nb);
void quantize_q5_k(const float* x, void* dst, int64_t nb);
void quantize_q6_k(const float* x, void* dst, int64_t nb);

// Non-linear 4-bit code book formats.
void quantize_iq4_nl(const float* x, void* dst, int64_t nb);
void quantize_iq4_xs(const float* x, void* dst, int64_t nb);

}  // namespace df::quant
