"""The tracker's Levenberg-Marquardt loop with its state on the device, beside the fused
Gauss-Newton pass (``rasterizer.gauss_newton``): a frame's iterations need no host decision, so
they run without a host wait and, on CUDA, can be captured in one CUDA graph.

Usage (one pyramid level; ``slam.tracking.fused`` drives the levels)::

    state = lm_state.new_state(T_cw, device)             # (STATE_SIZE,) float64
    state[PIVOT] = z_pivot                                # or a device op: no host wait
    s = lm_state.lm_settings(damping=1e-3, ...)
    lm_state.lm_phase(state, BEGIN, s)
    lm_state.gauss_newton_lm(means_w, ..., state, level=0, capacity=cap, ...)
    lm_state.lm_phase(state, START, s)
    for _ in range(n_iter):
        lm_state.lm_phase(state, PROPOSE, s)
        lm_state.gauss_newton_lm(means_w, ..., state, level=0, capacity=cap, ...)
        lm_state.lm_phase(state, ACCEPT, s)
    host = state.cpu()                                    # the frame's one host wait

The phases between two evaluations may be one call (``lm_phase(state, [ACCEPT, PROPOSE], s)``: one
kernel launch on CUDA); ``slam.tracking.fused`` queues them that way.

The model (csrc/lm_math.h; ``lm_phase_reference`` is the NumPy oracle)
--------------------------------------------------------------------
State (float64, offsets below): current pose T_cw (4x4 world-to-camera) and exposure (log gain,
bias), the trial pose and exposure that the next evaluation renders at, the damping, the pivot z,
flags and counters, and two packed Gauss-Newton results (rasterizer.gauss_newton's 50 values):
``CUR`` at the current pose, ``TRIAL`` of the last evaluation.

* BEGIN (a level starts): damping = settings' initial damping, trial = current, done = no_valid.
* evaluation (``gauss_newton_lm``): the fused pass with derivatives at the trial pose and
  exposure, the world-frame means transformed on the device, the pivot from the state; writes
  TRIAL. Skipped once the level is done.
* START: passes += 1, CUR = TRIAL; done when no pixel is valid (no_valid = 1: the frame fails)
  or the cost is 0.
* PROPOSE: x = -(H + damping diag(max(diag H, min_diagonal)))^-1 g from CUR (6 or 8 parameters;
  x = 0 when it is not finite: no move), trial pose = pivot_increment(x[:6], pivot) @ T
  (slam.geometry.pivot_increment), trial exposure = exposure + x[6:8] (with exposure), clamped
  to the plausible range (``clamp_exposure``).
* ACCEPT: trials += 1, passes += 1. If TRIAL's cost <= CUR's: the trial becomes current, damping =
  max(damping * down, min_damping), done when max |x[:6]| < converged_step or the cost is 0.
  Else damping *= up; done after ``attempts`` consecutive rejections.

Every trial is a full evaluation (with derivatives: an accepted trial needs no second pass), and a
rejected trial uses one of the level's iterations: a level of n iterations costs at most n + 1
passes.

Capacity: on CUDA the pass bins with room for ``capacity`` (tile, sphere) pairs instead of
waiting for their count; the count is recorded (``MAX_PAIRS + level``, the most of any evaluation)
and ``OVERFLOW`` is set when it exceeded the room: that frame's result is wrong and must be redone
with more room. The CPU pass bins exactly (capacity unused, nothing recorded).

Backends: ``auto`` (the kernels of the state's device), ``cpu``, ``cuda``, and ``reference``: the
evaluation by ``gauss_newton_reference`` (PyTorch, rasterizer/gn_reference.py) and the phases by
``lm_phase_reference`` (NumPy) on a host copy of the state, on any device: the same LM with no
compiled code (slow, small images; a host round trip per call, so never in a CUDA graph).
"""
from __future__ import annotations

import numpy as np
import torch

from . import _ext
from ._inputs import zeros3
from .functions import _camera
from .gauss_newton import _settings, _validate, f32
from .gn_reference import N_PARAMS, N_TRI, PACKED_SIZE, gauss_newton_reference, increment_points

