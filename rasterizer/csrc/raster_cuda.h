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

// The fewest parts K (1, 2 or 4) to split each work item of a launch into so that `units` x K
// reach `room` (what the GPU holds at once), else 4: a small image's few tiles then do not leave
// SMs idle while each block walks a long list alone (the Gauss-Newton pass's segments, gn_cuda.cu,
// and the render backward's parts, raster_cuda.cu). The environment variable `env` = 1|2|4 forces
// K (tests, benchmarks; read per call, so tests can switch it).
int parts_to_fill(long long units, long long room, const char* env);

}  // namespace sr_cuda
