"""TUM RGB-D loader (rgb.txt / depth.txt / groundtruth.txt + rgb/ depth/ images).

Layout: ``<seq>/rgb.txt`` and ``<seq>/depth.txt`` list ``timestamp filename`` (``#`` comments),
``<seq>/groundtruth.txt`` lists ``timestamp tx ty tz qx qy qz qw`` (T_wc). Depth PNGs are uint16
with 5000 units per metre (``data.depth_scale`` or ``camera.yaml: depth_scale`` overrides).

Association: each colour image is paired with the depth image of nearest timestamp within
``max_time_diff`` (one-to-one; the closer colour wins a contested depth image). Ground truth is
interpolated (linear translation, slerp rotation) between the bracketing samples when the nearest
sample lies within ``max_time_diff``; otherwise the frame has ``gt_pose = None`` (TUM ground truth
often starts after the images do). The frame's ``timestamp`` is the colour's, ``depth_timestamp``
its depth image's (Kinect v1 in fr1: 6-15 ms later, what ``data.sync_depth`` turns back).

Intrinsics, first that applies: ``data.intrinsics`` (+ ``data.distortion``, default none) >
``<seq>/camera.yaml`` (fx, fy, cx, cy, optional distortion [k1 k2 p1 p2 k3], depth_scale, width,
height) > the published TUM calibration keyed by the sequence name (freiburg1/2/3, fr1/2/3) >
``CalibrationError``. ``data.distortion`` overrides the distortion of any source. Distorted
images are undistorted once per frame with maps computed once (colour bilinear, depth nearest);
delivered frames carry ``distortion=None``.

Bad input:
- missing folder, rgb.txt or depth.txt -> ``DataNotFoundError``; groundtruth.txt is optional.
- malformed line, or timestamps not increasing, in any index file -> ``FrameError`` (file:line).
- colour frames with no depth within the tolerance -> skipped at open, one warning, counted in
  ``stats``; no pair at all -> ``FrameError``.
- missing/unreadable image, all-invalid depth -> per-frame skip (see ``slam.data.sequence``).
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np
import yaml

from slam.config import DataConfig
from slam.config.loading import yaml_error_text
from slam.data.errors import CalibrationError, DataNotFoundError
from slam.data.frame import FrameError
from slam.data.matrix_io import data_lines
from slam.data.preprocess import K_from_params, distortion_array
from slam.data.sequence import Entry, SequenceSource
from slam.data.trajectory_io import parse_tum_lines, pose_from_tum, quat_to_rot

log = logging.getLogger("slam.data")

TUM_DEPTH_UNITS = 5000.0


@dataclass(frozen=True)
class TumCamera:
    """Published TUM RGB-D colour camera calibration (640x480)."""

    fx: float
    fy: float
    cx: float
    cy: float
    distortion: Tuple[float, ...]  # k1 k2 p1 p2 k3; all zero = pre-undistorted


# https://cvg.cit.tum.de/data/datasets/rgbd-dataset/file_formats#intrinsic_camera_calibration_of_the_kinect
TUM_CAMERAS = {
    "freiburg1": TumCamera(517.3, 516.5, 318.6, 255.3, (0.2624, -0.9531, -0.0054, 0.0026, 1.1633)),
    "freiburg2": TumCamera(520.9, 521.0, 325.1, 249.7, (0.2312, -0.7849, -0.0033, -0.0001, 0.9172)),
    "freiburg3": TumCamera(535.4, 539.2, 320.1, 247.6, (0.0, 0.0, 0.0, 0.0, 0.0)),
}

_SEQ_RE = re.compile(r"(?:freiburg|fr)([123])(?![0-9])", re.IGNORECASE)


def tum_camera_for(sequence_name: str) -> Optional[TumCamera]:
    """The published calibration for a sequence name such as ``rgbd_dataset_freiburg1_desk``."""
    m = _SEQ_RE.search(sequence_name)
    return TUM_CAMERAS[f"freiburg{m.group(1)}"] if m else None


def read_file_list(path: Path) -> Tuple[np.ndarray, List[str]]:
    """Parse rgb.txt / depth.txt -> (timestamps (N,) s, relative file names).

    Raises ``DataNotFoundError`` if missing, ``FrameError`` (file:line) on a malformed line or
    a timestamp that does not increase.
    """
    if not path.is_file():
        raise DataNotFoundError(f"{path}: index file not found (a TUM sequence needs rgb.txt and depth.txt)")
    stamps: List[float] = []
    names: List[str] = []
    for lineno, text in data_lines(path):
        parts = text.split()
        if len(parts) != 2:
            raise FrameError(f"{path}:{lineno}: expected 'timestamp filename', got {text[:80]!r}")
        try:
            t = float(parts[0])
        except ValueError:
            raise FrameError(f"{path}:{lineno}: timestamp {parts[0]!r} is not a number") from None
        if not np.isfinite(t):
            raise FrameError(f"{path}:{lineno}: timestamp {parts[0]!r} is not finite")
        if stamps and t <= stamps[-1]:
            raise FrameError(
                f"{path}:{lineno}: timestamp {t:.6f} is not after the previous one ({stamps[-1]:.6f}); "
                "timestamps must increase")
        stamps.append(t)
        names.append(parts[1])
    if not stamps:
        raise FrameError(f"{path}: lists no images")
    return np.asarray(stamps, dtype=np.float64), names


def associate(a: np.ndarray, b: np.ndarray, max_diff: float) -> Tuple[np.ndarray, np.ndarray]:
    """One-to-one nearest-timestamp association of sorted ``a`` (N,) to sorted ``b`` (M,).

    Returns ``match`` (N,) int: index into ``b`` or -1, and ``diff`` (N,) |a - b[match]| (inf if
    unmatched). A ``b`` wanted by several ``a`` goes to the closest one.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if len(b) == 0:
        return np.full(len(a), -1), np.full(len(a), np.inf)
    j = np.clip(np.searchsorted(b, a), 1, len(b) - 1) if len(b) > 1 else np.zeros(len(a), dtype=int)
    if len(b) > 1:
        left_closer = np.abs(a - b[j - 1]) <= np.abs(b[j] - a)
        j = np.where(left_closer, j - 1, j)
    diff = np.abs(a - b[j])
    match = np.where(diff <= max_diff, j, -1)
    # resolve contested b: keep the closest a
    order = np.argsort(diff, kind="stable")
    taken = set()
    for i in order:
        if match[i] < 0:
            continue
        if match[i] in taken:
            match[i] = -1
        else:
            taken.add(int(match[i]))
    diff = np.where(match >= 0, diff, np.inf)
    return match, diff


