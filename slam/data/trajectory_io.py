"""TUM trajectory files (``timestamp tx ty tz qx qy qz qw`` per line, '#' comments) <-> arrays.

Poses are camera-to-world ``T_wc`` (4, 4) float64; timestamps are seconds. The files are what
``evo`` and the TUM benchmark tools read. Malformed lines are an error naming the file and line
(a silently dropped pose would bias every metric computed from the file).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Tuple

import numpy as np

from slam.data.errors import DataNotFoundError
from slam.data.frame import FrameError
from slam.data.matrix_io import data_lines


class TrajectoryFormatError(FrameError):
    """A trajectory / ground-truth file has a malformed line; the message names file and line."""


def quat_to_rot(q_xyzw: np.ndarray) -> np.ndarray:
    """Unit quaternion (qx, qy, qz, qw) -> (3, 3) rotation matrix."""
    x, y, z, w = np.asarray(q_xyzw, dtype=np.float64) / np.linalg.norm(q_xyzw)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])


def rot_to_quat(R: np.ndarray) -> np.ndarray:
    """(3, 3) rotation matrix -> unit quaternion (qx, qy, qz, qw) with qw >= 0."""
    R = np.asarray(R, dtype=np.float64)
    tr = np.trace(R)
    if tr > 0:
        s = 2.0 * np.sqrt(tr + 1.0)
        q = [(R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s, 0.25 * s]
    elif R[0, 0] > R[1, 1] and R[0, 0] > R[2, 2]:
        s = 2.0 * np.sqrt(1.0 + R[0, 0] - R[1, 1] - R[2, 2])
        q = [0.25 * s, (R[0, 1] + R[1, 0]) / s, (R[0, 2] + R[2, 0]) / s, (R[2, 1] - R[1, 2]) / s]
    elif R[1, 1] > R[2, 2]:
        s = 2.0 * np.sqrt(1.0 + R[1, 1] - R[0, 0] - R[2, 2])
        q = [(R[0, 1] + R[1, 0]) / s, 0.25 * s, (R[1, 2] + R[2, 1]) / s, (R[0, 2] - R[2, 0]) / s]
    else:
        s = 2.0 * np.sqrt(1.0 + R[2, 2] - R[0, 0] - R[1, 1])
        q = [(R[0, 2] + R[2, 0]) / s, (R[1, 2] + R[2, 1]) / s, 0.25 * s, (R[1, 0] - R[0, 1]) / s]
    q = np.asarray(q)
    q /= np.linalg.norm(q)
    return -q if q[3] < 0 else q


def pose_from_tum(values: Iterable[float]) -> np.ndarray:
    """(tx, ty, tz, qx, qy, qz, qw) -> (4, 4) T_wc."""
    v = np.asarray(list(values), dtype=np.float64)
    T = np.eye(4)
    T[:3, :3] = quat_to_rot(v[3:7])
    T[:3, 3] = v[:3]
    return T


def tum_from_pose(T: np.ndarray) -> np.ndarray:
    """(4, 4) T_wc -> (tx, ty, tz, qx, qy, qz, qw)."""
    T = np.asarray(T, dtype=np.float64)
    return np.concatenate([T[:3, 3], rot_to_quat(T[:3, :3])])


def parse_tum_lines(path: Path, *, require_increasing: bool = True) -> Tuple[np.ndarray, np.ndarray]:
    """Parse a TUM trajectory/ground-truth file -> (timestamps (N,), tum rows (N, 7))."""
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"{path}: trajectory file not found")
    stamps, rows = [], []
    for lineno, text in data_lines(path):
        parts = text.replace(",", " ").split()
        if len(parts) != 8:
            raise TrajectoryFormatError(
                f"{path}:{lineno}: expected 8 values 'timestamp tx ty tz qx qy qz qw', got "
                f"{len(parts)}: {text[:80]!r}")
        try:
            vals = [float(p) for p in parts]
        except ValueError:
            raise TrajectoryFormatError(f"{path}:{lineno}: not a number in {text[:80]!r}") from None
        if not np.all(np.isfinite(vals)):
            raise TrajectoryFormatError(f"{path}:{lineno}: non-finite value in {text[:80]!r}")
        qn = float(np.linalg.norm(vals[4:8]))
        if abs(qn - 1.0) > 1e-2:
            raise TrajectoryFormatError(
                f"{path}:{lineno}: quaternion (qx qy qz qw) has norm {qn:.4f}, expected 1")
        if require_increasing and stamps and vals[0] <= stamps[-1]:
            raise TrajectoryFormatError(
                f"{path}:{lineno}: timestamp {vals[0]:.6f} is not after the previous one "
                f"({stamps[-1]:.6f}); timestamps must increase")
        stamps.append(vals[0])
        rows.append(vals[1:])
    return np.asarray(stamps, dtype=np.float64), np.asarray(rows, dtype=np.float64).reshape(-1, 7)


def read_tum_trajectory(path: str | Path) -> Tuple[np.ndarray, np.ndarray]:
    """Read a TUM trajectory file -> (timestamps (N,) s, poses (N, 4, 4) T_wc).

    Raises ``DataNotFoundError`` if missing, ``TrajectoryFormatError`` (file:line) if malformed
    or not in increasing time order.
    """
    stamps, rows = parse_tum_lines(Path(path))
    poses = np.stack([pose_from_tum(r) for r in rows]) if len(rows) else np.zeros((0, 4, 4))
    return stamps, poses


TUM_COLUMNS = "# timestamp tx ty tz qx qy qz qw"


def tum_line(timestamp: float, T_wc: np.ndarray) -> str:
    """One TUM trajectory line (no newline) for a pose (4, 4) at ``timestamp`` s."""
    return f"{timestamp:.6f} " + " ".join(f"{x:.9f}" for x in tum_from_pose(np.asarray(T_wc, dtype=np.float64)))


def write_tum_trajectory(path: str | Path, timestamps: np.ndarray, poses: np.ndarray,
                         header: str | None = None) -> None:
    """Write (N,) timestamps and (N, 4, 4) T_wc poses as a TUM trajectory file, atomically (a
    temporary file renamed over ``path``: a reader never sees half of it)."""
    timestamps = np.asarray(timestamps, dtype=np.float64).reshape(-1)
    poses = np.asarray(poses, dtype=np.float64)
    if poses.ndim != 3 or poses.shape[1:] != (4, 4) or len(poses) != len(timestamps):
        raise ValueError(f"need (N,) timestamps and (N, 4, 4) poses, got {timestamps.shape} and {poses.shape}")
    lines = [f"# {header}"] if header else []
    lines.append(TUM_COLUMNS)
    lines += [tum_line(t, T) for t, T in zip(timestamps, poses)]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)
