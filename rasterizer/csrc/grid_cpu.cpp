// The occupancy grid's per-keyframe work on the host: a keyframe's scan (grid_scan) and its occupied
// and free voxels of the robot's height band (grid_cast). The models are slam/grid/scan.py and
// slam/grid/raycast.py; their NumPy oracles (make_scan_reference, cast_reference) are what
// tests/test_grid_kernel.py checks these against, value for value. One call each without the
// interpreter lock: the grid thread works on every keyframe (and again when one moves) beside the
// tracking and mapping threads. Host only (the scans live on the host): no CUDA kernels.
// The free segments' samples are computed in float32 exactly as the oracle's (voxel units,
// product and sum rounded on their own), so both mark the same voxels.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

at::Tensor voxel_rows(const std::vector<int64_t>& flat, const int64_t* lo, const int64_t* span) {
  at::Tensor out = at::empty({(int64_t)flat.size(), 3}, at::TensorOptions().dtype(at::kInt));
  int32_t* o = out.data_ptr<int32_t>();
  for (size_t i = 0; i < flat.size(); ++i) {
    const int64_t f = flat[i];
    o[3 * i] = (int32_t)(f % span[0] + lo[0]);
    o[3 * i + 1] = (int32_t)((f / span[0]) % span[1] + lo[1]);
    o[3 * i + 2] = (int32_t)(f / (span[0] * span[1]) + lo[2]);
  }
  return out;
}

}  // namespace

