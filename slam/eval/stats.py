"""Small summary statistics shared by the run's metrics and the evaluation tools."""
from __future__ import annotations

import numpy as np


def nanmedian(values) -> float:
    """The median of ``values`` (a sequence of floats) without their NaNs; NaN when none is a
    number. ``np.nanmedian`` without its RuntimeWarning on the terminal in that case (a one-frame
    run: the first frame has no loss level to compare with; a frame without quality figures)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    return float(np.median(v)) if v.size else float("nan")
