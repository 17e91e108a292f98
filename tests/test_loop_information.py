"""A loop or bridge edge carries its own measurement's information (slam/loop/information.py):
ICP's normal equations scaled by the residual variance, moved from the solver's left step to the
body frame of the measured pose; shaped like the equations (weak where the geometry does not fix
the pose); the pose graph and the chi-square bounds use it."""
import numpy as np
import pytest

from slam.geometry import adjoint, se3_exp, se3_log
from slam.loop.icp import icp, point_map
from slam.loop.information import NOISE_INFLATION, chi2_quantile, edge_error, measurement_information


def test_se3_log_inverts_the_exponential_and_the_adjoint_moves_a_left_step_to_the_body():
    gtsam = pytest.importorskip("gtsam")
    rng = np.random.default_rng(0)
    T = se3_exp(np.r_[0.3, -0.2, 0.5, 0.4, 1.0, -0.3])
    assert np.allclose(se3_log(T), gtsam.Pose3.Logmap(gtsam.Pose3(T)), atol=1e-12)
    for _ in range(5):
        xi = rng.normal(size=6) * 1e-2
        assert np.allclose(se3_log(se3_exp(xi)), xi, atol=1e-12)
        assert np.allclose(se3_exp(xi), gtsam.Pose3.Expmap(xi).matrix(), atol=1e-12)
        # Exp(Ad_T xi) T == T Exp(xi)
        assert np.allclose(se3_exp(adjoint(T) @ xi) @ T, T @ se3_exp(xi), atol=1e-9)


def test_the_body_frame_information_has_the_quadratic_form_of_the_left_normal_equations():
    rng = np.random.default_rng(1)
    B = rng.normal(size=(6, 6))
    H, var = B @ B.T + np.eye(6), 2.5e-5
    T = se3_exp(np.r_[0.1, 0.4, -0.2, 0.3, -0.1, 0.8])
    info = measurement_information(H, var, T)
    for _ in range(5):
        left = rng.normal(size=6) * 1e-6
        body = se3_log(np.linalg.inv(T) @ se3_exp(left) @ T)          # T Exp(body) = Exp(left) T
        assert np.isclose(body @ info @ body, left @ H @ left / (var * NOISE_INFLATION), rtol=1e-4)


def _ridge_scene(shift: np.ndarray):
    """Depth of a wall 2 m away with ridges running along x (nothing fixes x), seen from the origin
    (old) and from a camera moved by ``shift`` (new): (source points of the new view, old depth, K,
    the new view's pose in the old camera)."""
    w, h = 80, 60
    K = np.array([[60.0, 0, w / 2], [0, 60.0, h / 2], [0, 0, 1]])
    u, v = np.meshgrid(np.arange(w), np.arange(h))
    y = (v - K[1, 2]) / K[1, 1] * 2.0

    def depth(dy: float, dz: float) -> np.ndarray:      # z of the surface z = 2 + 0.1 sin(8 (y + dy)), roughly
        yy = y + dy
        return (2.0 + 0.1 * np.sin(8.0 * yy) - dz).astype(np.float32)

    T = np.eye(4)
    T[:3, 3] = shift
    new_depth = depth(shift[1], shift[2])
    src = point_map(new_depth, K)[::2, ::2].reshape(-1, 3)
    return src, depth(0.0, 0.0), K, T


def test_icp_information_is_weak_where_the_geometry_does_not_fix_the_pose():
    """A wall with ridges along x: ICP's information (from its normal equations) is hundreds of
    times weaker along x than across the ridges, and its strongest translation is along the depth."""
    src, dst, K, truth = _ridge_scene(np.array([0.0, 0.01, 0.005]))
    fit = icp(src, dst, K, np.eye(4), 10, 0.03, 0.005)
    info = measurement_information(fit.H, fit.residual_var, fit.T)
    t = info[3:, 3:]
    assert fit.residual_var > 0
    assert t[0, 0] < 1e-2 * min(t[1, 1], t[2, 2]), np.diag(t)
    assert np.argmax(np.diag(t)) == 2


def test_a_measurement_without_usable_equations_has_no_information():
    assert measurement_information(np.eye(6), 0.0, np.eye(4)) is None
    assert measurement_information(np.full((6, 6), np.nan), 1e-4, np.eye(4)) is None


def test_the_edge_error_is_gtsams_between_factor_error():
    gtsam = pytest.importorskip("gtsam")
    T_a, T_b = se3_exp(np.r_[0.1, 0.2, 0.3, 1.0, 0.0, 0.5]), se3_exp(np.r_[-0.2, 0.1, 0.0, 1.2, 0.3, 0.4])
    T_ab = np.linalg.inv(T_a) @ T_b @ se3_exp(np.r_[0.01, -0.02, 0.005, 0.03, 0.01, -0.02])
    f = gtsam.BetweenFactorPose3(0, 1, gtsam.Pose3(T_ab), gtsam.noiseModel.Unit.Create(6))
    values = gtsam.Values()
    values.insert(0, gtsam.Pose3(T_a))
    values.insert(1, gtsam.Pose3(T_b))
    assert np.allclose(f.unwhitenedError(values), edge_error(T_a, T_b, T_ab), atol=1e-9)


@pytest.mark.parametrize("p, dof", [(0.99, 6), (0.5, 6), (0.95, 12)])
def test_chi2_quantile_inverts_the_closed_form_cdf(p, dof):
    x = chi2_quantile(p, dof)
    h = x / 2.0
    cdf = 1.0 - np.exp(-h) * sum(h ** i / np.prod(np.arange(1, i + 1)) for i in range(dof // 2))
    assert np.isclose(cdf, p, atol=1e-9)
