"""The device LM (rasterizer.lm_state) on CUDA: the one-thread phases against the NumPy oracle, the
evaluation's capped binning (pair count and overflow recorded on the device) against the CPU
evaluation, and the fused solver's captured CUDA graphs against the same work queued one kernel
at a time (slam.tracking.fused).

Skipped without CUDA (CI); run on a GPU machine with scripts/gpu_check.sh.
"""
import dataclasses

import numpy as np
import pytest
import torch

import rasterizer
from rasterizer import lm_state as L
from rasterizer_scenes import (
    LM_ROBUST,
    LM_SETTINGS,
    assert_gn_close,
    gn_observation,
    lm_eval_inputs,
    lm_pose,
    lm_random_state,
    random_scene,
    world_means,
)

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="CUDA is not available: the CUDA device-LM tests need a GPU (scripts/gpu_check.sh)")


@pytest.mark.parametrize("exposure", [True, False])
@pytest.mark.parametrize("phase", [L.BEGIN, L.START, L.PROPOSE, L.ACCEPT])
@pytest.mark.parametrize("seed", [0, 1])
def test_cuda_phase_matches_oracle(phase, exposure, seed):
    s = lm_random_state(np.random.default_rng(seed), exposure)
    if phase == L.ACCEPT:
        s[L.TRIAL + L.COST] = s[L.CUR + L.COST] + (0.5 if seed else -0.5)
        s[L.STEP_MAX] = 1e-3
    ref = s.copy()
    st = L.lm_settings(**LM_SETTINGS, exposure=exposure)
    L.lm_phase_reference(ref, phase, st)
    got = torch.from_numpy(s.copy()).cuda()
    L.lm_phase(got, phase, st)
    np.testing.assert_allclose(got.cpu().numpy(), ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_cuda_phases_in_one_launch(seed):
    s = lm_random_state(np.random.default_rng(seed), True)
    s[L.TRIAL + L.COST] = s[L.CUR + L.COST] + (0.5 if seed else -0.5)
    s[L.STEP_MAX] = 1e-3
    trial = lm_pose()                                  # a rigid trial pose (the random state's is 0)
    trial[:3, 3] += 0.05
    s[L.TRIAL_T:L.TRIAL_T + 16] = trial.reshape(16)
    st = L.lm_settings(**LM_SETTINGS, exposure=True)
    ref = s.copy()
    for phase in (L.ACCEPT, L.BEGIN, L.PROPOSE):
        L.lm_phase_reference(ref, phase, st)
    got = torch.from_numpy(s.copy()).cuda()
    L.lm_phase(got, [L.ACCEPT, L.BEGIN, L.PROPOSE], st)
    np.testing.assert_allclose(got.cpu().numpy(), ref, rtol=1e-10, atol=1e-12)


def _eval_state(capacity, inputs, obs_weight=0.0):
    s = L.new_state(np.eye(4), "cpu")
    s[L.TRIAL_T:L.TRIAL_T + 16] = torch.from_numpy(lm_pose().reshape(16))
    s[L.TRIAL_EXP:L.TRIAL_EXP + 2] = torch.tensor([0.1, -0.02], dtype=torch.float64)
    s[L.PIVOT] = 2.0
    state = s.to(inputs[0].device)
    L.gauss_newton_lm(*inputs, state, level=1, capacity=capacity, obs_weight=obs_weight, **LM_ROBUST)
    return state.cpu()


@pytest.mark.parametrize("n, w, h", [(300, 64, 48), (20000, 320, 240)])
def test_cuda_evaluation_and_pair_room(n, w, h):
    scene = random_scene(n, w, h, seed=n)
    obs = gn_observation(scene, seed=5)
    cpu = _eval_state(1, lm_eval_inputs(scene, obs, "cpu"))
    inputs = lm_eval_inputs(scene, obs, "cuda")
    probe = _eval_state(1, inputs)                    # no room: the count is still recorded
    m = int(probe[L.MAX_PAIRS + 1])
    assert probe[L.OVERFLOW] == 1 and m > n // 4
    exact = _eval_state(m, inputs)                    # room for exactly m pairs: no overflow
    ample = _eval_state(4 * m + 1000, inputs)
    assert exact[L.OVERFLOW] == 0 and ample[L.OVERFLOW] == 0 and exact[L.MAX_PAIRS + 1] == m
    assert _eval_state(m - 1, inputs)[L.OVERFLOW] == 1

    def unpack(s):
        return rasterizer.GaussNewtonResult.unpack(s[L.TRIAL:].clone())

    assert_gn_close(unpack(exact), unpack(ample), rel=1e-6, rel_cost=1e-7, counts=0)
    assert_gn_close(unpack(ample), unpack(cpu), rel=1e-4, rel_cost=1e-5, counts=max(2, w * h // 10000))


def test_cuda_evaluation_observation_term():
    # the pivot of the observation rows comes from the state on CUDA as on the CPU
    scene = random_scene(3000, 160, 120, seed=8)
    obs = gn_observation(scene, seed=8)
    cpu = _eval_state(1, lm_eval_inputs(scene, obs, "cpu"), obs_weight=0.5)
    cuda = _eval_state(1 << 20, lm_eval_inputs(scene, obs, "cuda"), obs_weight=0.5)
    exact = _eval_state(1 << 20, lm_eval_inputs(scene, obs, "cuda"))

    def unpack(s):
        return rasterizer.GaussNewtonResult.unpack(s[L.TRIAL:].clone())

    assert_gn_close(unpack(cuda), unpack(cpu), rel=1e-4, rel_cost=1e-5, counts=2)
    assert unpack(cuda).cost == unpack(exact).cost and not torch.equal(unpack(cuda).H, unpack(exact).H)


# ------------------------------------------------------------------ the solver's CUDA graphs
def _snapshot(scene, version, n=None):
    from slam.map.snapshot import MapSnapshot
    k = slice(0, n)
    wm = world_means(scene, lm_pose())
    return MapSnapshot(wm[k].cuda(), scene["radii"][k].cuda(), scene["colors"][k].cuda(),
                       scene["opacities"][k].cuda(), version)


def _solvers():
    from slam.config import QualityConfig, TrackingConfig
    from slam.tracking.fused import FusedSolver
    cfg = TrackingConfig(iters=6, pyramid_levels=2)
    return (FusedSolver(cfg, QualityConfig(), "auto"),
            FusedSolver(dataclasses.replace(cfg, cuda_graph=False), QualityConfig(), "auto"))


def _pyramid(scene, obs):
    from slam.observation import Observation
    from slam.tracking.tracker import Levels
    o = Observation(obs[0].cuda(), torch.where(obs[2], obs[1], torch.zeros_like(obs[1])).cuda(), scene["K"])
    return Levels(o, 2)


def test_graph_replays_equal_the_eager_kernels():
    """Frames 1-2 run eagerly (then capture), 3-4 replay; a bigger map re-captures; a room too small
    for the pairs is detected and the frame redone: every frame's result equals the eager one."""
    scene = random_scene(6000, 160, 120, seed=21)
    obs = gn_observation(scene, seed=21)
    pyr = _pyramid(scene, obs)
    graphed, eager = _solvers()
    T0 = np.linalg.inv(lm_pose())
    starts = []
    for k in range(8):
        T = T0.copy()
        T[:3, 3] += 0.004 * np.array([k, -k, 0.5 * k])
        starts.append(T)
    snaps = [_snapshot(scene, 1, 4000)] * 4 + [_snapshot(scene, 2)] * 4
    for i, (snap, T) in enumerate(zip(snaps, starts)):
        if i == 7:
            graphed.room = {0: 64, 1: 64}       # far too small: overflow, redo
        a, pa = graphed.optimise(pyr, snap, T, 6)
        b, pb = eager.optimise(pyr, snap, T, 6)
        assert pa == pb and a.iters == b.iters, (i, pa, pb)
        np.testing.assert_allclose(a.T_wc, b.T_wc, atol=1e-6)
        assert a.loss == pytest.approx(b.loss, rel=1e-5)
        if i == 6:
            assert graphed.graphs.captures == 2   # once per map size: after frames 1 and 5
    # a result computed with too little room is wrong, so the pairs of its redo can outgrow the
    # room it suggested once more
    assert 1 <= graphed.redone <= 2 and graphed.room[0] > 64
