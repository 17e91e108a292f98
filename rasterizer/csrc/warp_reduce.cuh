// Warp-level reductions shared by the CUDA kernels (raster_cuda.cu, gn_cuda.cu).
#pragma once

#include <cuda_runtime.h>

namespace sr_cuda {

constexpr unsigned kFull = 0xffffffffu;

// Warp reduce-scatter of L values (L a power of two, <= 32): at each halving step a lane keeps
// half of its values and receives its partner's copy of that half, so L values cost
// L/2 + L/4 + ... + 1 + log2(32/L) shuffles instead of 5 * L. On return lane l holds in v[0] the
// warp total of value index l / (32 / L) (every lane of that group holds it).
template <int L, int O>
struct WarpReduceScatter {
  __device__ __forceinline__ static void run(float* v, int lane) {
    const bool hi = (lane & O) != 0;
#pragma unroll
    for (int i = 0; i < L / 2; ++i) {
      const float send = hi ? v[i] : v[i + L / 2];
      const float keep = hi ? v[i + L / 2] : v[i];
      v[i] = keep + __shfl_xor_sync(kFull, send, O);
    }
    WarpReduceScatter<L / 2, O / 2>::run(v, lane);
  }
};

template <int O>
struct WarpReduceScatter<1, O> {
  __device__ __forceinline__ static void run(float* v, int) {
#pragma unroll
    for (int o = O; o > 0; o >>= 1) v[0] += __shfl_xor_sync(kFull, v[0], o);
  }
};

}  // namespace sr_cuda