// pts: (N, 3) float64 surface points in the floor frame (x, y, height above the floor; metres);
// params: the camera in the floor frame (x, y, height), resolution (m per cell and layer),
// min_height, max_height (the band, m), max_range (m), layers, step (free-segment sample spacing,
// cells). Returns [occupied (M, 3), free (F, 3)] int32 (cell x, cell y, layer), each distinct and
// ordered by (layer, y, x), disjoint (the model: slam/grid/raycast.py cast_reference).
std::vector<at::Tensor> grid_cast_cpu(const at::Tensor& pts, c10::ArrayRef<double> params) {
  TORCH_CHECK(!pts.is_cuda() && pts.scalar_type() == at::kDouble && pts.dim() == 2 && pts.size(1) == 3 &&
                  pts.is_contiguous(),
              "grid_cast: pts must be a contiguous (N, 3) float64 host tensor");
  TORCH_CHECK(params.size() == 9,
              "grid_cast: params are cam x, y, height, resolution, min_height, max_height, max_range, layers, step");
  const double cam[3] = {params[0], params[1], params[2]};
  const double res = params[3], hmin = params[4], hmax = params[5], max_range = params[6];
  const int64_t layers = (int64_t)params[7];
  const double step = params[8];
  TORCH_CHECK(res > 0.0 && layers >= 1 && step > 0.0, "grid_cast: resolution, layers and step must be positive");
  const int64_t N = pts.size(0);
  const double* P = pts.data_ptr<double>();
  const double inv_res = 1.0 / res, shift_z = hmin / res;

  // The segments' ends in voxel units (float32, as the oracle's) and their sample counts.
  std::vector<float> av, bv;
  std::vector<int64_t> count;
  std::vector<int64_t> occ;  // occupied voxels as (x, y, layer) triples
  for (int64_t i = 0; i < N; ++i) {
    const double d[3] = {P[3 * i] - cam[0], P[3 * i + 1] - cam[1], P[3 * i + 2] - cam[2]};
    const double dist = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
    const double t_end = std::min(1.0, max_range / std::max(dist, 1e-9));
    const double h = P[3 * i + 2];
    const bool near = dist <= max_range;
    if (h >= hmin && h <= hmax && near) {
      occ.push_back((int64_t)std::floor(P[3 * i] / res));
      occ.push_back((int64_t)std::floor(P[3 * i + 1] / res));
      occ.push_back(std::min<int64_t>(std::max<int64_t>((int64_t)std::floor((h - hmin) / res), 0), layers - 1));
    }
    const bool floor_pt = h < hmin && near;
    const double dh = d[2];
    double ta, tb;
    if (std::fabs(dh) < 1e-9) {
      const bool in_band = cam[2] >= hmin && cam[2] <= hmax;
      ta = in_band ? 0.0 : 1.0;
      tb = in_band ? 1.0 : 0.0;
    } else {
      const double t1 = (hmin - cam[2]) / dh, t2 = (hmax - cam[2]) / dh;
      ta = std::min(t1, t2);
      tb = std::max(t1, t2);
    }
    if (floor_pt) tb = 1.0;
    ta = std::max(ta, 0.0);
    tb = std::min(tb, t_end);
    if (!(tb > ta)) continue;
    double a[3], b[3];
    for (int k = 0; k < 3; ++k) {
      a[k] = cam[k] + ta * d[k];
      b[k] = cam[k] + tb * d[k];
    }
    const double l0 = b[0] - a[0], l1 = b[1] - a[1], l2 = b[2] - a[2];
    const double length = std::sqrt(l0 * l0 + l1 * l1 + l2 * l2);
    count.push_back((int64_t)(length / (step * res)) + 2);
    av.push_back((float)(a[0] * inv_res - 0.0));
    av.push_back((float)(a[1] * inv_res - 0.0));
    av.push_back((float)(a[2] * inv_res - shift_z));
    bv.push_back((float)(b[0] * inv_res - 0.0));
    bv.push_back((float)(b[1] * inv_res - 0.0));
    bv.push_back((float)(b[2] * inv_res - shift_z));
  }

  // Occupied: distinct, ordered by (layer, y, x).
  const size_t n_occ = occ.size() / 3;
  std::vector<int64_t> occ_lo(3, 0), occ_span(3, 1), occ_flat;
  if (n_occ > 0) {
    int64_t hi[3];
    for (int k = 0; k < 3; ++k) {
      occ_lo[k] = hi[k] = occ[k];
      for (size_t i = 1; i < n_occ; ++i) {
        occ_lo[k] = std::min(occ_lo[k], occ[3 * i + k]);
        hi[k] = std::max(hi[k], occ[3 * i + k]);
      }
      occ_span[k] = hi[k] - occ_lo[k] + 1;
    }
    for (size_t i = 0; i < n_occ; ++i)
      occ_flat.push_back(((occ[3 * i + 2] - occ_lo[2]) * occ_span[1] + (occ[3 * i + 1] - occ_lo[1])) * occ_span[0] +
                         (occ[3 * i] - occ_lo[0]));
    std::sort(occ_flat.begin(), occ_flat.end());
    occ_flat.erase(std::unique(occ_flat.begin(), occ_flat.end()), occ_flat.end());
  }
  at::Tensor occupied = voxel_rows(occ_flat, occ_lo.data(), occ_span.data());
  const size_t n_seg = count.size();
  if (n_seg == 0) return {occupied, at::empty({0, 3}, at::TensorOptions().dtype(at::kInt))};

  // Free: every sample's voxel in the segments' bounding box (layers: the whole band), less the
  // occupied ones.
  int64_t lo[3], span[3];
  for (int k = 0; k < 3; ++k) {
    float mn = av[k], mx = av[k];
    for (size_t s = 0; s < n_seg; ++s) {
      mn = std::min(mn, std::min(av[3 * s + k], bv[3 * s + k]));
      mx = std::max(mx, std::max(av[3 * s + k], bv[3 * s + k]));
    }
    lo[k] = (int64_t)std::floor(mn);
    span[k] = (int64_t)std::floor(mx) - lo[k] + 1;
  }
  lo[2] = 0;
  span[2] = layers;
  std::vector<uint8_t> seen((size_t)(span[0] * span[1] * span[2]), 0);
  for (size_t s = 0; s < n_seg; ++s) {
    const float denom = (float)count[s] - 1.0f;
    for (int64_t j = 0; j < count[s]; ++j) {
      const float frac = (float)j / denom;
      int64_t flat = 0;
      const int64_t stride[3] = {1, span[0], span[0] * span[1]};
      for (int k = 0; k < 3; ++k) {
        const float a = av[3 * s + k], diff = bv[3 * s + k] - a;
        const float prod = diff * frac;
        const float x = a + prod;
        int64_t c = (int64_t)std::floor(x) - lo[k];
        c = std::min<int64_t>(std::max<int64_t>(c, 0), span[k] - 1);
        flat += c * stride[k];
      }
      seen[(size_t)flat] = 1;
    }
  }
  const int32_t* o = occupied.data_ptr<int32_t>();
  for (int64_t i = 0; i < occupied.size(0); ++i) {
    const int64_t x = o[3 * i] - lo[0], y = o[3 * i + 1] - lo[1], z = o[3 * i + 2] - lo[2];
    if (x >= 0 && x < span[0] && y >= 0 && y < span[1] && z >= 0 && z < span[2])
      seen[(size_t)((z * span[1] + y) * span[0] + x)] = 0;
  }
  std::vector<int64_t> free_flat;
  for (size_t f = 0; f < seen.size(); ++f)
    if (seen[f]) free_flat.push_back((int64_t)f);
  return {occupied, voxel_rows(free_flat, lo, span)};
}

