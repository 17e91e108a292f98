"""Colour-to-depth registration for sensors whose colour and depth images are not aligned.

Some datasets (7-Scenes, raw Kinect v1 recordings) deliver the colour image as the colour camera
saw it and the depth image as the depth camera saw it: two cameras with different intrinsics and
a few centimetres of baseline. Everything downstream assumes one camera, so the loader resamples
the colour image into the depth camera:

    X = z * K_depth^-1 [u, v, 1]            (depth pixel -> 3D point, depth camera frame, metres)
    [u_c, v_c] = project(K_color, X + t)    (the same point seen by the colour camera)
    registered[v, u] = color[v_c, u_c]      (bilinear)

``t`` (metres) is the depth-to-colour translation; a small rotation between the cameras is
absorbed by the colour principal point. Pixels without valid depth use the frame's median depth
(they carry no depth, so nothing downstream pairs their colour with a 3D point anyway).

``estimate_registration`` fits (fx, cx, cy, tx) of the colour camera from the data alone, by
maximising the colour-image gradient found at depth edges (where the two images must both have
an edge once aligned). ``slam_color_registration`` runs it on a sequence and
prints the config lines.
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

import cv2
import numpy as np

from slam.data.errors import CalibrationError
from slam.data.preprocess import K_from_params


class ColorRegistration:
    """Resamples colour images into the depth camera (see module docstring).

    K_depth, K_color: (3, 3) float64 pinhole matrices at full resolution; t: (3,) metres,
    depth-camera point -> colour-camera point offset.
    """

    def __init__(self, K_depth: np.ndarray, K_color: np.ndarray, t: Sequence[float]) -> None:
        self.K_depth = np.asarray(K_depth, dtype=np.float64)
        self.K_color = np.asarray(K_color, dtype=np.float64)
        t = np.asarray(t, dtype=np.float64).reshape(-1)
        if t.shape != (3,) or not np.all(np.isfinite(t)):
            raise CalibrationError(f"data.color_translation must be 3 finite numbers [tx, ty, tz] in metres, got {t.tolist()}")
        self.t = t
        self._rays: Optional[tuple] = None

    @classmethod
    def from_config(cls, K_depth: np.ndarray, color_intrinsics, color_translation) -> Optional["ColorRegistration"]:
        """None when ``color_intrinsics`` is unset (colour already registered to depth)."""
        if color_intrinsics is None:
            if color_translation is not None:
                raise CalibrationError("data.color_translation is set but data.color_intrinsics is not: "
                                       "registration needs the colour camera's [fx, fy, cx, cy]")
            return None
        K_color = K_from_params(color_intrinsics, "data.color_intrinsics")
        return cls(K_depth, K_color, color_translation if color_translation is not None else (0.0, 0.0, 0.0))

    def _unit_rays(self, w: int, h: int) -> tuple:
        """(x/z, y/z) of every depth pixel, and the colour pixel each maps to at infinite depth.
        The read threads call this at once: each returns the tuple it read or made (replaced
        whole), never another size's swapped in meanwhile."""
        rays = self._rays
        if rays is None or rays[0].shape != (h, w):
            fx, fy, cx, cy = self.K_depth[0, 0], self.K_depth[1, 1], self.K_depth[0, 2], self.K_depth[1, 2]
            v, u = np.mgrid[0:h, 0:w].astype(np.float32)
            xr, yr = (u - cx) / fx, (v - cy) / fy
            Kc = self.K_color
            rays = (xr, yr, (Kc[0, 0] * xr + Kc[0, 2]).astype(np.float32),
                    (Kc[1, 1] * yr + Kc[1, 2]).astype(np.float32))
            self._rays = rays
        return rays

    def maps(self, depth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """depth: (H, W) float32 metres, 0 = invalid -> (map_x, map_y) (H, W) float32 colour pixel
        coordinates of every depth pixel."""
        h, w = depth.shape
        xr, yr, far_x, far_y = self._unit_rays(w, h)
        sub = depth[::8, ::8]
        sub = sub[sub > 0]
        fill = np.float32(np.median(sub)) if sub.size else np.float32(1.0)
        z = np.where(depth > 0, depth, fill).astype(np.float32, copy=False)
        tx, ty, tz = (np.float32(x) for x in self.t)
        fx, fy = np.float32(self.K_color[0, 0]), np.float32(self.K_color[1, 1])
        if tz == 0:
            # u_c = fx * (x/z + tx/z) + cx: the far-field map plus a parallax term in 1/z
            # (few whole-image operations: this runs on every frame in the loader).
            inv = np.divide(np.float32(1.0), z, out=z)
            map_x = far_x + (fx * tx) * inv
            map_y = far_y + (fy * ty) * inv if ty != 0 else far_y
            return map_x, map_y
        zc = z + tz
        cx, cy = np.float32(self.K_color[0, 2]), np.float32(self.K_color[1, 2])
        map_x = fx * (xr * z + tx) / zc + cx
        map_y = fy * (yr * z + ty) / zc + cy
        return map_x.astype(np.float32), map_y.astype(np.float32)

    def __call__(self, color: np.ndarray, depth: np.ndarray) -> np.ndarray:
        """color: (H, W, 3) uint8 as the colour camera saw it; depth: (H, W) float32 metres ->
        (H, W, 3) uint8 colour in the depth camera (black where the colour camera saw nothing)."""
        map_x, map_y = self.maps(depth)
        return cv2.remap(color, map_x, map_y, interpolation=cv2.INTER_LINEAR,
                         borderMode=cv2.BORDER_CONSTANT, borderValue=0)


def _edge_samples(color: np.ndarray, depth: np.ndarray, K_depth: np.ndarray):
    """Colour gradient magnitude image (H, W) and the 3D points (depth camera frame, metres) of
    the depth-edge pixels, each at the near side of its edge (where the object's outline is)."""
    gray = cv2.cvtColor(color, cv2.COLOR_RGB2GRAY).astype(np.float32)
    gray = cv2.GaussianBlur(gray, (0, 0), 1.5)
    grad = np.hypot(cv2.Sobel(gray, cv2.CV_32F, 1, 0), cv2.Sobel(gray, cv2.CV_32F, 0, 1))
    d = depth.astype(np.float32)
    near = cv2.erode(np.where(d > 0, d, np.float32(1e3)), np.ones((5, 5), np.uint8))
    edge = np.hypot(cv2.Sobel(d, cv2.CV_32F, 1, 0), cv2.Sobel(d, cv2.CV_32F, 0, 1)) > 0.3
    edge &= cv2.erode((d > 0).astype(np.uint8), np.ones((5, 5), np.uint8)) > 0
    v, u = np.nonzero(edge)
    z = near[v, u]
    pts = np.stack([(u - K_depth[0, 2]) / K_depth[0, 0] * z, (v - K_depth[1, 2]) / K_depth[1, 1] * z, z], 1)
    return grad, pts.astype(np.float32)


def edge_alignment(samples, params: Sequence[float]) -> float:
    """Mean colour gradient at the projected depth edges for (fx, cx, cy, tx) (fy = fx); higher
    = better aligned."""
    f, cx, cy, tx = (float(p) for p in params)
    total = 0.0
    for grad, pts in samples:
        u = (cx + f * (pts[:, 0] + tx) / pts[:, 2]).astype(np.float32)[None]
        v = (cy + f * pts[:, 1] / pts[:, 2]).astype(np.float32)[None]
        total += float(cv2.remap(grad, u, v, cv2.INTER_LINEAR, borderValue=0).mean())
    return total / max(len(samples), 1)


def estimate_registration(frames: Iterable[tuple[np.ndarray, np.ndarray]], K_depth: np.ndarray) -> dict:
    """Fit the colour camera of unregistered RGB-D data.

    frames: (color (H, W, 3) uint8, depth (H, W) float32 metres) pairs as recorded (a few dozen
    spread over the sequence); K_depth: (3, 3) depth intrinsics.
    Returns {"color_intrinsics": [fx, fy, cx, cy], "color_translation": [tx, 0, 0],
    "score": alignment after, "score_identity": alignment with no registration}.
    A coarse grid over focal length and baseline, then Nelder-Mead on (fx, cx, cy, tx).
    """
    from scipy.optimize import minimize  # scipy: heavy import, only when estimating a registration

    K_depth = np.asarray(K_depth, dtype=np.float64)
    samples = [_edge_samples(c, d, K_depth) for c, d in frames]
    samples = [s for s in samples if len(s[1])]
    if not samples:
        raise CalibrationError("no depth edges found in the frames given: cannot estimate the registration")
    f0, cx0, cy0 = K_depth[0, 0], K_depth[0, 2], K_depth[1, 2]
    identity = [f0, cx0, cy0, 0.0]
    grid = [[f0 * s, cx0 + dx, cy0, tx] for s in np.arange(0.80, 1.21, 0.04)
            for dx in (-0.02 * f0, 0.0, 0.02 * f0) for tx in (-0.05, -0.025, 0.0, 0.025, 0.05)]
    start = max(grid, key=lambda p: edge_alignment(samples, p))
    res = minimize(lambda p: -edge_alignment(samples, p), start, method="Nelder-Mead",
                   options=dict(xatol=0.01, fatol=1e-3, maxiter=600))
    f, cx, cy, tx = (float(x) for x in res.x)
    return {"color_intrinsics": [f, f, cx, cy], "color_translation": [tx, 0.0, 0.0],
            "score": -float(res.fun), "score_identity": edge_alignment(samples, identity)}
