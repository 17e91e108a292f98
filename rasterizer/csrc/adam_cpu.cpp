// CPU twin of the packed-row Adam update (adam_cuda.cu; the model is in rasterizer/adam.py, the
// per-row math in adam_math.h): rows in parallel, each row independent. The op's schema is declared
// here (once for both libraries); adam_cuda.cu registers its CUDA kernel.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "adam_math.h"
#include "raster_cpu.h"
#include "tensor_args.h"

void adam_rows_cpu(at::Tensor params, at::Tensor exp_avg, at::Tensor exp_avg_sq, at::Tensor steps,
                   const at::Tensor& grad, const at::Tensor& lr, double beta1, double beta2,
                   double eps) {
  sr::check_adam_args(params, exp_avg, exp_avg_sq, steps, grad, lr, /*cuda=*/false);
  const int64_t n = params.size(0);
  const sr::AdamSettings s{(float)beta1, (float)beta2, (float)eps};
  float *p = params.data_ptr<float>(), *m = exp_avg.data_ptr<float>(),
        *v = exp_avg_sq.data_ptr<float>(), *st = steps.data_ptr<float>();
  const float *g = grad.data_ptr<float>(), *l = lr.data_ptr<float>();
#pragma omp parallel for num_threads(sr_cpu::num_threads()) schedule(static) if (n > 16384)
  for (int64_t i = 0; i < n; ++i) sr::adam_row<sr::kAdamCols>(i, p, m, v, st, g, l, s);
}

// Arguments as rasterizer/adam.py passes them; the parameters, moments and step counts are written.
TORCH_LIBRARY_FRAGMENT(sphere_raster, m) {
  m.def("adam_rows(Tensor(a!) params, Tensor(b!) exp_avg, Tensor(c!) exp_avg_sq, Tensor(d!) steps, "
        "Tensor grad, Tensor lr, float beta1, float beta2, float eps) -> ()");
}

TORCH_LIBRARY_IMPL(sphere_raster, CPU, m) { m.impl("adam_rows", &adam_rows_cpu); }
