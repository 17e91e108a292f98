"""slam.eval.stats: the NaN-skipping median the metrics and the calibration tool share."""
import math
import warnings

from slam.eval.stats import nanmedian


def test_nanmedian_skips_nans_and_keeps_infinities():
    assert nanmedian([3.0, float("nan"), 1.0, 2.0]) == 2.0
    assert nanmedian([1.0, float("inf"), float("nan")]) == math.inf   # numpy's nanmedian: the same
    assert nanmedian([4, 1]) == 2.5


def test_nanmedian_of_no_number_is_nan_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")                 # np.nanmedian would raise RuntimeWarning here
        assert math.isnan(nanmedian([float("nan"), float("nan")]))
        assert math.isnan(nanmedian([]))
