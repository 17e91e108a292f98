"""The mapper's step graph (slam/mapping/step_graph.py, ``mapping.cuda_graph``): the same mapping
as the queued kernels, captured once per keyframe. The graph's tests are skipped without CUDA (CI);
scripts/gpu_check.sh runs them. The host sets its copies come from are checked on the CPU too."""
import numpy as np
import pytest
import torch

cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                          reason="CUDA is not available: the mapper's CUDA graph needs a GPU")

RUN = ("system.threaded=false", "loop.enabled=false", "grid.enabled=false")


def _map_loss(system) -> float:
    """Mean L1 (colour + depth) of the final map against every stored keyframe."""
    from slam.map.keyframes import KeyframeView
    snap = system.smap.latest()
    losses = []
    for kf in system.store.items:
        view = KeyframeView.upload(kf, system.device)
        o = view.observation()
        out = snap.render(o.K, o.width, o.height, T_cw=view.T_cw)
        losses.append(float((out.color - o.color).abs().mean() + (out.depth - o.depth).abs()[view.valid].mean()))
    return float(np.mean(losses))


@cuda
def test_the_graph_maps_as_the_queued_kernels_do(sample_run):
    graphed = sample_run.run(sample_run.cfg(40, *RUN))
    queued = sample_run.run(sample_run.cfg(40, *RUN, "mapping.cuda_graph=false"))
    g = graphed.mapper.graph
    assert queued.mapper.graph is None
    keyframes = sum(1 for r in graphed.recorder.frames if r.keyframe)
    assert g.runs >= keyframes - 1 >= 5          # every keyframe but the first, and the refinement ...
    assert 1 <= g.captures < g.runs               # ... replaying graphs captured for padded rows
    assert g.overflows == 0 and not any(m.pair_overflow for m in graphed.recorder.mapping)
    a, b = _map_loss(graphed), _map_loss(queued)
    assert a <= 1.1 * b, (a, b)
    assert abs(graphed.smap.n - queued.smap.n) <= 0.1 * queued.smap.n
    assert sample_run.ate_cm(graphed) <= max(1.0, 1.2 * sample_run.ate_cm(queued))


@cuda
def test_pose_refinement_keeps_the_queued_kernels(sample_run):
    system = sample_run.run(sample_run.cfg(12, *RUN, "mapping.refine_poses=true"))
    assert system.mapper.graph.captures == 0 and system.mapper.poses.steps > 0


def _hold_each_keyframe_of_a_run(pin: bool):
    """Two runs over 4 keyframes with room for 2 sets: each set read holds its keyframe's images
    and pose (a pose moved between runs written again), never more sets than the limit. On CUDA
    (``pin``) each read is copied to the device as ``StepGraph._load`` queues it, with its event;
    the device holds the last keyframe copied."""
    from slam.map.keyframes import Keyframe
    from slam.mapping.step_graph import PinnedKeyframes

    rng = np.random.default_rng(0)
    K = np.array([[50.0, 0, 16], [0, 50.0, 12], [0, 0, 1]])

    def keyframe(i):
        T = np.eye(4)
        T[:3, 3] = [i, 0.0, 0.0]
        return Keyframe(i, float(i), T, rng.integers(0, 255, (24, 32, 3), dtype=np.uint8),
                        rng.random((24, 32)).astype(np.float16), K, kf_id=i)

    kfs = [keyframe(i) for i in range(4)]
    pinned = PinnedKeyframes((24, 32), limit=2, pin=pin)
    static = torch.empty((24, 32, 3), dtype=torch.uint8, device="cuda") if pin else None
    written = []
    for run in range(2):
        pinned.start_run()
        if run == 1:
            kfs[0].T_wc[0, 3] = 9.0                   # a pose moved between runs is written again
        for kf in [kfs[0], kfs[1], kfs[0], kfs[2], kfs[3], kfs[0], kfs[1]]:
            entry = pinned.get(kf)
            assert entry.color.is_pinned() == pin and np.array_equal(entry.color.numpy(), kf.color)
            assert np.array_equal(entry.depth.numpy(), kf.depth)
            assert np.allclose(entry.T_cw.numpy(), np.linalg.inv(kf.T_wc))
            assert entry.run == pinned.run and len(pinned.sets) <= 2
            written.append(id(entry))
            if pin:
                static.copy_(entry.color, non_blocking=True)   # what StepGraph._load queues, then its event
                entry.copied = torch.cuda.Event()
                entry.copied.record()
    assert len(set(written)) == 2                     # the two sets, reused
    if pin:
        torch.cuda.synchronize()
        assert np.array_equal(static.cpu().numpy(), kfs[1].color)


def test_host_sets_hold_each_keyframe_of_a_run_within_their_limit():
    _hold_each_keyframe_of_a_run(pin=False)


@cuda
def test_pinned_keyframes_hold_each_keyframe_of_a_run_within_their_limit():
    _hold_each_keyframe_of_a_run(pin=True)


