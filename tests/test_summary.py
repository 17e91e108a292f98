"""The run summary a new user reads: a reason beside every n/a, no empty containers ({} / []),
the stop line a caller passes."""
import re

import pytest

from data_helpers import write_tum_sequence
from slam.output.summary import summary_text

N_A = re.compile(r"n/a(?! \()")           # an n/a without a reason in parentheses


@pytest.fixture(scope="module")
def no_gt_result(tmp_path_factory, sample_run):
    """(RunResult, source stats) of a short sequential CPU run on a generated sequence without
    ground truth."""
    from slam.config import load_config
    from slam.data.sources import open_source
    from slam.runtime.system import SlamSystem
    seq = write_tum_sequence(tmp_path_factory.mktemp("nogt") / "seq", n=5, gt=False)
    cfg = load_config("default.yaml", [f"data.path={seq}", "system.threaded=false", "system.device=cpu",
                                       *sample_run.FAST])
    source = open_source(cfg.data)
    system = SlamSystem(cfg)
    system.run(source)
    return system.result(), source.stats


@pytest.fixture(scope="module")
def no_gt_metrics(no_gt_result):
    """metrics of that run."""
    from slam.output.metrics import collect_metrics
    return collect_metrics(*no_gt_result, eval_images_every=None)


def test_a_failing_evaluation_is_recorded_and_the_other_metrics_stay(no_gt_result, monkeypatch, tmp_path):
    import slam.output.metrics as metrics

    def broken(*args, **kwargs):
        raise ValueError("broken on purpose")
    for name in ("trajectory_metrics", "keyframe_consistency", "image_metrics"):
        monkeypatch.setattr(metrics, name, broken)
    result, stats = no_gt_result
    m = metrics.collect_metrics(result, stats, eval_images_every=1)
    assert m["trajectory_error"] == "ValueError: broken on purpose"
    assert m["images_error"] == "ValueError: broken on purpose"
    assert "keyframe_depth_consistency" not in m and "revisit_depth_consistency" in m
    assert m["frames"] == 5 and m["keyframes"] >= 1 and m["spheres"] > 0
    assert "evaluation failed: ValueError: broken on purpose" in summary_text(m, tmp_path)


def test_a_run_without_ground_truth_says_why_each_figure_is_missing(no_gt_metrics, tmp_path):
    text = summary_text(no_gt_metrics, tmp_path)
    assert "ATE RMSE          n/a (no ground truth in this sequence)" in text.splitlines()
    assert "PSNR / SSIM       n/a (not evaluated: output.eval_images_every is off)" in text.splitlines()
    assert "peak GPU n/a (CPU run)" in text
    assert not N_A.search(text), text
    assert "{}" not in text and "[]" not in text, text


def test_the_loop_line_lists_rejections_only_when_there_are_some(no_gt_metrics, tmp_path):
    loop = {"candidates": 3, "accepted": 1, "consistent": 0, "rejected": 0, "rejected_by": {}}
    line = [ln for ln in summary_text(dict(no_gt_metrics, loop_closure=loop), tmp_path).splitlines()
            if ln.startswith("loop closure")][0]
    assert line.endswith("0 rejected")
    loop = dict(loop, rejected=2, rejected_by={"depth": 1, "render": 1})
    line = [ln for ln in summary_text(dict(no_gt_metrics, loop_closure=loop), tmp_path).splitlines()
            if ln.startswith("loop closure")][0]
    assert line.endswith("2 rejected (depth: 1, render: 1)")


def test_the_loop_line_tells_candidates_verified_loops_closed_and_deferred_apart(no_gt_metrics, tmp_path):
    """Issue 32's counts: look-alike candidates (most rejected by separation, never verified),
    verified ones, loops closed (groups of consecutive detections), deferred groups."""
    loop = {"candidates": 40, "verified": 9, "accepted": 2, "loops_closed": 1, "consistent": 1, "deferred": 4,
            "rejected": 33, "rejected_by": {"separation": 31, "consistency": 2}}
    line = [ln for ln in summary_text(dict(no_gt_metrics, loop_closure=loop), tmp_path).splitlines()
            if ln.startswith("loop closure")][0]
    assert line == ("loop closure      40 candidates, 9 verified: 1 loops closed (2 detections), 1 already "
                    "consistent, 4 deferred, 33 rejected (consistency: 2, separation: 31)")


@pytest.mark.parametrize("change, reason", [
    ({"frames_with_ground_truth": 2}, "only 2 frames with ground truth, 3 needed"),
    ({"trajectory_error": "ValueError: x"}, "evaluation failed: ValueError: x"),
])
def test_other_reasons_for_no_ate(no_gt_metrics, tmp_path, change, reason):
    assert f"ATE RMSE          n/a ({reason})" in summary_text(dict(no_gt_metrics, **change), tmp_path)


def test_the_stop_line_a_caller_passes_replaces_the_stop_reason(no_gt_metrics, tmp_path):
    text = summary_text(dict(no_gt_metrics, stop_reason="input error after 4 frames: FrameError: x.png: bad"),
                        tmp_path, stopped="early, on bad input after 4 of 5 frames")
    assert "stopped           early, on bad input after 4 of 5 frames" in text and "x.png" not in text


def test_relocalisation_and_quality_test_lines():
    from pathlib import Path

    from slam.output.summary import summary_text
    m = {"frames": 10, "relocalisation": {"mode": "slam", "attempts": 3, "succeeded": 1, "ms_mean": 420.0,
                                          "ms_max": 900.0},
         "quality_detector": {"flagged": 4, "hits": 3, "false_alarms": 1}}
    text = summary_text(m, Path("/tmp/x"))
    assert "3 attempts while lost, 1 found the camera; 420 ms each on average (max 900 ms)" in text
    assert "4 frames flagged: 3 truly off, 1 false alarms" in text
    saved = {"frames": 10, "relocalisation": {"mode": "localize", "found": True, "frames_to_relocalise": 2,
                                              "attempts": 2, "ms_total": 1500.0, "relocalisations_later": 0}}
    assert "found at frame 2 (2 attempts, 1.5 s; 0 later)" in summary_text(saved, Path("/tmp/x"))
