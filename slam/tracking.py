"""Camera tracking: render-and-compare pose optimisation against the latest published map.

Per frame: a constant-velocity guess, then Adam on a 6-DoF pose increment (rotation vector +
translation, applied on the left of the world-to-camera pose) and a per-frame affine exposure
(gain, bias) minimising L1 colour + lambda * L1 depth over the pixels the map already explains
(rendered alpha above a threshold, valid depth away from depth edges). Coarse-to-fine over an
image pyramid; early stopping. The map snapshot is detached: no gradient reaches the map.

Failure detection: too few known pixels, or a final residual far above the recent median. A
failure triggers a recovery attempt (more iterations from the last good pose); frames that stay
failed are reported so the system does not make keyframes from them.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from slam.config import TrackingConfig
from slam.geometry import constant_velocity_guess, invert, pose_from_increment
from slam.observation import Observation, depth_edge_mask
from slam.render import render_spheres
from slam.sphere_map import MapSnapshot


@dataclass
class TrackResult:
    """T_wc: (4, 4) float64 estimated camera-to-world pose; loss: final residual;
    known_fraction: share of valid-depth pixels the map explains; ok: passed the checks;
    recovered: needed (and passed) a recovery attempt; iters: iterations run in all."""

    T_wc: np.ndarray
    loss: float
    known_fraction: float
    ok: bool
    recovered: bool
    iters: int


class Tracker:
    """Estimates each frame's pose; keeps the pose history for the motion model."""

    def __init__(self, cfg: TrackingConfig, backend: str = "auto") -> None:
        self.cfg = cfg
        self.backend = backend
        self.prev: Optional[np.ndarray] = None
        self.prev2: Optional[np.ndarray] = None
        self.last_good: Optional[np.ndarray] = None
        self.recent_losses: deque = deque(maxlen=30)
        self.failures = 0
        self.recoveries = 0

    # ------------------------------------------------------------------ public
    def initialise(self, T_wc: np.ndarray) -> None:
        """Set the pose of the first frame (the map is built around it)."""
        self.prev, self.prev2, self.last_good = T_wc.copy(), None, T_wc.copy()

    def guess(self) -> np.ndarray:
        """The constant-velocity prediction for the next frame."""
        return constant_velocity_guess(self.prev2, self.prev)

    def track(self, obs: Observation, snapshot: MapSnapshot) -> TrackResult:
        """Estimate the pose of ``obs`` against ``snapshot``; updates the motion history."""
        pyramid = self._pyramid(obs)
        result = self._optimise(pyramid, snapshot, self.guess(), self.cfg.iters)
        if not self._passes(result):
            start = self.last_good if self.last_good is not None else self.guess()
            retry = self._optimise(pyramid, snapshot, start, self.cfg.recovery_iters)
            if self._passes(retry):
                retry.recovered = True
                self.recoveries += 1
                result = retry
            elif retry.loss < result.loss or not math.isfinite(result.loss):
                result = retry
        result.ok = self._passes(result)
        self._update_history(result)
        return result

    # ------------------------------------------------------------------ internals
    def _passes(self, r: TrackResult) -> bool:
        if not math.isfinite(r.loss) or r.known_fraction < self.cfg.min_known_fraction:
            return False
        if len(self.recent_losses) >= 5:
            median = float(np.median(self.recent_losses))
            if r.loss > self.cfg.residual_spike * max(median, 1e-6):
                return False
        return True

    def _update_history(self, r: TrackResult) -> None:
        if r.ok:
            self.recent_losses.append(r.loss)
            self.prev2, self.prev = self.prev, r.T_wc
            self.last_good = r.T_wc
        else:
            self.failures += 1
            # Hold the last good pose and forget the velocity: after a dropout the camera has
            # moved by an unknown amount, so extrapolating old motion only adds error.
            self.prev2, self.prev = None, self.last_good

    def _pyramid(self, obs: Observation) -> list[tuple[Observation, torch.Tensor]]:
        levels = []
        for level in reversed(range(self.cfg.pyramid_levels)):
            o = obs.downsampled(2**level)
            levels.append((o, depth_edge_mask(o.depth)))
        return levels

    def _level_iters(self, total: int) -> list[int]:
        n = self.cfg.pyramid_levels
        if n == 1:
            return [total]
        # Coarse levels are cheap: give them more of the budget, the finest level the rest.
        coarse = int(round(total * 0.6))
        per = [coarse // (n - 1)] * (n - 1)
        return per + [total - sum(per)]

    def _optimise(self, pyramid, snapshot: MapSnapshot, T_wc_init: np.ndarray, iters: int) -> TrackResult:
        device = snapshot.means.device
        T_cw0 = torch.as_tensor(invert(T_wc_init), dtype=torch.float32, device=device)
        delta = torch.zeros(6, device=device, requires_grad=True)
        exposure = torch.zeros(2, device=device, requires_grad=bool(self.cfg.exposure))
        groups = [
            {"params": [delta], "lr": 1.0},
        ]
        if self.cfg.exposure:
            groups.append({"params": [exposure], "lr": 0.01})
        opt = torch.optim.Adam(groups)
        lr_scale = torch.tensor([self.cfg.lr_rot] * 3 + [self.cfg.lr_trans] * 3, device=device)

        loss_val, known, done = float("inf"), 0.0, 0
        for (obs, valid), n_iter in zip(pyramid, self._level_iters(iters)):
            n_valid = valid.sum()
            if int(n_valid) == 0:
                return TrackResult(T_wc_init.copy(), float("inf"), 0.0, False, False, done)
            prev = None
            for it in range(n_iter):
                T_cw = pose_from_increment(delta * lr_scale) @ T_cw0
                out = render_spheres(
                    snapshot.means, snapshot.radii, snapshot.colors, snapshot.opacities,
                    T_cw, obs.K, obs.width, obs.height, backend=self.backend,
                )
                mask = valid & (out.alpha.detach() > self.cfg.alpha_threshold)
                m = mask.float()
                count = m.sum().clamp_min(1.0)
                pred = out.color * torch.exp(exposure[0]) + exposure[1]
                l_color = ((pred - obs.color).abs().sum(-1) * m).sum() / count
                l_depth = ((out.depth - obs.depth).abs() * m).sum() / count
                loss = l_color + self.cfg.depth_weight * l_depth
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                done += 1
                # Host sync only every few iterations (early-stopping check).
                if it % 5 == 4 or it == n_iter - 1:
                    cur = float(loss.detach())
                    if prev is not None and abs(prev - cur) < self.cfg.early_stop_rel * max(prev, 1e-9):
                        prev = cur
                        break
                    prev = cur
            loss_val = prev if prev is not None else float("inf")
            known = float(mask.sum()) / max(float(n_valid), 1.0)
        with torch.no_grad():
            T_cw = pose_from_increment(delta * lr_scale) @ T_cw0
        T_wc = invert(T_cw.double().cpu().numpy())
        return TrackResult(T_wc, loss_val, known, True, False, done)
