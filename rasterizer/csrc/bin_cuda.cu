// The tiling of a render on the GPU (sr_cuda::bin_spheres, raster_cuda.h), shared by the render
// (raster_cuda.cu) and the fused Gauss-Newton pass (gn_cuda.cu). Five launches, no global sort:
//   zero the tile counts
//   -> project_count_kernel: per sphere its splat (sr::project_sphere) and its tile rectangle
//      (sr::tile_rect); adds 1 to each of its tiles' counts (per block in shared memory first)
//   -> tile_offsets_kernel: one block: exclusive scan of the tile counts -> each tile's range
//      [start, end) in the pair list (cut at the room when capped), a fill cursor per tile and the
//      pair count M (exact binning: the host waits for M here and sizes the list by it)
//   -> emit_kernel: per sphere a slot in each of its tiles' ranges (an atomic cursor per tile;
//      a block reserves its pairs' slots per tile at once);
//      the slot's key is (depth bits << index bits | sphere index): unique, and ordered as the
//      render needs (front to back, ties by index)
//   -> sort_short_tiles_kernel: a small block per tile of at most kShortSortMax keys sorts them
//      in shared memory (bitonic) and writes the sphere ids; then sort_tiles_kernel: one large
//      block per longer tile sorts its keys in shared memory (a bitonic sort up to kBitonicMax
//      keys, a block radix sort over the key's bits up to kSortShared; a longer list as sorted
//      runs of kSortShared merged in global memory through a scratch list) and writes the ids.
//      (The tracker's 8x8 tiles hold ~70-400 keys: the large block's 32 KiB of shared memory
//      allowed 4 blocks an SM, and most of its 512 threads idled between the barriers.)
// Each tile's list comes out in (depth, index) order whatever order the atomics gave the slots,
// the order of the CPU twin (raster_cpu.cpp: a stable sort by depth, then by tile).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <atomic>
#include <cstdlib>

#include <cub/cub.cuh>

#include "raster_cuda.h"
#include "sphere_math.h"

