"""Batch progress on stderr: a bar over the jobs with done / running / queued / failed counts, and
one line per finished job (its status, wall time and, for a failure, the run's own error)."""
from __future__ import annotations

import sys

from tqdm import tqdm


class BatchProgress:
    """Progress of ``total`` jobs of which ``cached`` were already finished before the batch."""

    def __init__(self, total: int, cached: int = 0, enabled: bool = True) -> None:
        self.counts = {"done": 0, "failed": 0, "running": 0, "queued": total - cached, "cached": cached}
        self.bar = tqdm(total=total, initial=cached, unit="job", file=sys.stderr, dynamic_ncols=True,
                        disable=not enabled, desc="slam_batch")
        self._refresh()

    def _refresh(self, redraw: bool = True) -> None:
        c = self.counts
        self.bar.set_postfix_str(f"done {c['done']} (+{c['cached']} cached), running {c['running']}, "
                                 f"queued {c['queued']}, failed {c['failed']}", refresh=redraw)

    def running(self, running: int, pending: int) -> None:
        """``running`` jobs have started; ``pending`` jobs (running or queued) are not finished."""
        self.counts["running"] = running
        self.counts["queued"] = max(0, pending - running)
        self._refresh()

    def finished(self, outcome: dict, pending: int) -> None:
        """A job ended (an ``execute.outcome`` dict); ``pending`` jobs are still not finished."""
        status = outcome["status"]
        self.counts["failed" if status == "failed" else "done"] += 1
        self.counts["queued"] = max(0, pending - self.counts["running"])
        wall = outcome.get("wall_s")
        line = f"[slam_batch] {status:6s} {outcome['label']}" + (f" ({wall:.1f} s)" if wall is not None else "")
        if outcome.get("attempt", 1) > 1:
            line += f", attempt {outcome['attempt']}"
        if status == "failed":
            line += f": {outcome.get('error', '')}"
        self.bar.write(line, file=sys.stderr)
        self._refresh(redraw=False)
        self.bar.update(1)

    def close(self) -> None:
        """End the bar (the per-job lines stay)."""
        self.bar.close()