def _mapper_and_view(device, n=300):
    """A mapper over ``n`` spheres 1.5-2.5 m in front of the camera and a 40x30 keyframe view of
    random colours on a 2 m plane (a step has real gradients)."""
    import rasterizer  # noqa: F401  (the ops)
    from slam.config import MappingConfig, PrunerConfig
    from slam.map.keyframes import KeyframeView
    from slam.map.sphere_map import SphereMap
    from slam.mapping.keyframes import KeyframeStore
    from slam.mapping.mapper import Mapper

    g = torch.Generator().manual_seed(3)
    smap = SphereMap(device, chunk=256)
    means = torch.rand(n, 3, generator=g) * torch.tensor([1.6, 1.2, 1.0]) - torch.tensor([0.8, 0.6, -1.5])
    smap.add(means, 0.03 + 0.02 * torch.rand(n, generator=g), torch.rand(n, 3, generator=g) * 0.8 + 0.1,
             torch.full((n,), 0.6))
    mapper = Mapper(MappingConfig(cuda_graph=False), PrunerConfig(), smap, KeyframeStore(10), backend="auto")
    color = torch.randint(0, 256, (30, 40, 3), dtype=torch.uint8, generator=g).to(device)
    depth = torch.full((30, 40), 2.0, dtype=torch.float16).to(device)
    K = torch.tensor([[40.0, 0, 19.5], [0, 40.0, 14.5], [0, 0, 1]])
    return mapper, KeyframeView.derive(color, depth, K, torch.eye(4, device=device))


def _assert_same_steps(a, b, device, name):
    """On the CPU kernel the same to the bit; on CUDA the same kernels sum their float atomics in
    another order over more rows, so Adam's first steps (lr x sign) may differ where a gradient
    is ~0, nowhere else."""
    if device == "cpu":
        assert torch.equal(a, b), name
    else:
        assert torch.isclose(a, b, rtol=1e-3, atol=1e-5).float().mean() > 0.99, name
        assert (a - b).abs().mean() < 1e-4, name


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_a_step_over_padded_rows_is_the_step_over_the_live_rows(device):
    """The step graph's rows are the map's padded to a slot count (``SphereMap.padded_rows``):
    the padding (NaN centres) is culled, gets zero gradients and stays put, and the live rows,
    their Adam state and statistics come out as a step over the live rows alone gives them."""
    import rasterizer
    from slam.cuda_graphs import padded_slots

    (live_mapper, view), (padded_mapper, _) = _mapper_and_view(device), _mapper_and_view(device)
    live, padded = live_mapper.smap, padded_mapper.smap
    n, slots = live.n, padded_slots(live.n)
    assert slots > n and padded.capacity < slots
    rows = padded.padded_rows(slots)
    assert rows.shape[0] == slots and padded.capacity >= slots and torch.isnan(rows[n:, :3]).all()
    stats_live, stats_padded = rasterizer.SphereStats(n, device), rasterizer.SphereStats(slots, device)
    for _ in range(3):
        a = live_mapper._update(view, stats_live, live.active().detach().requires_grad_(True))
        b = padded_mapper._update(view, stats_padded, padded.padded_rows(slots).detach().requires_grad_(True))
        assert torch.equal(a, b)
    assert torch.equal(live.steps[:n], padded.steps[:n])
    for name in ("params", "exp_avg", "exp_avg_sq"):
        _assert_same_steps(getattr(live, name)[:n], getattr(padded, name)[:n], device, name)
    assert not torch.equal(live.params[:n], _mapper_and_view(device)[0].smap.params[:n])   # the steps moved it
    assert torch.isnan(padded.params[n:slots, :3]).all() and (padded.exp_avg[n:slots] == 0).all()
    for name in ("weight_sum", "error_sum", "count"):
        mine, theirs = getattr(stats_padded, name), getattr(stats_live, name)
        _assert_same_steps(mine[:n], theirs, device, name)
        assert (mine[n:] == 0).all() and theirs.sum() > 0, name
    with pytest.raises(ValueError, match="rows"):
        live.adam_step(torch.zeros(n - 1, 8, device=device), live_mapper.lr)


@cuda
def test_the_step_graph_is_kept_while_the_map_fits_its_slots():
    """Three runs of steps on one keyframe size: the map grows between them within its slots (one
    capture, then replays), then past them (a second capture); each run maps as queued kernels do."""
    from slam.cuda_graphs import padded_slots
    from slam.map.keyframes import Keyframe
    from slam.mapping.step_graph import StepGraph

    mapper, view = _mapper_and_view("cuda")
    queued, _ = _mapper_and_view("cuda")
    mapper.graph = StepGraph(torch.device("cuda"))
    color, depth = view.color.cpu().numpy(), view.depth.cpu().numpy()
    kfs = [Keyframe(i, float(i), np.eye(4), color, depth, view.K.numpy().astype(np.float64), kf_id=i) for i in range(5)]
    mapper._steps(kfs[:1], None)                        # queued (no pair count yet): the count is read
    queued._steps(kfs[:1], None)
    g = torch.Generator().manual_seed(5)
    for grow in (10, 10, padded_slots(mapper.smap.n) - mapper.smap.n + 1):
        for m in (mapper, queued):
            g.manual_seed(grow)
            means = torch.rand(grow, 3, generator=g) * 0.5 + torch.tensor([-0.25, -0.25, 1.8])
            m.smap.add(means, torch.full((grow,), 0.03), torch.full((grow, 3), 0.5), torch.full((grow,), 0.6))
        loss_graph, overflow = mapper._steps(kfs, None)
        loss_queued, _ = queued._steps(kfs, None)
        assert not overflow and loss_graph == pytest.approx(loss_queued, rel=1e-3, abs=1e-6)
        # the same kernels, their float atomics in another order: Adam's first steps (lr x sign)
        # may differ where a gradient is ~0, nowhere else
        a, b = mapper.smap.active(), queued.smap.active()
        assert torch.isclose(a, b, rtol=1e-3, atol=1e-5).float().mean() > 0.99 and (a - b).abs().mean() < 1e-4
    assert mapper.graph.runs == 3 and mapper.graph.captures == 2
