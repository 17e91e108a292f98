"""The tracker's solver: Levenberg-Marquardt on the fused Gauss-Newton pass with the LM state on
the tracking device (``rasterizer.lm_state``), on every raster backend (the ``reference`` backend
runs the same LM through the PyTorch oracles of the pass and the phases).

One kernel pass per evaluation renders the map at the trial pose, differentiates the render
exactly (forward mode through the compositing), forms the robust residuals and reduces the 8x8
normal equations; one-thread kernels solve the damped step, apply it and accept or reject it. So a
frame's iterations need no host decision: the host queues every level's work, then reads the state
back once. On CUDA with ``tracking.cuda_graph`` the whole frame (all levels) is one captured CUDA
graph, replayed with the frame's observation, the map and the start pose copied into its static
inputs (``FrameGraphs``).

The pose Jacobian is the render's exact derivative blended with the observed frame's image
gradients at every level (``tracking.obs_gradient``, ESM's blend; the model is in
rasterizer/gauss_newton.py): the exact derivative of a sharp render predicts steps that are too
short when the start is degrees off, the observation's gradients (the render's at the solution)
do not. Where the render explains the frame (zero residuals) the blend's fixed point is the cost's
optimum; on real frames it is where the blended gradient vanishes, near it (every step must still
lower the true cost), and on 7-Scenes more accurate than exact rows at the finest level
(docs/benchmarks.md#why-the-defaults-are-what-they-are).

Per level of n iterations: one evaluation at the current pose, then n x (propose, evaluate,
accept or reject); a rejected trial uses an iteration; the level stops early (its remaining
evaluations do nothing) once a step is negligible, ``lm_attempts`` trials in a row were rejected
or nothing is in view.

Checked against an independent formulation of the same problem, the render-difference LM
(tests/render_oracle.py: Jacobians from the render's image gradients or finite differences of real
renders, the LM on the host; the tracker's second solver until issue 36), on the small generated
world of tests/tracking_world.py (tests/test_tracking_oracle.py).
"""
from __future__ import annotations

import math
from functools import partial
from typing import Optional

import numpy as np
import torch

import rasterizer
from rasterizer import lm_state as L
from slam.config import QualityConfig, TrackingConfig
from slam.cuda_graphs import capture, padded_slots
from slam.geometry import invert, orthonormalize, pivot_information_to_body
from slam.map.snapshot import MapSnapshot
from slam.observation import Observation
from slam.tracking import lm
from slam.tracking.quality import TrackQuality, conditioning
from slam.tracking.result import TrackResult

# Room for (tile, sphere) pairs per evaluation on CUDA (capped binning: no host wait for the
# count). First guess per level, then raised to PAIR_ROOM_MARGIN x the most seen when a frame fills
# more than PAIR_ROOM_FILL of it; an evaluation with more pairs than room is detected after the
# frame and the frame redone with more (at most MAX_REDOS times, then it is an error: never a wrong
# pose reported as tracked). Not tuning values: results do not depend on them, only the sort's
# size and how often a frame is redone.
PAIR_ROOM_PER_SPHERE = 4
PAIR_ROOM_MIN = 1 << 16
PAIR_ROOM_MARGIN = 1.5
PAIR_ROOM_FILL = 0.8
MAX_REDOS = 3
# A schedule's graph is captured the second time it runs, so a schedule run once (a recovery)
# never pays for a capture; one-off trackers (loop verification, relocalisation) run without
# graphs (tracking.cuda_graph false in their configs).
CAPTURE_AFTER = 2


class Scene:
    """The map as the LM reads it: world-frame (N, 3) means, (N,) radii, (N, 3) colours, (N,)
    opacities, float32 on the tracking device."""

    def __init__(self, means, radii, colors, opacities) -> None:
        self.means, self.radii, self.colors, self.opacities = means, radii, colors, opacities


