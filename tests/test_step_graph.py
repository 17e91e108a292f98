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
