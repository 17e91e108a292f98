// Projective point-to-plane ICP of a depth image's points onto another depth image, on the host:
// the loop stage's ICP (slam/loop/icp.py has the model; its NumPy oracle, icp_reference, is what
// tests/test_loop_icp_kernel.py checks this against). One call runs every iteration without the
// interpreter lock: the oracle's numpy calls (about 40 an iteration) each take the lock, and the
// loop thread, which runs an ICP for every keyframe, held up the tracking and mapping threads at
// every one of their own lock hand-overs. Host only (the keyframes live on the host): no CUDA
// kernel. Sums in float64, point by point in the source's order.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "lm_math.h"

namespace {

// The destination depth as slam.loop.icp.DepthSurface reads it: the camera point of pixel (u, v)
// and the unit normal there from central differences (none at the image border, where a
// neighbour has no depth, or where the differences are parallel).
struct Surface {
  const float* z;
  int w, h;
  std::vector<double> rx, ry;  // the point at (u, v) is (rx[u] z, ry[v] z, z)

  Surface(const float* z_, int w_, int h_, double fx, double fy, double cx, double cy)
      : z(z_), w(w_), h(h_), rx(w_), ry(h_) {
    for (int u = 0; u < w; ++u) rx[u] = ((double)u - cx) / fx;
    for (int v = 0; v < h; ++v) ry[v] = ((double)v - cy) / fy;
  }

  void point(int u, int v, double* p) const {
    const double d = (double)z[(size_t)v * w + u];
    p[0] = rx[u] * d;
    p[1] = ry[v] * d;
    p[2] = d;
  }

  // Point q and normal n at (u, v) inside the image; false when there is no normal or no depth.
  bool at(int u, int v, double* q, double* n) const {
    double a[3], b[3], dx[3] = {0.0, 0.0, 0.0}, dy[3] = {0.0, 0.0, 0.0};
    if (u != 0 && u != w - 1) {
      point(std::min(u + 1, w - 1), v, a);
      point(std::max(u - 1, 0), v, b);
      for (int i = 0; i < 3; ++i) dx[i] = a[i] - b[i];
    }
    if (v != 0 && v != h - 1) {
      point(u, std::min(v + 1, h - 1), a);
      point(u, std::max(v - 1, 0), b);
      for (int i = 0; i < 3; ++i) dy[i] = a[i] - b[i];
    }
    const double c0 = dx[1] * dy[2] - dx[2] * dy[1];
    const double c1 = dx[2] * dy[0] - dx[0] * dy[2];
    const double c2 = dx[0] * dy[1] - dx[1] * dy[0];
    const double norm = std::sqrt(c0 * c0 + c1 * c1 + c2 * c2);
    point(u, v, q);
    if (!(norm > 1e-12) || !(q[2] > 0.0)) return false;
    n[0] = c0 / norm;
    n[1] = c1 / norm;
    n[2] = c2 / norm;
    return true;
  }
};

// The rotation block of T (4x4 row-major) projected onto SO(3): the polar factor by Newton's
// iteration X <- (X + X^-T) / 2 (T's rotation is orthonormal to rounding, two steps reach it;
// slam.geometry.orthonormalize takes the same factor from an SVD).
void orthonormalize(double* T) {
  for (int it = 0; it < 2; ++it) {
    const double* a = T;
    const double c00 = a[5] * a[10] - a[6] * a[9], c01 = a[6] * a[8] - a[4] * a[10],
                 c02 = a[4] * a[9] - a[5] * a[8];
    const double c10 = a[2] * a[9] - a[1] * a[10], c11 = a[0] * a[10] - a[2] * a[8],
                 c12 = a[1] * a[8] - a[0] * a[9];
    const double c20 = a[1] * a[6] - a[2] * a[5], c21 = a[2] * a[4] - a[0] * a[6],
                 c22 = a[0] * a[5] - a[1] * a[4];
    const double det = a[0] * c00 + a[1] * c01 + a[2] * c02;
    // X^-T = cofactor matrix / det
    const double inv_t[9] = {c00 / det, c01 / det, c02 / det, c10 / det, c11 / det,
                             c12 / det, c20 / det, c21 / det, c22 / det};
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) T[4 * r + c] = 0.5 * (T[4 * r + c] + inv_t[3 * r + c]);
  }
  T[12] = T[13] = T[14] = 0.0;
  T[15] = 1.0;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + m, v.end());
  const double hi = v[m];
  if (v.size() % 2 == 1) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + m);
  return (lo + hi) / 2.0;
}

}  // namespace