namespace {

constexpr int kProjectBlock = 1024;
constexpr int kSharedTiles = 4096;  // per-block tile counters in shared memory up to this many tiles
constexpr int kBlocksPerSM = 2;     // grid of the per-sphere kernels: a few large blocks per SM
constexpr int kScanBlock = 1024;
constexpr int kSortBlock = 512;
constexpr int kSortShared = 4096;  // keys a sort block holds in shared memory (32 KiB)
constexpr int kBitonicMax = 1024;  // longer lists: the radix sort (O(n) per pass, not O(n log^2 n))
constexpr int kRadixItems = kSortShared / kSortBlock;
constexpr uint64_t kNoKey = ~0ull;  // padding: sorts after every real key
using BlockRadix = cub::BlockRadixSort<uint64_t, kSortBlock, kRadixItems>;
constexpr int kShortSortBlock = 256;  // threads of a short list's sort block
constexpr int kShortSortMax = 2 * kShortSortBlock;  // longest short list (4 KiB of shared memory):
                                                    // a compare-exchange a thread per bitonic stage

// Bits of a sphere index for n spheres (at least 1).
inline int index_bits(int n) {
  int b = 1;
  while (b < 31 && (1 << b) < n) ++b;
  return b;
}

#define SR_CHECK_CUDA() C10_CUDA_KERNEL_LAUNCH_CHECK()

__device__ __forceinline__ int tile_rect_of(const float4& g, const sr::Camera& cam, int& tx0,
                                            int& tx1, int& ty0, int& ty1) {
  const sr::Splat s{g.x, g.y, g.z, g.w};
  return sr::tile_rect(s, cam, tx0, tx1, ty0, ty1);
}

// f(t) for every tile t of the rectangle [tx0, tx1) x [ty0, ty1) (row-major tile index).
template <class F>
__device__ __forceinline__ void for_tiles(int tx0, int tx1, int ty0, int ty1, int tiles_x, F&& f) {
  for (int ty = ty0; ty < ty1; ++ty)
    for (int tx = tx0; tx < tx1; ++tx) f(ty * tiles_x + tx);
}

// f(t) for every tile t of splat g as project_count_kernel wrote it (none when culled: zeros).
template <class F>
__device__ __forceinline__ void for_splat_tiles(const float4& g, const sr::Camera& cam, F&& f) {
  int tx0, tx1, ty0, ty1;
  if (g.z == 0.f || tile_rect_of(g, cam, tx0, tx1, ty0, ty1) == 0) return;
  for_tiles(tx0, tx1, ty0, ty1, cam.tiles_x, f);
}

// Sphere i's tile rectangle (empty when culled) and, with `splats`, its splat written there.
__device__ __forceinline__ void sphere_tiles(int i, const float* __restrict__ means,
                                             const float* __restrict__ radii, const sr::Camera& cam,
                                             float4* __restrict__ splats, int& tx0, int& tx1,
                                             int& ty0, int& ty1) {
  sr::Splat s{0.f, 0.f, 0.f, 0.f};
  tx0 = tx1 = ty0 = ty1 = 0;
  if (!sr::project_sphere(means[3 * i], means[3 * i + 1], means[3 * i + 2], radii[i], cam, s) ||
      sr::tile_rect(s, cam, tx0, tx1, ty0, ty1) == 0) {
    s = sr::Splat{0.f, 0.f, 0.f, 0.f};
    tx1 = tx0;
  }
  splats[i] = make_float4(s.u, s.v, s.ia, s.ic);
}

// Per-tile counters of one block in shared memory (SHARED: n_tiles <= kSharedTiles), added to the
// global ones once per block and tile: a map's spheres crowd into a few hundred tiles, and one
// global atomic per (sphere, tile) pair serialises on them (1M spheres: ~0.4 ms per kernel).
template <bool SHARED>
__device__ __forceinline__ int32_t* block_counters(int32_t* s_counts, int32_t* global, int n_tiles) {
  if (!SHARED) return global;
  for (int t = threadIdx.x; t < n_tiles; t += blockDim.x) s_counts[t] = 0;
  __syncthreads();
  return s_counts;
}

// Grid-stride over the spheres: splats (culled: zeros, no tiles) and the tiles' counts.
template <bool SHARED>
__global__ void __launch_bounds__(kProjectBlock)
    project_count_kernel(int n, const float* __restrict__ means, const float* __restrict__ radii,
                         sr::Camera cam, float4* __restrict__ splats, int32_t* __restrict__ counts) {
  extern __shared__ int32_t s_counts[];
  const int n_tiles = cam.tiles_x * cam.tiles_y;
  int32_t* c = block_counters<SHARED>(s_counts, counts, n_tiles);
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    int tx0, tx1, ty0, ty1;
    sphere_tiles(i, means, radii, cam, splats, tx0, tx1, ty0, ty1);
    for_tiles(tx0, tx1, ty0, ty1, cam.tiles_x, [&](int t) { atomicAdd(c + t, 1); });
  }
  if (SHARED) {
    __syncthreads();
    for (int t = threadIdx.x; t < n_tiles; t += blockDim.x)
      if (s_counts[t] != 0) atomicAdd(counts + t, s_counts[t]);
  }
}

// One block: ranges[t] = [start, end) of tile t's slots (an exclusive scan of the counts, cut at
// `room`), cursor[t] = start, *total = M. With max_pairs / overflow (capped): max_pairs =
// max(max_pairs, M), overflow = 1 when M > room. With skip (capped) and *skip != 0: every range
// empty, nothing recorded.
__global__ void __launch_bounds__(kScanBlock)
    tile_offsets_kernel(int n_tiles, const int32_t* __restrict__ counts, int64_t room,
                        int2* __restrict__ ranges, int32_t* __restrict__ cursor,
                        long long* __restrict__ total, double* __restrict__ max_pairs,
                        double* __restrict__ overflow, const double* __restrict__ skip) {
  if (skip != nullptr && *skip != 0.0) room = 0;
  using Scan = cub::BlockScan<long long, kScanBlock>;
  __shared__ typename Scan::TempStorage tmp;
  const int per = (n_tiles + kScanBlock - 1) / kScanBlock;
  const int t0 = min(n_tiles, (int)threadIdx.x * per), t1 = min(n_tiles, t0 + per);
  long long mine = 0;
  for (int t = t0; t < t1; ++t) mine += counts[t];
  long long start = 0, all = 0;
  Scan(tmp).ExclusiveSum(mine, start, all);
  for (int t = t0; t < t1; ++t) {
    const long long end = start + counts[t];
    ranges[t] = make_int2((int)min(start, (long long)room), (int)min(end, (long long)room));
    cursor[t] = (int)min(start, (long long)room);
    start = end;
  }
  if (threadIdx.x == 0) {
    *total = all;
    if (room > 0 && max_pairs != nullptr && (double)all > *max_pairs) *max_pairs = (double)all;
    if (room > 0 && overflow != nullptr && all > room) *overflow = 1.0;
  }
}

