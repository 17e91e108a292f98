"""Silent failures and the quality test as a detector, against ground truth."""
import numpy as np

from slam.eval.failures import quality_detector, silent_failures
from slam.geometry import pivot_increment
from slam.runtime.recorder import FrameRecord


def _records(offsets: dict, flagged: set, n: int = 8) -> list:
    """n frames moving 2 cm along x per frame (ground truth); the estimate of frame i is moved
    by offsets[i] (6,) = (rotation vector rad, translation m); frames in ``flagged`` failed."""
    recs = []
    for i in range(n):
        gt = np.eye(4)
        gt[0, 3] = 0.02 * i
        est = gt @ pivot_increment(np.asarray(offsets.get(i, np.zeros(6)), dtype=float), 0.0)
        recs.append(FrameRecord(i, i / 30, est, gt, i not in flagged, False, 0.0, 1.0, False))
    return recs


def test_detector_counts_false_alarms_misses_and_hits():
    off = {2: [0, 0, 0, 0.08, 0, 0],            # 8 cm off, reported ok: a miss (silent failure)
           4: [0, 0, 0, 0.01, 0, 0],            # 1 cm off, flagged: a false alarm
           6: [0, 0.1, 0, 0, 0, 0]}             # 5.7 deg off, flagged: a hit
    recs = _records(off, flagged={4, 6})
    d = quality_detector(recs)
    assert (d["checked"], d["flagged"], d["truly_bad"]) == (7, 2, 3)
    # Frame 3 follows the bad frame 2 (the previous ok one): its motion is off too, a second miss.
    assert (d["hits"], d["false_alarms"], d["misses"]) == (1, 1, 2)
    assert d["false_alarm_frames"] == [4]
    assert silent_failures(recs)["frames"] == [2, 3]


def test_motion_is_measured_from_the_previous_ok_frame():
    # A flagged frame does not become the reference: frame 5 is judged against frame 3.
    recs = _records({4: [0, 0, 0, 0.3, 0, 0]}, flagged={4})
    d = quality_detector(recs)
    assert d["hits"] == 1 and d["misses"] == 0 and d["false_alarms"] == 0
    assert silent_failures(recs)["count"] == 0


def test_without_ground_truth_there_is_no_table():
    recs = _records({}, set())
    for r in recs:
        r.gt_pose = None
    assert quality_detector(recs) is None and silent_failures(recs) is None
