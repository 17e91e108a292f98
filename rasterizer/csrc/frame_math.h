// Per-pixel frame math shared by the CPU (frame_cpu.cpp) and CUDA (frame_cuda.cu) kernels; the
// models are in rasterizer/frame.py. Downsampling by an integer factor f, per output pixel:
//   colour: the mean of the f x f block (summed row by row, then divided by f^2, as avg_pool2d);
//   depth:  the median of the block's valid values (0 < d < inf), the mean of the two middle ones
//           for an even count; 0 when the block has none.
// And a compact frame's float images (unpack_pixel), the depth-edge mask (depth_edge_ok), the
// rolling-shutter unroll (unroll_pixel) and what counts as a valid depth (valid_depth; also the
// median depth's, median_math.h).
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

// A valid depth (metres): 0 < d < inf (not NaN).
SR_FRAME_HD bool valid_depth(float d) { return d > 0.f && d <= FLT_MAX; }

// Pixel i of a compact frame (colour (H, W, 3) uint8, depth (H, W) of type D: float or a half type
// that converts to float) as float images: colour / 255 (rounded division, as PyTorch's CPU
// divides), depth where valid (valid_depth), else 0.
template <typename D>
SR_FRAME_HD void unpack_pixel(int64_t i, const uint8_t* color, const D* depth, float* out_color,
                              float* out_depth) {
  out_color[3 * i] = (float)color[3 * i] / 255.f;
  out_color[3 * i + 1] = (float)color[3 * i + 1] / 255.f;
  out_color[3 * i + 2] = (float)color[3 * i + 2] / 255.f;
  const float d = static_cast<float>(depth[i]);
  out_depth[i] = valid_depth(d) ? d : 0.f;
}

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
      if (valid_depth(d)) {   // insertion into the sorted valid values
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

// Rolling-shutter unroll (the model is in rasterizer/frame.py, ``unroll``): the camera turns at
// (wx, wy, wz) rad/s (camera frame); an image's row v was taken at
// tau(v) = offset + readout * ((v + 0.5) / H - 0.5) s from the colour's middle row (colour: its
// readout, offset 0; depth: its own readout, and its time after the colour's).
struct UnrollParams {
  float fx, fy, cx, cy;   // pixels
  float wx, wy, wz;       // rad/s
  float color_readout;    // s, first row to last
  float depth_readout;    // s, first row to last
  float depth_offset;     // s, the depth image's time after the colour's
  int64_t H, W;
};

// (x, y, z) rotated by the rotation vector (wx, wy, wz) * t (rad; Rodrigues).
SR_FRAME_HD void rotate_by_rate(const UnrollParams& p, float t, float& x, float& y, float& z) {
  const float ax = p.wx * t, ay = p.wy * t, az = p.wz * t;
  const float a = sqrtf(ax * ax + ay * ay + az * az);
  if (!(a > 1e-12f)) return;
  const float kx = ax / a, ky = ay / a, kz = az / a, s = sinf(a), c = cosf(a);
  const float kd = (kx * x + ky * y + kz * z) * (1.f - c);
  const float rx = x * c + (ky * z - kz * y) * s + kx * kd;
  const float ry = y * c + (kz * x - kx * z) * s + ky * kd;
  const float rz = z * c + (kx * y - ky * x) * s + kz * kd;
  x = rx;
  y = ry;
  z = rz;
}

SR_FRAME_HD float unroll_row_time(const UnrollParams& p, float offset, float readout, float v) {
  return offset + readout * ((v + 0.5f) / (float)p.H - 0.5f);
}

// Where an image with row times offset + readout * ... recorded the middle-row camera's ray through pixel
// (x, y): its ray turned back by exp(w tau), tau from the output row, then once more from the row
// found (one fixed-point step). Returns false when the ray turns behind the camera; else the
// source pixel (us, vs), its normalised ray (nx, ny, 1) in the recording camera and its tau.
SR_FRAME_HD bool unroll_source(const UnrollParams& p, float offset, float readout, int64_t x,
                               int64_t y, float& us, float& vs, float& nx, float& ny, float& tau) {
  const float dx = ((float)x - p.cx) / p.fx, dy = ((float)y - p.cy) / p.fy;
  float row = (float)y;
  for (int step = 0; step < 2; ++step) {
    float rx = dx, ry = dy, rz = 1.f;
    rotate_by_rate(p, -unroll_row_time(p, offset, readout, row), rx, ry, rz);
    if (!(rz > 1e-6f)) return false;
    nx = rx / rz;
    ny = ry / rz;
    us = nx * p.fx + p.cx;
    vs = ny * p.fy + p.cy;
    row = vs;
  }
  tau = unroll_row_time(p, offset, readout, vs);
  return isfinite(us) && isfinite(vs);
}

// Output pixel (y, x) of the unrolled frame from colour (H, W, 3) and depth (H, W) row-major:
// colour bilinear at its source (coordinates clamped to the image: border), depth nearest at its
// own source (0 outside the image), that point's z then in the middle row's camera. A ray that
// turns behind the camera keeps the pixel's colour and gets depth 0.
SR_FRAME_HD void unroll_pixel(int64_t y, int64_t x, const UnrollParams& p, const float* color,
                              const float* depth, float* out_color, float* out_depth) {
  const int64_t o = y * p.W + x;
  float us, vs, nx, ny, tau;
  if (unroll_source(p, 0.f, p.color_readout, x, y, us, vs, nx, ny, tau)) {
    const float u = fminf(fmaxf(us, 0.f), (float)(p.W - 1)), v = fminf(fmaxf(vs, 0.f), (float)(p.H - 1));
    const int64_t u0 = (int64_t)floorf(u), v0 = (int64_t)floorf(v);
    const int64_t u1 = u0 + 1 < p.W ? u0 + 1 : u0, v1 = v0 + 1 < p.H ? v0 + 1 : v0;
    const float fu = u - (float)u0, fv = v - (float)v0;
    for (int k = 0; k < 3; ++k) {
      const float top = color[3 * (v0 * p.W + u0) + k] * (1.f - fu) + color[3 * (v0 * p.W + u1) + k] * fu;
      const float bot = color[3 * (v1 * p.W + u0) + k] * (1.f - fu) + color[3 * (v1 * p.W + u1) + k] * fu;
      out_color[3 * o + k] = top * (1.f - fv) + bot * fv;
    }
  } else {
    for (int k = 0; k < 3; ++k) out_color[3 * o + k] = color[3 * o + k];
  }
  out_depth[o] = 0.f;
  if (!unroll_source(p, p.depth_offset, p.depth_readout, x, y, us, vs, nx, ny, tau)) return;
  const float ur = rintf(us), vr = rintf(vs);
  if (!(ur >= 0.f && ur <= (float)(p.W - 1) && vr >= 0.f && vr <= (float)(p.H - 1))) return;
  const float z = depth[(int64_t)vr * p.W + (int64_t)ur];
  if (!(z > 0.f)) return;
  float px = nx * z, py = ny * z, pz = z;   // the recorded point, in its row's camera
  rotate_by_rate(p, tau, px, py, pz);       // ... in the middle row's camera
  out_depth[o] = pz;
}

}  // namespace sr
