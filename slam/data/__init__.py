"""Frame sources: dataset loaders, bag files; all produce ``slam.data.frame.Frame``.

``open_source(cfg.data)`` is the entry point; ``load_ground_truth(cfg.data)`` gives a dataset's
ground truth without reading images. Errors: ``FrameError`` (bad data, names the file),
``DataNotFoundError`` (also a ``FileNotFoundError``), ``CalibrationError``.
"""
from slam.data.errors import CalibrationError, DataNotFoundError
from slam.data.frame import Frame, FrameError, FrameSource, validate_frame
from slam.data.sources import RepeatSource, load_ground_truth, open_source

__all__ = ["Frame", "FrameError", "FrameSource", "validate_frame", "DataNotFoundError",
           "CalibrationError", "open_source", "load_ground_truth", "RepeatSource"]
