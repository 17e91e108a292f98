"""When tracking counts as lost, and when to try relocalising: one policy for every mode.

``LostPolicy`` counts consecutive failed frames (a tracking failure, or on a saved map a tracked
pose the map does not confirm). Once ``after_failures`` are reached the camera is lost: the
tracking front end then relocalises (``slam.tracking.frontend``). While lost, attempts are spaced
out by ``RetrySchedule``, so a camera that has left the map does not spend every frame on a full
relocalisation; a success resets both.
"""
from __future__ import annotations


class RetrySchedule:
    """Spaces out relocalisation attempts while lost: after each failed attempt the next
    ``skip`` frames are not tried, ``skip`` doubling from 1 up to ``max_skip``; a success resets
    it."""

    def __init__(self, max_skip: int = 16) -> None:
        self.max_skip = max_skip
        self.skip = 0          # frames still to wait before the next attempt
        self.next_skip = 1

    def should_try(self) -> bool:
        """Call once per lost frame; True when this frame should attempt relocalisation."""
        if self.skip > 0:
            self.skip -= 1
            return False
        return True

    def failed(self) -> None:
        self.skip = self.next_skip
        self.next_skip = min(self.next_skip * 2, self.max_skip)

    def succeeded(self) -> None:
        self.skip, self.next_skip = 0, 1


class LostPolicy:
    """Consecutive-failure counter with its threshold and the retry schedule of the attempts.

    after_failures: consecutive failed frames that make the camera lost; max_skip: see
    ``RetrySchedule``. ``needs_pose`` is True while no tracked pose can be trusted (a saved map
    before the first verified relocalisation, or after being lost on it): such frames are only
    relocalised, not tracked.
    """

    def __init__(self, after_failures: int, max_skip: int, needs_pose: bool = False) -> None:
        if after_failures < 1:
            raise ValueError(f"after_failures must be >= 1, got {after_failures}")
        self.after_failures = after_failures
        self.retry = RetrySchedule(max_skip)
        self.failures = 0          # consecutive failed frames so far
        self.needs_pose = needs_pose

    def record(self, ok: bool) -> bool:
        """Record one tracked frame's outcome; True when the camera is now lost (the failure
        count reached ``after_failures``)."""
        self.failures = 0 if ok else self.failures + 1
        return self.failures >= self.after_failures

    def should_try(self) -> bool:
        """Call once per frame that could relocalise; False while backing off after failures."""
        return self.retry.should_try()

    def relocalised(self, ok: bool) -> None:
        """Record a relocalisation attempt's outcome."""
        if ok:
            self.retry.succeeded()
            self.failures = 0
            self.needs_pose = False
        else:
            self.retry.failed()
