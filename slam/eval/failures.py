"""Silent failures: frames reported as tracked whose motion is wrong.

A frame is a silent failure when it is reported ok but its motion relative to the previous frame
reported ok differs from the ground truth's motion between the same two frames by more than
``MAX_SHIFT_M`` or ``MAX_TURN_DEG``. Relative motions do not depend on the world frame, so no
trajectory alignment is needed. The thresholds are the definition of the figure (they are what a
robot planning on the pose would not survive), not tuning values.
"""
from __future__ import annotations

import math
from typing import Optional

from slam.geometry import invert, relative_motion

MAX_SHIFT_M = 0.05
MAX_TURN_DEG = 3.0


def silent_failures(frames: list) -> Optional[dict]:
    """{count, frames (indices), checked, definition} over ``FrameRecord``s with ground truth, or
    None when fewer than two frames reported ok have it."""
    prev = None
    checked, found = 0, []
    for f in frames:
        if not f.ok or f.gt_pose is None:
            continue
        if prev is not None:
            est = invert(prev.T_wc) @ f.T_wc
            gt = invert(prev.gt_pose) @ f.gt_pose
            shift, turn = relative_motion(gt, est)
            checked += 1
            if shift > MAX_SHIFT_M or math.degrees(turn) > MAX_TURN_DEG:
                found.append(int(f.index))
        prev = f
    if prev is None or checked == 0:
        return None
    return {"count": len(found), "frames": found, "checked": checked,
            "definition": f"reported ok, but its motion since the previous ok frame differs from ground truth by "
                          f"more than {MAX_SHIFT_M * 100:.0f} cm or {MAX_TURN_DEG:.0f} deg"}

