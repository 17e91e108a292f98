"""The sequential runner's order of tracking and mapping (slam.runtime.threads.run_sequential), on a
recording stand-in for SlamSystem: with system.max_unmapped_keyframes 0 each keyframe is mapped
before the next frame is tracked; with N > 0 it is mapped once N newer keyframes wait (the threaded
runner's worst case: the tracker N keyframes ahead of its map), at once while there is no map or the
stream is slow; end of input and a source error map the ones left before the final refinement."""
from types import SimpleNamespace

import pytest

from slam.runtime.threads import run_sequential


class Recording:
    """Frames are ints; frame i makes keyframe i when i is in ``keyframes``. ``calls`` lists
    ("track", i), ("map", kf), ("loop", kf) and ("finish",) in order."""

    def __init__(self, ahead: int, keyframes, slow: bool = False) -> None:
        self.cfg = SimpleNamespace(system=SimpleNamespace(max_unmapped_keyframes=ahead))
        self.keyframes, self.slow, self.calls, self.mapped = set(keyframes), slow, [], 0
        self.recorder = SimpleNamespace(finish=lambda reason: self.calls.append(("stop", reason)), frames=[])

    def track_frame(self, frame):
        self.calls.append(("track", frame))
        self.recorder.frames.append(frame)
        return SimpleNamespace(ok=True), (frame if frame in self.keyframes else None)

    def map_keyframe(self, kf) -> None:
        self.calls.append(("map", kf))
        self.mapped += 1

    def loop_message(self, kf):
        return kf

    def loop_step(self, message) -> None:
        self.calls.append(("loop", message))

    def latest_map(self):
        return object() if self.mapped else None

    def slow_stream(self) -> bool:
        return self.slow

    def finish_map(self) -> None:
        self.calls.append(("finish",))


def _order(calls):
    """The calls without the loop steps (each follows its keyframe's mapping)."""
    return [c for c in calls if c[0] != "loop"]


def test_at_zero_each_keyframe_is_mapped_before_the_next_frame():
    system = Recording(0, {0, 2, 3})
    run_sequential(system, range(5), None)
    assert _order(system.calls) == [("track", 0), ("map", 0), ("track", 1), ("track", 2), ("map", 2),
                                    ("track", 3), ("map", 3), ("track", 4), ("finish",)]
    assert system.calls[2] == ("loop", 0)          # the loop stage sees a keyframe once it is mapped


def test_one_ahead_maps_a_keyframe_once_the_next_is_made_and_the_rest_at_the_end():
    system = Recording(1, {0, 2, 4, 6})
    run_sequential(system, range(8), None)
    assert _order(system.calls) == [("track", 0), ("map", 0),            # no map yet: at once
                                    ("track", 1), ("track", 2), ("track", 3),
                                    ("track", 4), ("map", 2),            # keyframe 4 waits: 2 is mapped
                                    ("track", 5), ("track", 6), ("map", 4),
                                    ("track", 7), ("map", 6), ("finish",)]


def test_a_slow_stream_maps_each_keyframe_at_once_as_the_threaded_runner_does():
    system = Recording(1, {0, 2, 4}, slow=True)
    run_sequential(system, range(5), None)
    assert _order(system.calls) == [("track", 0), ("map", 0), ("track", 1), ("track", 2), ("map", 2),
                                    ("track", 3), ("track", 4), ("map", 4), ("finish",)]


def test_a_source_error_maps_the_keyframes_left_then_refines_and_re_raises():
    def frames():
        yield from range(3)
        raise OSError("frame 3: truncated file")

    system = Recording(2, {0, 1, 2})
    with pytest.raises(OSError, match="truncated"):
        run_sequential(system, frames(), None)
    assert _order(system.calls)[-4:] == [("map", 1), ("map", 2), ("finish",),
                                         ("stop", "input error after 3 frames: OSError: frame 3: truncated file")]
