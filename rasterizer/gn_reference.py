"""PyTorch oracle of the fused Gauss-Newton pass (the model is in rasterizer/gauss_newton.py): the
render's derivatives with respect to the pose increment by ``torch.func.jacfwd`` through the
reference render (rasterizer/reference.py) of the spheres moved by the increment
(``increment_points``), then residuals, Huber weights, statistics and the normal equations with
PyTorch ops. Dense and slow (O(pixels x spheres x 6)): small images only.

The residuals and statistics are formed in the render's dtype (float32 for float32 inputs, as the
tracker forms them), the weights and the normal equations in float64.
"""
from __future__ import annotations

import numpy as np
import torch

from .point_motion import point_motion
from .reference import render_reference

N_PARAMS = 8                             # 6 pose + log gain + bias
N_TRI = N_PARAMS * (N_PARAMS + 1) // 2   # values of H's upper triangle
PACKED_SIZE = N_TRI + N_PARAMS + 6       # + g, cost, l1, 4 counts (kGnValues in csrc/gn_math.h)
_TRI = torch.triu_indices(N_PARAMS, N_PARAMS)


def increment_points(means: torch.Tensor, delta: torch.Tensor, pivot_z: float) -> torch.Tensor:
    """(N, 3) camera-frame points moved by the pose increment delta (6,) = (w rad, t m):
    X' = R(w) (X - p) + p + t with p = (0, 0, pivot_z). Computed as X + (R - I)(X - p) + t, so
    delta = 0 returns ``means`` bit for bit; differentiable in delta (torch.func too)."""
    d = delta.to(means.device, means.dtype)
    zero = torch.zeros((), dtype=d.dtype, device=d.device)
    w = torch.stack([torch.stack([zero, -d[2], d[1]]), torch.stack([d[2], zero, -d[0]]),
                     torch.stack([-d[1], d[0], zero])])
    r_minus_i = torch.linalg.matrix_exp(w) - torch.eye(3, dtype=d.dtype, device=d.device)
    p = torch.zeros(3, dtype=means.dtype, device=means.device)
    p[2] = pivot_z
    return means + (means - p) @ r_minus_i.T + d[3:]


