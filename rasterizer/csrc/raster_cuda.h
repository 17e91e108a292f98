// The render's tiling on the GPU (bin_cuda.cu), shared by the render (raster_cuda.cu) and the
// fused Gauss-Newton kernel (gn_cuda.cu): project and count each tile's spheres -> scan of the
// tile counts -> emit (depth, sphere) keys into each tile's slots -> one block per tile sorts its
// keys. One host wait per call (the pair count M), unless the binning is capped (PairRoom).
#pragma once

#include <ATen/ATen.h>
#include <cuda_runtime.h>

#include "sphere_math.h"

namespace sr_cuda {

// splats: (N, 4) float32 (u, v, ia, ic; culled spheres: 0); ids: (M,) int32 sphere ids of all
// tiles' lists, front to back per tile; ranges: (tiles, 2) int32 [start, end) per tile.
struct Bins {
  at::Tensor splats, ids, ranges;
  int64_t m = 0;
};

// Capped binning (no host wait, e.g. inside a CUDA graph): room for `capacity` pairs; the pair
// count is compared with it on the device: *max_pairs = max(*max_pairs, M), *overflow = 1 when
// M > capacity (then the pairs beyond are dropped and the result is wrong: the caller redoes it).
// `skip` (nullable): when *skip != 0 on the device every tile list is empty and nothing is
// recorded (an LM level that is done: its means are not set).
struct PairRoom {
  int64_t capacity;
  double* max_pairs;
  double* overflow;
  const double* skip = nullptr;
};

// means (N, 3), radii (N,): contiguous float32 on the current device; work queued on `stream`.
// capped == nullptr: exact, one host wait for the pair count M (Bins::m = M). Otherwise Bins::m =
// capped->capacity and the lists end at the count the device found.
Bins bin_spheres(const at::Tensor& means, const at::Tensor& radii, const sr::Camera& cam,
                 cudaStream_t stream, const PairRoom* capped = nullptr);

inline int blocks_for(int64_t n, int threads) { return (int)((n + threads - 1) / threads); }

// The multiprocessor count of CUDA device `device`, asked of the driver once per device (the
// launch shapes of bin_spheres and the Gauss-Newton pass follow it).
int sm_count(int device);

}  // namespace sr_cuda
