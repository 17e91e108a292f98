// Per-sphere and per-pixel math of the fused Gauss-Newton kernel (rasterizer/gauss_newton.py has
// the model), shared by the CPU (gn_cpu.cpp) and CUDA (gn_cuda.cu) kernels like sphere_math.h:
//   per sphere, once:    pose_jacobian  (d(u, v, z, ia, ic) / d pose, closed form)
//   per (pixel, sphere): eval_alpha (sphere_math.h), then gn_blend: the render's front-to-back
//                        step plus forward-mode derivatives of T, colour and sum(w z)
//   per pixel:           gn_pixel_values: residuals, Huber weights, Jacobian rows and this
//                        pixel's share of H = J^T W J, g = J^T W r, cost and the statistics.
// Pose parameters theta = (w (3, rad), t (3, m)) act on camera-frame points as
// X' = R(w) (X - p) + p + t with p = (0, 0, pivot_z); at theta = 0: dX/dw = -[X - p]_x, dX/dt = I.
// The primal arithmetic (colour, depth, residuals, cost) rounds every product on its own (mul_rn):
// nvcc would otherwise fuse multiply-adds differently in the derivative and the cost-only
// variants (e.g. gain * C is reused by the exposure row in one of them only), and an LM trial's
// cost (cost-only) must compare with the full pass's cost bit for bit. The host build does not
// fuse at all (-ffp-contract=off), so there mul_rn is a plain product.
#pragma once

#include "sphere_math.h"

