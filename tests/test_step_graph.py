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
    assert g.captures >= keyframes - 1 >= 5      # every keyframe but the first, and the refinement
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
