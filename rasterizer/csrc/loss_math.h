// Per-pixel math of the mapper's render loss, shared by the CPU (loss_cpu.cpp) and CUDA
// (loss_cuda.cu) kernels; the model is in rasterizer/loss.py. For pixel p of (H, W) images:
//   colour term: valid_p * mean_c |color_pc - obs_color_pc|        (also the pixel's error)
//   depth term:  depth_ok_p * |depth_p - obs_depth_p|
// and the loss's gradient from the counts of valid and depth_ok pixels.
#pragma once

#if defined(__CUDACC__)
#define SR_LOSS_HD __host__ __device__ __forceinline__
#else
#define SR_LOSS_HD inline
#endif

#include <math.h>
#include <stdint.h>

namespace sr {

// The loss's four sums, in this order (rasterizer/loss.py TOTALS).
enum LossTotal { kColorSum = 0, kValidCount = 1, kDepthSum = 2, kDepthOkCount = 3, kLossTotals = 4 };

// Pixel i's terms added into part[kLossTotals]; its colour term written to pixel_error[i].
SR_LOSS_HD void l1_loss_pixel(int64_t i, const float* color, const float* depth, const float* obs_color,
                              const float* obs_depth, const bool* valid, const bool* depth_ok,
                              double* part, float* pixel_error) {
  float e = 0.f;
  if (valid[i]) {
    e = (fabsf(color[3 * i] - obs_color[3 * i]) + fabsf(color[3 * i + 1] - obs_color[3 * i + 1]) +
         fabsf(color[3 * i + 2] - obs_color[3 * i + 2])) / 3.f;
    part[kColorSum] += e;
    part[kValidCount] += 1.0;
  }
  pixel_error[i] = e;
  if (depth_ok[i]) {
    part[kDepthSum] += fabsf(depth[i] - obs_depth[i]);
    part[kDepthOkCount] += 1.0;
  }
}

// sign(x) as torch.sgn: -1, 0 or 1 (NaN stays NaN).
SR_LOSS_HD float l1_sign(float x) { return x > 0.f ? 1.f : (x < 0.f ? -1.f : x); }

// Pixel i's gradient: colour g_color[3i..3i+2] = valid * sign(color - obs) * color_scale,
// depth g_depth[i] = depth_ok * sign(depth - obs) * depth_scale (the scales: the loss's gradient
// over 3 x the valid count, depth_weight x it over the depth_ok count).
SR_LOSS_HD void l1_loss_pixel_grad(int64_t i, const float* color, const float* depth, const float* obs_color,
                                   const float* obs_depth, const bool* valid, const bool* depth_ok,
                                   float color_scale, float depth_scale, float* g_color, float* g_depth) {
  for (int c = 0; c < 3; ++c)
    g_color[3 * i + c] = valid[i] ? l1_sign(color[3 * i + c] - obs_color[3 * i + c]) * color_scale : 0.f;
  g_depth[i] = depth_ok[i] ? l1_sign(depth[i] - obs_depth[i]) * depth_scale : 0.f;
}

// The scales of l1_loss_pixel_grad from the totals and the loss's gradient g.
SR_LOSS_HD void l1_loss_scales(const double* totals, double g, double depth_weight, float* color_scale,
                               float* depth_scale) {
  *color_scale = (float)(g / (3.0 * fmax(totals[kValidCount], 1.0)));
  *depth_scale = (float)(g * depth_weight / fmax(totals[kDepthOkCount], 1.0));
}

// The loss from the totals: colour sum / valid count + depth_weight x depth sum / depth_ok count
// (each count at least 1).
SR_LOSS_HD double l1_loss_value(const double* totals, double depth_weight) {
  return totals[kColorSum] / fmax(totals[kValidCount], 1.0) +
         depth_weight * totals[kDepthSum] / fmax(totals[kDepthOkCount], 1.0);
}

}  // namespace sr
