"""Levenberg-Marquardt on the fused Gauss-Newton kernel (``rasterizer.gauss_newton``): one kernel
pass per evaluation renders the map at the pose, differentiates the render exactly (forward mode
through the compositing), forms the robust residuals and reduces the 8x8 normal equations, the
cost and the quality counts. Nothing image-sized leaves the kernel, and one small host transfer
per evaluation brings back everything the step needs.

Per LM iteration: solve the damped system on the host (float64, 8x8), evaluate the trial pose
with derivatives (if it is accepted, its normal equations serve the next iteration: one render
per accepted step); after a rejection, further trials are cost-only and an accepted one is
followed by one evaluation with derivatives. The same schedule, thresholds and acceptance rule as
the render-difference solver (``slam.tracking.tracker``, ``tracking.solver: renders``).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch

import rasterizer
from slam.config import QualityConfig, TrackingConfig
from slam.geometry import invert, orthonormalize, pivot_increment, transform_points
from slam.map.snapshot import MapSnapshot
from slam.tracking import lm
from slam.tracking.quality import TrackQuality, conditioning
from slam.tracking.result import TrackResult


class FusedEvaluator:
    """Evaluates one pyramid level at a pose: ``(T_cw (4, 4) float64, exposure (log gain, bias),
    derivatives) -> rasterizer.GaussNewtonResult``. ``count`` is called once per kernel pass."""

    def __init__(self, snapshot: MapSnapshot, obs, valid: torch.Tensor, z_pivot: float, cfg: TrackingConfig,
                 quality: QualityConfig, backend: str, count: Callable[[], None]) -> None:
        snapshot.wait()
        self.snap, self.obs, self.valid, self.z_pivot = snapshot, obs, valid, z_pivot
        self.cfg, self.quality, self.backend, self.count = cfg, quality, backend, count

    def __call__(self, T_cw: np.ndarray, exposure: tuple[float, float], derivatives: bool):
        self.count()
        s, o, c, q = self.snap, self.obs, self.cfg, self.quality
        T = torch.as_tensor(T_cw, dtype=torch.float32).to(s.device)
        packed = rasterizer.gauss_newton(
            transform_points(T, s.means), s.radii, s.colors, s.opacities, o.K, o.width, o.height, o.color, o.depth,
            self.valid, pivot_z=self.z_pivot, gain=math.exp(exposure[0]), bias=exposure[1],
            depth_weight=c.depth_weight, huber=(c.huber_color, c.huber_depth), alpha_threshold=c.alpha_threshold,
            depth_noise=(q.depth_noise_floor, q.depth_noise_quad), color_tol=q.color_tol, exposure=c.exposure,
            derivatives=derivatives, backend=self.backend)
        return rasterizer.GaussNewtonResult.unpack(packed, c.exposure)


@torch.no_grad()
def optimise_fused(pyramid, snapshot: MapSnapshot, T_wc_init: np.ndarray, iters: int, cfg: TrackingConfig,
                   quality: QualityConfig, backend: str, count: Callable[[], None]):
    """LM over the pyramid (coarse to fine) from ``T_wc_init``; returns a ``TrackResult`` with
    the loss, known fraction and quality measured at the final pose of the finest level."""
    T_cw = invert(np.asarray(T_wc_init, dtype=np.float64))
    exposure = (0.0, 0.0)
    finest = pyramid[-1][0].depth
    ok_depth = finest > 0
    z_pivot = float(finest[ok_depth].median()) if bool(ok_depth.any()) else 1.0
    done = 0
    res = None
    for (obs, valid), n_iter in zip(pyramid, lm.level_iters(iters, len(pyramid), cfg.coarse_share)):
        evaluate = FusedEvaluator(snapshot, obs, valid, z_pivot, cfg, quality, backend, count)
        damping = cfg.damping
        res = evaluate(T_cw, exposure, True)
        if res.n_valid == 0:
            return TrackResult(np.asarray(T_wc_init).copy(), float("inf"), 0.0, False, False, done)
        for _ in range(n_iter):
            if res.cost == 0.0:
                break  # nothing known in view
            accepted = None
            for attempt in range(cfg.lm_attempts):
                step = lm.damped_step(res.H, res.g, damping)
                T_new = pivot_increment(step[:6], z_pivot) @ T_cw
                exp_new = (exposure[0] + step[6], exposure[1] + step[7]) if cfg.exposure else exposure
                trial = evaluate(T_new, exp_new, attempt == 0)
                done += 1
                if trial.cost <= res.cost:
                    accepted = trial if attempt == 0 else evaluate(T_new, exp_new, True)
                    T_cw, exposure = T_new, exp_new
                    damping = max(damping * cfg.damping_down, lm.MIN_DAMPING)
                    break
                damping *= cfg.damping_up
            if accepted is None:
                break  # no improving step: converged (or stuck)
            res = accepted
            if float(np.abs(step[:6]).max()) < cfg.converged_step:
                break
    cnt = max(res.n_covered, 1)
    known = cnt / max(float(res.n_valid), 1.0)
    q = TrackQuality(known, res.n_depth_in / cnt, res.n_color_in / cnt, conditioning(res.H))
    return TrackResult(orthonormalize(invert(T_cw)), res.l1 / cnt, known, True, False, done, q)
