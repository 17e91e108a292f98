// CPU (C++/OpenMP) kernels of the sphere rasterizer's render ops, `forward` and `backward`: their
// schemas (declared here, once for both libraries) and CPU implementations; the CUDA ones are in
// raster_cuda.cu, with the same arguments and results and the same tiled algorithm:
// forward: project -> bin into 16x16 tiles in (tile, depth, index) order -> per-tile front-to-back
//   blend -> depth normalised in the kernel (depth = sum w z / max(alpha, eps));
// backward: per pixel the normalisation's backward, then a back-to-front replay that sums the
//   splat-space gradients per sphere (sr::alpha_backward), then sr::project_backward once per
//   sphere. The per-pixel math is shared through sphere_math.h.
// Tiles run in parallel; the backward writes one record per (tile, sphere) intersection and then
// reduces the records per sphere in list order, so results are deterministic for any thread count.
// The tiling (project, depth order, bin) is sr_cpu::bin_spheres (raster_cpu.h), shared with the
// fused Gauss-Newton kernel (gn_cpu.cpp).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <numeric>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "raster_cpu.h"
#include "sphere_math.h"
#include "tensor_args.h"

namespace {

void check_input(const at::Tensor& t, const char* name, int64_t cols) {
  sr::check_input(t, name, /*cuda=*/false, cols);
}

using sr_cpu::kParallelPairs;
using sr_cpu::kParallelSpheres;
using sr_cpu::num_threads;
using sr_cpu::TileSpheres;

}  // namespace

int sr_cpu::num_threads() { return std::max(1, at::get_num_threads()); }

sr_cpu::Bins sr_cpu::bin_spheres(const float* mp, const float* rp, int64_t n,
                                 const sr::Camera& cam, const at::TensorOptions& opt) {
  Bins b;
  const int n_tiles = cam.tiles_x * cam.tiles_y;
  b.splats.resize(n);
  sr::Splat* splats = b.splats.data();
  std::vector<int> rect(4 * n, 0), count(n, 0);

  // 1. project
#pragma omp parallel for num_threads(num_threads()) schedule(static) if (n >= kParallelSpheres)
  for (int64_t i = 0; i < n; ++i) {
    sr::Splat s;
    if (!sr::project_sphere(mp[3 * i], mp[3 * i + 1], mp[3 * i + 2], rp[i], cam, s)) continue;
    splats[i] = s;
    count[i] = sr::tile_rect(s, cam, rect[4 * i], rect[4 * i + 1], rect[4 * i + 2], rect[4 * i + 3]);
  }

  // 2. depth order of the spheres that touch a tile (stable: ties by index)
  std::vector<int32_t> order;
  order.reserve(n);
  for (int64_t i = 0; i < n; ++i)
    if (count[i] > 0) order.push_back((int32_t)i);
  std::stable_sort(order.begin(), order.end(),
                   [mp](int32_t a, int32_t b) { return mp[3 * a + 2] < mp[3 * b + 2]; });

  // 3. stable counting sort of the (tile, sphere) intersections by tile
  std::vector<int64_t> tile_start(n_tiles + 1, 0);
  for (int32_t i : order)
    for (int ty = rect[4 * i + 2]; ty < rect[4 * i + 3]; ++ty)
      for (int tx = rect[4 * i]; tx < rect[4 * i + 1]; ++tx) tile_start[ty * cam.tiles_x + tx + 1]++;
  for (int t = 0; t < n_tiles; ++t) tile_start[t + 1] += tile_start[t];
  b.m = tile_start[n_tiles];
  b.ids = at::empty({b.m}, opt.dtype(at::kInt));
  b.ranges = at::empty({n_tiles, 2}, opt.dtype(at::kInt));
  int32_t* ids = b.ids.data_ptr<int32_t>();
  int32_t* ranges = b.ranges.data_ptr<int32_t>();
  std::vector<int64_t> cursor(tile_start.begin(), tile_start.end() - 1);
  for (int32_t i : order)
    for (int ty = rect[4 * i + 2]; ty < rect[4 * i + 3]; ++ty)
      for (int tx = rect[4 * i]; tx < rect[4 * i + 1]; ++tx) ids[cursor[ty * cam.tiles_x + tx]++] = i;
  for (int t = 0; t < n_tiles; ++t) {
    ranges[2 * t] = (int32_t)tile_start[t];
    ranges[2 * t + 1] = (int32_t)tile_start[t + 1];
  }
  return b;
}

