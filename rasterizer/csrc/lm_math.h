// The tracker's Levenberg-Marquardt bookkeeping on the device (rasterizer/lm_state.py has the
// model): the LM state lives in one float64 array beside the fused Gauss-Newton pass, so a whole
// frame's iterations run without the host (and can be captured in a CUDA graph). Shared by the CPU
// op (gn_cpu.cpp) and the one-thread CUDA kernel (gn_cuda.cu) like sphere_math.h.
//
// Per pyramid level: kLmBegin, one evaluation at the current pose (into the trial slot), kLmStart,
// then per iteration kLmPropose, one evaluation at the trial pose, kLmAccept (the phases between
// two evaluations can be one call: LmPhases). An evaluation reads
// the trial pose, the trial exposure and the pivot from the state, and writes the trial slot; once
// the level is done (converged, stuck or nothing in view) the evaluations and phases do nothing.
#pragma once

#include <cmath>

#include "gn_math.h"

namespace sr {

// State layout (float64 values).
constexpr int kLmT = 0;              // current world-to-camera pose, 4x4 row-major
constexpr int kLmTrialT = 16;        // the pose the next evaluation renders at
constexpr int kLmExp = 32;           // current exposure: log gain, bias
constexpr int kLmTrialExp = 34;      // the exposure the next evaluation uses
constexpr int kLmDamping = 36;       // LM damping, relative to diag(H)
constexpr int kLmPivot = 37;         // z of the rotation pivot (0, 0, z), m (camera frame)
constexpr int kLmDone = 38;          // 1: this level is finished (evaluations are skipped)
constexpr int kLmRejections = 39;    // consecutive rejected trials
constexpr int kLmTrials = 40;        // trial evaluations run (all levels)
constexpr int kLmStepMax = 41;       // max |pose step| of the last proposal (rad or m)
constexpr int kLmNoValid = 42;       // 1: a level had no valid pixel (the frame cannot be tracked)
constexpr int kLmOverflow = 43;      // 1: an evaluation had more (tile, sphere) pairs than room
constexpr int kLmMaxLevels = 4;
constexpr int kLmMaxPairs = 44;      // per level (kLmMaxLevels slots): most pairs an evaluation had
constexpr int kLmPasses = 48;        // evaluations run (all levels): the frame's renders
constexpr int kLmCur = 52;           // packed Gauss-Newton result at the current pose (gn_math.h)
constexpr int kLmTrial = kLmCur + kGnValues;    // packed result of the last evaluation
constexpr int kLmSize = kLmTrial + kGnValues;   // 152

enum LmPhase { kLmBegin = 0, kLmStart = 1, kLmPropose = 2, kLmAccept = 3 };
// Phases one call applies in order (one launch on CUDA: e.g. an iteration's accept and the next
// iteration's proposal).
constexpr int kLmMaxPhases = 4;
struct LmPhases {
  int n;
  int phase[kLmMaxPhases];
};

// The exposure's plausible range, the trial exposure is clamped to it (rasterizer/lm_state.py
// LOG_GAIN_MAX and BIAS_MAX, the Python statement): a gain outside [1/8, 8] or a bias beyond a
// whole colour range is not an exposure change but a failed fit (the log gain's step on a frame
// whose covered map is nearly black overflowed exp()). Not tuning values: they keep the
// arithmetic finite.
constexpr double kLmLogGainMax = 2.0794415416798357;  // log(8)
constexpr double kLmBiasMax = 1.0;                    // colour is in [0, 1]

// v clamped to [-limit, limit]; NaN stays NaN (as numpy.clip).
SR_HD double lm_clamp(double v, double limit) { return v < -limit ? -limit : (v > limit ? limit : v); }

// True for a finite value: NaN and +-inf fail the comparison (one spelling for host C++ and CUDA).
SR_HD bool lm_finite(double v) { return fabs(v) <= 1.7976931348623157e308; }

// Host list: damping, damping_up, damping_down, min_damping, min_diagonal, converged_step,
// attempts, exposure (0/1).
constexpr int kLmSettings = 8;
struct LmSettings {
  double damping, damping_up, damping_down, min_damping, min_diagonal, converged_step;
  int attempts;
  bool exposure;
};

inline LmSettings make_lm_settings(const double* s) {
  return LmSettings{s[0], s[1], s[2], s[3], s[4], s[5], (int)s[6], s[7] != 0.0};
}

// Solves A[:, :n] x = A[:, n] (n <= kGnParams rows of an augmented matrix, overwritten) by
// Gaussian elimination with partial pivoting. Returns false (x = 0) when A is singular. Also the
// loop stage's ICP step (icp_cpu.cpp).
SR_HD bool solve_pivoted(double (*A)[kGnParams + 1], int n, double* x) {
  for (int c = 0; c < n; ++c) {
    int p = c;
    for (int r = c + 1; r < n; ++r)
      if (fabs(A[r][c]) > fabs(A[p][c])) p = r;
    if (A[p][c] == 0.0) {
      for (int i = 0; i < n; ++i) x[i] = 0.0;
      return false;
    }
    if (p != c)
      for (int j = c; j <= n; ++j) {
        const double t = A[c][j];
        A[c][j] = A[p][j];
        A[p][j] = t;
      }
    for (int r = c + 1; r < n; ++r) {
      const double f = A[r][c] / A[c][c];
      for (int j = c; j <= n; ++j) A[r][j] -= f * A[c][j];
    }
  }
  for (int i = n - 1; i >= 0; --i) {
    double s = A[i][n];
    for (int j = i + 1; j < n; ++j) s -= A[i][j] * x[j];
    x[i] = s / A[i][i];
  }
  return true;
}

// Solves A x = b for a symmetric positive definite kGnParams x kGnParams A (its lower triangle
// is read and overwritten) by LDL^T without pivoting. Returns false (x = 0) when a pivot is not
// positive (singular, indefinite or NaN). Fixed size, every loop unrolled: the one-thread CUDA
// kernel keeps A in registers (solve_pivoted's row swaps index its array at run time, which put
// it in local memory: 720 bytes of stack in lm_phase_kernel).
SR_HD bool solve_spd(double (&A)[kGnParams][kGnParams], const double (&b)[kGnParams],
                     double (&x)[kGnParams]) {
  double d[kGnParams], inv_d[kGnParams];
#pragma unroll
  for (int j = 0; j < kGnParams; ++j) {  // column j of L (below the diagonal, in A) and d_j
    double dj = A[j][j];
#pragma unroll
    for (int k = 0; k < j; ++k) dj -= A[j][k] * A[j][k] * d[k];
    if (!(dj > 0.0)) {
#pragma unroll
      for (int i = 0; i < kGnParams; ++i) x[i] = 0.0;
      return false;
    }
    d[j] = dj;
    inv_d[j] = 1.0 / dj;
#pragma unroll
    for (int i = j + 1; i < kGnParams; ++i) {
      double v = A[i][j];
#pragma unroll
      for (int k = 0; k < j; ++k) v -= A[i][k] * A[j][k] * d[k];
      A[i][j] = v * inv_d[j];
    }
  }
  double y[kGnParams];  // L y = b, then L^T x = y / d
#pragma unroll
  for (int i = 0; i < kGnParams; ++i) {
    double v = b[i];
#pragma unroll
    for (int k = 0; k < i; ++k) v -= A[i][k] * y[k];
    y[i] = v;
  }
#pragma unroll
  for (int i = kGnParams - 1; i >= 0; --i) {
    double v = y[i] * inv_d[i];
#pragma unroll
    for (int k = i + 1; k < kGnParams; ++k) v -= A[k][i] * x[k];
    x[i] = v;
  }
  return true;
}

// x = -(H + damping diag(max(diag H, min_diag)))^-1 g of a packed result (n = 6 or 8 parameters):
// the damped normal equations are symmetric positive definite (H = J^T W J, damping > 0), solved by
// solve_spd (with n = 6 the exposure's rows and columns are the identity's and its g 0, so x[6] =
// x[7] = 0 and the pose block is solved alone). Returns false (x = 0) when the damped system is
// singular or the step is not finite (NaN / inf normal equations: no move).
SR_HD bool lm_damped_step(const double* packed, double damping, double min_diag, int n, double* x) {
  double A[kGnParams][kGnParams], b[kGnParams], s[kGnParams];
#pragma unroll
  for (int i = 0; i < kGnParams; ++i) {
#pragma unroll
    for (int j = 0; j <= i; ++j)  // the lower triangle: solve_spd's input
      A[i][j] = i < n ? packed[gn_tri(j, i)] : (i == j ? 1.0 : 0.0);
    if (i < n) A[i][i] += damping * fmax(A[i][i], min_diag);
    b[i] = i < n ? -packed[kGnG + i] : 0.0;
  }
  bool ok = solve_spd(A, b, s);
#pragma unroll
  for (int i = 0; i < kGnParams; ++i) ok = ok && lm_finite(s[i]);
#pragma unroll
  for (int i = 0; i < kGnParams; ++i) x[i] = ok ? s[i] : 0.0;
  return ok;
}

// out = pivot_increment(d) @ T (4x4 row-major): X' = R(w) (X - p) + p + t with d = (w, t),
// p = (0, 0, z), R by Rodrigues (slam.geometry.pivot_increment).
SR_HD void lm_apply_increment(const double* d, double z, const double* T, double* out) {
  const double w0 = d[0], w1 = d[1], w2 = d[2];
  const double th2 = w0 * w0 + w1 * w1 + w2 * w2;
  double a, b;
  if (th2 < 1e-16) {
    a = 1.0 - th2 / 6.0;
    b = 0.5 - th2 / 24.0;
  } else {
    const double th = sqrt(th2);
    a = sin(th) / th;
    b = (1.0 - cos(th)) / th2;
  }
  const double W[3][3] = {{0.0, -w2, w1}, {w2, 0.0, -w0}, {-w1, w0, 0.0}};
  double M[4][4];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double ww = 0.0;
      for (int k = 0; k < 3; ++k) ww += W[i][k] * W[k][j];
      M[i][j] = (i == j ? 1.0 : 0.0) + a * W[i][j] + b * ww;
    }
  // translation p - R p + t with p = (0, 0, z)
  for (int i = 0; i < 3; ++i) M[i][3] = (i == 2 ? z : 0.0) - M[i][2] * z + d[3 + i];
  M[3][0] = M[3][1] = M[3][2] = 0.0;
  M[3][3] = 1.0;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      double s = 0.0;
      for (int k = 0; k < 4; ++k) s += M[i][k] * T[4 * k + j];
      out[4 * i + j] = s;
    }
}

