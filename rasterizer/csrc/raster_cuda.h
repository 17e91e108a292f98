// The render's tiling on the GPU (raster_cuda.cu), shared by the render and the fused
// Gauss-Newton kernel (gn_cuda.cu): project (one thread per sphere) -> radix sort by depth ->
// scan of the tile counts -> emit (tile, sphere) pairs -> stable radix sort by tile id -> tile
// ranges. One host wait per call (the pair count M), unless the binning is capped (PairRoom).
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
struct PairRoom {
  int64_t capacity;
  double* max_pairs;
  double* overflow;
};

// means (N, 3), radii (N,): contiguous float32 on the current device; work queued on `stream`.
// capped == nullptr: exact, one host wait for the pair count M (Bins::m = M). Otherwise Bins::m =
// capped->capacity and the lists end at the count the device found.
Bins bin_spheres(const at::Tensor& means, const at::Tensor& radii, const sr::Camera& cam,
                 cudaStream_t stream, const PairRoom* capped = nullptr);

inline int blocks_for(int64_t n, int threads) { return (int)((n + threads - 1) / threads); }

}  // namespace sr_cuda
