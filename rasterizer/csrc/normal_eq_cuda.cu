// CUDA robust normal-equations reduction (the model is in rasterizer/normal_equations.py, the
// per-element math in normal_eq_math.h, the CPU twin normal_eq_cpu.cpp): one launch per call,
// no cuBLAS. Each thread sums its grid-stride elements in float; a block sums its threads
// (warp reduce-scatter, then the warps through shared memory) and adds each value into the
// float64 result with one atomic.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>

#include "normal_eq_math.h"
#include "raster_cuda.h"
#include "tensor_args.h"
#include "warp_reduce.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPad = 64;        // values padded to two warp reduce-scatters of 32
constexpr int kMaxBlocks = 512;  // enough to fill the GPU; each block then strides
static_assert(sr::ne_values(8) <= kPad, "two reduce-scatter rounds");

template <int P>
__global__ void __launch_bounds__(kThreads)
    ne_kernel(const float* __restrict__ J, const float* __restrict__ r,
              const float* __restrict__ k, int C, int64_t M, int64_t ld,
              double* __restrict__ out) {
  constexpr int NV = sr::ne_values(P);
  __shared__ float s_red[kWarps][kPad];
  float v[kPad];
#pragma unroll
  for (int i = 0; i < kPad; ++i) v[i] = 0.f;
  for (int64_t m = (int64_t)blockIdx.x * kThreads + threadIdx.x; m < M;
       m += (int64_t)gridDim.x * kThreads)
    sr::ne_add<P>(J, ld, m, r[m], k[m % C], v);
  const int tid = threadIdx.x, lane = tid & 31;
  sr_cuda::WarpReduceScatter<32, 16>::run(v, lane);
  s_red[tid >> 5][lane] = v[0];
  sr_cuda::WarpReduceScatter<32, 16>::run(v + 32, lane);
  s_red[tid >> 5][32 + lane] = v[32];
  __syncthreads();
  if (tid < NV) {
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) t += s_red[w][tid];
    if (t != 0.f) atomicAdd(out + tid, (double)t);
  }
}

}  // namespace

// Adds the packed normal equations into out (ne_values(P),) float64 (see normal_equations.py).
void robust_normal_equations_cuda(const at::Tensor& J, const at::Tensor& r, const at::Tensor& k,
                                  at::Tensor out) {
  const int P = sr::check_normal_equations_args(J, r, k, out, /*cuda=*/true);
  const int64_t M = J.size(1), C = k.numel(), ld = J.stride(0);
  if (M == 0) return;
  const c10::cuda::CUDAGuard guard(J.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const int blocks = std::min(sr_cuda::blocks_for(M, kThreads), kMaxBlocks);
  if (P == 6)
    ne_kernel<6><<<blocks, kThreads, 0, stream>>>(J.data_ptr<float>(), r.data_ptr<float>(),
                                                  k.data_ptr<float>(), (int)C, M, ld, out.data_ptr<double>());
  else
    ne_kernel<8><<<blocks, kThreads, 0, stream>>>(J.data_ptr<float>(), r.data_ptr<float>(),
                                                  k.data_ptr<float>(), (int)C, M, ld, out.data_ptr<double>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
