// CPU (C++/OpenMP) twin of the fused Gauss-Newton kernel (gn_cuda.cu; the model is in
// rasterizer/gauss_newton.py): the render's tiling (sr_cpu::bin_spheres), then per tile a
// front-to-back pass that carries the pose derivatives (sr::gn_blend) and turns each pixel into
// its share of H, g, the cost and the statistics (sr::gn_pixel_values). The per-sphere pose
// Jacobian (sr::pose_jacobian) is computed once per sphere. Tiles run in parallel, each summing
// its pixels in double; the tile partials are added in tile order, so the result is the same for
// any thread count. Also the device LM's evaluation and phases on the CPU. The schemas of these
// three ops are declared at the end (once for both libraries); gn_cuda.cu registers their CUDA
// kernels.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "gn_math.h"
#include "lm_math.h"
#include "raster_cpu.h"
#include "sphere_math.h"
#include "tensor_args.h"

namespace {

struct GnInputs {
  sr::Camera cam;
  sr::GnSettings st;
  const float *means, *colors, *opac, *bg, *obs_color, *obs_depth;
  const bool* valid;
  const sr::Splat* splats;
  const sr::PoseJac* jac;
  const int32_t *ids, *ranges;
};

// One thread's scratch: the tile's sphere cache and its pixels' compositing states.
struct TileScratch {
  sr_cpu::TileSpheres ts;
  sr::GnState state[sr::kTilePixels];
  bool done[sr::kTilePixels];
};

// Adds tile t's pixels into acc (kGnValues doubles). Sphere-major like the CPU render: each
// sphere visits the pixels of its 3-sigma box only, and every pixel still sees the spheres in list
// order, so its arithmetic is that of a pixel-major loop.
template <bool DERIV>
void gn_tile(int t, const GnInputs& in, TileScratch& sc, double* acc) {
  const sr_cpu::TileBox tb(t, in.ranges, in.cam);
  const int64_t begin = tb.begin, end = tb.end;
  sc.ts.load(begin, end, in.ids, in.splats, in.opac, in.colors, in.means);
  int remaining = tb.pixels();
  for (int q = 0; q < remaining; ++q) {
    sr::gn_state_init<DERIV>(sc.state[q]);
    sc.done[q] = false;
  }
  const sr::PoseJac no_jac{};
  for (int64_t j = 0; j < end - begin && remaining > 0; ++j) {
    const sr::Splat& sp = sc.ts.splat[j];
    int bx0, bx1, by0, by1;
    if (!sr::pixel_box(sp, tb.x0, tb.x1, tb.y0, tb.y1, bx0, bx1, by0, by1)) continue;
    const sr::PoseJac& J = DERIV ? in.jac[in.ids[begin + j]] : no_jac;
    const float o = sc.ts.o[j], z = sc.ts.z[j];
    const float* c = &sc.ts.c[3 * j];
    for (int py = by0; py < by1; ++py)
      for (int px = bx0; px < bx1; ++px) {
        const int q = tb.slot(px, py);
        if (sc.done[q]) continue;
        float a, G, du, dv;
        if (!sr::eval_alpha((float)px, (float)py, sp, o, a, G, du, dv)) continue;
        if (!sr::gn_blend<DERIV>(sc.state[q], sp, J, o, a, G, du, dv, c[0], c[1], c[2], z)) {
          sc.done[q] = true;
          --remaining;
        }
      }
  }
  float v[sr::kGnValues];
  for (int py = tb.y0; py < tb.y1; ++py)
    for (int px = tb.x0; px < tb.x1; ++px) {
      const int q = tb.slot(px, py);
      const int64_t p = (int64_t)py * in.cam.width + px;
      const float* oc = in.obs_color + 3 * p;
      sr::ObsGradient og{};
      if (DERIV && in.st.obs_weight > 0.f && in.valid[p])
        og = sr::obs_gradient(in.obs_color, in.obs_depth, px, py, in.cam);
      sr::gn_pixel_values<DERIV>(sc.state[q], in.st, in.valid[p], in.bg[0], in.bg[1], in.bg[2],
                                 oc[0], oc[1], oc[2], in.obs_depth[p], og, in.cam.fx, in.cam.fy, v);
      for (int i = 0; i < sr::kGnValues; ++i) acc[i] += v[i];
    }
}

}  // namespace

