"""Save and load the sphere map as a standard 3D Gaussian Splatting PLY.

Layout (one vertex per sphere, float32): x y z, nx ny nz (0), f_dc_0..2 (SH degree-0 colour:
rgb = 0.5 + C0 * f_dc), opacity (logit), scale_0..2 (log radius, repeated: isotropic),
rot_0..3 (identity quaternion w x y z = 1 0 0 0). Common splat viewers open it; ``load_map_rows``
restores the parameter rows (means, log radius, opacity logit exact; colour within float rounding).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from slam.sphere_map import COLOR, LOG_RADIUS, MEANS, OPACITY, PARAM_DIM

SH_C0 = 0.28209479177387814
FIELDS = ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2", "opacity",
          "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
REQUIRED = ["x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1", "scale_2"]


class MapFormatError(ValueError):
    """The file is not a sphere map this package can load; the message names file and problem."""


def save_map(path: str | Path, rows: torch.Tensor) -> None:
    """Write parameter rows (N, 8) (see ``slam.sphere_map``) as a 3DGS PLY."""
    from plyfile import PlyData, PlyElement

    rows = rows.detach().float().cpu()
    n = rows.shape[0]
    rgb = torch.sigmoid(rows[:, COLOR]).numpy()
    data = np.zeros(n, dtype=[(f, "f4") for f in FIELDS])
    xyz = rows[:, MEANS].numpy()
    data["x"], data["y"], data["z"] = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    for i in range(3):
        data[f"f_dc_{i}"] = (rgb[:, i] - 0.5) / SH_C0
        data[f"scale_{i}"] = rows[:, LOG_RADIUS].numpy()
    data["opacity"] = rows[:, OPACITY].numpy()
    data["rot_0"] = 1.0
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    PlyData([PlyElement.describe(data, "vertex")], text=False).write(str(tmp))
    tmp.replace(path)  # never leave a half-written map under the real name


def load_map_rows(path: str | Path, isotropy_tol: float = 1e-4) -> torch.Tensor:
    """Read a 3DGS PLY written by ``save_map`` (or any isotropic one) -> rows (N, 8) float32.

    Raises ``FileNotFoundError`` or ``MapFormatError`` (missing fields, non-float fields,
    anisotropic scales, non-identity rotations, truncated file, non-finite values).
    """
    from plyfile import PlyData

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: map file not found")
    try:
        ply = PlyData.read(str(path))
        vertex = ply["vertex"]
        data = vertex.data
        n = len(data)
        _ = data[-1] if n else None  # force a full read: a truncated file fails here
    except KeyError:
        raise MapFormatError(f"{path}: no 'vertex' element, not a Gaussian-splat map") from None
    except Exception as exc:  # plyfile raises various errors on truncated/garbled files
        raise MapFormatError(f"{path}: cannot parse PLY ({type(exc).__name__}: {exc})") from None
    names = data.dtype.names or ()
    missing = [f for f in REQUIRED if f not in names]
    if missing:
        raise MapFormatError(f"{path}: not a sphere map, missing fields {missing}")
    for f in REQUIRED:
        if data.dtype[f].kind != "f":
            raise MapFormatError(f"{path}: field '{f}' must be floating point, got {data.dtype[f]}")
    scales = np.stack([data[f"scale_{i}"] for i in range(3)], axis=1).astype(np.float64)
    if n and np.max(np.abs(scales - scales[:, :1])) > isotropy_tol:
        raise MapFormatError(f"{path}: anisotropic scales (scale_0..2 differ); this package stores spheres only")
    if all(f"rot_{i}" in names for i in range(4)) and n:
        q = np.stack([data[f"rot_{i}"] for i in range(4)], axis=1).astype(np.float64)
        q = q / np.linalg.norm(q, axis=1, keepdims=True).clip(1e-12)
        if np.max(np.abs(np.abs(q[:, 0]) - 1.0)) > 1e-4:
            raise MapFormatError(f"{path}: non-identity rotations; this package stores spheres only")
    rows = np.zeros((n, PARAM_DIM), dtype=np.float32)
    rows[:, 0], rows[:, 1], rows[:, 2] = data["x"], data["y"], data["z"]
    rows[:, LOG_RADIUS] = scales[:, 0]
    rgb = np.stack([0.5 + SH_C0 * data[f"f_dc_{i}"].astype(np.float64) for i in range(3)], axis=1)
    rgb = rgb.clip(1e-6, 1 - 1e-6)
    rows[:, 4:7] = np.log(rgb / (1 - rgb))
    rows[:, OPACITY] = data["opacity"]
    if not np.all(np.isfinite(rows)):
        raise MapFormatError(f"{path}: non-finite values in the map")
    return torch.from_numpy(rows)