// Returns [color (H,W,3), depth (H,W), alpha (H,W), last (H,W) int32, ids (M,) int32,
//          ranges (tiles,2) int32, parts (0,)]; depth = sum w z / max(alpha, depth_eps) (metres).
// `last` is each pixel's last blended list position + 1; the backward recovers T_final = 1 - alpha.
// `parts` is empty: the CPU backward walks each tile's list in one part (the CUDA forward's saves
// the pixels' state where its backward's parts begin, raster_cuda.cu).
std::vector<at::Tensor> forward_cpu(const at::Tensor& means, const at::Tensor& radii,
                                    const at::Tensor& colors, const at::Tensor& opacities,
                                    const at::Tensor& background, double fx, double fy, double cx,
                                    double cy, int64_t width, int64_t height, double depth_eps) {
  check_input(means, "means", 3);
  check_input(colors, "colors", 3);
  check_input(radii, "radii", 0);
  check_input(opacities, "opacities", 0);
  check_input(background, "background", 0);
  TORCH_CHECK(depth_eps > 0.0, "depth_eps must be > 0");
  const sr::Camera cam = sr::make_camera(fx, fy, cx, cy, width, height);
  const float eps = (float)depth_eps;
  const int64_t n = means.size(0);
  const int n_tiles = cam.tiles_x * cam.tiles_y;
  const float* mp = means.data_ptr<float>();
  const float* rp = radii.data_ptr<float>();
  const float* cp = colors.data_ptr<float>();
  const float* op = opacities.data_ptr<float>();
  const float* bg = background.data_ptr<float>();

  auto fopt = means.options();
  // 1-3. project, depth order, bin into tiles
  sr_cpu::Bins bins = sr_cpu::bin_spheres(mp, rp, n, cam, fopt);
  const sr::Splat* splats = bins.splats.data();
  at::Tensor ids_t = bins.ids, ranges_t = bins.ranges;
  const int64_t m = bins.m;
  const int32_t* ids = ids_t.data_ptr<int32_t>();
  const int32_t* ranges = ranges_t.data_ptr<int32_t>();

  // 4. blend each tile front to back
  at::Tensor color_t = at::empty({height, width, 3}, fopt);
  at::Tensor depth_t = at::empty({height, width}, fopt);
  at::Tensor alpha_t = at::empty({height, width}, fopt);
  at::Tensor last_t = at::empty({height, width}, fopt.dtype(at::kInt));
  float* color = color_t.data_ptr<float>();
  float* depth = depth_t.data_ptr<float>();
  float* alpha = alpha_t.data_ptr<float>();
  int32_t* last = last_t.data_ptr<int32_t>();

#pragma omp parallel num_threads(num_threads()) if (m >= kParallelPairs)
  {
    TileSpheres ts;
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < n_tiles; ++t) {
      const sr_cpu::TileBox tb(t, ranges, cam);
      const int64_t begin = tb.begin, end = tb.end;
      ts.load(begin, end, ids, splats, op, cp, mp);
      // Sphere-major over the tile: each sphere visits only the pixels of its 3-sigma box; every
      // pixel still sees the spheres in list order, so the per-pixel arithmetic is unchanged.
      float T[sr::kTilePixels], C[3 * sr::kTilePixels], D[sr::kTilePixels];
      int32_t L[sr::kTilePixels];
      bool done[sr::kTilePixels];
      int remaining = tb.pixels();
      for (int q = 0; q < remaining; ++q) {
        T[q] = 1.f;
        C[3 * q] = C[3 * q + 1] = C[3 * q + 2] = 0.f;
        D[q] = 0.f;
        L[q] = (int32_t)begin;
        done[q] = false;
      }
      for (int64_t j = 0; j < end - begin && remaining > 0; ++j) {
        const sr::Splat& sp = ts.splat[j];
        int bx0, bx1, by0, by1;
        if (!sr::pixel_box(sp, tb.x0, tb.x1, tb.y0, tb.y1, bx0, bx1, by0, by1)) continue;
        for (int py = by0; py < by1; ++py)
          for (int px = bx0; px < bx1; ++px) {
            const int q = tb.slot(px, py);
            if (done[q]) continue;
            float a, G, du, dv, w;
            if (!sr::eval_alpha((float)px, (float)py, sp, ts.o[j], a, G, du, dv)) continue;
            if (!sr::blend_step(a, T[q], w)) {
              done[q] = true;
              --remaining;
              continue;
            }
            C[3 * q] += w * ts.c[3 * j];
            C[3 * q + 1] += w * ts.c[3 * j + 1];
            C[3 * q + 2] += w * ts.c[3 * j + 2];
            D[q] += w * ts.z[j];
            L[q] = (int32_t)(begin + j + 1);
          }
      }
      for (int py = tb.y0; py < tb.y1; ++py)
        for (int px = tb.x0; px < tb.x1; ++px) {
          const int q = tb.slot(px, py);
          const int64_t p = (int64_t)py * cam.width + px;
          color[3 * p] = C[3 * q] + T[q] * bg[0];
          color[3 * p + 1] = C[3 * q + 1] + T[q] * bg[1];
          color[3 * p + 2] = C[3 * q + 2] + T[q] * bg[2];
          alpha[p] = 1.f - T[q];
          depth[p] = sr::normalise_depth(D[q], alpha[p], eps);
          last[p] = L[q];
        }
    }
  }
  return {color_t, depth_t, alpha_t, last_t, ids_t, ranges_t, at::empty({0}, means.options())};
}

