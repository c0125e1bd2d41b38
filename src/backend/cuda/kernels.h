// Kernel launchers of the CUDA backend, one group per .cu file. Each enqueues work on `s` and
// returns at once; arguments were validated by CudaBackend, which checks the launch status.
// Pointers are device memory, with the layouts of the matching Backend op (backend/backend.h).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"

namespace df::cuda {

// matvec.cu -- the fast path, any row count: Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, IQ4_XS, F32, F16,
// BF16 with the shape/alignment conditions of mv_units.cuh. A weight that qualifies always takes
// it, whatever the rows (a row's result must not depend on the batch).
bool mv_supports(const Weight& w);
void mv_matmul(const Weight& w, const float* x, int rows, float* y, cudaStream_t s);

// mma_matmul.cu -- the tensor-core path, any row count: Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, IQ4_XS and
// F16 weights that mv_units.cuh takes. Activations go through `scratch` as f16
// (mma_scratch_bytes). Takes precedence over matvec.cu for the weights it supports, for every
// row count (a row's result must not depend on the batch).
bool mma_supports(const Weight& w);
size_t mma_scratch_bytes(const Weight& w, int rows);
void mma_matmul(const Weight& w, const float* x, int rows, float* y, void* scratch, cudaStream_t s);

// imma_matmul.cu (Q4_K, Q5_K), imma_q6k.cu (Q6_K), imma_iq4xs.cu (IQ4_XS), imma_q80.cu (Q8_0) --
// the integer tensor-core path, any row count: the weights imma_supports takes (Q5_K, IQ4_XS and
// Q8_0 in their tile layouts only, Weight::tiles). Activations go
// through `scratch` in the CPU's format for the type, Q8_K (Q8_0 for Q8_0 weights;
// imma_scratch_bytes), so the integer sums match the CPU backend's. Takes
// precedence over mma_matmul.cu for every row count (a row's result must not depend on the
// batch). imma_matmul_group: ys[i] = x ws[i]^T for weights of the same type and n_in sharing
// the input x: the activations are quantized once and the products share launches; each result
// is bit-identical to the weight's product alone.
// Calls of more than kImmaGemmMinRows rows take the tiled prefill kernels (imma_gemm.cu for Q4_K
// and Q5_K, imma_q6k_gemm.cu for Q6_K, imma_iq4xs_gemm.cu for IQ4_XS, imma_q80_gemm.cu for Q8_0),
// which give each row the same bits. Up to 32 rows the decode kernel streams each weight once (one group of four 8-row n-tiles); above, it streams it again per 32 rows, while the GEMM reads it
// once per 64- or 128-row tile and reuses each unpacked fragment for 4 n-tiles.
bool imma_supports(const Weight& w);
size_t imma_scratch_bytes(const Weight& w, int rows);
// quantized: null, or x's Q8_K activations as the kernel that wrote x wrote them with it
// (rms_norm / add_rms_norm / swiglu / mul_sigmoid / gated_rms_norm's q8k, q8k_fused_bytes for
// this x and rows): no quantizer runs. Ignored for Q8_0 weights (they quantize x to Q8_0).
void imma_matmul_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                       cudaStream_t s, const void* quantized = nullptr);
size_t q8k_fused_bytes(int64_t n_in, int rows);

constexpr int kImmaGemmMinRows = 32;
// Launches of at most this many 16-output blocks (the 48-output ssm_alpha/beta of a shared-input
// group whose other products are another type) take the decode kernel at every row count: a GEMM
// block runs the whole k loop for its 64-128 rows on one SM, while the decode kernel spreads k
// over eight warps a 32-row group (same bits either way). Q6_K keeps its GEMM (its decode
// kernel assumes full row groups below the last n-tile). The prompt products send such a type's
// weights to the integer kernels rather than to an f16 GEMM launch of their own
// (CudaBackend::prompt_matmul_shared_input).
constexpr int kFewOutputBlocks = 8;

