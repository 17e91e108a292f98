"""A small generated world for tracker tests on the CPU: a textured wall with two boxes in front
(spheres), the camera's intrinsics at 40x30 pixels (``intrinsics`` at any size), poses T0, T1, T2
about 2 cm / 0.3 deg apart, and the clean frames rendered there (``make_world``; ``width=20``: the
same world in fewer, larger spheres at 20x15, for the slow PyTorch oracles); the test config
(``tracking_config``)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from slam.config import load_config
from slam.geometry import invert, pivot_increment
from slam.map.snapshot import MapSnapshot
from slam.observation import Observation


def intrinsics(width: int, height: int) -> np.ndarray:
    """(3, 3) the world's camera at ``width`` x ``height`` px: f = 0.9 width, centred."""
    f = 0.9 * width
    return np.array([[f, 0.0, (width - 1) / 2], [0.0, f, (height - 1) / 2], [0.0, 0.0, 1.0]])


W, H = 40, 30
K = intrinsics(W, H)
DT = 1 / 30                                         # s between frames
MOTION = np.array([0.003, -0.004, 0.002, 0.01, -0.005, 0.008])   # rad, m per frame about z = 2 m
T0 = np.eye(4)
T1 = invert(pivot_increment(MOTION, 2.0))           # 2.0 cm and 0.3 deg from T0
T2 = invert(pivot_increment(2 * MOTION, 2.0))


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One CPU thread for a module that imports this fixture: at 40x30 the kernels' OpenMP threads
    wait for each other more than they work (a render took 12 ms on two busy cores, 1.5 ms on one)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def frame_obs(color: np.ndarray, depth: np.ndarray) -> Observation:
    """A frame as the system uploads one (``Observation.from_numpy``: the input boundary), with the
    world's intrinsics at the frame's size."""
    h, w = depth.shape
    return Observation.from_numpy(color, depth, intrinsics(w, h), torch.device("cpu"))


def make_world(poses=(T0, T1, T2), width: int = W, jitter: float = 0.0):
    """(the map MapSnapshot, its dark twin (colours x 1e-4), the clean frames at ``poses`` as
    (colour (h, w, 3) uint8, depth (h, w) float32, 0 where the map does not cover)). ``width``: the
    frames' width in px (height 3/4 of it); the spheres' spacing and radii scale with W / width
    (1234 spheres at 40x30, 311 at 20x15). ``jitter``: the spheres' depths spread uniformly over
    this many metres (0: each surface's spheres at one depth, whose blend order flips under tiny
    rotations of a camera facing the wall: a cost that jumps at the sub-pixel scale, which the
    accuracy tests avoid)."""
    g = torch.Generator().manual_seed(0)
    coarse = W / width
    width, height = int(width), int(width * H // W)
    Kw = intrinsics(width, height)
    means, colors = [], []
    # (z, x range, y range, spacing): the wall, then two boxes in front
    for z, (x0, x1), (y0, y1), s in ((2.2, (-1.5, 1.5), (-1.1, 1.1), 0.08), (1.3, (-0.5, 0.0), (-0.3, 0.2), 0.05),
                                     (1.6, (0.2, 0.6), (-0.1, 0.5), 0.06)):
        s *= coarse
        X, Y = torch.meshgrid(torch.arange(x0, x1, s), torch.arange(y0, y1, s), indexing="xy")
        p = torch.stack([X.reshape(-1), Y.reshape(-1), torch.full((X.numel(),), z)], 1)
        c = torch.stack([0.5 + 0.4 * torch.sin(7 * p[:, 0] + 3 * p[:, 1] + k) for k in (0.0, 2.0, 4.0)], 1)
        means.append(p)
        colors.append((c + 0.1 * torch.rand(c.shape, generator=g)).clamp(0, 1))
    means, colors = torch.cat(means), torch.cat(colors)
    if jitter > 0:
        means[:, 2] += jitter * (torch.rand(means.shape[0], generator=torch.Generator().manual_seed(1)) - 0.5)
    radii = 0.05 * coarse * means[:, 2] / 2.2
    opacities = torch.full((means.shape[0],), 0.95)
    snap = MapSnapshot(means, radii, colors, opacities, 1)
    dark = MapSnapshot(means, radii, colors * 1e-4, opacities, 2)

    def render(T_wc):
        out = snap.render(torch.from_numpy(Kw).float(), width, height, T_wc=T_wc, backend="cpu")
        color = (out.color * 255).round().to(torch.uint8).numpy()
        return color, torch.where(out.alpha > 0.5, out.depth, 0.0).numpy().astype(np.float32)

    return snap, dark, [render(T) for T in poses]


def tracking_config(*extra: str, backend: str = "cpu"):
    """On the CPU with raster ``backend`` ('cpu': the kernels, 'reference': the PyTorch oracles),
    sequential (a relocalisation attempt runs inline), with fewer iterations and relocalisation
    candidates than shipped (tests stay fast); ``extra``: more overrides."""
    return load_config("default.yaml", [
        "system.device=cpu", "system.threaded=false", f"raster.backend={backend}",
        "tracking.iters=4", "tracking.recovery_iters=6",
        "relocalise.top_k=1", "relocalise.refine_k=1", "relocalise.pnp_refine=1", *extra])
