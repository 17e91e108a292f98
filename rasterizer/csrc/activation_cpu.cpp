// CPU twin of the map's parametrisation kernels (activation_cuda.cu; the model is in
// rasterizer/activation.py, the per-row math in activation_math.h): rows in parallel, each row
// independent; the radius' exp is PyTorch's (below). The ops' schemas are declared here (once for
// both libraries); activation_cuda.cu registers the CUDA kernels.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>

#include "activation_math.h"
#include "raster_cpu.h"
#include "tensor_args.h"

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> activate_rows_cpu(const at::Tensor& rows,
                                                                             const at::Tensor& T_cw) {
  sr::check_input(rows, "rows", /*cuda=*/false, sr::kRowCols);
  const float* T = sr::optional_pose(T_cw, /*cuda=*/false);
  const int64_t n = rows.size(0);
  const auto f = rows.options();
  at::Tensor means = at::empty({n, 3}, f), radii = at::empty({n}, f), colors = at::empty({n, 3}, f),
             opacities = at::empty({n}, f);
  const float* r = rows.data_ptr<float>();
  float *m = means.data_ptr<float>(), *c = colors.data_ptr<float>(), *o = opacities.data_ptr<float>();
#pragma omp parallel for num_threads(sr_cpu::num_threads()) schedule(static) if (n > 16384)
  for (int64_t i = 0; i < n; ++i) sr::activate_row_but_radius(i, r, T, m, c, o);
  // The radius' exp as PyTorch's own CPU exp takes it (the column as a strided view): libm's expf
  // and PyTorch's vectorised one differ by one ulp in ~1 % of values, and CPU runs, deterministic,
  // would drift from the same code's earlier results (on CUDA both are the device's expf).
  at::exp_out(radii, rows.select(1, sr::kLogRadiusCol));
  return {means, radii, colors, opacities};
}

at::Tensor activate_rows_backward_cpu(const at::Tensor& g_means, const at::Tensor& g_radii,
                                      const at::Tensor& g_colors, const at::Tensor& g_opacities,
                                      const at::Tensor& radii, const at::Tensor& colors,
                                      const at::Tensor& opacities, const at::Tensor& T_cw) {
  const sr::ActivationGrads g =
      sr::activation_grads(g_means, g_radii, g_colors, g_opacities, radii, colors, opacities, false);
  const float* T = sr::optional_pose(T_cw, /*cuda=*/false);
  const int64_t n = radii.size(0);
  at::Tensor g_rows = at::empty({n, sr::kRowCols}, radii.options());
  const float *ra = radii.data_ptr<float>(), *c = colors.data_ptr<float>(), *o = opacities.data_ptr<float>();
  float* out = g_rows.data_ptr<float>();
#pragma omp parallel for num_threads(sr_cpu::num_threads()) schedule(static) if (n > 16384)
  for (int64_t i = 0; i < n; ++i)
    sr::activate_backward_row(i, g.means, g.radii, g.colors, g.opacities, ra, c, o, T, out);
  return g_rows;
}

at::Tensor transform_means_cpu(const at::Tensor& means, const at::Tensor& T_cw) {
  sr::check_input(means, "means", /*cuda=*/false, 3);
  const float* T = sr::optional_pose(T_cw, /*cuda=*/false);
  TORCH_CHECK(T != nullptr, "transform_means: T_cw must be a (4, 4) pose");
  const int64_t n = means.size(0);
  at::Tensor out = at::empty({n, 3}, means.options());
  const float* p = means.data_ptr<float>();
  float* o = out.data_ptr<float>();
#pragma omp parallel for num_threads(sr_cpu::num_threads()) schedule(static) if (n > 16384)
  for (int64_t i = 0; i < n; ++i) sr::transform_point(i, p, T, o);
  return out;
}

// Arguments as rasterizer/activation.py passes them; an output gradient may be empty (none), and
// so may T_cw (no pose: world-frame means).
TORCH_LIBRARY_FRAGMENT(sphere_raster, m) {
  m.def("activate_rows(Tensor rows, Tensor T_cw) -> (Tensor means, Tensor radii, Tensor colors, Tensor opacities)");
  m.def("activate_rows_backward(Tensor g_means, Tensor g_radii, Tensor g_colors, Tensor g_opacities, "
        "Tensor radii, Tensor colors, Tensor opacities, Tensor T_cw) -> Tensor");
  m.def("transform_means(Tensor means, Tensor T_cw) -> Tensor");
}

TORCH_LIBRARY_IMPL(sphere_raster, CPU, m) {
  m.impl("activate_rows", &activate_rows_cpu);
  m.impl("activate_rows_backward", &activate_rows_backward_cpu);
  m.impl("transform_means", &transform_means_cpu);
}
