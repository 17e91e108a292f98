"""Rolling shutter: a frame whose rows were exposed one after another, seen as if the whole frame
had been taken at the time of its middle row.

A rolling-shutter sensor (Kinect v1's colour and IR cameras, most CMOS cameras) reads its rows
top to bottom over ``readout_s``; row v is taken at ``tau(v) = readout_s * ((v + 0.5) / H - 0.5)``
from the middle row. A camera turning at ``omega`` (rad/s, camera frame) had, at row v, the
orientation ``R_mid @ exp(omega * tau(v))``; a turn bends and stretches the image (a pan slants
vertical edges, a tilt stretches or squeezes the rows), which a single pose per frame can only
absorb as a wrong pose.

``unroll`` resamples the colour and depth into the middle row's camera: for each output pixel,
its ray turned back by ``exp(omega * tau)`` finds the pixel the sensor recorded it at (``tau``
from that pixel's own row: one fixed-point step from the output row), colour bilinear, depth
nearest, the depth's z then expressed in the middle row's camera. Only the rotation is undone:
its image motion does not depend on depth, and the camera's translation within one readout (a
few millimetres at walking pace) moves the image far less than a turn at tens of degrees per
second does. ``omega`` comes from the tracker's last two good poses (``body_rate``).

Cost: about 40 small device operations a frame, launched from Python. On the H200 (threaded,
2026-12-04) the tracker then ran at 44-67 FPS instead of 160-210: each operation gives up the
interpreter lock and takes it back while the mapping thread runs Python between its own operations
(the likely reading, not yet measured apart; the tracker's one CUDA graph a frame avoids it), and 3
of 6 TUM runs failed in a cascade. Off by default until both are fixed and measured
(docs/benchmarks.md#rolling-shutter).
"""
from __future__ import annotations

import functools
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from slam.geometry import so3_log
from slam.observation import Observation


def body_rate(T_prev2: Optional[np.ndarray], T_prev: Optional[np.ndarray], dt: Optional[float]) -> Optional[np.ndarray]:
    """Angular velocity (3,) rad/s in the camera frame from two consecutive poses T_wc (4, 4)
    ``dt`` seconds apart (None when either pose or a positive dt is missing)."""
    if T_prev2 is None or T_prev is None or dt is None or dt <= 0:
        return None
    R_rel = np.asarray(T_prev2, np.float64)[:3, :3].T @ np.asarray(T_prev, np.float64)[:3, :3]
    return so3_log(R_rel) / dt


def row_times(height: int, readout_s: float, rows: torch.Tensor) -> torch.Tensor:
    """tau (s) of (fractional) pixel rows ``rows`` relative to the middle row of a frame of
    ``height`` rows read out over ``readout_s``."""
    return readout_s * ((rows + 0.5) / height - 0.5)


def _rotate(axis: tuple, angle: torch.Tensor, d: torch.Tensor, transpose: bool) -> torch.Tensor:
    """Rodrigues: rotate vectors d (..., 3) about the unit ``axis`` (three floats) by ``angle``
    (...) rad (by minus the angle when ``transpose``). The axis enters as scalars: no host-to-device
    copy (a copy from pageable memory makes the tracking thread wait for its stream)."""
    a = -angle if transpose else angle
    s, c = torch.sin(a), torch.cos(a)
    kx, ky, kz = axis
    x, y, z = d.unbind(-1)
    kd = (kx * x + ky * y + kz * z) * (1.0 - c)
    return torch.stack([x * c + (ky * z - kz * y) * s + kx * kd,
                        y * c + (kz * x - kx * z) * s + ky * kd,
                        z * c + (kx * y - ky * x) * s + kz * kd], -1)


@functools.lru_cache(maxsize=4)
def _rays(H: int, W: int, K: tuple, device: str) -> tuple:
    """Pixel rows (H, W) and rays (H, W, 3) (z = 1) of a frame of that size and intrinsics
    (fx, fy, cx, cy) on ``device``: made once per tracking resolution."""
    fx, fy, cx, cy = K
    v, u = torch.meshgrid(torch.arange(H, device=device, dtype=torch.float32),
                          torch.arange(W, device=device, dtype=torch.float32), indexing="ij")
    return v, torch.stack([(u - cx) / fx, (v - cy) / fy, torch.ones_like(u)], -1)


def unroll(obs: Observation, omega: np.ndarray, readout_s: float) -> Observation:
    """``obs`` (colour (H, W, 3), depth (H, W) metres, K (3, 3) of that size) as the middle row's
    camera would have seen it, the camera turning at ``omega`` (3,) rad/s (camera frame) while
    the rows were read out over ``readout_s`` seconds. Pixels whose source falls outside the
    frame get invalid depth (0) and the nearest border colour. Returns a new Observation; no
    host-to-device copy and no wait for the device."""
    speed = float(np.linalg.norm(omega))
    if readout_s <= 0 or speed * readout_s < 1e-6:
        return obs
    H, W = obs.height, obs.width
    fx, fy, cx, cy = (float(obs.K[0, 0]), float(obs.K[1, 1]), float(obs.K[0, 2]), float(obs.K[1, 2]))
    axis = tuple(float(a) for a in np.asarray(omega, dtype=np.float64) / speed)
    rows, d_mid = _rays(H, W, (fx, fy, cx, cy), str(obs.depth.device))   # rays of the middle row's camera

    def source(r: torch.Tensor):
        d = _rotate(axis, speed * row_times(H, readout_s, r), d_mid, transpose=True)
        n = d / d[..., 2:3]
        return n, n[..., 0] * fx + cx, n[..., 1] * fy + cy

    _, _, vs = source(rows)
    n, us, vs = source(vs)             # tau from the row the sensor recorded the ray at
    grid = torch.stack([(us + 0.5) / W * 2 - 1, (vs + 0.5) / H * 2 - 1], -1)[None]
    color = F.grid_sample(obs.color.permute(2, 0, 1)[None], grid, mode="bilinear", padding_mode="border",
                          align_corners=False)[0].permute(1, 2, 0).contiguous()
    z = F.grid_sample(obs.depth[None, None], grid, mode="nearest", padding_mode="zeros", align_corners=False)[0, 0]
    # The recorded point z * n, turned into the middle row's camera: its z there.
    z_mid = z * _rotate(axis, speed * row_times(H, readout_s, vs), n, transpose=False)[..., 2]
    depth = torch.where(z > 0, z_mid, torch.zeros_like(z_mid))
    return Observation(color, depth.contiguous(), obs.K)
