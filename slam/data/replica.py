"""Replica loader in the NICE-SLAM / SplaTAM layout.

Layout: ``<seq>/results/frameXXXXXX.jpg|png`` (colour), ``<seq>/results/depthXXXXXX.png`` (uint16,
6553.5 units per metre; ``data.depth_scale`` overrides), ``<seq>/traj.txt`` (line ``n`` = the 16
numbers of frame ``n``'s 4x4 T_wc, row-major). Replica ships no calibration: ``data.intrinsics``
is required (configs/replica.yaml has the standard 1200x680 values). No timestamps: frame ``n``
is at ``n / 30`` s (nominal).

Bad input:
- missing folder, ``results/`` or ``traj.txt``, or no colour image -> ``DataNotFoundError``.
- no ``data.intrinsics`` (or not 4 numbers) -> ``CalibrationError``.
- a malformed traj.txt line, or fewer poses than frames -> ``FrameError`` naming file and line
  (poses are matched to frames by line number, so a short file would shift every pose).
- missing/unreadable image, all-invalid depth -> per-frame skip (see ``slam.data.sequence``).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional, Tuple

import numpy as np

from slam.config import DataConfig
from slam.data.errors import CalibrationError, DataNotFoundError
from slam.data.frame import FrameError
from slam.data.matrix_io import data_lines, rigid_problem
from slam.data.preprocess import K_from_params
from slam.data.sequence import Entry, SequenceSource

REPLICA_DEPTH_UNITS = 6553.5
REPLICA_FPS = 30.0
_FRAME_RE = re.compile(r"^frame(\d+)\.(jpg|png)$")


def read_flat_poses(path: Path) -> np.ndarray:
    """traj.txt with one row-major 4x4 T_wc per line -> (N, 4, 4); errors name file and line."""
    if not path.is_file():
        raise DataNotFoundError(f"{path}: trajectory file not found (Replica needs traj.txt)")
    poses = []
    for lineno, text in data_lines(path):
        parts = text.split()
        if len(parts) != 16:
            raise FrameError(f"{path}:{lineno}: expected 16 numbers (a flattened 4x4 pose), got {len(parts)}")
        try:
            T = np.array([float(p) for p in parts], dtype=np.float64).reshape(4, 4)
        except ValueError:
            raise FrameError(f"{path}:{lineno}: not a number in {text[:80]!r}") from None
        problem = rigid_problem(T)
        if problem is not None:
            raise FrameError(f"{path}:{lineno}: not a rigid 4x4 pose ({problem})")
        poses.append(T)
    return np.asarray(poses, dtype=np.float64).reshape(-1, 4, 4)


class ReplicaSource(SequenceSource):
    """Streams one Replica sequence in the NICE-SLAM layout (see module docstring)."""

    name = "replica"

    def __init__(self, path: str | Path, *, intrinsics=None, first: int = 0, last: Optional[int] = None,
                 stride: int = 1, downscale: int = 1, depth_scale=None, color_camera=None,
                 read_threads: int = DataConfig.read_threads) -> None:
        folder = Path(path)
        if not folder.is_dir():
            raise DataNotFoundError(f"{folder}: Replica sequence folder not found")
        results = folder / "results"
        if not results.is_dir():
            raise DataNotFoundError(f"{results}: folder not found (Replica NICE-SLAM layout needs results/)")
        if intrinsics is None:
            raise CalibrationError(
                f"{folder}: Replica has no calibration file; set data.intrinsics [fx, fy, cx, cy] "
                "(configs/replica.yaml has the standard values)")
        K = K_from_params(intrinsics, "data.intrinsics")
        frames = sorted((int(m.group(1)), p) for p in results.iterdir() if (m := _FRAME_RE.match(p.name)))
        if not frames:
            raise DataNotFoundError(f"{results}: no frameXXXXXX.jpg/png colour images")
        poses = read_flat_poses(folder / "traj.txt")
        if len(poses) <= frames[-1][0]:
            raise FrameError(f"{folder / 'traj.txt'}: has {len(poses)} poses but frame {frames[-1][0]} exists; "
                             "poses are matched to frames by line number")
        units = REPLICA_DEPTH_UNITS if depth_scale is None else float(depth_scale)
        if units <= 0:
            raise CalibrationError(f"data.depth_scale must be > 0, got {depth_scale}")
        entries = [Entry(n / REPLICA_FPS, p, results / f"depth{n:06d}.png", poses[n]) for n, p in frames]
        super().__init__(entries, K, None, units, first=first, last=last, stride=stride,
                         downscale=downscale, where=str(folder), color_camera=color_camera, read_threads=read_threads)


def replica_ground_truth(folder: str | Path) -> Tuple[np.ndarray, np.ndarray]:
    """traj.txt of a Replica sequence -> (timestamps n/30 (N,), poses (N, 4, 4) T_wc); needs no intrinsics."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataNotFoundError(f"{folder}: Replica sequence folder not found")
    poses = read_flat_poses(folder / "traj.txt")
    return np.arange(len(poses)) / REPLICA_FPS, poses
