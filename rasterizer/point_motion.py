"""The pixel motion of a camera-frame point under the tracker's pose increment: the Python
statement of ``point_motion`` in csrc/gn_math.h (the kernels' one statement of it), used by the
PyTorch oracle's observation rows (rasterizer/gn_reference.py)."""
from __future__ import annotations

from typing import Optional, Union

import torch

Motion = Optional[Union[torch.Tensor, float]]


def point_motion(k: int, xn: torch.Tensor, yn: torch.Tensor, z: torch.Tensor, iz: torch.Tensor,
                 rz: torch.Tensor, fx: float, fy: float) -> tuple[Motion, Motion, Motion]:
    """(du, dv, dz) per unit of pose parameter ``k`` for points X = z (xn, yn, 1) moved by
    X' = X + w x (X - p) + t, p = (0, 0, pivot_z): k = 0, 1, 2 rotation about x, y, z (rad), 3, 4, 5
    translation x, y, z (m). du, dv: pixels (u = fx x / z + cx, v = fy y / z + cy); dz: metres.
    xn, yn, z: same-shaped tensors (z in metres, > 0); iz = 1 / z; rz = (z - pivot_z) / z (passed
    in, so a caller evaluating all six parameters computes them once). None = identically zero;
    dz of the z translation is the float 1.0."""
    if k == 0:
        return -fx * xn * yn, -fy * (rz + yn * yn), yn * z
    if k == 1:
        return fx * (rz + xn * xn), fy * xn * yn, -xn * z
    if k == 2:
        return -fx * yn, fy * xn, None
    if k == 3:
        return fx * iz, None, None
    if k == 4:
        return None, fy * iz, None
    if k == 5:
        return -fx * xn * iz, -fy * yn * iz, 1.0
    raise ValueError(f"pose parameter index {k} is not in 0..5")
