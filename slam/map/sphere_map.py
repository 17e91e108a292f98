"""The sphere map: parameters, their Adam state and per-sphere statistics in one packed layout.

Each sphere is one row of ``params`` (C, 8) float32, C the allocated capacity:
    [0:3] mean, metres, world frame      [3] log radius (radius in metres = exp)
    [4:7] colour logits (RGB = sigmoid)   [7] opacity logit (opacity = sigmoid)
Four geometric parameters (xyz + one radius); no rotations, no anisotropic scales.

``anchors`` (C,) int32, row-aligned: the id of the keyframe that created each sphere (-1 = none,
e.g. a map saved before anchors existed). A loop correction moves each sphere with its anchor
keyframe (``move_anchored``).

The Adam moments and every per-sphere statistic live in tensors with the same row layout, so
adding and removing spheres keeps the optimiser state consistent by construction: removal
compacts every row-aligned tensor with the same index. The statistics (``stats``, the pruner's)
live on the host, whatever the map's device: the pruner's bookkeeping (a few masked medians,
ratios and comparisons a keyframe) runs there, because on a GPU each of those operation families
would load its kernels into host memory (docs/benchmarks.md#host-memory). Capacity grows in chunks; the hard budget
(``max_spheres`` and/or megabytes) is never exceeded: ``add`` keeps the first rows that fit.

Only the mapping thread writes a ``SphereMap``. The tracker reads ``MapSnapshot`` objects the
mapper publishes (immutable, detached, activated tensors) - see ``publish``/``latest``.
"""
from __future__ import annotations

import math
import threading
from typing import Optional

import torch

import rasterizer
from slam.map.snapshot import MapSnapshot
from slam.tensor_ops import at_least, clipped, logical_not

PARAM_DIM = 8
MEANS, LOG_RADIUS, COLOR, OPACITY = slice(0, 3), 3, slice(4, 7), 7
# Per-sphere statistics kept for the pruner (row-aligned with params; on the host).
STAT_NAMES = ("contribution", "error", "low_rounds", "age")


def logit(p: torch.Tensor) -> torch.Tensor:
    p = clipped(p, 1e-4, 1 - 1e-4)
    return torch.log(p / (1 - p))


def activate(rows: torch.Tensor, T_cw: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, ...]:
    """Parameter rows (N, 8) -> (means (N, 3) metres, radii (N,) metres, colors (N, 3) in [0, 1],
    opacities (N,) in [0, 1]): ``rasterizer.activate_rows`` (one kernel; its model has the
    formulas). T_cw: optional (4, 4) world-to-camera pose (no gradient): the means then come in
    that camera's frame, moved in the same kernel (the mapper's step). With gradients
    (``_Activate``), the rows' gradient is one (N, 8) tensor from one kernel
    (``rasterizer.activate_rows_backward``). Float32 rows of any layout; the reference's PyTorch
    formulas for other dtypes."""
    backend = "auto" if rows.dtype == torch.float32 else "reference"
    if T_cw is not None:
        T_cw = T_cw.detach().to(rows.dtype)
    if rows.requires_grad and torch.is_grad_enabled():
        return _Activate.apply(rows, T_cw, backend)
    return rasterizer.activate_rows(rows.contiguous(), T_cw, backend=backend)


class _Activate(torch.autograd.Function):
    """``activate`` with its backward in one kernel: the rows' (N, 8) gradient from the four
    outputs' (absent ones not materialised), where autograd's own chain took about thirteen
    launches and PyTorch's written-out formulas four (the mapper steps 40 times a keyframe), and
    the world-to-camera move five more."""

    @staticmethod
    def forward(ctx, rows, T_cw, backend):
        means, radii, colors, opacities = rasterizer.activate_rows(rows.contiguous(), T_cw, backend=backend)
        ctx.save_for_backward(radii, colors, opacities, T_cw)
        ctx.backend = backend
        ctx.set_materialize_grads(False)
        return means, radii, colors, opacities

    @staticmethod
    def backward(ctx, g_means, g_radii, g_colors, g_opacities):
        radii, colors, opacities, T_cw = ctx.saved_tensors
        return rasterizer.activate_rows_backward(g_means, g_radii, g_colors, g_opacities, radii, colors,
                                                 opacities, T_cw, backend=ctx.backend), None, None