__all__ = ["STATE_SIZE", "new_state", "lm_settings", "lm_phase", "gauss_newton_lm",
           "lm_phase_reference", "gauss_newton_lm_reference", "clamp_exposure", "LOG_GAIN_MAX", "BIAS_MAX",
           "BEGIN", "START", "PROPOSE", "ACCEPT"]

# State layout (csrc/lm_math.h)
T, TRIAL_T, EXP, TRIAL_EXP = 0, 16, 32, 34
DAMPING, PIVOT, DONE, REJECTIONS, TRIALS, STEP_MAX, NO_VALID, OVERFLOW = range(36, 44)
MAX_LEVELS = 4
MAX_PAIRS = 44
PASSES = 48
CUR = 52
TRIAL = CUR + PACKED_SIZE
STATE_SIZE = TRIAL + PACKED_SIZE
# Offsets inside a packed result (rasterizer.gauss_newton)
G, COST, L1, N_VALID, N_COVERED, N_DEPTH_IN, N_COLOR_IN = (N_TRI, N_TRI + N_PARAMS) + tuple(
    range(N_TRI + N_PARAMS + 1, PACKED_SIZE))

BEGIN, START, PROPOSE, ACCEPT = range(4)
MAX_PHASES = 4                      # phases one lm_phase call takes (csrc/lm_math.h kLmMaxPhases)

# The exposure's plausible range (the one statement in Python; csrc/lm_math.h kLmLogGainMax and
# kLmBiasMax say the same for the kernels): a gain outside [1/8, 8] (three stops) or a bias beyond
# a whole colour range is not an exposure change but a failed fit, e.g. the log gain's step on a
# frame whose covered map is nearly black (its gain row ~0) overflowed exp(). Not tuning values: a
# real exposure change stays well inside, and the bound only keeps the arithmetic finite.
LOG_GAIN_MAX = float(np.log(8.0))
BIAS_MAX = 1.0                      # colour is in [0, 1]


def clamp_exposure(log_gain: float, bias: float) -> tuple[float, float]:
    """(log gain, bias) clamped to +-LOG_GAIN_MAX, +-BIAS_MAX (NaN stays NaN)."""
    return (float(np.clip(log_gain, -LOG_GAIN_MAX, LOG_GAIN_MAX)), float(np.clip(bias, -BIAS_MAX, BIAS_MAX)))


def new_state(T_cw: np.ndarray, device) -> torch.Tensor:
    """(STATE_SIZE,) float64 on ``device``: current pose ``T_cw`` (4, 4) world-to-camera, exposure
    0, everything else 0 (set PIVOT before the first level)."""
    s = np.zeros(STATE_SIZE)
    s[T:T + 16] = np.asarray(T_cw, dtype=np.float64).reshape(16)
    return torch.from_numpy(s).to(device)


def lm_settings(*, damping: float, damping_up: float, damping_down: float, min_damping: float,
                min_diagonal: float, converged_step: float, attempts: int, exposure: bool) -> list:
    """The phases' settings list (order: csrc/lm_math.h LmSettings)."""
    return [float(damping), float(damping_up), float(damping_down), float(min_damping),
            float(min_diagonal), float(converged_step), float(attempts), 1.0 if exposure else 0.0]


