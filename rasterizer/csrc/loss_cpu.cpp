// CPU twin of the render loss kernels (loss_cuda.cu; the model is in rasterizer/loss.py, the
// per-pixel math in loss_math.h): rows in parallel, each row's sums kept apart and added in row
// order, so the result does not depend on the thread count. The ops' schemas are declared here
// (once for both libraries); loss_cuda.cu registers their CUDA kernels.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <vector>

#include "loss_math.h"
#include "raster_cpu.h"
#include "tensor_args.h"

std::vector<at::Tensor> render_l1_loss_cpu(const at::Tensor& color, const at::Tensor& depth,
                                           const at::Tensor& obs_color, const at::Tensor& obs_depth,
                                           const at::Tensor& valid, const at::Tensor& depth_ok,
                                           double depth_weight) {
  sr::check_loss_images(color, depth, obs_color, obs_depth, valid, depth_ok, /*cuda=*/false);
  const int64_t H = depth.size(0), W = depth.size(1);
  auto pixel_error = at::empty({H, W}, depth.options());
  std::vector<double> rows((size_t)H * sr::kLossTotals, 0.0);
  const float *c = color.data_ptr<float>(), *d = depth.data_ptr<float>();
  const float *oc = obs_color.data_ptr<float>(), *od = obs_depth.data_ptr<float>();
  const bool *v = valid.data_ptr<bool>(), *ok = depth_ok.data_ptr<bool>();
  float* pe = pixel_error.data_ptr<float>();
#pragma omp parallel for num_threads(sr_cpu::num_threads()) schedule(static) if (H * W > 16384)
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x)
      sr::l1_loss_pixel(y * W + x, c, d, oc, od, v, ok, &rows[(size_t)y * sr::kLossTotals], pe);
  auto totals = at::zeros({sr::kLossTotals}, depth.options().dtype(at::kDouble));
  double* t = totals.data_ptr<double>();
  for (int64_t y = 0; y < H; ++y)
    for (int k = 0; k < sr::kLossTotals; ++k) t[k] += rows[(size_t)y * sr::kLossTotals + k];
  auto loss = at::full({}, sr::l1_loss_value(t, depth_weight), depth.options());
  return {loss, totals, pixel_error};
}

std::vector<at::Tensor> render_l1_loss_backward_cpu(const at::Tensor& color, const at::Tensor& depth,
                                                    const at::Tensor& obs_color, const at::Tensor& obs_depth,
                                                    const at::Tensor& valid, const at::Tensor& depth_ok,
                                                    const at::Tensor& totals, const at::Tensor& grad,
                                                    double depth_weight) {
  sr::check_loss_images(color, depth, obs_color, obs_depth, valid, depth_ok, /*cuda=*/false);
  sr::check_loss_backward(totals, grad, /*cuda=*/false);
  const int64_t H = depth.size(0), W = depth.size(1);
  auto g_color = at::empty_like(color);
  auto g_depth = at::empty_like(depth);
  float color_scale, depth_scale;
  sr::l1_loss_scales(totals.data_ptr<double>(), (double)grad.item<float>(), depth_weight, &color_scale,
                     &depth_scale);
  const float *c = color.data_ptr<float>(), *d = depth.data_ptr<float>();
  const float *oc = obs_color.data_ptr<float>(), *od = obs_depth.data_ptr<float>();
  const bool *v = valid.data_ptr<bool>(), *ok = depth_ok.data_ptr<bool>();
  float *gc = g_color.data_ptr<float>(), *gd = g_depth.data_ptr<float>();
#pragma omp parallel for num_threads(sr_cpu::num_threads()) schedule(static) if (H * W > 16384)
  for (int64_t i = 0; i < H * W; ++i)
    sr::l1_loss_pixel_grad(i, c, d, oc, od, v, ok, color_scale, depth_scale, gc, gd);
  return {g_color, g_depth};
}

// Arguments and results as rasterizer/loss.py passes and reads them: the forward returns
// [loss () float32, totals (4,) float64, pixel_error (H, W) float32], the backward
// [g_color (H, W, 3), g_depth (H, W)].
TORCH_LIBRARY_FRAGMENT(sphere_raster, m) {
  m.def("render_l1_loss(Tensor color, Tensor depth, Tensor obs_color, Tensor obs_depth, Tensor valid, "
        "Tensor depth_ok, float depth_weight) -> Tensor[]");
  m.def("render_l1_loss_backward(Tensor color, Tensor depth, Tensor obs_color, Tensor obs_depth, "
        "Tensor valid, Tensor depth_ok, Tensor totals, Tensor grad, float depth_weight) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(sphere_raster, CPU, m) {
  m.impl("render_l1_loss", &render_l1_loss_cpu);
  m.impl("render_l1_loss_backward", &render_l1_loss_backward_cpu);
}
