// CPU twin of the median kernel (median_cuda.cu; the model is in rasterizer/median.py): the values
// the median counts, then nth_element. The op's schema is declared here (once for both libraries).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "median_math.h"
#include "tensor_args.h"

at::Tensor lower_median_cpu(const at::Tensor& x, bool depth) {
  sr::check_input(x, "x", /*cuda=*/false);
  const float* v = x.data_ptr<float>();
  std::vector<float> counted;
  counted.reserve((size_t)x.numel());
  bool nan = false;
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (sr::median_counts(v[i], depth)) counted.push_back(v[i]);
    else if (!depth) nan = true;   // every value counts but NaN
  }
  float median = depth ? sr::kNoMedianDepth : NAN;
  if (!nan && !counted.empty()) {
    auto mid = counted.begin() + (counted.size() - 1) / 2;   // the lower middle value
    std::nth_element(counted.begin(), mid, counted.end());
    median = *mid;
  }
  return at::full({}, median, x.options());
}

// Arguments and results as rasterizer/median.py passes and reads them.
TORCH_LIBRARY_FRAGMENT(sphere_raster, m) {
  m.def("lower_median(Tensor x, bool depth) -> Tensor");
}

TORCH_LIBRARY_IMPL(sphere_raster, CPU, m) { m.impl("lower_median", &lower_median_cpu); }