// Returns the packed result (kGnValues,) float64: see gn_math.h for the layout.
at::Tensor gauss_newton_cpu(const at::Tensor& means, const at::Tensor& radii,
                            const at::Tensor& colors, const at::Tensor& opacities,
                            const at::Tensor& background, const at::Tensor& obs_color,
                            const at::Tensor& obs_depth, const at::Tensor& valid, double fx,
                            double fy, double cx, double cy, int64_t width, int64_t height,
                            c10::ArrayRef<double> settings, bool derivatives) {
  GnInputs in;
  in.st = sr::check_gauss_newton_args(means, radii, colors, opacities, background, obs_color,
                                      obs_depth, valid, width, height, settings, /*cuda=*/false);
  in.cam = sr::make_camera(fx, fy, cx, cy, width, height);
  const int64_t n = means.size(0);
  const int n_tiles = in.cam.tiles_x * in.cam.tiles_y;
  in.means = means.data_ptr<float>();
  in.colors = colors.data_ptr<float>();
  in.opac = opacities.data_ptr<float>();
  in.bg = background.data_ptr<float>();
  in.obs_color = obs_color.data_ptr<float>();
  in.obs_depth = obs_depth.data_ptr<float>();
  in.valid = valid.data_ptr<bool>();
  const float* rp = radii.data_ptr<float>();

  sr_cpu::Bins bins = sr_cpu::bin_spheres(in.means, rp, n, in.cam, means.options());
  in.splats = bins.splats.data();
  in.ids = bins.ids.data_ptr<int32_t>();
  in.ranges = bins.ranges.data_ptr<int32_t>();
  // the pose Jacobian of each listed sphere, once per sphere
  std::vector<sr::PoseJac> jac;
  if (derivatives) {
    jac.resize(n);
    const float* mp = in.means;
#pragma omp parallel for num_threads(sr_cpu::num_threads()) schedule(static) \
    if (n >= sr_cpu::kParallelSpheres)
    for (int64_t i = 0; i < n; ++i) {
      sr::Splat s;
      if (sr::project_sphere(mp[3 * i], mp[3 * i + 1], mp[3 * i + 2], rp[i], in.cam, s))
        jac[i] = sr::pose_jacobian(mp[3 * i], mp[3 * i + 1], mp[3 * i + 2], rp[i], in.st.pivot_z,
                                   in.cam, s);
    }
  }
  in.jac = jac.data();

  std::vector<double> part((size_t)n_tiles * sr::kGnValues, 0.0);
#pragma omp parallel num_threads(sr_cpu::num_threads()) if (bins.m >= sr_cpu::kParallelPairs)
  {
    TileScratch sc;
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < n_tiles; ++t) {
      double* acc = &part[(size_t)t * sr::kGnValues];
      if (derivatives)
        gn_tile<true>(t, in, sc, acc);
      else
        gn_tile<false>(t, in, sc, acc);
    }
  }
  at::Tensor out = at::zeros({sr::kGnValues}, means.options().dtype(at::kDouble));
  double* o = out.data_ptr<double>();
  for (int t = 0; t < n_tiles; ++t)
    for (int i = 0; i < sr::kGnValues; ++i) o[i] += part[(size_t)t * sr::kGnValues + i];
  return out;
}

// The device LM's evaluation (gn_cuda.cu gauss_newton_lm_cuda; rasterizer/lm_state.py): the pass
// with derivatives at the state's trial pose and exposure, pivot from the state, into its trial
// slot; nothing once the level is done. The CPU binning is exact: capacity is checked as on CUDA,
// not used, and the pair count is not recorded.
void gauss_newton_lm_cpu(const at::Tensor& means, const at::Tensor& radii, const at::Tensor& colors,
                         const at::Tensor& opacities, const at::Tensor& background,
                         const at::Tensor& obs_color, const at::Tensor& obs_depth,
                         const at::Tensor& valid, double fx, double fy, double cx, double cy,
                         int64_t width, int64_t height, c10::ArrayRef<double> settings,
                         at::Tensor state, int64_t level, int64_t capacity) {
  sr::check_lm_evaluation(state, means, level, capacity, /*cuda=*/false);
  sr::check_input(means, "means", /*cuda=*/false, 3);
  double* lm = state.data_ptr<double>();
  if (lm[sr::kLmDone] != 0.0) return;
  const int64_t n = means.size(0);
  at::Tensor cam_means = at::empty_like(means);
  const float* w = means.data_ptr<float>();
  float* c = cam_means.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) sr::lm_trial_to_camera(lm, w + 3 * i, c + 3 * i);
  std::vector<double> st(settings.begin(), settings.end());
  TORCH_CHECK((int)st.size() == sr::kGnSettings, "settings must have ", sr::kGnSettings, " values");
  st[0] = std::exp(lm[sr::kLmTrialExp]);
  st[1] = lm[sr::kLmTrialExp + 1];
  st[12] = lm[sr::kLmPivot];
  at::Tensor out = gauss_newton_cpu(cam_means, radii, colors, opacities, background, obs_color,
                                    obs_depth, valid, fx, fy, cx, cy, width, height, st, true);
  std::copy(out.data_ptr<double>(), out.data_ptr<double>() + sr::kGnValues, lm + sr::kLmTrial);
}

// LM bookkeeping phases (lm_math.h), in order, on a CPU state.
void lm_phase_cpu(at::Tensor state, c10::ArrayRef<int64_t> phases, c10::ArrayRef<double> settings) {
  sr::check_lm_state(state, state, /*cuda=*/false);
  const sr::LmPhases p = sr::check_lm_phases(phases);
  const sr::LmSettings c = sr::check_lm_settings(settings);
  for (int i = 0; i < p.n; ++i) sr::lm_phase(state.data_ptr<double>(), p.phase[i], c);
}

// The ops' schemas (arguments as rasterizer/gauss_newton.py and rasterizer/lm_state.py pass them;
// the LM state is written) and CPU kernels.
TORCH_LIBRARY_FRAGMENT(sphere_raster, m) {
  m.def("gauss_newton(Tensor means, Tensor radii, Tensor colors, Tensor opacities, "
        "Tensor background, Tensor obs_color, Tensor obs_depth, Tensor valid, float fx, float fy, "
        "float cx, float cy, int width, int height, float[] settings, bool derivatives) -> Tensor");
  m.def("gauss_newton_lm(Tensor means, Tensor radii, Tensor colors, Tensor opacities, "
        "Tensor background, Tensor obs_color, Tensor obs_depth, Tensor valid, float fx, float fy, "
        "float cx, float cy, int width, int height, float[] settings, Tensor(a!) state, int level, "
        "int capacity) -> ()");
  m.def("lm_phase(Tensor(a!) state, int[] phases, float[] settings) -> ()");
}

TORCH_LIBRARY_IMPL(sphere_raster, CPU, m) {
  m.impl("gauss_newton", &gauss_newton_cpu);
  m.impl("gauss_newton_lm", &gauss_newton_lm_cpu);
  m.impl("lm_phase", &lm_phase_cpu);
}
