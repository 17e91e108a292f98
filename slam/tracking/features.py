"""ORB features and PnP against a keyframe: coarse poses with no motion prior (relocalisation, and
re-initialisation after a gap between frames). OpenCV's ORB, brute-force Hamming matching with a
cross check, and ``solvePnPRansac`` on the keyframe's depth-lifted keypoints."""
from __future__ import annotations

import math
from typing import NamedTuple, Optional

import cv2
import numpy as np

from slam.geometry import invert, orthonormalize
from slam.map.keyframes import Keyframe

# Fixed, not tuning values: they make feature matching work on small images (ORB needs about VGA
# width, so smaller images are upsampled) and RANSAC robust. What to match and when to accept a
# pose are the callers' configs (``relocalise.*``, ``reinit.*``).
ORB_FEATURES = 1500
ORB_WIDTH = 640.0            # px: images narrower than this are upsampled before ORB
PNP_MIN_INLIERS = 12
PNP_ITERATIONS = 300
PNP_CONFIDENCE = 0.999


class OrbFeatures(NamedTuple):
    """keypoints (OpenCV, in the upsampled image), descriptors (M, 32) uint8 or None, scale: the
    upsampling factor (>= 1), width: the original image width (px)."""

    keypoints: tuple
    descriptors: Optional[np.ndarray]
    scale: float
    width: int

    def point(self, i: int) -> np.ndarray:
        """Keypoint ``i`` in original-image pixels (OpenCV centres)."""
        return (np.asarray(self.keypoints[i].pt) + 0.5) / self.scale - 0.5


def orb_features(color: np.ndarray) -> OrbFeatures:
    """ORB keypoints and descriptors of an (H, W, 3) uint8 RGB image."""
    scale = max(1.0, ORB_WIDTH / color.shape[1])
    g = cv2.cvtColor(color, cv2.COLOR_RGB2GRAY)
    if scale > 1:
        g = cv2.resize(g, None, fx=scale, fy=scale, interpolation=cv2.INTER_LINEAR)
    kps, desc = cv2.ORB_create(nfeatures=ORB_FEATURES).detectAndCompute(g, None)
    return OrbFeatures(tuple(kps), desc, scale, int(color.shape[1]))


def pnp_pose(query: OrbFeatures, K: np.ndarray, kf: Keyframe, kf_features: OrbFeatures,
             min_inliers: int = PNP_MIN_INLIERS) -> Optional[tuple[np.ndarray, int]]:
    """(T_wc (4, 4), RANSAC inlier count) of the image whose features are ``query`` (intrinsics
    ``K`` (3, 3)) from matches against keyframe ``kf`` (features ``kf_features``), lifted to 3D
    with its depth and pose; None if too few consistent matches."""
    if (query.descriptors is None or kf_features.descriptors is None or len(query.keypoints) < min_inliers
            or len(kf_features.keypoints) < min_inliers):
        return None
    matches = cv2.BFMatcher(cv2.NORM_HAMMING, crossCheck=True).match(kf_features.descriptors, query.descriptors)
    h, w = kf.depth.shape
    obj, img = [], []
    for m in matches:
        u, v = kf_features.point(m.queryIdx)
        ui, vi = int(round(u)), int(round(v))
        if not (0 <= ui < w and 0 <= vi < h):
            continue
        z = float(kf.depth[vi, ui])
        if not (z > 0 and math.isfinite(z)):
            continue
        p_c = np.array([(u - kf.K[0, 2]) / kf.K[0, 0] * z, (v - kf.K[1, 2]) / kf.K[1, 1] * z, z])
        obj.append(kf.T_wc[:3, :3] @ p_c + kf.T_wc[:3, 3])
        img.append(query.point(m.trainIdx))
    if len(obj) < min_inliers:
        return None
    ok, rvec, tvec, inl = cv2.solvePnPRansac(np.asarray(obj, np.float64), np.asarray(img, np.float64),
                                             np.asarray(K, np.float64), None, iterationsCount=PNP_ITERATIONS,
                                             reprojectionError=max(1.5, 3.0 * query.width / ORB_WIDTH),
                                             confidence=PNP_CONFIDENCE)
    if not ok or inl is None or len(inl) < min_inliers:
        return None
    T_cw = np.eye(4)
    T_cw[:3, :3] = cv2.Rodrigues(rvec)[0]
    T_cw[:3, 3] = tvec.ravel()
    return orthonormalize(invert(T_cw)), int(len(inl))
