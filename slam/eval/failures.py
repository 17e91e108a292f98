"""Silent failures and the quality test as a detector, judged against ground truth.

A frame is **truly bad** when its estimated motion relative to the previous frame reported ok
differs from the ground truth's motion between the same two frames by more than ``MAX_SHIFT_M`` or
``MAX_TURN_DEG``. Relative motions do not depend on the world frame, so no trajectory alignment is
needed. The thresholds are the definition of the figure (they are what a robot planning on the pose
would not survive), not tuning values.

- A **silent failure** is a truly bad frame reported ok (the detector's miss).
- A **false alarm** is a frame flagged as failed that is not truly bad (its estimate, the pose the
  tracker reported for it, is within the thresholds of the truth).
"""
from __future__ import annotations

import math
from typing import Optional

from slam.geometry import invert, relative_motion

MAX_SHIFT_M = 0.05
MAX_TURN_DEG = 3.0
DEFINITION = (f"truly bad: the frame's motion since the previous ok frame differs from ground truth by more than "
              f"{MAX_SHIFT_M * 100:.0f} cm or {MAX_TURN_DEG:.0f} deg")


def judged_frames(frames: list) -> list[tuple]:
    """[(frame, truly_bad)] for every ``FrameRecord`` with ground truth after the first frame
    reported ok with it: whether its estimate (ok or flagged) is off by the definition above."""
    prev = None
    out = []
    for f in frames:
        if f.gt_pose is None:
            continue
        if prev is not None:
            est = invert(prev.T_wc) @ f.T_wc
            gt = invert(prev.gt_pose) @ f.gt_pose
            shift, turn = relative_motion(gt, est)
            out.append((f, shift > MAX_SHIFT_M or math.degrees(turn) > MAX_TURN_DEG))
        if f.ok:
            prev = f
    return out


def silent_failures(frames: list) -> Optional[dict]:
    """{count, frames (indices), checked, definition} over ``FrameRecord``s with ground truth, or
    None when fewer than two frames reported ok have it."""
    judged = [(f, bad) for f, bad in judged_frames(frames) if f.ok]
    if not judged:
        return None
    found = [int(f.index) for f, bad in judged if bad]
    return {"count": len(found), "frames": found, "checked": len(judged),
            "definition": f"reported ok, but its motion since the previous ok frame differs from ground truth by "
                          f"more than {MAX_SHIFT_M * 100:.0f} cm or {MAX_TURN_DEG:.0f} deg"}


def quality_detector(frames: list) -> Optional[dict]:
    """The quality test as a detector of truly bad frames (module doc): {checked, flagged,
    truly_bad, hits (flagged and bad), false_alarms (flagged, not bad), misses (ok and bad: the
    silent failures), false_alarm_frames, definition}; None without ground truth."""
    judged = judged_frames(frames)
    if not judged:
        return None
    flagged = [(f, bad) for f, bad in judged if not f.ok]
    return {"checked": len(judged), "flagged": len(flagged), "truly_bad": sum(bad for _, bad in judged),
            "hits": sum(bad for _, bad in flagged), "false_alarms": sum(not bad for _, bad in flagged),
            "misses": sum(bad for f, bad in judged if f.ok),
            "false_alarm_frames": [int(f.index) for f, bad in flagged if not bad][:200],
            "definition": DEFINITION}