// src: (N, 3) float64 source-camera points (metres); dst_depth: (H, W) float32 metres (0 = none);
// T_init: (4, 4) float64 source -> destination camera; params: fx, fy, cx, cy (destination
// pixels), tol (m), quad (1/m), max_pair, converged; iters: at most this many steps.
// Returns [T (4, 4), stats (5,): overlap, inliers, residual variance (m^2), median depth of the
// pairs used (m), 1 when the normal equations exist, H (6, 6)] (float64; the model:
// slam/loop/icp.py icp_reference).
std::vector<at::Tensor> icp_point_to_plane_cpu(const at::Tensor& src, const at::Tensor& dst_depth,
                                               const at::Tensor& T_init,
                                               c10::ArrayRef<double> params, int64_t iters) {
  TORCH_CHECK(!src.is_cuda() && !dst_depth.is_cuda() && !T_init.is_cuda(), "icp_point_to_plane: host tensors only");
  TORCH_CHECK(src.scalar_type() == at::kDouble && src.dim() == 2 && src.size(1) == 3 && src.is_contiguous(),
              "icp_point_to_plane: src must be a contiguous (N, 3) float64 tensor");
  TORCH_CHECK(dst_depth.scalar_type() == at::kFloat && dst_depth.dim() == 2 && dst_depth.is_contiguous(),
              "icp_point_to_plane: dst_depth must be a contiguous (H, W) float32 tensor");
  TORCH_CHECK(T_init.scalar_type() == at::kDouble && T_init.numel() == 16 && T_init.is_contiguous(),
              "icp_point_to_plane: T_init must be a contiguous (4, 4) float64 tensor");
  TORCH_CHECK(params.size() == 8, "icp_point_to_plane: params are fx, fy, cx, cy, tol, quad, max_pair, converged");
  TORCH_CHECK(iters >= 0, "icp_point_to_plane: iters must be >= 0");
  const double fx = params[0], fy = params[1], cx = params[2], cy = params[3];
  const Surface S(dst_depth.data_ptr<float>(), (int)dst_depth.size(1), (int)dst_depth.size(0), fx, fy, cx, cy);
  const double tol = params[4], quad = params[5], max_pair = params[6], converged_step = params[7];
  const int64_t N = src.size(0);
  const double* P = src.data_ptr<double>();

  at::Tensor T_out = T_init.clone();
  at::Tensor stats = at::zeros({5}, T_init.options());
  at::Tensor H_out = at::zeros({6, 6}, T_init.options());
  double* T = T_out.data_ptr<double>();
  double* st = stats.data_ptr<double>();
  double* Hs = H_out.data_ptr<double>();

  double overlap = 0.0, inliers = 0.0, var = 0.0;
  bool have_H = false, converged = false;
  std::vector<double> depths, used_depths;
  for (int64_t it = 0; it <= iters; ++it) {
    double H[6][6] = {}, g[6] = {}, rr = 0.0;
    int64_t kept = 0, inl = 0, used = 0;
    used_depths.clear();
    for (int64_t i = 0; i < N; ++i) {
      const double sx = P[3 * i], sy = P[3 * i + 1], sz = P[3 * i + 2];
      double p[3];
      for (int r = 0; r < 3; ++r) p[r] = T[4 * r] * sx + T[4 * r + 1] * sy + T[4 * r + 2] * sz + T[4 * r + 3];
      if (!(p[2] > 1e-3)) continue;
      const double fu = std::nearbyint(fx * p[0] / p[2] + cx);
      const double fv = std::nearbyint(fy * p[1] / p[2] + cy);
      if (!(fu >= 0.0 && fu < S.w && fv >= 0.0 && fv < S.h)) continue;
      double q[3], n[3];
      if (!S.at((int)fu, (int)fv, q, n)) continue;
      ++kept;
      const double d0 = p[0] - q[0], d1 = p[1] - q[1], d2 = p[2] - q[2];
      const double res = n[0] * d0 + n[1] * d1 + n[2] * d2;
      const double t = tol + quad * q[2] * q[2];
      if (std::fabs(res) < t) ++inl;
      const double lim = max_pair * t;
      if (!(d0 * d0 + d1 * d1 + d2 * d2 < lim * lim)) continue;
      ++used;
      const double J[6] = {p[1] * n[2] - p[2] * n[1], p[2] * n[0] - p[0] * n[2], p[0] * n[1] - p[1] * n[0],
                           n[0], n[1], n[2]};
      for (int a = 0; a < 6; ++a) {
        for (int b = a; b < 6; ++b) H[a][b] += J[a] * J[b];
        g[a] += J[a] * res;
      }
      rr += res * res;
      used_depths.push_back(p[2]);
    }
    overlap = (double)kept / (double)std::max<int64_t>(N, 1);
    if (kept < 6) {  // nothing to align: the oracle's early return (no inliers, no equations)
      inliers = 0.0;
      have_H = false;
      depths.clear();
      var = 0.0;
      break;
    }
    inliers = (double)inl / (double)kept;
    if (used < 6) break;  // the previous iteration's equations stay
    for (int a = 0; a < 6; ++a)
      for (int b = 0; b < a; ++b) H[a][b] = H[b][a];
    for (int a = 0; a < 6; ++a)
      for (int b = 0; b < 6; ++b) Hs[6 * a + b] = H[a][b];
    have_H = true;
    depths.swap(used_depths);
    var = rr / (double)std::max<int64_t>(used - 6, 1);
    if (it == iters || converged) break;
    double A[sr::kGnParams][sr::kGnParams + 1];
    for (int a = 0; a < 6; ++a) {
      for (int b = 0; b < 6; ++b) A[a][b] = H[a][b] + (a == b ? 1e-9 : 0.0);
      A[a][6] = g[a];
    }
    double x[6], step[6];
    if (!sr::solve_pivoted(A, 6, x)) break;
    double biggest = 0.0;
    for (int a = 0; a < 6; ++a) {
      step[a] = -x[a];
      biggest = std::max(biggest, std::fabs(step[a]));
    }
    double moved[16];
    sr::lm_apply_increment(step, 0.0, T, moved);
    orthonormalize(moved);
    std::copy(moved, moved + 16, T);
    converged = biggest < converged_step;
  }
  st[0] = overlap;
  st[1] = inliers;
  st[2] = have_H ? var : 0.0;
  st[3] = have_H ? median(depths) : 0.0;
  st[4] = have_H ? 1.0 : 0.0;
  if (!have_H) H_out.zero_();
  return {T_out, stats, H_out};
}

TORCH_LIBRARY_FRAGMENT(sphere_raster, m) {
  m.def("icp_point_to_plane(Tensor src, Tensor dst_depth, Tensor T_init, float[] params, int iters) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(sphere_raster, CPU, m) { m.impl("icp_point_to_plane", &icp_point_to_plane_cpu); }
