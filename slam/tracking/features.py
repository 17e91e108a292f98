"""ORB features and PnP against a keyframe: coarse poses with no motion prior (relocalisation, and
re-initialisation after a gap between frames). OpenCV's ORB, brute-force Hamming matching with a
cross check, and ``solvePnPRansac`` on the keyframe's depth-lifted keypoints."""
from __future__ import annotations

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
    """points: (M, 2) float64 keypoint positions in original-image pixels (OpenCV centres);
    descriptors: (M, 32) uint8 or None; width: the original image width (px)."""

    points: np.ndarray
    descriptors: Optional[np.ndarray]
    width: int


def orb_features(color: np.ndarray) -> OrbFeatures:
    """ORB keypoints and descriptors of an (H, W, 3) uint8 RGB image."""
    scale = max(1.0, ORB_WIDTH / color.shape[1])
    g = cv2.cvtColor(color, cv2.COLOR_RGB2GRAY)
    if scale > 1:
        g = cv2.resize(g, None, fx=scale, fy=scale, interpolation=cv2.INTER_LINEAR)
    kps, desc = cv2.ORB_create(nfeatures=ORB_FEATURES).detectAndCompute(g, None)
    pts = np.array([k.pt for k in kps], np.float64).reshape(-1, 2)
    return OrbFeatures((pts + 0.5) / scale - 0.5, desc, int(color.shape[1]))


def pnp_pose(query: OrbFeatures, K: np.ndarray, kf: Keyframe, kf_features: OrbFeatures,
             min_inliers: int = PNP_MIN_INLIERS) -> Optional[tuple[np.ndarray, int]]:
    """(T_wc (4, 4), RANSAC inlier count) of the image whose features are ``query`` (intrinsics
    ``K`` (3, 3)) from matches against keyframe ``kf`` (features ``kf_features``), lifted to 3D
    with its depth and pose; None if too few consistent matches."""
    if (query.descriptors is None or kf_features.descriptors is None or len(query.points) < min_inliers
            or len(kf_features.points) < min_inliers):
        return None
    matches = cv2.BFMatcher(cv2.NORM_HAMMING, crossCheck=True).match(kf_features.descriptors, query.descriptors)
    pairs = np.array([(m.queryIdx, m.trainIdx) for m in matches], np.int64).reshape(-1, 2)
    uv = kf_features.points[pairs[:, 0]]
    h, w = kf.depth.shape
    ui, vi = np.round(uv[:, 0]).astype(np.int64), np.round(uv[:, 1]).astype(np.int64)
    inside = (ui >= 0) & (ui < w) & (vi >= 0) & (vi < h)
    z = np.zeros(len(uv))
    z[inside] = np.asarray(kf.depth, np.float64)[vi[inside], ui[inside]]
    lifted = inside & (z > 0) & np.isfinite(z)
    if int(lifted.sum()) < min_inliers:
        return None
    u, v, z = uv[lifted, 0], uv[lifted, 1], z[lifted]
    p_c = np.stack([(u - kf.K[0, 2]) / kf.K[0, 0] * z, (v - kf.K[1, 2]) / kf.K[1, 1] * z, z], axis=1)
    T_wc = np.asarray(kf.T_wc, np.float64)
    obj = p_c @ T_wc[:3, :3].T + T_wc[:3, 3]
    img = query.points[pairs[lifted, 1]]
    ok, rvec, tvec, inl = cv2.solvePnPRansac(obj, img,
                                             np.asarray(K, np.float64), None, iterationsCount=PNP_ITERATIONS,
                                             reprojectionError=max(1.5, 3.0 * query.width / ORB_WIDTH),
                                             confidence=PNP_CONFIDENCE)
    if not ok or inl is None or len(inl) < min_inliers:
        return None
    T_cw = np.eye(4)
    T_cw[:3, :3] = cv2.Rodrigues(rvec)[0]
    T_cw[:3, 3] = tvec.ravel()
    return orthonormalize(invert(T_cw)), int(len(inl))
