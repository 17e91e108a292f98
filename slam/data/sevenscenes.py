"""Microsoft 7-Scenes loader (one sequence folder).

Layout: ``frame-XXXXXX.color.jpg|png``, ``frame-XXXXXX.depth.png`` (uint16 millimetres; 0 and
65535 invalid), ``frame-XXXXXX.pose.txt`` (4x4 T_wc), optional ``camera-intrinsics.txt`` (3x3 K).
There are no timestamps: frame ``n`` (the number in its file name) is at ``n / 30`` s.
Colour and depth are not registered in 7-Scenes (depth edges sit 10-20 px off); the loader
delivers them as recorded, with the depth camera's K.

Intrinsics: ``data.intrinsics`` > ``camera-intrinsics.txt`` > the dataset's published model
(fx = fy = 585, cx = 320, cy = 240, logged). Depth units: ``data.depth_scale`` or 1000 per metre.

Bad input:
- missing folder, or a folder with no ``frame-*.color.*`` file -> ``DataNotFoundError``.
- ``camera-intrinsics.txt`` not 3x3 / not a pinhole matrix -> ``CalibrationError``.
- a pose file that is not 16 numbers, or not a rigid transform (last row 0 0 0 1, orthonormal
  rotation) -> ``FrameError`` naming it, at open (pose files are read then: a bad one would
  otherwise stop the run on its frame, or score it against a wrong pose); a pose with inf/NaN
  (7-Scenes marks tracking failures that way) or a missing pose file -> ``gt_pose = None``
  (one warning with the count).
- missing/unreadable image, all-invalid depth -> per-frame skip (see ``slam.data.sequence``).
"""
from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Optional, Tuple

import numpy as np

from slam.config import DataConfig
from slam.data.errors import CalibrationError, DataNotFoundError
from slam.data.frame import FrameError
from slam.data.matrix_io import read_matrix, rigid_problem
from slam.data.preprocess import K_from_params, check_K
from slam.data.sequence import Entry, SequenceSource

log = logging.getLogger("slam.data")

SEVEN_SCENES_FPS = 30.0
SEVEN_SCENES_K = (585.0, 585.0, 320.0, 240.0)
_FRAME_RE = re.compile(r"^frame-(\d+)\.color\.(jpg|png)$")


class SevenScenesSource(SequenceSource):
    """Streams one 7-Scenes sequence folder (see module docstring)."""

    name = "7scenes"

    def __init__(self, path: str | Path, *, first: int = 0, last: Optional[int] = None, stride: int = 1,
                 downscale: int = 1, intrinsics=None, depth_scale=None, color_camera=None,
                 read_threads: int = DataConfig.read_threads) -> None:
        folder = Path(path)
        if not folder.is_dir():
            raise DataNotFoundError(f"{folder}: 7-Scenes sequence folder not found")
        frames = []
        for p in folder.iterdir():
            m = _FRAME_RE.match(p.name)
            if m:
                frames.append((int(m.group(1)), p))
        if not frames:
            raise DataNotFoundError(f"{folder}: no frame-XXXXXX.color.jpg/png files (not a 7-Scenes sequence)")
        frames.sort()
        K = self._intrinsics(folder, intrinsics)
        units = 1000.0 if depth_scale is None else float(depth_scale)
        if units <= 0:
            raise CalibrationError(f"data.depth_scale must be > 0, got {depth_scale}")
        entries, no_pose = [], []
        for n, p in frames:
            pose_file = folder / f"frame-{n:06d}.pose.txt"
            pose, why = read_pose_file(pose_file)
            if why:
                no_pose.append(f"{pose_file}: {why}")
            entries.append(Entry(n / SEVEN_SCENES_FPS, p, folder / f"frame-{n:06d}.depth.png", pose))
        if no_pose:
            log.warning("%s: %d of %d frames have no ground truth (first: %s)", folder, len(no_pose), len(frames),
                        no_pose[0])
        super().__init__(entries, K, None, units, first=first, last=last, stride=stride,
                         downscale=downscale, where=str(folder), color_camera=color_camera, read_threads=read_threads)

    @staticmethod
    def _intrinsics(folder: Path, intrinsics) -> np.ndarray:
        if intrinsics is not None:
            return K_from_params(intrinsics, "data.intrinsics")
        f = folder / "camera-intrinsics.txt"
        if f.is_file():
            try:
                K = read_matrix(f, (3, 3), "intrinsics")
            except FrameError as exc:  # wrong count / not numbers -> a calibration problem
                raise CalibrationError(str(exc)) from None
            return check_K(K, str(f))
        log.info("%s: no camera-intrinsics.txt, using the published 7-Scenes model %s", folder, SEVEN_SCENES_K)
        return K_from_params(SEVEN_SCENES_K)



def read_pose_file(path: Path) -> Tuple[Optional[np.ndarray], str]:
    """One ``frame-XXXXXX.pose.txt`` -> ((4, 4) T_wc or None, why None: '' when there is a pose).

    None for a missing file or a non-finite pose (7-Scenes' tracking-failure marker); raises
    ``FrameError`` naming the file for a wrong count, a non-number or a matrix that is not rigid."""
    if not path.is_file():
        return None, "pose file missing"
    T = read_matrix(path, (4, 4), "pose")
    if not np.all(np.isfinite(T)):
        return None, "pose is not finite (tracking failure marker)"
    problem = rigid_problem(T)
    if problem is not None:
        raise FrameError(f"{path}: pose is not a rigid transform ({problem})")
    return T, ""


def seven_scenes_ground_truth(folder: str | Path) -> Tuple[np.ndarray, np.ndarray]:
    """All finite frame poses of a 7-Scenes folder -> (timestamps n/30 (N,), poses (N, 4, 4)); reads no images."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataNotFoundError(f"{folder}: 7-Scenes sequence folder not found")
    stamps, poses = [], []
    for p in sorted(folder.glob("frame-*.pose.txt")):
        m = re.match(r"^frame-(\d+)\.pose\.txt$", p.name)
        if not m:
            continue
        T, _ = read_pose_file(p)
        if T is not None:
            stamps.append(int(m.group(1)) / SEVEN_SCENES_FPS)
            poses.append(T)
    if not poses:
        raise DataNotFoundError(f"{folder}: no frame-XXXXXX.pose.txt ground truth")
    return np.asarray(stamps), np.asarray(poses)
