// CUDA fused Gauss-Newton kernel (the model is in rasterizer/gauss_newton.py; the CPU twin is
// gn_cpu.cpp, the shared per-sphere and per-pixel math gn_math.h):
//   pose Jacobian per sphere (pose_jacobian_kernel, one thread per sphere, once per call; it also
//   zeroes the (kGnValues,) float64 result and, in the LM's evaluation, moves the world-frame
//   means to the camera) -> the render's tiling (sr_cuda::bin_spheres, bin_cuda.cu: one host wait
//   for the pair count, as every render; none when capped) -> gn_tile_kernel: one 8x8 block per
//   tile (kGnTile), shared-memory batches of 64 spheres front to back as in the render, each pixel
//   carrying its pose derivatives (sr::gn_blend) and ending with its share of H, g, cost and the
//   statistics (sr::gn_pixel_values); on a launch of fewer tiles than the GPU has room for, each
//   tile's list is walked in 1, 2 or 4 consecutive parts by as many 64-thread segments of its
//   block and the parts joined (sr::gn_combine; segments_for says when); per block the 50 values
//   are summed in float (warp
//   reduce-scatter, then 2 warps through shared memory) and added into the result with one float64
//   atomic per value.
// Why 8x8 tiles and not the render's 16x16: a pixel walks its tile's whole list (real maps rarely
// take a pixel's transmittance to the cut-off), so the list's length is the kernel's latency and
// most of its work; on a 7-Scenes map at 320x240 a 16x16 tile lists 161 spheres (the longest 295,
// at 160x120 442 / 862) of which a pixel blends ~19, an 8x8 tile 72 (128, at 160x120 172 / 320)
// (python -m slam.tools.tile_lists --config 7scenes.yaml --set data.path=... --map-frames 60).
// The results do not depend on the tiling (the q > 9 cut-off), only the float sums' order.
// No image-sized buffer: the only outputs are the 50 float64 values.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <vector>

#include "gn_math.h"
#include "lm_math.h"
#include "raster_cuda.h"
#include "sphere_math.h"
#include "tensor_args.h"
#include "tile_block.cuh"
#include "warp_reduce.cuh"

