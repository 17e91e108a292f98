"""A frame's images as device tensors, with the image pyramid SLAM uses (the depth-edge mask is the
rasterizer's ``depth_edge_mask``)."""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import torch

import rasterizer
from slam.camera import scale_K


@dataclass
class Observation:
    """colour: (H, W, 3) float32 in [0, 1]; depth: (H, W) float32 metres, 0 = invalid (both on
    the SLAM device); K: (3, 3) float32 for this resolution, always on the CPU (the rasterizer
    reads it as four scalars: a device K would cost a host sync per render)."""

    color: torch.Tensor
    depth: torch.Tensor
    K: torch.Tensor

    @property
    def height(self) -> int:
        return int(self.depth.shape[0])

    @property
    def width(self) -> int:
        return int(self.depth.shape[1])

    @staticmethod
    def from_numpy(color: np.ndarray, depth: np.ndarray, K: np.ndarray, device: torch.device) -> "Observation":
        """uint8 RGB (H, W, 3) and float depth (H, W) metres -> device tensors (new ones: never
        the caller's arrays), through ``rasterizer.unpack_frame`` (one kernel). Depth that is not
        finite and positive (NaN, inf, negative: a ROS topic or a camera stream can deliver them)
        becomes 0, invalid, as ``slam.data.frame.validate_frame`` makes it for the loaders."""
        color = np.asarray(color)
        if color.dtype != np.uint8:
            raise ValueError(f"frame colour must be uint8 RGB (H, W, 3), got {color.dtype} {color.shape}")
        c, d = rasterizer.unpack_frame(upload(color, device, np.uint8), upload(depth, device, np.float32))
        k = torch.as_tensor(np.asarray(K), dtype=torch.float32)
        return Observation(c, d, k)

    def color_uint8(self) -> np.ndarray:
        """The colour as a host (H, W, 3) uint8 array, rounded to nearest (ties to even) on the host:
        ``round`` on a CUDA device would load its kernels into host memory for this use alone
        (14 MB on an H100; docs/benchmarks.md#host-memory), and so is the scaling (``mul``'s, 8 MB).
        Values outside [0, 1] saturate and NaN (a broken frame) becomes 0, where a cast would be
        undefined."""
        scaled = np.nan_to_num((self.color.cpu() * 255.0).numpy(), nan=0.0)
        return np.rint(np.clip(scaled, 0.0, 255.0)).astype(np.uint8)

    def downsampled(self, factor: int) -> "Observation":
        """Half, quarter, ... resolution (``rasterizer.downsample``, one kernel): colour by area
        averaging, depth by the median of the valid pixels of each block (a block with no valid
        pixel stays invalid): the loaders' rule (``slam.data.preprocess.downscale_depth``), so a
        pyramid level equals a frame loaded at that resolution. (A mean blends foreground and
        background at depth edges; on 7-Scenes it cost 1.1 cm of ATE at 160x120.)"""
        if factor == 1:
            return self
        color, depth = rasterizer.downsample(self.color, self.depth, factor)
        return Observation(color, depth, scale_K(self.K, factor))


_staging = threading.local()   # per thread: {(shape, dtype, device): StagedUpload}


class StagedUpload:
    """A page-locked host buffer for one image shape and dtype, and the event of its last upload."""

    def __init__(self, shape, dtype, device: torch.device) -> None:
        self.host = torch.from_numpy(np.empty(shape, dtype)).pin_memory()
        self.view = self.host.numpy()
        self.event = torch.cuda.Event()   # a synchronize before its first record returns at once
        self.device = device

    def __call__(self, array: np.ndarray) -> torch.Tensor:
        self.event.synchronize()   # the previous upload may still read the buffer
        np.copyto(self.view, array, casting="unsafe")
        out = self.host.to(self.device, non_blocking=True)
        self.event.record(torch.cuda.current_stream(self.device))
        return out


def upload(array: np.ndarray, device: torch.device, dtype) -> torch.Tensor:
    """``array`` as ``dtype`` on ``device`` (a new tensor on CUDA; on the CPU it may share memory
    with ``array``). On CUDA through a page-locked staging buffer of this thread: one host copy,
    then an asynchronous DMA; a copy from pageable memory is done by the host and cost ~0.4 ms of
    host time per 640x480 frame (H200 host, cProfile of the tracking step)."""
    device = torch.device(device)
    if device.type != "cuda":
        return torch.from_numpy(np.ascontiguousarray(array, dtype=dtype))
    staged = getattr(_staging, "buffers", None)
    if staged is None:
        staged = _staging.buffers = {}
    key = (array.shape, np.dtype(dtype).str, device)
    stage = staged.get(key)
    if stage is None:
        stage = staged[key] = StagedUpload(array.shape, dtype, device)
    return stage(array)

