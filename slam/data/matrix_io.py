"""Small whitespace-separated matrix files (camera-intrinsics.txt, 7-Scenes pose.txt, traj.txt), and
the data lines of the text files the loaders read (TUM lists and trajectories, Replica traj.txt)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator, Optional, Tuple

import numpy as np

from slam.data.errors import DataNotFoundError
from slam.data.frame import FrameError


def read_matrix(path: Path, shape: tuple, what: str) -> np.ndarray:
    """Read exactly ``prod(shape)`` numbers from ``path`` -> float64 array of ``shape``.

    Raises ``DataNotFoundError`` if missing and ``FrameError`` naming the file if the count or a
    value is wrong. Non-finite values are returned as they are (the caller decides).
    """
    path = Path(path)
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        raise DataNotFoundError(f"{path}: {what} file not found") from None
    except OSError as exc:
        raise FrameError(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    tokens = text.replace(",", " ").split()
    try:
        values = np.array([float(t) for t in tokens], dtype=np.float64)
    except ValueError as exc:
        raise FrameError(f"{path}: {what} contains a non-number ({exc})") from None
    need = int(np.prod(shape))
    if values.size != need:
        dims = "x".join(str(s) for s in shape)
        raise FrameError(f"{path}: {what} must be a {dims} matrix ({need} numbers), found {values.size} numbers")
    return values.reshape(shape)


def data_lines(path: Path) -> Iterator[Tuple[int, str]]:
    """(1-based line number, stripped text) of each line of a text file that is neither blank nor a
    '#' comment; undecodable bytes are replaced."""
    with open(path, "r", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            text = line.strip()
            if text and not text.startswith("#"):
                yield lineno, text


RIGID_TOL = 1e-2  # |R^T R - I| and |last row - (0 0 0 1)|: 7-Scenes' printed poses are within 2.4e-4


def rigid_problem(T: np.ndarray) -> Optional[str]:
    """Why a (4, 4) matrix is not a rigid pose (finite, last row 0 0 0 1, rotation orthonormal with
    determinant +1, all within ``RIGID_TOL``), or None when it is one."""
    T = np.asarray(T, dtype=np.float64)
    if not np.all(np.isfinite(T)):
        return "non-finite value"
    if not np.allclose(T[3], [0, 0, 0, 1], atol=RIGID_TOL):
        return f"last row is {T[3].tolist()}, not 0 0 0 1"
    R = T[:3, :3]
    off = float(np.abs(R.T @ R - np.eye(3)).max())
    if off > RIGID_TOL or np.linalg.det(R) <= 0:
        return f"rotation part is not a rotation (|R^T R - I| = {off:.3g}, det {np.linalg.det(R):.3g})"
    return None
