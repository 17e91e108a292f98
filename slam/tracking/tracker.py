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
over an image pyramid; stops when the step is negligible or no step lowers the cost. The tracker
only renders detached snapshots under ``no_grad``: nothing reaches the map.

Failure detection: too few known pixels, or a final residual far above the recent median. A
failure triggers a recovery attempt (more iterations from the last good pose); frames that stay
failed are reported so the system does not make keyframes from them.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from functools import partial
from typing import Optional

import numpy as np
import torch

from slam.config import TrackingConfig
from slam.geometry import constant_velocity_guess, invert, orthonormalize, pivot_increment
from slam.observation import Observation, depth_edge_mask
from slam.map.render import render_spheres
from slam.map.sphere_map import MapSnapshot

# The normal equations are reduced over bands of at most this many pixels: the float32 Jacobian
# buffer is 8 parameters x 4 channels x BAND_PIXELS floats (2.6 MB) instead of a whole image's
# (9.8 MB at 320x240).
BAND_PIXELS = 20480
FP16_MAX = 65504.0   # finite-difference columns are stored as float16: clamp, never inf


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
        self._huber: dict = {}   # device -> (4,) Huber thresholds of the residual channels

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

    def _render(self, snapshot, obs, T_cw: np.ndarray):
        """Render ``snapshot`` from the host pose T_cw (4, 4) float64 (one small upload)."""
        T = torch.as_tensor(T_cw, dtype=torch.float32).to(snapshot.means.device)
        return render_spheres(snapshot.means, snapshot.radii, snapshot.colors, snapshot.opacities,
                              T, obs.K, obs.width, obs.height, backend=self.backend)

    def _target(self, obs: Observation) -> torch.Tensor:
        """(H, W, 4) what a render is compared with: colour (3) and depth * depth_weight."""
        return torch.cat([obs.color, obs.depth.unsqueeze(-1) * self.cfg.depth_weight], dim=-1)

    def _affine(self, exposure: tuple[float, float], device) -> torch.Tensor:
        """(2, 4) per-channel scale and offset that map a render onto the target: colour gets
        the exposure (gain = exp(log_gain), bias), depth the depth weight."""
        gain, bias = math.exp(exposure[0]), exposure[1]
        return torch.tensor([[gain, gain, gain, self.cfg.depth_weight], [bias, bias, bias, 0.0]],
                            dtype=torch.float32).to(device)

    @staticmethod
    def _stacked(out, a: int = 0, b: Optional[int] = None) -> torch.Tensor:
        """(b - a, W, 4) a render's colour (3) and depth (1) of image rows [a, b) (default: all),
        in the layout of ``_target``."""
        return torch.cat([out.color[a:b], out.depth[a:b].unsqueeze(-1)], dim=-1)

    @staticmethod
    def _residual(out, target: torch.Tensor, m: torch.Tensor, affine: torch.Tensor) -> torch.Tensor:
        """Dense residual (H, W, 4): 3 colour values (after exposure) and 1 depth value (times
        depth_weight), zero where the float mask ``m`` (H, W, 1) is 0. Fixed shapes: no boolean
        indexing, so no host sync."""
        return torch.addcmul(affine[1], Tracker._stacked(out), affine[0]).sub_(target).mul_(m)

    def _robust_weights(self, r: torch.Tensor) -> torch.Tensor:
        """IRLS weights of the Huber loss per residual (H, W, 4): 1 inside the threshold
        (0.1 colour, 0.05 m depth), k/|r| outside."""
        k = self._huber.get(r.device)
        if k is None:
            k = self._huber[r.device] = r.new_tensor([0.1, 0.1, 0.1, 0.05 * self.cfg.depth_weight])
        return k / torch.maximum(r.abs(), k)

    def _robust_cost(self, r: torch.Tensor) -> torch.Tensor:
        """sum of w r^2 with the Huber IRLS weights (a 0-d device tensor)."""
        return (self._robust_weights(r) * r * r).sum()

    def _analytic_pose_jacobian(self, out, obs, mask, affine, z_pivot: float, a: int, b: int,
                                J6: torch.Tensor) -> None:
        """Pose rows of the residual Jacobian of image rows [a, b) from the rendered image's own
        gradients (no extra render): moving the camera by a small increment shifts the rendered
        surface point seen at pixel u by du, so I_new(u) ~ I(u) - grad I . du and
        D_new(u) ~ D(u) - grad D . du + dz (the dense RGB-D odometry linearisation, with the
        render as the reference frame). Disocclusions and footprint changes are ignored; the LM
        accept test still uses true renders. ``mask``: (H, W) bool; ``affine``: the residual's
        (2, 4) scale and offset (``_affine``: its scale row carries the exposure gain and the
        depth weight). Writes J6: (6, b - a, W, 4) float32 (rotation about the pivot
        (0, 0, z_pivot) x/y/z, then translation x/y/z), zero outside ``mask``. Only the band
        (plus one halo row each side for the vertical gradient) is ever expanded."""
        (fx, _, cx), (_, fy, cy), _ = obs.K.tolist()
        H, W = obs.height, obs.width
        band_mask = mask[a:b]
        z = torch.where(band_mask, out.depth[a:b], torch.ones_like(out.depth[a:b]))
        iz = 1.0 / z
        dev = z.device
        xn = ((torch.arange(W, device=dev, dtype=z.dtype) - cx) / fx).view(1, W).expand(b - a, W)
        yn = ((torch.arange(a, b, device=dev, dtype=z.dtype) - cy) / fy).view(b - a, 1).expand(b - a, W)
        rz = 1.0 - z_pivot * iz          # (z - z_pivot) / z
        # Pixel motion (du, dv) and depth change dz per unit of each parameter, for
        # X' = X + w x (X - p) + t with X = z (xn, yn, 1); None = identically zero. One parameter
        # at a time: (band, W) temporaries only, not (6, band, W) stacks.
        motions = (
            lambda: (-fx * xn * yn, -fy * (rz + yn * yn), yn * z),    # rotation about x
            lambda: (fx * (rz + xn * xn), fy * xn * yn, -xn * z),     # rotation about y
            lambda: (-fx * yn, fy * xn, None),                        # rotation about z
            lambda: (fx * iz, None, None),                            # translation x
            lambda: (None, fy * iz, None),                            # translation y
            lambda: (-fx * xn * iz, -fy * yn * iz, 1.0),              # translation z
        )
        # Central differences (one-sided at the image borders), as over the whole image: the
        # halo rows make the band's vertical gradient exact, then are cut off.
        a0, b0 = max(a - 1, 0), min(b + 1, H)
        gy, gx = torch.gradient(self._stacked(out, a0, b0), dim=(0, 1))
        gy, gx = gy[a - a0 : a - a0 + b - a], gx[a - a0 : a - a0 + b - a]
        for k, motion in enumerate(motions):
            du, dv, dz = motion()
            row = J6[k]
            if du is None:
                torch.mul(gy, dv.unsqueeze(-1), out=row)
            else:
                torch.mul(gx, du.unsqueeze(-1), out=row)
                if dv is not None:
                    row.addcmul_(gy, dv.unsqueeze(-1))
            row.neg_()
            if dz is not None:
                row[..., 3].add_(dz)
        J6.mul_(affine[0]).mul_(band_mask.unsqueeze(-1).to(J6.dtype))

    @staticmethod
    def _copy_rows(cols: torch.Tensor, a: int, b: int, J6: torch.Tensor) -> None:
        """J6 (6, b - a, W, 4) float32 <- image rows [a, b) of stored columns (6, H, W, 4)."""
        J6.copy_(cols[:, a:b])

    def _fd_pose_columns(self, snapshot, obs, target, m, affine, r, T_cw, moved) -> torch.Tensor:
        """Pose rows of the residual Jacobian by forward differences of real renders (6 extra
        renders): exact for the render, footprint changes and disocclusions included. Returns
        (6, H, W, 4) float16 (half the memory of float32; the normal equations accumulate in
        float32), zero where ``m`` is 0."""
        steps = [self.cfg.fd_rot] * 3 + [self.cfg.fd_trans] * 3
        cols = torch.empty((6,) + tuple(r.shape), dtype=torch.float16, device=r.device)
        for k in range(6):
            delta = np.zeros(6)
            delta[k] = steps[k]
            r_k = self._residual(self._render(snapshot, obs, moved(T_cw, delta)), target, m, affine)
            cols[k].copy_(r_k.sub_(r).div_(steps[k]).clamp_(-FP16_MAX, FP16_MAX))
        return cols

    def _normal_equations(self, r, out, m, exposure, pose_rows):
        """Gauss-Newton normal equations of the Huber-weighted residual ``r`` (H, W, 4):
        H = J^T W J and g = J^T W r over (6 pose + 2 exposure) parameters, and the robust cost,
        copied to the host in one sync as float64 (Hd (P, P), gd (P,), cost).
        ``pose_rows(a, b, J6)`` fills the six pose rows of image rows [a, b) into J6
        (6, b - a, W, 4). The Jacobian is built and reduced one band of rows at a time
        (``BAND_PIXELS``), so no image-sized Jacobian exists; every temporary dies with this call."""
        n_params = 8 if self.cfg.exposure else 6
        H, W = r.shape[:2]
        band = max(1, min(H, BAND_PIXELS // W))
        J = torch.empty(n_params, band * W * 4, device=r.device)
        JJ = r.new_zeros(n_params, n_params)
        Jr = r.new_zeros(n_params)
        cost = r.new_zeros(())
        gain = math.exp(exposure[0])
        for a in range(0, H, band):
            b = min(H, a + band)
            Jb = J[:, : (b - a) * W * 4]
            pose_rows(a, b, Jb[:6].view(6, b - a, W, 4))
            if self.cfg.exposure:
                # d r_colour / d log_gain = gain * colour; d r_colour / d bias = 1 (masked).
                ex = Jb[6:8].view(2, b - a, W, 4)
                ex[..., 3] = 0
                torch.mul(out.color[a:b], m[a:b], out=ex[0, ..., :3]).mul_(gain)
                ex[1, ..., :3] = m[a:b]
            rb = r[a:b]
            w = self._robust_weights(rb)
            sw = w.sqrt()
            Jb.mul_(sw.reshape(-1))
            JJ.addmm_(Jb, Jb.T)
            Jr.addmv_(Jb, (sw * rb).reshape(-1))
            cost.add_((w * rb * rb).sum())
        packed = torch.cat([JJ.reshape(-1), Jr, cost.reshape(1)]).double().cpu()
        Hd = packed[: n_params * n_params].reshape(n_params, n_params)
        return Hd, packed[n_params * n_params : -1], float(packed[-1])

    @torch.no_grad()
    def _optimise(self, pyramid, snapshot: MapSnapshot, T_wc_init: np.ndarray, iters: int) -> TrackResult:
        """Levenberg-Marquardt on (pose increment, exposure log-gain/bias) with Huber weights
        (IRLS); the pose Jacobian is analytic for the first ``analytic_iters`` iterations, by
        finite differences after. The pose and exposure live on the host (float64); the device
        only renders and reduces. Returns the estimate and its L1 residual on the finest level."""
        device = snapshot.means.device
        T_cw = invert(np.asarray(T_wc_init, dtype=np.float64))
        exposure = (0.0, 0.0)   # (log gain, bias)
        finest = pyramid[-1][0].depth
        ok_depth = finest > 0
        z_pivot = float(finest[ok_depth].median()) if bool(ok_depth.any()) else 1.0
        n_params = 8 if self.cfg.exposure else 6

        def moved(T, delta6):
            # Rotation about a pivot at the median scene depth on the optical axis: decouples
            # rotation from translation far better than rotating about the camera centre.
            return pivot_increment(delta6, z_pivot) @ T

        loss_val, known, done, first_it = float("inf"), 0.0, 0, 0
        for (obs, valid), n_iter in zip(pyramid, self._level_iters(iters)):
            n_valid = int(valid.sum())
            if n_valid == 0:
                return TrackResult(T_wc_init.copy(), float("inf"), 0.0, False, False, done)
            damping = self.cfg.damping
            target = self._target(obs)
            affine = self._affine(exposure, device)
            out = self._render(snapshot, obs, T_cw)
            for it in range(n_iter):
                # The first analytic_iters iterations of the schedule (not of those run).
                analytic = first_it + it < self.cfg.analytic_iters
                mask = valid & (out.alpha > self.cfg.alpha_threshold)
                if analytic:
                    # Image gradients are meaningless across rendered depth edges.
                    mask = mask & depth_edge_mask(out.depth)
                m = mask.unsqueeze(-1).to(target.dtype)
                r = self._residual(out, target, m, affine)
                cols = None
                if analytic:
                    pose_rows = partial(self._analytic_pose_jacobian, out, obs, mask, affine, z_pivot)
                else:
                    cols = self._fd_pose_columns(snapshot, obs, target, m, affine, r, T_cw, moved)
                    pose_rows = partial(self._copy_rows, cols)
                Hd, gd, cost = self._normal_equations(r, out, m, exposure, pose_rows)
                del r, pose_rows, cols   # image-sized: free before the trial renders
                if cost == 0.0:
                    break  # nothing known in view
                # LM: try the step, accept if the robust cost drops, else damp harder.
                for _attempt in range(4):
                    A = Hd + damping * torch.diag(Hd.diagonal().clamp_min(1e-9))
                    step = (-torch.linalg.solve(A, gd)).numpy()
                    T_new = moved(T_cw, step[:6])
                    exp_new = (exposure[0] + step[6], exposure[1] + step[7]) if n_params == 8 else exposure
                    aff_new = self._affine(exp_new, device) if n_params == 8 else affine
                    out_new = self._render(snapshot, obs, T_new)
                    cost_new = float(self._robust_cost(self._residual(out_new, target, m, aff_new)))
                    done += 1
                    if cost_new <= cost:
                        T_cw, exposure, affine, out = T_new, exp_new, aff_new, out_new
                        damping = max(damping * 0.3, 1e-6)
                        break
                    damping *= 10
                else:
                    break  # no improving step: converged (or stuck)
                if float(np.abs(step[:6]).max()) < self.cfg.converged_step:
                    break
            first_it += n_iter
            mask = valid & (out.alpha > self.cfg.alpha_threshold)
            r = self._residual(out, target, mask.unsqueeze(-1).to(target.dtype), affine)
            cnt = max(int(mask.sum()), 1)
            a = r.abs().sum(dim=(0, 1))
            loss_val = float(a[:3].sum() + a[3]) / cnt   # L1 colour (3 channels) + lambda * L1 depth
            known = cnt / max(float(n_valid), 1.0)
        T_wc = orthonormalize(invert(T_cw))
        return TrackResult(T_wc, loss_val, known, True, False, done)
