// CPU twin of the robust normal-equations reduction (normal_eq_cuda.cu; the model is in
// rasterizer/normal_equations.py, the per-element math in normal_eq_math.h). Fixed chunks of
// elements are summed in double in parallel and the chunk partials added in chunk order, so the
// result is the same for any thread count.
#include <torch/extension.h>

#include <algorithm>
#include <vector>

#include "normal_eq_math.h"
#include "raster_cpu.h"
#include "tensor_args.h"

namespace {

constexpr int64_t kChunk = 16384;  // elements per partial sum

template <int P>
void reduce(const float* J, int64_t ld, const float* r, const float* k, int64_t C, int64_t M,
            double* out) {
  constexpr int NV = sr::ne_values(P);
  const int64_t n_chunks = (M + kChunk - 1) / kChunk;
  std::vector<double> part((size_t)n_chunks * NV, 0.0);
#pragma omp parallel for num_threads(sr_cpu::num_threads()) schedule(static) if (n_chunks > 1)
  for (int64_t c = 0; c < n_chunks; ++c) {
    double* acc = &part[(size_t)c * NV];
    const int64_t end = std::min(M, (c + 1) * kChunk);
    for (int64_t m = c * kChunk; m < end; ++m) sr::ne_add<P>(J, ld, m, r[m], k[m % C], acc);
  }
  for (int64_t c = 0; c < n_chunks; ++c)
    for (int i = 0; i < NV; ++i) out[i] += part[(size_t)c * NV + i];
}

}  // namespace

// Adds the packed normal equations into out (ne_values(P),) float64 (see normal_equations.py).
void robust_normal_equations_cpu(const at::Tensor& J, const at::Tensor& r, const at::Tensor& k,
                                 at::Tensor out) {
  const int P = sr::check_normal_equations_args(J, r, k, out, /*cuda=*/false);
  const int64_t M = J.size(1), C = k.numel(), ld = J.stride(0);
  if (P == 6)
    reduce<6>(J.data_ptr<float>(), ld, r.data_ptr<float>(), k.data_ptr<float>(), C, M, out.data_ptr<double>());
  else
    reduce<8>(J.data_ptr<float>(), ld, r.data_ptr<float>(), k.data_ptr<float>(), C, M, out.data_ptr<double>());
}
