// Pieces of the CPU kernels shared by the render (raster_cpu.cpp) and the fused Gauss-Newton
// kernel (gn_cpu.cpp): thread settings, the tiling (project -> bin into 16x16 tiles in
// (tile, depth, index) order), a tile's list and pixel rectangle, and the per-tile sphere cache.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

#include "sphere_math.h"

namespace sr_cpu {

int num_threads();

// Below these sizes a parallel region costs more than it saves (and on a busy machine OpenMP's
// barriers can cost milliseconds), so the loops run serially.
constexpr int64_t kParallelSpheres = 8192;
constexpr int64_t kParallelPairs = 256;  // (tile, sphere) pairs

// The tiling of one render: every sphere's splat (culled ones: unset), the sphere ids of all
// tiles' lists (ids (M,) int32, front to back per tile) and each tile's [start, end) (ranges
// (tiles, 2) int32).
struct Bins {
  std::vector<sr::Splat> splats;
  at::Tensor ids, ranges;
  int64_t m = 0;
};

// means (n, 3), radii (n,): float32 host arrays; opt: the options of the int32 outputs.
Bins bin_spheres(const float* means, const float* radii, int64_t n, const sr::Camera& cam,
                 const at::TensorOptions& opt);

// One tile of a render: its list [begin, end) (positions in the ids of Bins) and its pixels
// [x0, x1) x [y0, y1), the image's edge included; a pixel's slot in per-tile arrays is slot(px, py).
struct TileBox {
  int64_t begin, end;
  int x0, y0, x1, y1, tw;
  TileBox(int t, const int32_t* ranges, const sr::Camera& cam)
      : begin(ranges[2 * t]), end(ranges[2 * t + 1]) {
    x0 = sr::tile_x0(cam, t);
    y0 = sr::tile_y0(cam, t);
    x1 = std::min(x0 + cam.tile, cam.width);
    y1 = std::min(y0 + cam.tile, cam.height);
    tw = x1 - x0;
  }
  int pixels() const { return tw * (y1 - y0); }
  int slot(int px, int py) const { return (py - y0) * tw + (px - x0); }
};

// Per-tile copy of the data of the spheres in the tile's list (cache-friendly, like the CUDA
// kernel's shared-memory batches).
struct TileSpheres {
  std::vector<sr::Splat> splat;
  std::vector<float> o, c, z;
  void load(int64_t begin, int64_t end, const int32_t* ids, const sr::Splat* splats,
            const float* opac, const float* colors, const float* means) {
    const int64_t n = end - begin;
    splat.resize(n);
    o.resize(n);
    c.resize(3 * n);
    z.resize(n);
    for (int64_t j = 0; j < n; ++j) {
      const int32_t i = ids[begin + j];
      splat[j] = splats[i];
      o[j] = opac[i];
      c[3 * j] = colors[3 * i];
      c[3 * j + 1] = colors[3 * i + 1];
      c[3 * j + 2] = colors[3 * i + 2];
      z[j] = means[3 * i + 2];
    }
  }
};

}  // namespace sr_cpu