// deq_gemm.cu -- the prompt GEMM for Q4_K tile weights (quant/q4k_tiles.h): weights dequantized
// to f16 in shared memory, f16 activations (to_half_rows_scaled), mma with fp32 sums. Its rows are
// batch-invariant among themselves but are not the integer kernels' bits; not routed (measured at
// 1.0-1.3x the integer GEMM: see its header comment). ys[i] = x ws[i]^T for weights of one n_in
// sharing x; scratch: deq_gemm_scratch_bytes.
bool deq_gemm_supports(const Weight& w);
size_t deq_gemm_scratch_bytes(int64_t n_in, int rows);
void deq_gemm_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                    cudaStream_t s);
// deq_wgmma.cu -- the same product (same weights, scratch and f16 bits of its operands; fp32
// sums in another order) on Hopper's warpgroup mma (sm_90a; a build without sm_90a machine code
// traps). Rows batch-invariant among themselves; routed for long prompt segments
// (CudaBackend::prompt_matmul_shared_input).
void deq_wgmma_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                     cudaStream_t s);
// The same sums in blocks of one warpgroup (128 outputs, two blocks an SM): for prompts whose
// 256-output blocks fill the SMs unevenly. Timed in bench/matmul_kernels; not routed yet.
void deq_wgmma_narrow_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                            cudaStream_t s);
// Whether deq_wgmma_group runs on the current device: a Hopper GPU (compute capability 9.0) and
// sm_90a machine code in this build (a probe kernel says; synchronous, so not inside a capture).
bool deq_wgmma_runs();
// deq_wgmma_q6k.cu -- the same kind of product for Q6_K tile weights (quant/q6k_tiles.h; n_in %
// 256 == 0): the weight (q - 32) half(d sc) in f16, f16 activations, fp32 sums on wgmma (sm_90a,
// runs where deq_wgmma_runs). Same scratch (deq_gemm_scratch_bytes). Rows batch-invariant among
// themselves; routed as deq_wgmma_group.
bool deq_wgmma_q6k_supports(const Weight& w);
void deq_wgmma_q6k_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                         cudaStream_t s);
// deq_wgmma_iq4xs.cu, deq_wgmma_q5k.cu -- the same kind of product for IQ4_XS and Q5_K tile
// weights (quant/iq4xs_tiles.h, q5k_tiles.h; n_in % 256 == 0): IQ4_XS's weight half(d (ls - 32))
// times the code-book value, Q5_K's Q4_K formula with 5-bit quants, in f16; f16 activations in
// HalfOrder::kQ4k, fp32 sums on wgmma (sm_90a, runs where deq_wgmma_runs). Same scratch
// (deq_gemm_scratch_bytes). Rows batch-invariant among themselves; routed as deq_wgmma_group.
bool deq_wgmma_iq4xs_supports(const Weight& w);
void deq_wgmma_iq4xs_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                           cudaStream_t s);
bool deq_wgmma_q5k_supports(const Weight& w);
void deq_wgmma_q5k_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                         cudaStream_t s);
// deq_wgmma_q80.cu -- the same kind of product for Q8_0 tile weights (quant/q80_tiles.h; n_in %
// 256 == 0): the weight half(d) q8 in f16 (one rounding), f16 activations, fp32 sums on wgmma
// (sm_90a, runs where deq_wgmma_runs). Same scratch (deq_gemm_scratch_bytes). Rows
// batch-invariant among themselves; routed as deq_wgmma_group.
bool deq_wgmma_q80_supports(const Weight& w);
void deq_wgmma_q80_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                         cudaStream_t s);
// The order of k in which to_half_rows_scaled stores each row: as given, or permuted the way the
// wgmma GEMMs' register fragments take k (wgmma_layout.h: kQ4k fragment_k_position within each
// 64-element slice, n % 64 == 0; kQ6k q6k_fragment_k_position within each 256-element super-block,
// n % 256 == 0). IQ4_XS, Q5_K and Q8_0 tiles take kQ4k too (wgmma_q80_layout.h, wgmma_tile_values.h).
enum class HalfOrder { kNatural, kQ4k, kQ6k };
// mma_matmul.cu -- x (rows x n floats) as f16 rows scaled by 2^-shift[r] into f16's range (rows up
// to rows_pad zeros, shift 0) in the given order of k; n % 4 == 0.
void to_half_rows_scaled(const float* x, int rows, int rows_pad, int n, __half* xh, int* row_shift, cudaStream_t s,
                         HalfOrder order = HalfOrder::kNatural);
