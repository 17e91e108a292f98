"""Keyframe pose refinement: the pose gradient through the rasterizer's backward matches finite
differences, Adam on it pulls a perturbed keyframe back, and the gauge keyframe never moves."""
import numpy as np
import torch

from slam.geometry import increment_pose, invert
from slam.map.keyframes import Keyframe
from slam.map.render import render_spheres
from slam.mapping.pose_refine import KeyframePoseRefiner, pose_gradient_from_points


def _scene(n=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    means = torch.rand(n, 3, generator=g) * torch.tensor([2.0, 1.5, 1.0]) + torch.tensor([-1.0, -0.75, 1.5])
    radii = torch.full((n,), 0.08)
    colors = torch.rand(n, 3, generator=g)
    opac = torch.full((n,), 0.8)
    K = torch.tensor([[40.0, 0, 23.5], [0, 40.0, 17.5], [0, 0, 1]])
    return means, radii, colors, opac, K


def _loss(out, target):
    return ((out.color - target.color) ** 2).mean() + ((out.depth - target.depth) ** 2).mean()


def test_pose_gradient_matches_finite_differences():
    means, radii, colors, opac, K = _scene()
    T_wc = np.eye(4)
    T_wc[:3, 3] = (0.02, -0.01, 0.03)
    target = render_spheres(means, radii, colors, opac, torch.eye(4), K, 48, 36, backend="cpu")

    def loss_at(T):
        T_cw = torch.as_tensor(invert(T), dtype=torch.float32)
        return float(_loss(render_spheres(means, radii, colors, opac, T_cw, K, 48, 36, backend="cpu"), target))

    delta = torch.zeros(6, requires_grad=True)
    T_cw = torch.as_tensor(invert(T_wc), dtype=torch.float32)
    _loss(render_spheres(means, radii, colors, opac, T_cw, K, 48, 36, backend="cpu", pose_delta=delta), target).backward()
    fd = np.zeros(6)
    for i in range(6):
        e = np.zeros(6)
        e[i] = 1e-3
        fd[i] = (loss_at(increment_pose(T_wc, e)) - loss_at(increment_pose(T_wc, -e))) / 2e-3
    g = delta.grad.numpy()
    assert np.abs(g).max() > 1e-3                       # a real, non-trivial gradient
    np.testing.assert_allclose(g, fd, rtol=0.1, atol=0.02 * np.abs(fd).max())


def test_pose_gradient_from_points_equals_autograd():
    means, radii, colors, opac, K = _scene(seed=1)
    target = render_spheres(means + 0.01, radii, colors, opac, torch.eye(4), K, 48, 36, backend="cpu")
    delta = torch.zeros(6, requires_grad=True)
    pts = means.clone().requires_grad_(True)
    _loss(render_spheres(pts, radii, colors, opac, torch.eye(4), K, 48, 36, backend="cpu", pose_delta=delta),
          target).backward()
    # at delta = 0 the camera-frame means are the world means (identity pose)
    ref = pose_gradient_from_points(means, pts.grad)
    np.testing.assert_allclose(delta.grad.numpy(), ref.numpy(), rtol=1e-4, atol=1e-7)


def test_refiner_pulls_a_perturbed_keyframe_back_and_the_gauge_stays():
    means, radii, colors, opac, K = _scene(seed=2)
    target = render_spheres(means, radii, colors, opac, torch.eye(4), K, 48, 36, backend="cpu")
    T0 = increment_pose(np.eye(4), np.array([0.01, -0.008, 0.005, 0.02, -0.015, 0.01]))
    kf = Keyframe(0, 0.0, T0, np.zeros((36, 48, 3), np.uint8), np.zeros((36, 48), np.float16), K.numpy(), kf_id=5)
    gauge = Keyframe(0, 0.0, T0.copy(), kf.color, kf.depth, K.numpy(), kf_id=0)
    refiner = KeyframePoseRefiner(lr_rot=2e-3, lr_trans=2e-3)
    refiner.fixed.add(0)
    assert refiner.delta(gauge, "cpu") is None and not refiner.refinable(gauge)
    err0 = np.linalg.norm(kf.T_wc[:3, 3])
    for _ in range(60):
        delta = refiner.delta(kf, "cpu")
        T_cw = torch.as_tensor(invert(kf.T_wc), dtype=torch.float32)
        out = render_spheres(means, radii, colors, opac, T_cw, K, 48, 36, backend="cpu", pose_delta=delta)
        (out.color - target.color).abs().mean().add((out.depth - target.depth).abs().mean()).backward()
        refiner.step(kf, delta.grad)
    assert np.linalg.norm(kf.T_wc[:3, 3]) < 0.4 * err0
    assert np.array_equal(gauge.T_wc, T0)


def test_the_first_keyframe_holds_the_gauge_in_a_run(sample_run):
    system = sample_run.run(sample_run.cfg(12, "system.threaded=false", "loop.enabled=false", "mapping.refine_poses=true"))
    first = system.recorder.frames[0]
    kfs = system.store.items
    assert kfs[0].kf_id == 0 and np.array_equal(kfs[0].T_wc, first.T_wc_tracked)
    assert any(not np.array_equal(k.T_wc, f.T_wc_tracked) for k, f in
               zip(kfs[1:], [r for r in system.recorder.frames if r.keyframe][1:]))
    snap = system.smap.latest()
    for k in kfs:                                       # the published poses are the keyframes'
        assert np.array_equal(snap.keyframe_poses[k.kf_id], k.T_wc)
    assert sample_run.ate_cm(system) < 1.0
