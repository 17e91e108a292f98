"""The keyframe as the threads share it: ``Keyframe`` (compact, on the host: made on the tracking
thread, stored and refined by the mapper, measured by the loop stage, saved beside the map) and
``KeyframeView`` (the one way a stored keyframe reaches a device).

Keyframes are stored compactly on the host (uint8 colour, float16 depth, optionally downscaled)
and uploaded only while they are used: no unbounded GPU frame store. Which frames become
keyframes and which are kept is the mapping package's (``slam.mapping.keyframes``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from rasterizer import depth_edge_mask, unpack_frame
from slam.camera import scale_K
from slam.geometry import invert
from slam.observation import Observation


@dataclass
class Keyframe:
    """frame_index: index of the source frame; timestamp: s; T_wc: (4, 4) float64 pose;
    color: (h, w, 3) uint8; depth: (h, w) float16 metres; K: (3, 3) float64 for (h, w);
    kf_id: the keyframe's id, unique within a map (saved maps keep theirs; -1 = not assigned);
    map_loops: loop corrections the map had applied when the keyframe was tracked (the mapper
    applies those it missed); after_loss: tracking failed or was relocalised between the
    previous keyframe and this one, so the tracker's relative pose between them is not a
    measurement (the loop stage's pose graph measures it from the two keyframes instead);
    information: (6, 6) the tracker's information on this keyframe's pose, up to scale
    (``TrackResult.information``; None when not known, e.g. a saved map's keyframes).

    ``T_wc`` is the keyframe's current estimate: the mapper (its one writer) replaces the array
    when it refines the pose or applies a loop correction, never edits it in place, so a reader
    holding the old array keeps a consistent pose."""

    frame_index: int
    timestamp: float
    T_wc: np.ndarray
    color: np.ndarray
    depth: np.ndarray
    K: np.ndarray
    kf_id: int = -1
    map_loops: int = 0
    after_loss: bool = False
    information: Optional[np.ndarray] = None

    @staticmethod
    def from_frame(frame, T_wc: np.ndarray, downscale: int = 1, kf_id: int = -1) -> "Keyframe":
        """Compact copy of ``frame`` (uint8 colour, float depth in metres: numpy) at 1/``downscale``
        resolution (``Observation.downsampled``: colour area-averaged, depth the median of each
        block's valid pixels, as the loaders downscale)."""
        obs = Observation.from_numpy(frame.color, frame.depth, frame.K, torch.device("cpu"))
        return Keyframe.from_observation(frame, obs.downsampled(downscale), T_wc, downscale, kf_id)

    @staticmethod
    def from_observation(frame, obs: Observation, T_wc: np.ndarray, downscale: int, kf_id: int = -1) -> "Keyframe":
        """Compact copy of ``obs``, ``frame`` at 1/``downscale`` resolution already on a device (the
        tracking thread's frame, when keyframes are stored at the tracking resolution: no second
        downscale on the host). Colour is rounded to uint8 on the host (``Observation.color_uint8``):
        rounding on a CUDA device would load the round kernels into host memory for this one use
        (docs/benchmarks.md#host-memory); depth goes to float16 on the device (half the copy)."""
        color = obs.color_uint8()
        depth = obs.depth.to(torch.float16).cpu().numpy()
        return Keyframe(frame.index, frame.timestamp, T_wc.copy(), color, depth,
                        scale_K(np.asarray(frame.K, dtype=np.float64), downscale), kf_id)

    def nbytes(self) -> int:
        return self.color.nbytes + self.depth.nbytes

    def observation(self) -> Observation:
        """The keyframe as float images on the host (colour (H, W, 3) in [0, 1], depth (H, W)
        metres: ``rasterizer.unpack_frame``, as ``KeyframeView.observation`` on its device), K
        (3, 3) float32; no depth masks derived."""
        color, depth = unpack_frame(torch.from_numpy(self.color), torch.from_numpy(self.depth))
        return Observation(color, depth, torch.as_tensor(self.K, dtype=torch.float32))


@dataclass
class KeyframeView:
    """A keyframe on a device in its compact form (uint8 colour, float16 depth, bool masks: 6 bytes
    a pixel instead of 18): the one way a stored keyframe reaches the device (mapping steps,
    densification, image metrics). ``observation()`` expands it to float images for the step that
    uses them. The mapper keeps only the newest keyframe's view resident during a keyframe's
    iterations; the other window keyframes are uploaded for the step that uses them."""

    color: torch.Tensor      # (H, W, 3) uint8
    depth: torch.Tensor      # (H, W) float16 metres
    K: torch.Tensor          # (3, 3) float32, CPU
    T_cw: torch.Tensor       # (4, 4) float32 world-to-camera, device
    depth_ok: torch.Tensor   # (H, W) bool: valid depth away from depth edges
    valid: torch.Tensor      # (H, W) bool: valid depth

    @staticmethod
    def upload(kf: Keyframe, device: torch.device) -> "KeyframeView":
        """Copy ``kf`` to ``device`` (non-blocking) and derive its depth masks there."""
        color = torch.from_numpy(kf.color).to(device, non_blocking=True)
        depth = torch.from_numpy(kf.depth).to(device, non_blocking=True)
        T_cw = torch.as_tensor(invert(kf.T_wc), dtype=torch.float32, device=device)
        return KeyframeView.derive(color, depth, torch.as_tensor(kf.K, dtype=torch.float32), T_cw)

    @staticmethod
    def derive(color: torch.Tensor, depth: torch.Tensor, K: torch.Tensor, T_cw: torch.Tensor) -> "KeyframeView":
        """The view of compact images already on the device (color (H, W, 3) uint8, depth (H, W)
        float16 metres; K (3, 3) float32 CPU; T_cw (4, 4) float32): its depth masks derived there
        (the mapper's CUDA graph derives them from its static copies, ``slam.mapping.step_graph``),
        from the depth ``observation()`` gives (``unpack_frame``: finite and positive, else 0), so
        the masks are those of the view's own float images; valid depth as a cast to bool of it: a
        comparison's kernels would load into host memory on a GPU for this use alone
        (docs/benchmarks.md#host-memory)."""
        d = unpack_frame(color, depth)[1]
        return KeyframeView(color, depth, K, T_cw, depth_edge_mask(d), d.bool())

    def observation(self) -> Observation:
        """The keyframe as float images: colour (H, W, 3) in [0, 1], depth (H, W) metres."""
        color, depth = unpack_frame(self.color, self.depth)   # one kernel (three PyTorch launches)
        return Observation(color, depth, self.K)
