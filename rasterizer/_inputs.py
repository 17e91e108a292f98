"""Input checks and small cached tensors shared by the render (``rasterize_spheres``) and the
fused Gauss-Newton pass (``gauss_newton``)."""
from __future__ import annotations

import torch


def check_spheres(means, radii, colors, opacities, K, width, height, float64_ok: bool) -> None:
    """Raises TypeError/ValueError unless means (N, 3), radii (N,), colors (N, 3), opacities (N,)
    are tensors of one dtype (float32; float64 too with ``float64_ok``) on one device, K is
    (3, 3) and width, height are positive ints."""
    for name, t in (("means", means), ("radii", radii), ("colors", colors),
                    ("opacities", opacities), ("K", K)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if means.dim() != 2 or means.shape[1] != 3:
        raise ValueError(f"means must have shape (N, 3), got {tuple(means.shape)}")
    n = means.shape[0]
    if radii.shape != (n,):
        raise ValueError(f"radii must have shape ({n},), got {tuple(radii.shape)}")
    if colors.shape != (n, 3):
        raise ValueError(f"colors must have shape ({n}, 3), got {tuple(colors.shape)}")
    if opacities.shape != (n,):
        raise ValueError(f"opacities must have shape ({n},), got {tuple(opacities.shape)}")
    if K.shape != (3, 3):
        raise ValueError(f"K must be a 3x3 intrinsics matrix, got shape {tuple(K.shape)}")
    for name, v in (("width", width), ("height", height)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    allowed = (torch.float32, torch.float64) if float64_ok else (torch.float32,)
    for name, t in (("means", means), ("radii", radii), ("colors", colors),
                    ("opacities", opacities)):
        if t.dtype not in allowed:
            raise TypeError(f"{name} must be float32 (float64 only with backend='reference'), "
                            f"got {t.dtype}")
        if t.dtype != means.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but means has {means.dtype}")
        if t.device != means.device:
            raise ValueError(f"{name} is on {t.device} but means is on {means.device}")


_ZEROS3: dict = {}


def zeros3(device, dtype) -> torch.Tensor:
    """A cached black (3,) background per device and dtype (no allocation per call)."""
    key = (device, dtype)
    z = _ZEROS3.get(key)
    if z is None:
        z = _ZEROS3[key] = torch.zeros(3, device=device, dtype=dtype)
    return z