def lm_phase(state: torch.Tensor, phase, settings: list, backend: str = "auto") -> None:
    """Bookkeeping phases (BEGIN, START, PROPOSE, ACCEPT) on ``state`` (STATE_SIZE,) float64 in
    place: ``phase`` one phase or a sequence of 1 to MAX_PHASES applied in order (the phases
    between two evaluations, e.g. ACCEPT then the next PROPOSE, in one call). On CUDA one
    one-thread kernel, no host wait; ``backend='reference'``: ``lm_phase_reference`` on a host copy
    (a host wait on CUDA)."""
    phases = [int(phase)] if isinstance(phase, (int, np.integer)) else [int(p) for p in phase]
    if not 1 <= len(phases) <= MAX_PHASES or not all(BEGIN <= p <= ACCEPT for p in phases):
        raise ValueError(f"lm_phase takes 1 to {MAX_PHASES} LM phases (BEGIN, START, PROPOSE, ACCEPT), "
                         f"got {phases}")
    kind = _ext.resolve_backend(backend, state, what="the state")
    if kind != "reference":
        _ext.ops(kind).lm_phase(state, phases, settings)
        return
    host = state.cpu().numpy() if state.is_cuda else state.numpy()
    for p in phases:
        lm_phase_reference(host, p, settings)
    if state.is_cuda:
        state.copy_(torch.from_numpy(host))


def gauss_newton_lm(means, radii, colors, opacities, K, width, height, obs_color, obs_depth, valid,
                    state: torch.Tensor, *, level: int, capacity: int, depth_weight: float, huber,
                    alpha_threshold: float, depth_noise, color_tol: float, exposure: bool = True,
                    obs_weight: float = 0.0, background=None, backend: str = "auto") -> None:
    """One evaluation of the device LM: ``rasterizer.gauss_newton`` with derivatives at the
    state's trial pose and exposure, into its TRIAL slot (see the module docstring).

    Args:
        means: (N, 3) float32 world-frame centres, m (transformed by the trial pose on the
            device); radii, colors, opacities, K, width, height, the observation and the robust
            settings as ``rasterizer.gauss_newton`` (whose gain, bias and pivot come from the state).
        state: (STATE_SIZE,) float64 on the spheres' device.
        level: pyramid level (0 .. MAX_LEVELS - 1): where the pair count is recorded.
        capacity: room for (tile, sphere) pairs on CUDA (see the module docstring).
        backend: 'auto' | 'cpu' | 'cuda' | 'reference' (``gauss_newton_lm_reference``).
    """
    _validate(means, radii, colors, opacities, K, width, height, obs_color, obs_depth, valid,
              backend == "reference", huber, depth_noise)
    kind = _ext.resolve_backend(backend, means)
    bg = zeros3(means.device, means.dtype) if background is None else background
    settings = _settings(0.0, 1.0, 0.0, depth_weight, huber, alpha_threshold, depth_noise, color_tol,
                         exposure, obs_weight)
    if kind == "reference":
        gauss_newton_lm_reference(means, radii, colors, opacities, K, width, height, obs_color, obs_depth,
                                  valid, bg, settings, state)
        return
    _ext.ops(kind).gauss_newton_lm(
        f32(means), f32(radii), f32(colors), f32(opacities), f32(bg), f32(obs_color),
        f32(obs_depth), valid.contiguous(), *_camera(K), int(width), int(height), settings, state,
        int(level), int(capacity))


def gauss_newton_lm_reference(means, radii, colors, opacities, K, width, height, obs_color, obs_depth,
                              valid, background, settings: list, state: torch.Tensor) -> None:
    """PyTorch oracle of the LM's evaluation: nothing once the level is done; else the world-frame
    (N, 3) ``means`` moved to the camera by the state's trial pose (in their dtype), the trial
    exposure (log gain, bias) and the pivot put into ``settings`` (``gauss_newton._settings``'
    list), ``gauss_newton_reference`` with derivatives, its (PACKED_SIZE,) result written into the
    state's TRIAL slot. The pair count is not recorded (no binning)."""
    s = state.detach().cpu().numpy()
    if s[DONE] != 0.0:
        return
    T_cw = torch.from_numpy(s[TRIAL_T:TRIAL_T + 16].reshape(4, 4)).to(means.device, means.dtype)
    means_c = means.detach() @ T_cw[:3, :3].T + T_cw[:3, 3]
    st = list(settings)
    st[0], st[1], st[12] = float(np.exp(s[TRIAL_EXP])), float(s[TRIAL_EXP + 1]), float(s[PIVOT])
    packed = gauss_newton_reference(means_c, radii.detach(), colors.detach(), opacities.detach(), K.detach(),
                                    int(width), int(height), obs_color, obs_depth, valid, background, st, True)
    state[TRIAL:TRIAL + PACKED_SIZE] = packed.to(state.device, state.dtype)