// Grid-stride over the spheres (the same spheres per block as project_count_kernel's grid): a
// slot in each of their tiles, the key written there (slots at or past the tile's cut end are
// dropped: only when capped binning overflowed). SHARED: the block counts its pairs per tile,
// reserves them with one global atomic per tile, then ranks its pairs inside the reservation.
template <bool SHARED>
__global__ void __launch_bounds__(kProjectBlock)
    emit_kernel(int n, int idx_bits, sr::Camera cam, const float* __restrict__ means,
                const float4* __restrict__ splats, const int2* __restrict__ ranges,
                int32_t* __restrict__ cursor, uint64_t* __restrict__ keys) {
  extern __shared__ int32_t s_work[];  // SHARED: counts (then ranks) | reserved bases
  const int n_tiles = cam.tiles_x * cam.tiles_y;
  const int stride = gridDim.x * blockDim.x;
  if (SHARED) {
    int32_t* c = block_counters<true>(s_work, nullptr, n_tiles);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
      for_splat_tiles(splats[i], cam, [&](int t) { atomicAdd(c + t, 1); });
    __syncthreads();
    for (int t = threadIdx.x; t < n_tiles; t += blockDim.x) {
      s_work[n_tiles + t] = s_work[t] != 0 ? atomicAdd(cursor + t, s_work[t]) : 0;
      s_work[t] = 0;
    }
    __syncthreads();
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float4 g = splats[i];
    if (g.z == 0.f) continue;  // culled: no tiles (and no depth to read)
    const uint64_t key = ((uint64_t)sr::depth_key(means[3 * i + 2], true) << idx_bits) | (uint32_t)i;
    for_splat_tiles(g, cam, [&](int t) {
      const int slot = SHARED ? s_work[n_tiles + t] + atomicAdd(s_work + t, 1) : atomicAdd(cursor + t, 1);
      if (slot < ranges[t].y) keys[slot] = key;
    });
  }
}

// Block-wide ascending bitonic sort of s[0, p), p a power of two.
__device__ void bitonic_sort(uint64_t* s, int p) {
  for (int size = 2; size <= p; size <<= 1)
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      for (int t = threadIdx.x; t < p / 2; t += blockDim.x) {
        const int lo = 2 * t - (t & (stride - 1)), hi = lo + stride;
        const uint64_t a = s[lo], b = s[hi];
        if ((a > b) == ((lo & size) == 0)) {
          s[lo] = b;
          s[hi] = a;
        }
      }
    }
  __syncthreads();
}

union SortShared {
  uint64_t keys[kSortShared];
  typename BlockRadix::TempStorage radix;
};

// Sorts src[0, len) (at most kSortShared keys, of `bits` significant bits) through shared memory
// into dst[0, len) (may be src).
__device__ void sort_run(const uint64_t* src, uint64_t* dst, int len, int bits, SortShared& sm) {
  if (len <= kBitonicMax) {
    int p = 1;
    while (p < len) p <<= 1;
    for (int k = threadIdx.x; k < p; k += blockDim.x) sm.keys[k] = k < len ? src[k] : kNoKey;
    bitonic_sort(sm.keys, p);
    for (int k = threadIdx.x; k < len; k += blockDim.x) dst[k] = sm.keys[k];
  } else {  // blocked arrangement: thread t holds keys [t * kRadixItems, (t + 1) * kRadixItems)
    uint64_t items[kRadixItems];
#pragma unroll
    for (int j = 0; j < kRadixItems; ++j) {
      const int k = threadIdx.x * kRadixItems + j;
      items[j] = k < len ? src[k] : kNoKey;
    }
    BlockRadix(sm.radix).Sort(items, 0, bits);
#pragma unroll
    for (int j = 0; j < kRadixItems; ++j) {
      const int k = threadIdx.x * kRadixItems + j;
      if (k < len) dst[k] = items[j];
    }
  }
  __syncthreads();
}

// Block-wide merge of sorted a[0, na) and b[0, nb) (unique keys) into out[0, na + nb): each
// thread finds where its share of the output starts (merge path) and merges it sequentially.
__device__ void merge_runs(const uint64_t* a, int na, const uint64_t* b, int nb, uint64_t* out) {
  const int total = na + nb;
  const int per = (total + blockDim.x - 1) / blockDim.x;
  const int k0 = min(total, (int)threadIdx.x * per), k1 = min(total, k0 + per);
  int lo = max(0, k0 - nb), hi = min(k0, na);
  while (lo < hi) {  // the count i of a's keys among the first k0 outputs
    const int i = (lo + hi) / 2;
    if (a[i] < b[k0 - i - 1])
      lo = i + 1;
    else
      hi = i;
  }
  int i = lo, j = k0 - lo;
  for (int k = k0; k < k1; ++k) out[k] = (j >= nb || (i < na && a[i] < b[j])) ? a[i++] : b[j++];
}

