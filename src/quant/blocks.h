// Byte layouts of the ggml block formats (ggml-common.h), shared by the dequantizers,
// quantizers and dot kernels. Internal to src/quant. All fields little-endian; f16 fields
// are stored as raw uint16_t bits so the structs are trivially copyable.
#pragma once
#include <cstdint>

namespace df::quant {

constexpr int kQK = 32;    // elements per legacy block (Q4_0 ... Q8_1, IQ4_NL)
constexpr int kQKK = 256;  // elements per K-quant super-block (Q2_K ... Q8_K, IQ4_XS)

struct BlockQ4_0 { uint16_t d; uint8_t qs[16]; };
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[16]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockQ5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[32]; };
struct BlockQ8_1 { uint16_t d, s; int8_t qs[32]; };  // s = d * sum(qs), for Q4_1/Q5_1 offsets
struct BlockIQ4_NL { uint16_t d; uint8_t qs[16]; };

struct BlockQ2_K { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; };
struct BlockQ3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; };
struct BlockQ4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct BlockQ5_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct BlockQ6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
struct BlockQ8_K { float d; int8_t qs[256]; int16_t bsums[16]; };  // bsums: sums of 16 qs each
struct BlockIQ4_XS { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; };

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36 &&
              sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292 &&
              sizeof(BlockIQ4_XS) == 136);

// The IQ4 non-linear 4-bit code book (denser near zero, where Gaussian weights live).
inline constexpr int8_t kIQ4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

// Q4_K / Q5_K: 6-bit scale and min of sub-block s (0..7) from the 12 packed bytes.
// Bytes 0..3 hold scales 0..3 (low 6 bits), bytes 4..7 mins 0..3; sub-blocks 4..7 keep their
// low 4 bits in bytes 8..11 and their top 2 bits in the spare top bits of bytes 0..7.
inline void k4_scale_min(const uint8_t* q, int s, uint8_t& sc, uint8_t& mn) {
  if (s < 4) {
    sc = q[s] & 63;
    mn = q[s + 4] & 63;
  } else {
    sc = uint8_t((q[s + 4] & 15) | ((q[s - 4] >> 6) << 4));
    mn = uint8_t((q[s + 4] >> 4) | ((q[s] >> 6) << 4));
  }
}

// Q3_K: the 16 signed 6-bit scales (value - 32 already applied) from the 12 packed bytes.
inline void q3k_scales(const uint8_t* q, int8_t out[16]) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? (q[j] & 15) : (q[j - 8] >> 4);
    const int high = (q[8 + (j % 4)] >> (2 * (j / 4))) & 3;
    out[j] = int8_t((low | (high << 4)) - 32);
  }
}

}  // namespace df::quant
