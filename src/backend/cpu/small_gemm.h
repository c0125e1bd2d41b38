// C = beta C + sign (A B) for the small row-major fp32 products of the chunked delta rule
// (ops_gdn.cpp: 64 x 128 x 128 and alike, all operands in L1/L2). A register-blocked kernel:
// 4 rows of C x 64 columns in 16 AVX-512 accumulators, each B row load feeding 4 FMAs, where
// the loops it replaced (one row of C updated per A element) loaded and stored C for every FMA.
// Per element of C the sum runs over k in order, one FMA a term, from beta C: the same
// arithmetic as those loops, only the schedule differs.
#pragma once
#include <immintrin.h>

namespace df::cpu {

struct GemmOperand {
  const float* p;
  int ld;  // floats from one row to the next
};

namespace gemm_detail {

// The plain form: columns [n0, n1) of every row, any shape.
inline void gemm_scalar(int M, int n0, int n1, int K, GemmOperand A, GemmOperand B, float* C, int ldc, float beta,
                        bool subtract) {
  for (int m = 0; m < M; ++m)
    for (int n = n0; n < n1; ++n) {
      float c = beta == 0.0f ? 0.0f : beta * C[m * ldc + n];
      for (int k = 0; k < K; ++k) {
        const float a = subtract ? -A.p[m * A.ld + k] : A.p[m * A.ld + k];
        c = __builtin_fmaf(a, B.p[k * B.ld + n], c);
      }
      C[m * ldc + n] = c;
    }
}

#if defined(__AVX512F__)
// Rows m .. m + R - 1, columns n .. n + 63: R rows x 4 vectors of 16 in registers.
template <int R>
inline void gemm_block(int m, int n, int K, GemmOperand A, GemmOperand B, float* C, int ldc, float beta,
                       bool subtract) {
  __m512 acc[R][4];
  const __m512 b = _mm512_set1_ps(beta);
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v)
      acc[r][v] = beta == 0.0f ? _mm512_setzero_ps() : _mm512_mul_ps(b, _mm512_loadu_ps(C + (m + r) * ldc + n + 16 * v));
  for (int k = 0; k < K; ++k) {
    const float* bk = B.p + k * B.ld + n;
    const __m512 b0 = _mm512_loadu_ps(bk), b1 = _mm512_loadu_ps(bk + 16), b2 = _mm512_loadu_ps(bk + 32),
                 b3 = _mm512_loadu_ps(bk + 48);
    for (int r = 0; r < R; ++r) {
      const float a = A.p[(m + r) * A.ld + k];
      const __m512 av = _mm512_set1_ps(subtract ? -a : a);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(av, b2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(av, b3, acc[r][3]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) _mm512_storeu_ps(C + (m + r) * ldc + n + 16 * v, acc[r][v]);
}
#endif

}  // namespace gemm_detail

// C (M x N, row stride ldc) = beta C + (subtract ? -1 : 1) A (M x K) B (K x N). beta 0 does not
// read C. No element of C may be an element of A or B (they may share rows: ops_gdn keeps
// [W | Kc] in one row and writes W from Kc).
inline void small_gemm(int M, int N, int K, GemmOperand A, GemmOperand B, float* C, int ldc, float beta,
                       bool subtract = false) {
  int n_vec = 0;
#if defined(__AVX512F__)
  n_vec = N / 64 * 64;
  for (int n = 0; n < n_vec; n += 64) {
    int m = 0;
    for (; m + 4 <= M; m += 4) gemm_detail::gemm_block<4>(m, n, K, A, B, C, ldc, beta, subtract);
    for (; m < M; ++m) gemm_detail::gemm_block<1>(m, n, K, A, B, C, ldc, beta, subtract);
  }
#endif
  if (n_vec < N) gemm_detail::gemm_scalar(M, n_vec, N, K, A, B, C, ldc, beta, subtract);
}

}  // namespace df::cpu
