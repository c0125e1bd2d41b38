// Per-format dequantizers behind dequantize_row (internal to src/quant). Each writes
// nb blocks of its format starting at src into dst.
//
// Bit-exactness with ggml: the float operations follow ggml's order, e.g. Q4_K computes
// (d*sc)*q - (dmin*m), rounding after each. (The products of an f16 scale and small integers
// are exact in float, so only the final add/subtract rounds; still, every dequant file turns
// GCC's default -ffp-contract=fast off so the operations stay exactly as written.)
#pragma once
#include <cstdint>

namespace df::quant {

void dequant_q4_0(const void* src, float* dst, int64_t nb);
void dequant_q4_1(const void* src, float* dst, int64_t nb);
void dequant_q5_0(const void* src, float* dst, int64_t nb);
void dequant_q5_1(const void* src, float* dst, int64_t nb);
void dequant_q8_0(const void* src, float* dst, int64_t nb);
void dequant_q8_1(const void* src, float* dst, int64_t nb);

void dequant_q2_k(const void* src, float* dst, int64_t nb);
void dequant_q3_k(const void* src, float* dst, int64_t nb);
void dequant_q4_k(const void* src, float* dst, int64_t nb);
void dequant_q5_k(const void* src, float* dst, int64_t nb);
void dequant_q6_k(const void* src, float* dst, int64_t nb);
void dequant_q8_k(const void* src, float* dst, int64_t nb);

void dequant_iq4_nl(const void* src, float* dst, int64_t nb);
void dequant_iq4_xs(const void* src, float* dst, int64_t nb);

}  // namespace df::quant
