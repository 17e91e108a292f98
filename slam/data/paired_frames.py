"""Frames from matched colour/depth pairs, as the stream loaders (ROS bags, RealSense) assemble them.

A loader pairs colour and depth by stamp (``slam.data.stamp_matcher``), then for every matched
pair: ``PairedFrames.select`` counts it and applies ``first``/``stride`` (both count matched pairs),
``PairedFrames.deliver`` makes the frame (a ``SkipFrame`` is warned about and counted in
``stats``), and ``frame_from_images`` turns the pair's images into a checked ``Frame``. At the end
``PairedFrames.finish`` raises when nothing was delivered.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from slam.data.errors import SkipFrame
from slam.data.frame import Frame, FrameError, validate_frame
from slam.data.sequence import skip_frame


class PairedFrames:
    """Selection and delivery counts of one stream. ``where`` names the source in messages;
    ``stats``: the source's ``SourceStats``."""

    def __init__(self, where: str, stats, first: int, stride: int) -> None:
        self.where = where
        self.stats = stats
        self.first = first
        self.stride = stride
        self.pairs = 0       # matched pairs so far (selected or not)
        self.delivered = 0   # frames delivered so far

    def select(self) -> Optional[int]:
        """Counts one matched pair. -> its frame index, or None when ``first``/``stride`` skip it."""
        index = self.pairs
        self.pairs += 1
        if index < self.first or (index - self.first) % self.stride:
            return None
        return (index - self.first) // self.stride

    def deliver(self, make: Callable[..., Frame], *args) -> Optional[Frame]:
        """``make(*args)``, counted as delivered; None when it raised ``SkipFrame`` (warned, counted
        in ``stats``)."""
        try:
            frame = make(*args)
        except SkipFrame as skip:
            skip_frame(self.stats, skip.reason)
            return None
        self.delivered += 1
        return frame

    def finish(self) -> None:
        """``FrameError`` when no frame was delivered, with the first skip reasons (flush the stamp
        matcher first: its unpaired colour images are among them)."""
        if self.delivered == 0:
            if self.pairs > 0 and self.first >= self.pairs:
                raise FrameError(f"{self.where}: data.first={self.first} selects no frame: the stream has "
                                 f"{self.pairs} colour/depth pairs (0..{self.pairs - 1})")
            reasons = "; ".join(self.stats.skip_reasons[:3]) or "no colour/depth pair"
            raise FrameError(f"{self.where}: no usable frame ({reasons})")


def frame_from_images(where: str, index: int, t: float, color: np.ndarray, depth: np.ndarray,
                      preprocess, source_id: str) -> Frame:
    """The checked ``Frame`` of one pair: ``color`` (H, W, 3) uint8 RGB, ``depth`` (H, W) float32
    metres (0 = invalid), ``t`` seconds; ``preprocess`` (a ``Preprocessor``: undistortion,
    downscaling) gives the final images and K. ``SkipFrame`` when the depth has no valid pixel."""
    if not np.any(depth > 0):
        raise SkipFrame(f"{where}: depth at t={t:.6f} has no valid pixel")
    color, depth, K = preprocess(color, depth)
    return validate_frame(Frame(index=index, timestamp=t, color=color, depth=depth, K=K, source_id=source_id))
