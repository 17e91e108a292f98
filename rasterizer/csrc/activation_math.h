// The map's parametrisation, one packed row at a time, shared by the CPU (activation_cpu.cpp) and
// CUDA (activation_cuda.cu) kernels; the model is in rasterizer/activation.py. A row (8 floats) is
// xyz, log radius, 3 colour logits, an opacity logit:
//   forward:  means = xyz, radius = exp(log radius), colour = sigmoid(logits), opacity = sigmoid
//   backward: the row's gradient from the four outputs' (d exp = exp, d sigmoid = (1 - y) y),
//             written as PyTorch's mul and sigmoid_backward compute them (g * (1 - y) * y).
// With a pose T (the first three rows of a 4x4 world-to-camera matrix, row-major; null: none) the
// means are moved into the camera, R xyz + t, and the xyz gradient is R^T g: each sum in the order
// PyTorch's CPU reduction of geometry.transform_points takes ((a0 + a1) + a2, then + t), so that
// CPU runs keep their figures (no fused multiply-add: the CUDA kernel rounds each product).
// transform_point: the same move of plain points (N, 3) (the snapshot's renders of world means).
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

#if defined(__CUDA_ARCH__)
SR_ACT_HD float act_mul(float a, float b) { return __fmul_rn(a, b); }   // never contracted to an fma
SR_ACT_HD float act_add(float a, float b) { return __fadd_rn(a, b); }
#else
SR_ACT_HD float act_mul(float a, float b) { return a * b; }
SR_ACT_HD float act_add(float a, float b) { return a + b; }
#endif

// Row r of R times v, plus the translation t: ((R_r0 v0 + R_r1 v1) + R_r2 v2) + t_r.
SR_ACT_HD float pose_row(const float* T, int r, float v0, float v1, float v2) {
  const float* row = T + 4 * r;
  return act_add(act_add(act_add(act_mul(v0, row[0]), act_mul(v1, row[1])), act_mul(v2, row[2])), row[3]);
}

// Column c of R^T g: (g0 R_0c + g1 R_1c) + g2 R_2c.
SR_ACT_HD float pose_col(const float* T, int c, float g0, float g1, float g2) {
  return act_add(act_add(act_mul(g0, T[c]), act_mul(g1, T[4 + c])), act_mul(g2, T[8 + c]));
}

// Row i of rows (N, 8) -> means (N, 3) (moved by T unless null), colors (N, 3), opacities (N,):
// all but the radius (the CPU kernel takes that column's exp from PyTorch, activation_cpu.cpp).
SR_ACT_HD void activate_row_but_radius(int64_t i, const float* rows, const float* T, float* means,
                                       float* colors, float* opacities) {
  const float* r = rows + i * kRowCols;
  if (T) {
    const float x = r[0], y = r[1], z = r[2];
    means[3 * i] = pose_row(T, 0, x, y, z);
    means[3 * i + 1] = pose_row(T, 1, x, y, z);
    means[3 * i + 2] = pose_row(T, 2, x, y, z);
  } else {
    means[3 * i] = r[0];
    means[3 * i + 1] = r[1];
    means[3 * i + 2] = r[2];
  }
  colors[3 * i] = sigmoid_of(r[4]);
  colors[3 * i + 1] = sigmoid_of(r[5]);
  colors[3 * i + 2] = sigmoid_of(r[6]);
  opacities[i] = sigmoid_of(r[7]);
}

// Point i of points (N, 3) moved by T into out (N, 3): R p + t, summed as pose_row does.
SR_ACT_HD void transform_point(int64_t i, const float* points, const float* T, float* out) {
  const float x = points[3 * i], y = points[3 * i + 1], z = points[3 * i + 2];
  out[3 * i] = pose_row(T, 0, x, y, z);
  out[3 * i + 1] = pose_row(T, 1, x, y, z);
  out[3 * i + 2] = pose_row(T, 2, x, y, z);
}

// Row i of rows (N, 8) -> means (N, 3), radii (N,), colors (N, 3), opacities (N,).
SR_ACT_HD void activate_row(int64_t i, const float* rows, const float* T, float* means, float* radii,
                            float* colors, float* opacities) {
  activate_row_but_radius(i, rows, T, means, colors, opacities);
  radii[i] = expf(rows[i * kRowCols + kLogRadiusCol]);
}

// Row i of the rows' gradient (N, 8) from the outputs' gradients (any of them null: zero), the
// forward's radii, colors and opacities and its pose T (null: none).
SR_ACT_HD void activate_backward_row(int64_t i, const float* g_means, const float* g_radii,
                                     const float* g_colors, const float* g_opacities,
                                     const float* radii, const float* colors,
                                     const float* opacities, const float* T, float* g_rows) {
  float* o = g_rows + i * kRowCols;
  if (g_means && T) {
    const float g0 = g_means[3 * i], g1 = g_means[3 * i + 1], g2 = g_means[3 * i + 2];
#pragma unroll
    for (int c = 0; c < 3; ++c) o[c] = pose_col(T, c, g0, g1, g2);
  } else {
#pragma unroll
    for (int c = 0; c < 3; ++c) o[c] = g_means ? g_means[3 * i + c] : 0.f;
  }
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