// The forward with its pair count M recorded in `room` ((2,) float64: [most pairs seen,
// overflowed 0/1]): the CPU bins exactly whatever the capacity; it records M, and the flag when
// capacity > 0 and M exceeds it (the CUDA kernel then drops the pairs beyond).
std::vector<at::Tensor> forward_capped_cpu(const at::Tensor& means, const at::Tensor& radii,
                                           const at::Tensor& colors, const at::Tensor& opacities,
                                           const at::Tensor& background, double fx, double fy,
                                           double cx, double cy, int64_t width, int64_t height,
                                           double depth_eps, int64_t capacity, at::Tensor room) {
  TORCH_CHECK(room.device().is_cpu() && room.scalar_type() == at::kDouble && room.is_contiguous() &&
                  room.numel() == 2,
              "pair room: expected a contiguous (2,) float64 CPU tensor");
  auto out = forward_cpu(means, radii, colors, opacities, background, fx, fy, cx, cy, width, height,
                         depth_eps);
  const int64_t m = out[4].size(0);
  double* r = room.data_ptr<double>();
  r[0] = std::max(r[0], (double)m);
  if (capacity > 0 && m > capacity) r[1] = 1.0;
  return out;
}

// Record layout per intersection: gu gv gs2 gz gc0 gc1 gc2 go | w  w*e  count
constexpr int kRec = 11;

