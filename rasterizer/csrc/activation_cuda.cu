// CUDA kernels of the map's parametrisation (the model is in rasterizer/activation.py, the per-row
// math in activation_math.h, the CPU twin activation_cpu.cpp): one launch each way, one thread per
// row (the world-to-camera move of the means included, when a pose is given), where the PyTorch formulation took exp and two sigmoids forward, and a product, two
// sigmoid backwards and a concatenation (plus zero-filled absent gradients) backward: the mapper
// steps 40 times a keyframe.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <tuple>

#include "activation_math.h"
#include "raster_cuda.h"
#include "tensor_args.h"

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    activate_kernel(int64_t n, const float* __restrict__ rows, const float* __restrict__ T,
                    float* __restrict__ means, float* __restrict__ radii,
                    float* __restrict__ colors, float* __restrict__ opacities) {
  const int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  if (i < n) sr::activate_row(i, rows, T, means, radii, colors, opacities);
}

__global__ void __launch_bounds__(kThreads)
    activate_backward_kernel(int64_t n, const float* __restrict__ g_means,
                             const float* __restrict__ g_radii, const float* __restrict__ g_colors,
                             const float* __restrict__ g_opacities, const float* __restrict__ radii,
                             const float* __restrict__ colors, const float* __restrict__ opacities,
                             const float* __restrict__ T, float* __restrict__ g_rows) {
  const int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  if (i < n)
    sr::activate_backward_row(i, g_means, g_radii, g_colors, g_opacities, radii, colors, opacities,
                              T, g_rows);
}

__global__ void __launch_bounds__(kThreads)
    transform_kernel(int64_t n, const float* __restrict__ points, const float* __restrict__ T,
                     float* __restrict__ out) {
  const int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  if (i < n) sr::transform_point(i, points, T, out);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> activate_rows_cuda(const at::Tensor& rows,
                                                                              const at::Tensor& T_cw) {
  sr::check_input(rows, "rows", /*cuda=*/true, sr::kRowCols);
  const float* T = sr::optional_pose(T_cw, /*cuda=*/true);
  const int64_t n = rows.size(0);
  const auto f = rows.options();
  at::Tensor means = at::empty({n, 3}, f), radii = at::empty({n}, f), colors = at::empty({n, 3}, f),
             opacities = at::empty({n}, f);
  if (n == 0) return {means, radii, colors, opacities};
  const c10::cuda::CUDAGuard guard(rows.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  activate_kernel<<<sr_cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(
      n, rows.data_ptr<float>(), T, means.data_ptr<float>(), radii.data_ptr<float>(),
      colors.data_ptr<float>(), opacities.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {means, radii, colors, opacities};
}

at::Tensor activate_rows_backward_cuda(const at::Tensor& g_means, const at::Tensor& g_radii,
                                       const at::Tensor& g_colors, const at::Tensor& g_opacities,
                                       const at::Tensor& radii, const at::Tensor& colors,
                                       const at::Tensor& opacities, const at::Tensor& T_cw) {
  const sr::ActivationGrads g =
      sr::activation_grads(g_means, g_radii, g_colors, g_opacities, radii, colors, opacities, true);
  const float* T = sr::optional_pose(T_cw, /*cuda=*/true);
  const int64_t n = radii.size(0);
  at::Tensor g_rows = at::empty({n, sr::kRowCols}, radii.options());
  if (n == 0) return g_rows;
  const c10::cuda::CUDAGuard guard(radii.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  activate_backward_kernel<<<sr_cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(
      n, g.means, g.radii, g.colors, g.opacities, radii.data_ptr<float>(), colors.data_ptr<float>(),
      opacities.data_ptr<float>(), T, g_rows.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return g_rows;
}

at::Tensor transform_means_cuda(const at::Tensor& means, const at::Tensor& T_cw) {
  sr::check_input(means, "means", /*cuda=*/true, 3);
  const float* T = sr::optional_pose(T_cw, /*cuda=*/true);
  TORCH_CHECK(T != nullptr, "transform_means: T_cw must be a (4, 4) pose");
  const int64_t n = means.size(0);
  at::Tensor out = at::empty({n, 3}, means.options());
  if (n == 0) return out;
  const c10::cuda::CUDAGuard guard(means.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  transform_kernel<<<sr_cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(
      n, means.data_ptr<float>(), T, out.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

// The schemas are in activation_cpu.cpp.
TORCH_LIBRARY_IMPL(sphere_raster, CUDA, m) {
  m.impl("activate_rows", &activate_rows_cuda);
  m.impl("activate_rows_backward", &activate_rows_backward_cuda);
  m.impl("transform_means", &transform_means_cuda);
}
