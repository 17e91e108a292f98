"""The floor the grid lies on: which way is up in the SLAM world, and at what height the floor is.

The SLAM world has no gravity (it is the first camera's frame, or a ground truth's): "up" is
either given (a camera on a robot: its height above the floor and its tilt, ``floor_from_camera``)
or estimated from the keyframes' depth (``estimate_floor``):

1. A first guess: the mean of the keyframe cameras' "up" vectors (-y of the OpenCV camera): a
   hand-held or robot camera is held roughly upright, seldom rolled, pitched either way.
2. Up is the densest direction of the surface normals within 45 degrees of that guess: of up to
   ``CANDIDATES`` normals there, the one with the most normals within ``DENSITY_DEG`` of it, then
   the mean of those (twice). Floors, table tops, counters and seats share that normal, so all
   horizontal surfaces vote for it; walls (90 degrees away) are outside the cone unless the
   cameras were pitched 45 degrees on average. (A mean shift from the guess with shrinking
   windows drifted on TUM fr1/rpy's rolled and pitched views: 20 degrees off.)
3. Its sign: most keyframe cameras lie above the horizontal surfaces (the guess gives it; a guess
   that would put most cameras below is flipped).
4. The floor's height: the lowest height along up at which the horizontal surface points (normal
   within 10 degrees of up) pile up - at least ``MIN_SHARE`` of the largest pile and
   ``MIN_POINTS`` points, and below the cameras - so a kitchen counter or a table is not taken
   for the floor when some floor is seen. When none is seen below the cameras, the lowest pile is
   used (logged by the builder), and the grid's obstacles are measured from that surface.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

CONE_DEG = 45.0                        # normals this close to the first guess may be up
CANDIDATES = 400                       # candidate directions tried (an even subset of those)
DENSITY_DEG = 5.0                      # a candidate's support: normals within this angle
MAX_NORMALS = 20000                    # normals used (an even subset)
SUPPORT_BLOCK = 25                     # candidates scored per block (25 x 20000 float32: 2 MB)
HORIZONTAL_DEG = 10.0                  # a point's normal this close to up: a horizontal surface
BIN_M = 0.02                           # height histogram bin
MIN_SHARE = 0.05                       # a floor pile: at least this share of the largest pile
MIN_POINTS = 50                        # ... and this many points
MIN_BELOW_CAMERAS_M = 0.3              # the floor is at least this far below the median camera


@dataclass(frozen=True)
class FloorFrame:
    """The grid's frame in the SLAM world: axes x, y (in the floor plane) and up, each (3,) unit,
    world frame; height: m, the floor's offset along up (a world point p is at height
    ``up . p - height`` above the floor). Grid coordinates of p: (x . p, y . p) metres."""

    x: np.ndarray
    y: np.ndarray
    up: np.ndarray
    height: float

    @staticmethod
    def from_up(up: np.ndarray, height: float) -> "FloorFrame":
        """x: the world x axis projected on the floor (world y when x is nearly vertical)."""
        up = np.asarray(up, dtype=np.float64)
        up = up / np.linalg.norm(up)
        ref = np.array([1.0, 0.0, 0.0]) if abs(up[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
        x = ref - up * (ref @ up)
        x /= np.linalg.norm(x)
        return FloorFrame(x, np.cross(up, x), up, float(height))

    @property
    def R_fw(self) -> np.ndarray:
        """(3, 3) rows x, y, up: world -> floor-frame rotation."""
        return np.stack([self.x, self.y, self.up])

    def to_floor(self, points_w: np.ndarray) -> np.ndarray:
        """points_w: (N, 3) metres, world -> (N, 3): grid x, grid y, height above the floor (m)."""
        q = np.asarray(points_w, dtype=np.float64) @ self.R_fw.T
        q[:, 2] -= self.height
        return q

    def T_world_floor(self) -> np.ndarray:
        """(4, 4) float64: the floor frame (origin on the floor below the world origin, z = up) in
        the world."""
        T = np.eye(4)
        T[:3, :3] = self.R_fw.T
        T[:3, 3] = self.up * self.height
        return T

    def moved(self, other: "FloorFrame") -> tuple[float, float]:
        """(degrees between the two ups, metres between the floors along this up)."""
        ang = math.degrees(math.acos(float(np.clip(self.up @ other.up, -1.0, 1.0))))
        return ang, abs(self.height - other.height)


def camera_up(tilt_deg: float) -> np.ndarray:
    """(3,) up in the frame of an OpenCV camera (x right, y down, z forward) whose optical axis is
    ``tilt_deg`` below the horizon, no roll."""
    t = math.radians(tilt_deg)
    return np.array([0.0, -math.cos(t), -math.sin(t)])


def floor_from_camera(T_wc: np.ndarray, camera_height: float, tilt_deg: float) -> FloorFrame:
    """The floor of a camera on a robot: T_wc (4, 4) a keyframe's pose (the first one: it holds
    the gauge); camera_height: m above the floor; tilt_deg: optical axis below the horizon."""
    T_wc = np.asarray(T_wc, dtype=np.float64)
    up = T_wc[:3, :3] @ camera_up(tilt_deg)
    return FloorFrame.from_up(up, float(up @ T_wc[:3, 3]) - camera_height)


def _dominant_up(normals: np.ndarray, guess: np.ndarray) -> Optional[np.ndarray]:
    """The densest normal direction within ``CONE_DEG`` of ``guess``. normals: (N, 3) unit, world."""
    n = normals * np.where(normals @ guess < 0, -1.0, 1.0)[:, None]     # into guess's hemisphere
    n = n[n @ guess > math.cos(math.radians(CONE_DEG))]
    if len(n) < MIN_POINTS:
        return None
    n = n[:: max(1, len(n) // MAX_NORMALS)]
    cand = n[:: max(1, len(n) // CANDIDATES)]
    near = math.cos(math.radians(DENSITY_DEG))
    # Each candidate's support, a block of candidates at a time: all 400 at once held a (400,
    # 20000) product (64 MB) and raised a run's peak memory by that much.
    n32 = n.astype(np.float32)
    support = np.concatenate([(c @ n32.T > near).sum(axis=1)
                              for c in np.array_split(cand.astype(np.float32), max(1, len(cand) // SUPPORT_BLOCK))])
    up = cand[int(np.argmax(support))]
    for _ in range(2):
        sel = n @ up > near
        m = n[sel].mean(axis=0)
        up = m / np.linalg.norm(m)
    return up


def estimate_floor(points_w: np.ndarray, normals_w: np.ndarray, centres_w: np.ndarray,
                   downs_w: np.ndarray) -> Optional[FloorFrame]:
    """The floor of a scene without gravity (see the module docstring).

    points_w, normals_w: (N, 3) world, metres / unit (rows of zeros: no normal); centres_w: (K, 3)
    keyframe camera centres, metres; downs_w: (K, 3) the cameras' +y axes in the world.
    Returns None when too few horizontal surface points were seen."""
    has_n = np.linalg.norm(normals_w, axis=1) > 0.5
    points, normals = np.asarray(points_w, np.float64)[has_n], np.asarray(normals_w, np.float64)[has_n]
    guess = -np.asarray(downs_w, np.float64).mean(axis=0)
    if len(points) < MIN_POINTS or np.linalg.norm(guess) < 1e-6:
        return None
    up = _dominant_up(normals, guess / np.linalg.norm(guess))
    if up is None:
        return None
    horizontal = np.abs(normals @ up) > math.cos(math.radians(HORIZONTAL_DEG))
    h = points[horizontal] @ up
    cams = np.asarray(centres_w, np.float64) @ up
    if np.mean(cams > np.median(h)) < 0.5:        # most cameras below the surfaces: up is down
        up, h, cams = -up, -h, -cams
    if len(h) < MIN_POINTS:
        return None
    lo = h.min()
    counts = np.bincount(((h - lo) / BIN_M).astype(np.int64))
    smooth = np.convolve(counts, np.ones(3), mode="same")
    piles = np.nonzero(smooth >= max(MIN_SHARE * smooth.max(), MIN_POINTS))[0]
    if len(piles) == 0:                           # horizontal points, but nowhere piled up
        return None
    below = piles[lo + (piles + 0.5) * BIN_M < np.median(cams) - MIN_BELOW_CAMERAS_M]
    b = int(below[0] if len(below) else piles[0])
    centre = lo + (b + 0.5) * BIN_M
    near = np.abs(h - centre) < 1.5 * BIN_M
    return FloorFrame.from_up(up, float(np.median(h[near])))