class FusedSolver:
    """The solver of one tracker (owns its pair room and, on CUDA, its captured graphs).
    ``backend``: the raster backend (``raster.backend``): 'auto', 'cpu' or 'cuda' run the kernels
    of the map's device, 'reference' the PyTorch / NumPy oracles (no CUDA graphs)."""

    def __init__(self, cfg: TrackingConfig, quality: QualityConfig, backend: str) -> None:
        self.cfg = cfg
        self.settings = L.lm_settings(damping=cfg.damping, damping_up=cfg.damping_up,
                                      damping_down=cfg.damping_down, min_damping=lm.MIN_DAMPING,
                                      min_diagonal=lm.MIN_DIAGONAL, converged_step=cfg.converged_step,
                                      attempts=cfg.lm_attempts, exposure=cfg.exposure)
        self.robust = dict(depth_weight=cfg.depth_weight, huber=(cfg.huber_color, cfg.huber_depth),
                           alpha_threshold=cfg.alpha_threshold,
                           depth_noise=(quality.depth_noise_floor, quality.depth_noise_quad),
                           color_tol=quality.color_tol, exposure=cfg.exposure)
        if backend not in ("auto", "cuda", "cpu", "reference"):
            raise ValueError(f"the tracker runs on the raster backends 'auto', 'cuda', 'cpu' and 'reference', "
                             f"not {backend!r}")
        self.reference = backend == "reference"
        self.lm_backend = "reference" if self.reference else "auto"   # the kernels of the map's device
        self.room: dict[int, int] = {}     # pyramid level -> pair room (CUDA)
        self.graphs: Optional[FrameGraphs] = None
        self.readback: Optional[HostCopy] = None
        self.redone = 0                    # frames redone for lack of pair room

    # ------------------------------------------------------------------ public
    @torch.no_grad()
    def optimise(self, levels, snapshot: MapSnapshot, T_wc_init: np.ndarray, iters: int) -> tuple[TrackResult, int]:
        """LM over the pyramid of ``levels`` (``slam.tracking.tracker.Levels``: the frame and its
        pyramid, coarse to fine) from ``T_wc_init``. Returns the ``TrackResult`` (loss, known
        fraction and quality at the final pose of the finest level) and the kernel passes run."""
        if levels.count > L.MAX_LEVELS:
            raise ValueError(f"the fused solver takes at most {L.MAX_LEVELS} pyramid levels, got {levels.count}")
        snapshot.wait()
        schedule = tuple(lm.level_iters(iters, levels.count, self.cfg.coarse_share))
        T_cw = invert(np.asarray(T_wc_init, dtype=np.float64))
        cuda = snapshot.device.type == "cuda"
        for _ in range(MAX_REDOS + 1):   # a frame whose pairs outgrew the room is redone
            if cuda and self.cfg.cuda_graph and not self.reference:
                if self.graphs is None:
                    self.graphs = FrameGraphs(snapshot.device, self)
                host = self.graphs.run(levels.obs, snapshot, T_cw, schedule)
            else:
                host = self._run_eager(levels.pyramid(), snapshot, T_cw, schedule,
                                       stop_when_done=not cuda or self.reference)
            if not (cuda and self._grow_room(host, levels.count)):
                return self._result(host, T_wc_init), int(host[L.PASSES])
            self.redone += 1
        raise RuntimeError(f"fused solver: the (tile, sphere) pairs outgrew their room {MAX_REDOS + 1} times in a "
                           f"row (room per level {self.room}, most seen {host[L.MAX_PAIRS:L.MAX_PAIRS + levels.count]})")

    # ------------------------------------------------------------------ internals
    def read_back(self, state: torch.Tensor) -> np.ndarray:
        """The frame's one host wait: ``state`` on the host (``HostCopy``, made on first use)."""
        if self.readback is None:
            self.readback = HostCopy(state.device)
        return self.readback(state)

    def room_for(self, level: int, n_spheres: int) -> int:
        return self.room.setdefault(level, max(PAIR_ROOM_MIN, PAIR_ROOM_PER_SPHERE * n_spheres))

    def _grow_room(self, host: np.ndarray, levels: int) -> bool:
        """Raise a level's room to PAIR_ROOM_MARGIN x the most pairs seen when they filled more
        than PAIR_ROOM_FILL of it (a new room means a new graph: not every frame); True when the
        frame overflowed (its result is wrong: redo it)."""
        for level in range(levels):
            seen = float(host[L.MAX_PAIRS + level])
            if seen > PAIR_ROOM_FILL * self.room.get(level, 0):
                self.room[level] = int(math.ceil(seen * PAIR_ROOM_MARGIN / 4096)) * 4096
        return bool(host[L.OVERFLOW])

    def run_levels(self, scene: Scene, pyramid, state: torch.Tensor, schedule, stop_when_done: bool) -> None:
        """Queue every level's LM work on ``state`` (see the module docstring). With
        ``stop_when_done`` (CPU, or the reference backend: the phases run on the host) a finished
        level's loop ends early."""
        s, b = self.settings, self.lm_backend
        pending: list = []        # phases queued for the next call: those between two evaluations are one
        for level, ((obs, valid), n_iter) in enumerate(zip(pyramid, schedule)):
            evaluate = partial(L.gauss_newton_lm, scene.means, scene.radii, scene.colors, scene.opacities,
                               obs.K, obs.width, obs.height, obs.color, obs.depth, valid, state, level=level,
                               capacity=self.room_for(level, scene.means.shape[0]), obs_weight=self.cfg.obs_gradient,
                               backend=b, **self.robust)
            L.lm_phase(state, [*pending, L.BEGIN], s, backend=b)
            evaluate()
            pending = [L.START]
            for _ in range(n_iter):
                if stop_when_done:
                    L.lm_phase(state, pending, s, backend=b)
                    pending = []
                    if state[L.DONE] != 0.0:
                        break
                L.lm_phase(state, [*pending, L.PROPOSE], s, backend=b)
                evaluate()
                pending = [L.ACCEPT]
        if pending:
            L.lm_phase(state, pending, s, backend=b)

    def _run_eager(self, pyramid, snapshot: MapSnapshot, T_cw: np.ndarray, schedule, stop_when_done: bool) -> np.ndarray:
        state = L.new_state(T_cw, snapshot.device)
        state[L.PIVOT:L.PIVOT + 1] = rasterizer.median_depth(pyramid[-1][0].depth)
        scene = Scene(snapshot.means, snapshot.radii, snapshot.colors, snapshot.opacities)
        self.run_levels(scene, pyramid, state, schedule, stop_when_done)
        return self.read_back(state)

    def _result(self, host: np.ndarray, T_wc_init: np.ndarray) -> TrackResult:
        trials = int(host[L.TRIALS])
        if host[L.NO_VALID] != 0.0:
            return TrackResult(np.asarray(T_wc_init).copy(), float("inf"), 0.0, False, False, trials)
        res = rasterizer.GaussNewtonResult.unpack(torch.from_numpy(host[L.CUR:L.TRIAL]),
                                                  self.cfg.exposure)
        cnt = max(res.n_covered, 1)
        known = cnt / max(float(res.n_valid), 1.0)
        q = TrackQuality(known, res.n_depth_in / cnt, res.n_color_in / cnt, conditioning(res.H))
        T_wc = invert(host[L.T:L.T + 16].reshape(4, 4))
        T_wc = orthonormalize(T_wc) if np.all(np.isfinite(T_wc)) else T_wc   # NaN: failed by the tracker
        return TrackResult(T_wc, res.l1 / cnt, known, True, False, trials, q,
                           information=pivot_information_to_body(res.H.numpy(), float(host[L.PIVOT])))


