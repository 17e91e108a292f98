"""Rolling shutter: a frame whose rows were exposed one after another, seen as if the whole frame
had been taken at the time of its middle row.

A rolling-shutter sensor (Kinect v1's colour and IR cameras, most CMOS cameras) reads its rows
top to bottom over ``readout_s``; row v is taken at ``tau(v) = readout_s * ((v + 0.5) / H - 0.5)``
from the middle row (a negative ``readout_s``: rows read bottom to top, as a camera mounted upside
down whose image is turned 180 degrees). A camera turning at ``omega`` (rad/s, camera frame) had,
at row v, the orientation ``R_mid @ exp(omega * tau(v))``; a turn bends and stretches the image (a
pan slants vertical edges, a tilt stretches or squeezes the rows), which a single pose per frame
can only absorb as a wrong pose.

``unroll`` resamples the colour and depth into the middle row's camera (``rasterizer.unroll``, one
kernel; its docstring has the exact model): per output pixel, its ray turned back by
``exp(omega * tau)`` finds the pixel the sensor recorded it at, colour bilinear, depth nearest, the
depth's z then expressed in the middle row's camera. Only the rotation is undone: its image motion
does not depend on depth, and the camera's translation within one readout (a few millimetres at
walking pace) moves the image far less than a turn at tens of degrees per second does. ``omega``
is the mean rate of the motion model's last two motions between tracked poses (``Tracker.turn_rate``,
``body_rate``): the rate of one motion, fed back through the unrolled frame's pose into the next
rate, oscillated and diverged on TUM fr1/rpy played backwards.

The same resampling turns a depth image taken apart from its colour (Kinect v1 in TUM's fr1: the
depth 6-15 ms after the colour, 0.4-1 degree of turn at 65 deg/s, several pixels at 640x480) to the
colour's time (``data.sync_depth``, the frame's ``depth_timestamp``): its rows' times are offset by
the difference.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

import rasterizer
from slam.geometry import so3_log
from slam.observation import Observation


def body_rate(T_prev2: Optional[np.ndarray], T_prev: Optional[np.ndarray], dt: Optional[float]) -> Optional[np.ndarray]:
    """Angular velocity (3,) rad/s in the camera frame from two consecutive poses T_wc (4, 4)
    ``dt`` seconds apart (None when either pose or a positive dt is missing)."""
    if T_prev2 is None or T_prev is None or dt is None or dt <= 0:
        return None
    R_rel = np.asarray(T_prev2, np.float64)[:3, :3].T @ np.asarray(T_prev, np.float64)[:3, :3]
    return so3_log(R_rel) / dt


def unroll(obs: Observation, omega: np.ndarray, readout_s: float, depth_offset_s: float = 0.0,
           depth_readout_s: Optional[float] = None) -> Observation:
    """``obs`` (colour (H, W, 3), depth (H, W) metres, K (3, 3) of that size) as the colour's middle
    row's camera would have seen it, the camera turning at ``omega`` (3,) rad/s (camera frame)
    while the colour's rows were read out over ``readout_s`` seconds and the depth's over
    ``depth_readout_s`` (None: ``readout_s``), the depth taken ``depth_offset_s`` s after the
    colour. Pixels whose source falls outside the frame get invalid depth (0) and the nearest
    border colour. Returns a new Observation (``obs`` itself when nothing turns); one kernel, no
    host-to-device copy."""
    depth_readout_s = readout_s if depth_readout_s is None else depth_readout_s
    turn = float(np.linalg.norm(omega)) * (abs(readout_s) + abs(depth_readout_s) + abs(depth_offset_s))
    if turn < 1e-6:
        return obs
    K = (float(obs.K[0, 0]), float(obs.K[1, 1]), float(obs.K[0, 2]), float(obs.K[1, 2]))
    color, depth = rasterizer.unroll(obs.color, obs.depth, K, [float(w) for w in omega], readout_s,
                                     depth_readout_s, depth_offset_s)
    return Observation(color, depth, obs.K)
