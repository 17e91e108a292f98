// Per-pixel frame math shared by the CPU (frame_cpu.cpp) and CUDA (frame_cuda.cu) kernels; the
// models are in rasterizer/frame.py. Downsampling by an integer factor f, per output pixel:
//   colour: the mean of the f x f block (summed row by row, then divided by f^2, as avg_pool2d);
//   depth:  the median of the block's valid values (0 < d < inf), the mean of the two middle ones
//           for an even count; 0 when the block has none.
// And the depth-edge mask (depth_edge_ok).
#pragma once

#if defined(__CUDACC__)
#define SR_FRAME_HD __host__ __device__ __forceinline__
#else
#define SR_FRAME_HD inline
#endif

#include <float.h>
#include <math.h>
#include <stdint.h>

namespace sr {

constexpr int kMaxDownsample = 16;   // the largest factor f: a block's depths in 256 entries

// Output pixel (y, x) of (h, w) from (H, W) inputs: colour (H, W, 3), depth (H, W) row-major.
// MaxF >= f sizes the per-thread array of the block's depths (on CUDA, local memory reserved for
// every resident thread: keep it small for the common factors).
template <int MaxF>
SR_FRAME_HD void downsample_pixel(int64_t y, int64_t x, int f, int64_t W, int64_t w,
                                  const float* color, const float* depth, float* out_color,
                                  float* out_depth) {
  float r = 0.f, g = 0.f, b = 0.f;
  float vals[MaxF * MaxF];
  int n = 0;
  for (int dy = 0; dy < f; ++dy) {
    for (int dx = 0; dx < f; ++dx) {
      const int64_t i = (y * f + dy) * W + (x * f + dx);
      r += color[3 * i];
      g += color[3 * i + 1];
      b += color[3 * i + 2];
      const float d = depth[i];
      if (d > 0.f && d <= FLT_MAX) {   // insertion into the sorted valid values
        int k = n++;
        while (k > 0 && vals[k - 1] > d) {
          vals[k] = vals[k - 1];
          --k;
        }
        vals[k] = d;
      }
    }
  }
  const float area = (float)(f * f);
  const int64_t o = y * w + x;
  out_color[3 * o] = r / area;
  out_color[3 * o + 1] = g / area;
  out_color[3 * o + 2] = b / area;
  out_depth[o] = n > 0 ? 0.5f * (vals[(n - 1) / 2] + vals[n / 2]) : 0.f;
}

// Pixel (y, x) of the depth-edge mask of (H, W) row-major depth (the model is in
// rasterizer/frame.py): valid (d > 0), and over its 3x3 neighbourhood inside the image, the largest
// valid depth (invalid: 0) minus the smallest (invalid: 1e6) is at most max_jump * d.
SR_FRAME_HD bool depth_edge_ok(int64_t y, int64_t x, int64_t H, int64_t W, const float* depth,
                               float max_jump) {
  const float d = depth[y * W + x];
  if (!(d > 0.f)) return false;
  float hi = 0.f, lo = INFINITY;
  for (int64_t v = y > 0 ? y - 1 : 0; v <= y + 1 && v < H; ++v)
    for (int64_t u = x > 0 ? x - 1 : 0; u <= x + 1 && u < W; ++u) {
      const float e = depth[v * W + u];
      const bool ok = e > 0.f;
      hi = fmaxf(hi, ok ? e : 0.f);
      lo = fminf(lo, ok ? e : 1e6f);
    }
  return (hi - lo) <= max_jump * d;
}

}  // namespace sr
