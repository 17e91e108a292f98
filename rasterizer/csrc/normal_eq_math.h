// The robust normal equations of a residual vector and its Jacobian rows, shared by the CPU
// (normal_eq_cpu.cpp) and CUDA (normal_eq_cuda.cu) reductions; the model is in
// rasterizer/normal_equations.py. Per element m (residual r_m of channel c = m mod C):
//   w_m = k_c / max(|r_m|, k_c)                       (Huber IRLS weight)
//   H += w_m J_m J_m^T (upper triangle, row-major)    g += w_m r_m J_m     cost += w_m r_m^2
// where J_m is column m of the (P, M) Jacobian, rows ld floats apart.
#pragma once

#if defined(__CUDACC__)
#define SR_NE_HD __host__ __device__ __forceinline__
#else
#define SR_NE_HD inline
#endif

#include <stdint.h>

namespace sr {

// Values per element of the packed result: P(P+1)/2 (H, upper triangle) + P (g) + 1 (cost).
SR_NE_HD constexpr int ne_values(int P) { return P * (P + 1) / 2 + P + 1; }

// Adds element m's terms into acc (ne_values(P) accumulators of type T).
template <int P, typename T>
SR_NE_HD void ne_add(const float* J, int64_t ld, int64_t m, float r, float k, T* acc) {
  const float a = r < 0.f ? -r : r;
  const float w = k / (a > k ? a : k);
  const float wr = w * r;
  float col[P];
#pragma unroll
  for (int i = 0; i < P; ++i) col[i] = J[i * ld + m];
  int idx = 0;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const float wi = w * col[i];
#pragma unroll
    for (int j = i; j < P; ++j) acc[idx++] += (T)(wi * col[j]);
  }
#pragma unroll
  for (int i = 0; i < P; ++i) acc[idx++] += (T)(wr * col[i]);
  acc[idx] += (T)(wr * r);
}

}  // namespace sr