def observation_rows(obs_color: torch.Tensor, obs_depth: torch.Tensor, K: torch.Tensor,
                     pivot_z: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The observation's pose rows (csrc/gn_math.h obs_gradient, point_motion): per pixel and
    channel (colour x3, depth) -grad obs . (du, dv), plus dz for the depth, for the surface point
    at the observed depth, in float64. Gradients are central differences over the two neighbours
    of an axis with valid depth (> 0) inside the image, one-sided with one. Returns rows
    (H, W, 4, 6) and ok (H, W) bool (valid depth and a usable neighbour on both axes)."""
    oc, od = obs_color.double(), obs_depth.double()
    img = torch.cat([oc, od.unsqueeze(-1)], -1)                    # (H, W, 4)
    h, w = od.shape
    fx, fy, cx, cy = (float(v) for v in (K[0, 0], K[1, 1], K[0, 2], K[1, 2]))
    good = od > 0
    grads, ok = [], good
    for dim in (1, 0):                                             # u (columns), then v (rows)
        n = od.shape[dim]

        def shifted(t, k, dim=dim, n=n):   # t[.., i + k, ..] along dim; False / 0 outside
            idx = torch.arange(n, device=t.device) + k
            inside = (idx >= 0) & (idx < n)
            taken = t.index_select(dim, idx.clamp(0, n - 1))
            shape = [1] * t.dim()
            shape[dim] = n
            return taken, inside.view(shape)

        g_lo, in_lo = shifted(good, -1)
        g_hi, in_hi = shifted(good, 1)
        lo, hi = g_lo & in_lo, g_hi & in_hi
        v_lo = torch.where(lo.unsqueeze(-1), shifted(img, -1)[0], img)
        v_hi = torch.where(hi.unsqueeze(-1), shifted(img, 1)[0], img)
        scale = torch.where(lo & hi, 0.5, 1.0).to(img.dtype).unsqueeze(-1)
        grads.append(scale * (v_hi - v_lo))
        ok = ok & (lo | hi)
    gu, gv = grads
    z = torch.where(ok, od, torch.ones_like(od))
    xn = ((torch.arange(w, dtype=od.dtype, device=od.device) - cx) / fx).view(1, w).expand(h, w)
    yn = ((torch.arange(h, dtype=od.dtype, device=od.device) - cy) / fy).view(h, 1).expand(h, w)
    iz, rz = 1.0 / z, (z - pivot_z) / z

    def dense(m):    # point_motion's None / float entries as (H, W) tensors
        return torch.zeros_like(z) if m is None else (m if torch.is_tensor(m) else torch.full_like(z, m))

    du, dv, dz = zip(*(tuple(map(dense, point_motion(k, xn, yn, z, iz, rz, fx, fy))) for k in range(6)))
    rows = torch.stack([-(gu * du[k].unsqueeze(-1) + gv * dv[k].unsqueeze(-1)) for k in range(6)], -1)
    rows[..., 3, :] += torch.stack(dz, -1)
    return rows, ok


_TRIU = np.triu_indices(N_PARAMS)   # H's packed order, built once


def unpack(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The normal equations of a packed result (PACKED_SIZE,) on the CPU: (H (8, 8) symmetric,
    g (8,), cost ()), in its dtype. Built in NumPy: a handful of PyTorch index operations per LM
    iteration cost more host time than the 8x8 numbers are worth."""
    p = packed.numpy()
    H = np.empty((N_PARAMS, N_PARAMS), dtype=p.dtype)
    i, j = _TRIU
    H[i, j] = p[:N_TRI]
    H[j, i] = p[:N_TRI]
    return torch.from_numpy(H), torch.from_numpy(p[N_TRI:N_TRI + N_PARAMS].copy()), torch.tensor(p[N_TRI + N_PARAMS])


def pack(H: torch.Tensor, g: torch.Tensor, stats) -> torch.Tensor:
    """(PACKED_SIZE,) float64 in the kernels' layout from H (8, 8), g (8,) and the six values
    (cost, l1, n_valid, n_covered, n_depth_in, n_color_in) (0-d tensors or floats)."""
    st = torch.stack([torch.as_tensor(s, dtype=torch.float64, device=H.device) for s in stats])
    return torch.cat([H[_TRI[0], _TRI[1]].double(), g.double(), st])


def gauss_newton_reference(means, radii, colors, opacities, K, width, height, obs_color,
                           obs_depth, valid, background, settings, derivatives=True):
    """The packed result (PACKED_SIZE,) float64 of ``rasterizer.gauss_newton`` for the same
    inputs; ``settings``: the kernels' list (gauss_newton._settings). means etc. float32 or
    float64, K (3, 3), obs_color (H, W, 3), obs_depth (H, W), valid (H, W) bool,
    background (3,)."""
    gain, bias, dw, k0, k1, k2, k3, thr, floor, quad, tol, _eps, pivot_z, exposure, obs_w = settings
    K = K.to(means.device, means.dtype)

    def render(delta):
        moved = increment_points(means, delta, pivot_z)
        c, d, a = render_reference(moved, radii, colors, opacities, K, width, height, background)
        return (c, d), (c, d, a)

    delta0 = torch.zeros(6, dtype=means.dtype, device=means.device)
    if derivatives:
        (jc, jd), (c, d, a) = torch.func.jacfwd(render, has_aux=True)(delta0)
    else:
        _, (c, d, a) = render(delta0)
    oc, od = obs_color.to(c.dtype), obs_depth.to(c.dtype)
    covered = valid & (a > thr)
    r_c = (bias + c * gain) - oc
    r_d = d * dw - od * dw
    cov = covered.unsqueeze(-1)
    # masked by selection, not by a product: an uncovered pixel's NaN / inf observation stays out
    # (the kernels never read it)
    r = torch.where(cov, torch.cat([r_c, r_d.unsqueeze(-1)], -1).double(), 0.0)
    k = torch.tensor([k0, k1, k2, k3], dtype=torch.float64, device=r.device)
    w = k / torch.maximum(r.abs(), k)                  # Huber IRLS weights
    depth_ok = (d - od).abs() <= floor + quad * od * od
    color_ok = r_c.abs().mean(-1) <= tol
    stats = ((w * r * r).sum(), r.abs().sum(), valid.sum(), covered.sum(),
             (covered & depth_ok).sum(), (covered & color_ok).sum())
    H = torch.zeros(N_PARAMS, N_PARAMS, dtype=torch.float64, device=r.device)
    g = torch.zeros(N_PARAMS, dtype=torch.float64, device=r.device)
    if derivatives:
        J = torch.zeros(height, width, 4, N_PARAMS, dtype=torch.float64, device=r.device)
        J[..., :3, :6] = gain * jc.double()            # (H, W, 3, 6)
        J[..., 3, :6] = dw * jd.double()               # (H, W, 6)
        if obs_w > 0:
            rows, ok = observation_rows(obs_color, obs_depth, K, pivot_z)
            b = (obs_w * (ok & valid)).unsqueeze(-1).unsqueeze(-1).double()   # (H, W, 1, 1)
            rows[..., 3, :] *= dw
            J[..., :6] = torch.where(b > 0, (1 - b) * J[..., :6] + b * rows, J[..., :6])
        if exposure:
            J[..., :3, 6] = gain * c.double()          # d r_colour / d log gain
            J[..., :3, 7] = 1.0                        # d r_colour / d bias
        J = torch.where(cov.unsqueeze(-1), J, 0.0)
        Jw = J * w.unsqueeze(-1)
        H = torch.einsum("hwci,hwcj->ij", Jw, J)
        g = torch.einsum("hwci,hwc->i", Jw, r)
    return pack(H, g, stats)
