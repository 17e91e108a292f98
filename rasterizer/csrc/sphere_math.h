// Per-sphere and per-pixel math of the sphere rasterizer, shared by the CPU (C++/OpenMP) and
// CUDA kernels. Every function here is __host__ __device__ under nvcc and plain inline otherwise
// (make_camera: host only), so both backends evaluate exactly the same model (see
// rasterizer/__init__.py for the maths) and take their gradients the same way:
//   forward:  project_sphere -> tile_rect (binning) -> per pixel eval_alpha + blend_step, then
//             normalise_depth;
//   backward: per pixel normalise_depth_backward, then unblend_step + alpha_backward per
//             (pixel, sphere), splat-space gradients summed per sphere, then project_backward
//             once per sphere.
// The host build uses -ffp-contract=off (rasterizer/_build.py): no fused multiply-adds, so an
// expression gives the same bits wherever it is inlined.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define SR_HD __host__ __device__ __forceinline__
#else
#define SR_HD inline
#endif

namespace sr {

// Model constants. rasterizer/_model.py holds the same numbers (a test compares them).
constexpr float kNear = 0.01f;        // cull z <= kNear (metres)
constexpr float kFar = 100.0f;        // cull z > kFar (metres)
constexpr float kLowPass = 0.3f;      // px^2 added to the screen-space variance per axis
constexpr float kAlphaMax = 0.99f;    // a_i = min(kAlphaMax, o_i * G)
constexpr float kAlphaMin = 1.0f / 255.0f;  // skip a_i < kAlphaMin
constexpr float kTMin = 1e-4f;        // stop before transmittance would drop to <= kTMin
constexpr float kCutoffQ = 9.0f;      // skip pixels outside the 3-sigma ellipse (q > 9)
constexpr int kTile = 16;             // tile side in pixels (the renders; at most this anywhere)
constexpr int kTilePixels = kTile * kTile;

// The image and its tiling: `tile` x `tile` pixel tiles, row-major, tiles_x x tiles_y of them.
// A pixel's result does not depend on the tiling (the q > 9 cut-off), only the work does: the
// renders tile by kTile, the Gauss-Newton pass on CUDA by a smaller side (gn_cuda.cu).
struct Camera {
  float fx, fy, cx, cy;
  int width, height;
  int tile;
  int tiles_x, tiles_y;
};

// The kernels' camera from the Python arguments (intrinsics in px, image size in px) with tiles of
// `tile` px (<= kTile). Host only.
inline Camera make_camera(double fx, double fy, double cx, double cy, int64_t width,
                          int64_t height, int tile = kTile) {
  Camera cam;
  cam.fx = (float)fx;
  cam.fy = (float)fy;
  cam.cx = (float)cx;
  cam.cy = (float)cy;
  cam.width = (int)width;
  cam.height = (int)height;
  cam.tile = tile;
  cam.tiles_x = (int)((width + tile - 1) / tile);
  cam.tiles_y = (int)((height + tile - 1) / tile);
  return cam;
}

SR_HD float sr_exp(float x) {
#if defined(__CUDA_ARCH__)
  return __expf(x);
#else
  return std::exp(x);
#endif
}

// a * b rounded on its own: never fused into a neighbouring add (nvcc fuses by default; the host
// build does not, see the top of this file).
SR_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// Screen-space parameters of one sphere: centre (u, v) in px and inverse variances per axis.
struct Splat {
  float u, v, ia, ic;
};

// Projects a sphere (camera frame, metres). Returns false when culled by depth.
SR_HD bool project_sphere(float x, float y, float z, float r, const Camera& cam, Splat& s) {
  if (!(z > kNear) || !(z <= kFar)) return false;  // also rejects NaN
  const float iz = 1.0f / z;
  s.u = cam.fx * x * iz + cam.cx;
  s.v = cam.fy * y * iz + cam.cy;
  const float s2 = (r * iz) * (r * iz);
  s.ia = 1.0f / (cam.fx * cam.fx * s2 + kLowPass);
  s.ic = 1.0f / (cam.fy * cam.fy * s2 + kLowPass);
  return true;
}

// Top-left pixel (tile_x0, tile_y0) of tile `tile` (the camera's tiles, row-major over the image).
SR_HD int tile_x0(const Camera& cam, int tile) { return (tile % cam.tiles_x) * cam.tile; }
SR_HD int tile_y0(const Camera& cam, int tile) { return (tile / cam.tiles_x) * cam.tile; }

// Tile rectangle [tx0, tx1) x [ty0, ty1) covering every pixel centre within 3 sigma of the
// centre per axis (a box around the 3-sigma ellipse). Returns the tile count (0 = off-screen).
SR_HD int tile_rect(const Splat& s, const Camera& cam, int& tx0, int& tx1, int& ty0, int& ty1) {
  const float rx = 3.0f * sqrtf(1.0f / s.ia);
  const float ry = 3.0f * sqrtf(1.0f / s.ic);
  const float umin = fmaxf(s.u - rx, 0.0f), umax = fminf(s.u + rx, (float)(cam.width - 1));
  const float vmin = fmaxf(s.v - ry, 0.0f), vmax = fminf(s.v + ry, (float)(cam.height - 1));
  if (!(umin <= umax) || !(vmin <= vmax)) return 0;
  const int px0 = (int)ceilf(umin), px1 = (int)floorf(umax);
  const int py0 = (int)ceilf(vmin), py1 = (int)floorf(vmax);
  if (px0 > px1 || py0 > py1) return 0;  // no pixel centre inside the box
  tx0 = px0 / cam.tile;
  tx1 = px1 / cam.tile + 1;
  ty0 = py0 / cam.tile;
  ty1 = py1 / cam.tile + 1;
  return (tx1 - tx0) * (ty1 - ty0);
}

// Pixel rectangle [bx0, bx1) x [by0, by1) inside [x0, x1) x [y0, y1) that holds every pixel centre
// within 3 sigma per axis, widened by one pixel against rounding (eval_alpha stays the arbiter).
// Returns false when it is empty. Used by the CPU kernel to skip pixels a sphere cannot reach.
SR_HD bool pixel_box(const Splat& s, int x0, int x1, int y0, int y1, int& bx0, int& bx1, int& by0,
                     int& by1) {
  const float rx = 3.0f * sqrtf(1.0f / s.ia) + 1.0f;
  const float ry = 3.0f * sqrtf(1.0f / s.ic) + 1.0f;
  const float fx0 = fmaxf(s.u - rx, (float)x0), fx1 = fminf(s.u + rx, (float)(x1 - 1));
  const float fy0 = fmaxf(s.v - ry, (float)y0), fy1 = fminf(s.v + ry, (float)(y1 - 1));
  if (!(fx0 <= fx1) || !(fy0 <= fy1)) return false;
  bx0 = (int)ceilf(fx0);
  bx1 = (int)floorf(fx1) + 1;
  by0 = (int)ceilf(fy0);
  by1 = (int)floorf(fy1) + 1;
  return bx0 < bx1 && by0 < by1;
}

// Opacity of a splat at pixel centre (px, py). Returns false when the sphere does not contribute
// (outside the 3-sigma ellipse or a < kAlphaMin). G is the unclamped Gaussian value.
SR_HD bool eval_alpha(float px, float py, const Splat& s, float o, float& a, float& G, float& du,
                      float& dv) {
  du = px - s.u;
  dv = py - s.v;
  const float q = du * du * s.ia + dv * dv * s.ic;
  if (!(q <= kCutoffQ)) return false;
  G = sr_exp(-0.5f * q);
  a = fminf(kAlphaMax, o * G);
  return a >= kAlphaMin;
}

// Front-to-back step. Returns false when blending a would take T to <= kTMin: then the pixel is
// finished and this sphere is not blended. Otherwise returns the blend weight in w, updates T.
// T_front: when T composites a later part of a pixel's list from 1 (the Gauss-Newton pass walks a
// list in parts, gn_math.h), the pixel's transmittance in front of that part: the test is on the
// pixel's T_front * next T (x 1 is exact: the plain rule).
SR_HD bool blend_step(float a, float& T, float& w, float T_front = 1.0f) {
  const float next_T = T * (1.0f - a);
  if (mul_rn(T_front, next_T) <= kTMin) return false;
  w = a * T;
  T = next_T;
  return true;
}

// Back-to-front step of the backward pass. On entry T is the transmittance after this sphere and
// R = sum over later spheres j of (g.f_j) w_j + T_final * (gC.bg - gA). gf = gC.c + gD*z for this
// sphere. On exit T is the transmittance in front of this sphere, R includes it, and w is its
// blend weight. Returns dL/da.
SR_HD float unblend_step(float a, float gf, float& T, float& R, float& w) {
  const float inv = 1.0f / (1.0f - a);  // one reciprocal instead of two divisions
  T = T * inv;
  w = a * T;
  const float dLda = T * gf - R * inv;
  R += gf * w;
  return dLda;
}

// Expected depth of a pixel: depth = dacc / max(alpha, eps), dacc = sum_i w_i z_i. Bit for bit
// what `dacc / alpha.clamp_min(eps)` gives in PyTorch (also for a NaN alpha). dacc is 0 wherever
// nothing was blended, so depth is 0 where alpha <= eps.
SR_HD float depth_denominator(float alpha, float eps) { return alpha < eps ? eps : alpha; }

SR_HD float normalise_depth(float dacc, float alpha, float eps) {
  return dacc / depth_denominator(alpha, eps);
}

// Backward of normalise_depth at one pixel, as PyTorch's separate ops would compute it:
// g_dacc = g / max(alpha, eps) (returned), g_alpha += -(g_dacc * depth). has_ga: the alpha image got
// a gradient of its own (ga, updated); otherwise ga becomes exactly -(g_dacc * depth). Where
// alpha <= eps depth is 0, so nothing reaches alpha there.
SR_HD float normalise_depth_backward(float g, float alpha, float depth, float eps, bool has_ga,
                                     float& ga) {
  const float g_dacc = g / depth_denominator(alpha, eps);
  const float extra = mul_rn(g_dacc, depth);
  ga = has_ga ? ga - extra : -extra;  // ga - extra == ga + (-extra) exactly
  return g_dacc;
}

// The output gradients of a render as both backward kernels read them: through their strides
// (e.g. expanded from a sum: no contiguous copies), and a null pointer where that output got no
// gradient (read as 0).
struct GradImages {
  const float* color;  // (H, W, 3)
  const float* depth;  // (H, W), gradient of the normalised depth
  const float* alpha;  // (H, W)
  int64_t c_sy, c_sx, c_sc, d_sy, d_sx, a_sy, a_sx;
};

// Pixel (px, py)'s gradients as the compositing backward needs them: colour (gc0..2), accumulated
// depth (gd, through normalise_depth_backward) and alpha (ga, the normalisation's share included).
// alpha: the forward's alpha there; depth_img[p]: its normalised depth (read only when needed).
SR_HD void load_pixel_grads(const GradImages& gi, int px, int py, float alpha,
                            const float* depth_img, int64_t p, float eps, float& gc0, float& gc1,
                            float& gc2, float& gd, float& ga) {
  gc0 = gc1 = gc2 = gd = ga = 0.f;
  if (gi.color != nullptr) {
    const float* c = gi.color + py * gi.c_sy + px * gi.c_sx;
    gc0 = c[0];
    gc1 = c[gi.c_sc];
    gc2 = c[2 * gi.c_sc];
  }
  if (gi.alpha != nullptr) ga = gi.alpha[py * gi.a_sy + px * gi.a_sx];
  if (gi.depth != nullptr)
    gd = normalise_depth_backward(gi.depth[py * gi.d_sy + px * gi.d_sx], alpha, depth_img[p], eps,
                                  gi.alpha != nullptr, ga);
}

// Gradient of dL/da back to the splat: centre (gu, gv), s2 = (r/z)^2 (gs2), opacity (go). Both
// kernels sum these per sphere (with the direct depth gradient w * g_dacc and the colour
// gradient w * g_color) and then apply project_backward once per sphere.
struct SplatGrad {
  float gu, gv, gs2, go;
};

SR_HD SplatGrad alpha_backward(float dLda, float o, float G, float du, float dv, const Splat& s,
                               const Camera& cam) {
  SplatGrad g{0.f, 0.f, 0.f, 0.f};
  if (o * G > kAlphaMax) return g;  // clamped: no gradient
  g.go = dLda * G;
  const float t = dLda * o * G;  // dL/dG * G
  g.gu = t * du * s.ia;
  g.gv = t * dv * s.ic;
  g.gs2 = 0.5f * t *
          (du * du * s.ia * s.ia * cam.fx * cam.fx + dv * dv * s.ic * s.ic * cam.fy * cam.fy);
  return g;
}

// Chain rule from one sphere's summed splat gradients (gu, gv, gs2) and direct depth gradient gz
// to its camera-frame centre (gx, gy, gzo) and radius (gr). Only for spheres that project
// (kNear < z <= kFar).
SR_HD void project_backward(float x, float y, float z, float r, const Camera& cam, float gu,
                            float gv, float gs2, float gz, float& gx, float& gy, float& gzo,
                            float& gr) {
  const float iz = 1.0f / z;
  gx = gu * cam.fx * iz;
  gy = gv * cam.fy * iz;
  gzo = gz - (gu * cam.fx * x + gv * cam.fy * y) * iz * iz - gs2 * 2.0f * r * r * iz * iz * iz;
  gr = gs2 * 2.0f * r * iz * iz;
}

// Depth sort key: the IEEE bits of a positive float sort like the float. Culled spheres get the
// bits of +inf so they sort last.
SR_HD uint32_t depth_key(float z, bool visible) {
  if (!visible) return 0x7f800000u;
  union {
    float f;
    uint32_t u;
  } c;
  c.f = z;
  return c.u;
}

}  // namespace sr
