// CPU twins of the frame kernels (frame_cuda.cu: a compact frame's float images, downsampling,
// depth-edge mask, rolling-shutter unroll; the models are in
// rasterizer/frame.py, the per-pixel math in frame_math.h): output rows in parallel. The ops'
// schemas are declared here (once for both libraries); frame_cuda.cu registers their CUDA kernels.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <vector>

#include "frame_math.h"
#include "raster_cpu.h"
#include "tensor_args.h"

template <typename D>
static void unpack_rows(int64_t n, const uint8_t* c, const D* d, float* oc, float* od) {
#pragma omp parallel for num_threads(sr_cpu::num_threads()) schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) sr::unpack_pixel(i, c, d, oc, od);
}

std::vector<at::Tensor> unpack_frame_cpu(const at::Tensor& color, const at::Tensor& depth) {
  sr::check_compact_frame(color, depth, /*cuda=*/false);
  auto out_color = at::empty(color.sizes(), color.options().dtype(at::kFloat));
  auto out_depth = at::empty(depth.sizes(), depth.options().dtype(at::kFloat));
  const uint8_t* c = color.data_ptr<uint8_t>();
  float *oc = out_color.data_ptr<float>(), *od = out_depth.data_ptr<float>();
  if (depth.scalar_type() == at::kHalf)
    unpack_rows(depth.numel(), c, depth.data_ptr<at::Half>(), oc, od);
  else
    unpack_rows(depth.numel(), c, depth.data_ptr<float>(), oc, od);
  return {out_color, out_depth};
}

std::vector<at::Tensor> downsample_cpu(const at::Tensor& color, const at::Tensor& depth,
                                       int64_t factor) {
  sr::check_images(color, depth, factor, /*cuda=*/false);
  const int64_t H = depth.size(0), W = depth.size(1), h = H / factor, w = W / factor;
  auto out_color = at::empty({h, w, 3}, color.options());
  auto out_depth = at::empty({h, w}, depth.options());
  const float *c = color.data_ptr<float>(), *d = depth.data_ptr<float>();
  float *oc = out_color.data_ptr<float>(), *od = out_depth.data_ptr<float>();
  const int f = (int)factor;
#pragma omp parallel for num_threads(sr_cpu::num_threads()) schedule(static) if (h * w > 4096)
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) sr::downsample_pixel<sr::kMaxDownsample>(y, x, f, W, w, c, d, oc, od);
  return {out_color, out_depth};
}

at::Tensor depth_edge_mask_cpu(const at::Tensor& depth, double max_jump) {
  sr::check_depth_image(depth, /*cuda=*/false);
  const int64_t H = depth.size(0), W = depth.size(1);
  auto out = at::empty({H, W}, depth.options().dtype(at::kBool));
  const float* d = depth.data_ptr<float>();
  bool* o = out.data_ptr<bool>();
  const float mj = (float)max_jump;
#pragma omp parallel for num_threads(sr_cpu::num_threads()) schedule(static) if (H * W > 16384)
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x) o[y * W + x] = sr::depth_edge_ok(y, x, H, W, d, mj);
  return out;
}

std::vector<at::Tensor> unroll_cpu(const at::Tensor& color, const at::Tensor& depth,
                                   c10::ArrayRef<double> params) {
  const sr::UnrollParams p = sr::check_unroll_args(color, depth, params, /*cuda=*/false);
  auto out_color = at::empty_like(color);
  auto out_depth = at::empty_like(depth);
  const float *c = color.data_ptr<float>(), *d = depth.data_ptr<float>();
  float *oc = out_color.data_ptr<float>(), *od = out_depth.data_ptr<float>();
#pragma omp parallel for num_threads(sr_cpu::num_threads()) schedule(static) if (p.H * p.W > 4096)
  for (int64_t y = 0; y < p.H; ++y)
    for (int64_t x = 0; x < p.W; ++x) sr::unroll_pixel(y, x, p, c, d, oc, od);
  return {out_color, out_depth};
}

// Arguments and results as rasterizer/frame.py passes and reads them.
TORCH_LIBRARY_FRAGMENT(sphere_raster, m) {
  m.def("unpack_frame(Tensor color, Tensor depth) -> Tensor[]");
  m.def("downsample(Tensor color, Tensor depth, int factor) -> Tensor[]");
  m.def("depth_edge_mask(Tensor depth, float max_jump) -> Tensor");
  // params: fx, fy, cx, cy (pixels), wx, wy, wz (rad/s), colour readout, depth readout, depth
  // offset (s)
  m.def("unroll(Tensor color, Tensor depth, float[] params) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(sphere_raster, CPU, m) {
  m.impl("unpack_frame", &unpack_frame_cpu);
  m.impl("downsample", &downsample_cpu);
  m.impl("depth_edge_mask", &depth_edge_mask_cpu);
  m.impl("unroll", &unroll_cpu);
}
