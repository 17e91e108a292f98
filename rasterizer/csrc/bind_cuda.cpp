// Python bindings of the CUDA kernels (raster_cuda.cu). The same interface as the CPU module
// (raster_cpu.cpp): the same arguments and results, described in rasterizer/functions.py.
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

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Sphere rasterizer, CUDA kernels";
  m.def("forward", &forward_cuda, "tiled forward (CUDA)");
  m.def("backward", &backward_cuda, "tiled backward (CUDA)");
}