// Returns [grad_means (N,3), grad_radii (N,), grad_colors (N,3), grad_opacities (N,)] and adds
// the statistics into stat_w / stat_e / stat_n when they are non-empty. g_depth is the gradient of
// the normalised depth (`depth`, the forward's); the output gradients may be strided, and an empty
// one means no gradient. `parts` (the forward's; empty on the CPU) is not read: one part per tile.
std::vector<at::Tensor> backward_cpu(
    const at::Tensor& means, const at::Tensor& radii, const at::Tensor& colors,
    const at::Tensor& opacities, const at::Tensor& background, double fx, double fy, double cx,
    double cy, int64_t width, int64_t height, double depth_eps, const at::Tensor& ids_t,
    const at::Tensor& ranges_t, const at::Tensor& alpha_t, const at::Tensor& depth_t,
    const at::Tensor& last_t, const at::Tensor& /*parts*/, const at::Tensor& g_color,
    const at::Tensor& g_depth, const at::Tensor& g_alpha, const at::Tensor& pixel_err_t, at::Tensor stat_w,
    at::Tensor stat_e, at::Tensor stat_n) {
  const sr::Camera cam = sr::make_camera(fx, fy, cx, cy, width, height);
  const float eps = (float)depth_eps;
  const int64_t n = means.size(0);
  const int n_tiles = cam.tiles_x * cam.tiles_y;
  const int64_t m = ids_t.numel();
  const bool with_stats = stat_w.defined() && stat_w.numel() == n && n > 0;
  const bool with_err = with_stats && pixel_err_t.defined() && pixel_err_t.numel() == width * height;
  for (auto* t : {&alpha_t, &depth_t}) check_input(*t, "alpha and depth", 0);
  const sr::GradImages gi = sr::grad_images(g_color, g_depth, g_alpha, width, height, false);
  const float* mp = means.data_ptr<float>();
  const float* rp = radii.data_ptr<float>();
  const float* cp = colors.data_ptr<float>();
  const float* op = opacities.data_ptr<float>();
  const float* bg = background.data_ptr<float>();
  const int32_t* ids = ids_t.data_ptr<int32_t>();
  const int32_t* ranges = ranges_t.data_ptr<int32_t>();
  const float* alpha = alpha_t.data_ptr<float>();
  const float* depth = depth_t.data_ptr<float>();
  const int32_t* last = last_t.data_ptr<int32_t>();
  at::Tensor err_c;
  const float* err = nullptr;
  if (with_err) {
    err_c = pixel_err_t.to(at::kFloat).contiguous();
    err = err_c.data_ptr<float>();
  }
  // The splats again (same inline function and inputs as the forward: the same bits), instead of
  // keeping an (N, 4) buffer alive between forward and backward. Only listed spheres are read.
  std::vector<sr::Splat> splat_buf(n);
  sr::Splat* splats = splat_buf.data();
#pragma omp parallel for num_threads(num_threads()) schedule(static) if (n >= kParallelSpheres)
  for (int64_t i = 0; i < n; ++i)
    sr::project_sphere(mp[3 * i], mp[3 * i + 1], mp[3 * i + 2], rp[i], cam, splats[i]);
  std::vector<float> rec((size_t)m * kRec, 0.f);

#pragma omp parallel num_threads(num_threads()) if (m >= kParallelPairs)
  {
    TileSpheres ts;
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < n_tiles; ++t) {
      const sr_cpu::TileBox tb(t, ranges, cam);
      const int64_t begin = tb.begin, end = tb.end;
      if (begin == end) continue;
      ts.load(begin, end, ids, splats, op, cp, mp);
      // Per-pixel replay state; spheres visited back to front, each over its 3-sigma box only
      // (records still accumulate over pixels in row-major order: same sums as pixel-major).
      float T[sr::kTilePixels], R[sr::kTilePixels], GC[3 * sr::kTilePixels], GD[sr::kTilePixels],
          E[sr::kTilePixels];
      int32_t L[sr::kTilePixels];
      int64_t tile_last = begin;
      for (int py = tb.y0; py < tb.y1; ++py)
        for (int px = tb.x0; px < tb.x1; ++px) {
          const int q = tb.slot(px, py);
          const int64_t p = (int64_t)py * cam.width + px;
          float ga;
          sr::load_pixel_grads(gi, px, py, alpha[p], depth, p, eps, GC[3 * q], GC[3 * q + 1],
                               GC[3 * q + 2], GD[q], ga);
          E[q] = err ? err[p] : 0.f;
          T[q] = 1.f - alpha[p];
          R[q] = T[q] * (GC[3 * q] * bg[0] + GC[3 * q + 1] * bg[1] + GC[3 * q + 2] * bg[2] - ga);
          L[q] = last[p];
          tile_last = std::max<int64_t>(tile_last, L[q]);
        }
      for (int64_t k = tile_last - 1; k >= begin; --k) {
        const int64_t j = k - begin;
        const sr::Splat& sp = ts.splat[j];
        int bx0, bx1, by0, by1;
        if (!sr::pixel_box(sp, tb.x0, tb.x1, tb.y0, tb.y1, bx0, bx1, by0, by1)) continue;
        const float* c = &ts.c[3 * j];
        float* r = &rec[(size_t)k * kRec];
        for (int py = by0; py < by1; ++py)
          for (int px = bx0; px < bx1; ++px) {
            const int q = tb.slot(px, py);
            if (k >= L[q]) continue;
            float a, G, du, dv, w;
            if (!sr::eval_alpha((float)px, (float)py, sp, ts.o[j], a, G, du, dv)) continue;
            const float gc0 = GC[3 * q], gc1 = GC[3 * q + 1], gc2 = GC[3 * q + 2], gd = GD[q];
            const float gf = gc0 * c[0] + gc1 * c[1] + gc2 * c[2] + gd * ts.z[j];
            const float dLda = sr::unblend_step(a, gf, T[q], R[q], w);
            const sr::SplatGrad g = sr::alpha_backward(dLda, ts.o[j], G, du, dv, sp, cam);
            r[0] += g.gu;
            r[1] += g.gv;
            r[2] += g.gs2;
            r[3] += w * gd;
            r[4] += w * gc0;
            r[5] += w * gc1;
            r[6] += w * gc2;
            r[7] += g.go;
            r[8] += w;
            r[9] += w * E[q];
            r[10] += 1.f;
          }
      }
    }
  }

  // Reduce the records per sphere in list order (deterministic).
  std::vector<float> acc((size_t)n * kRec, 0.f);
  for (int64_t k = 0; k < m; ++k) {
    float* a = &acc[(size_t)ids[k] * kRec];
    const float* r = &rec[(size_t)k * kRec];
    for (int c = 0; c < kRec; ++c) a[c] += r[c];
  }

  auto fopt = means.options();
  at::Tensor g_means = at::zeros({n, 3}, fopt), g_radii = at::zeros({n}, fopt);
  at::Tensor g_colors = at::zeros({n, 3}, fopt), g_opac = at::zeros({n}, fopt);
  float* gm = g_means.data_ptr<float>();
  float* gr = g_radii.data_ptr<float>();
  float* gcs = g_colors.data_ptr<float>();
  float* go = g_opac.data_ptr<float>();
  float* sw = with_stats ? stat_w.data_ptr<float>() : nullptr;
  float* se = with_stats ? stat_e.data_ptr<float>() : nullptr;
  float* sn = with_stats ? stat_n.data_ptr<float>() : nullptr;
