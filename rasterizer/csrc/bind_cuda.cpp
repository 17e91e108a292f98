// Python bindings of the CUDA kernels (raster_cuda.cu, gn_cuda.cu (also the device LM), adam_cuda.cu, frame_cuda.cu). The same interface as the CPU
// module (raster_cpu.cpp, gn_cpu.cpp): the same arguments and results, described in
// rasterizer/functions.py and rasterizer/gauss_newton.py.
#include <torch/extension.h>

#include <vector>

std::vector<at::Tensor> forward_cuda(const at::Tensor& means, const at::Tensor& radii,
                                     const at::Tensor& colors, const at::Tensor& opacities,
                                     const at::Tensor& background, double fx, double fy, double cx,
                                     double cy, int64_t width, int64_t height, double depth_eps);

std::vector<at::Tensor> backward_cuda(
    const at::Tensor& means, const at::Tensor& radii, const at::Tensor& colors,
    const at::Tensor& opacities, const at::Tensor& background, double fx, double fy, double cx,
    double cy, int64_t width, int64_t height, double depth_eps, const at::Tensor& ids,
    const at::Tensor& ranges, const at::Tensor& alpha, const at::Tensor& depth,
    const at::Tensor& last, const at::Tensor& g_color, const at::Tensor& g_depth,
    const at::Tensor& g_alpha, const at::Tensor& pixel_err, at::Tensor stat_w, at::Tensor stat_e,
    at::Tensor stat_n);

at::Tensor gauss_newton_cuda(const at::Tensor& means, const at::Tensor& radii,
                             const at::Tensor& colors, const at::Tensor& opacities,
                             const at::Tensor& background, const at::Tensor& obs_color,
                             const at::Tensor& obs_depth, const at::Tensor& valid, double fx,
                             double fy, double cx, double cy, int64_t width, int64_t height,
                             const std::vector<double>& settings, bool derivatives);

void gauss_newton_lm_cuda(const at::Tensor& means, const at::Tensor& radii,
                          const at::Tensor& colors, const at::Tensor& opacities,
                          const at::Tensor& background, const at::Tensor& obs_color,
                          const at::Tensor& obs_depth, const at::Tensor& valid, double fx,
                          double fy, double cx, double cy, int64_t width, int64_t height,
                          const std::vector<double>& settings, at::Tensor state, int64_t level,
                          int64_t capacity);

void lm_phase_cuda(at::Tensor state, int64_t phase, const std::vector<double>& settings);

void adam_rows_cuda(at::Tensor params, at::Tensor exp_avg, at::Tensor exp_avg_sq, at::Tensor steps,
                    const at::Tensor& grad, const at::Tensor& lr, double beta1, double beta2,
                    double eps);

std::vector<at::Tensor> downsample_cuda(const at::Tensor& color, const at::Tensor& depth,
                                        int64_t factor);
at::Tensor depth_edge_mask_cuda(const at::Tensor& depth, double max_jump);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Sphere rasterizer, CUDA kernels";
  m.def("forward", &forward_cuda, "tiled forward (CUDA)");
  m.def("backward", &backward_cuda, "tiled backward (CUDA)");
  m.def("gauss_newton", &gauss_newton_cuda, "fused Gauss-Newton pass (CUDA)");
  m.def("gauss_newton_lm", &gauss_newton_lm_cuda, "device-LM evaluation at the trial pose (CUDA)");
  m.def("lm_phase", &lm_phase_cuda, "device-LM bookkeeping phase (CUDA)");
  m.def("adam_rows", &adam_rows_cuda, "packed-row Adam update (CUDA)");
  m.def("downsample", &downsample_cuda, "image downsampling: mean colour, median valid depth (CUDA)");
  m.def("depth_edge_mask", &depth_edge_mask_cuda, "valid depth away from depth edges (CUDA)");
}
