// CUDA kernels of the sphere rasterizer's render ops, `forward` and `backward` (their schemas are in
// raster_cpu.cpp; the arguments and results are listed in rasterizer/functions.py): the same
// arguments and results as the CPU kernels and the same per-pixel and per-sphere math
// (sphere_math.h).
//
// forward: the tiling (sr_cuda::bin_spheres, bin_cuda.cu, shared with the fused Gauss-Newton
//   kernel, gn_cuda.cu: splats, and per tile its sphere list front to back, one host wait for the
//   pair count) -> per-tile front-to-back blending (one 16x16 block per tile, shared-memory
//   batches of 256 spheres, early exit when every pixel of the tile is done); the expected
//   depth is normalised in the kernel (sr::normalise_depth: sum w z / max(alpha, eps)).
//   16x16 tiles, not the Gauss-Newton pass's 8x8 (gn_cuda.cu): with 8x8 the render's binning
//   (4x the tiles, ~1.8x the pairs) cost more than the shorter lists saved (H200, the benchmark's
//   forward at 1M spheres 640x480 0.63 -> 1.77 ms, 200k 0.39 -> 0.53; fwd+bwd of a 7-Scenes map
//   at 320x240 no faster).
// backward: per-tile back-to-front replay from each pixel's last blended sphere (per warp, from the
//   warp's furthest last sphere); when the tiles are too few to fill the GPU (parts_for), each
//   tile's list in 2 or 4 consecutive parts replayed at once, one block each, a part starting from
//   the state the forward saved where the part behind it begins (transmittance, and the colour and
//   depth sums behind: the replay's R); the depth normalisation's backward per pixel at load
//   (sr::load_pixel_grads); per (pixel, sphere) the splat-space gradients (sr::alpha_backward:
//   centre u v, s2, opacity; plus the direct depth and the colour gradients), reduced per sphere
//   and warp before one atomic per value and warp (pruner statistics alongside); then
//   sr::project_backward once per sphere (project_backward_kernel) to the 3D centre and radius.
// Uses nothing newer than CUDA 11.4 provides.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <climits>
#include <vector>

#include "raster_cuda.h"
#include "sphere_math.h"
#include "tensor_args.h"
#include "tile_block.cuh"
#include "warp_reduce.cuh"