#pragma omp parallel for num_threads(num_threads()) schedule(static) if (n >= kParallelSpheres)
  for (int64_t i = 0; i < n; ++i) {
    const float* a = &acc[(size_t)i * kRec];
    if (a[10] == 0.f) continue;  // never blended
    sr::project_backward(mp[3 * i], mp[3 * i + 1], mp[3 * i + 2], rp[i], cam, a[0], a[1], a[2],
                         a[3], gm[3 * i], gm[3 * i + 1], gm[3 * i + 2], gr[i]);
    gcs[3 * i] = a[4];
    gcs[3 * i + 1] = a[5];
    gcs[3 * i + 2] = a[6];
    go[i] = a[7];
    if (sw) {
      sw[i] += a[8];
      se[i] += a[9];
      sn[i] += a[10];
    }
  }
  return {g_means, g_radii, g_colors, g_opac};
}

// The render's ops: their schemas (the arguments and results rasterizer/functions.py describes;
// the statistics buffers, added into, are marked as written) and CPU kernels. raster_cuda.cu
// registers the CUDA kernels.
TORCH_LIBRARY_FRAGMENT(sphere_raster, m) {
  m.def("forward(Tensor means, Tensor radii, Tensor colors, Tensor opacities, Tensor background, "
        "float fx, float fy, float cx, float cy, int width, int height, float depth_eps) -> Tensor[]");
  m.def("forward_capped(Tensor means, Tensor radii, Tensor colors, Tensor opacities, Tensor background, "
        "float fx, float fy, float cx, float cy, int width, int height, float depth_eps, int capacity, "
        "Tensor(a!) room) -> Tensor[]");
  m.def("backward(Tensor means, Tensor radii, Tensor colors, Tensor opacities, Tensor background, "
        "float fx, float fy, float cx, float cy, int width, int height, float depth_eps, Tensor ids, "
        "Tensor ranges, Tensor alpha, Tensor depth, Tensor last, Tensor parts, Tensor g_color, Tensor g_depth, "
        "Tensor g_alpha, Tensor pixel_error, Tensor(a!) weight_sum, Tensor(b!) error_sum, "
        "Tensor(c!) count) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(sphere_raster, CPU, m) {
  m.impl("forward", &forward_cpu);
  m.impl("forward_capped", &forward_capped_cpu);
  m.impl("backward", &backward_cpu);
}