// imma_gemm.cu -- imma_matmul_group's two steps for Q4_K / Q5_K (and tiled IQ4_XS) and rows >
// kImmaGemmMinRows, apart, so that bench/matmul_kernels can time the GEMM alone: imma_quantize
// writes x's Q8_K form into scratch (imma_scratch_bytes), imma_gemm_quantized multiplies w by it.
void imma_quantize(const float* x, int64_t n_in, int rows, void* scratch, cudaStream_t s);
// imma_q6k.cu -- the same in Q6_K's format (the product's own quantizer; tests compare the norms'
// fused Q8_K bytes against both).
void imma_quantize_q6k(const float* x, int64_t n_in, int rows, void* scratch, cudaStream_t s);
// imma_q80.cu -- the same for Q8_0 weights: x's Q8_0 form (the CPU's quantize_q8_0 bytes).
void imma_quantize_q80(const float* x, int64_t n_in, int rows, void* scratch, cudaStream_t s);
// Whether the Q8_0 kernels take rows of n_in (whole 256-element super-blocks; upload_matrix
// tiles such matrices), and their activations' scratch bytes (imma_scratch_bytes of such a weight).
bool imma_q80_takes(int64_t n_in);
size_t imma_q80_scratch_bytes(int64_t n_in, int rows);
// Where imma_quantize_q80 puts them in scratch (for the tests): x's int8 values row-major at 0
// (rows padded to a multiple of 8, padding rows zeros), then at imma_q80_scales_offset the block
// scales as floats (the f16 values the CPU stores, widened), [n_in / 256][padded rows][8].
size_t imma_q80_scales_offset(int64_t n_in, int rows);
// shape: the block shape (kAuto: the one imma_matmul_group picks; the others so the bench can
// compare them on the device: output tile x warps, each output's bits the same in every shape).
// A tiled Q8_0 w takes imma_q80_gemm.cu, with x quantized by imma_quantize_q80; a Q6_K w (rows
// or tiles) imma_q6k_gemm.cu, with x quantized by imma_quantize_q6k, in its own block shape.
// imma_matmul.cu -- the Q4_K / Q5_K tile decode kernel (rows <= kImmaGemmMinRows) on x quantized
// before (imma_quantize) in a given block shape, so that bench/matmul_kernels can compare them
// (every shape gives the same bits): groups_per_block m-tile groups of 16 outputs a CUDA block
// (1, 2 or 4, where 4 means 2 above 16 rows), blocks_per_sm 3 for 9-16 rows (registers capped
// as for one n-tile; else 2 there); zeros: the routed choice.
struct ImmaDecodeShape {
  int groups_per_block = 0;
  int blocks_per_sm = 0;
};
void imma_decode_quantized(const Weight& w, float* y, int rows, const void* scratch, cudaStream_t s,
                           ImmaDecodeShape shape);
// The same for n weights of one layout and n_in sharing the quantized input (one launch while
// their 16-output blocks fit a grid, as matmul_shared_input launches them).
void imma_decode_quantized(const Weight* const* ws, float* const* ys, int n, int rows, const void* scratch,
                           cudaStream_t s, ImmaDecodeShape shape);
enum class ImmaGemmShape { kAuto, k128x64Warps4, k128x128Warps8, k128x128Warps16 };
void imma_gemm_quantized(const Weight& w, float* y, int rows, const void* scratch, cudaStream_t s,
                         ImmaGemmShape shape = ImmaGemmShape::kAuto);

// matmul.cu -- y = x W^T for every supported weight type; false if the type has no kernel.
bool matmul(const Weight& w, const float* x, int rows, float* y, cudaStream_t s);
bool matmul_supports(GgmlType t);
// The multi-row path (rows > kManyRows, block formats; see matmul.cu): W dequantized to f32 slice
// by slice into `scratch` (matmul_many_scratch floats, at most ~kManyScratchFloats plus x), then
// an fp32 product whose sums are bit-identical to matmul's for every row count.
constexpr int kManyRows = 16;
constexpr size_t kManyScratchFloats = size_t(1) << 28;  // 1 GiB of W per slice
bool matmul_many_supports(const Weight& w);
size_t matmul_many_scratch(const Weight& w, int rows);
void matmul_many(const Weight& w, const float* x, int rows, float* y, float* scratch, cudaStream_t s);

