"""Image metrics on torch tensors: PSNR, SSIM (pytorch_msssim), depth L1 over valid pixels.

Colour tensors are (3, H, W), (B, 3, H, W) or channels-last (H, W, 3) (as the renderer and
``Frame`` use; recognised when the last dimension is 1 or 3 and the first is not) floats in
[0, data_range]; depth tensors are any matching shapes in metres with 0 / non-finite = invalid.
Every function returns a Python float.
"""
from __future__ import annotations

from typing import Optional

import torch
from pytorch_msssim import ssim as _ssim


def _as_batch(img: torch.Tensor) -> torch.Tensor:
    """(C, H, W) | (H, W, C) | (B, C, H, W) -> (B, C, H, W)."""
    if img.dim() == 3:
        if img.shape[-1] in (1, 3) and img.shape[0] not in (1, 3):
            img = img.permute(2, 0, 1)
        return img.unsqueeze(0)
    if img.dim() != 4:
        raise ValueError(f"expected (C, H, W) or (B, C, H, W), got {tuple(img.shape)}")
    return img


def _check_pair(pred: torch.Tensor, target: torch.Tensor) -> None:
    if pred.shape != target.shape:
        raise ValueError(f"prediction {tuple(pred.shape)} and target {tuple(target.shape)} differ in shape")


def psnr(pred: torch.Tensor, target: torch.Tensor, data_range: float = 1.0,
         mask: Optional[torch.Tensor] = None) -> float:
    """PSNR in dB = 10 log10(data_range^2 / MSE) over all pixels (or those where ``mask`` (H, W) is true).

    The MSE is averaged over every channel of every selected pixel of the whole batch.
    """
    _check_pair(pred, target)
    diff2 = (_as_batch(pred).float() - _as_batch(target).float()) ** 2          # (B, C, H, W)
    if mask is not None:
        m = mask.to(torch.bool).expand(diff2.shape[0], 1, *diff2.shape[-2:]).expand_as(diff2)
        if not m.any():
            raise ValueError("psnr: mask selects no pixel")
        mse = diff2[m].mean()
    else:
        mse = diff2.mean()
    if mse.item() == 0.0:
        return float("inf")
    return float(10.0 * torch.log10(torch.tensor(data_range, dtype=torch.float64) ** 2 / mse.double()))


def ssim(pred: torch.Tensor, target: torch.Tensor, data_range: float = 1.0) -> float:
    """Mean SSIM (pytorch_msssim.ssim, 11x11 Gaussian window, sigma 1.5; smaller odd window for
    images under 11 px)."""
    _check_pair(pred, target)
    x, y = _as_batch(pred).float(), _as_batch(target).float()
    side = min(x.shape[-2:])
    win = 11 if side >= 11 else max(3, side - (1 - side % 2))
    # Without cuDNN: its handle and engine libraries cost the process host memory on a GPU
    # (measured: docs/benchmarks.md#host-memory) for two small Gaussian filters; PyTorch's own
    # depthwise convolution gives the same values to float rounding.
    with torch.backends.cudnn.flags(enabled=False):
        return float(_ssim(x, y, data_range=data_range, size_average=True, win_size=win))


def depth_l1(pred: torch.Tensor, target: torch.Tensor) -> float:
    """Mean |pred - target| in metres over pixels where the target is valid (> 0 and finite).

    Protocol: a prediction of 0 at a valid target counts as its full error (no free pass for
    holes); pixels with an invalid target are ignored. Raises if no target pixel is valid.
    """
    _check_pair(pred, target)
    valid = torch.isfinite(target) & (target > 0)
    if not valid.any():
        raise ValueError("depth_l1: the target has no valid pixel")
    p = torch.nan_to_num(pred.float(), nan=0.0, posinf=0.0, neginf=0.0)
    return float((p[valid] - target.float()[valid]).abs().mean())
