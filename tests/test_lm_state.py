"""The device LM (rasterizer.lm_state) on the CPU: its bookkeeping phases against the NumPy oracle
and against the render-difference oracle's step (tests/render_oracle.py damped_step,
slam.geometry), its evaluation against rasterizer.gauss_newton at the transformed means, a whole
LM from a perturbed pose, and the same LM on the reference backend (the PyTorch / NumPy oracles)
against the kernels."""
import numpy as np
import pytest
import torch

import rasterizer
from rasterizer import lm_state as L
from rasterizer_scenes import (
    GN_SETTINGS,
    LM_ROBUST,
    LM_SETTINGS,
    assert_gn_close,
    gn_observation,
    lm_eval_inputs,
    lm_pose,
    lm_random_state,
    random_scene,
)
from render_oracle import damped_step
from slam.geometry import pivot_increment, transform_points


def settings(exposure=True, **kw):
    return L.lm_settings(**dict(LM_SETTINGS, **kw), exposure=exposure)


@pytest.mark.parametrize("exposure", [True, False])
@pytest.mark.parametrize("phase", [L.BEGIN, L.START, L.PROPOSE, L.ACCEPT])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_phase_matches_oracle(phase, exposure, seed):
    rng = np.random.default_rng(seed)
    s = lm_random_state(rng, exposure)
    if phase == L.ACCEPT:   # seeds 0, 2 accept, 1, 3 reject; step sizes around converged_step
        s[L.TRIAL + L.COST] = s[L.CUR + L.COST] + (0.5 if seed % 2 else -0.5)
        s[L.STEP_MAX] = 1e-6 if seed == 2 else 1e-3
        s[L.REJECTIONS] = 2.0 if seed == 3 else 0.0
    ref = s.copy()
    L.lm_phase_reference(ref, phase, settings(exposure))
    got = torch.from_numpy(s.copy())
    L.lm_phase(got, phase, settings(exposure))
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-10, atol=1e-12)
    assert not np.array_equal(ref, s), "the phase changed nothing"


@pytest.mark.parametrize("phases", [[L.ACCEPT, L.PROPOSE], [L.START, L.PROPOSE], [L.ACCEPT, L.BEGIN],
                                    [L.ACCEPT, L.BEGIN, L.PROPOSE, L.ACCEPT]])
@pytest.mark.parametrize("seed", [0, 1])
def test_phases_in_one_call_match_one_by_one(phases, seed):
    """A call with several phases applies them in order (the tracker queues the phases between two
    evaluations as one call): the same state as one call per phase through the oracle."""
    s = lm_random_state(np.random.default_rng(10 + seed), True)
    s[L.TRIAL + L.COST] = s[L.CUR + L.COST] + (0.5 if seed else -0.5)   # seed 0 accepts, 1 rejects
    s[L.STEP_MAX] = 1e-3
    trial = lm_pose()                                  # a rigid trial pose (the random state's is 0)
    trial[:3, 3] += 0.05
    s[L.TRIAL_T:L.TRIAL_T + 16] = trial.reshape(16)
    ref = s.copy()
    for phase in phases:
        L.lm_phase_reference(ref, phase, settings())
    for backend in ("cpu", "reference"):
        got = torch.from_numpy(s.copy())
        L.lm_phase(got, phases, settings(), backend=backend)
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("phases", [[], [L.ACCEPT] * (L.MAX_PHASES + 1), [L.ACCEPT, 7], -1])
def test_phase_lists_out_of_range_are_refused(phases):
    state = torch.from_numpy(lm_random_state(np.random.default_rng(0), True))
    with pytest.raises(ValueError, match="LM phases"):
        L.lm_phase(state, phases, settings())


def test_done_state_is_left_alone():
    s = lm_random_state(np.random.default_rng(5), done=1.0)
    for phase in (L.START, L.PROPOSE, L.ACCEPT):
        got = torch.from_numpy(s.copy())
        L.lm_phase(got, phase, settings())
        assert np.array_equal(got.numpy(), s)


