// The map's parametrisation, one packed row at a time, shared by the CPU (activation_cpu.cpp) and
// CUDA (activation_cuda.cu) kernels; the model is in rasterizer/activation.py. A row (8 floats) is
// xyz, log radius, 3 colour logits, an opacity logit:
//   forward:  means = xyz, radius = exp(log radius), colour = sigmoid(logits), opacity = sigmoid
//   backward: the row's gradient from the four outputs' (d exp = exp, d sigmoid = (1 - y) y),
//             written as PyTorch's mul and sigmoid_backward compute them (g * (1 - y) * y).
#pragma once

#if defined(__CUDACC__)
#define SR_ACT_HD __host__ __device__ __forceinline__
#else
#define SR_ACT_HD inline
#endif

#include <math.h>
#include <stdint.h>

namespace sr {

constexpr int kRowCols = 8;   // xyz, log radius, rgb logits, opacity logit
constexpr int kLogRadiusCol = 3;

SR_ACT_HD float sigmoid_of(float x) { return 1.f / (1.f + expf(-x)); }

// Row i of rows (N, 8) -> means (N, 3), colors (N, 3), opacities (N,): all but the radius (the CPU
// kernel takes that column's exp from PyTorch, activation_cpu.cpp).
SR_ACT_HD void activate_row_but_radius(int64_t i, const float* rows, float* means, float* colors,
                                       float* opacities) {
  const float* r = rows + i * kRowCols;
  means[3 * i] = r[0];
  means[3 * i + 1] = r[1];
  means[3 * i + 2] = r[2];
  colors[3 * i] = sigmoid_of(r[4]);
  colors[3 * i + 1] = sigmoid_of(r[5]);
  colors[3 * i + 2] = sigmoid_of(r[6]);
  opacities[i] = sigmoid_of(r[7]);
}

// Row i of rows (N, 8) -> means (N, 3), radii (N,), colors (N, 3), opacities (N,).
SR_ACT_HD void activate_row(int64_t i, const float* rows, float* means, float* radii, float* colors,
                            float* opacities) {
  activate_row_but_radius(i, rows, means, colors, opacities);
  radii[i] = expf(rows[i * kRowCols + kLogRadiusCol]);
}

// Row i of the rows' gradient (N, 8) from the outputs' gradients (any of them null: zero) and the
// forward's radii, colors and opacities.
SR_ACT_HD void activate_backward_row(int64_t i, const float* g_means, const float* g_radii,
                                     const float* g_colors, const float* g_opacities,
                                     const float* radii, const float* colors,
                                     const float* opacities, float* g_rows) {
  float* o = g_rows + i * kRowCols;
#pragma unroll
  for (int c = 0; c < 3; ++c) o[c] = g_means ? g_means[3 * i + c] : 0.f;
  o[3] = g_radii ? g_radii[i] * radii[i] : 0.f;
#pragma unroll
  for (int c = 0; c < 3; ++c) {
    const float y = colors[3 * i + c];
    o[4 + c] = g_colors ? g_colors[3 * i + c] * (1.f - y) * y : 0.f;
  }
  const float y = opacities[i];
  o[7] = g_opacities ? g_opacities[i] * (1.f - y) * y : 0.f;
}

}  // namespace sr
