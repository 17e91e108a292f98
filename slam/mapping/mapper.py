"""The mapper: for each new keyframe, densify, optimise the map over a keyframe window, prune,
publish. The only writer of the ``SphereMap``."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

import rasterizer
from slam.config import MappingConfig, PrunerConfig
from slam.geometry import invert, transform_points
from slam.map.render import render_spheres
from slam.map.sphere_map import SphereMap
from slam.mapping.densify import candidate_mask, seed_spheres
from slam.mapping.keyframes import Keyframe, KeyframeStore, KeyframeView
from slam.mapping.pruner import PruneReport, Pruner


@dataclass
class MappingReport:
    """What one keyframe's mapping step did (for metrics and logs)."""

    frame_index: int
    added: int = 0
    novelty: float = 0.0
    loss: float = float("nan")
    pruned: PruneReport = field(default_factory=PruneReport)
    spheres: int = 0
    ms: float = 0.0


class Mapper:
    """Grows and optimises the map on keyframes."""

    def __init__(self, cfg: MappingConfig, pruner_cfg: PrunerConfig, smap: SphereMap, store: KeyframeStore,
                 backend: str = "auto", seed: int = 0) -> None:
        self.cfg = cfg
        self.smap = smap
        self.store = store
        self.backend = backend
        self.pruner = Pruner(pruner_cfg)
        self.keyframes_seen = 0
        # Adam's per-column learning rates in the row layout of ``SphereMap.params``.
        self.lr = torch.tensor([cfg.lr_means] * 3 + [cfg.lr_radii] + [cfg.lr_colors] * 3 + [cfg.lr_opacities],
                               device=smap.device)
        self.generator = torch.Generator().manual_seed(seed)

    def add_keyframe(self, kf: Keyframe) -> MappingReport:
        """Integrate one keyframe; returns a report. Publishes a new map version at the end."""
        t0 = time.perf_counter()
        report = MappingReport(kf.frame_index)
        device = self.smap.device
        # One upload of the new keyframe (compact) serves densification and the optimisation.
        newest = KeyframeView.upload(kf, device)
        report.added, report.novelty, budget_removed = self._densify(newest, kf, device)
        self.store.add(kf)
        self.keyframes_seen += 1
        window = self.store.window(self.cfg.window, self.cfg.random_keyframes)
        if self.cfg.iters > 0 and self.smap.n > 0:
            report.loss, weight_sum, error_sum, renders = self._optimise(newest, window, device)
            self.pruner.record(self.smap, weight_sum, error_sum, renders)
            if self.keyframes_seen % self.pruner.cfg.every == 0:
                seen = weight_sum[: self.smap.n] > 0
                report.pruned = self.pruner.prune(self.smap, report.novelty, self._screen_radius(kf, device), seen)
        report.pruned.removed_budget = budget_removed
        self.smap.publish()
        report.spheres = self.smap.n
        report.ms = (time.perf_counter() - t0) * 1e3
        return report

    # ------------------------------------------------------------------ steps
    def _densify(self, view: KeyframeView, kf: Keyframe, device) -> tuple[int, float, int]:
        """Seed spheres where the map is missing/wrong in keyframe ``kf`` (on the device as
        ``view``); returns (added, novelty, removed to make room). The float images live only
        for this call."""
        obs = view.observation()
        T_wc = torch.as_tensor(kf.T_wc, dtype=torch.float32, device=device)
        if self.smap.n == 0:
            mask = candidate_mask(obs, None, self.cfg)
            priority, novelty = None, 1.0
        else:
            out = self.smap.latest().render(obs.K, obs.width, obs.height, T_cw=invert(T_wc), backend=self.backend)
            mask = candidate_mask(obs, out, self.cfg)
            valid = obs.depth > 0
            novelty = float(((out.alpha < self.cfg.densify_alpha) & valid).sum()) / max(float(valid.sum()), 1.0)
            priority = out.alpha
        means, radii, colors, opacities = seed_spheres(obs, T_wc, mask, self.cfg, self.generator, priority)
        budget_removed = self.pruner.make_room(self.smap, int(means.shape[0])) if self.pruner.cfg.enabled else 0
        return self.smap.add(means, radii, colors, opacities), novelty, budget_removed

    def _step(self, view, stats) -> torch.Tensor:
        """One optimisation step of every live sphere on one keyframe view; returns the loss.
        L1 colour over valid-depth pixels + depth_weight * L1 depth over edge-free depth."""
        o, T_cw, depth_ok, valid = view.observation(), view.T_cw, view.depth_ok, view.valid
        rows = self.smap.active().detach().requires_grad_(True)
        means, radii, colors, opacities = self.smap.activated(rows)
        out = render_spheres(means, radii, colors, opacities, T_cw, o.K, o.width, o.height,
                             backend=self.backend, stats=stats)
        err_c = (out.color - o.color).abs().mean(-1)
        m = valid.float()
        l_color = (err_c * m).sum() / m.sum().clamp_min(1.0)
        dm = depth_ok.float()
        l_depth = ((out.depth - o.depth).abs() * dm).sum() / dm.sum().clamp_min(1.0)
        loss = l_color + self.cfg.depth_weight * l_depth
        if stats is not None:
            stats.pixel_error = (err_c * m).detach()
        loss.backward()
        self.smap.adam_step(rows.grad, self.lr)
        return loss.detach()

    def _optimise(self, newest: KeyframeView, window: list[Keyframe], device):
        # Half the iterations on the newest keyframe (window[0], already on the device as
        # ``newest``); the rest cycle through the window, each uploaded for its step only (6 bytes
        # a pixel: a cheap copy, where the resident window was 4 MB of the 7-Scenes peak).
        stats = rasterizer.SphereStats(self.smap.n, device=device)
        loss = torch.zeros((), device=device)
        for it in range(self.cfg.iters):
            if it % 2 == 0 or len(window) == 1:
                view = newest
            else:
                view = KeyframeView.upload(window[1 + (it // 2) % (len(window) - 1)], device)
            loss = self._step(view, stats)
            del view
        return float(loss), stats.weight_sum, stats.error_sum, self.cfg.iters

    def refine(self, iters: int) -> float:
        """Final refinement at the end of input: ``iters`` steps on keyframes drawn at random
        from the whole store (every part of the map gets attention, not just the last window).
        Publishes the result; returns the last loss."""
        if iters <= 0 or self.smap.n == 0 or not self.store.items:
            return float("nan")
        device = self.smap.device
        order = torch.randint(0, len(self.store.items), (iters,), generator=self.generator).tolist()
        loss = torch.zeros((), device=device)
        for k in order:
            loss = self._step(KeyframeView.upload(self.store.items[k], device), None)
        self.smap.publish()
        return float(loss)

    def _screen_radius(self, kf: Keyframe, device) -> torch.Tensor:
        """(N,) screen radius in px of every sphere in the newest keyframe (0 behind the camera)."""
        T_cw = torch.as_tensor(invert(kf.T_wc), dtype=torch.float32, device=device)
        means, radii, _, _ = self.smap.activated()
        z = transform_points(T_cw, means.detach())[:, 2]
        f = float(kf.K[0, 0])
        return torch.where(z > 0.05, f * radii.detach() / z.clamp_min(0.05), torch.zeros_like(z))
