"""The mapper's step graph (slam/mapping/step_graph.py, ``mapping.cuda_graph``): the same mapping
as the queued kernels, captured once per keyframe. Skipped without CUDA (CI); scripts/gpu_check.sh
runs it."""
import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
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


def test_pose_refinement_keeps_the_queued_kernels(sample_run):
    system = sample_run.run(sample_run.cfg(12, *RUN, "mapping.refine_poses=true"))
    assert system.mapper.graph.captures == 0 and system.mapper.poses.steps > 0


def test_pinned_keyframes_hold_each_keyframe_of_a_run_within_their_limit():
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
    pinned = PinnedKeyframes((24, 32), limit=2)
    device = torch.device("cuda")
    static = torch.empty((24, 32, 3), dtype=torch.uint8, device=device)
    for run in range(2):
        pinned.start_run()
        if run == 1:
            kfs[0].T_wc[0, 3] = 9.0                   # a pose moved between runs is written again
        for kf in [kfs[0], kfs[1], kfs[0], kfs[2], kfs[3], kfs[0], kfs[1]]:
            entry = pinned.get(kf)
            assert entry[0].is_pinned() and np.array_equal(entry[0].numpy(), kf.color)
            assert np.array_equal(entry[1].numpy(), kf.depth)
            assert np.allclose(entry[2].numpy(), np.linalg.inv(kf.T_wc))
            static.copy_(entry[0], non_blocking=True)   # what StepGraph._load queues, then its event
            entry[3] = torch.cuda.Event()
            entry[3].record()
            assert len(pinned.sets) <= 2
    torch.cuda.synchronize()
    assert np.array_equal(static.cpu().numpy(), kfs[1].color)
