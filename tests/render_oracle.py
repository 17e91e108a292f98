"""The render-difference Levenberg-Marquardt: the oracle the tracker's solver is checked against
(tests/test_tracking_oracle.py, tests/test_tracking.py; its definitions in test_gauss_newton.py and
test_lm_state.py). Until issue 36 it was the tracker's second solver (``tracking.solver: renders``,
``Tracker._optimise_renders`` with ``slam.tracking.lm``'s banded normal equations); the fused
solver replaced it at run time and it lives here, in the tests only, as dense PyTorch.

The same problem as the solver's (rasterizer/gauss_newton.py's model, slam/tracking/fused.py's LM),
solved another way: every quantity comes from renders of the map (``MapSnapshot.render`` on the
backend given; 'reference' renders without compiled code) and plain PyTorch ops, none from the
Gauss-Newton pass or the device LM.

* Parameters: 6 pose (rotation vector about a pivot (0, 0, z_pivot) of the camera frame, rad, then
  translation, m; applied on the left of the world-to-camera pose: ``slam.geometry.
  pivot_increment``), the pivot at the median valid depth of the finest level, and with
  ``tracking.exposure`` 2 exposure (log gain, bias), clamped to ``rasterizer.lm_state.
  clamp_exposure``'s range.
* Residual per pixel (H, W, 4): colour after the exposure minus the observed colour (3 channels),
  depth_weight x (rendered - observed depth); zero outside the covered pixels (valid, edge-free
  observed depth and rendered alpha above ``tracking.alpha_threshold``).
* Jacobian, pose columns: for the first ``analytic_iters`` iterations of the schedule from the
  render's own image gradients (dense RGB-D odometry's linearisation with the render as the
  reference frame: no extra render; pixels across rendered depth edges left out), after that by
  forward differences of real renders (six extra renders per iteration, steps ``fd_step`` rad / m:
  exact for the render, footprint changes and disocclusions included). The exposure columns in
  closed form; Huber IRLS weights; the normal equations in float64 over the whole image.
* LM: per pyramid level (coarse to fine, ``slam.tracking.lm.level_iters``), damped steps
  -(H + damping diag(max(diag H, MIN_DIAGONAL)))^-1 g, each accepted only if a real render at the
  trial pose does not raise the robust cost (else the damping goes up; ``lm_attempts`` rejections
  in a row end the level); a level ends early when the pose step is below ``converged_step``.
* Result: as the tracker's solver reports it (``TrackResult``): loss = L1 per covered pixel of the
  finest level at the final pose, the known fraction, the quality figures (``pixel_counts``) and
  the information.

Small images only (a dense Jacobian of 8 x H x W x 4 floats).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from rasterizer import depth_edge_mask
from rasterizer.lm_state import clamp_exposure
from rasterizer.point_motion import point_motion
from slam.config import QualityConfig, TrackingConfig
from slam.geometry import invert, orthonormalize, pivot_increment, pivot_information_to_body
from slam.map.snapshot import MapSnapshot
from slam.observation import Observation
from slam.tracking import lm
from slam.tracking.quality import TrackQuality, conditioning
from slam.tracking.result import TrackResult


def stacked(out) -> torch.Tensor:
    """(H, W, 4) a render's colour (3) and depth (1)."""
    return torch.cat([out.color, out.depth.unsqueeze(-1)], dim=-1)


def target(obs: Observation, depth_weight: float) -> torch.Tensor:
    """(H, W, 4) what a render is compared with: colour (3) and depth x depth_weight, m."""
    return torch.cat([obs.color, obs.depth.unsqueeze(-1) * depth_weight], dim=-1)


def affine(exposure: tuple[float, float], depth_weight: float, device) -> torch.Tensor:
    """(2, 4) per-channel scale and offset that map a render onto the target: colour gets the
    exposure (gain = exp(log gain), bias; clamped to the plausible range), depth the depth weight."""
    log_gain, bias = clamp_exposure(*exposure)
    gain = math.exp(log_gain)
    return torch.tensor([[gain, gain, gain, depth_weight], [bias, bias, bias, 0.0]],
                        dtype=torch.float32).to(device)


