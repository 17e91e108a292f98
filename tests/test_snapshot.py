"""``MapSnapshot.render``: the one way to render the map, from any thread and stream."""
import threading

import numpy as np
import pytest
import torch

from slam.geometry import invert
from slam.map.render import render_spheres
from slam.map.snapshot import MapSnapshot

K = torch.tensor([[60.0, 0.0, 31.5], [0.0, 60.0, 23.5], [0.0, 0.0, 1.0]])
W, H = 64, 48


def _spheres(n: int, device) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    means = torch.rand(n, 3, generator=g) * torch.tensor([2.0, 1.5, 1.0]) - torch.tensor([1.0, 0.75, -1.5])
    radii = torch.full((n,), 0.05)
    colors = torch.rand(n, 3, generator=g)
    opac = torch.full((n,), 0.8)
    return tuple(t.to(device) for t in (means, radii, colors, opac))


def _pose() -> np.ndarray:
    T = np.eye(4)
    T[:3, 3] = [0.05, -0.02, 0.1]
    return T


def test_render_at_a_pose_is_the_rasterizer_at_its_inverse():
    snap = MapSnapshot(*_spheres(200, "cpu"), version=1)
    T_wc = _pose()
    out = snap.render(K, W, H, T_wc=T_wc, backend="cpu")
    ref = render_spheres(snap.means, snap.radii, snap.colors, snap.opacities,
                         torch.as_tensor(invert(T_wc), dtype=torch.float32), K, W, H, backend="cpu")
    for a, b in zip(out, ref):
        assert torch.equal(a, b)
    assert out.alpha.max() > 0.5                                   # the spheres are in view
    via_cw = snap.render(K, W, H, T_cw=invert(T_wc), backend="cpu")
    assert torch.equal(via_cw.color, out.color)
    assert not out.color.requires_grad
    with pytest.raises(ValueError, match="exactly one"):
        snap.render(K, W, H, backend="cpu")
    with pytest.raises(ValueError, match="exactly one"):
        snap.render(K, W, H, T_wc=T_wc, T_cw=invert(T_wc), backend="cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (stream ordering); run by scripts/gpu_check.sh")
def test_render_on_another_stream_waits_for_the_mappers_event():
    """The 'mapper' writes the snapshot's tensors on its stream behind a long GPU sleep, records the
    ready event and publishes at once (no host sync); a 'tracker' thread renders it on its own
    stream straight away. Without waiting for the event it would read the half-written tensors."""
    dev = torch.device("cuda")
    final = _spheres(400, dev)
    expected = render_spheres(*final, torch.as_tensor(invert(_pose()), dtype=torch.float32, device=dev), K, W, H)
    torch.cuda.synchronize()
    mapper = torch.cuda.Stream(dev)
    with torch.cuda.stream(mapper):
        tensors = [torch.zeros_like(t) for t in final]   # allocated, not yet written
        torch.cuda._sleep(200_000_000)                    # ~0.1 s of GPU time before the writes
        for dst, src in zip(tensors, final):
            dst.copy_(src)
        ready = torch.cuda.Event()
        ready.record()
    snap = MapSnapshot(*tensors, version=1, ready=ready)
    result = {}

    def tracker():
        with torch.cuda.stream(torch.cuda.Stream(dev)):
            out = snap.render(K, W, H, T_wc=_pose())
            result["color"] = out.color.clone()
            torch.cuda.current_stream().synchronize()

    t = threading.Thread(target=tracker)
    t.start()
    t.join()
    assert torch.equal(result["color"], expected.color)


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_the_map_up_to_a_keyframe_renders_as_its_spheres_alone(device):
    """``up_to`` culls the later keyframes' spheres (NaN centres) instead of gathering the kept
    rows: its renders and the tracker's pass see exactly the kept spheres, to the bit, on every
    backend of the device (and the PyTorch reference)."""
    means, radii, colors, opac = _spheres(300, device)
    anchors = (torch.arange(300, device=device) % 5).to(torch.int32)   # keyframes 0-4
    snap = MapSnapshot(means, radii, colors, opac, version=1, anchors=anchors)
    kept = anchors <= 2
    alone = MapSnapshot(means[kept], radii[kept], colors[kept], opac[kept], version=1, anchors=anchors[kept])
    old = snap.up_to(2)
    assert old.means.shape == means.shape and bool(torch.isnan(old.means[~kept]).all())
    for backend in ("auto", "reference"):
        got = snap.render(K, W, H, T_wc=_pose(), backend=backend, max_anchor=2)
        want = alone.render(K, W, H, T_wc=_pose(), backend=backend)
        for a, b in zip(got, want):
            assert torch.equal(a, b)
    assert snap.render(K, W, H, T_wc=_pose(), backend="cpu" if device == "cpu" else "auto").alpha.sum() \
        > alone.render(K, W, H, T_wc=_pose()).alpha.sum()              # the culled spheres were in view