class HostCopy:
    """The LM state read back to the host at the end of a frame: one copy into pinned memory and a
    blocking-sync event, so the waiting thread sleeps (no spinning core, the interpreter lock
    released for the mapper) instead of ``.cpu()``'s busy wait with the lock held."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.host = torch.empty(L.STATE_SIZE, dtype=torch.float64, pin_memory=self.cuda)
        self.event = torch.cuda.Event(blocking=True) if self.cuda else None

    def __call__(self, state: torch.Tensor) -> np.ndarray:
        """(STATE_SIZE,) float64 copy of ``state`` on the host (a fresh array)."""
        if not self.cuda:
            return state.numpy().copy()
        self.host.copy_(state, non_blocking=True)
        self.event.record()
        self.event.synchronize()
        return self.host.numpy().copy()


class FrameGraphs:
    """A frame's work captured as CUDA graphs, one per iteration schedule, over static inputs: the
    map padded to a slot count (padding spheres have NaN centres: culled), the frame at the
    tracking resolution, and the LM state. Inside a graph: the frame's pyramid and valid masks
    (``lm.pyramid``), the pivot depth and every level's LM work; outside, per frame: two image
    copies, the start state, one graph launch and the state's read-back. A graph is re-captured
    when the map outgrows its slots, the frame size or intrinsics change, or a level's pair room
    grows; the first CAPTURE_AFTER frames of each are run without a graph (the capture's warm-up)."""

    def __init__(self, device: torch.device, solver: FusedSolver) -> None:
        self.device, self.solver = device, solver
        self.scene: Optional[Scene] = None
        self.scene_version: Optional[int] = None
        self.obs: Optional[Observation] = None   # static copy of the frame
        self.obs_key = None
        self.state = torch.zeros(L.STATE_SIZE, dtype=torch.float64, device=device)
        self.init = torch.zeros(L.STATE_SIZE, dtype=torch.float64).pin_memory()
        self.graphs: dict = {}
        self.uses: dict = {}                     # key -> frames run without a graph
        self.pool_of: Optional[torch.cuda.CUDAGraph] = None   # a live graph whose pool the next shares
        self.stream: Optional[torch.cuda.Stream] = None       # captures run here
        self.captures = 0

    def run(self, obs: Observation, snapshot: MapSnapshot, T_cw: np.ndarray, schedule) -> np.ndarray:
        """This frame's LM through the graph for ``schedule`` (captured after CAPTURE_AFTER eager
        runs); returns the final state on the host (the frame's one host wait)."""
        self._load_scene(snapshot)
        self._load_obs(obs)
        self.init.copy_(L.new_state(T_cw, "cpu"))
        self.state.copy_(self.init, non_blocking=True)
        slots = self.scene.means.shape[0]
        key = (schedule, tuple(self.solver.room_for(level, slots) for level in range(len(schedule))))
        graph = self.graphs.get(key)
        if graph is not None:
            graph.replay()
            return self.solver.read_back(self.state)
        self._frame(schedule)
        host = self.solver.read_back(self.state)
        self.uses[key] = self.uses.get(key, 0) + 1
        if not host[L.OVERFLOW] and self.uses[key] >= CAPTURE_AFTER:
            self._capture(key, schedule)
        return host

    def _frame(self, schedule) -> None:
        """The captured work: pyramid, pivot, LM (the start state is already in place)."""
        self.state[L.PIVOT:L.PIVOT + 1] = rasterizer.median_depth(self.obs.depth)
        pyramid = lm.pyramid(self.obs, len(schedule))
        self.solver.run_levels(self.scene, pyramid, self.state, schedule, stop_when_done=False)

    def _capture(self, key, schedule) -> None:
        # slam.cuda_graphs: no device-wide wait (the mapper may be capturing its step meanwhile)
        if self.stream is None:
            self.stream = torch.cuda.Stream(self.device)
        graph, _ = capture(lambda: self._frame(schedule), self.stream, self.pool_of)
        self.pool_of = graph       # every graph of this tracker shares the first one's pool
        self.graphs[key] = graph
        self.captures += 1

    def _reset(self) -> None:
        self.graphs.clear()
        self.uses.clear()
        self.pool_of = None

    def _load_scene(self, snap: MapSnapshot) -> None:
        if self.scene_version == snap.version and self.scene is not None:
            return
        n = snap.size
        if self.scene is None or self.scene.means.shape[0] < n:
            slots = padded_slots(n)
            f = dict(dtype=torch.float32, device=self.device)
            self.scene = Scene(torch.empty(slots, 3, **f), torch.empty(slots, **f),
                               torch.empty(slots, 3, **f), torch.empty(slots, **f))
            self._reset()
        sc = self.scene
        sc.means[:n].copy_(snap.means)
        sc.radii[:n].copy_(snap.radii)
        sc.colors[:n].copy_(snap.colors)
        sc.opacities[:n].copy_(snap.opacities)
        sc.means[n:] = float("nan")
        sc.radii[n:] = 0.0
        sc.colors[n:] = 0.0
        sc.opacities[n:] = 0.0
        self.scene_version = snap.version

    def _load_obs(self, obs: Observation) -> None:
        key = (obs.width, obs.height, tuple(obs.K.flatten().tolist()))
        if key != self.obs_key:
            self.obs = Observation(torch.empty_like(obs.color), torch.empty_like(obs.depth), obs.K.clone())
            self.obs_key = key
            self._reset()
        self.obs.color.copy_(obs.color)
        self.obs.depth.copy_(obs.depth)