def residual(out, target: torch.Tensor, m: torch.Tensor, affine: torch.Tensor) -> torch.Tensor:
    """(H, W, 4) residual of render ``out`` against ``target``, zero where the float mask ``m``
    (H, W, 1) is 0."""
    return (affine[1] + stacked(out) * affine[0] - target) * m


def huber_thresholds(color: float, depth: float, depth_weight: float, device) -> torch.Tensor:
    """(4,) Huber thresholds of the residual channels: colour (0-1 intensity) and depth (m, times
    ``depth_weight`` like the depth residual)."""
    return torch.tensor([color, color, color, depth * depth_weight], dtype=torch.float32, device=device)


def robust_weights(r: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Huber IRLS weights per residual (H, W, 4): 1 inside the thresholds ``k`` (4,), k / |r| outside."""
    return k / torch.maximum(r.abs(), k)


def robust_cost(r: torch.Tensor, k: torch.Tensor) -> float:
    """sum of w r^2 over the residual ``r`` (H, W, 4) with the Huber IRLS weights, in float64."""
    r = r.double()
    return float((robust_weights(r, k.double()) * r * r).sum())


def pixel_counts(out, obs: Observation, valid: torch.Tensor, covered: torch.Tensor, r: torch.Tensor,
                 quality: QualityConfig) -> tuple[float, float, float]:
    """(covered pixels, depth inliers, colour inliers) at render ``out``: ``valid`` (H, W) bool
    valid edge-free observed depth, ``covered`` (H, W) bool valid and explained by the map, ``r``
    (H, W, 4) the masked residual. A depth inlier is within depth_noise_floor + depth_noise_quad
    z^2 m of the observed depth z, a colour inlier has a mean |colour residual| <= color_tol (the
    counts of rasterizer/gauss_newton.py's model)."""
    z = obs.depth
    depth_ok = (out.depth - z).abs() <= quality.depth_noise_floor + quality.depth_noise_quad * z * z
    color_ok = r[..., :3].abs().mean(-1) <= quality.color_tol
    return float(covered.sum()), float((covered & depth_ok).sum()), float((covered & color_ok).sum())


def analytic_pose_columns(out, obs: Observation, mask: torch.Tensor, aff: torch.Tensor, z_pivot: float) -> torch.Tensor:
    """(6, H, W, 4) float32 pose columns of the residual Jacobian from the rendered image's own
    gradients (no extra render): moving the camera by a small increment shifts the rendered surface
    point seen at pixel u by du, so I_new(u) ~ I(u) - grad I . du and D_new(u) ~ D(u) - grad D . du
    + dz (``rasterizer.point_motion``). Disocclusions and footprint changes are ignored. ``mask``:
    (H, W) bool, the pixels the rows are kept at; ``aff``: the residual's (2, 4) scale (exposure
    gain, depth weight) and offset."""
    (fx, _, cx), (_, fy, cy), _ = obs.K.tolist()
    z = torch.where(mask, out.depth, torch.ones_like(out.depth))
    iz = 1.0 / z
    xn = ((torch.arange(obs.width, dtype=z.dtype, device=z.device) - cx) / fx).view(1, -1).expand_as(z)
    yn = ((torch.arange(obs.height, dtype=z.dtype, device=z.device) - cy) / fy).view(-1, 1).expand_as(z)
    gy, gx = torch.gradient(stacked(out), dim=(0, 1))   # central differences, one-sided at the borders
    cols = []
    for k in range(6):
        du, dv, dz = point_motion(k, xn, yn, z, iz, 1.0 - z_pivot * iz, fx, fy)
        col = torch.zeros_like(gx)
        if du is not None:
            col -= gx * du.unsqueeze(-1)
        if dv is not None:
            col -= gy * dv.unsqueeze(-1)
        if dz is not None:
            col[..., 3] += dz
        cols.append(col * aff[0] * mask.unsqueeze(-1))
    return torch.stack(cols)


def fd_pose_columns(render, tgt: torch.Tensor, m: torch.Tensor, aff: torch.Tensor, r: torch.Tensor,
                    T_cw: np.ndarray, z_pivot: float, step: float) -> torch.Tensor:
    """(6, H, W, 4) float32 pose columns of the residual Jacobian by forward differences of real
    renders: ``render(T_cw)`` -> RasterOutput at world-to-camera T_cw (4, 4); ``step`` rad / m."""
    cols = []
    for k in range(6):
        delta = np.zeros(6)
        delta[k] = step
        cols.append((residual(render(pivot_increment(delta, z_pivot) @ T_cw), tgt, m, aff) - r) / step)
    return torch.stack(cols)


def normal_equations(r: torch.Tensor, cols: torch.Tensor, out, m: torch.Tensor, gain: float, k: torch.Tensor,
                     with_exposure: bool) -> tuple[np.ndarray, np.ndarray, float]:
    """Huber-weighted normal equations of the residual ``r`` (H, W, 4) with pose columns ``cols``
    (6, H, W, 4) and, with ``with_exposure``, the exposure columns (d r_colour / d log gain =
    gain x colour, d r_colour / d bias = 1, masked by ``m`` (H, W, 1)): H (P, P), g (P,) as float64
    arrays and the robust cost (P = 8 or 6)."""
    J = [cols.double()]
    if with_exposure:
        ex = torch.zeros((2,) + tuple(r.shape), dtype=torch.float64, device=r.device)
        ex[0, ..., :3] = (out.color * m).double() * gain
        ex[1, ..., :3] = m.double()
        J.append(ex)
    J = torch.cat(J).reshape(len(cols) + (2 if with_exposure else 0), -1)
    rd = r.double().reshape(-1)
    w = robust_weights(r.double(), k.double()).reshape(-1)
    Jw = J * w
    return (Jw @ J.T).cpu().numpy(), (Jw @ rd).cpu().numpy(), float((w * rd * rd).sum())


def damped_step(H, g, damping: float) -> np.ndarray:
    """The LM step -(H + damping diag(max(diag H, MIN_DIAGONAL)))^-1 g of normal equations H (P, P),
    g (P,): (P,) float64; zero (no move) when the system is singular or the step not finite, as
    the device LM's (csrc/lm_math.h)."""
    Hn, gn = np.asarray(H, dtype=np.float64), np.asarray(g, dtype=np.float64)
    try:
        step = -np.linalg.solve(Hn + damping * np.diag(np.maximum(np.diag(Hn), lm.MIN_DIAGONAL)), gn)
    except np.linalg.LinAlgError:
        return np.zeros_like(gn)
    return step if np.all(np.isfinite(step)) else np.zeros_like(gn)


@torch.no_grad()
def track(obs: Observation, snapshot: MapSnapshot, T_wc_init: np.ndarray, iters: int, cfg: TrackingConfig,
          quality: QualityConfig, backend: str = "reference", analytic_iters: int = 6,
          fd_step: float = 1e-3) -> tuple[TrackResult, int]:
    """LM from ``T_wc_init`` (4, 4 camera-to-world) for ``obs`` against ``snapshot``, rendered with
    raster ``backend``, ``iters`` iterations over ``cfg.pyramid_levels`` levels, the first
    ``analytic_iters`` of them with image-gradient Jacobians, the rest by finite differences of
    ``fd_step`` (the defaults were the tracker's, ``tracking.analytic_iters`` / ``fd_rot`` /
    ``fd_trans``, when this was its second solver). Returns the ``TrackResult`` (not judged:
    ``reason`` None, ``ok`` True unless nothing was valid) and the renders made."""
    pyramid = lm.pyramid(obs, cfg.pyramid_levels)
    device = snapshot.device
    k = huber_thresholds(cfg.huber_color, cfg.huber_depth, cfg.depth_weight, device)
    T_cw = invert(np.asarray(T_wc_init, dtype=np.float64))
    exposure = (0.0, 0.0)   # (log gain, bias)
    finest = pyramid[-1][0].depth
    z_pivot = float(finest[finest > 0].median()) if bool((finest > 0).any()) else 1.0
    renders, first_it = 0, 0
    loss, known, done, quality_figures, Hd = float("inf"), 0.0, 0, TrackQuality(), None
    for level, ((o, valid), n_iter) in enumerate(zip(pyramid, lm.level_iters(iters, len(pyramid), cfg.coarse_share))):
        n_valid = int(valid.sum())
        if n_valid == 0:
            return TrackResult(np.array(T_wc_init, dtype=np.float64), float("inf"), 0.0, False, False, done), renders

        def render(T, o=o):
            nonlocal renders
            renders += 1
            return snapshot.render(o.K, o.width, o.height, T_cw=T, backend=backend)

        damping = cfg.damping
        tgt = target(o, cfg.depth_weight)
        aff = affine(exposure, cfg.depth_weight, device)
        out = render(T_cw)
        for it in range(n_iter):
            analytic = first_it + it < analytic_iters   # of the schedule, not of the iterations run
            mask = valid & (out.alpha > cfg.alpha_threshold)
            if analytic:
                mask = mask & depth_edge_mask(out.depth)   # image gradients fail across depth edges
            m = mask.unsqueeze(-1).to(tgt.dtype)
            r = residual(out, tgt, m, aff)
            if analytic:
                cols = analytic_pose_columns(out, o, mask, aff, z_pivot)
            else:
                cols = fd_pose_columns(render, tgt, m, aff, r, T_cw, z_pivot, fd_step)
            Hd, gd, cost = normal_equations(r, cols, out, m, float(aff[0, 0]), k, cfg.exposure)
            if cost == 0.0 or not math.isfinite(cost):
                break   # nothing known in view, or NaN / inf data: no step to take
            for _attempt in range(cfg.lm_attempts):
                step = damped_step(Hd, gd, damping)
                T_new = pivot_increment(step[:6], z_pivot) @ T_cw
                exp_new = clamp_exposure(exposure[0] + step[6], exposure[1] + step[7]) if cfg.exposure else exposure
                aff_new = affine(exp_new, cfg.depth_weight, device)
                out_new = render(T_new)
                done += 1
                if robust_cost(residual(out_new, tgt, m, aff_new), k) <= cost:
                    T_cw, exposure, aff, out = T_new, exp_new, aff_new, out_new
                    damping = max(damping * cfg.damping_down, lm.MIN_DAMPING)
                    break
                damping *= cfg.damping_up
            else:
                break   # no improving step: converged (or stuck)
            if float(np.abs(step[:6]).max()) < cfg.converged_step:
                break
        first_it += n_iter
        if level < len(pyramid) - 1:
            continue    # the loss and the quality figures are those of the finest level
        covered = valid & (out.alpha > cfg.alpha_threshold)
        r = residual(out, tgt, covered.unsqueeze(-1).to(tgt.dtype), aff)
        a = r.double().abs().sum(dim=(0, 1))
        n_cov, depth_in, color_in = pixel_counts(out, o, valid, covered, r, quality)
        cnt = max(n_cov, 1.0)
        loss, known = float(a[:3].sum() + a[3]) / cnt, cnt / n_valid
        quality_figures = TrackQuality(known, depth_in / cnt, color_in / cnt, conditioning(Hd))
    T_wc = invert(T_cw)
    T_wc = orthonormalize(T_wc) if np.all(np.isfinite(T_wc)) else T_wc
    information = None if Hd is None else pivot_information_to_body(Hd, z_pivot)
    return TrackResult(T_wc, loss, known, True, False, done, quality_figures, information=information), renders
