"""Frame kernels, one launch per call: a compact frame's float images, downsampling by an integer
factor f (a frame to the tracking resolution, the tracker's pyramid levels), the depth-edge mask and
the rolling-shutter unroll.
Unpacking (``unpack_frame``), for pixel p of a compact frame (uint8 colour, float32 or float16 depth
in metres: a camera's upload, a stored keyframe):
    colour = c / 255                                (float32, rounded division)
    depth  = d where 0 < d < inf, else 0            (NaN, inf and negative depths are invalid)
The PyTorch formulation (``unpack_reference``) takes three to five launches (and loads the
comparison, logical and division kernel families into host memory on a GPU: docs/benchmarks.md#host-memory).

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

Rolling-shutter unroll (``unroll``): a frame whose rows were exposed one after another, resampled
into the camera of its colour's middle row. The camera turns at omega (rad/s, camera frame); row v
of an image was taken at

    tau(v) = offset + readout * ((v + 0.5) / H - 0.5)      (s; colour: its readout, offset 0;
                                                            depth: its own readout, and its time
                                                            after the colour's; a negative
                                                            readout: rows read bottom to top)

when the camera had turned by exp(omega tau) from the middle row's orientation. For output pixel
(x, y), ray r = ((x - cx) / fx, (y - cy) / fy, 1) of the middle row's camera, per image:

    d = exp(-omega tau) r with tau from row y, then once more with tau from d's row (a fixed-point
        step); n = d / d_z; source pixel (us, vs) = (fx n_x + cx, fy n_y + cy); tau_s = tau(vs)
    colour = bilinear at (us, vs), coordinates clamped to the image (grid_sample's 'border')
    depth  = z = nearest at (us, vs) (0 outside the image, round half to even), then that point's
             z in the middle row's camera: (exp(omega tau_s) (z n))_z; 0 where z is not > 0

A ray turned behind the camera (d_z <= 1e-6) keeps the pixel's colour and gets depth 0.
``unroll_reference`` is the PyTorch formulation (about forty launches); the kernels share
``sr::unroll_pixel``.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F

from . import _ext

MAX_FACTOR = 16   # the kernels' largest block (csrc/frame_math.h); larger factors use the reference


def _check_images(color: torch.Tensor, depth: torch.Tensor) -> None:
    """ValueError unless ``color`` is (H, W, 3) and ``depth`` (H, W), both float32 on one device."""
    if color.dim() != 3 or color.shape[2] != 3 or depth.shape != color.shape[:2]:
        raise ValueError(f"color must be (H, W, 3) and depth (H, W), got {tuple(color.shape)} and {tuple(depth.shape)}")
    if color.dtype != torch.float32 or depth.dtype != torch.float32 or color.device != depth.device:
        raise ValueError(f"color and depth must be float32 on one device, got {color.dtype} on {color.device} "
                         f"and {depth.dtype} on {depth.device}")


def unpack_reference(color: torch.Tensor, depth: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``unpack_frame``'s model with PyTorch ops (the oracle of the tests)."""
    d = depth.float()
    return color.float() / 255.0, torch.where((d > 0) & (d < float("inf")), d, 0.0)


