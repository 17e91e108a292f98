"""The mapper: for each new keyframe, densify, optimise the map and the window keyframes' poses over
a keyframe window, prune, publish. The only writer of the ``SphereMap`` and of the keyframes'
poses; it applies the loop stage's pose-graph corrections (moving spheres with their anchor
keyframes) and re-optimises the seam."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np
import torch

import rasterizer
from slam.config import MappingConfig, PrunerConfig
from slam.cuda_graphs import padded_slots
from slam.geometry import correction, invert, motion_size, orthonormalize, transform_points
from slam.map.keyframes import Keyframe, KeyframeView
from slam.map.render import render_camera_spheres
from slam.map.sphere_map import SphereMap
from slam.mapping.densify import candidate_mask, most_needed, seed_pixels, seed_spheres
from slam.mapping.keyframes import KeyframeStore
from slam.mapping.pose_refine import KeyframePoseRefiner
from slam.mapping.pruner import Pruner, PruneReport
from slam.mapping.step_graph import StepGraph
from slam.tensor_ops import at_least


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
    pose_steps: int = 0             # keyframe-pose Adam steps taken in this mapping step
    pose_shift_mm: float = 0.0      # largest pose change of a window keyframe in this step
    loop_corrections: int = 0       # loop corrections applied before this keyframe
    pair_overflow: bool = False     # a step graph's render ran out of pair room (slam.mapping.step_graph)


class Mapper:
    """Grows and optimises the map on keyframes."""

    def __init__(self, cfg: MappingConfig, pruner_cfg: PrunerConfig, smap: SphereMap, store: KeyframeStore,
                 backend: str = "auto", seed: int = 0) -> None:
        if backend not in rasterizer.OP_BACKENDS:
            # the step needs the rasterizer's loss and Adam kernels (gsplat renders only)
            raise ValueError(f"Mapper: backend must be one of {rasterizer.OP_BACKENDS}, got {backend!r}")
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
        self.poses = KeyframePoseRefiner(cfg.lr_pose_rot, cfg.lr_pose_trans, cfg.refine_poses)
        # id -> T_wc of every keyframe ever mapped (also those the store dropped: frames tracked
        # against them are re-expressed through them); published with every snapshot.
        self.keyframe_poses: dict[int, np.ndarray] = {}
        self.loop_edges: list[tuple[int, int]] = []
        self.applied: list[dict] = []            # what each applied loop correction did
        self._later: list[np.ndarray] = []       # each applied correction's ``later`` (in order)
        self._inbox: list = []                   # loop corrections waiting (loop stage -> mapper)
        self._inbox_lock = threading.Lock()
        # The step as one CUDA graph per keyframe (CUDA, mapping.cuda_graph); None: queued kernels.
        self.graph = StepGraph(smap.device) if cfg.cuda_graph and smap.device.type == "cuda" else None
        self.slots = 0                            # the map's rows padded to this many for the graph

    # ------------------------------------------------------------------ gauge and corrections
    def fix_keyframes(self, keyframes: list[Keyframe]) -> None:
        """Keyframes whose poses hold the gauge (a saved map's): never refined."""
        for kf in keyframes:
            self.poses.fixed.add(kf.kf_id)
            self.keyframe_poses[kf.kf_id] = kf.T_wc.copy()

    def submit_correction(self, corr) -> None:
        """Called from the loop stage's thread: queue a ``slam.loop.messages.LoopCorrection``;
        the mapper applies it before its next keyframe (or in ``apply_pending``)."""
        with self._inbox_lock:
            self._inbox.append(corr)

    def apply_pending(self) -> int:
        """Apply every queued loop correction (mapping thread); publishes when any was applied."""
        with self._inbox_lock:
            pending, self._inbox = self._inbox, []
        for corr in pending:
            self._apply_correction(corr)
        if pending:
            self._publish()
        return len(pending)

    def _apply_correction(self, corr) -> None:
        """Move keyframes (and their spheres) by the pose graph's corrections, then re-optimise
        the seam: the loop's two keyframes and their neighbours."""
        t0 = time.perf_counter()
        newest_in_graph = max(corr.corrections)
        moved_kf: dict[int, np.ndarray] = {}
        for kf_id, T in list(self.keyframe_poses.items()):
            C = corr.corrections.get(kf_id, corr.later if kf_id > newest_in_graph else None)
            if C is None:
                continue
            moved_kf[kf_id] = C
            self.keyframe_poses[kf_id] = orthonormalize(C @ T)
        for kf in self.store.items:
            if kf.kf_id in moved_kf:
                kf.T_wc = self.keyframe_poses[kf.kf_id].copy()
        moved = self.smap.move_anchored(moved_kf)
        self.poses.reset(moved_kf)
        self.loop_edges.append(tuple(corr.edge))
        self._later.append(np.asarray(corr.later, dtype=np.float64))
        seam = self.store.around([i for i in corr.edge], self.cfg.window)
        loss = self._cycle(seam, self.cfg.seam_iters) if seam and self.smap.n else float("nan")
        shift = max((motion_size(C)[0] for C in moved_kf.values()), default=0.0)
        self.applied.append({"edge": list(corr.edge), "keyframes_moved": len(moved_kf), "spheres_moved": moved,
                             "max_shift_m": shift, "seam_keyframes": len(seam), "seam_loss": loss,
                             "ms": (time.perf_counter() - t0) * 1e3})

    def _publish(self) -> None:
        self.smap.publish(dict(self.keyframe_poses), tuple(self.loop_edges), tuple(self._later))

    # ------------------------------------------------------------------ keyframes
    def add_keyframe(self, kf: Keyframe) -> MappingReport:
        """Integrate one keyframe; returns a report. Publishes a new map version at the end."""
        t0 = time.perf_counter()
        report = MappingReport(kf.frame_index)
        with self._inbox_lock:
            pending, self._inbox = self._inbox, []
        for corr in pending:
            self._apply_correction(corr)
        report.loop_corrections = len(pending)
        # A keyframe tracked before the tracker saw some corrections is moved by those it missed.
        for C in self._later[kf.map_loops:]:
            kf.T_wc = orthonormalize(C @ kf.T_wc)
        kf.map_loops = len(self._later)
        device = self.smap.device
        if not self.store.items and not self.poses.fixed:
            self.poses.fixed.add(kf.kf_id)       # the first keyframe holds the gauge
        self.keyframe_poses[kf.kf_id] = kf.T_wc.copy()
        # One upload of the new keyframe (compact) serves densification and the optimisation.
        newest = KeyframeView.upload(kf, device)
        report.added, report.novelty, budget_removed = self._densify(newest, kf)
        dropped = self.store.add(kf)
        if dropped is not None:
            self.poses.forget(dropped.kf_id)
        self.keyframes_seen += 1
        window = self.store.window(self.cfg.window, self.cfg.random_keyframes)
        before = {k.kf_id: k.T_wc for k in window}
        steps0 = self.poses.steps
        if self.cfg.iters > 0 and self.smap.n > 0:
            report.loss, report.pair_overflow, weight_sum, error_sum, renders = self._optimise(newest, window, device)
            # the round's sums to the host once: the pruner's bookkeeping runs there (its module docstring)
            weight_sum, error_sum = weight_sum[: self.smap.n].cpu(), error_sum[: self.smap.n].cpu()
            self.pruner.record(self.smap, weight_sum, error_sum, renders)
            if self.keyframes_seen % self.pruner.cfg.every == 0:
                report.pruned = self.pruner.prune(self.smap, report.novelty, self._screen_radius(kf), weight_sum > 0)
        report.pruned.removed_budget = budget_removed
        for k in window:
            self.keyframe_poses[k.kf_id] = k.T_wc.copy()
        report.pose_steps = self.poses.steps - steps0
        report.pose_shift_mm = 1e3 * max((motion_size(correction(before[k.kf_id], k.T_wc))[0] for k in window),
                                         default=0.0)
        self._publish()
        report.spheres = self.smap.n
        report.ms = (time.perf_counter() - t0) * 1e3
        return report

    # ------------------------------------------------------------------ steps
    def _densify(self, view: KeyframeView, kf: Keyframe) -> tuple[int, float, int]:
        """Seed spheres where the map is missing/wrong in keyframe ``kf`` (``view``: its upload,
        whose edge-free depth mask comes down); returns (added, novelty, removed to make room).
        The map's render at the keyframe runs on the map's device; everything else on the host,
        from the keyframe's own arrays (``Keyframe.observation``) and the render's images copied
        down (~1 MB): the candidate mask, the seed pixels and the seeds themselves are a few
        comparisons, gathers and back-projections a keyframe, whose kernel families would each
        load into host memory on a GPU (docs/benchmarks.md#host-memory); ``SphereMap.add``
        uploads the finished rows."""
        host = kf.observation()
        depth_ok = view.depth_ok.cpu()
        T_wc = torch.as_tensor(kf.T_wc, dtype=torch.float32)
        if self.smap.n == 0:
            mask = candidate_mask(host, None, self.cfg, depth_ok)
            priority, novelty = None, 1.0
        else:
            out = self.smap.latest().render(host.K, host.width, host.height, T_cw=invert(T_wc).numpy(),
                                            backend=self.backend)
            out = rasterizer.RasterOutput(*(t.cpu() for t in out))
            mask = candidate_mask(host, out, self.cfg, depth_ok)
            valid = host.depth > 0
            novelty = float(((out.alpha < self.cfg.densify_alpha) & valid).sum()) / max(float(valid.sum()), 1.0)
            priority = out.alpha
        vs, us = seed_pixels(mask, self.cfg, self.generator)
        budget_removed = self.pruner.make_room(self.smap, int(vs.shape[0])) if self.pruner.cfg.enabled else 0
        room = self.smap.budget - self.smap.n
        if priority is not None and vs.shape[0] > room:     # the budget cuts: keep the most needed
            vs, us = most_needed(vs, us, priority, room)
        means, radii, colors, opacities = seed_spheres(host, T_wc, vs, us, self.cfg)
        return self.smap.add(means, radii, colors, opacities, kf.kf_id), novelty, budget_removed

    def _update(self, view: KeyframeView, stats, rows: torch.Tensor, room=None,
                kf: Keyframe | None = None) -> torch.Tensor:
        """One optimisation step of the live rows ``rows`` ((N, 8) leaf of ``SphereMap.active()``,
        requires grad) on one keyframe view, and of ``kf``'s pose unless it is None or fixed;
        returns the loss (detached): ``rasterizer.render_l1_loss`` (L1 colour over valid-depth
        pixels + depth_weight * L1 depth over edge-free depth). ``room``: the render's
        ``rasterizer.PairRoom`` (the step graph's). Queued kernels only, no host wait, unless
        ``kf``'s pose is refined (its Adam is on the host): the step the CUDA graph captures
        (``slam.mapping.step_graph``)."""
        o, T_cw, depth_ok, valid = view.observation(), view.T_cw, view.depth_ok, view.valid
        means_c, radii, colors, opacities = self.smap.activated(rows, T_cw)   # one kernel, camera frame
        delta = self.poses.delta(kf, T_cw.device) if kf is not None else None
        out = render_camera_spheres(means_c, radii, colors, opacities, o.K, o.width, o.height,
                                    backend=self.backend, stats=stats, pose_delta=delta, pair_room=room)
        loss, pixel_error = rasterizer.render_l1_loss(out.color, out.depth, o.color, o.depth, valid, depth_ok,
                                                      self.cfg.depth_weight, backend=self.backend)
        if stats is not None:
            stats.pixel_error = pixel_error
        grads = torch.autograd.grad(loss, [rows] if delta is None else [rows, delta])
        self.smap.adam_step(grads[0], self.lr, backend=self.backend)
        if delta is not None:
            self.poses.step(kf, grads[1])
            view.T_cw = torch.as_tensor(invert(kf.T_wc), dtype=torch.float32, device=T_cw.device)
        return loss.detach()

    def _steps(self, keyframes: list[Keyframe], stats, resident: dict | None = None) -> tuple[float, bool]:
        """One optimisation step per keyframe of ``keyframes`` (in order); returns (the last loss,
        whether a step graph's render ran out of pair room). Through the step graph where it can
        run them (``mapping.cuda_graph``, no pose refinement), else as queued kernels, each
        keyframe uploaded for its step unless in ``resident`` (id -> ``KeyframeView`` already on
        the device)."""
        if not self.smap.n or not keyframes:
            return float("nan"), False
        graph = self.graph
        if graph is not None and not self.poses.enabled and graph.usable(keyframes):
            # over padded rows, so that the graph serves the next keyframes too, until the map
            # outgrows its slots (never fewer slots: a map pruned below a step and grown back
            # would capture again each time)
            self.slots = max(self.slots, padded_slots(self.smap.n))
            rows = self.smap.padded_rows(self.slots).detach().requires_grad_(True)
            return graph.run(keyframes, rows, stats, self._update, fixed=(self.smap.frozen,))
        rows = self.smap.active().detach().requires_grad_(True)
        device = self.smap.device
        room = graph.room if graph is not None else None
        loss = torch.zeros((), device=device)
        for kf in keyframes:
            view = (resident or {}).get(kf.kf_id) or KeyframeView.upload(kf, device)
            loss = self._update(view, stats, rows, room, kf)
        return float(loss), False

    def _optimise(self, newest: KeyframeView, window: list[Keyframe], device):
        """``mapping.iters`` steps over the window -> (last loss, pair overflow, the statistics'
        weight and error sums (N,), renders). Half the iterations on the newest keyframe (window[0],
        already on the device as ``newest``); the rest cycle through the window, each uploaded for
        its step only (6 bytes a pixel: a cheap copy, where the resident window was 4 MB of the
        7-Scenes peak)."""
        stats = rasterizer.SphereStats(self.smap.n, device=device)
        order = [window[0] if it % 2 == 0 or len(window) == 1 else window[1 + (it // 2) % (len(window) - 1)]
                 for it in range(self.cfg.iters)]
        loss, overflow = self._steps(order, stats, {window[0].kf_id: newest})
        return loss, overflow, stats.weight_sum, stats.error_sum, self.cfg.iters

    def _cycle(self, keyframes: list[Keyframe], iters: int) -> float:
        """``iters`` steps cycling through ``keyframes`` (each uploaded for its step); returns
        the last loss. Updates the published keyframe poses."""
        loss, _ = self._steps([keyframes[it % len(keyframes)] for it in range(iters)], None)
        for kf in keyframes:
            self.keyframe_poses[kf.kf_id] = kf.T_wc.copy()
        return loss

    def refine(self, iters: int) -> float:
        """Final refinement at the end of input: ``iters`` steps on keyframes drawn at random
        from the whole store (every part of the map gets attention, not just the last window).
        Publishes the result; returns the last loss."""
        if iters <= 0 or self.smap.n == 0 or not self.store.items:
            return float("nan")
        order = torch.randint(0, len(self.store.items), (iters,), generator=self.generator).tolist()
        loss, _ = self._steps([self.store.items[k] for k in order], None)
        for kf in self.store.items:
            self.keyframe_poses[kf.kf_id] = kf.T_wc.copy()
        self._publish()
        return loss

    def _screen_radius(self, kf: Keyframe) -> torch.Tensor:
        """(N,) screen radius in px of every sphere in the newest keyframe (0 behind the camera),
        on the host (the pruner's input: the activated means and radii copied down)."""
        T_cw = torch.as_tensor(invert(kf.T_wc), dtype=torch.float32)
        means, radii, _, _ = (t.detach().cpu() for t in self.smap.activated())
        z = transform_points(T_cw, means)[:, 2]
        f = float(kf.K[0, 0])
        return torch.where(z > 0.05, f * radii / at_least(z, 0.05), torch.zeros_like(z))
