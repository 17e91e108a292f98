"""Image preprocessing shared by every loader: calibration parsing and checks, undistortion,
downscale.

Conventions: OpenCV pinhole, pixel centres at integer coordinates. Downscaling by an integer
factor ``s`` maps pixel block ``[s*u, s*u + s)`` to pixel ``u``; the intrinsics follow
``slam.camera.scale_K``. Images whose size is not a multiple of ``s`` are cropped at the
right/bottom first (which leaves cx, cy unchanged).
"""
from __future__ import annotations

from typing import Optional, Sequence

import cv2
import numpy as np

from slam.camera import scale_K
from slam.data.errors import CalibrationError
from slam.data.frame import FrameError


def K_from_params(params: Sequence[float], where: str = "intrinsics") -> np.ndarray:
    """[fx, fy, cx, cy] -> (3, 3) float64 K; raises ``CalibrationError`` naming ``where``."""
    try:
        p = np.asarray(params, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise CalibrationError(f"{where}: intrinsics must be 4 numbers [fx, fy, cx, cy], got {params!r}") from None
    if p.shape != (4,) or not np.all(np.isfinite(p)) or p[0] <= 0 or p[1] <= 0:
        raise CalibrationError(f"{where}: intrinsics must be 4 finite numbers [fx, fy, cx, cy] with fx, fy > 0, "
                               f"got {list(params)}")
    return np.array([[p[0], 0.0, p[2]], [0.0, p[1], p[3]], [0.0, 0.0, 1.0]])


def check_K(K: np.ndarray, where: str) -> np.ndarray:
    """Validate a 3x3 pinhole matrix (finite, fx, fy > 0, last row 0 0 1) -> float64 copy."""
    K = np.asarray(K, dtype=np.float64)
    if K.shape != (3, 3):
        raise CalibrationError(f"{where}: intrinsics must be a 3x3 matrix, got shape {K.shape}")
    if not np.all(np.isfinite(K)) or K[0, 0] <= 0 or K[1, 1] <= 0 or not np.allclose(K[2], [0, 0, 1]):
        raise CalibrationError(f"{where}: not a pinhole matrix (need finite fx, fy > 0, last row 0 0 1): {K.tolist()}")
    return K.copy()


def distortion_array(d: Optional[Sequence[float]], where: str) -> Optional[np.ndarray]:
    """OpenCV distortion list (4, 5, 8, 12 or 14 values) -> float64 array, or None if absent/all zero."""
    if d is None:
        return None
    arr = np.asarray(d, dtype=np.float64).reshape(-1)
    if arr.size not in (4, 5, 8, 12, 14) or not np.all(np.isfinite(arr)):
        raise CalibrationError(f"{where}: distortion must be 4, 5, 8, 12 or 14 finite OpenCV coefficients, "
                               f"got {arr.tolist()}")
    return None if not np.any(arr) else arr


def downscale_color(color: np.ndarray, s: int) -> np.ndarray:
    """(H, W, 3) uint8 -> (H//s, W//s, 3) with area averaging (cv2.INTER_AREA)."""
    if s == 1:
        return color
    h, w = color.shape[0] // s, color.shape[1] // s
    color = color[: h * s, : w * s]
    return cv2.resize(color, (w, h), interpolation=cv2.INTER_AREA)


def downscale_depth(depth: np.ndarray, s: int) -> np.ndarray:
    """(H, W) float32 metres -> (H//s, W//s): median of the *valid* pixels of each s x s block.

    Invalid (0) pixels never enter the median; a block with no valid pixel stays 0. No value is
    ever averaged across a depth edge with an invalid pixel.
    """
    if s == 1:
        return depth
    h, w = depth.shape[0] // s, depth.shape[1] // s
    blocks = depth[: h * s, : w * s].reshape(h, s, w, s).transpose(0, 2, 1, 3).reshape(h, w, s * s)
    blocks = np.where(blocks > 0, blocks, np.float32(np.nan))
    # sort puts NaN last; pick the median of the n valid values per block without nanmedian's cost
    blocks = np.sort(blocks, axis=2)
    n = np.sum(np.isfinite(blocks), axis=2)
    lo = np.take_along_axis(blocks, np.maximum((n - 1) // 2, 0)[..., None], axis=2)[..., 0]
    hi = np.take_along_axis(blocks, np.maximum(n // 2, 0)[..., None], axis=2)[..., 0]
    out = np.where(n > 0, 0.5 * (lo + hi), np.float32(0)).astype(np.float32)
    return out


class Undistorter:
    """Undistortion maps computed once per image size (cv2.initUndistortRectifyMap, same K out).

    Colour is resampled bilinearly, depth with nearest neighbour (never blends depths across
    edges). Pixels that map outside the source image become black / invalid depth.
    """

    def __init__(self, K: np.ndarray, distortion: np.ndarray) -> None:
        self.K = np.asarray(K, dtype=np.float64)
        self.distortion = np.asarray(distortion, dtype=np.float64)
        self._cached: Optional[tuple] = None   # ((w, h), maps): replaced whole, read once a call

    def _maps(self, w: int, h: int) -> tuple:
        """The maps for a (w, h) image. The read threads call this at once: each uses the pair it
        read or made, never another size's maps swapped in meanwhile."""
        cached = self._cached
        if cached is None or cached[0] != (w, h):
            cached = ((w, h), cv2.initUndistortRectifyMap(self.K, self.distortion, None, self.K, (w, h), cv2.CV_32FC1))
            self._cached = cached
        return cached[1]

    def color(self, img: np.ndarray) -> np.ndarray:
        m1, m2 = self._maps(img.shape[1], img.shape[0])
        return cv2.remap(img, m1, m2, interpolation=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)

    def depth(self, depth: np.ndarray) -> np.ndarray:
        m1, m2 = self._maps(depth.shape[1], depth.shape[0])
        return cv2.remap(depth, m1, m2, interpolation=cv2.INTER_NEAREST, borderMode=cv2.BORDER_CONSTANT, borderValue=0)


class Preprocessor:
    """Full-resolution images + calibration -> images and K of the delivered frames.

    Steps: register colour into the depth camera (if ``registration`` is given, see
    ``slam.data.registration``), undistort (if distortion is given) at full resolution, then
    downscale by ``s``. ``K_out`` is the intrinsics of the delivered images; delivered images
    carry no distortion.
    """

    def __init__(self, K: np.ndarray, distortion: Optional[np.ndarray], downscale: int = 1,
                 registration=None) -> None:
        if int(downscale) != downscale or downscale < 1:
            raise CalibrationError(f"downscale must be an integer >= 1, got {downscale}")
        if registration is not None and distortion is not None:
            raise CalibrationError("colour registration (data.color_intrinsics) assumes undistorted images; "
                                   "it cannot be combined with a distortion model")
        self.registration = registration
        self.K = np.asarray(K, dtype=np.float64)
        self.s = int(downscale)
        self.undistorter = Undistorter(self.K, distortion) if distortion is not None else None
        self.K_out = scale_K(self.K, self.s)

    def __call__(self, color: np.ndarray, depth: np.ndarray) -> tuple:
        """(H, W, 3) uint8 colour, (H, W) float32 depth -> (colour, depth, K) of the delivered frame.

        Raises ``FrameError`` when the downscale factor leaves no pixel (H or W < s)."""
        if depth.shape[0] < self.s or depth.shape[1] < self.s:
            raise FrameError(f"data.downscale={self.s} is larger than the {depth.shape[1]}x{depth.shape[0]} "
                             "images: no pixel would be left")
        if self.registration is not None:
            color = self.registration(color, depth)
        if self.undistorter is not None:
            color = self.undistorter.color(color)
            depth = self.undistorter.depth(depth)
        return downscale_color(color, self.s), downscale_depth(depth, self.s), self.K_out
