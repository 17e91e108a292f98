"""Capturing a CUDA graph while other threads keep the GPU busy: the one capture path of the
tracker's frame graphs (``slam.tracking.fused``) and the mapper's step graph
(``slam.mapping.step_graph``), and the sphere slots both pad a growing map to (``padded_slots``).

``torch.cuda.graph`` synchronises the whole device and empties the allocator's cache before it
captures. Both are illegal while another thread's capture is under way (CUDA refuses a device
synchronisation with a stream in capture), and both stall the other threads' work. ``capture``
instead begins the capture on the caller's own side stream, ordered after the caller's current
stream, in ``thread_local`` mode (the other threads keep launching, allocating and capturing).
"""
from __future__ import annotations

from typing import Callable, Optional, TypeVar

import torch

T = TypeVar("T")


def capture(fn: Callable[[], T], stream: torch.cuda.Stream,
            share_with: Optional[torch.cuda.CUDAGraph] = None) -> tuple[torch.cuda.CUDAGraph, T]:
    """Capture the GPU work ``fn()`` queues (it runs nothing: replay the graph to run it) on
    ``stream``, which first waits for the current stream, as the current stream then waits for
    it. ``share_with``: a live graph whose memory pool the new one shares (keep it alive until
    the capture has begun). Returns (the graph, what ``fn`` returned: tensors in the graph's
    memory, rewritten by each replay)."""
    graph = torch.cuda.CUDAGraph()
    current = torch.cuda.current_stream(stream.device)
    stream.wait_stream(current)
    with torch.cuda.stream(stream):
        graph.capture_begin(pool=None if share_with is None else share_with.pool(),
                            capture_error_mode="thread_local")
        try:
            out = fn()
        finally:
            graph.capture_end()
    current.wait_stream(stream)
    return graph, out


def padded_slots(n: int) -> int:
    """Sphere slots a graph over a map of ``n`` spheres is captured for: the next of 2^k x (1, 1.25,
    1.5, 1.75), at least 1024, so a growing map re-captures a few times per doubling (the slots
    past ``n`` hold inert padding: NaN centres, culled by every render)."""
    size = 1024
    while True:
        for step in (4, 5, 6, 7):
            if size * step // 4 >= n:
                return size * step // 4
        size *= 2
