"""``MapSnapshot``: an immutable published version of the map, and the one way to render it.

The mapper (the only writer of the map) publishes a snapshot after every keyframe
(``SphereMap.publish``); every other reader - the tracker, the relocaliser, metrics, the viewer,
the mesh export, the ROS bridge - renders the map through ``MapSnapshot.render``, from whichever
thread it runs on. On CUDA the snapshot's tensors were written on the mapper's stream: ``render``
makes the caller's current stream wait for the mapper's ``ready`` event and marks the tensors as
used on that stream (``record_stream``), so the allocator never hands their memory to the mapper
while the caller's kernels still read it. Both happen once per (snapshot, stream), not per render.
On the CPU everything is ordered already.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

import rasterizer
from slam.geometry import invert
from slam.map.render import render_spheres


@dataclass(frozen=True)
class MapSnapshot:
    """An immutable published version of the map, ready to render.

    means: (N, 3) float32 metres, world; radii: (N,) metres; colors: (N, 3) in [0, 1];
    opacities: (N,) in [0, 1]; version: increases with every publish; ready: CUDA event recorded
    on the mapper's stream after the tensors were written (None on the CPU); keyframe_poses:
    keyframe id -> (4, 4) float64 T_wc, the keyframe poses this map version was optimised with
    (refined, loop-corrected; the tracker re-bases on its reference keyframe's); loop_edges:
    accepted loop closures as (keyframe id, keyframe id) pairs (the viewer draws them), in the
    order applied; loop_later: for each of them, the world-frame correction C (4, 4) that moves
    keyframes newer than its pose graph (T <- C @ T: the mapper moves such a keyframe when it
    arrives, the tracker its pose history while its reference keyframe is not mapped yet).
    """

    means: torch.Tensor
    radii: torch.Tensor
    colors: torch.Tensor
    opacities: torch.Tensor
    version: int
    ready: Optional[torch.cuda.Event] = None
    keyframe_poses: dict = field(default_factory=dict, repr=False, compare=False)
    loop_edges: tuple = ()
    anchors: Optional[torch.Tensor] = field(default=None, repr=False, compare=False)   # (N,) int32
    loop_later: tuple = field(default=(), repr=False, compare=False)
    # CUDA streams already synchronised with ``ready`` (see ``wait``); internal bookkeeping.
    _synced: set = field(default_factory=set, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def size(self) -> int:
        return int(self.means.shape[0])

    @property
    def device(self) -> torch.device:
        return self.means.device

    def wait(self) -> None:
        """Make the calling thread's current CUDA stream wait for the mapper's writes and keep the
        tensors' memory alive for it (no-op on the CPU, and after the first call per stream)."""
        if not self.means.is_cuda:
            return
        stream = torch.cuda.current_stream(self.means.device)
        key = stream.cuda_stream
        with self._lock:
            if key in self._synced:
                return
            if self.ready is not None:
                stream.wait_event(self.ready)
            for t in (self.means, self.radii, self.colors, self.opacities, self.anchors):
                if t is not None:
                    t.record_stream(stream)
            self._synced.add(key)

    @torch.no_grad()
    def render(self, K, width: int, height: int, *, T_wc: Optional[np.ndarray] = None,
               T_cw: Optional[np.ndarray] = None, backend: str = "auto",
               max_anchor: Optional[int] = None) -> rasterizer.RasterOutput:
        """Render the snapshot seen from a camera pose, on the caller's current stream.

        K: (3, 3) intrinsics of the target resolution (tensor or array; kept on the CPU, where the
        rasterizer reads it without a device sync). width, height: px. Exactly one of
        T_wc (4, 4) camera-to-world or T_cw (4, 4) world-to-camera (host arrays, float64; the
        tracker keeps its estimate as T_cw). Returns ``rasterizer.RasterOutput`` (colour (H, W, 3),
        depth (H, W) metres, alpha (H, W)); never records gradients. ``max_anchor``: render only
        the spheres created by keyframes with ids up to it (and unanchored ones): the map as it
        was built by then (loop verification).
        """
        if (T_wc is None) == (T_cw is None):
            raise ValueError("give exactly one of T_wc and T_cw")
        if T_cw is None:
            T_cw = invert(np.asarray(T_wc, dtype=np.float64))
        self.wait()
        T = torch.as_tensor(T_cw, dtype=torch.float32).to(self.means.device)
        K = torch.as_tensor(K, dtype=torch.float32)
        if K.device.type != "cpu":
            K = K.cpu()
        snap = self if max_anchor is None else self.up_to(max_anchor)
        return render_spheres(snap.means, snap.radii, snap.colors, snap.opacities, T, K, width, height,
                              backend=backend)

    @torch.no_grad()
    def up_to(self, max_anchor: int) -> "MapSnapshot":
        """The spheres created by keyframes with ids up to ``max_anchor`` (and unanchored ones):
        the map as it was built by then, as a snapshot of its own (loop verification renders and
        tracks against it). The same rows, the later spheres' centres NaN: culled by every render
        and by the tracker's pass (as the tracker's padding rows), so a render of it is the render
        of the kept spheres alone, bit for bit. Not compacted: on a GPU the masked gathers'
        kernels would load into host memory for this use (docs/benchmarks.md#host-memory)."""
        self.wait()
        if self.anchors is None:
            return self
        later = self.anchors > max_anchor
        means = torch.where(later[:, None], float("nan"), self.means)
        return MapSnapshot(means, self.radii, self.colors, self.opacities, self.version,
                           None, self.keyframe_poses, self.loop_edges, self.anchors, self.loop_later)