namespace sr {

constexpr int kGnPose = 6;    // pose parameters (rotation x y z, translation x y z)
constexpr int kGnParams = 8;  // + log gain, bias
// Packed result (float64): upper triangle of H (8x8, row-major: (0,0) (0,1) .. (0,7) (1,1) ..),
// g (8), cost, l1, then the counts (valid, covered, depth inliers, colour inliers).
constexpr int kGnTri = kGnParams * (kGnParams + 1) / 2;  // 36
constexpr int kGnG = kGnTri;                              // 36..43
constexpr int kGnCost = kGnG + kGnParams;                 // 44
constexpr int kGnL1 = kGnCost + 1;                        // 45
constexpr int kGnValid = kGnL1 + 1;                       // 46
constexpr int kGnCovered = kGnValid + 1;                  // 47
constexpr int kGnDepthIn = kGnCovered + 1;                // 48
constexpr int kGnColorIn = kGnDepthIn + 1;                // 49
constexpr int kGnValues = kGnColorIn + 1;                 // 50

// Index of H(i, j), i <= j, in the packed upper triangle.
SR_HD constexpr int gn_tri(int i, int j) { return i * kGnParams - i * (i - 1) / 2 + (j - i); }

// Closed-form derivatives of one sphere's projection with respect to the 6 pose parameters at
// theta = 0 (64 bytes: CUDA loads it with four 128-bit loads).
//   du[k], dv[k]: centre (px per rad or m); du[4] = dv[3] = 0.
//   z: dz = (dz0, dz1, 0, 0, 0, 1) with dz0 = y, dz1 = -x (rotations about x and y move z).
//   inverse variances: d ia = dia * dz, d ic = dic * dz (they depend on z only).
struct alignas(16) PoseJac {
  float du[kGnPose];
  float dv[kGnPose];
  float dz0, dz1, dia, dic;
};

// Pixel motion (du, dv, px) and depth change (dz, m) per unit of pose parameter k of the
// camera-frame point z (xn, yn, 1) (xn = x / z, yn = y / z), for X' = X + e_k x (X - p) (k < 3)
// or X + e_(k-3) (translations), p = (0, 0, pivot_z): u = fx x / z + cx, v = fy y / z + cy.
// The one statement of these formulas: spheres (pose_jacobian) and observed pixels (the
// observation rows of gn_pixel_values) use it.
SR_HD void point_motion(float xn, float yn, float z, float pivot_z, float fx, float fy, int k,
                        float& du, float& dv, float& dz) {
  const float iz = 1.0f / z, rz = (z - pivot_z) * iz;
  switch (k) {
    case 0: du = -fx * xn * yn; dv = -fy * (rz + yn * yn); dz = yn * z; break;
    case 1: du = fx * (rz + xn * xn); dv = fy * xn * yn; dz = -xn * z; break;
    case 2: du = -fx * yn; dv = fy * xn; dz = 0.f; break;
    case 3: du = fx * iz; dv = 0.f; dz = 0.f; break;
    case 4: du = 0.f; dv = fy * iz; dz = 0.f; break;
    default: du = -fx * xn * iz; dv = -fy * yn * iz; dz = 1.f; break;
  }
}

// For a sphere that projects (kNear < z <= kFar), with s its splat from project_sphere.
SR_HD PoseJac pose_jacobian(float x, float y, float z, float r, float pivot_z, const Camera& cam,
                            const Splat& s) {
  const float iz = 1.0f / z;
  const float xn = x * iz, yn = y * iz;
  PoseJac J;
  float dz;
#pragma unroll
  for (int k = 0; k < kGnPose; ++k)
    point_motion(xn, yn, z, pivot_z, cam.fx, cam.fy, k, J.du[k], J.dv[k], dz);
  J.dz0 = y;   // point_motion's dz for k = 0, 1 (yn z, -xn z), kept exact
  J.dz1 = -x;
  // ia = 1 / (fx^2 r^2 / z^2 + kLowPass): d ia / dz = 2 ia^2 fx^2 r^2 / z^3
  const float s2 = (r * iz) * (r * iz);
  J.dia = 2.0f * s.ia * s.ia * cam.fx * cam.fx * s2 * iz;
  J.dic = 2.0f * s.ic * s.ic * cam.fy * cam.fy * s2 * iz;
  return J;
}

// One pixel's compositing state: transmittance T, colour C, accumulated depth D = sum w z, and
// (DERIV) their derivatives with respect to the 6 pose parameters (dC[3 * k + channel]).
struct GnState {
  float T, C[3], D;
  float dT[kGnPose], dC[3 * kGnPose], dD[kGnPose];
};

template <bool DERIV>
SR_HD void gn_state_init(GnState& s) {
  s.T = 1.f;
  s.C[0] = s.C[1] = s.C[2] = 0.f;
  s.D = 0.f;
  if (DERIV) {
#pragma unroll
    for (int k = 0; k < kGnPose; ++k) {
      s.dT[k] = 0.f;
      s.dD[k] = 0.f;
      s.dC[3 * k] = s.dC[3 * k + 1] = s.dC[3 * k + 2] = 0.f;
    }
  }
}

// Front-to-back step for a sphere that passed eval_alpha (a, G, du, dv from it): blend_step's,
// which returns false when the pixel stops here (the sphere is not blended). T_front: the
// transmittance in front of the state's first sphere when the state composites a later part of
// the list from T = 1 (gn_combine joins the parts); 1 otherwise. Derivatives:
// q = du^2 ia + dv^2 ic with du = px - u, so dq = -2 du ia d u - 2 dv ic d v + du^2 d ia +
// dv^2 d ic; a = o exp(-q/2) gives da = -a/2 dq, except where o G > kAlphaMax (clamped: 0);
// w = a T: dw = da T + a dT; T' = T (1 - a): dT' = dT (1 - a) - T da; dC += dw c;
// d(sum w z) += dw z + w dz.
template <bool DERIV>
SR_HD bool gn_blend(GnState& s, const Splat& sp, const PoseJac& J, float o, float a, float G,
                    float du, float dv, float c0, float c1, float c2, float z,
                    float T_front = 1.0f) {
  const float T0 = s.T;
  float w;
  if (!blend_step(a, s.T, w, T_front)) return false;
  s.C[0] += mul_rn(w, c0);
  s.C[1] += mul_rn(w, c1);
  s.C[2] += mul_rn(w, c2);
  s.D += mul_rn(w, z);
  if (DERIV) {
    float A = 0.f, B = 0.f, Z = 0.f;  // da_k = A du_k + B dv_k + Z dz_k
    if (!(o * G > kAlphaMax)) {
      const float h = -0.5f * a;
      A = -2.0f * h * du * sp.ia;  // h * dq/du_k
      B = -2.0f * h * dv * sp.ic;
      Z = h * (du * du * J.dia + dv * dv * J.dic);
    }
    const float om = 1.0f - a;
#pragma unroll
    for (int k = 0; k < kGnPose; ++k) {
      const float dzk = k == 0 ? J.dz0 : k == 1 ? J.dz1 : k == 5 ? 1.0f : 0.0f;
      const float da = A * J.du[k] + B * J.dv[k] + Z * dzk;
      const float dw = da * T0 + a * s.dT[k];
      s.dT[k] = s.dT[k] * om - T0 * da;
      s.dC[3 * k] += dw * c0;
      s.dC[3 * k + 1] += dw * c1;
      s.dC[3 * k + 2] += dw * c2;
      s.dD[k] += dw * z + w * dzk;
    }
  }
  return true;
}

// Joins two consecutive parts of a pixel's front-to-back list: `front` composited from the
// pixel's start, `back` from T = 1 (dT = 0) over the spheres after front's (a part cut off where
// the pixel stops, see gn_blend's T_front). Compositing is associative: with A = front, B = back,
// T = T_A T_B, C = C_A + T_A C_B, D = D_A + T_A D_B, and their derivatives by the product rule
// (dC = dC_A + dT_A C_B + T_A dC_B, ...). Equal to compositing the spheres one by one up to float
// rounding; the primal products are rounded singly (mul_rn) as everywhere, so a variant without
// derivatives gives the same primal values bit for bit.
template <bool DERIV>
SR_HD void gn_combine(GnState& front, const GnState& back) {
  const float TA = front.T;
#pragma unroll
  for (int c = 0; c < 3; ++c) front.C[c] += mul_rn(TA, back.C[c]);
  front.D += mul_rn(TA, back.D);
  if (DERIV) {
#pragma unroll
    for (int k = 0; k < kGnPose; ++k) {
      const float dTA = front.dT[k];
#pragma unroll
      for (int c = 0; c < 3; ++c)
        front.dC[3 * k + c] += dTA * back.C[c] + TA * back.dC[3 * k + c];
      front.dD[k] += dTA * back.D + TA * back.dD[k];
      front.dT[k] = dTA * back.T + TA * back.dT[k];
    }
  }
  front.T = mul_rn(TA, back.T);
}

// Residual and statistics settings (host values; rasterizer/gauss_newton.py documents them).
struct GnSettings {
  float gain, bias, depth_weight;
  float huber[4];  // Huber thresholds of the residual channels (colour x3, depth x depth_weight)
  float alpha_threshold, noise_floor, noise_quad, color_tol, depth_eps, pivot_z;
  bool exposure;
  float obs_weight;  // weight of the observed image's gradients in the pose rows (0: exact only)
};

constexpr int kGnSettings = 15;  // the host list: the fields above in order, exposure as 0/1

inline GnSettings make_gn_settings(const double* s) {
  GnSettings g;
  g.gain = (float)s[0];
  g.bias = (float)s[1];
  g.depth_weight = (float)s[2];
  for (int c = 0; c < 4; ++c) g.huber[c] = (float)s[3 + c];
  g.alpha_threshold = (float)s[7];
  g.noise_floor = (float)s[8];
  g.noise_quad = (float)s[9];
  g.color_tol = (float)s[10];
  g.depth_eps = (float)s[11];
  g.pivot_z = (float)s[12];
  g.exposure = s[13] != 0.0;
  g.obs_weight = (float)s[14];
  return g;
}

// The observed frame's spatial gradients at pixel (px, py), for the pose rows' observation term:
// per channel (colour x3, depth) d/du and d/dv by central differences over the neighbours with
// valid depth (d > 0) inside the image, one-sided where only one of an axis' two is, and the
// pixel's normalised coordinates and depth. ok = false (no observation term at this pixel) when
// the pixel's depth is not valid or an axis has no usable neighbour.
struct ObsGradient {
  float gu[4], gv[4];
  float xn, yn, z;
  bool ok;
};

SR_HD ObsGradient obs_gradient(const float* color, const float* depth, int px, int py,
                               const Camera& cam) {
  ObsGradient og;
  og.ok = false;
  const int W = cam.width, H = cam.height;
  const int64_t p = (int64_t)py * W + px;
  og.z = depth[p];
  if (!(og.z > 0.f)) return og;
  og.xn = ((float)px - cam.cx) / cam.fx;
  og.yn = ((float)py - cam.cy) / cam.fy;
  // axis 0: u (stride 1), axis 1: v (stride W)
  for (int axis = 0; axis < 2; ++axis) {
    const int pos = axis == 0 ? px : py, size = axis == 0 ? W : H;
    const int64_t step = axis == 0 ? 1 : W;
    const bool lo = pos > 0 && depth[p - step] > 0.f;
    const bool hi = pos + 1 < size && depth[p + step] > 0.f;
    if (!lo && !hi) return og;
    const int64_t a = lo ? p - step : p, b = hi ? p + step : p;
    const float scale = (lo && hi) ? 0.5f : 1.0f;
    float* g = axis == 0 ? og.gu : og.gv;
#pragma unroll
    for (int c = 0; c < 3; ++c) g[c] = scale * (color[3 * b + c] - color[3 * a + c]);
    g[3] = scale * (depth[b] - depth[a]);
  }
  og.ok = true;
  return og;
}

// Adds w * (J J^T, J r, r^2) of one residual channel into v (J: 8 values).
SR_HD void gn_add_channel(const float* J, float r, float w, float* v) {
#pragma unroll
  for (int i = 0; i < kGnParams; ++i) {
    const float wj = w * J[i];
    v[kGnG + i] += wj * r;
#pragma unroll
    for (int j = i; j < kGnParams; ++j) v[gn_tri(i, j)] += wj * J[j];
  }
}

// One pixel's share of the packed result, written into v[0 .. kGnValues) (all of it). The
// pixel counts where `valid` and alpha = 1 - T > alpha_threshold (covered). Residuals, as the
// tracker's: colour r_c = (bias + gain C_out) - obs_c with C_out = C + T bg; depth
// r_d = depth_weight D_out - depth_weight obs_d with D_out = D / max(alpha, eps). Huber IRLS
// weights w = k / max(|r|, k) per channel. Jacobian rows: colour gain dC_out (pose), gain C_out
// (log gain), 1 (bias); depth depth_weight dD_out (pose), 0 (exposure); with
// dC_out = dC + dT bg and dD_out = (dD + D_out dT) / alpha (alpha >= eps; dD / eps below).
template <bool DERIV>
SR_HD void gn_pixel_values(const GnState& s, const GnSettings& st, bool valid, float bg0,
                           float bg1, float bg2, float obs0, float obs1, float obs2, float obs_d,
                           const ObsGradient& og, float fx, float fy, float* v) {
#pragma unroll
  for (int i = 0; i < kGnValues; ++i) v[i] = 0.f;
  v[kGnValid] = valid ? 1.f : 0.f;
  const float alpha = 1.f - s.T;
  if (!valid || !(alpha > st.alpha_threshold)) return;
  v[kGnCovered] = 1.f;
  const float bg[3] = {bg0, bg1, bg2};
  const float obs[3] = {obs0, obs1, obs2};
  float col[3], r[4], w[4];
#pragma unroll
  for (int c = 0; c < 3; ++c) {
    col[c] = s.C[c] + mul_rn(s.T, bg[c]);
    r[c] = (st.bias + mul_rn(col[c], st.gain)) - obs[c];
  }
  const float den = depth_denominator(alpha, st.depth_eps);
  const float depth = s.D / den;
  r[3] = mul_rn(depth, st.depth_weight) - mul_rn(obs_d, st.depth_weight);
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const float ar = fabsf(r[c]);
    w[c] = st.huber[c] / fmaxf(ar, st.huber[c]);
    v[kGnCost] += mul_rn(mul_rn(w[c], r[c]), r[c]);
    v[kGnL1] += ar;
  }
  const float depth_tol = st.noise_floor + mul_rn(mul_rn(st.noise_quad, obs_d), obs_d);
  v[kGnDepthIn] = fabsf(depth - obs_d) <= depth_tol ? 1.f : 0.f;
  v[kGnColorIn] = (fabsf(r[0]) + fabsf(r[1]) + fabsf(r[2])) / 3.0f <= st.color_tol ? 1.f : 0.f;
  if (DERIV) {
    // Pose rows: (1 - b) x the render's exact derivative + b x the observation's (b = obs_weight
    // where og is usable): at the optimum the render matches the observed frame, so moving the
    // camera shifts it as it shifts the observation, r(u) -> r(u) - grad obs . du (+ dz for the
    // depth): an ESM-style blend of the Jacobians at the current pose and at the solution.
    // point_motion is evaluated where it is used, per channel: holding the 18 motions across the
    // colour loop instead costs 8 registers (120 -> 128 on sm_90, this machine's nvcc).
    const float b = og.ok ? st.obs_weight : 0.f, e = 1.0f - b;
    float J[kGnParams];
#pragma unroll
    for (int c = 0; c < 3; ++c) {
#pragma unroll
      for (int k = 0; k < kGnPose; ++k) {
        J[k] = e * (st.gain * (s.dC[3 * k + c] + s.dT[k] * bg[c]));
        if (b > 0.f) {
          float du, dv, dz;
          point_motion(og.xn, og.yn, og.z, st.pivot_z, fx, fy, k, du, dv, dz);
          J[k] -= b * (og.gu[c] * du + og.gv[c] * dv);
        }
      }
      J[6] = st.exposure ? st.gain * col[c] : 0.f;
      J[7] = st.exposure ? 1.f : 0.f;
      gn_add_channel(J, r[c], w[c], v);
    }
    const float dscale = alpha < st.depth_eps ? 0.f : depth;  // the clamped denominator is constant
#pragma unroll
    for (int k = 0; k < kGnPose; ++k) {
      J[k] = e * (st.depth_weight * ((s.dD[k] + dscale * s.dT[k]) / den));
      if (b > 0.f) {
        float du, dv, dz;
        point_motion(og.xn, og.yn, og.z, st.pivot_z, fx, fy, k, du, dv, dz);
        J[k] += b * st.depth_weight * (dz - (og.gu[3] * du + og.gv[3] * dv));
      }
    }
    J[6] = J[7] = 0.f;
    gn_add_channel(J, r[3], w[3], v);
  }
}

}  // namespace sr
