"""Frame sources: dataset loaders, bag files; all produce ``slam.data.frame.Frame``."""
from slam.data.frame import Frame, FrameError, FrameSource, validate_frame

__all__ = ["Frame", "FrameError", "FrameSource", "validate_frame"]
