"""The mapping step's hand-written chain rule (slam/mapping/step.py) against autograd through the
same loss, and the mapper's use of it."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import rasterizer
from slam.geometry import invert, pivot_increment
from slam.map.sphere_map import activate
from slam.mapping.keyframes import Keyframe, KeyframeView
from slam.mapping.step import loss_and_gradients

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _rows(n: int, seed: int) -> torch.Tensor:
    """Raw parameter rows of spheres in front of a camera at the origin: xyz, log radius, logits."""
    g = torch.Generator().manual_seed(seed)
    xyz = torch.rand(n, 3, generator=g) * torch.tensor([2.0, 1.5, 1.0]) + torch.tensor([-1.0, -0.75, 1.5])
    log_r = torch.log(torch.rand(n, 1, generator=g) * 0.06 + 0.03)
    logits = torch.randn(n, 4, generator=g)
    return torch.cat([xyz, log_r, logits], dim=1)


def _view(seed: int, device: str) -> KeyframeView:
    """A keyframe (48 x 36) with noisy colour and depth, 20 % of it without depth, seen from a pose
    a little off the origin."""
    rng = np.random.default_rng(seed)
    color = rng.integers(0, 256, (36, 48, 3), dtype=np.uint8)
    depth = (rng.random((36, 48)) * 1.5 + 1.5).astype(np.float32)
    depth[rng.random((36, 48)) < 0.2] = 0.0
    K = np.array([[40.0, 0, 23.5], [0, 40.0, 17.5], [0, 0, 1]])
    T_wc = invert(pivot_increment(np.array([0.02, -0.01, 0.005, 0.03, 0.01, -0.02]), 2.0))
    kf = Keyframe(0, 0.0, T_wc, color, depth.astype(np.float16), K, kf_id=1)
    return KeyframeView.upload(kf, torch.device(device))


def _autograd(rows, view, depth_weight, stats):
    """The step's loss with autograd all the way from the rows (and a zero pose increment)."""
    rows = rows.detach().clone().requires_grad_(True)
    delta = torch.zeros(6, device=rows.device, requires_grad=True)
    o = view.observation()
    means, radii, colors, opacities = activate(rows)
    means_c = (means.unsqueeze(1) * view.T_cw[:3, :3]).sum(-1) + view.T_cw[:3, 3]
    means_c = means_c + torch.cross(delta[:3].expand_as(means_c), means_c, dim=1) + delta[3:]
    out = rasterizer.rasterize_spheres(means_c, radii, colors, opacities, o.K, o.width, o.height, stats=stats)
    err_c = (out.color - o.color).abs().mean(-1)
    m, dm = view.valid.float(), view.depth_ok.float()
    if stats is not None:
        stats.pixel_error = (err_c * m).detach()
    loss = (err_c * m).sum() / m.sum() + depth_weight * ((out.depth - o.depth).abs() * dm).sum() / dm.sum()
    loss.backward()
    return loss.detach(), rows.grad, delta.grad


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_equal_autograd_through_the_same_loss(device):
    rows, view = _rows(400, 0).to(device), _view(0, device)
    s_hand, s_auto = (rasterizer.SphereStats(400, device=device) for _ in range(2))
    step = loss_and_gradients(rows, view, 2.0, stats=s_hand, pose=True)
    loss, g_rows, g_pose = _autograd(rows, view, 2.0, s_auto)
    assert float(loss) > 0 and float(g_rows.abs().max()) > 1e-3
    torch.testing.assert_close(step.loss, loss, rtol=1e-5, atol=0)
    torch.testing.assert_close(step.rows, g_rows, rtol=1e-4, atol=1e-6 * float(g_rows.abs().max()))
    torch.testing.assert_close(step.pose, g_pose, rtol=1e-4, atol=1e-6 * float(g_pose.abs().max()))
    for name in ("weight_sum", "error_sum", "count"):
        torch.testing.assert_close(getattr(s_hand, name), getattr(s_auto, name), rtol=1e-5, atol=1e-7)
    assert loss_and_gradients(rows, view, 2.0).pose is None


def test_spheres_out_of_view_get_no_gradient():
    rows = _rows(50, 1)
    rows[:10, 2] = -3.0                                 # behind the camera
    step = loss_and_gradients(rows, _view(1, "cpu"), 1.0)
    assert torch.equal(step.rows[:10], torch.zeros(10, 8))
    assert bool((step.rows[10:] != 0).any())