def _slerp(q0: np.ndarray, q1: np.ndarray, w: float) -> np.ndarray:
    q0 = q0 / np.linalg.norm(q0)
    q1 = q1 / np.linalg.norm(q1)
    d = float(np.dot(q0, q1))
    if d < 0:
        q1, d = -q1, -d
    if d > 0.9995:
        q = q0 + w * (q1 - q0)
        return q / np.linalg.norm(q)
    theta = np.arccos(d)
    return (np.sin((1 - w) * theta) * q0 + np.sin(w * theta) * q1) / np.sin(theta)


def interpolate_pose(gt_t: np.ndarray, gt_rows: np.ndarray, t: float, max_diff: float) -> Optional[np.ndarray]:
    """Pose (4, 4) T_wc at time ``t`` from TUM rows (M, 7), or None if no sample within ``max_diff``.

    Linear in translation and slerp in rotation between the bracketing samples; the nearest
    sample alone at the ends.
    """
    if len(gt_t) == 0:
        return None
    i = int(np.searchsorted(gt_t, t))
    cands = [k for k in (i - 1, i) if 0 <= k < len(gt_t)]
    nearest = min(cands, key=lambda k: abs(gt_t[k] - t))
    if abs(gt_t[nearest] - t) > max_diff:
        return None
    if 0 < i < len(gt_t) and gt_t[i] > gt_t[i - 1]:
        w = (t - gt_t[i - 1]) / (gt_t[i] - gt_t[i - 1])
        trans = (1 - w) * gt_rows[i - 1, :3] + w * gt_rows[i, :3]
        q = _slerp(gt_rows[i - 1, 3:], gt_rows[i, 3:], w)
    else:
        trans, q = gt_rows[nearest, :3], gt_rows[nearest, 3:]
    T = np.eye(4)
    T[:3, :3] = quat_to_rot(q)
    T[:3, 3] = trans
    return T


