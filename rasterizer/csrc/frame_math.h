// One output pixel of an image downsampled by an integer factor f, shared by the CPU
// (frame_cpu.cpp) and CUDA (frame_cuda.cu) kernels; the model is in rasterizer/frame.py:
//   colour: the mean of the f x f block (summed row by row, then divided by f^2, as avg_pool2d);
//   depth:  the median of the block's valid values (0 < d < inf), the mean of the two middle ones
//           for an even count; 0 when the block has none.
#pragma once

#if defined(__CUDACC__)
#define SR_FRAME_HD __host__ __device__ __forceinline__
#else
#define SR_FRAME_HD inline
#endif

#include <float.h>
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

}  // namespace sr
