"""The mapper's optimisation step replayed from a CUDA graph (``mapping.cuda_graph``).

One step (``Mapper._update``: render the live spheres from a keyframe, the L1 loss, its backward,
the Adam update of the rows) is about a hundred small GPU operations and, queued one by one from
Python, about 2.5 ms of host time against 0.35 ms of GPU time on an H200 (7-Scenes, 48k spheres,
320x240): the mapper was host-bound. Here the step is captured over static inputs: the keyframe's
compact images and pose (copied in before each replay) and a leaf view of the map's rows padded to
a slot count (``SphereMap.padded_rows``: the map's own memory, so each replay reads the rows the
last one updated; the padding's NaN centres are culled). The graph is kept while the map fits its
slots (a capture, ~one step of host time, then comes a few times per doubling of the map, not at
every keyframe). Per step the host then queues three copies and one graph launch. The copies come
from page-locked host buffers (``PinnedKeyframes``): a copy from pageable memory waits for the
stream, i.e. for the replay before it, and made the host wait out every step (H200, 7-Scenes: a
quarter of the mapping thread's time).

The render inside the graph cannot wait for the binning's pair count, so it bins with room for
``capacity`` pairs (``rasterizer.PairRoom``): the most pairs any render of this mapper has needed,
times ``HEADROOM``. The room is read once per keyframe, after its steps. A step that overflowed
rendered some tiles without their farthest spheres; by then the spheres have moved on, so the
steps are not redone: the overflow is counted (``MappingReport.pair_overflow``, metrics.json
``mapping_pair_overflows``) and the next keyframe captures again with room for what was seen.

Not captured (the step runs as queued kernels): keyframe pose refinement (``mapping.refine_poses``:
its Adam runs on the host), keyframes of another size or camera than the first step's, CPU.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import torch

import rasterizer
from slam.cuda_graphs import capture
from slam.geometry import invert
from slam.map.keyframes import Keyframe, KeyframeView

# Room for pairs over the most seen: the map grows between keyframes and views differ. Not a
# tuning value: an overflow is counted and the room grows; more headroom only costs memory
# (20 bytes a pair).
HEADROOM = 1.5
ROOM_STEP = 1 << 16                 # capacity rounded up to this many pairs
MIN_STEPS = 4                       # fewer steps than this: queued kernels (a capture costs ~1 step)
# Page-locked keyframe sets kept (least recently used reused first): more than a keyframe's steps
# use (the window plus its random keyframes), so those never wait; the final refinement's steps
# over the whole store reuse sets, each after its last copy ran. Not a tuning value: 12 sets of a
# 320x240 keyframe are 4.6 MB of host memory.
PINNED_SETS = 12


@dataclass
class PinnedSet:
    """One keyframe's host copy for the step graph's input copies: colour (H, W, 3) uint8, depth
    (H, W) float16 metres, T_cw (4, 4) float32; ``copied``: the CUDA event of the last copy queued
    from it (None before any); ``run``: the run of steps it was last written in (None: holds
    another keyframe's data)."""

    color: torch.Tensor
    depth: torch.Tensor
    T_cw: torch.Tensor
    copied: Optional[torch.cuda.Event] = None
    run: Optional[int] = None

    def tensors(self) -> tuple:
        """(colour, depth, T_cw): the order of ``StepGraph.images``."""
        return self.color, self.depth, self.T_cw


class PinnedKeyframes:
    """Host copies of keyframes (``PinnedSet``) for the step graph's input copies, at most
    ``limit`` sets of one image size, reused least recently used first; a set is rewritten only
    after the copy that last read it has run (its event). ``pin``: page-locked memory (the step
    graph's; False: ordinary host memory, e.g. without a GPU). Mapping thread."""

    def __init__(self, shape: tuple, limit: int = PINNED_SETS, pin: bool = True) -> None:
        self.shape, self.limit, self.pin = shape, limit, pin     # shape: (H, W) of the keyframes' depth
        self.sets: OrderedDict = OrderedDict()       # kf_id -> PinnedSet
        self.run = 0

    def start_run(self) -> None:
        """A new run of steps: each keyframe's set is written again at its first use (a pose may
        have moved since the last run)."""
        self.run += 1

    def _allocate(self) -> PinnedSet:
        h, w = self.shape
        tensors = (torch.empty((h, w, 3), dtype=torch.uint8), torch.empty((h, w), dtype=torch.float16),
                   torch.empty((4, 4), dtype=torch.float32))
        if self.pin:
            tensors = tuple(t.pin_memory() for t in tensors)
        return PinnedSet(*tensors)

    def get(self, kf: Keyframe) -> PinnedSet:
        """``kf``'s set, written from ``kf`` at its first use in this run (after the last copy
        from the set has run)."""
        entry = self.sets.pop(kf.kf_id, None)
        if entry is None:
            if len(self.sets) < self.limit:
                entry = self._allocate()
            else:
                entry = self.sets.popitem(last=False)[1]
                entry.run = None                     # it holds another keyframe
        self.sets[kf.kf_id] = entry
        if entry.run != self.run:
            if entry.copied is not None:
                entry.copied.synchronize()           # the last copy from this set has run
            np.copyto(entry.color.numpy(), kf.color)
            np.copyto(entry.depth.numpy(), kf.depth)
            np.copyto(entry.T_cw.numpy(), invert(kf.T_wc))
            entry.run = self.run
        return entry


class StepGraph:
    """The mapper's steps through one CUDA graph per keyframe (module docstring). Mapping thread."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.room = rasterizer.PairRoom(device)      # exact binning until a count is known
        self.capacity: Optional[int] = None
        self.graph: Optional[torch.cuda.CUDAGraph] = None   # the last captured: replayed while its
                                                    # key holds; its memory pool is shared by the next capture
        self.graph_key = None                        # what it was captured for (``run``)
        self.loss: Optional[torch.Tensor] = None     # its step's loss (rewritten by each replay)
        self.stats: Optional[rasterizer.SphereStats] = None   # its statistics, over the padded rows
        self.stream = torch.cuda.Stream(device)      # captures run here (slam.cuda_graphs)
        self.images: Optional[tuple] = None          # static (color uint8, depth float16, T_cw; K on the host)
        self.key = None                              # (image shape, K) of the static images
        self.pinned: Optional[PinnedKeyframes] = None   # page-locked keyframes of that size
        self.most = 0                                # most pairs seen (host copy)
        self.captures = 0
        self.runs = 0                                # runs of steps (keyframes, refinements)
        self.overflows = 0

    def usable(self, keyframes: list[Keyframe]) -> bool:
        """Whether these steps (one keyframe each) can replay a graph: enough of them, every
        keyframe of one size and camera, and a pair count already seen (by a step queued without
        the graph: the first keyframe's)."""
        if self.most == 0:
            self.most = self.room.read()[0]
        if len(keyframes) < MIN_STEPS or self.most == 0:
            return False
        kf0 = keyframes[0]
        return all(k.color.shape == kf0.color.shape and np.array_equal(k.K, kf0.K) for k in keyframes)

    def run(self, keyframes: list[Keyframe], rows: torch.Tensor, stats,
            update: Callable[[KeyframeView, object, torch.Tensor, object], torch.Tensor],
            fixed: tuple = ()) -> tuple[float, bool]:
        """One step per keyframe of ``keyframes`` (in order) through a graph of
        ``update(view, stats, rows, room) -> loss``; ``rows``: the (S, 8) leaf of the map's padded
        rows (``SphereMap.padded_rows``) that ``update`` differentiates and steps; ``stats``: the
        caller's ``rasterizer.SphereStats`` of the N live spheres, or None; ``fixed``: whatever
        else the captured step depends on (the map's frozen rows). The graph is captured again only
        when the rows' memory or count, the pair room, the images' size and camera, ``fixed`` or
        whether there are statistics change; otherwise the last one replays. Returns (the last
        step's loss, whether any step overflowed its pair room). Two host waits: the loss and the
        room."""
        self.capacity = max(self.capacity or 0, int(math.ceil(HEADROOM * self.most / ROOM_STEP)) * ROOM_STEP)
        self.room.capacity = self.capacity
        try:
            self._allocate(keyframes[0])
            key = (rows.data_ptr(), rows.shape[0], self.capacity, self.key, stats is not None, fixed)
            if key != self.graph_key:
                self._capture(rows, stats is not None, update)
                self.graph_key = key
            if self.stats is not None:
                self.stats.zero_()
            self.pinned.start_run()
            for kf in keyframes:
                self._load(self.pinned.get(kf))
                self.graph.replay()
            value = float(self.loss)
        finally:
            self.room.capacity = None        # renders outside the graph bin exactly
        self.runs += 1
        if stats is not None:                # the live spheres' sums (the padding's are zero)
            n = stats.weight_sum.shape[0]
            for mine, theirs in ((self.stats.weight_sum, stats.weight_sum), (self.stats.error_sum, stats.error_sum),
                                 (self.stats.count, stats.count)):
                theirs.copy_(mine[:n])
        self.most, overflowed = self.room.read()
        if overflowed:
            self.overflows += 1
            self.room.counts[1] = 0.0
        return value, overflowed

    def _allocate(self, kf: Keyframe) -> None:
        """The static inputs for keyframes of ``kf``'s size and camera (kept while they last; the
        capture reads their addresses, each replay what ``_load`` copied into them)."""
        key = (kf.color.shape, tuple(np.asarray(kf.K).ravel()))
        if key != self.key:
            h, w = kf.depth.shape
            self.images = (torch.empty((h, w, 3), dtype=torch.uint8, device=self.device),
                           torch.empty((h, w), dtype=torch.float16, device=self.device),
                           torch.empty((4, 4), dtype=torch.float32, device=self.device),
                           torch.as_tensor(kf.K, dtype=torch.float32))
            self.key = key
            self.pinned = PinnedKeyframes((h, w))

    def _load(self, entry: PinnedSet) -> None:
        """Queue the copies of one keyframe's page-locked set (``PinnedKeyframes.get``) into the
        static inputs, then its event (``usable`` checked the keyframe's size and camera)."""
        for static, host in zip(self.images[:3], entry.tensors()):
            static.copy_(host, non_blocking=True)
        entry.copied = torch.cuda.Event()
        entry.copied.record()

    def _capture(self, rows: torch.Tensor, with_stats: bool, update) -> None:
        """Capture ``update`` over the static inputs, ``rows`` and (``with_stats``) statistics of
        as many rows, sharing the last graph's memory pool (which is then freed)."""
        color, depth, T_cw, K = self.images
        self.stats = rasterizer.SphereStats(rows.shape[0], device=self.device) if with_stats else None
        self.graph, self.loss = capture(
            lambda: update(KeyframeView.derive(color, depth, K, T_cw), self.stats, rows, self.room),
            self.stream, self.graph)
        self.captures += 1
