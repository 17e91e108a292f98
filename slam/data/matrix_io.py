"""Small whitespace-separated matrix files (camera-intrinsics.txt, 7-Scenes pose.txt, traj.txt), and
the data lines of the text files the loaders read (TUM lists and trajectories, Replica traj.txt)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator, Tuple

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