namespace {

constexpr int kGnTile = 8;                   // tile side of the pass (see the top of this file)
constexpr int kBlock = kGnTile * kGnTile;    // threads per tile block (one per pixel)
constexpr int kWarps = kBlock / 32;
static_assert(kBlock % 32 == 0 && kBlock >= sr::kGnValues && kGnTile <= sr::kTile, "tile block");
constexpr int kPad = 64;  // the kGnValues values padded to two warp reduce-scatters of 32
static_assert(sr::kGnValues <= kPad && sr::kGnValues > 32, "two reduce-scatter rounds");
static_assert(sizeof(sr::PoseJac) == 64, "PoseJac is loaded as four float4");
// Resident threads (blocks of one segment) per SM the derivative variant is compiled for (<= 128
// registers per thread).
constexpr int kGnThreadsPerSM = 512;
constexpr int kGnBlocksPerSM = kGnThreadsPerSM / kBlock;
constexpr int kStateFloats = (int)(sizeof(sr::GnState) / sizeof(float));
static_assert(sizeof(sr::GnState) == 35 * sizeof(float), "GnState: T, C[3], D, dT[6], dC[18], dD[6]");

#define SR_CHECK_CUDA() C10_CUDA_KERNEL_LAUNCH_CHECK()

// One thread per sphere: the pose Jacobian of its splat (culled spheres: none, they are in no
// tile list). `lm` (nullable): an LM state (lm_math.h); the pivot is then its kLmPivot, and nothing
// is done once its level is done. `world` (nullable, with `lm`): world-frame means, moved to the
// camera frame at the state's trial pose (sr::lm_trial_to_camera) into `means` first. Block 0
// zeroes the kGnValues sums `out` that the tile kernel adds into.
__global__ void pose_jacobian_kernel(int n, const float* __restrict__ world,
                                     float* __restrict__ means, const float* __restrict__ radii,
                                     sr::Camera cam, float pivot_z, sr::PoseJac* __restrict__ jac,
                                     const double* __restrict__ lm, double* __restrict__ out) {
  if (blockIdx.x == 0 && threadIdx.x < sr::kGnValues) out[threadIdx.x] = 0.0;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (lm != nullptr) {
    if (lm[sr::kLmDone] != 0.0) return;
    pivot_z = (float)lm[sr::kLmPivot];
    if (world != nullptr) sr::lm_trial_to_camera(lm, world + 3 * (size_t)i, means + 3 * (size_t)i);
  }
  const float x = means[3 * i], y = means[3 * i + 1], z = means[3 * i + 2], r = radii[i];
  sr::Splat s;
  if (!sr::project_sphere(x, y, z, r, cam, s)) return;  // culled: in no tile list, never read
  jac[i] = sr::pose_jacobian(x, y, z, r, pivot_z, cam, s);
}

// Shared memory of a tile block of K segments: the staged batches (one slot per thread) while
// the parts are walked, then the parts' states for the join (segments 1 .. K-1, field-major).
template <bool DERIV, int K>
union GnShared {
  struct {
    float4 geo[kBlock * K];  // u v ia ic
    float4 col[kBlock * K];  // c0 c1 c2 opacity
    float z[kBlock * K];
    sr::PoseJac jac[DERIV ? kBlock * K : 1];
  } stage;
  float part[K > 1 ? K - 1 : 1][kStateFloats][kBlock];
};

// A pixel's compositing state to / from the field-major rows dst[f][pixel] (DERIV: all
// kStateFloats fields; else T, C, D).
template <bool DERIV>
__device__ __forceinline__ void put_state(float (*dst)[kBlock], int p, const sr::GnState& S) {
  dst[0][p] = S.T;
  dst[1][p] = S.C[0];
  dst[2][p] = S.C[1];
  dst[3][p] = S.C[2];
  dst[4][p] = S.D;
  if (DERIV) {
#pragma unroll
    for (int k = 0; k < sr::kGnPose; ++k) {
      dst[5 + k][p] = S.dT[k];
      dst[11 + k][p] = S.dD[k];
      dst[17 + 3 * k][p] = S.dC[3 * k];
      dst[18 + 3 * k][p] = S.dC[3 * k + 1];
      dst[19 + 3 * k][p] = S.dC[3 * k + 2];
    }
  }
}

template <bool DERIV>
__device__ __forceinline__ void get_state(float (*src)[kBlock], int p, sr::GnState& S) {
  S.T = src[0][p];
  S.C[0] = src[1][p];
  S.C[1] = src[2][p];
  S.C[2] = src[3][p];
  S.D = src[4][p];
  if (DERIV) {
#pragma unroll
    for (int k = 0; k < sr::kGnPose; ++k) {
      S.dT[k] = src[5 + k][p];
      S.dD[k] = src[11 + k][p];
      S.dC[3 * k] = src[17 + 3 * k][p];
      S.dC[3 * k + 1] = src[18 + 3 * k][p];
      S.dC[3 * k + 2] = src[19 + 3 * k][p];
    }
  }
}

// One block per tile, K segments of kBlock threads (one per pixel): segment s walks the s-th of K
// equal consecutive parts of the tile's list, the parts are joined in order (sr::gn_combine). K = 1
// is the plain front-to-back walk. With K > 1 a first, cheap walk (alpha only) gives each part's
// transmittance, so each segment knows the pixel's transmittance in front of its part and stops
// where the pixel stops (gn_blend's T_front); the join ends at the part the pixel stopped in.
template <bool DERIV, int K>
__global__ void __launch_bounds__(kBlock * K, DERIV ? kGnBlocksPerSM / K : 1)
    gn_tile_kernel(sr::Camera cam, sr::GnSettings st, const double* __restrict__ lm,
                   const int2* __restrict__ ranges,
                   const int32_t* __restrict__ ids, const float4* __restrict__ splats,
                   const sr::PoseJac* __restrict__ jac, const float* __restrict__ means,
                   const float* __restrict__ colors, const float* __restrict__ opac,
                   const float* __restrict__ background, const float* __restrict__ obs_color,
                   const float* __restrict__ obs_depth, const bool* __restrict__ valid,
                   double* __restrict__ out) {
  constexpr int kThreads = kBlock * K;
  __shared__ GnShared<DERIV, K> sm;
  __shared__ float s_T[K][kBlock];      // each part's transmittance (K > 1)
  __shared__ bool s_stopped[K][kBlock];  // the pixel stopped inside the part
  __shared__ float s_red[kWarps][kPad];
  if (lm != nullptr && lm[sr::kLmDone] != 0.0) return;  // an LM state whose level is done
  const int tile = blockIdx.x;
  const int tid = threadIdx.x;
  const int seg = tid / kBlock, ptid = tid % kBlock;  // segment (warp-uniform), pixel
  const int lane = tid & 31;
  const sr_cuda::TilePixel<kGnTile> pix(cam, tile, ptid);
  const bool inside = pix.inside(cam);
  const int2 range = ranges[tile];
  const int part = (range.y - range.x + K - 1) / K;
  const int s0 = min(range.x + seg * part, range.y), s1 = min(s0 + part, range.y);
  const int base = seg * kBlock;  // this segment's slots in the staged batch
  const float fpx = (float)pix.px, fpy = (float)pix.py;

  float T_front = 1.0f;  // the pixel's transmittance in front of this segment's part
  if (K > 1) {
    float T = 1.0f;
    bool done = !inside;
    for (int off = 0; off < part; off += kBlock) {
      if (__syncthreads_count(done) == kThreads) break;
      const int k = s0 + off + ptid;
      if (k < s1) {
        const int32_t i = ids[k];
        sm.stage.geo[tid] = splats[i];
        sm.stage.col[tid].w = opac[i];
      }
      __syncthreads();
      const int cnt = min(kBlock, s1 - s0 - off);
      for (int j = 0; !done && j < cnt; ++j) {
        const float4 g = sm.stage.geo[base + j];
        const sr::Splat sp{g.x, g.y, g.z, g.w};
        float a, G, du, dv;
        if (!sr::eval_alpha(fpx, fpy, sp, sm.stage.col[base + j].w, a, G, du, dv)) continue;
        T = T * (1.0f - a);
        if (T <= sr::kTMin) {  // the pixel stops here or in front: nothing behind counts
          T = 0.0f;
          done = true;
        }
      }
    }
    s_T[seg][ptid] = T;
    __syncthreads();
    for (int b = 0; b < seg; ++b) T_front = T_front * s_T[b][ptid];
  }

  sr::GnState S;
  sr::gn_state_init<DERIV>(S);
  bool done = !inside || !(T_front > sr::kTMin);
  bool stopped = false;
  for (int off = 0; off < part; off += kBlock) {
    if (__syncthreads_count(done) == kThreads) break;
    const int k = s0 + off + ptid;
    if (k < s1) {
      const int32_t i = ids[k];
      sr_cuda::stage_sphere(tid, i, splats, colors, opac, means, sm.stage.geo, sm.stage.col, sm.stage.z);
      if (DERIV) sm.stage.jac[tid] = jac[i];
    }
    __syncthreads();
    const int cnt = min(kBlock, s1 - s0 - off);
    for (int j = 0; !done && j < cnt; ++j) {
      const float4 g = sm.stage.geo[base + j];
      const float4 c = sm.stage.col[base + j];
      const sr::Splat sp{g.x, g.y, g.z, g.w};
      float a, G, du, dv;
      if (!sr::eval_alpha(fpx, fpy, sp, c.w, a, G, du, dv)) continue;
      if (!sr::gn_blend<DERIV>(S, sp, sm.stage.jac[DERIV ? base + j : 0], c.w, a, G, du, dv, c.x,
                               c.y, c.z, sm.stage.z[base + j], T_front)) {
        done = stopped = true;
        break;
      }
    }
  }
  if (K > 1) {  // join the parts in order into segment 0's state
    __syncthreads();  // every batch read: the staging memory becomes the parts' states
    if (seg > 0) put_state<DERIV>(sm.part[seg - 1], ptid, S);
    s_stopped[seg][ptid] = stopped;
    __syncthreads();
    if (seg == 0 && !stopped) {
      for (int b = 1; b < K; ++b) {
        sr::GnState B;
        get_state<DERIV>(sm.part[b - 1], ptid, B);
        sr::gn_combine<DERIV>(S, B);
        if (s_stopped[b][ptid]) break;
      }
    }
  }

  float v[kPad];
  if (seg == 0) {
    if (inside) {
      const int p = pix.py * cam.width + pix.px;
      if (lm != nullptr) {  // the LM state's trial exposure and pivot, read only here (no registers held)
        st.gain = (float)exp(lm[sr::kLmTrialExp]);
        st.bias = (float)lm[sr::kLmTrialExp + 1];
        st.pivot_z = (float)lm[sr::kLmPivot];
      }
      sr::ObsGradient og{};
      if (DERIV && st.obs_weight > 0.f && valid[p])
        og = sr::obs_gradient(obs_color, obs_depth, pix.px, pix.py, cam);
      sr::gn_pixel_values<DERIV>(S, st, valid[p], background[0], background[1], background[2],
                                 obs_color[3 * p], obs_color[3 * p + 1], obs_color[3 * p + 2],
                                 obs_depth[p], og, cam.fx, cam.fy, v);
    } else {
#pragma unroll
      for (int i = 0; i < sr::kGnValues; ++i) v[i] = 0.f;
    }
#pragma unroll
    for (int i = sr::kGnValues; i < kPad; ++i) v[i] = 0.f;
    // Block sums: lane l of each warp gets value l (then 32 + l) of the warp, the warps add up in
    // shared memory. Without derivatives values 0..31 (H) are 0: one round only.
    if (DERIV) {
      sr_cuda::WarpReduceScatter<32, 16>::run(v, lane);
      s_red[tid >> 5][lane] = v[0];
    }
    sr_cuda::WarpReduceScatter<32, 16>::run(v + 32, lane);
    s_red[tid >> 5][32 + lane] = v[32];
  }
  __syncthreads();
  if (tid < sr::kGnValues && (DERIV || tid >= 32)) {
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) t += s_red[w][tid];
    if (t != 0.f) atomicAdd(out + tid, (double)t);
  }
}