// elementwise.cu
bool embed(const Weight& table, const int32_t* tokens, int rows, float* out, cudaStream_t s);
void add(float* x, const float* y, int64_t n, cudaStream_t s);
// swiglu, mul_sigmoid, gated_rms_norm: q8k as rms_norm's below (q8k_fused_bytes(n_in, rows),
// n_in the length of an output row: n, n_heads n, n_heads dim), only where the matching
// *_q8k_supports says so (else null). mul_sigmoid's x then holds rows of n_heads contiguous
// vectors (x_stride == n).
bool swiglu_q8k_supports(const float* gate, const float* up, int rows, int n, const float* out);
void swiglu(const float* gate, const float* up, int rows, int n, float* out, cudaStream_t s, void* q8k = nullptr);
bool mul_sigmoid_q8k_supports(const float* x, size_t x_stride, const float* g, size_t g_stride, int rows,
                              int n_heads, int n);
void mul_sigmoid(float* x, size_t x_stride, const float* g, size_t g_stride, int rows, int n_heads, int n,
                 cudaStream_t s, void* q8k = nullptr);
bool gated_rms_norm_q8k_supports(const float* x, int rows, int n_heads, int dim);
void gated_rms_norm(float* x, const float* z, const float* w, int rows, int n_heads, int dim, float eps,
                    cudaStream_t s, void* q8k = nullptr);

// norm_rope.cu
// q8k: null, or q8k_fused_bytes(dim, n) bytes into which the kernel also writes the Q8_K
// activations of out for the integer tensor-core products (imma_matmul_group's `quantized`),
// the bytes their quantizers would write; then out's floats are the same bits as without.
// Only where norm_q8k_supports says so (else q8k must be null).
constexpr int kNormQ8kMaxRows = kImmaGemmMinRows;
bool norm_q8k_supports(const float* x, const float* y, size_t x_stride, const float* w, int n, int dim,
                       const float* out, size_t out_stride);
void rms_norm(const float* x, size_t x_stride, const float* w, int n, int dim, float eps, float* out,
              size_t out_stride, cudaStream_t s, void* q8k = nullptr);
// x += y (n contiguous vectors of dim), then rms_norm of x into out: one kernel.
void add_rms_norm(float* x, const float* y, const float* w, int n, int dim, float eps, float* out, size_t out_stride,
                  cudaStream_t s, void* q8k = nullptr);
void rope_neox(float* x, size_t row_stride, size_t head_stride, int rows, int n_heads, const int32_t* pos,
               int n_rot, float theta, cudaStream_t s);
// Backend::qk_norm_rope: one kernel, bit-identical to the two rms_norm and two rope_neox launches.
void qk_norm_rope(float* q, size_t q_head_stride, int n_head, const float* q_w, float* k, int n_head_kv,
                  const float* k_w, int rows, int head_dim, float eps, const int32_t* pos, int n_rot, float theta,
                  cudaStream_t s);

// attention.cu -- block_table is a device copy of SeqKv::block_table (n_blocks entries).
void kv_store(const KvLayerView& kv, const int32_t* block_table, int n_blocks, const float* k, const float* v,
              const int32_t* pos, int rows, cudaStream_t s);
void attention(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos, int n_head,
               const KvLayerView& kv, const int32_t* block_table, int n_blocks, float scale, float* out,
               cudaStream_t s);
// attention_decode.cu -- the same op for calls of at most kSplitMaxRows rows (decode, verify),
// split over the context in chunks of kSplitPositions positions (a function of the position
// alone, so a row's result does not depend on the batch); scratch holds the per-chunk partials
// (attention_split_scratch_bytes, sized by the table's length).
constexpr int kSplitMaxRows = 32;
constexpr int kSplitPositions = 256;
size_t attention_split_scratch_bytes(int rows, int n_head, const KvLayerView& kv, int n_blocks);
void attention_split(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos,
                     int n_head, const KvLayerView& kv, const int32_t* block_table, int n_blocks, float scale,
                     void* scratch, float* out, cudaStream_t s);

// flash_attention.cu -- attention() takes it for calls of more than kFlashMinRows rows on an f16
// cache of head dim 64, 128 or 256 (flash_attention_supports): tensor cores, q, K, V and the
// softmax weights rounded to f16, fp32 softmax; a row's bits do not depend on the other rows of
// the call. Up to kFlashMinRows rows (decode, speculative verify) keep attention.cu's fp32
// kernel, whose rows are bit-identical whatever the batch.
constexpr int kFlashMinRows = 32;
bool flash_attention_supports(const KvLayerView& kv);
void flash_attention(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos,
                     int n_head, const KvLayerView& kv, const int32_t* block_table, int n_blocks, float scale,
                     float* out, cudaStream_t s);