namespace {

constexpr int kRenderTile = sr::kTile;               // tile side of the render (see the top)
constexpr int kBlock = kRenderTile * kRenderTile;    // threads per tile block (one per pixel)
static_assert(kBlock % 32 == 0 && kRenderTile <= sr::kTile, "tile block");
using sr_cuda::kFull;
using sr_cuda::WarpReduceScatter;
// Resident tile blocks per SM the backward is compiled for (register budget 64K / (5 * 256) = 48
// per thread); its per-pixel state would otherwise take it down to 4 blocks.
constexpr int kBwdBlocksPerSM = 1280 / kBlock;

#define SR_CHECK_CUDA() C10_CUDA_KERNEL_LAUNCH_CHECK()

// Part `part` of K of a tile's list [range.x, range.y): [start, end) positions, K equal consecutive
// parts (the last ones empty when the list is shorter than K). The forward and the backward agree
// on these.
struct ListPart {
  int start, end;
  __device__ __forceinline__ ListPart(int2 range, int part, int parts) {
    const int len = (range.y - range.x + parts - 1) / parts;
    start = min(range.x + part * len, range.y);
    end = min(start + len, range.y);
  }
};

// The pixel's state at a part's start, saved by the forward for the backward's parts (PARTS > 1):
// the transmittance there and the colour and depth sums in front of it.
struct PartStart {
  float T, c0, c1, c2, d;
};

// out_depth: the normalised expected depth sum(w z) / max(alpha, depth_eps). PARTS > 1: out_parts
// ((PARTS-1, 5, H, W)) gets, where parts 2..PARTS of the tile's list begin (ListPart), the pixel's
// transmittance and the colour and depth sums behind that point (the backward's start of the part
// in front: raster_bwd_kernel); a pixel that stopped in front has its final state there.
template <int PARTS>
__global__ void __launch_bounds__(kBlock)
    raster_fwd_kernel(sr::Camera cam, const int2* __restrict__ ranges,
                      const int32_t* __restrict__ ids, const float4* __restrict__ splats,
                      const float* __restrict__ means, const float* __restrict__ colors,
                      const float* __restrict__ opac, const float* __restrict__ background,
                      float depth_eps, float* __restrict__ out_color,
                      float* __restrict__ out_depth, float* __restrict__ out_alpha,
                      int32_t* __restrict__ out_last, float* __restrict__ out_parts) {
  __shared__ float4 s_geo[kBlock];
  __shared__ float4 s_col[kBlock];  // c0 c1 c2 opacity
  __shared__ float s_z[kBlock];
  constexpr int NB = PARTS > 1 ? PARTS - 1 : 1;  // part starts saved (PARTS > 1)
  const int tile = blockIdx.x;
  const int tid = threadIdx.x;
  const sr_cuda::TilePixel<kRenderTile> pix(cam, tile, tid);
  const bool inside = pix.inside(cam);
  const int2 range = ranges[tile];
  const float fpx = (float)pix.px, fpy = (float)pix.py;
  float T = 1.f, c0 = 0.f, c1 = 0.f, c2 = 0.f, d = 0.f;
  PartStart at[NB];
  int passed = 0;  // part starts passed; the next one is at list position `next`
  int next = PARTS > 1 ? ListPart(range, 1, PARTS).start : INT_MAX;
  int32_t last = range.x;
  bool done = !inside;
  for (int b0 = range.x; b0 < range.y; b0 += kBlock) {
    if (__syncthreads_count(done) == kBlock) break;
    const int k = b0 + tid;
    if (k < range.y) {
      sr_cuda::stage_sphere(tid, ids[k], splats, colors, opac, means, s_geo, s_col, s_z);
    }
    __syncthreads();
    const int cnt = min(kBlock, range.y - b0);
    // the batch in runs up to the next part start (no test in the blending loop: it cost the
    // forward a fifth); starts clipped to range.y are never reached here
    for (int j = 0; !done && j < cnt;) {
      const int run_end = min(cnt, next - b0);
      for (; j < run_end; ++j) {
        const float4 g = s_geo[j];
        const float4 c = s_col[j];
        float a, G, du, dv, w;
        if (!sr::eval_alpha(fpx, fpy, sr::Splat{g.x, g.y, g.z, g.w}, c.w, a, G, du, dv)) continue;
        if (!sr::blend_step(a, T, w)) {
          done = true;
          break;
        }
        c0 += w * c.x;
        c1 += w * c.y;
        c2 += w * c.z;
        d += w * s_z[j];
        last = b0 + j + 1;
      }
      if (PARTS > 1 && !done && j < cnt) {  // at the part start `next`
#pragma unroll
        for (int b = 0; b < NB; ++b)
          if (b == passed) at[b] = PartStart{T, c0, c1, c2, d};
        ++passed;
        next = passed < PARTS - 1 ? ListPart(range, passed + 1, PARTS).start : INT_MAX;
      }
    }
  }
  if (!inside) return;
  const int p = pix.py * cam.width + pix.px;
  const float alpha = 1.f - T;  // the backward recovers T_final = 1 - alpha
  out_color[3 * p] = c0 + T * background[0];
  out_color[3 * p + 1] = c1 + T * background[1];
  out_color[3 * p + 2] = c2 + T * background[2];
  out_depth[p] = sr::normalise_depth(d, alpha, depth_eps);
  out_alpha[p] = alpha;
  out_last[p] = last;
  if (PARTS > 1) {
    const size_t hw = (size_t)cam.width * cam.height;
#pragma unroll
    for (int b = 0; b < NB; ++b) {
      const PartStart a = b < passed ? at[b] : PartStart{T, c0, c1, c2, d};  // not reached: final
      float* o = out_parts + 5 * b * hw + p;
      o[0] = a.T;
      o[hw] = c0 - a.c0;
      o[2 * hw] = c1 - a.c1;
      o[3 * hw] = c2 - a.c2;
      o[4 * hw] = d - a.d;
    }
  }
}

__device__ __forceinline__ int warp_max(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

template <bool STATS>
__global__ void __launch_bounds__(kBlock, kBwdBlocksPerSM)
    raster_bwd_kernel(sr::Camera cam, const int2* __restrict__ ranges,
                      const int32_t* __restrict__ ids, const float* __restrict__ means,
                      const float* __restrict__ radii, const float* __restrict__ colors,
                      const float* __restrict__ opac, const float* __restrict__ background,
                      const float* __restrict__ alpha_img, const float* __restrict__ depth_img,
                      float depth_eps, const int32_t* __restrict__ last,
                      const float* __restrict__ part_starts, int parts, sr::GradImages gi,
                      const float* __restrict__ pixel_err, int n, float* __restrict__ g_buf,
                      float* __restrict__ st_w, float* __restrict__ st_e,
                      float* __restrict__ st_n) {
  // One block per (tile, part): block b replays part b / tiles of tile b % tiles' list (ListPart),
  // from the pixel's state at the part's end: the forward's final state for the last part, the
  // state the forward saved where the next part begins (part_starts) for the others.
  // g_buf layout: [gu gv gz per sphere 3N | gs2 N | grad colors 3N | grad opacities N]: the
  // splat-space sums; project_backward_kernel turns the first 4N into grad means and radii.
  __shared__ float4 s_geo[kBlock];  // u v ia ic
  __shared__ float4 s_col[kBlock];  // c0 c1 c2 opacity
  __shared__ float s_z[kBlock];
  __shared__ int32_t s_id[kBlock];
  __shared__ int s_warp_last[kBlock / 32];
  constexpr int NV = STATS ? 16 : 8;  // 11 values with statistics, padded to 16
  constexpr int kGroup = 32 / NV;
  const int n_tiles = cam.tiles_x * cam.tiles_y;
  const int tile = blockIdx.x % n_tiles, part = blockIdx.x / n_tiles;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const sr_cuda::TilePixel<kRenderTile> pix(cam, tile, tid);
  const bool inside = pix.inside(cam);
  const int px = pix.px, py = pix.py;
  const ListPart list(ranges[tile], part, parts);
  if (list.start == list.end) return;  // uniform per block
  const int p = py * cam.width + px;
  const float fpx = (float)px, fpy = (float)py;

  // After the warp reduction, lane group q holds value q: its first lane adds it at
  // dst_base[dst_stride * sphere] (values: gu, gv, direct depth gradient gz, gs2, colour 0 1 2,
  // opacity, then the statistics w, w * e, count).
  float* dst_base = nullptr;
  int dst_stride = 1;
  if (lane % kGroup == 0) {
    const int q = lane / kGroup;
    if (q < 3) {
      dst_base = g_buf + q;
      dst_stride = 3;
    } else if (q == 3) {
      dst_base = g_buf + 3 * (size_t)n;
    } else if (q < 7) {
      dst_base = g_buf + 4 * (size_t)n + (q - 4);
      dst_stride = 3;
    } else if (q == 7) {
      dst_base = g_buf + 7 * (size_t)n;
    } else if (q == 8) {
      dst_base = st_w;
    } else if (q == 9) {
      dst_base = st_e;
    } else if (q == 10) {
      dst_base = st_n;
    }
  }

  int32_t my_last = list.start;  // the pixel's last contributor in this part + 1
  float T = 1.f, R = 0.f, gc0 = 0.f, gc1 = 0.f, gc2 = 0.f, gd = 0.f, e = 0.f;
  if (inside) {
    my_last = min(last[p], list.end);
    const float A = alpha_img[p];
    T = 1.f - A;
    float ga;
    sr::load_pixel_grads(gi, px, py, A, depth_img, p, depth_eps, gc0, gc1, gc2, gd, ga);
    R = T * (gc0 * background[0] + gc1 * background[1] + gc2 * background[2] - ga);
    if (part < parts - 1 && my_last > list.start) {  // R: + what the parts behind blended
      const size_t hw = (size_t)cam.width * cam.height;
      const float* at = part_starts + 5 * part * hw + p;
      T = at[0];
      R += gc0 * at[hw] + gc1 * at[2 * hw] + gc2 * at[3 * hw] + gd * at[4 * hw];
    }
    if (STATS && pixel_err != nullptr) e = pixel_err[p];
  }
  // Nothing past the block's furthest last contributor needs replaying, and nothing past the
  // warp's furthest last contributor needs evaluating in that warp.
  const int warp_last = warp_max(my_last);
  if (lane == 0) s_warp_last[tid >> 5] = warp_last;
  __syncthreads();
  int block_last = s_warp_last[0];
#pragma unroll
  for (int w = 1; w < kBlock / 32; ++w) block_last = max(block_last, s_warp_last[w]);

  for (int b_end = block_last; b_end > list.start; b_end -= kBlock) {
    const int cnt = min(kBlock, b_end - list.start);
    __syncthreads();  // the previous batch is no longer read
    if (tid < cnt) {
      const int k = b_end - 1 - tid;
      const int32_t i = ids[k];
      s_id[tid] = i;
      const float z = means[3 * i + 2];
      // recompute the splat (same inline function and inputs as the forward: identical bits)
      // instead of keeping an (N, 4) buffer alive between forward and backward
      sr::Splat sp;
      sr::project_sphere(means[3 * i], means[3 * i + 1], z, radii[i], cam, sp);
      s_geo[tid] = make_float4(sp.u, sp.v, sp.ia, sp.ic);
      s_col[tid] = sr_cuda::colour_opacity(i, colors, opac);
      s_z[tid] = z;
    }
    __syncthreads();
    // batch entry j is list position b_end - 1 - j: skip the entries past the warp's last
    for (int j = max(0, b_end - warp_last); j < cnt; ++j) {
      const int k = b_end - 1 - j;
      const float4 g = s_geo[j];
      const float4 c = s_col[j];
      const sr::Splat sp{g.x, g.y, g.z, g.w};
      float a = 0.f, G = 0.f, du = 0.f, dv = 0.f;
      const bool valid = k < my_last && sr::eval_alpha(fpx, fpy, sp, c.w, a, G, du, dv);
      if (!__any_sync(kFull, valid)) continue;
      float v[NV];
#pragma unroll
      for (int q = 0; q < NV; ++q) v[q] = 0.f;
      if (valid) {
        const float gf = gc0 * c.x + gc1 * c.y + gc2 * c.z + gd * s_z[j];
        float w;
        const float dLda = sr::unblend_step(a, gf, T, R, w);
        // the splat read again from shared memory rather than kept in registers across
        // unblend_step (one spilled register less in the statistics variant)
        const float4 g2 = s_geo[j];
        const sr::SplatGrad sg =
            sr::alpha_backward(dLda, c.w, G, du, dv, sr::Splat{g2.x, g2.y, g2.z, g2.w}, cam);
        v[0] = sg.gu;
        v[1] = sg.gv;
        v[2] = w * gd;
        v[3] = sg.gs2;
        v[4] = w * gc0;
        v[5] = w * gc1;
        v[6] = w * gc2;
        v[7] = sg.go;
        if (STATS) {
          v[8 % NV] = w;
          v[9 % NV] = w * e;
          v[10 % NV] = 1.f;
        }
      }
      WarpReduceScatter<NV, 16>::run(v, lane);
      if (dst_base != nullptr) atomicAdd(dst_base + dst_stride * s_id[j], v[0]);
    }
  }
}

// One thread per sphere, after raster_bwd_kernel: the summed splat-space gradients in g_buf's first
// 4N values (gu gv gz per sphere | gs2) become the gradients of the centre and the radius, in
// place. Spheres that no pixel reached (all four 0; culled ones among them) keep zeros.
__global__ void project_backward_kernel(int n, sr::Camera cam, const float* __restrict__ means,
                                        const float* __restrict__ radii, float* __restrict__ g_buf) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float* gm = g_buf + 3 * (size_t)i;
  float* gr = g_buf + 3 * (size_t)n + i;
  const float gu = gm[0], gv = gm[1], gz = gm[2], gs2 = *gr;
  if (gu == 0.f && gv == 0.f && gz == 0.f && gs2 == 0.f) return;
  sr::project_backward(means[3 * i], means[3 * i + 1], means[3 * i + 2], radii[i], cam, gu, gv,
                       gs2, gz, gm[0], gm[1], gm[2], *gr);
}

void check_input(const at::Tensor& t, const char* name) { sr::check_input(t, name, /*cuda=*/true); }

using sr_cuda::blocks_for;

// Parts the backward walks each tile's list in (1, 2 or 4; one block per tile and part): the fewest
// that give the backward as many blocks as the GPU holds at once (its SMs x kBwdBlocksPerSM;
// sr_cuda::parts_to_fill); H100, 320x240: 300 tiles, 2.3 blocks an SM walked whole.
// SPHERE_RENDER_PARTS=1|2|4 forces it. The forward decides, for the backward of its render.
int parts_for(int n_tiles, int device) {
  return sr_cuda::parts_to_fill(n_tiles, (long long)sr_cuda::sm_count(device) * kBwdBlocksPerSM,
                                "SPHERE_RENDER_PARTS");
}

}  // namespace