// Segments per tile block (1, 2 or 4): the fewest that give the launch as many threads as the
// GPU holds at once (its SMs x kGnThreadsPerSM; sr_cuda::parts_to_fill): on an H200 a 160x120
// level's 300 tiles took 1.7x as long as a 320x240 level's 1200 walked whole
// (docs/benchmarks.md#tracker-profile). SPHERE_GN_SEGMENTS=1|2|4 forces it.
int segments_for(int n_tiles, int device) {
  return sr_cuda::parts_to_fill((long long)n_tiles * kBlock,
                                (long long)sr_cuda::sm_count(device) * kGnThreadsPerSM, "SPHERE_GN_SEGMENTS");
}

// The pass proper: zero `out` (kGnValues float64, device), pose Jacobian, binning (exact, or
// capped without a host wait), tile kernel. `lm`: nullable LM state (see pose_jacobian_kernel /
// gn_tile_kernel). `world` (nullable, needs `lm` and derivatives): world-frame means, moved into
// the camera-frame `means` by the Jacobian kernel; otherwise `means` are camera-frame already.
void run_gauss_newton(const at::Tensor* world, const at::Tensor& means, const at::Tensor& radii,
                      const at::Tensor& colors, const at::Tensor& opacities,
                      const at::Tensor& background, const at::Tensor& obs_color,
                      const at::Tensor& obs_depth, const at::Tensor& valid, const sr::Camera& cam,
                      const sr::GnSettings& st, bool derivatives, const double* lm, double* out,
                      const sr_cuda::PairRoom* capped, cudaStream_t stream) {
  const int n = (int)means.size(0);
  const int n_tiles = cam.tiles_x * cam.tiles_y;
  TORCH_CHECK(world == nullptr || (lm != nullptr && derivatives), "gauss_newton: world-frame means need an LM state");
  at::Tensor jac_t;
  const sr::PoseJac* jac = nullptr;
  if (derivatives) {  // zeroes `out` too
    jac_t = at::empty({std::max(n, 1), (int64_t)(sizeof(sr::PoseJac) / sizeof(float))}, means.options());
    auto* jp = reinterpret_cast<sr::PoseJac*>(jac_t.data_ptr<float>());
    pose_jacobian_kernel<<<sr_cuda::blocks_for(std::max(n, 1), 256), 256, 0, stream>>>(
        n, world != nullptr ? world->data_ptr<float>() : nullptr, means.data_ptr<float>(),
        radii.data_ptr<float>(), cam, st.pivot_z, jp, lm, out);
    SR_CHECK_CUDA();
    jac = jp;
  } else {
    C10_CUDA_CHECK(cudaMemsetAsync(out, 0, sr::kGnValues * sizeof(double), stream));
  }
  sr_cuda::Bins bins = sr_cuda::bin_spheres(means, radii, cam, stream, capped);
  auto launch = [&](auto kernel, int segments) {
    kernel<<<n_tiles, kBlock * segments, 0, stream>>>(
        cam, st, lm, reinterpret_cast<const int2*>(bins.ranges.data_ptr<int32_t>()),
        bins.ids.data_ptr<int32_t>(), reinterpret_cast<const float4*>(bins.splats.data_ptr<float>()),
        jac, means.data_ptr<float>(), colors.data_ptr<float>(), opacities.data_ptr<float>(),
        background.data_ptr<float>(), obs_color.data_ptr<float>(), obs_depth.data_ptr<float>(),
        valid.data_ptr<bool>(), out);
  };
  const int segments = segments_for(n_tiles, means.get_device());
  if (derivatives) {
    if (segments == 4) launch(gn_tile_kernel<true, 4>, 4);
    else if (segments == 2) launch(gn_tile_kernel<true, 2>, 2);
    else launch(gn_tile_kernel<true, 1>, 1);
  } else {
    if (segments == 4) launch(gn_tile_kernel<false, 4>, 4);
    else if (segments == 2) launch(gn_tile_kernel<false, 2>, 2);
    else launch(gn_tile_kernel<false, 1>, 1);
  }
  SR_CHECK_CUDA();
}

