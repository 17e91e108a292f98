// CUDA packed-row Adam update (the model is in rasterizer/adam.py, the per-row math in
// adam_math.h, the CPU twin adam_cpu.cpp): one launch per optimiser step, one thread per row,
// where the PyTorch formulation took about twenty element-wise launches.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "adam_math.h"
#include "raster_cuda.h"
#include "tensor_args.h"

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    adam_kernel(int64_t n, float* __restrict__ p, float* __restrict__ m, float* __restrict__ v,
                float* __restrict__ steps, const float* __restrict__ g,
                const float* __restrict__ lr, sr::AdamSettings s) {
  const int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  if (i < n) sr::adam_row<sr::kAdamCols>(i, p, m, v, steps, g, lr, s);
}

}  // namespace

void adam_rows_cuda(at::Tensor params, at::Tensor exp_avg, at::Tensor exp_avg_sq, at::Tensor steps,
                    const at::Tensor& grad, const at::Tensor& lr, double beta1, double beta2,
                    double eps) {
  sr::check_adam_args(params, exp_avg, exp_avg_sq, steps, grad, lr, /*cuda=*/true);
  const int64_t n = params.size(0);
  if (n == 0) return;
  const c10::cuda::CUDAGuard guard(params.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  adam_kernel<<<sr_cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(
      n, params.data_ptr<float>(), exp_avg.data_ptr<float>(), exp_avg_sq.data_ptr<float>(),
      steps.data_ptr<float>(), grad.data_ptr<float>(), lr.data_ptr<float>(),
      sr::AdamSettings{(float)beta1, (float)beta2, (float)eps});
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The schema is in adam_cpu.cpp.
TORCH_LIBRARY_IMPL(sphere_raster, CUDA, m) { m.impl("adam_rows", &adam_rows_cuda); }
