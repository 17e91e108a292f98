"""Frame kernels, one launch per call: downsampling by an integer factor f (a frame to the
tracking resolution, the tracker's pyramid levels) and the depth-edge mask.

Downsampling (every backend), for output pixel (y, x) of (H // f, W // f) (rows and columns beyond
a whole block are dropped):

    colour = mean of the f x f input block          (summed row by row, then / f^2: avg_pool2d)
    depth  = median of the block's valid depths     (valid: 0 < d < inf; an even count takes the
                                                     mean of the two middle values; 0 when none)

The median keeps depth edges sharp (a mean blends foreground and background) and never mixes an
invalid pixel in: the loaders' rule (``slam.data.preprocess.downscale_depth``), so a downsampled
frame equals one loaded at that resolution. The PyTorch formulation (``reference``, the tests'
oracle) takes about fifteen launches; the kernel (``cuda``, csrc/frame_cuda.cu: one thread per
output pixel) one, and its ``cpu`` twin (csrc/frame_cpu.cpp) shares the per-pixel math
(csrc/frame_math.h).

Depth-edge mask (``depth_edge_mask``), for pixel (y, x) of (H, W) depth d:

    ok = d > 0  and  max(valid 3x3 neighbours) - min(valid 3x3 neighbours) <= max_jump * d

(the neighbours inside the image, the pixel itself included; invalid ones (not > 0) count as 0 in
the max and 1e6 in the min, so they are ignored). It drops unreliable depth at object edges and
the misregistered colour/depth borders of Kinect-style sensors. ``edge_mask_reference`` is the
PyTorch formulation (about twelve launches), the kernels share ``sr::depth_edge_ok``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import _ext

MAX_FACTOR = 16   # the kernels' largest block (csrc/frame_math.h); larger factors use the reference


def reference(color: torch.Tensor, depth: torch.Tensor, factor: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The model with PyTorch ops (the oracle of the tests)."""
    H, W = depth.shape[0] // factor * factor, depth.shape[1] // factor * factor
    h, w = H // factor, W // factor
    if h == 0 or w == 0:   # smaller than one block
        return color.new_empty(h, w, 3), depth.new_empty(h, w)
    c = color[:H, :W].permute(2, 0, 1)[None]
    c = F.avg_pool2d(c, factor)[0].permute(1, 2, 0).contiguous()
    blocks = depth[:H, :W].reshape(h, factor, w, factor).permute(0, 2, 1, 3).reshape(h, w, factor * factor)
    blocks = torch.where((blocks > 0) & torch.isfinite(blocks), blocks, torch.full_like(blocks, float("inf")))
    blocks, _ = torch.sort(blocks, dim=-1)
    n = torch.isfinite(blocks).sum(-1)
    lo = torch.gather(blocks, -1, ((n - 1) // 2).clamp_min(0)[..., None])[..., 0]
    hi = torch.gather(blocks, -1, (n // 2).clamp_max(factor * factor - 1)[..., None])[..., 0]
    d = torch.where(n > 0, 0.5 * (lo + torch.where(torch.isfinite(hi), hi, lo)), torch.zeros_like(lo))
    return c, d.contiguous()


def downsample(color: torch.Tensor, depth: torch.Tensor, factor: int,
               backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """``color`` (H, W, 3) float32 and ``depth`` (H, W) float32 metres (0 = invalid), on one
    device, at 1/``factor`` resolution (the model above): returns (colour (H//f, W//f, 3), depth
    (H//f, W//f)), new tensors (``factor`` 1: contiguous copies). ``backend``: 'auto' (the kernel
    of the images' device; the oracle beyond MAX_FACTOR) | 'cuda' | 'cpu' | 'reference'."""
    factor = int(factor)
    if factor < 1:
        raise ValueError(f"factor must be >= 1, got {factor}")
    if color.dim() != 3 or color.shape[2] != 3 or depth.shape != color.shape[:2]:
        raise ValueError(f"color must be (H, W, 3) and depth (H, W), got {tuple(color.shape)} and {tuple(depth.shape)}")
    if color.dtype != torch.float32 or depth.dtype != torch.float32 or color.device != depth.device:
        raise ValueError(f"color and depth must be float32 on one device, got {color.dtype} on {color.device} "
                         f"and {depth.dtype} on {depth.device}")
    kind = "reference" if backend == "auto" and factor > MAX_FACTOR else _ext.resolve_backend(backend, color, what="color")
    if kind == "reference":
        return reference(color, depth, factor)
    out = _ext.ops(kind).downsample(color.contiguous(), depth.contiguous(), factor)
    return out[0], out[1]


def edge_mask_reference(depth: torch.Tensor, max_jump: float = 0.1) -> torch.Tensor:
    """The depth-edge mask with PyTorch ops (the oracle of the tests)."""
    d = depth[None, None]
    valid = d > 0
    big = torch.where(valid, d, torch.full_like(d, 1e6))
    dmax = F.max_pool2d(torch.where(valid, d, torch.zeros_like(d)), 3, 1, 1)
    dmin = -F.max_pool2d(-big, 3, 1, 1)
    ok = valid & ((dmax - dmin) <= max_jump * d)
    return ok[0, 0]


def depth_edge_mask(depth: torch.Tensor, max_jump: float = 0.1, backend: str = "auto") -> torch.Tensor:
    """(H, W) bool on ``depth``'s device: valid depth (> 0, metres) away from depth edges, where no
    valid 3x3 neighbour is nearer or farther than ``max_jump`` x the depth (the model above).
    ``depth``: (H, W) float32; ``backend``: 'auto' | 'cuda' | 'cpu' | 'reference'."""
    if depth.dim() != 2 or depth.dtype != torch.float32:
        raise ValueError(f"depth must be (H, W) float32, got {tuple(depth.shape)} {depth.dtype}")
    kind = _ext.resolve_backend(backend, depth, what="depth")
    if kind == "reference":
        return edge_mask_reference(depth, max_jump)
    return _ext.ops(kind).depth_edge_mask(depth.contiguous(), float(max_jump))
