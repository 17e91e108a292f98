// One Adam update of one packed parameter row, shared by the CPU (adam_cpu.cpp) and CUDA
// (adam_cuda.cu) kernels; the model is in rasterizer/adam.py. A row is touched when any of its
// gradients is non-zero: then its step count goes up by one and, per column c,
//   m = b1 m + (1 - b1) g        v = b2 v + (1 - b2) g^2
//   p -= lr_c (m / (1 - b1^s)) / (sqrt(v / (1 - b2^s)) + eps)      s = the row's step count
// An untouched row keeps its moments, step count and parameters.
#pragma once

#if defined(__CUDACC__)
#define SR_ADAM_HD __host__ __device__ __forceinline__
#else
#define SR_ADAM_HD inline
#endif

#include <math.h>
#include <stdint.h>

namespace sr {

constexpr int kAdamCols = 8;   // a sphere's packed row: xyz, radius, rgb, opacity (raw values)

struct AdamSettings {
  float beta1, beta2, eps;
};

// Row i of (rows, D) row-major arrays; lr has D entries.
template <int D>
SR_ADAM_HD void adam_row(int64_t i, float* p, float* m, float* v, float* steps, const float* g,
                         const float* lr, AdamSettings s) {
  const int64_t o = i * D;
  bool touched = false;
#pragma unroll
  for (int c = 0; c < D; ++c) touched = touched || g[o + c] != 0.f;
  if (!touched) return;
  const float n = steps[i] + 1.f;
  steps[i] = n;
  const float bc1 = 1.f - powf(s.beta1, n);
  const float bc2 = 1.f - powf(s.beta2, n);
#pragma unroll
  for (int c = 0; c < D; ++c) {
    const float gc = g[o + c];
    const float mc = s.beta1 * m[o + c] + (1.f - s.beta1) * gc;
    const float vc = s.beta2 * v[o + c] + (1.f - s.beta2) * gc * gc;
    m[o + c] = mc;
    v[o + c] = vc;
    p[o + c] -= lr[c] * (mc / bc1) / (sqrtf(vc / bc2) + s.eps);
  }
}

}  // namespace sr