@dataclass
class Calibration:
    """Resolved camera model of a sequence (full resolution)."""

    K: np.ndarray                          # (3, 3)
    distortion: Optional[np.ndarray]       # OpenCV coefficients or None
    depth_units: float                     # raw depth units per metre
    size: Optional[Tuple[int, int]]        # (width, height) the calibration is for, if stated
    origin: str                            # where it came from (for logs and errors)


def _yaml_number(data: dict, key: str, path: Path, required: bool = True) -> Optional[float]:
    if key not in data or data[key] is None:
        if required:
            raise CalibrationError(f"{path}: missing key '{key}' (need fx, fy, cx, cy)")
        return None
    v = data[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
        raise CalibrationError(f"{path}: '{key}' must be a number, got {v!r}")
    return float(v)


def read_camera_yaml(path: Path) -> Calibration:
    """Parse a ``camera.yaml`` (fx, fy, cx, cy, optional distortion, depth_scale, width, height)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CalibrationError(f"{path}: cannot read camera file ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise CalibrationError(f"{path}: not a text file (byte {exc.start} is not UTF-8); camera.yaml is "
                               "YAML with fx, fy, cx, cy") from None
    except yaml.YAMLError as exc:
        raise CalibrationError(f"camera file {yaml_error_text(path, exc)}") from None
    if not isinstance(data, dict):
        raise CalibrationError(f"{path}: expected a mapping with fx, fy, cx, cy, got {type(data).__name__}")
    params = [_yaml_number(data, k, path) for k in ("fx", "fy", "cx", "cy")]
    K = K_from_params(params, str(path))
    dist = distortion_array(data.get("distortion"), str(path))
    scale = _yaml_number(data, "depth_scale", path, required=False) or TUM_DEPTH_UNITS
    if scale <= 0:
        raise CalibrationError(f"{path}: depth_scale must be > 0, got {scale}")
    w = _yaml_number(data, "width", path, required=False)
    h = _yaml_number(data, "height", path, required=False)
    size = (int(w), int(h)) if w is not None and h is not None else None
    return Calibration(K, dist, scale, size, str(path))


def resolve_tum_calibration(folder: Path, intrinsics=None, distortion=None, depth_scale=None) -> Calibration:
    """Apply the resolution order of the module docstring; raises ``CalibrationError`` if none applies."""
    cam_file = folder / "camera.yaml"
    if intrinsics is not None:
        calib = Calibration(K_from_params(intrinsics, "data.intrinsics"), None, TUM_DEPTH_UNITS, None,
                            "data.intrinsics")
        if cam_file.is_file():
            calib.depth_units = read_camera_yaml(cam_file).depth_units
    elif cam_file.is_file():
        calib = read_camera_yaml(cam_file)
    else:
        cam = tum_camera_for(folder.resolve().name)
        if cam is None:
            raise CalibrationError(
                f"{folder}: no intrinsics: set data.intrinsics [fx, fy, cx, cy], add a camera.yaml "
                "to the sequence folder, or keep the TUM folder name (rgbd_dataset_freiburg1/2/3_...)")
        calib = Calibration(K_from_params([cam.fx, cam.fy, cam.cx, cam.cy]),
                            distortion_array(cam.distortion, "TUM table"), TUM_DEPTH_UNITS, (640, 480),
                            f"TUM calibration table ({_SEQ_RE.search(folder.resolve().name).group(0)})")
    if distortion is not None:
        calib.distortion = distortion_array(distortion, "data.distortion")
    if depth_scale is not None:
        if depth_scale <= 0:
            raise CalibrationError(f"data.depth_scale must be > 0, got {depth_scale}")
        calib.depth_units = float(depth_scale)
    return calib


class TumSource(SequenceSource):
    """Streams a TUM RGB-D sequence folder (see module docstring for every rule)."""

    name = "tum"

    def __init__(self, path: str | Path, *, first: int = 0, last: Optional[int] = None, stride: int = 1,
                 downscale: int = 1, max_time_diff: float = 0.02, intrinsics=None, distortion=None,
                 depth_scale=None, color_camera=None,
                 read_threads: int = DataConfig.read_threads) -> None:
        folder = Path(path)
        if not folder.is_dir():
            raise DataNotFoundError(f"{folder}: TUM sequence folder not found")
        rgb_t, rgb_names = read_file_list(folder / "rgb.txt")   # the layout first: an empty or other
        dep_t, dep_names = read_file_list(folder / "depth.txt")  # folder has no intrinsics either
        calib = resolve_tum_calibration(folder, intrinsics, distortion, depth_scale)
        self.calibration = calib
        gt_file = folder / "groundtruth.txt"
        if gt_file.is_file():
            self.gt_t, self.gt_rows = parse_tum_lines(gt_file)
        else:
            self.gt_t, self.gt_rows = np.zeros(0), np.zeros((0, 7))
        match, _ = associate(rgb_t, dep_t, max_time_diff)
        unmatched = np.flatnonzero(match < 0)
        if len(unmatched) == len(rgb_t):
            raise FrameError(
                f"{folder}: no colour image has a depth image within max_time_diff={max_time_diff} s "
                f"(rgb.txt {rgb_t[0]:.3f}..{rgb_t[-1]:.3f}, depth.txt {dep_t[0]:.3f}..{dep_t[-1]:.3f})")
        entries = []
        for i in np.flatnonzero(match >= 0):
            pose = interpolate_pose(self.gt_t, self.gt_rows, rgb_t[i], max_time_diff)
            entries.append(Entry(float(rgb_t[i]), folder / rgb_names[i], folder / dep_names[match[i]], pose,
                                 depth_timestamp=float(dep_t[match[i]])))
        super().__init__(entries, calib.K, calib.distortion, calib.depth_units, first=first, last=last,
                         stride=stride, downscale=downscale, expected_size=calib.size, where=str(folder),
                         color_camera=color_camera, read_threads=read_threads)
        if len(unmatched):
            log.warning("%s: %d of %d colour images have no depth image within %.3f s and are skipped "
                        "(first at t=%.6f)", folder, len(unmatched), len(rgb_t), max_time_diff,
                        rgb_t[unmatched[0]])
            for i in unmatched:
                self.stats.skip(f"{folder / rgb_names[i]}: no depth image within {max_time_diff} s "
                                f"(t={rgb_t[i]:.6f})")

    def ground_truth(self) -> Tuple[np.ndarray, np.ndarray]:
        """All of groundtruth.txt: (timestamps (N,), poses (N, 4, 4) T_wc); empty if absent."""
        poses = np.stack([pose_from_tum(r) for r in self.gt_rows]) if len(self.gt_rows) else np.zeros((0, 4, 4))
        return self.gt_t.copy(), poses


def tum_ground_truth(folder: str | Path) -> Tuple[np.ndarray, np.ndarray]:
    """groundtruth.txt of a TUM sequence -> (timestamps (N,), poses (N, 4, 4) T_wc); needs no calibration."""
    gt_file = Path(folder) / "groundtruth.txt"
    if not Path(folder).is_dir():
        raise DataNotFoundError(f"{folder}: TUM sequence folder not found")
    if not gt_file.is_file():
        raise DataNotFoundError(f"{gt_file}: ground-truth file not found")
    t, rows = parse_tum_lines(gt_file)
    return t, (np.stack([pose_from_tum(r) for r in rows]) if len(rows) else np.zeros((0, 4, 4)))
