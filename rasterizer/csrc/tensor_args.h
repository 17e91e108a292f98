// Host-side argument checks shared by the CPU (raster_cpu.cpp, gn_cpu.cpp, adam_cpu.cpp,
// activation_cpu.cpp, frame_cpu.cpp) and CUDA (raster_cuda.cu, gn_cuda.cu, adam_cuda.cu,
// activation_cuda.cu, frame_cuda.cu) kernels of an op, which take the same arguments (the op's
// schema, in its *_cpu.cpp).
// Host only (ATen): the CUDA sources include it in host code of their .cu files.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "adam_math.h"
#include "frame_math.h"
#include "gn_math.h"
#include "lm_math.h"
#include "loss_math.h"
#include "sphere_math.h"

namespace sr {

// A float32 contiguous input on the kernel's device; cols > 0: shape (N, cols).
inline void check_input(const at::Tensor& t, const char* name, bool cuda, int64_t cols = 0) {
  TORCH_CHECK(t.is_cuda() == cuda, name, cuda ? " must be a CUDA tensor" : " must be a CPU tensor");
  TORCH_CHECK(t.scalar_type() == at::kFloat, name, " must be float32");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  if (cols > 0)
    TORCH_CHECK(t.dim() == 2 && t.size(1) == cols, name, " must have shape (N, ", cols, ")");
}

// The output gradients as the kernels read them (strided; an empty tensor: no gradient, read as 0).
inline GradImages grad_images(const at::Tensor& g_color, const at::Tensor& g_depth,
                              const at::Tensor& g_alpha, int64_t width, int64_t height,
                              bool cuda) {
  auto ptr = [&](const at::Tensor& g, const char* name, bool rgb) -> const float* {
    if (!g.defined() || g.numel() == 0) return nullptr;
    TORCH_CHECK(g.is_cuda() == cuda && g.scalar_type() == at::kFloat, "gradient of ", name,
                " must be float32 on the kernel's device");
    TORCH_CHECK(rgb ? (g.dim() == 3 && g.size(0) == height && g.size(1) == width && g.size(2) == 3)
                    : (g.dim() == 2 && g.size(0) == height && g.size(1) == width),
                "gradient of ", name, " has the wrong shape");
    return g.data_ptr<float>();
  };
  GradImages gi{ptr(g_color, "color", true), ptr(g_depth, "depth", false),
                ptr(g_alpha, "alpha", false), 0, 0, 0, 0, 0, 0, 0};
  if (gi.color != nullptr) {
    gi.c_sy = g_color.stride(0);
    gi.c_sx = g_color.stride(1);
    gi.c_sc = g_color.stride(2);
  }
  if (gi.depth != nullptr) {
    gi.d_sy = g_depth.stride(0);
    gi.d_sx = g_depth.stride(1);
  }
  if (gi.alpha != nullptr) {
    gi.a_sy = g_alpha.stride(0);
    gi.a_sx = g_alpha.stride(1);
  }
  return gi;
}

// The observed frame of the Gauss-Newton kernel: colour (H, W, 3) and depth (H, W) float32, the
// mask (H, W) bool, all contiguous on the kernel's device.
inline void check_observation(const at::Tensor& color, const at::Tensor& depth,
                              const at::Tensor& valid, int64_t width, int64_t height, bool cuda) {
  check_input(color, "obs_color", cuda);
  check_input(depth, "obs_depth", cuda);
  TORCH_CHECK(color.dim() == 3 && color.size(0) == height && color.size(1) == width &&
                  color.size(2) == 3,
              "obs_color must have shape (height, width, 3)");
  TORCH_CHECK(depth.dim() == 2 && depth.size(0) == height && depth.size(1) == width,
              "obs_depth must have shape (height, width)");
  TORCH_CHECK(valid.is_cuda() == cuda && valid.scalar_type() == at::kBool &&
                  valid.is_contiguous() && valid.dim() == 2 && valid.size(0) == height &&
                  valid.size(1) == width,
              "valid must be a contiguous (height, width) bool tensor on the kernel's device");
}

// The arguments of the Gauss-Newton pass (rasterizer/gauss_newton.py) as both kernels take them:
// spheres (N, 3) / (N,) / (N, 3) / (N,), background (3,), the observed frame and kGnSettings
// settings. Returns the kernels' settings (depth_eps > 0 checked).
inline GnSettings check_gauss_newton_args(const at::Tensor& means, const at::Tensor& radii,
                                          const at::Tensor& colors, const at::Tensor& opacities,
                                          const at::Tensor& background, const at::Tensor& obs_color,
                                          const at::Tensor& obs_depth, const at::Tensor& valid,
                                          int64_t width, int64_t height,
                                          c10::ArrayRef<double> settings, bool cuda) {
  check_input(means, "means", cuda, 3);
  check_input(colors, "colors", cuda, 3);
  check_input(radii, "radii", cuda);
  check_input(opacities, "opacities", cuda);
  check_input(background, "background", cuda);
  TORCH_CHECK(background.numel() == 3, "background must have 3 values");
  check_observation(obs_color, obs_depth, valid, width, height, cuda);
  TORCH_CHECK((int)settings.size() == kGnSettings, "settings must have ", kGnSettings, " values");
  const GnSettings st = make_gn_settings(settings.data());
  TORCH_CHECK(st.depth_eps > 0.f, "depth_eps must be > 0");
  return st;
}

// An LM state (lm_math.h): (kLmSize,) contiguous float64 on the device of `like`.
inline void check_lm_state(const at::Tensor& state, const at::Tensor& like, bool cuda) {
  TORCH_CHECK(state.is_cuda() == cuda, cuda ? "state must be a CUDA tensor" : "state must be a CPU tensor");
  TORCH_CHECK(state.scalar_type() == at::kDouble && state.is_contiguous() && state.dim() == 1 &&
                  state.numel() == kLmSize,
              "state must be a contiguous float64 tensor of ", kLmSize, " values");
  TORCH_CHECK(state.device() == like.device(), "state is on ", state.device(), " but the spheres on ",
              like.device());
}

// The device LM's evaluation arguments beyond the pass's own: the state, the pyramid level whose
// pair count it records, and the room for pairs (capped binning: below 2^31).
inline void check_lm_evaluation(const at::Tensor& state, const at::Tensor& means, int64_t level,
                                int64_t capacity, bool cuda) {
  check_lm_state(state, means, cuda);
  TORCH_CHECK(level >= 0 && level < kLmMaxLevels, "level must be in [0, ", kLmMaxLevels, "), got ",
              level);
  TORCH_CHECK(capacity > 0 && capacity < (1ll << 31), "capacity must be in [1, 2^31), got ",
              capacity);
}

// LM phases (lm_math.h LmPhase, 1 to kLmMaxPhases of them, applied in order).
inline LmPhases check_lm_phases(c10::ArrayRef<int64_t> phases) {
  TORCH_CHECK(!phases.empty() && (int)phases.size() <= kLmMaxPhases, "1 to ", kLmMaxPhases,
              " LM phases per call, got ", phases.size());
  LmPhases p{(int)phases.size(), {0, 0, 0, 0}};
  for (int i = 0; i < p.n; ++i) {
    TORCH_CHECK(phases[i] >= kLmBegin && phases[i] <= kLmAccept, "unknown LM phase ", phases[i]);
    p.phase[i] = (int)phases[i];
  }
  return p;
}

// The LM phases' kLmSettings settings.
inline LmSettings check_lm_settings(c10::ArrayRef<double> settings) {
  TORCH_CHECK((int)settings.size() == kLmSettings, "LM settings must have ", kLmSettings, " values");
  const LmSettings c = make_lm_settings(settings.data());
  TORCH_CHECK(c.attempts >= 1 && c.damping > 0.0 && c.damping_up > 1.0 && c.damping_down > 0.0,
              "LM settings: attempts >= 1, damping > 0, damping_up > 1, damping_down > 0");
  return c;
}

// The packed-row Adam update: params, exp_avg, exp_avg_sq, grad (N, kAdamCols), steps (N,),
// lr (kAdamCols,), float32 contiguous on the kernel's device.
inline void check_adam_args(const at::Tensor& params, const at::Tensor& exp_avg,
                            const at::Tensor& exp_avg_sq, const at::Tensor& steps,
                            const at::Tensor& grad, const at::Tensor& lr, bool cuda) {
  check_input(params, "params", cuda, kAdamCols);
  const int64_t n = params.size(0);
  check_input(exp_avg, "exp_avg", cuda, kAdamCols);
  check_input(exp_avg_sq, "exp_avg_sq", cuda, kAdamCols);
  check_input(grad, "grad", cuda, kAdamCols);
  check_input(steps, "steps", cuda);
  check_input(lr, "lr", cuda);
  TORCH_CHECK(exp_avg.size(0) == n && exp_avg_sq.size(0) == n && grad.size(0) == n,
              "exp_avg, exp_avg_sq and grad must have params' rows");
  TORCH_CHECK(steps.dim() == 1 && steps.size(0) == n, "steps must be (N,)");
  TORCH_CHECK(lr.dim() == 1 && lr.size(0) == kAdamCols, "lr must have one entry per column");
}

// The map's parametrisation's backward (activation_*.cpp / .cu): the forward's outputs radii (N,),
// colors (N, 3), opacities (N,) checked, and each output's gradient as the kernels read it: nullptr
// when empty (no gradient: read as 0), else checked against its output's shape.
struct ActivationGrads {
  const float *means, *radii, *colors, *opacities;
};

inline const float* optional_grad(const at::Tensor& g, const at::Tensor& like, const char* name,
                                  bool cuda) {
  if (!g.defined() || g.numel() == 0) return nullptr;
  check_input(g, name, cuda);
  TORCH_CHECK(g.sizes() == like.sizes(), name, " must have the shape of its output");
  return g.data_ptr<float>();
}

inline ActivationGrads activation_grads(const at::Tensor& g_means, const at::Tensor& g_radii,
                                        const at::Tensor& g_colors, const at::Tensor& g_opacities,
                                        const at::Tensor& radii, const at::Tensor& colors,
                                        const at::Tensor& opacities, bool cuda) {
  check_input(radii, "radii", cuda);
  const int64_t n = radii.size(0);
  check_input(colors, "colors", cuda, 3);
  check_input(opacities, "opacities", cuda);
  TORCH_CHECK(radii.dim() == 1 && opacities.dim() == 1 && colors.size(0) == n && opacities.size(0) == n,
              "radii (N,), colors (N, 3) and opacities (N,) must have the same rows");
  return {optional_grad(g_means, colors, "g_means", cuda),   // (N, 3), as the colours
          optional_grad(g_radii, radii, "g_radii", cuda), optional_grad(g_colors, colors, "g_colors", cuda),
          optional_grad(g_opacities, opacities, "g_opacities", cuda)};
}

// The activation's pose: an empty tensor (none: null) or a (4, 4) float32 contiguous matrix on
// the kernel's device (its first three rows are read).
inline const float* optional_pose(const at::Tensor& T, bool cuda) {
  if (!T.defined() || T.numel() == 0) return nullptr;
  check_input(T, "T_cw", cuda);
  TORCH_CHECK(T.dim() == 2 && T.size(0) == 4 && T.size(1) == 4, "T_cw must be (4, 4)");
  return T.data_ptr<float>();
}

// A frame to downsample: colour (H, W, 3) and depth (H, W) float32, contiguous, on the kernel's
// device; 1 <= factor <= kMaxDownsample.
inline void check_images(const at::Tensor& color, const at::Tensor& depth, int64_t factor,
                         bool cuda) {
  check_input(color, "color", cuda);
  check_input(depth, "depth", cuda);
  TORCH_CHECK(depth.dim() == 2, "depth must be (H, W)");
  TORCH_CHECK(color.dim() == 3 && color.size(0) == depth.size(0) &&
                  color.size(1) == depth.size(1) && color.size(2) == 3,
              "color must be (H, W, 3) with depth's H and W");
  TORCH_CHECK(factor >= 1 && factor <= kMaxDownsample, "factor must be in [1, ", kMaxDownsample,
              "], got ", factor);
}

// A compact frame to unpack: colour (H, W, 3) uint8 and depth (H, W) float32 or float16,
// contiguous, on the kernel's device.
inline void check_compact_frame(const at::Tensor& color, const at::Tensor& depth, bool cuda) {
  TORCH_CHECK(color.is_cuda() == cuda && depth.is_cuda() == cuda,
              cuda ? "color and depth must be CUDA tensors" : "color and depth must be CPU tensors");
  TORCH_CHECK(color.scalar_type() == at::kByte, "color must be uint8");
  TORCH_CHECK(depth.scalar_type() == at::kFloat || depth.scalar_type() == at::kHalf,
              "depth must be float32 or float16");
  TORCH_CHECK(color.is_contiguous() && depth.is_contiguous(), "color and depth must be contiguous");
  TORCH_CHECK(depth.dim() == 2, "depth must be (H, W)");
  TORCH_CHECK(color.dim() == 3 && color.size(0) == depth.size(0) &&
                  color.size(1) == depth.size(1) && color.size(2) == 3,
              "color must be (H, W, 3) with depth's H and W");
}

inline void check_depth_image(const at::Tensor& depth, bool cuda) {
  check_input(depth, "depth", cuda);
  TORCH_CHECK(depth.dim() == 2, "depth must be (H, W)");
}

// The unroll's images and its 10 params (fx, fy, cx, cy, wx, wy, wz, colour readout, depth
// readout, depth offset).
inline UnrollParams check_unroll_args(const at::Tensor& color, const at::Tensor& depth,
                                      c10::ArrayRef<double> q, bool cuda) {
  check_images(color, depth, 1, cuda);
  TORCH_CHECK(q.size() == 10,
              "unroll takes 10 params (fx, fy, cx, cy, wx, wy, wz, colour readout, depth readout, "
              "depth offset), got ", q.size());
  TORCH_CHECK(q[0] > 0 && q[1] > 0, "fx and fy must be > 0");
  return UnrollParams{(float)q[0], (float)q[1], (float)q[2], (float)q[3], (float)q[4],
                      (float)q[5], (float)q[6], (float)q[7], (float)q[8], (float)q[9],
                      depth.size(0), depth.size(1)};
}

// The render loss's images: a render's colour (H, W, 3) and depth (H, W), the observation's the
// same, the masks valid and depth_ok (H, W) bool, all contiguous on the kernel's device.
inline void check_loss_images(const at::Tensor& color, const at::Tensor& depth, const at::Tensor& obs_color,
                              const at::Tensor& obs_depth, const at::Tensor& valid,
                              const at::Tensor& depth_ok, bool cuda) {
  check_images(color, depth, 1, cuda);
  check_images(obs_color, obs_depth, 1, cuda);
  TORCH_CHECK(obs_depth.sizes() == depth.sizes(), "the observation must have the render's size");
  for (const at::Tensor* m : {&valid, &depth_ok}) {
    TORCH_CHECK(m->is_cuda() == cuda && m->scalar_type() == at::kBool && m->is_contiguous() &&
                    m->sizes() == depth.sizes(),
                "valid and depth_ok must be contiguous (H, W) bool on the kernel's device");
  }
}

// The loss's totals (kLossTotals,) float64 and its gradient, a float32 scalar, on the kernel's
// device.
inline void check_loss_backward(const at::Tensor& totals, const at::Tensor& grad, bool cuda) {
  TORCH_CHECK(totals.is_cuda() == cuda && totals.scalar_type() == at::kDouble && totals.is_contiguous() &&
                  totals.numel() == kLossTotals,
              "totals must be ", kLossTotals, " contiguous float64 values on the kernel's device");
  TORCH_CHECK(grad.is_cuda() == cuda && grad.scalar_type() == at::kFloat && grad.numel() == 1,
              "the loss's gradient must be one float32 value on the kernel's device");
}

}  // namespace sr
