"""The stream clock: usual interval, gaps and slow streams from frame timestamps."""
from slam.tracking.stream_clock import StreamClock


def test_camera_rate_with_a_dropped_frame_is_a_gap_not_a_slow_stream():
    clock = StreamClock(gap_factor=2.0, slow_interval_s=0.1)
    stamps = [k / 30 for k in range(10)] + [12 / 30, 13 / 30]     # frames 10 and 11 dropped
    gaps = [clock.tick(t) for t in stamps]
    assert gaps[:10] == [None] * 10 and gaps[11] is None
    assert abs(gaps[10] - 3 / 30) < 1e-9
    assert abs(clock.usual_interval() - 1 / 30) < 1e-9
    assert not clock.slow


def test_two_hertz_is_slow_from_the_second_frame():
    clock = StreamClock(gap_factor=2.0, slow_interval_s=0.1)
    clock.tick(0.0)
    assert not clock.slow and clock.usual_interval() is None
    clock.tick(0.5)
    assert clock.slow
    assert all(clock.tick(0.5 * k) is None for k in range(2, 6))
