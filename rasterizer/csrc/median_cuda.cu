// CUDA median kernels (the model is in rasterizer/median.py, the CPU twin median_cpu.cpp, the
// shared rules median_math.h): a radix select on the counted values' float bits as ordered keys
// (sr::order_key), digits of 11, 11 and 10 bits from the top, three passes of two launches each:
//   histogram_kernel (a grid over the values): each block bins the counted values whose key bits
//     above the pass's digit equal the prefix chosen so far (one shared-memory add per warp and
//     bin: a frame's depths share their top bits; kUnroll loads in flight a thread) and adds its
//     non-zero bins into the global histogram; the first pass also sees any NaN
//   -> select_kernel (one block): a block scan of the bins finds the digit whose bin holds the
//     wanted rank (the first pass counts the values: n, rank (n - 1) / 2), keeps prefix and rank
//     for the next pass and zeroes the histogram for it; the last pass writes the median.
// Exact, and no host wait: CUDA graphs hold it (the tracker's pivot). History (H100, a 320x240
// frame): one block for every pass took 59 us (latency-bound on one SM); its first version, 8-bit
// digits, one load at a time and a serial scan, 117 us, against ~40 for torch.sort.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>

#include <cub/cub.cuh>

#include "median_math.h"
#include "raster_cuda.h"
#include "tensor_args.h"

namespace {

constexpr int kHistThreads = 512;
constexpr int kUnroll = 8;                  // loads a thread has in flight before it bins them
constexpr int kBins = 2048;                 // digits of 11, 11 and 10 bits: three passes
constexpr int kSelectThreads = 1024;
constexpr int kBinsPerThread = kBins / kSelectThreads;
constexpr int kHistBlocksPerSM = 4;
using BinScan = cub::BlockScan<unsigned int, kSelectThreads>;

// The select's state after the histogram (kBins counts) in one device buffer.
enum : int { kPrefix = kBins, kRank, kNan, kWorkspace };

struct Digit {
  int shift;
  unsigned int above, mask;  // the bits chosen before this pass; the digit's mask after the shift
};

__host__ __device__ inline Digit digit_of(int pass) {
  const int width = pass < 2 ? 11 : 10;
  const int shift = pass == 0 ? 21 : (pass == 1 ? 10 : 0);
  return Digit{shift, pass == 0 ? 0u : 0xffffffffu << (shift + width), (1u << width) - 1u};
}

__global__ void __launch_bounds__(kHistThreads)
    histogram_kernel(int64_t n, const float* __restrict__ x, bool depth, int pass,
                     unsigned int* __restrict__ ws) {
  __shared__ unsigned int hist[kBins];
  const Digit d = digit_of(pass);
  const unsigned int prefix = ws[kPrefix];
  const unsigned int lane = threadIdx.x & 31u;
  for (int b = threadIdx.x; b < kBins; b += kHistThreads) hist[b] = 0u;
  __syncthreads();
  bool nan = false;
  const int64_t step = (int64_t)gridDim.x * kHistThreads * kUnroll;
  for (int64_t base = (int64_t)blockIdx.x * kHistThreads * kUnroll; base < n; base += step) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + (int64_t)u * kHistThreads + threadIdx.x;
      v[u] = i < n ? x[i] : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + (int64_t)u * kHistThreads + threadIdx.x;
      unsigned int bin = kBins;   // none
      if (i < n) {
        if (sr::median_counts(v[u], depth)) {
          const unsigned int key = sr::order_key(__float_as_uint(v[u]));
          if ((key & d.above) == prefix) bin = (key >> d.shift) & d.mask;
        } else if (!depth) {
          nan = true;
        }
      }
      const unsigned int peers = __match_any_sync(0xffffffffu, bin);
      if (bin < kBins && lane == (unsigned int)(__ffs(peers) - 1)) atomicAdd(&hist[bin], __popc(peers));
    }
  }
  if (pass == 0 && nan) ws[kNan] = 1u;
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += kHistThreads)
    if (hist[b] != 0u) atomicAdd(&ws[b], hist[b]);
}

__global__ void __launch_bounds__(kSelectThreads)
    select_kernel(int pass, bool depth, unsigned int* __restrict__ ws, float* __restrict__ out) {
  __shared__ typename BinScan::TempStorage scan;
  const Digit d = digit_of(pass);
  unsigned int items[kBinsPerThread], starts[kBinsPerThread], total;
#pragma unroll
  for (int k = 0; k < kBinsPerThread; ++k) {
    items[k] = ws[threadIdx.x * kBinsPerThread + k];
    ws[threadIdx.x * kBinsPerThread + k] = 0u;   // the next pass's histogram starts empty
  }
  BinScan(scan).ExclusiveSum(items, starts, total);
  const unsigned int prefix = ws[kPrefix];
  const unsigned int rank = pass == 0 ? (total > 0u ? (total - 1u) / 2u : 0u) : ws[kRank];  // the lower middle
  __syncthreads();   // every thread has read prefix and rank
  const float none = depth ? sr::kNoMedianDepth : __int_as_float(0x7fc00000);   // 1 m or NaN
#pragma unroll
  for (int k = 0; k < kBinsPerThread; ++k) {
    if (starts[k] <= rank && rank < starts[k] + items[k]) {   // one thread and bin (when total > 0)
      const unsigned int chosen = prefix | ((unsigned int)(threadIdx.x * kBinsPerThread + k) << d.shift);
      ws[kPrefix] = chosen;
      ws[kRank] = rank - starts[k];
      // the last digit: this thread writes the result (no other thread reads what it chose)
      if (pass == 2) out[0] = ws[kNan] != 0u ? none : __uint_as_float(sr::key_bits(chosen));
    }
  }
  if (pass == 2 && threadIdx.x == 0 && total == 0u) out[0] = none;   // nothing counted
}

}  // namespace

at::Tensor lower_median_cuda(const at::Tensor& x, bool depth) {
  sr::check_input(x, "x", /*cuda=*/true);
  auto out = at::empty({}, x.options());
  const c10::cuda::CUDAGuard guard(x.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  auto ws_t = at::empty({kWorkspace}, x.options().dtype(at::kInt));
  auto* ws = reinterpret_cast<unsigned int*>(ws_t.data_ptr<int32_t>());
  C10_CUDA_CHECK(cudaMemsetAsync(ws, 0, kWorkspace * sizeof(unsigned int), stream));
  const int64_t n = x.numel();
  const int64_t per_block = (int64_t)kHistThreads * kUnroll;
  const int blocks = (int)std::max<int64_t>(1, std::min<int64_t>((n + per_block - 1) / per_block,
                                                                 (int64_t)sr_cuda::sm_count(x.get_device()) * kHistBlocksPerSM));
  for (int pass = 0; pass < 3; ++pass) {
    histogram_kernel<<<blocks, kHistThreads, 0, stream>>>(n, x.data_ptr<float>(), depth, pass, ws);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    select_kernel<<<1, kSelectThreads, 0, stream>>>(pass, depth, ws, out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return out;
}

// The schema is in median_cpu.cpp.
TORCH_LIBRARY_IMPL(sphere_raster, CUDA, m) { m.impl("lower_median", &lower_median_cuda); }
