"""SLAM outputs -> plain data for ROS messages (middleware-free, numpy only).

Frames (REP-105): the SLAM world is the first camera's optical frame (x right, y down, z forward).
With ``rep103_map`` the published ``map`` is that frame rotated to REP-103 body axes (x forward,
y left, z up), so ``T_map_cam = R_MAP_OPTICAL @ T_wc``. Transforms published per frame:

- ``map_camera``:      map -> camera                      (T_map_cam)
- ``map_odom_camera``: map -> odom (the map's correction of the tracker's drift: loop closures,
                       ``SlamSystem.odom_correction``), odom -> camera (the pose as tracked
                       without those corrections: it never jumps); SLAM is the odometry
- ``external_odom``:   map -> odom = T_map_cam @ inv(T_odom_cam), T_odom_cam from another source
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from slam.data.trajectory_io import quat_to_rot, rot_to_quat

# optical (x right, y down, z fwd) -> REP-103 body (x fwd, y left, z up)
R_MAP_OPTICAL = np.array([[0.0, 0.0, 1.0, 0.0],
                          [-1.0, 0.0, 0.0, 0.0],
                          [0.0, -1.0, 0.0, 0.0],
                          [0.0, 0.0, 0.0, 1.0]])

FLOAT32 = 7   # sensor_msgs/PointField datatype


@dataclass(frozen=True)
class PoseData:
    """A rigid transform parent <- child: translation (3,) metres, quaternion (x, y, z, w)."""

    translation: np.ndarray
    quaternion: np.ndarray

    @staticmethod
    def from_matrix(T: np.ndarray) -> "PoseData":
        T = np.asarray(T, dtype=np.float64)
        return PoseData(T[:3, 3].copy(), rot_to_quat(T[:3, :3]))


@dataclass(frozen=True)
class TransformData:
    stamp_ns: int
    parent: str
    child: str
    pose: PoseData


@dataclass(frozen=True)
class OdometryData:
    """nav_msgs/Odometry content: pose of ``child`` in ``frame``; twist and covariances zero
    (all-zero covariance = unknown, by the message's convention)."""

    stamp_ns: int
    frame: str
    child: str
    pose: PoseData


@dataclass(frozen=True)
class StatusData:
    """Tracking status of the pose published at ``stamp_ns``: 'ok', 'recovered' (ok after a
    recovery or relocalisation) or 'lost' (the pose is the best estimate, not to be trusted), and
    why it was lost. Published as std_msgs/String ``"<status> <stamp_ns>[ <reason>]"``."""

    stamp_ns: int
    status: str
    reason: str = ""

    @property
    def text(self) -> str:
        return f"{self.status} {self.stamp_ns}" + (f" {self.reason}" if self.reason else "")


@dataclass(frozen=True)
class CloudData:
    """sensor_msgs/PointCloud2 content: unorganised (height 1), fields x y z rgb (float32),
    ``data`` little-endian, point_step 16; rgb is 0x00RRGGBB packed in a float32 (PCL/RViz)."""

    stamp_ns: int
    frame: str
    width: int
    data: bytes
    fields: tuple = (("x", 0, FLOAT32, 1), ("y", 4, FLOAT32, 1), ("z", 8, FLOAT32, 1), ("rgb", 12, FLOAT32, 1))
    point_step: int = 16


@dataclass(frozen=True)
class ImageData:
    """sensor_msgs/Image content: rgb8, (H, W, 3) uint8 in ``pixels``."""

    stamp_ns: int
    frame: str
    pixels: np.ndarray

    @property
    def encoding(self) -> str:
        return "rgb8"


def map_from_world(rep103: bool) -> np.ndarray:
    """(4, 4) T_map_world."""
    return R_MAP_OPTICAL.copy() if rep103 else np.eye(4)


def camera_in_map(T_wc: np.ndarray, rep103: bool) -> np.ndarray:
    """(4, 4) T_map_cam from the SLAM's camera-to-world pose."""
    return map_from_world(rep103) @ np.asarray(T_wc, dtype=np.float64)


def odom_in_map(T_map_odom_world: np.ndarray, rep103: bool) -> np.ndarray:
    """(4, 4) T_map_odom in the published frames from the SLAM's correction (world frame,
    ``SlamSystem.odom_correction``): the odom frame has the map's axes at its origin."""
    M = map_from_world(rep103)
    return M @ np.asarray(T_map_odom_world, dtype=np.float64) @ np.linalg.inv(M)


def odometry(stamp_ns: int, T_map_cam: np.ndarray, mode: str, map_frame: str, odom_frame: str,
             camera_frame: str, T_map_odom: Optional[np.ndarray] = None) -> OdometryData:
    """The camera pose as Odometry: in ``odom`` (inv(T_map_odom) @ T_map_cam; T_map_odom
    default identity) when SLAM is the odometry, else in ``map``."""
    if mode == "map_odom_camera":
        T = T_map_cam if T_map_odom is None else np.linalg.inv(T_map_odom) @ T_map_cam
        return OdometryData(stamp_ns, odom_frame, camera_frame, PoseData.from_matrix(T))
    return OdometryData(stamp_ns, map_frame, camera_frame, PoseData.from_matrix(T_map_cam))


def transforms(stamp_ns: int, T_map_cam: np.ndarray, mode: str, map_frame: str, odom_frame: str,
               camera_frame: str, T_odom_cam: Optional[np.ndarray] = None,
               T_map_odom: Optional[np.ndarray] = None) -> list[TransformData]:
    """The TF tree for one frame (see module docstring). ``external_odom`` needs ``T_odom_cam``
    (the odometry source's camera pose at the same stamp); without it nothing is published.
    ``map_odom_camera`` takes the map's correction ``T_map_odom`` (published frames; default
    identity)."""
    if mode == "map_camera":
        return [TransformData(stamp_ns, map_frame, camera_frame, PoseData.from_matrix(T_map_cam))]
    if mode == "map_odom_camera":
        T_mo = np.eye(4) if T_map_odom is None else np.asarray(T_map_odom, dtype=np.float64)
        return [TransformData(stamp_ns, map_frame, odom_frame, PoseData.from_matrix(T_mo)),
                TransformData(stamp_ns, odom_frame, camera_frame, PoseData.from_matrix(np.linalg.inv(T_mo) @ T_map_cam))]
    if mode == "external_odom":
        if T_odom_cam is None:
            return []
        T_map_odom = T_map_cam @ np.linalg.inv(np.asarray(T_odom_cam, dtype=np.float64))
        return [TransformData(stamp_ns, map_frame, odom_frame, PoseData.from_matrix(T_map_odom))]
    raise ValueError(f"unknown tf mode '{mode}'")


@dataclass(frozen=True)
class GridData:
    """nav_msgs/OccupancyGrid content: ``cells`` (H, W) int8 row-major from the origin cell
    (-1 unknown, else occupancy in percent), ``resolution`` m per cell, ``origin`` the pose of
    cell (0, 0)'s outer corner in ``frame`` (the grid lies in that pose's x-y plane)."""

    stamp_ns: int
    frame: str
    resolution: float
    origin: PoseData
    cells: np.ndarray

    @property
    def width(self) -> int:
        return int(self.cells.shape[1])

    @property
    def height(self) -> int:
        return int(self.cells.shape[0])


def grid(stamp_ns: int, frame: str, snap, rep103: bool, occupied_thresh: float, free_thresh: float) -> GridData:
    """A published ``slam.grid.occupancy.GridSnapshot`` -> OccupancyGrid data in the map frame,
    trinary as map_server publishes it (100 occupied, 0 free, -1 unknown: Nav2's static layer
    reads every value below 100 as free); the origin is the grid's corner cell in the floor frame,
    carried into the map (``map_from_world(rep103) @ T_world_floor``)."""
    T_corner = np.eye(4)
    T_corner[:2, 3] = snap.origin_xy
    T = map_from_world(rep103) @ snap.floor.T_world_floor() @ T_corner
    return GridData(stamp_ns, frame, float(snap.resolution), PoseData.from_matrix(T),
                    snap.trinary(occupied_thresh, free_thresh))


def transform_matrix(tf_msg) -> np.ndarray:
    """A geometry_msgs Transform (ROS 1 or ROS 2: .translation .rotation) -> (4, 4) float64."""
    tr, q = tf_msg.translation, tf_msg.rotation
    T = np.eye(4)
    T[:3, :3] = quat_to_rot([q.x, q.y, q.z, q.w])
    T[:3, 3] = [tr.x, tr.y, tr.z]
    return T


def pack_rgb(colors01: np.ndarray) -> np.ndarray:
    """(N, 3) colours in [0, 1] -> (N,) float32 whose bits are 0x00RRGGBB."""
    c = np.clip(np.rint(np.asarray(colors01, dtype=np.float64) * 255.0), 0, 255).astype(np.uint32)
    return ((c[:, 0] << 16) | (c[:, 1] << 8) | c[:, 2]).view(np.float32)


def cloud(stamp_ns: int, frame: str, means_world: np.ndarray, colors01: np.ndarray, rep103: bool,
          max_points: int) -> CloudData:
    """Sphere centres (N, 3) world metres + colours (N, 3) in [0, 1] -> a cloud in the map frame,
    evenly subsampled to at most ``max_points``."""
    means = np.asarray(means_world, dtype=np.float64).reshape(-1, 3)
    cols = np.asarray(colors01).reshape(-1, 3)
    if means.shape[0] > max_points:
        keep = np.linspace(0, means.shape[0] - 1, max_points).round().astype(np.int64)
        means, cols = means[keep], cols[keep]
    T = map_from_world(rep103)
    xyz = means @ T[:3, :3].T + T[:3, 3]
    rec = np.empty(xyz.shape[0], dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("rgb", "<f4")])
    rec["x"], rec["y"], rec["z"] = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    rec["rgb"] = pack_rgb(cols)
    return CloudData(stamp_ns, frame, int(xyz.shape[0]), rec.tobytes())


def decode_cloud(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of ``cloud`` for tests and tools: -> (N, 3) float32 xyz, (N, 3) uint8 RGB."""
    rec = np.frombuffer(bytes(data), dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("rgb", "<u4")])
    xyz = np.stack([rec["x"], rec["y"], rec["z"]], axis=1)
    rgb = np.stack([(rec["rgb"] >> 16) & 255, (rec["rgb"] >> 8) & 255, rec["rgb"] & 255], axis=1).astype(np.uint8)
    return xyz, rgb


class Throttle:
    """``ready(now_s)`` is True at most once per ``period_s`` (never when period <= 0)."""

    def __init__(self, period_s: float) -> None:
        self.period_s = float(period_s)
        self._last = -np.inf

    def ready(self, now_s: float) -> bool:
        if self.period_s <= 0 or now_s - self._last < self.period_s:
            return False
        self._last = now_s
        return True