def test_accept_and_reject_rules():
    s = lm_random_state(np.random.default_rng(6))
    st = settings()
    t = torch.from_numpy(s.copy())
    t[L.TRIAL + L.COST] = t[L.CUR + L.COST] + 1.0          # worse: rejected, damping up
    for k in range(LM_SETTINGS["attempts"]):
        assert t[L.DONE] == 0
        L.lm_phase(t, L.ACCEPT, st)
    assert t[L.DONE] == 1 and t[L.REJECTIONS] == LM_SETTINGS["attempts"]
    assert t[L.DAMPING] == pytest.approx(s[L.DAMPING] * 10.0 ** LM_SETTINGS["attempts"])
    assert np.array_equal(t[L.T:L.T + 16].numpy(), s[L.T:L.T + 16])      # pose kept
    t = torch.from_numpy(s.copy())
    t[L.STEP_MAX] = 1e-3
    L.lm_phase(t, L.ACCEPT, st)                              # equal cost counts as better
    assert t[L.DONE] == 0 and np.array_equal(t[L.T:L.T + 16].numpy(), s[L.TRIAL_T:L.TRIAL_T + 16])
    assert t[L.DAMPING] == pytest.approx(max(s[L.DAMPING] * 0.3, 1e-6))


@pytest.mark.parametrize("exposure", [True, False])
def test_propose_is_the_oracles_step(exposure):
    """The device step equals the render-difference oracle's damped_step +
    slam.geometry.pivot_increment."""
    s = lm_random_state(np.random.default_rng(7), exposure)
    got = torch.from_numpy(s.copy())
    L.lm_phase(got, L.PROPOSE, settings(exposure))
    res = rasterizer.GaussNewtonResult.unpack(torch.from_numpy(s[L.CUR:L.TRIAL]), exposure)
    step = damped_step(res.H, res.g, s[L.DAMPING])
    T_new = pivot_increment(step[:6], s[L.PIVOT]) @ s[L.T:L.T + 16].reshape(4, 4)
    np.testing.assert_allclose(got[L.TRIAL_T:L.TRIAL_T + 16].numpy().reshape(4, 4), T_new, rtol=1e-10, atol=1e-12)
    exp_new = s[L.EXP:L.EXP + 2] + (step[6:8] if exposure else 0.0)
    np.testing.assert_allclose(got[L.TRIAL_EXP:L.TRIAL_EXP + 2].numpy(), exp_new, rtol=1e-10, atol=1e-12)
    assert got[L.STEP_MAX] == pytest.approx(np.abs(step[:6]).max())


@pytest.mark.parametrize("obs_weight", [0.0, 0.5])
def test_evaluation_is_the_pass_at_the_trial_pose(obs_weight):
    scene = random_scene(300, 64, 48, seed=3)
    obs = gn_observation(scene, seed=3)
    inputs = lm_eval_inputs(scene, obs, "cpu")
    s = np.zeros(L.STATE_SIZE)
    T = lm_pose()
    s[L.TRIAL_T:L.TRIAL_T + 16] = T.reshape(16)
    s[L.TRIAL_EXP:L.TRIAL_EXP + 2] = (np.log(GN_SETTINGS["gain"]), GN_SETTINGS["bias"])
    s[L.PIVOT] = GN_SETTINGS["pivot_z"]
    state = torch.from_numpy(s)
    L.gauss_newton_lm(*inputs, state, level=0, capacity=1, obs_weight=obs_weight, **LM_ROBUST)
    got = rasterizer.GaussNewtonResult.unpack(state[L.TRIAL:].clone())
    means_c = transform_points(torch.from_numpy(T).float(), inputs[0])
    want = rasterizer.GaussNewtonResult.unpack(rasterizer.gauss_newton(
        means_c, *inputs[1:7], *inputs[7:], **GN_SETTINGS, obs_weight=obs_weight, backend="cpu"))
    assert_gn_close(got, want, rel=1e-5, rel_cost=1e-6, counts=1)
    assert want.n_covered > 300
    before = state.clone()
    state[L.DONE] = 1.0                                     # a finished level: nothing is evaluated
    L.gauss_newton_lm(*inputs, state, level=0, capacity=1, **LM_ROBUST)
    assert torch.equal(state[L.TRIAL:], before[L.TRIAL:])


