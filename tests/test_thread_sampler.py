"""The thread sampler attributes a thread's time to the line it is blocked on."""
import threading
import time

from slam.tools.thread_sampler import ThreadSampler, _functions, _where


def _blocked_in_sleep(stop: threading.Event) -> None:
    while not stop.is_set():
        time.sleep(0.05)


def test_a_sleeping_thread_is_sampled_at_its_line():
    stop = threading.Event()
    worker = threading.Thread(target=_blocked_in_sleep, args=(stop,), name="worker")
    worker.start()
    sampler = ThreadSampler(0.002).start()
    time.sleep(0.4)
    sampler.stop()
    stop.set()
    worker.join()
    counts = sampler.counts["worker"]
    assert sampler.samples["worker"] >= 20
    (where, inner), n = counts.most_common(1)[0]
    # This test file is not package code: the worker's own frames are "outside the package".
    assert where == "(outside the package)" and inner == "_blocked_in_sleep"
    assert n >= 0.9 * sampler.samples["worker"]
    assert "sampler" not in sampler.samples           # it never samples itself
    assert "worker:" in sampler.report(3)


def test_a_thread_blocked_in_package_code_shows_that_line():
    from slam.runtime.channel import Channel

    ch = Channel(1)
    worker = threading.Thread(target=ch.get, name="consumer")
    worker.start()
    time.sleep(0.05)
    frame = __import__("sys")._current_frames()[worker.ident]
    where, inner = _where(frame)
    ch.put(1)
    worker.join()
    assert where.startswith("slam/runtime/channel.py:") and " get" in where
    assert inner == "wait"                            # threading.Condition.wait, outside the package
    assert _functions(frame) == {"slam/runtime/channel.py get"}   # this test's frames are not the package's


def test_inclusive_shares_count_a_package_function_anywhere_on_the_stack():
    from slam.runtime.channel import Channel

    ch = Channel(1)
    worker = threading.Thread(target=ch.get, name="consumer")
    worker.start()
    sampler = ThreadSampler(0.002).start()
    time.sleep(0.3)
    sampler.stop()
    ch.put(1)
    worker.join()
    n = sampler.samples["consumer"]
    assert n >= 20
    assert sampler.inclusive["consumer"]["slam/runtime/channel.py get"] >= 0.9 * n
    report = sampler.report(3, functions=2)
    assert "inclusive (the function anywhere on the stack):" in report
    assert "slam/runtime/channel.py get" in report.split("inclusive")[1]
    assert "anywhere on the stack" not in sampler.report(3)   # functions=0: lines only


def test_the_tool_samples_a_short_run_of_the_sample(tmp_path, capsys, sample_run):
    from slam.tools.thread_sampler import main

    sets = sum((["--set", s] for s in ["data.last=8", *sample_run.FAST]), [])
    assert main([*sets, "--interval-ms", "1", "--top", "3", "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "run" / "metrics.json").exists()
    for thread in ("tracking", "mapping", "caller (frames)"):
        assert f"\n{thread}: " in out, out[-2000:]
    assert "inclusive (the function anywhere on the stack):" in out