__global__ void lm_phase_kernel(double* lm, sr::LmPhases p, sr::LmSettings c) {
  for (int i = 0; i < p.n; ++i) sr::lm_phase(lm, p.phase[i], c);
}

}  // namespace

// Returns the packed result (kGnValues,) float64 on the spheres' device (layout: gn_math.h).
at::Tensor gauss_newton_cuda(const at::Tensor& means, const at::Tensor& radii,
                             const at::Tensor& colors, const at::Tensor& opacities,
                             const at::Tensor& background, const at::Tensor& obs_color,
                             const at::Tensor& obs_depth, const at::Tensor& valid, double fx,
                             double fy, double cx, double cy, int64_t width, int64_t height,
                             c10::ArrayRef<double> settings, bool derivatives) {
  const sr::GnSettings st =
      sr::check_gauss_newton_args(means, radii, colors, opacities, background, obs_color,
                                  obs_depth, valid, width, height, settings, /*cuda=*/true);
  const c10::cuda::CUDAGuard guard(means.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const sr::Camera cam = sr::make_camera(fx, fy, cx, cy, width, height, kGnTile);
  at::Tensor out = at::empty({sr::kGnValues}, means.options().dtype(at::kDouble));
  run_gauss_newton(nullptr, means, radii, colors, opacities, background, obs_color, obs_depth, valid,
                   cam, st, derivatives, nullptr, out.data_ptr<double>(), nullptr, stream);
  return out;
}

// One evaluation of the device LM (rasterizer/lm_state.py): the pass with derivatives at the
// state's trial pose and exposure (world-frame means, transformed here), pivot from the state,
// result into its trial slot; capped binning with room for `capacity` pairs, the count recorded in
// the state's kLmMaxPairs + level and kLmOverflow. No host wait and no host-dependent size:
// capturable in a CUDA graph. The settings' gain, bias and pivot are not read.
void gauss_newton_lm_cuda(const at::Tensor& means, const at::Tensor& radii,
                          const at::Tensor& colors, const at::Tensor& opacities,
                          const at::Tensor& background, const at::Tensor& obs_color,
                          const at::Tensor& obs_depth, const at::Tensor& valid, double fx,
                          double fy, double cx, double cy, int64_t width, int64_t height,
                          c10::ArrayRef<double> settings, at::Tensor state, int64_t level,
                          int64_t capacity) {
  const sr::GnSettings st =
      sr::check_gauss_newton_args(means, radii, colors, opacities, background, obs_color,
                                  obs_depth, valid, width, height, settings, /*cuda=*/true);
  sr::check_lm_evaluation(state, means, level, capacity, /*cuda=*/true);
  const c10::cuda::CUDAGuard guard(means.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const sr::Camera cam = sr::make_camera(fx, fy, cx, cy, width, height, kGnTile);
  double* lm = state.data_ptr<double>();
  at::Tensor means_cam = at::empty_like(means);  // filled by the Jacobian kernel
  const sr_cuda::PairRoom room{capacity, lm + sr::kLmMaxPairs + level, lm + sr::kLmOverflow,
                               lm + sr::kLmDone};
  run_gauss_newton(&means, means_cam, radii, colors, opacities, background, obs_color, obs_depth,
                   valid, cam, st, /*derivatives=*/true, lm, lm + sr::kLmTrial, &room, stream);
}

// LM bookkeeping phases (lm_math.h), in order, on the device state: one one-thread kernel.
void lm_phase_cuda(at::Tensor state, c10::ArrayRef<int64_t> phases, c10::ArrayRef<double> settings) {
  sr::check_lm_state(state, state, /*cuda=*/true);
  const sr::LmPhases p = sr::check_lm_phases(phases);
  const sr::LmSettings c = sr::check_lm_settings(settings);
  const c10::cuda::CUDAGuard guard(state.device());
  lm_phase_kernel<<<1, 1, 0, c10::cuda::getCurrentCUDAStream().stream()>>>(state.data_ptr<double>(),
                                                                          p, c);
  SR_CHECK_CUDA();
}

// The schemas are in gn_cpu.cpp.
TORCH_LIBRARY_IMPL(sphere_raster, CUDA, m) {
  m.impl("gauss_newton", &gauss_newton_cuda);
  m.impl("gauss_newton_lm", &gauss_newton_lm_cuda);
  m.impl("lm_phase", &lm_phase_cuda);
}