@pytest.mark.parametrize("obs_weight", [0.0, 0.5])
def test_levels_converge_from_a_perturbed_pose(obs_weight):
    """BEGIN, evaluate, START, then PROPOSE / evaluate / ACCEPT: from 2 cm / 1 degree off, the pose
    the observation was rendered at (GN_DELTA about the pivot) is found, with the exact Jacobian
    and with the observation blend."""
    scene = random_scene(1500, 96, 72, seed=11)
    delta = (0.004, -0.006, 0.003, 0.01, -0.008, 0.012)
    obs = gn_observation(scene, delta=delta, seed=11, noise=(0.01, 0.005), holes=0.05)
    inputs = lm_eval_inputs(scene, obs, "cpu")
    T_true = pivot_increment(np.array(delta), GN_SETTINGS["pivot_z"]) @ lm_pose()
    state = L.new_state(lm_pose(), "cpu")
    state[L.PIVOT] = GN_SETTINGS["pivot_z"]
    st = settings(converged_step=1e-7)
    L.lm_phase(state, L.BEGIN, st)
    L.gauss_newton_lm(*inputs, state, level=0, capacity=1, obs_weight=obs_weight, **LM_ROBUST)
    L.lm_phase(state, L.START, st)
    cost0 = float(state[L.CUR + L.COST])
    for _ in range(15):
        L.lm_phase(state, L.PROPOSE, st)
        L.gauss_newton_lm(*inputs, state, level=0, capacity=1, obs_weight=obs_weight, **LM_ROBUST)
        L.lm_phase(state, L.ACCEPT, st)
    T = state[L.T:L.T + 16].numpy().reshape(4, 4)
    assert float(state[L.CUR + L.COST]) < 0.5 * cost0
    assert np.abs(T[:3, 3] - T_true[:3, 3]).max() < 2e-3          # 2 mm of 1-2 cm
    assert state[L.PASSES] == 1 + state[L.TRIALS] and state[L.TRIALS] >= 3


def test_the_reference_backend_runs_the_same_lm():
    """backend='reference' (the evaluation by the PyTorch oracle of the pass, the phases by the
    NumPy oracle, no compiled code) runs the same LM as the CPU kernels, with the observation
    blend: the same trials and the same pose to 1e-6 (measured: 3e-8) from 2 cm / 1 degree off, on
    a small scene (the oracle is dense and slow)."""
    obs_weight = 0.5
    scene = random_scene(150, 32, 24, seed=11)
    delta = (0.004, -0.006, 0.003, 0.01, -0.008, 0.012)
    obs = gn_observation(scene, delta=delta, seed=11, noise=(0.01, 0.005), holes=0.05)
    inputs = lm_eval_inputs(scene, obs, "cpu")
    st = settings(converged_step=1e-7)
    states = {}
    for backend in ("cpu", "reference"):
        state = L.new_state(lm_pose(), "cpu")
        state[L.PIVOT] = GN_SETTINGS["pivot_z"]
        L.lm_phase(state, L.BEGIN, st, backend=backend)
        L.gauss_newton_lm(*inputs, state, level=0, capacity=1, obs_weight=obs_weight, backend=backend, **LM_ROBUST)
        L.lm_phase(state, L.START, st, backend=backend)
        for _ in range(6):
            L.lm_phase(state, L.PROPOSE, st, backend=backend)
            L.gauss_newton_lm(*inputs, state, level=0, capacity=1, obs_weight=obs_weight, backend=backend,
                              **LM_ROBUST)
            L.lm_phase(state, L.ACCEPT, st, backend=backend)
        states[backend] = state.numpy()
    a, b = states["cpu"], states["reference"]
    assert a[L.TRIALS] == b[L.TRIALS] and a[L.PASSES] == b[L.PASSES] and a[L.TRIALS] >= 3
    np.testing.assert_allclose(b[L.T:L.T + 16], a[L.T:L.T + 16], atol=1e-6)
    np.testing.assert_allclose(b[L.EXP:L.EXP + 2], a[L.EXP:L.EXP + 2], atol=1e-5)
    assert b[L.CUR + L.COST] == pytest.approx(a[L.CUR + L.COST], rel=1e-5)


