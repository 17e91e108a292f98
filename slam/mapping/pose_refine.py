"""Keyframe pose refinement in the mapping window: each window keyframe's pose is optimised with
the spheres, by Adam on a small se(3) increment per keyframe.

The increment delta = (omega rad, v m) acts on the camera-frame means, X' = X + omega x X + v,
left of the keyframe's world-to-camera pose (``slam.map.render.render_spheres(pose_delta=...)``).
It is evaluated at delta = 0 on every step, so its gradient is exact: it comes from the
rasterizer's backward through the camera-frame means (colour and depth both depend on them).
The step is then folded into the keyframe's pose with the exact rotation (``slam.geometry.increment_pose``),
T_cw <- [exp(omega) | v] T_cw, and delta is zero again for the next step.

The gauge is held by fixed keyframes (the map's first keyframe, a saved map's keyframes): their
poses never move, so the map cannot drift as a whole. The Adam state is per keyframe (its own
bias correction, like the spheres' rows), on the host: six numbers a keyframe.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from slam.geometry import increment_pose

ADAM_BETAS = (0.9, 0.999)   # Adam's usual moments: not tuning values (the step sizes are)
ADAM_EPS = 1e-12


def pose_gradient_from_points(means_c: torch.Tensor, grad_means_c: torch.Tensor) -> torch.Tensor:
    """dL/d delta (6,) = (sum p x g, sum g) at delta = 0 for X' = X + omega x X + v, from the
    camera-frame means (N, 3) metres and dL/d means (N, 3): the same value autograd gives through
    ``render_spheres(pose_delta=...)`` (a check, and for callers without a delta tensor)."""
    return torch.cat([torch.cross(means_c, grad_means_c, dim=1).sum(0), grad_means_c.sum(0)])


@dataclass
class _AdamState:
    m: np.ndarray = field(default_factory=lambda: np.zeros(6))
    v: np.ndarray = field(default_factory=lambda: np.zeros(6))
    steps: int = 0


class KeyframePoseRefiner:
    """Per-keyframe Adam on se(3) increments; owned by the mapper (the keyframes' one writer).

    lr_rot: rad per step; lr_trans: m per step; ``fixed``: keyframe ids that hold the gauge."""

    def __init__(self, lr_rot: float, lr_trans: float, enabled: bool = True) -> None:
        self.lr = np.array([lr_rot] * 3 + [lr_trans] * 3)
        self.enabled = enabled and (lr_rot > 0 or lr_trans > 0)
        self.fixed: set[int] = set()
        self._state: dict[int, _AdamState] = {}
        self.steps = 0
        self.seconds = 0.0

    def refinable(self, kf) -> bool:
        """Whether ``kf``'s pose is optimised (enabled, and not a gauge keyframe)."""
        return self.enabled and kf.kf_id not in self.fixed

    def delta(self, kf, device) -> torch.Tensor | None:
        """A zero (6,) increment that records gradients, for ``kf``'s render; None when fixed."""
        if not self.refinable(kf):
            return None
        return torch.zeros(6, device=device, requires_grad=True)

    def step(self, kf, grad: torch.Tensor) -> np.ndarray:
        """One Adam step of ``kf``'s pose from dL/d delta (6,); replaces ``kf.T_wc`` (a new array)
        and returns the applied increment (6,) (rad, m)."""
        g = grad.detach().double().cpu().numpy()
        if not np.all(np.isfinite(g)):
            return np.zeros(6)
        st = self._state.setdefault(kf.kf_id, _AdamState())
        b1, b2 = ADAM_BETAS
        st.steps += 1
        st.m = b1 * st.m + (1 - b1) * g
        st.v = b2 * st.v + (1 - b2) * g * g
        m_hat = st.m / (1 - b1 ** st.steps)
        v_hat = st.v / (1 - b2 ** st.steps)
        delta = -self.lr * m_hat / (np.sqrt(v_hat) + ADAM_EPS)
        kf.T_wc = increment_pose(kf.T_wc, delta)
        self.steps += 1
        return delta

    def forget(self, kf_id: int) -> None:
        """Drop the optimiser state of a keyframe that left the store."""
        self._state.pop(kf_id, None)

    def reset(self, kf_ids) -> None:
        """Restart the moments of keyframes whose pose was moved from outside (a loop correction):
        their old gradient history no longer applies."""
        for i in kf_ids:
            self._state.pop(i, None)