// One block of kShortSortBlock threads per tile with 1 to kShortSortMax keys: a bitonic sort in
// shared memory, then ids[k] = the sphere index of key k (the keys are not written back). Longer
// lists are left to sort_tiles_kernel.
__global__ void __launch_bounds__(kShortSortBlock)
    sort_short_tiles_kernel(const int2* __restrict__ ranges, int idx_bits,
                            const uint64_t* __restrict__ keys, int32_t* __restrict__ ids) {
  __shared__ uint64_t s[kShortSortMax];
  const int2 r = ranges[blockIdx.x];
  const int len = r.y - r.x;
  if (len <= 0 || len > kShortSortMax) return;
  int p = 1;
  while (p < len) p <<= 1;
  for (int k = threadIdx.x; k < p; k += blockDim.x) s[k] = k < len ? keys[r.x + k] : kNoKey;
  bitonic_sort(s, p);
  const uint64_t mask = (1ull << idx_bits) - 1;
  for (int k = threadIdx.x; k < len; k += blockDim.x) ids[r.x + k] = (int32_t)(s[k] & mask);
}

// One block per tile with more than kShortSortMax keys (shorter ones return at once: see
// sort_short_tiles_kernel): its keys sorted ascending, then ids[k] = the sphere index of key k.
// `scratch` (as long as `keys`) is used only by lists longer than kSortShared.
__global__ void __launch_bounds__(kSortBlock)
    sort_tiles_kernel(const int2* __restrict__ ranges, int idx_bits, uint64_t* __restrict__ keys,
                      uint64_t* __restrict__ scratch, int32_t* __restrict__ ids) {
  __shared__ SortShared sm;
  const int bits = 31 + idx_bits;  // a positive float's bits, then the index
  const int2 r = ranges[blockIdx.x];
  const int len = r.y - r.x;
  if (len <= kShortSortMax) return;
  uint64_t* src = keys + r.x;
  if (len <= kSortShared) {
    sort_run(src, src, len, bits, sm);
  } else {
    uint64_t* dst = scratch + r.x;
    for (int c = 0; c < len; c += kSortShared) sort_run(src + c, src + c, min(kSortShared, len - c), bits, sm);
    for (int run = kSortShared; run < len; run *= 2) {
      for (int c = 0; c < len; c += 2 * run) {
        const int na = min(run, len - c), nb = max(0, min(run, len - c - run));
        merge_runs(src + c, na, src + c + na, nb, dst + c);
      }
      __syncthreads();
      uint64_t* t = src;
      src = dst;
      dst = t;
    }
  }
  const uint64_t mask = (1ull << idx_bits) - 1;
  for (int k = threadIdx.x; k < len; k += blockDim.x) ids[r.x + k] = (int32_t)(src[k] & mask);
}

// Pinned host word and event per (thread, device) for the pair count of exact binning.
struct CountSlot {
  long long* host = nullptr;
  cudaEvent_t event = nullptr;
  ~CountSlot() {  // at thread exit; errors (e.g. the runtime already shut down) are ignored
    if (event != nullptr) cudaEventDestroy(event);
    if (host != nullptr) cudaFreeHost(host);
    cudaGetLastError();
  }
};

constexpr int kMaxDevices = 64;

CountSlot& count_slot(int device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "sphere rasterizer: device index out of range");
  thread_local CountSlot slots[kMaxDevices];
  CountSlot& s = slots[device];
  if (s.host == nullptr) {  // the device guard of the caller makes `device` current
    C10_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&s.host), sizeof(long long)));
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&s.event, cudaEventDisableTiming));
  }
  return s;
}

}  // namespace

int sr_cuda::sm_count(int device) {
  static std::atomic<int> counts[kMaxDevices];  // 0: not asked yet
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "sphere rasterizer: device index out of range");
  int sms = counts[device].load(std::memory_order_relaxed);
  if (sms == 0) {
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    counts[device].store(sms, std::memory_order_relaxed);
  }
  return sms;
}