def test_the_reference_phases_do_not_move_on_a_singular_system():
    """A singular damped system (no evidence at all): no move, as the kernel's zero pivot (the
    NumPy oracle's solve raised before)."""
    s = _diagonal_state([0.0] * 8, [0.0] * 8)
    s[L.DAMPING] = 1e-3
    ref = s.copy()
    L.lm_phase_reference(ref, L.PROPOSE, settings(min_diagonal=0.0))
    got = torch.from_numpy(s.copy())
    L.lm_phase(got, L.PROPOSE, settings(min_diagonal=0.0))
    np.testing.assert_array_equal(got.numpy(), ref)
    assert np.array_equal(ref[L.TRIAL_T:L.TRIAL_T + 16], s[L.T:L.T + 16]) and ref[L.STEP_MAX] == 0.0


def _diagonal_state(h_diag, g):
    """An LM state whose CUR normal equations are diag(h_diag), g (8 each), damping 1e-3."""
    from rasterizer.gn_reference import N_TRI
    s = lm_random_state(np.random.default_rng(8))
    s[L.CUR:L.CUR + N_TRI] = np.diag(np.asarray(h_diag, dtype=np.float64))[np.triu_indices(8)]
    s[L.CUR + L.G:L.CUR + L.G + 8] = g
    s[L.DAMPING] = 1e-3
    return s


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_propose_keeps_the_exposure_in_its_plausible_range(sign):
    """A frame whose covered map is nearly black has a log-gain row of ~0, and its step is huge (it
    overflowed exp() in the render-difference solver): the trial exposure is clamped to
    +-LOG_GAIN_MAX, +-BIAS_MAX, by the kernel as by the NumPy oracle and clamp_exposure; the pose
    step is kept."""
    s = _diagonal_state([1.0] * 6 + [1e-12, 1e-12], [0.01, 0.0, 0.0, 0.0, 0.0, 0.0, sign, -sign])
    ref = s.copy()
    L.lm_phase_reference(ref, L.PROPOSE, settings())
    got = torch.from_numpy(s.copy())
    L.lm_phase(got, L.PROPOSE, settings())
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-10, atol=1e-12)
    want = (-sign * L.LOG_GAIN_MAX, sign * L.BIAS_MAX)
    assert tuple(got[L.TRIAL_EXP:L.TRIAL_EXP + 2].tolist()) == want
    step = damped_step(np.diag([1.0] * 6 + [1e-12, 1e-12]), s[L.CUR + L.G:L.CUR + L.G + 8], 1e-3)
    assert abs(step[6]) > 1e9 and L.clamp_exposure(*(s[L.EXP:L.EXP + 2] + step[6:8])) == want
    assert got[L.STEP_MAX] == pytest.approx(0.01 / 1.001)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_propose_does_not_move_on_non_finite_normal_equations(bad):
    """NaN or inf in the normal equations (non-finite data): no move, in the kernel, the NumPy
    oracle and the render-difference oracle's step; the trial is the current pose and exposure,
    never a NaN pose."""
    s = _diagonal_state([1.0] * 8, [0.01, bad, 0.0, 0.0, 0.0, 0.0, 0.1, 0.1])
    ref = s.copy()
    L.lm_phase_reference(ref, L.PROPOSE, settings())
    got = torch.from_numpy(s.copy())
    L.lm_phase(got, L.PROPOSE, settings())
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-10, atol=1e-12)
    assert np.array_equal(got[L.TRIAL_T:L.TRIAL_T + 16].numpy(), s[L.T:L.T + 16])
    assert np.array_equal(got[L.TRIAL_EXP:L.TRIAL_EXP + 2].numpy(), s[L.EXP:L.EXP + 2])
    assert got[L.STEP_MAX] == 0.0
    assert not damped_step(np.eye(8), s[L.CUR + L.G:L.CUR + L.G + 8], 1e-3).any()