// A keyframe's scan (slam/grid/scan.py has the model; make_scan_reference its NumPy oracle): the
// pixels of an even sub-grid (every `step`-th from step / 2) back-projected (float64 from the
// float32 depth), a normal each from the right and lower sub-grid neighbours (none at a depth edge:
// a neighbour's depth differs by `edge_share` of this one's or more, in float32, or missing),
// turned to face the camera; the points with depth at `min_range` or more are kept, and the
// normals of every `normal_every`-th of them.
// depth: (H, W) float32 metres (0 / NaN = none); params: fx, fy, cx, cy, step, min_range,
// edge_share, normal_every. Returns [points (N, 3), normals (M, 3)] float64.
std::vector<at::Tensor> grid_scan_cpu(const at::Tensor& depth, c10::ArrayRef<double> params) {
  TORCH_CHECK(!depth.is_cuda() && depth.scalar_type() == at::kFloat && depth.dim() == 2 && depth.is_contiguous(),
              "grid_scan: depth must be a contiguous (H, W) float32 host tensor");
  TORCH_CHECK(params.size() == 8, "grid_scan: params are fx, fy, cx, cy, step, min_range, edge_share, normal_every");
  const double fx = params[0], fy = params[1], cx = params[2], cy = params[3], min_range = params[5];
  const int64_t step = (int64_t)params[4], every = (int64_t)params[7];
  const float edge = (float)params[6];
  TORCH_CHECK(step >= 1 && every >= 1, "grid_scan: step and normal_every must be >= 1");
  const int64_t H = depth.size(0), W = depth.size(1);
  const float* D = depth.data_ptr<float>();
  std::vector<int64_t> us, vs;
  for (int64_t u = step / 2; u < W; u += step) us.push_back(u);
  for (int64_t v = step / 2; v < H; v += step) vs.push_back(v);
  const int64_t h = (int64_t)vs.size(), w = (int64_t)us.size();
  auto zf = [&](int64_t i, int64_t j) { return D[vs[i] * W + us[j]]; };
  auto valid = [&](float z) { return std::isfinite(z) && z > 0.0f; };
  auto point = [&](int64_t i, int64_t j, double* p) {
    const float z = zf(i, j);
    p[0] = ((double)us[j] - cx) / fx * (double)z;
    p[1] = ((double)vs[i] - cy) / fy * (double)z;
    p[2] = (double)z;
  };
  std::vector<double> pts, nrm;
  int64_t kept = 0;
  for (int64_t i = 0; i < h; ++i)
    for (int64_t j = 0; j < w; ++j) {
      const float z = zf(i, j);
      if (!valid(z)) continue;
      double P[3];
      point(i, j, P);
      if (!(std::sqrt(P[0] * P[0] + P[1] * P[1] + P[2] * P[2]) >= min_range)) continue;
      double n[3] = {0.0, 0.0, 0.0};
      if (i + 1 < h && j + 1 < w) {
        const float zr = zf(i, j + 1), zd = zf(i + 1, j);
        if (valid(zr) && valid(zd) && std::fabs(zr - z) < edge * z && std::fabs(zd - z) < edge * z) {
          double R[3], Dn[3];
          point(i, j + 1, R);
          point(i + 1, j, Dn);
          const double dx[3] = {R[0] - P[0], R[1] - P[1], R[2] - P[2]};
          const double dy[3] = {Dn[0] - P[0], Dn[1] - P[1], Dn[2] - P[2]};
          const double c[3] = {dy[1] * dx[2] - dy[2] * dx[1], dy[2] * dx[0] - dy[0] * dx[2],
                               dy[0] * dx[1] - dy[1] * dx[0]};
          const double norm = std::sqrt(c[0] * c[0] + c[1] * c[1] + c[2] * c[2]);
          if (norm > 0.0) {
            for (int k = 0; k < 3; ++k) n[k] = c[k] / norm;
            if (n[0] * P[0] + n[1] * P[1] + n[2] * P[2] > 0.0)
              for (int k = 0; k < 3; ++k) n[k] *= -1.0;
          }
        }
      }
      pts.insert(pts.end(), P, P + 3);
      if (kept % every == 0) nrm.insert(nrm.end(), n, n + 3);
      ++kept;
    }
  auto opts = at::TensorOptions().dtype(at::kDouble);
  at::Tensor P = at::empty({kept, 3}, opts), N = at::empty({(int64_t)nrm.size() / 3, 3}, opts);
  std::copy(pts.begin(), pts.end(), P.data_ptr<double>());
  std::copy(nrm.begin(), nrm.end(), N.data_ptr<double>());
  return {P, N};
}

TORCH_LIBRARY_FRAGMENT(sphere_raster, m) {
  m.def("grid_cast(Tensor pts, float[] params) -> Tensor[]");
  m.def("grid_scan(Tensor depth, float[] params) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(sphere_raster, CPU, m) {
  m.impl("grid_cast", &grid_cast_cpu);
  m.impl("grid_scan", &grid_scan_cpu);
}