int sr_cuda::parts_to_fill(long long units, long long room, const char* env) {
  const char* forced_s = std::getenv(env);
  const int forced = forced_s == nullptr ? 0 : std::atoi(forced_s);
  if (forced == 1 || forced == 2 || forced == 4) return forced;
  for (int k = 1; k < 4; k *= 2)
    if (units * k >= room) return k;
  return 4;
}

sr_cuda::Bins sr_cuda::bin_spheres(const at::Tensor& means, const at::Tensor& radii,
                                   const sr::Camera& cam, cudaStream_t stream,
                                   const PairRoom* capped) {
  const int n = (int)means.size(0);
  const int n_tiles = cam.tiles_x * cam.tiles_y;
  const auto opt = means.options();
  const auto iopt = opt.dtype(at::kInt);
  Bins b;
  b.splats = at::empty({n, 4}, opt);
  b.ranges = at::empty({n_tiles, 2}, iopt);
  // tile counts | fill cursors | pair count (int64, as two int32)
  at::Tensor work = at::zeros({2 * (int64_t)n_tiles + 2}, iopt);
  int32_t* counts = work.data_ptr<int32_t>();
  int32_t* cursor = counts + n_tiles;
  auto* total = reinterpret_cast<long long*>(counts + 2 * n_tiles);
  auto* splats = reinterpret_cast<float4*>(b.splats.data_ptr<float>());
  auto* ranges = reinterpret_cast<int2*>(b.ranges.data_ptr<int32_t>());
  // The per-sphere kernels: grid-stride over at most kBlocksPerSM blocks per SM, so that a block's
  // shared counters aggregate many spheres; both kernels use the same grid.
  const bool shared = n_tiles <= kSharedTiles;
  const int grid = std::max(1, std::min(blocks_for(n, kProjectBlock), kBlocksPerSM * sm_count(means.get_device())));
  const size_t count_smem = shared ? n_tiles * sizeof(int32_t) : 0;
  if (n > 0) {
    auto kernel = shared ? project_count_kernel<true> : project_count_kernel<false>;
    kernel<<<grid, kProjectBlock, count_smem, stream>>>(n, means.data_ptr<float>(),
                                                        radii.data_ptr<float>(), cam, splats, counts);
    SR_CHECK_CUDA();
  }
  const int64_t room = capped != nullptr ? capped->capacity : ((1ll << 31) - 1);
  tile_offsets_kernel<<<1, kScanBlock, 0, stream>>>(
      n_tiles, counts, room, ranges, cursor, total,
      capped != nullptr ? capped->max_pairs : nullptr, capped != nullptr ? capped->overflow : nullptr,
      capped != nullptr ? capped->skip : nullptr);
  SR_CHECK_CUDA();
  int64_t m = room;
  if (capped == nullptr) {
    CountSlot& slot = count_slot(means.get_device());
    C10_CUDA_CHECK(cudaMemcpyAsync(slot.host, total, sizeof(long long), cudaMemcpyDeviceToHost, stream));
    C10_CUDA_CHECK(cudaEventRecord(slot.event, stream));
    C10_CUDA_CHECK(cudaEventSynchronize(slot.event));
    TORCH_CHECK(*slot.host < room, "sphere rasterizer: ", *slot.host,
                " (tile, sphere) pairs: more than the 2^31 - 1 supported");
    m = *slot.host;
  }
  b.m = m;
  b.ids = at::empty({m}, iopt);
  if (m > 0 && n > 0) {
    at::Tensor keys = at::empty({2 * m}, opt.dtype(at::kLong));  // keys | merge scratch
    auto* kp = reinterpret_cast<uint64_t*>(keys.data_ptr<int64_t>());
    const int idx_bits = index_bits(n);
    auto emit = shared ? emit_kernel<true> : emit_kernel<false>;
    emit<<<grid, kProjectBlock, 2 * count_smem, stream>>>(n, idx_bits, cam,
                                                          means.data_ptr<float>(), splats, ranges,
                                                          cursor, kp);
    SR_CHECK_CUDA();
    sort_short_tiles_kernel<<<n_tiles, kShortSortBlock, 0, stream>>>(ranges, idx_bits, kp,
                                                                     b.ids.data_ptr<int32_t>());
    SR_CHECK_CUDA();
    sort_tiles_kernel<<<n_tiles, kSortBlock, 0, stream>>>(ranges, idx_bits, kp, kp + m,
                                                          b.ids.data_ptr<int32_t>());
    SR_CHECK_CUDA();
  }
  return b;
}
