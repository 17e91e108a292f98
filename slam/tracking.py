"""Camera tracking: render-and-compare pose optimisation against the latest published map.

Per frame: a constant-velocity guess, then Levenberg-Marquardt on a 6-DoF pose increment
(rotation vector about a pivot at the median scene depth + translation, applied on the left of
the world-to-camera pose) and a per-frame affine exposure (gain, bias), minimising robust (Huber)
colour + lambda * depth residuals over the pixels the map already explains (rendered alpha above a
threshold, valid depth away from depth edges). Gauss-Newton needs the pose Jacobian per pixel,
so a handful of iterations converge where a first-order optimiser needs dozens. Two ways to get
it, with no backward pass: the first ``analytic_iters`` iterations linearise the render itself
(its image gradients times the pixel motion of its back-projected depth: no extra render), the
rest use finite differences (six extra forward renders per iteration: exact for the render,
including footprint changes and disocclusions, so the final iterations settle where the true
cost is lowest). Every step is accepted only if a real render lowers the cost. Coarse-to-fine
over an image pyramid; stops when the step is negligible or no step lowers the cost. The tracker only renders detached snapshots under
``no_grad``: nothing reaches the map.

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
from slam.geometry import constant_velocity_guess, invert, orthonormalize, pose_from_increment
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

    def last_good_or_identity(self) -> np.ndarray:
        """The last pose that passed the checks (identity before any)."""
        return self.last_good.copy() if self.last_good is not None else np.eye(4)

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
            o = obs.downsampled(self.cfg.downscale * 2**level)
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

    def _render(self, snapshot, obs, T_cw):
        return render_spheres(snapshot.means, snapshot.radii, snapshot.colors, snapshot.opacities,
                              T_cw, obs.K, obs.width, obs.height, backend=self.backend)

    def _stack(self, out, obs, mask, exposure):
        """Dense residual image (H, W, 4): 3 colour values (after exposure) and 1 depth value
        (times depth_weight), zero outside ``mask`` (fixed shapes: no boolean indexing, so no
        host sync); also the rendered colour times the mask for the exposure Jacobian."""
        m = mask.unsqueeze(-1).to(out.color.dtype)
        gain, bias = torch.exp(exposure[0]), exposure[1]
        col = out.color * m
        r_c = (out.color * gain + bias - obs.color) * m
        r_d = (out.depth - obs.depth).unsqueeze(-1) * m * self.cfg.depth_weight
        return torch.cat([r_c, r_d], dim=-1), col

    def _robust_weights(self, r: torch.Tensor) -> torch.Tensor:
        """IRLS weights of the Huber loss per residual (H, W, 4): 1 inside the threshold
        (0.1 colour, 0.05 m depth), k/|r| outside."""
        k = r.new_tensor([0.1, 0.1, 0.1, 0.05 * self.cfg.depth_weight])
        a = r.abs()
        return torch.where(a <= k, torch.ones_like(a), k / a.clamp_min(1e-12))

    def _analytic_pose_jacobian(self, out, obs, mask, exposure, z_pivot: float, J6: torch.Tensor) -> None:
        """Pose rows of the residual Jacobian from the rendered image's own gradients (no extra
        render): moving the camera by a small increment shifts the rendered surface point seen
        at pixel u by du, so I_new(u) ~ I(u) - grad I . du and D_new(u) ~ D(u) - grad D . du + dz
        (the dense RGB-D odometry linearisation, with the render as the reference frame).
        Disocclusions and footprint changes are ignored; the LM accept test still uses true
        renders. Writes J6: (6, H*W*4) float32 (rows: rotation about the pivot x/y/z, then
        translation x/y/z), zero outside ``mask``."""
        fx, fy, cx, cy = (float(v) for v in (obs.K[0, 0], obs.K[1, 1], obs.K[0, 2], obs.K[1, 2]))
        H, W = obs.height, obs.width
        m = mask.to(out.depth.dtype)
        z = torch.where(mask, out.depth, torch.ones_like(out.depth))
        dev = z.device
        u = torch.arange(W, device=dev, dtype=z.dtype).view(1, W)
        v = torch.arange(H, device=dev, dtype=z.dtype).view(H, 1)
        x, y = (u - cx) / fx * z, (v - cy) / fy * z
        # Central differences (one-sided at the border) of colour (H, W, 3) and depth (H, W, 1).
        img = torch.cat([out.color, out.depth.unsqueeze(-1)], dim=-1)
        gy, gx = torch.gradient(img, dim=(0, 1))
        # dX/d(delta) for X' = X + w x (X - p) + t with p = (0, 0, z_pivot).
        zp = z - z_pivot
        zero, one = torch.zeros_like(z), torch.ones_like(z)
        dX = [  # (dx, dy, dz) per parameter
            (zero, -zp, y), (zp, zero, -x), (-y, x, zero),     # rotation about the pivot
            (one, zero, zero), (zero, one, zero), (zero, zero, one),   # translation
        ]
        gain = torch.exp(exposure[0])
        wd = self.cfg.depth_weight
        inv_z = 1.0 / z
        for k, (ax, ay, az) in enumerate(dX):
            du = fx * inv_z * (ax - x * inv_z * az)
            dv = fy * inv_z * (ay - y * inv_z * az)
            rows = J6[k].view(H, W, 4)
            shift = -(gx * du.unsqueeze(-1) + gy * dv.unsqueeze(-1))    # (H, W, 4)
            rows[..., :3] = shift[..., :3] * gain
            rows[..., 3] = (shift[..., 3] + az) * wd
            rows.mul_(m.unsqueeze(-1))

    @torch.no_grad()
    def _optimise(self, pyramid, snapshot: MapSnapshot, T_wc_init: np.ndarray, iters: int) -> TrackResult:
        """Levenberg-Marquardt on (pose increment, exposure gain/bias) with a finite-difference
        pose Jacobian (6 extra forward renders per iteration, no backward pass) and Huber
        weights (IRLS). Returns the estimate and its L1 residual on the finest level."""
        device = snapshot.means.device
        T_cw = torch.as_tensor(invert(T_wc_init), dtype=torch.float32, device=device)
        exposure = torch.zeros(2, device=device)
        finest = pyramid[-1][0].depth
        ok_depth = finest > 0
        z_pivot = float(finest[ok_depth].median()) if bool(ok_depth.any()) else 1.0
        P = torch.eye(4, device=device)
        P[2, 3] = z_pivot
        P_inv = torch.eye(4, device=device)
        P_inv[2, 3] = -z_pivot
        steps = [self.cfg.fd_rot] * 3 + [self.cfg.fd_trans] * 3
        n_params = 8 if self.cfg.exposure else 6
        eye6 = torch.eye(6, device=device)

        def moved(T, delta6):
            # Rotation about a pivot at the median scene depth on the optical axis: decouples
            # rotation from translation far better than rotating about the camera centre.
            return P @ pose_from_increment(delta6) @ P_inv @ T

        loss_val, known, done, first_it = float("inf"), 0.0, 0, 0
        for (obs, valid), n_iter in zip(pyramid, self._level_iters(iters)):
            n_valid = int(valid.sum())
            if n_valid == 0:
                return TrackResult(T_wc_init.copy(), float("inf"), 0.0, False, False, done)
            damping = self.cfg.damping
            out = self._render(snapshot, obs, T_cw)
            reuse = self.cfg.jacobian_every > 1
            J_pose = None   # (6, N) unweighted pose rows of the last finite-difference evaluation
            for it in range(n_iter):
                # The first analytic_iters iterations of the schedule (not of those run).
                analytic = first_it + it < self.cfg.analytic_iters
                mask = valid & (out.alpha > self.cfg.alpha_threshold)
                if analytic:
                    # Image gradients are meaningless across rendered depth edges.
                    mask = mask & depth_edge_mask(out.depth)
                r, col = self._stack(out, obs, mask, exposure)
                # Jacobian rows (one per parameter, one preallocated buffer): 6 pose directions by
                # forward differences, exposure analytic. Weighted in place by sqrt(w), so
                # H = J^T W J and g = J^T W r need no second copy of J.
                J = torch.empty(n_params, r.numel(), device=device)
                if analytic:
                    self._analytic_pose_jacobian(out, obs, mask, exposure, z_pivot, J[:6])
                elif J_pose is None or it % self.cfg.jacobian_every == 0:
                    for k in range(6):
                        out_k = self._render(snapshot, obs, moved(T_cw, eye6[k] * steps[k]))
                        r_k, _ = self._stack(out_k, obs, mask, exposure)
                        torch.sub(r_k, r, out=J[k].view_as(r)).div_(steps[k])
                        del out_k, r_k
                    if reuse:
                        J_pose = J[:6].clone()
                else:
                    # Reuse the pose Jacobian of a recent iteration (the pose moved little since):
                    # one render per iteration instead of seven; rows outside the current mask are 0.
                    m4 = mask.unsqueeze(-1).expand(*mask.shape, 4).reshape(-1).to(J.dtype)
                    torch.mul(J_pose, m4, out=J[:6])
                if self.cfg.exposure:
                    gain = torch.exp(exposure[0])
                    J[6].view_as(r)[..., :3] = col * gain
                    J[7].view_as(r)[..., :3] = mask.unsqueeze(-1).to(col.dtype)
                    J[6:8].view(2, *r.shape)[..., 3] = 0
                w = self._robust_weights(r).reshape(-1)
                rv = r.reshape(-1)
                sw = w.sqrt()
                J.mul_(sw)
                H = J @ J.T
                g = J @ (sw * rv)
                del J
                # One device->host copy (one sync) for the normal equations and the cost; the
                # 8x8 solve runs on the host in float64.
                packed = torch.cat([H.reshape(-1), g, (w * rv * rv).sum().reshape(1)]).double().cpu()
                Hd = packed[: n_params * n_params].reshape(n_params, n_params)
                gd = packed[n_params * n_params : -1]
                cost = float(packed[-1])
                if cost == 0.0:
                    break  # nothing known in view
                # LM: try the step, accept if the robust cost drops, else damp harder.
                for _attempt in range(4):
                    A = Hd + damping * torch.diag(Hd.diagonal().clamp_min(1e-9))
                    step_host = (-torch.linalg.solve(A, gd)).float()
                    step = step_host.to(device)
                    T_new = moved(T_cw, step[:6])
                    exp_new = exposure + step[6:8] if n_params == 8 else exposure
                    out_new = self._render(snapshot, obs, T_new)
                    r_new, _ = self._stack(out_new, obs, mask, exp_new)
                    cost_new = float((self._robust_weights(r_new) * r_new * r_new).sum())
                    done += 1
                    if cost_new <= cost:
                        T_cw, exposure, out = T_new, exp_new, out_new
                        damping = max(damping * 0.3, 1e-6)
                        break
                    damping *= 10
                else:
                    break  # no improving step: converged (or stuck)
                if float(step_host[:6].abs().max()) < self.cfg.converged_step:   # host copy: no sync
                    break
            first_it += n_iter
            mask = valid & (out.alpha > self.cfg.alpha_threshold)
            r, _ = self._stack(out, obs, mask, exposure)
            cnt = max(int(mask.sum()), 1)
            a = r.abs().sum(dim=(0, 1))
            loss_val = float(a[:3].sum() + a[3]) / cnt   # L1 colour (3 channels) + lambda * L1 depth
            known = cnt / max(float(n_valid), 1.0)
        T_wc = orthonormalize(invert(T_cw.double().cpu().numpy()))
        return TrackResult(T_wc, loss_val, known, True, False, done)