// gdn_prep.cu
void conv1d_silu(const float* x, size_t x_stride, int rows, int channels, const float* w, int kernel, float* state,
                 float* out, size_t out_stride, cudaStream_t s);
void l2_norm_heads(float* x, size_t row_stride, int rows, int n_heads, int dim, float eps, float scale,
                   cudaStream_t s);
void gdn_gates(float* b, float* a, const float* a_coef, const float* dt_bias, int rows, int n_v, cudaStream_t s);
// Backend::gdn_conv_norm_gates: one kernel up to 32 rows (while rows x d_k floats fit 48 KB of
// shared memory), else the separate kernels; the same bits either way.
void gdn_conv_norm_gates(const GdnShape& shape, const float* x, size_t x_stride, int rows, const float* conv_w,
                         int kernel, float* conv_state, float* out, size_t out_stride, float eps, float q_scale,
                         float* beta, float* alpha, const float* a_coef, const float* dt_bias, cudaStream_t s);

// deltanet.cu
void gdn_delta_rule(const GdnShape& shape, const float* qkv, size_t qkv_stride, const float* g, const float* beta,
                    int rows, float* S, float* out, bool keep_state, const int32_t* rows_limit, cudaStream_t s);
// Whether gdn_delta_rule keeps the state in registers (d_k 64 or 128, d_v % 32 == 0): then
// keep_state just skips its write; the other shapes update S in global memory, so they take
// keep_state = false only (the caller runs them on a copy).
bool gdn_recurrent_in_registers(const GdnShape& shape);
// deltanet_chunked.cu -- the chunked (WY) form for prefill, for the shapes gdn_chunked_supports
// takes; scratch: gdn_chunked_scratch_bytes(shape, rows) of device memory (no per-row states).
bool gdn_chunked_supports(const GdnShape& shape);
size_t gdn_chunked_scratch_bytes(const GdnShape& shape, int rows);
void gdn_delta_rule_chunked(const GdnShape& shape, const float* qkv, size_t qkv_stride, const float* g,
                            const float* beta, int rows, float* S, float* out, float* scratch, cudaStream_t s);

// argmax.cu -- int32 ids at out, or at the start of scratch when out is null (scratch: device
// memory of argmax_scratch_bytes(rows) bytes; past the ids it holds per-chunk picks): id r =
// argmax of the first n values of row r (x + r * stride) (ties: lowest index; NaN never wins; 0
// if all NaN). Two kernels.
size_t argmax_scratch_bytes(int rows);
void argmax_rows(const float* x, int rows, int n, size_t stride, void* scratch, int32_t* out, cudaStream_t s);

// copy_indexed.cu -- Backend::copy_2d_indexed: rows from src + (*index) * index_bytes, the index
// (device memory) read when the kernel runs.
void copy_2d_indexed(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, int rows,
                     const int32_t* index, size_t index_bytes, cudaStream_t s);

// bandwidth_probe.cu: reads `bytes` (a multiple of 16) at data once: the benches' read-only
// roofline (a decode step only reads its weights; a copy also writes). *sink is never written
// for real data; it keeps the loads from being optimised away.
void read_probe(const void* data, size_t bytes, unsigned* sink, cudaStream_t s);
// The Q4_K decode kernel's weight reads alone (no arithmetic), in the GGUF layout or a
// tile-contiguous one (same bytes reinterpreted; n_out a multiple of 16), with 1 or 3
// super-blocks a warp in flight (ahead): bench/matmul_kernels' access-pattern probe.
void q4k_pattern_probe(const void* w, int64_t n_in, int64_t n_out, size_t row_bytes, bool tile_layout, int ahead,
                       unsigned* sink, cudaStream_t s);

// top_k.cu -- per row of x (as argmax_rows) the top k (1 <= k <= min(n, kMaxDeviceTopK)) in the
// order of backend/top_k_order.h: rows * k ids, then rows * k values, at the start of scratch
// (device memory of top_k_scratch_bytes(rows, n, k) bytes; the rest holds per-chunk lists).
size_t top_k_scratch_bytes(int rows, int n, int k);
void top_k_rows(const float* x, int rows, int n, size_t stride, int k, void* scratch, cudaStream_t s);

}  // namespace df::cuda