// Camera-frame coordinates (3 floats into c) of the world point w (3 floats) at the state's trial
// pose, in float32 with every product rounded on its own, in the order of
// slam.geometry.transform_points: ((R0 x + R1 y) + R2 z) + t. The CPU op and the CUDA kernel both
// use it, so they transform bit for bit alike.
SR_HD void lm_trial_to_camera(const double* lm, const float* w, float* c) {
  const double* T = lm + kLmTrialT;
  for (int r = 0; r < 3; ++r)
    c[r] = ((mul_rn((float)T[4 * r], w[0]) + mul_rn((float)T[4 * r + 1], w[1])) +
            mul_rn((float)T[4 * r + 2], w[2])) + (float)T[4 * r + 3];
}

SR_HD void lm_copy(const double* src, double* dst, int n) {
  for (int i = 0; i < n; ++i) dst[i] = src[i];
}

// One LM bookkeeping phase on the state s (kLmSize values).
SR_HD void lm_phase(double* s, int phase, const LmSettings& c) {
  const int n = c.exposure ? kGnParams : kGnPose;
  if (phase == kLmBegin) {  // a new level: fresh damping, evaluate at the current pose
    s[kLmDone] = s[kLmNoValid];
    s[kLmRejections] = 0.0;
    s[kLmDamping] = c.damping;
    lm_copy(s + kLmT, s + kLmTrialT, 16);
    lm_copy(s + kLmExp, s + kLmTrialExp, 2);
    return;
  }
  if (s[kLmDone] != 0.0) return;
  if (phase == kLmStart) {  // the level's first evaluation becomes the current result
    s[kLmPasses] += 1.0;
    lm_copy(s + kLmTrial, s + kLmCur, kGnValues);
    if (s[kLmCur + kGnValid] == 0.0) {
      s[kLmNoValid] = 1.0;
      s[kLmDone] = 1.0;
    } else if (s[kLmCur + kGnCost] == 0.0) {
      s[kLmDone] = 1.0;  // nothing known in view
    }
  } else if (phase == kLmPropose) {
    double x[kGnParams] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    lm_damped_step(s + kLmCur, s[kLmDamping], c.min_diagonal, n, x);
    double m = 0.0;
    for (int i = 0; i < kGnPose; ++i) m = fmax(m, fabs(x[i]));
    s[kLmStepMax] = m;
    lm_apply_increment(x, s[kLmPivot], s + kLmT, s + kLmTrialT);
    s[kLmTrialExp] = lm_clamp(s[kLmExp] + (c.exposure ? x[6] : 0.0), kLmLogGainMax);
    s[kLmTrialExp + 1] = lm_clamp(s[kLmExp + 1] + (c.exposure ? x[7] : 0.0), kLmBiasMax);
  } else if (phase == kLmAccept) {
    s[kLmTrials] += 1.0;
    s[kLmPasses] += 1.0;
    if (s[kLmTrial + kGnCost] <= s[kLmCur + kGnCost]) {
      lm_copy(s + kLmTrialT, s + kLmT, 16);
      lm_copy(s + kLmTrialExp, s + kLmExp, 2);
      lm_copy(s + kLmTrial, s + kLmCur, kGnValues);
      s[kLmDamping] = fmax(s[kLmDamping] * c.damping_down, c.min_damping);
      s[kLmRejections] = 0.0;
      if (s[kLmStepMax] < c.converged_step || s[kLmCur + kGnCost] == 0.0) s[kLmDone] = 1.0;
    } else {
      s[kLmDamping] *= c.damping_up;
      s[kLmRejections] += 1.0;
      if (s[kLmRejections] >= c.attempts) s[kLmDone] = 1.0;  // no improving step: converged
    }
  }
}

}  // namespace sr