namespace {

// The forward of both ops: exact binning (one host wait, `capped` null) or capped (none).
std::vector<at::Tensor> forward_impl(const at::Tensor& means, const at::Tensor& radii,
                                     const at::Tensor& colors, const at::Tensor& opacities,
                                     const at::Tensor& background, double fx, double fy, double cx,
                                     double cy, int64_t width, int64_t height, double depth_eps,
                                     const sr_cuda::PairRoom* capped) {
  for (auto& pr : {std::make_pair(&means, "means"), std::make_pair(&radii, "radii"),
                   std::make_pair(&colors, "colors"), std::make_pair(&opacities, "opacities"),
                   std::make_pair(&background, "background")})
    check_input(*pr.first, pr.second);
  TORCH_CHECK(depth_eps > 0.0, "depth_eps must be > 0");
  const c10::cuda::CUDAGuard guard(means.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const sr::Camera cam = sr::make_camera(fx, fy, cx, cy, width, height, kRenderTile);
  const int n_tiles = cam.tiles_x * cam.tiles_y;
  auto opt = means.options();
  auto iopt = opt.dtype(at::kInt);
  sr_cuda::Bins bins = sr_cuda::bin_spheres(means, radii, cam, stream, capped);
  const int2* ranges_p = reinterpret_cast<const int2*>(bins.ranges.data_ptr<int32_t>());
  const float4* splats = reinterpret_cast<const float4*>(bins.splats.data_ptr<float>());
  at::Tensor ids = bins.ids, ranges = bins.ranges;

  at::Tensor color = at::empty({height, width, 3}, opt);
  at::Tensor depth = at::empty({height, width}, opt);
  at::Tensor alpha = at::empty({height, width}, opt);
  at::Tensor last = at::empty({height, width}, iopt);
  const int parts = parts_for(n_tiles, means.get_device());
  at::Tensor part_starts = parts > 1 ? at::empty({parts - 1, 5, height, width}, opt) : at::empty({0}, opt);
  auto launch = [&](auto kernel) {
    kernel<<<n_tiles, kBlock, 0, stream>>>(
        cam, ranges_p, ids.data_ptr<int32_t>(), splats, means.data_ptr<float>(),
        colors.data_ptr<float>(), opacities.data_ptr<float>(), background.data_ptr<float>(),
        (float)depth_eps, color.data_ptr<float>(), depth.data_ptr<float>(), alpha.data_ptr<float>(),
        last.data_ptr<int32_t>(), parts > 1 ? part_starts.data_ptr<float>() : nullptr);
  };
  if (parts == 4) launch(raster_fwd_kernel<4>);
  else if (parts == 2) launch(raster_fwd_kernel<2>);
  else launch(raster_fwd_kernel<1>);
  SR_CHECK_CUDA();
  return {color, depth, alpha, last, ids, ranges, part_starts};
}

}  // namespace

// Returns [color (H,W,3), depth (H,W), alpha (H,W), last (H,W) int32, ids (M,) int32,
//          ranges (tiles,2) int32, part_starts]; depth = sum w z / max(alpha, depth_eps) (metres).
// `last` is each pixel's last blended list position + 1; part_starts: (K-1, 5, H, W) float32 for a
// backward in K parts (parts_for), empty for one. One host wait (the pair count, in bin_spheres).
std::vector<at::Tensor> forward_cuda(const at::Tensor& means, const at::Tensor& radii,
                                     const at::Tensor& colors, const at::Tensor& opacities,
                                     const at::Tensor& background, double fx, double fy, double cx,
                                     double cy, int64_t width, int64_t height, double depth_eps) {
  return forward_impl(means, radii, colors, opacities, background, fx, fy, cx, cy, width, height,
                      depth_eps, nullptr);
}

// The forward with its pair count recorded in `room` ((2,) float64 on the device: [most pairs
// seen, overflowed 0/1]): capacity > 0 bins with room for that many pairs and no host wait (ids
// has `capacity` entries; on overflow the pairs beyond are dropped and the flag is set); capacity
// <= 0 bins exactly (one host wait) and records the count.
std::vector<at::Tensor> forward_capped_cuda(const at::Tensor& means, const at::Tensor& radii,
                                            const at::Tensor& colors, const at::Tensor& opacities,
                                            const at::Tensor& background, double fx, double fy,
                                            double cx, double cy, int64_t width, int64_t height,
                                            double depth_eps, int64_t capacity, at::Tensor room) {
  TORCH_CHECK(room.is_cuda() && room.device() == means.device() && room.scalar_type() == at::kDouble &&
                  room.is_contiguous() && room.numel() == 2,
              "pair room: expected a contiguous (2,) float64 tensor on ", means.device());
  if (capacity <= 0) {
    auto out = forward_impl(means, radii, colors, opacities, background, fx, fy, cx, cy, width,
                            height, depth_eps, nullptr);
    room.narrow(0, 0, 1).clamp_min_((double)out[4].size(0));
    return out;
  }
  const sr_cuda::PairRoom capped{capacity, room.data_ptr<double>(), room.data_ptr<double>() + 1};
  return forward_impl(means, radii, colors, opacities, background, fx, fy, cx, cy, width, height,
                      depth_eps, &capped);
}

// Returns [grad_means (N,3), grad_radii (N,), grad_colors (N,3), grad_opacities (N,)] (four
// contiguous pieces of one zero-filled buffer) and adds the statistics into stat_w / stat_e /
// stat_n when they are non-empty. g_depth is the gradient of the normalised depth (`depth`, the
// forward's); the output gradients may be strided, and an empty one means no gradient.
std::vector<at::Tensor> backward_cuda(
    const at::Tensor& means, const at::Tensor& radii, const at::Tensor& colors,
    const at::Tensor& opacities, const at::Tensor& background, double fx, double fy, double cx,
    double cy, int64_t width, int64_t height, double depth_eps, const at::Tensor& ids,
    const at::Tensor& ranges, const at::Tensor& alpha, const at::Tensor& depth,
    const at::Tensor& last, const at::Tensor& part_starts, const at::Tensor& g_color, const at::Tensor& g_depth,
    const at::Tensor& g_alpha, const at::Tensor& pixel_err, at::Tensor stat_w, at::Tensor stat_e,
    at::Tensor stat_n) {
  const sr::GradImages gi = sr::grad_images(g_color, g_depth, g_alpha, width, height, true);
  check_input(alpha, "alpha");
  check_input(depth, "depth");
  const c10::cuda::CUDAGuard guard(means.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const sr::Camera cam = sr::make_camera(fx, fy, cx, cy, width, height, kRenderTile);
  const int n = (int)means.size(0);
  const int n_tiles = cam.tiles_x * cam.tiles_y;
  at::Tensor buf = at::empty({8 * (int64_t)n}, means.options());
  if (n > 0)
    C10_CUDA_CHECK(cudaMemsetAsync(buf.data_ptr<float>(), 0, 8 * (size_t)n * sizeof(float), stream));
  at::Tensor g_means = buf.narrow(0, 0, 3 * n).view({n, 3});
  at::Tensor g_radii = buf.narrow(0, 3 * n, n);
  at::Tensor g_colors = buf.narrow(0, 4 * n, 3 * n).view({n, 3});
  at::Tensor g_opac = buf.narrow(0, 7 * n, n);
  if (n == 0 || ids.numel() == 0) return {g_means, g_radii, g_colors, g_opac};
  const bool stats = stat_w.numel() == n;
  if (stats) {
    check_input(stat_w, "stats.weight_sum");
    check_input(stat_e, "stats.error_sum");
    check_input(stat_n, "stats.count");
  }
  const bool with_err = stats && pixel_err.numel() == width * height;
  if (with_err) check_input(pixel_err, "stats.pixel_error");
  // the forward's part starts: K - 1 of them, or none (one part)
  const int parts = part_starts.numel() == 0 ? 1 : (int)part_starts.size(0) + 1;
  if (parts > 1) {
    check_input(part_starts, "part_starts");
    TORCH_CHECK(part_starts.dim() == 4 && (parts == 2 || parts == 4) && part_starts.size(1) == 5 &&
                    part_starts.size(2) == height && part_starts.size(3) == width,
                "part_starts: expected (1 or 3, 5, ", height, ", ", width, "), got ", part_starts.sizes());
  }
  auto launch = [&](auto kernel) {
    kernel<<<n_tiles * parts, kBlock, 0, stream>>>(
        cam, reinterpret_cast<const int2*>(ranges.data_ptr<int32_t>()), ids.data_ptr<int32_t>(),
        means.data_ptr<float>(), radii.data_ptr<float>(), colors.data_ptr<float>(),
        opacities.data_ptr<float>(), background.data_ptr<float>(), alpha.data_ptr<float>(),
        depth.data_ptr<float>(), (float)depth_eps, last.data_ptr<int32_t>(),
        parts > 1 ? part_starts.data_ptr<float>() : nullptr, parts, gi, with_err ? pixel_err.data_ptr<float>() : nullptr, n, buf.data_ptr<float>(),
        stats ? stat_w.data_ptr<float>() : nullptr, stats ? stat_e.data_ptr<float>() : nullptr,
        stats ? stat_n.data_ptr<float>() : nullptr);
  };
  if (stats)
    launch(raster_bwd_kernel<true>);
  else
    launch(raster_bwd_kernel<false>);
  SR_CHECK_CUDA();
  project_backward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(
      n, cam, means.data_ptr<float>(), radii.data_ptr<float>(), buf.data_ptr<float>());
  SR_CHECK_CUDA();
  return {g_means, g_radii, g_colors, g_opac};
}

TORCH_LIBRARY_IMPL(sphere_raster, CUDA, m) {
  m.impl("forward", &forward_cuda);
  m.impl("forward_capped", &forward_capped_cuda);
  m.impl("backward", &backward_cuda);
}