def bytes_per_sphere() -> int:
    """Device bytes one sphere costs: params + two Adam moments + step + anchor + statistics."""
    return 4 * (3 * PARAM_DIM + 2 + len(STAT_NAMES))


class SphereMap:
    """Sphere parameters with capacity management, Adam, statistics and snapshot publishing."""

    def __init__(
        self,
        device: torch.device | str = "cpu",
        max_spheres: int = 2_000_000,
        max_mb: Optional[float] = None,
        chunk: int = 65536,
    ) -> None:
        self.device = torch.device(device)
        self.chunk = int(chunk)
        budget = int(max_spheres)
        if max_mb is not None:
            budget = min(budget, int(max_mb * 1e6 // bytes_per_sphere()))
        if budget < 1:
            raise ValueError(f"map budget must allow at least one sphere (max_spheres={max_spheres}, max_mb={max_mb})")
        self.budget = budget
        self.n = 0
        self.peak_n = 0          # the most spheres ever held at once (the budget check)
        self.frozen = 0          # rows [0, frozen) are fixed: never optimised nor removed (localize)
        self.capacity = 0
        self.params = torch.zeros(0, PARAM_DIM, device=self.device)
        self.exp_avg = torch.zeros(0, PARAM_DIM, device=self.device)
        self.exp_avg_sq = torch.zeros(0, PARAM_DIM, device=self.device)
        self.steps = torch.zeros(0, device=self.device)
        self.anchors = torch.zeros(0, dtype=torch.int32, device=self.device)
        self.stats = {name: torch.zeros(0) for name in STAT_NAMES}   # host, whatever the device
        self._published: Optional[MapSnapshot] = None
        self._version = 0
        self._publish_lock = threading.Lock()

    # ------------------------------------------------------------------ views
    def active(self) -> torch.Tensor:
        """(N, 8) view of the live rows of ``params``."""
        return self.params[: self.n]

    def padded_rows(self, slots: int) -> torch.Tensor:
        """(S, 8) view of ``params``' first S = min(``slots``, budget) >= N rows: the live rows, then
        inert padding (NaN centres: every render culls them; their gradients are zero, so Adam leaves
        them as they are): a graph captured over these rows serves the map while N stays within S
        (``slam.mapping.step_graph``). Grows the capacity to S when needed (a new ``params``)."""
        slots = max(min(int(slots), self.budget), self.n)
        self._grow(slots)
        self.params[self.n:slots, MEANS] = float("nan")
        return self.params[:slots]

    def activated(self, rows: Optional[torch.Tensor] = None,
                  T_cw: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, ...]:
        """``activate`` of ``rows`` (default: the live params), the means in ``T_cw``'s camera
        frame when a (4, 4) world-to-camera pose is given (else the world's)."""
        return activate(self.active() if rows is None else rows, T_cw)

    def nbytes(self) -> int:
        """Bytes held by the live spheres (params, optimiser state, statistics)."""
        return self.n * bytes_per_sphere()

    # ------------------------------------------------------------------ growth
    def _grow(self, needed: int) -> None:
        if needed <= self.capacity:
            return
        cap = min(self.budget, int(math.ceil(needed / self.chunk) * self.chunk))
        def grown(t: torch.Tensor) -> torch.Tensor:
            out = torch.zeros((cap,) + tuple(t.shape[1:]), dtype=t.dtype, device=t.device)
            out[: self.n] = t[: self.n]
            return out
        self.params = grown(self.params)
        self.exp_avg = grown(self.exp_avg)
        self.exp_avg_sq = grown(self.exp_avg_sq)
        self.steps = grown(self.steps)
        self.anchors = grown(self.anchors)
        self.stats = {k: grown(v) for k, v in self.stats.items()}
        self.capacity = cap

    def add(self, means: torch.Tensor, radii: torch.Tensor, colors: torch.Tensor, opacities: torch.Tensor,
            anchor: int = -1) -> int:
        """Append spheres (in priority order); returns how many fit in the budget.

        means (M, 3) metres world; radii (M,) metres > 0; colors (M, 3) in [0, 1]; opacities (M,);
        anchor: id of the keyframe that seeds them. New rows start with zero Adam state and zero
        statistics.
        """
        m = min(int(means.shape[0]), self.budget - self.n)
        if m <= 0:
            return 0
        self._grow(self.n + m)
        # the rows are made where the inputs are (the mapper seeds on the host: log and logit
        # there load no GPU kernels), then copied in
        src = means.device
        rows = torch.empty(m, PARAM_DIM, device=src)
        rows[:, MEANS] = means[:m].to(src, torch.float32)
        rows[:, LOG_RADIUS] = torch.log(at_least(radii[:m].to(src, torch.float32), 1e-6))
        rows[:, COLOR] = logit(colors[:m].to(src, torch.float32))
        rows[:, OPACITY] = logit(opacities[:m].to(src, torch.float32))
        sl = slice(self.n, self.n + m)
        self.params[sl] = rows.to(self.device)
        self.exp_avg[sl] = 0
        self.exp_avg_sq[sl] = 0
        self.steps[sl] = 0
        self.anchors[sl] = int(anchor)
        for v in self.stats.values():
            v[sl] = 0
        self.n += m
        self.peak_n = max(self.peak_n, self.n)
        return m

    def remove(self, mask: torch.Tensor) -> int:
        """Remove spheres where ``mask`` (N,) bool (any device) is True; compacts every row-aligned
        tensor. Frozen rows are never removed (their mask entries are ignored) and keep their order.

        The kept rows are chosen on the host; a device tensor is compacted through the host (its
        live rows downloaded, gathered, uploaded: ~5 MB for 50k spheres, every ``pruner.every``
        keyframes), because on a GPU the gather's and the mask's kernels would load into host
        memory (docs/benchmarks.md#host-memory)."""
        if mask.shape[0] != self.n:
            raise ValueError(f"remove mask has {mask.shape[0]} entries for {self.n} spheres")
        mask = mask.cpu()
        if self.frozen:
            mask = mask.clone()
            mask[: self.frozen] = False
        keep = torch.nonzero(logical_not(mask), as_tuple=False).squeeze(1)
        k = int(keep.shape[0])
        removed = self.n - k
        if removed == 0:
            return 0
        for t in [self.params, self.exp_avg, self.exp_avg_sq, self.steps, self.anchors, *self.stats.values()]:
            t[:k] = t[: self.n].cpu()[keep].to(t.device)
            t[k : self.n] = 0
        self.n = k
        return removed

    # ------------------------------------------------------------------ optimisation
    def adam_step(self, grad: torch.Tensor, lr: torch.Tensor, betas=(0.9, 0.999), eps: float = 1e-15,
                  backend: str = "auto") -> None:
        """One Adam update of the live rows from ``grad`` (N, 8) with per-column learning rates
        ``lr`` (8,) (on the map's device; the mapper builds it from its config: the map holds no
        tuning values); rows with zero grad and frozen rows stay put. ``rasterizer.adam_rows``
        (one kernel; its model has the formulas); ``backend``: the mapper's raster backend
        ('auto' | 'cuda' | 'cpu' | 'reference'). ``grad`` may also be (S, 8) for the
        ``padded_rows(S)`` (the padding's zero rows change nothing).

        Bias correction is per row (a sphere added late has its own step count), so new spheres
        take full-size first steps while old ones keep their history.
        """
        n0, n = self.frozen, int(grad.shape[0])
        if not self.n <= n <= self.capacity:
            raise ValueError(f"adam_step: a gradient of {n} rows for {self.n} spheres (capacity {self.capacity})")
        if n == n0:
            return
        rasterizer.adam_rows(self.params[n0:n], self.exp_avg[n0:n], self.exp_avg_sq[n0:n], self.steps[n0:n],
                             grad[n0:n], lr, betas[0], betas[1], eps, backend=backend)

    @torch.no_grad()
    def move_anchored(self, corrections: dict) -> int:
        """Move every non-frozen sphere whose anchor keyframe id is a key of ``corrections``
        (id -> (4, 4) float64 world-frame correction C: new = C @ old) rigidly with it; returns how
        many moved. Adam moments are kept (they are relative to the parameters). The centres are
        moved on the host and written back as one slice (~0.4 MB for 35k spheres, once a loop
        correction): on a GPU the search, gathers and scatters would each load their kernels into
        host memory at the run's first correction (docs/benchmarks.md#host-memory)."""
        if not corrections or self.n == 0:
            return 0
        ids = torch.tensor(sorted(corrections), dtype=torch.int32)
        mats = torch.stack([torch.as_tensor(corrections[int(i)], dtype=torch.float32) for i in ids.tolist()])
        anchors = self.anchors[self.frozen:self.n].cpu()
        slot = torch.searchsorted(ids, anchors).clamp_max(len(ids) - 1)
        hit = ids[slot] == anchors
        rows = torch.nonzero(hit).squeeze(1)
        if rows.numel() == 0:
            return 0
        C = mats[slot[hit]]                                          # (M, 4, 4)
        means = self.params[self.frozen:self.n, MEANS].cpu()
        p = means[rows]
        # broadcast and sum: no cuBLAS (see slam.geometry.transform_points)
        means[rows] = (C[:, :3, :3] * p[:, None, :]).sum(-1) + C[:, :3, 3]
        self.params[self.frozen:self.n, MEANS] = means.to(self.device)
        return int(rows.numel())

    # ------------------------------------------------------------------ publishing
    def publish(self, keyframe_poses: Optional[dict] = None, loop_edges: tuple = (),
                loop_later: tuple = ()) -> MapSnapshot:
        """Make the current parameters the version the tracker renders (atomic swap), with the
        keyframe poses they were optimised with (id -> (4, 4) float64 T_wc; the caller hands over
        a dict it will not change), the accepted loop edges ((id_a, id_b) pairs) and each one's
        correction of later keyframes ((4, 4); ``MapSnapshot.loop_later``)."""
        with torch.no_grad():
            means, radii, colors, opacities = self.activated()   # new tensors (activate_rows)
            anchors = self.anchors[: self.n].clone()
        ready = None
        if means.is_cuda:
            ready = torch.cuda.Event()
            ready.record()
        with self._publish_lock:
            self._version += 1
            snap = MapSnapshot(means, radii, colors, opacities, self._version, ready,
                               keyframe_poses if keyframe_poses is not None else {}, tuple(loop_edges), anchors,
                               tuple(loop_later))
            self._published = snap
        return snap

    def latest(self) -> Optional[MapSnapshot]:
        """The last published snapshot (None before the first publish)."""
        with self._publish_lock:
            return self._published

    # ------------------------------------------------------------------ load
    def load_rows(self, rows: torch.Tensor, anchors: Optional[torch.Tensor] = None) -> None:
        """Replace the map by raw parameter rows (N, 8) (e.g. loaded from a PLY) and their anchor
        keyframe ids (N,) (None = unanchored, -1)."""
        if rows.ndim != 2 or rows.shape[1] != PARAM_DIM:
            raise ValueError(f"expected (N, {PARAM_DIM}) parameter rows, got {tuple(rows.shape)}")
        if rows.shape[0] > self.budget:
            raise ValueError(f"map of {rows.shape[0]} spheres exceeds the budget of {self.budget}")
        self.n = 0
        self.frozen = 0
        self._grow(int(rows.shape[0]))
        self.params.zero_()
        self.exp_avg.zero_()
        self.exp_avg_sq.zero_()
        self.steps.zero_()
        for v in self.stats.values():
            v.zero_()
        self.params[: rows.shape[0]] = rows.to(self.device, torch.float32)
        self.anchors.fill_(-1)
        if anchors is not None:
            self.anchors[: rows.shape[0]] = anchors.to(self.device, torch.int32)
        self.n = int(rows.shape[0])
        self.peak_n = max(self.peak_n, self.n)
