// Row-wise and element-wise ops: norms, activations, gates. All math in float32; reductions
// accumulate in float32 like the reference implementations they are tested against.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/simd.h"

namespace df {

namespace {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

using cpu::sum_squares;

}  // namespace

void CpuBackend::rms_norm(const float* x, size_t x_stride, const float* w, int n, int dim, float eps, float* out,
                          size_t out_stride) {
  pool_.parallel_for(n, 8, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const float* xi = x + i * x_stride;
      float* oi = out + i * out_stride;
      const float scale = 1.0f / std::sqrt(sum_squares(xi, dim) / float(dim) + eps);
      for (int j = 0; j < dim; ++j) oi[j] = xi[j] * scale * w[j];
    }
  });
}

void CpuBackend::add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void CpuBackend::swiglu(const float* gate, const float* up, int rows, int n, float* out) {
  pool_.parallel_for(int64_t(rows) * n, 4096,
                     [&](int64_t b, int64_t e, int) { cpu::silu_mul(gate + b, up + b, out + b, e - b); });
}

void CpuBackend::mul_sigmoid(float* x, size_t x_stride, const float* g, size_t g_stride, int rows, int n_heads,
                             int n) {
  pool_.parallel_for(int64_t(rows) * n_heads, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r) {
      float* xr = x + r * x_stride;
      const float* gr = g + r * g_stride;
      for (int i = 0; i < n; ++i) xr[i] *= sigmoid(gr[i]);
    }
  });
}

void CpuBackend::l2_norm_heads(float* x, size_t row_stride, int rows, int n_heads, int dim, float eps, float scale) {
  pool_.parallel_for(int64_t(rows) * n_heads, 16, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      float* v = x + (i / n_heads) * row_stride + (i % n_heads) * dim;
      const float norm = std::sqrt(sum_squares(v, dim));
      const float f = scale / std::max(norm, eps);
      for (int j = 0; j < dim; ++j) v[j] *= f;
    }
  });
}

void CpuBackend::gdn_gates(float* b, float* a, const float* a_coef, const float* dt_bias, int rows, int n_v) {
  for (int r = 0; r < rows; ++r) {
    for (int h = 0; h < n_v; ++h) {
      float& bb = b[r * n_v + h];
      float& aa = a[r * n_v + h];
      bb = sigmoid(bb);
      aa = a_coef[h] * softplus(aa + dt_bias[h]);
    }
  }
}

void CpuBackend::gated_rms_norm(float* x, const float* z, const float* w, int rows, int n_heads, int dim, float eps) {
  pool_.parallel_for(int64_t(rows) * n_heads, 16, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      float* v = x + i * dim;
      const float* zv = z + i * dim;
      const float scale = 1.0f / std::sqrt(sum_squares(v, dim) / float(dim) + eps);
      float gate[1024];  // dim <= 512 is validated at load
      cpu::silu_mul(zv, nullptr, gate, dim);
      for (int j = 0; j < dim; ++j) v[j] = v[j] * scale * w[j] * gate[j];
    }
  });
}

void CpuBackend::rope_neox(float* x, size_t row_stride, size_t head_stride, int rows, int n_heads, const int32_t* pos,
                           int n_rot, float theta) {
  const int half = n_rot / 2;
  pool_.parallel_for(rows, 1, [&](int64_t b, int64_t e, int) {
    float cs[512], sn[512];  // n_rot <= head_dim <= 1024 is validated at load
    for (int64_t r = b; r < e; ++r) {
      const double p = pos[r];
      for (int i = 0; i < half; ++i) {
        // Angles in double: positions reach 10^5+ and float angles would lose the phase.
        const double ang = p * std::pow(double(theta), -2.0 * i / n_rot);
        cs[i] = float(std::cos(ang));
        sn[i] = float(std::sin(ang));
      }
      for (int h = 0; h < n_heads; ++h) {
        float* v = x + r * row_stride + h * head_stride;
        for (int i = 0; i < half; ++i) {
          const float x0 = v[i], x1 = v[i + half];
          v[i] = x0 * cs[i] - x1 * sn[i];
          v[i + half] = x1 * cs[i] + x0 * sn[i];
        }
      }
    }
  });
}

}  // namespace df
