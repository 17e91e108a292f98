// CUDA render loss kernels (the model is in rasterizer/loss.py, the per-pixel math in
// loss_math.h, the CPU twin loss_cpu.cpp): the forward in one launch (one thread a pixel; each
// block's sums to a partial, the last block to finish adds the partials in block order, so the
// result does not depend on the blocks' timing, and writes the totals and the loss), the backward
// in one (one thread a pixel, the scales read from the totals and the loss's gradient on the
// device: no host wait, so a CUDA graph captures both). Where the PyTorch formulation took about
// thirty element-wise launches a mapping step.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <vector>

#include "loss_math.h"
#include "raster_cuda.h"
#include "tensor_args.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int K = sr::kLossTotals;

// The block's sums of v[K] (every thread's), in a fixed order; valid in thread 0.
__device__ void block_sum(double* v, double (*shared)[K]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int k = 0; k < K; ++k)
    for (int o = 16; o > 0; o >>= 1) v[k] += __shfl_xor_sync(0xffffffffu, v[k], o);
  if (lane == 0)
    for (int k = 0; k < K; ++k) shared[warp][k] = v[k];
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < kWarps; ++w)
      for (int k = 0; k < K; ++k) v[k] += shared[w][k];
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads)
    l1_loss_kernel(int64_t n, const float* __restrict__ color, const float* __restrict__ depth,
                   const float* __restrict__ obs_color, const float* __restrict__ obs_depth,
                   const bool* __restrict__ valid, const bool* __restrict__ depth_ok, double depth_weight,
                   float* __restrict__ pixel_error, double* __restrict__ partials,
                   unsigned int* __restrict__ finished, double* __restrict__ totals, float* __restrict__ loss) {
  __shared__ double shared[kWarps][K];
  __shared__ bool last;
  double v[K] = {0.0, 0.0, 0.0, 0.0};
  const int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  if (i < n) sr::l1_loss_pixel(i, color, depth, obs_color, obs_depth, valid, depth_ok, v, pixel_error);
  block_sum(v, shared);
  if (threadIdx.x == 0) {
    for (int k = 0; k < K; ++k) partials[(int64_t)blockIdx.x * K + k] = v[k];
    __threadfence();   // the partials are visible before the count says so
    last = atomicAdd(finished, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int k = 0; k < K; ++k) v[k] = 0.0;
  for (int64_t b = threadIdx.x; b < gridDim.x; b += kThreads)   // fixed: thread t, blocks t, t + 256, ...
    for (int k = 0; k < K; ++k) v[k] += __ldcg(&partials[b * K + k]);   // from L2: other blocks wrote them
  block_sum(v, shared);
  if (threadIdx.x == 0) {
    for (int k = 0; k < K; ++k) totals[k] = v[k];
    *loss = (float)sr::l1_loss_value(v, depth_weight);
  }
}

__global__ void __launch_bounds__(kThreads)
    l1_loss_backward_kernel(int64_t n, const float* __restrict__ color, const float* __restrict__ depth,
                            const float* __restrict__ obs_color, const float* __restrict__ obs_depth,
                            const bool* __restrict__ valid, const bool* __restrict__ depth_ok,
                            const double* __restrict__ totals, const float* __restrict__ grad,
                            double depth_weight, float* __restrict__ g_color, float* __restrict__ g_depth) {
  const int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  if (i >= n) return;
  float color_scale, depth_scale;
  sr::l1_loss_scales(totals, (double)*grad, depth_weight, &color_scale, &depth_scale);
  sr::l1_loss_pixel_grad(i, color, depth, obs_color, obs_depth, valid, depth_ok, color_scale, depth_scale,
                         g_color, g_depth);
}

}  // namespace

std::vector<at::Tensor> render_l1_loss_cuda(const at::Tensor& color, const at::Tensor& depth,
                                            const at::Tensor& obs_color, const at::Tensor& obs_depth,
                                            const at::Tensor& valid, const at::Tensor& depth_ok,
                                            double depth_weight) {
  sr::check_loss_images(color, depth, obs_color, obs_depth, valid, depth_ok, /*cuda=*/true);
  const int64_t n = depth.numel();
  auto pixel_error = at::empty_like(depth);
  if (n == 0)
    return {at::zeros({}, depth.options()), at::zeros({K}, depth.options().dtype(at::kDouble)), pixel_error};
  auto totals = at::empty({K}, depth.options().dtype(at::kDouble));   // written by the last block
  auto loss = at::empty({}, depth.options());
  const c10::cuda::CUDAGuard guard(depth.device());
  const int blocks = sr_cuda::blocks_for(n, kThreads);
  auto partials = at::empty({(int64_t)blocks * K}, depth.options().dtype(at::kDouble));
  auto finished = at::zeros({1}, depth.options().dtype(at::kInt));
  l1_loss_kernel<<<blocks, kThreads, 0, c10::cuda::getCurrentCUDAStream().stream()>>>(
      n, color.data_ptr<float>(), depth.data_ptr<float>(), obs_color.data_ptr<float>(),
      obs_depth.data_ptr<float>(), valid.data_ptr<bool>(), depth_ok.data_ptr<bool>(), depth_weight,
      pixel_error.data_ptr<float>(), partials.data_ptr<double>(),
      reinterpret_cast<unsigned int*>(finished.data_ptr<int>()), totals.data_ptr<double>(),
      loss.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {loss, totals, pixel_error};
}

std::vector<at::Tensor> render_l1_loss_backward_cuda(const at::Tensor& color, const at::Tensor& depth,
                                                     const at::Tensor& obs_color, const at::Tensor& obs_depth,
                                                     const at::Tensor& valid, const at::Tensor& depth_ok,
                                                     const at::Tensor& totals, const at::Tensor& grad,
                                                     double depth_weight) {
  sr::check_loss_images(color, depth, obs_color, obs_depth, valid, depth_ok, /*cuda=*/true);
  sr::check_loss_backward(totals, grad, /*cuda=*/true);
  const int64_t n = depth.numel();
  auto g_color = at::empty_like(color);
  auto g_depth = at::empty_like(depth);
  if (n == 0) return {g_color, g_depth};
  const c10::cuda::CUDAGuard guard(depth.device());
  l1_loss_backward_kernel<<<sr_cuda::blocks_for(n, kThreads), kThreads, 0,
                            c10::cuda::getCurrentCUDAStream().stream()>>>(
      n, color.data_ptr<float>(), depth.data_ptr<float>(), obs_color.data_ptr<float>(),
      obs_depth.data_ptr<float>(), valid.data_ptr<bool>(), depth_ok.data_ptr<bool>(),
      totals.data_ptr<double>(), grad.data_ptr<float>(), depth_weight, g_color.data_ptr<float>(),
      g_depth.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {g_color, g_depth};
}

// The schemas are in loss_cpu.cpp.
TORCH_LIBRARY_IMPL(sphere_raster, CUDA, m) {
  m.impl("render_l1_loss", &render_l1_loss_cuda);
  m.impl("render_l1_loss_backward", &render_l1_loss_backward_cuda);
}