def _apply_pivot_increment(x: np.ndarray, z: float, T_cw: np.ndarray) -> np.ndarray:
    """pivot_increment(x[:6], z) @ T_cw (4, 4) through ``gn_reference.increment_points`` (the
    oracle's one definition of the increment): it is affine in the points, so it moves T's rotation
    columns as the difference of two moved points and its translation as a point."""
    pts = torch.from_numpy(np.concatenate([T_cw[:3, :3].T, T_cw[None, :3, 3], np.zeros((1, 3))]))
    moved = increment_points(pts, torch.from_numpy(np.asarray(x[:6], dtype=np.float64)), float(z)).numpy()
    out = np.eye(4)
    out[:3, :3] = (moved[:3] - moved[4]).T
    out[:3, 3] = moved[3]
    return out


def lm_phase_reference(state: np.ndarray, phase: int, settings: list) -> None:
    """NumPy oracle of ``lm_phase`` on a (STATE_SIZE,) float64 array, in place."""
    damping, up, down, min_damping, min_diag, converged, attempts, exposure = settings
    s = state
    n = N_PARAMS if exposure else 6
    if phase == BEGIN:
        s[DONE], s[REJECTIONS], s[DAMPING] = s[NO_VALID], 0.0, damping
        s[TRIAL_T:TRIAL_T + 16], s[TRIAL_EXP:TRIAL_EXP + 2] = s[T:T + 16], s[EXP:EXP + 2]
        return
    if s[DONE] != 0.0:
        return
    cur, trial = s[CUR:CUR + PACKED_SIZE], s[TRIAL:TRIAL + PACKED_SIZE]
    if phase == START:
        s[PASSES] += 1.0
        cur[:] = trial
        if cur[N_VALID] == 0.0:
            s[NO_VALID] = s[DONE] = 1.0
        elif cur[COST] == 0.0:
            s[DONE] = 1.0
    elif phase == PROPOSE:
        iu = np.triu_indices(N_PARAMS)
        H = np.zeros((N_PARAMS, N_PARAMS))
        H[iu] = cur[:N_TRI]
        H = (H + np.triu(H, 1).T)[:n, :n]
        A = H + s[DAMPING] * np.diag(np.maximum(np.diag(H), min_diag))
        x = np.zeros(N_PARAMS)
        try:
            x[:n] = -np.linalg.solve(A, cur[G:G + n])
        except np.linalg.LinAlgError:
            pass                            # a singular system: no move (the kernel's zero pivot)
        if not np.all(np.isfinite(x)):
            x[:] = 0.0                      # NaN / inf normal equations: no move
        s[STEP_MAX] = np.abs(x[:6]).max()
        T_cw = s[T:T + 16].reshape(4, 4)
        s[TRIAL_T:TRIAL_T + 16] = _apply_pivot_increment(x, s[PIVOT], T_cw).reshape(16)
        s[TRIAL_EXP:TRIAL_EXP + 2] = clamp_exposure(*(s[EXP:EXP + 2] + (x[6:8] if exposure else 0.0)))
    elif phase == ACCEPT:
        s[TRIALS] += 1.0
        s[PASSES] += 1.0
        if trial[COST] <= cur[COST]:
            s[T:T + 16], s[EXP:EXP + 2] = s[TRIAL_T:TRIAL_T + 16], s[TRIAL_EXP:TRIAL_EXP + 2]
            cur[:] = trial
            s[DAMPING] = max(s[DAMPING] * down, min_damping)
            s[REJECTIONS] = 0.0
            if s[STEP_MAX] < converged or cur[COST] == 0.0:
                s[DONE] = 1.0
        else:
            s[DAMPING] *= up
            s[REJECTIONS] += 1.0
            if s[REJECTIONS] >= attempts:
                s[DONE] = 1.0
