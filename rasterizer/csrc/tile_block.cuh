// The tile block of the CUDA kernels, shared by the render (raster_cuda.cu: forward and backward)
// and the fused Gauss-Newton kernel (gn_cuda.cu): one block per tile (16x16 in the render, 8x8 in
// the Gauss-Newton pass), one thread per pixel, the tile's sphere list staged in shared memory in
// batches of one sphere per thread. Everything
// here is __forceinline__, and the kernels compile to the same machine code as with these lines
// written out in each of them (checked on sm_90 and sm_87).
#pragma once

#include <cuda_runtime.h>

#include "sphere_math.h"

namespace sr_cuda {

// The pixel (px, py) of thread `tid` in the block of tile `tile` (tiles of TILE x TILE pixels:
// the camera's cam.tile).
template <int TILE>
struct TilePixel {
  int px, py;
  __device__ __forceinline__ TilePixel(const sr::Camera& cam, int tile, int tid)
      : px((tile % cam.tiles_x) * TILE + tid % TILE), py((tile / cam.tiles_x) * TILE + tid / TILE) {}
  // Whether the pixel lies in the image (`&`, not `&&`: both sides are plain compares, and this
  // form compiles to the predicate the kernels had before the helper existed).
  __device__ __forceinline__ bool inside(const sr::Camera& cam) const {
    return (px < cam.width) & (py < cam.height);
  }
};

// Sphere i's colour (x, y, z) and opacity (w), as the kernels keep them in shared memory.
__device__ __forceinline__ float4 colour_opacity(int32_t i, const float* __restrict__ colors,
                                                 const float* __restrict__ opac) {
  return make_float4(colors[3 * i], colors[3 * i + 1], colors[3 * i + 2], opac[i]);
}

// Stages sphere i in slot `slot` of the block's shared-memory batch as the front-to-back loops read
// it: splat (u, v, ia, ic), colour + opacity, depth z.
__device__ __forceinline__ void stage_sphere(int slot, int32_t i, const float4* __restrict__ splats,
                                             const float* __restrict__ colors,
                                             const float* __restrict__ opac,
                                             const float* __restrict__ means, float4* s_geo,
                                             float4* s_col, float* s_z) {
  s_geo[slot] = splats[i];
  s_col[slot] = colour_opacity(i, colors, opac);
  s_z[slot] = means[3 * i + 2];
}

}  // namespace sr_cuda
