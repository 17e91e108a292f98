// CUDA frame kernels (the models are in rasterizer/frame.py, the per-pixel math in frame_math.h,
// the CPU twins frame_cpu.cpp), one thread per output pixel: a compact frame's float images (one
// launch where PyTorch took three to five), downsampling (colour and depth of a
// frame or pyramid level in one launch, where the PyTorch formulation took about fifteen) and the
// depth-edge mask (one launch instead of about twelve) and the rolling-shutter unroll (one launch
// instead of about forty).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <vector>

#include "frame_math.h"
#include "raster_cuda.h"
#include "tensor_args.h"

namespace {

constexpr int kThreads = 256;

template <typename D>
__global__ void __launch_bounds__(kThreads)
    unpack_kernel(int64_t n, const uint8_t* __restrict__ color, const D* __restrict__ depth,
                  float* __restrict__ out_color, float* __restrict__ out_depth) {
  const int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  if (i < n) sr::unpack_pixel(i, color, depth, out_color, out_depth);
}

template <int MaxF>
__global__ void __launch_bounds__(kThreads)
    downsample_kernel(int64_t h, int64_t w, int f, int64_t W, const float* __restrict__ color,
                      const float* __restrict__ depth, float* __restrict__ out_color,
                      float* __restrict__ out_depth) {
  const int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  if (i < h * w) sr::downsample_pixel<MaxF>(i / w, i % w, f, W, w, color, depth, out_color, out_depth);
}

__global__ void __launch_bounds__(kThreads)
    depth_edge_kernel(int64_t H, int64_t W, const float* __restrict__ depth, float max_jump,
                      bool* __restrict__ out) {
  const int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  if (i < H * W) out[i] = sr::depth_edge_ok(i / W, i % W, H, W, depth, max_jump);
}

__global__ void __launch_bounds__(kThreads)
    unroll_kernel(sr::UnrollParams p, const float* __restrict__ color,
                  const float* __restrict__ depth, float* __restrict__ out_color,
                  float* __restrict__ out_depth) {
  const int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  if (i < p.H * p.W) sr::unroll_pixel(i / p.W, i % p.W, p, color, depth, out_color, out_depth);
}

}  // namespace

std::vector<at::Tensor> unpack_frame_cuda(const at::Tensor& color, const at::Tensor& depth) {
  sr::check_compact_frame(color, depth, /*cuda=*/true);
  auto out_color = at::empty(color.sizes(), color.options().dtype(at::kFloat));
  auto out_depth = at::empty(depth.sizes(), depth.options().dtype(at::kFloat));
  const int64_t n = depth.numel();
  if (n == 0) return {out_color, out_depth};
  const c10::cuda::CUDAGuard guard(color.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const dim3 blocks = sr_cuda::blocks_for(n, kThreads);
  if (depth.scalar_type() == at::kHalf)
    unpack_kernel<<<blocks, kThreads, 0, stream>>>(n, color.data_ptr<uint8_t>(), depth.data_ptr<at::Half>(),
                                                   out_color.data_ptr<float>(), out_depth.data_ptr<float>());
  else
    unpack_kernel<<<blocks, kThreads, 0, stream>>>(n, color.data_ptr<uint8_t>(), depth.data_ptr<float>(),
                                                   out_color.data_ptr<float>(), out_depth.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {out_color, out_depth};
}

std::vector<at::Tensor> downsample_cuda(const at::Tensor& color, const at::Tensor& depth,
                                        int64_t factor) {
  sr::check_images(color, depth, factor, /*cuda=*/true);
  const int64_t H = depth.size(0), W = depth.size(1), h = H / factor, w = W / factor;
  auto out_color = at::empty({h, w, 3}, color.options());
  auto out_depth = at::empty({h, w}, depth.options());
  if (h * w == 0) return {out_color, out_depth};
  const c10::cuda::CUDAGuard guard(color.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  // Factors up to 4 (the tracking resolution, the pyramid's levels) with 64 bytes of local memory
  // per thread; larger ones reserve 1 KiB per resident thread.
  auto kernel = factor <= 4 ? downsample_kernel<4> : downsample_kernel<sr::kMaxDownsample>;
  kernel<<<sr_cuda::blocks_for(h * w, kThreads), kThreads, 0, stream>>>(
      h, w, (int)factor, W, color.data_ptr<float>(), depth.data_ptr<float>(),
      out_color.data_ptr<float>(), out_depth.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {out_color, out_depth};
}

at::Tensor depth_edge_mask_cuda(const at::Tensor& depth, double max_jump) {
  sr::check_depth_image(depth, /*cuda=*/true);
  const int64_t H = depth.size(0), W = depth.size(1);
  auto out = at::empty({H, W}, depth.options().dtype(at::kBool));
  if (H * W == 0) return out;
  const c10::cuda::CUDAGuard guard(depth.device());
  depth_edge_kernel<<<sr_cuda::blocks_for(H * W, kThreads), kThreads, 0,
                      c10::cuda::getCurrentCUDAStream().stream()>>>(
      H, W, depth.data_ptr<float>(), (float)max_jump, out.data_ptr<bool>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

std::vector<at::Tensor> unroll_cuda(const at::Tensor& color, const at::Tensor& depth,
                                    c10::ArrayRef<double> params) {
  const sr::UnrollParams p = sr::check_unroll_args(color, depth, params, /*cuda=*/true);
  auto out_color = at::empty_like(color);
  auto out_depth = at::empty_like(depth);
  if (p.H * p.W == 0) return {out_color, out_depth};
  const c10::cuda::CUDAGuard guard(color.device());
  unroll_kernel<<<sr_cuda::blocks_for(p.H * p.W, kThreads), kThreads, 0,
                  c10::cuda::getCurrentCUDAStream().stream()>>>(
      p, color.data_ptr<float>(), depth.data_ptr<float>(), out_color.data_ptr<float>(),
      out_depth.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {out_color, out_depth};
}

// The schemas are in frame_cpu.cpp.
TORCH_LIBRARY_IMPL(sphere_raster, CUDA, m) {
  m.impl("unpack_frame", &unpack_frame_cuda);
  m.impl("downsample", &downsample_cuda);
  m.impl("depth_edge_mask", &depth_edge_mask_cuda);
  m.impl("unroll", &unroll_cuda);
}