def unpack_frame(color: torch.Tensor, depth: torch.Tensor, backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """A compact frame as float images (the model above): ``color`` (H, W, 3) uint8, ``depth`` (H, W)
    float32 or float16 metres, on one device -> (colour (H, W, 3) float32 in [0, 1], depth (H, W)
    float32 metres, 0 = invalid), new tensors. ``backend``: 'auto' | 'cuda' | 'cpu' | 'reference'."""
    if color.dim() != 3 or color.shape[2] != 3 or depth.shape != color.shape[:2]:
        raise ValueError(f"color must be (H, W, 3) and depth (H, W), got {tuple(color.shape)} and {tuple(depth.shape)}")
    if color.dtype != torch.uint8 or depth.dtype not in (torch.float32, torch.float16) or color.device != depth.device:
        raise ValueError(f"color must be uint8 and depth float32 or float16 on one device, got {color.dtype} on "
                         f"{color.device} and {depth.dtype} on {depth.device}")
    kind = _ext.resolve_backend(backend, color, what="color")
    if kind == "reference":
        return unpack_reference(color, depth)
    out = _ext.ops(kind).unpack_frame(color.contiguous(), depth.contiguous())
    return out[0], out[1]


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
    _check_images(color, depth)
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


def row_times(height: int, readout_s: float, rows: torch.Tensor, offset_s: float = 0.0) -> torch.Tensor:
    """tau (s) of (fractional) pixel rows ``rows`` of an image of ``height`` rows read out over
    ``readout_s`` and taken ``offset_s`` after the colour's middle row (the model above)."""
    return offset_s + readout_s * ((rows + 0.5) / height - 0.5)


def _rotate_by_rate(omega: Sequence[float], t: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Vectors d (..., 3) rotated by the rotation vector omega * t (rad; t (...) s, Rodrigues)."""
    speed = math.sqrt(sum(float(w) * float(w) for w in omega))
    if speed == 0.0:
        return d
    kx, ky, kz = (float(w) / speed for w in omega)
    a = speed * t
    s, c = torch.sin(a), torch.cos(a)
    x, y, z = d.unbind(-1)
    kd = (kx * x + ky * y + kz * z) * (1.0 - c)
    return torch.stack([x * c + (ky * z - kz * y) * s + kx * kd,
                        y * c + (kz * x - kx * z) * s + ky * kd,
                        z * c + (kx * y - ky * x) * s + kz * kd], -1)


def unroll_reference(color: torch.Tensor, depth: torch.Tensor, intrinsics: Sequence[float],
                     omega: Sequence[float], color_readout_s: float, depth_readout_s: float,
                     depth_offset_s: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The unroll with PyTorch ops (the oracle of the tests; the model above)."""
    fx, fy, cx, cy = (float(k) for k in intrinsics)
    H, W = depth.shape
    v, u = torch.meshgrid(torch.arange(H, device=depth.device, dtype=torch.float32),
                          torch.arange(W, device=depth.device, dtype=torch.float32), indexing="ij")
    ray = torch.stack([(u - cx) / fx, (v - cy) / fy, torch.ones_like(u)], -1)

    def source(offset: float, readout_s: float):
        row, n, ok = v, None, torch.ones_like(v, dtype=torch.bool)
        for _ in range(2):
            d = _rotate_by_rate(omega, -row_times(H, readout_s, row, offset), ray)
            ok = ok & (d[..., 2] > 1e-6)
            n = d / torch.where(ok, d[..., 2], torch.ones_like(row))[..., None]
            row = n[..., 1] * fy + cy
        us, vs = n[..., 0] * fx + cx, n[..., 1] * fy + cy
        ok = ok & torch.isfinite(us) & torch.isfinite(vs)
        return us, vs, n, ok, row_times(H, readout_s, vs, offset)

    us, vs, _, ok, _ = source(0.0, float(color_readout_s))
    grid = torch.stack([(us + 0.5) / W * 2 - 1, (vs + 0.5) / H * 2 - 1], -1)
    grid = torch.where(ok[..., None], grid, torch.zeros_like(grid))[None]
    sampled = F.grid_sample(color.permute(2, 0, 1)[None], grid, mode="bilinear", padding_mode="border",
                            align_corners=False)[0].permute(1, 2, 0)
    out_color = torch.where(ok[..., None], sampled, color).contiguous()
    us, vs, n, ok, tau = source(float(depth_offset_s), float(depth_readout_s))
    grid = torch.stack([(us + 0.5) / W * 2 - 1, (vs + 0.5) / H * 2 - 1], -1)
    grid = torch.where(ok[..., None], grid, torch.zeros_like(grid))[None]
    z = F.grid_sample(depth[None, None], grid, mode="nearest", padding_mode="zeros", align_corners=False)[0, 0]
    z_mid = _rotate_by_rate(omega, tau, n * z[..., None])[..., 2]
    out_depth = torch.where(ok & (z > 0), z_mid, torch.zeros_like(z_mid))
    return out_color, out_depth.contiguous()


def unroll(color: torch.Tensor, depth: torch.Tensor, intrinsics: Sequence[float], omega: Sequence[float],
           color_readout_s: float, depth_readout_s: float, depth_offset_s: float = 0.0,
           backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """``color`` (H, W, 3) float32 and ``depth`` (H, W) float32 metres (0 = invalid), on one device,
    as the colour's middle row's camera would have seen them (the model above): the camera turning
    at ``omega`` (3,) rad/s (camera frame), the colour's rows read out over ``color_readout_s`` s,
    the depth's over ``depth_readout_s`` s, the depth image taken ``depth_offset_s`` s after the
    colour. ``intrinsics``: (fx, fy, cx, cy) pixels. Returns new (colour (H, W, 3), depth (H, W)).
    ``backend``: 'auto' | 'cuda' | 'cpu' | 'reference'."""
    _check_images(color, depth)
    if len(intrinsics) != 4 or len(omega) != 3:
        raise ValueError(f"intrinsics must be (fx, fy, cx, cy) and omega (3,), got {len(intrinsics)} and {len(omega)}")
    kind = _ext.resolve_backend(backend, color, what="color")
    if kind == "reference":
        return unroll_reference(color, depth, intrinsics, omega, color_readout_s, depth_readout_s, depth_offset_s)
    params = ([float(k) for k in intrinsics] + [float(w) for w in omega]
              + [float(color_readout_s), float(depth_readout_s), float(depth_offset_s)])
    out = _ext.ops(kind).unroll(color.contiguous(), depth.contiguous(), params)
    return out[0], out[1]
