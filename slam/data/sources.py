"""``open_source(cfg)``: the one entry point from a ``DataConfig`` to a streaming ``FrameSource``.

Dispatches on ``cfg.dataset`` (tum | 7scenes | replica | rosbag | realsense); ``path: sample`` is the
bundled sample (TUM layout); a registry name (``tum/fr1_desk``, see ``slam.data.registry`` and
``slam_data list``) is the data cache's copy, downloaded first when missing (``data.download``).
``cfg.repeat > 1`` plays the sequence that many times (``RepeatSource``):
frame indices keep increasing and timestamps are offset so they keep increasing too.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator, Optional, Tuple

import numpy as np

from slam.data.errors import CalibrationError, DownloadError
from slam.data.fetch import sequence_folder
from slam.data.frame import Frame, FrameError, FrameSource
from slam.data.realsense import RealsenseSource
from slam.data.registry import lookup
from slam.data.replica import ReplicaSource, replica_ground_truth
from slam.data.rosbag import RosbagSource
from slam.data.sevenscenes import SevenScenesSource, seven_scenes_ground_truth
from slam.data.tum import TumSource, tum_ground_truth
from slam.resources import resolve_data_path

DATASETS = ("tum", "7scenes", "replica", "rosbag", "realsense")


def data_path(cfg) -> Path:
    """The local folder/file ``cfg.path`` names: the sample, a registry sequence (fetched), or a path.

    Raises ``DownloadError`` / ``ArchiveError`` when a registry sequence cannot be fetched, and
    ``ValueError`` when the registry sequence belongs to another dataset than ``cfg.dataset``.
    """
    found = lookup(cfg.path) if cfg.dataset not in ("rosbag", "realsense") else None
    if found is None:
        return resolve_data_path(cfg.path)
    entry, sequence = found
    if entry.dataset != cfg.dataset:
        raise ValueError(f"data.path: '{cfg.path}' is a {entry.dataset} sequence but data.dataset is "
                         f"'{cfg.dataset}'")
    return sequence_folder(entry, sequence, download=cfg.download)


def looks_like(path: Path) -> Optional[str]:
    """The dataset a folder's (or file's) layout belongs to, judged by its names only: tum (rgb.txt
    and depth.txt), 7scenes (frame-XXXXXX.color.*), replica (results/ and traj.txt), rosbag (.bag,
    .db3, .mcap or a ROS 2 bag folder); None when none fits."""
    path = Path(path)
    if path.is_file():
        return "rosbag" if path.suffix in (".bag", ".db3", ".mcap") else None
    if not path.is_dir():
        return None
    if (path / "rgb.txt").is_file() and (path / "depth.txt").is_file():
        return "tum"
    if next(path.glob("frame-*.color.*"), None) is not None:
        return "7scenes"
    if (path / "results").is_dir() and (path / "traj.txt").is_file():
        return "replica"
    if (path / "metadata.yaml").is_file():
        return "rosbag"
    return None


def open_source(cfg) -> FrameSource:
    """Open the frame source a ``DataConfig`` describes (nothing is read beyond index files).

    Raises ``DataNotFoundError`` / ``CalibrationError`` / ``FrameError`` with the file and problem;
    when the data's layout is another dataset's, the message says which (``looks_like``).
    """
    path = data_path(cfg)
    try:
        return _open(cfg, path)
    except FrameError as exc:
        other = looks_like(path) if not isinstance(exc, DownloadError) else None
        if other is None or other == cfg.dataset or (other == "rosbag" and cfg.dataset == "realsense"):
            raise
        hinted = type(exc)(f"{exc}; {path} looks like a {other} sequence: set data.dataset={other} "
                           f"(configs/{other}.yaml)")
        hinted.looks_like = other       # the path is right, the dataset is not (run_slam's hint)
        raise hinted from None


def _open(cfg, path: Path) -> FrameSource:
    common = dict(first=cfg.first, last=cfg.last, stride=cfg.stride, downscale=cfg.downscale)
    folder = dict(common, read_threads=cfg.read_threads)    # the folder datasets read ahead
    color_camera = None
    if cfg.color_intrinsics is not None or cfg.color_translation is not None:
        if cfg.dataset in ("rosbag", "realsense"):
            raise CalibrationError("data.color_intrinsics/color_translation: colour registration is for folder "
                                   "datasets (tum, 7scenes, replica); record bags with aligned depth instead")
        color_camera = (cfg.color_intrinsics, cfg.color_translation)
    if cfg.dataset == "tum":
        src: FrameSource = TumSource(path, max_time_diff=cfg.max_time_diff, intrinsics=cfg.intrinsics,
                                     distortion=cfg.distortion, depth_scale=cfg.depth_scale,
                                     color_camera=color_camera, **folder)
    elif cfg.dataset == "7scenes":
        src = SevenScenesSource(path, intrinsics=cfg.intrinsics, depth_scale=cfg.depth_scale,
                                color_camera=color_camera, **folder)
    elif cfg.dataset == "replica":
        src = ReplicaSource(path, intrinsics=cfg.intrinsics, depth_scale=cfg.depth_scale,
                            color_camera=color_camera, **folder)
    elif cfg.dataset == "rosbag":
        src = RosbagSource(path, color_topic=cfg.color_topic, depth_topic=cfg.depth_topic,
                           camera_info_topic=cfg.camera_info_topic, max_time_diff=cfg.max_time_diff,
                           intrinsics=cfg.intrinsics, distortion=cfg.distortion,
                           depth_scale=cfg.depth_scale, **common)
    elif cfg.dataset == "realsense":
        src = RealsenseSource(cfg.path, stream=cfg.realsense, max_time_diff=cfg.max_time_diff,
                              depth_scale=cfg.depth_scale, **common)
    else:
        raise ValueError(f"data.dataset: unknown dataset '{cfg.dataset}' (one of {', '.join(DATASETS)})")
    repeat = int(getattr(cfg, "repeat", 1) or 1)
    return RepeatSource(src, repeat) if repeat > 1 else src


def load_ground_truth(cfg) -> Tuple[np.ndarray, np.ndarray]:
    """Ground truth of the whole sequence a ``DataConfig`` names; reads no images, needs no calibration.

    Returns (timestamps (N,) s, poses (N, 4, 4) T_wc) in the time base the loader gives its frames
    (so a trajectory written from ``Frame.timestamp`` associates exactly). first/last/stride are
    ignored. Raises ``FrameError`` for bags (no ground truth) and ``DataNotFoundError`` if absent.
    """
    path = data_path(cfg)
    if cfg.dataset == "tum":
        return tum_ground_truth(path)
    if cfg.dataset == "7scenes":
        return seven_scenes_ground_truth(path)
    if cfg.dataset == "replica":
        return replica_ground_truth(path)
    if cfg.dataset in ("rosbag", "realsense"):
        raise FrameError(f"{cfg.path}: bags and cameras carry no ground truth; pass a TUM trajectory file as ground truth")
    raise ValueError(f"data.dataset: unknown dataset '{cfg.dataset}' (one of {', '.join(DATASETS)})")


class RepeatSource(FrameSource):
    """Plays ``inner`` ``repeat`` times (soak tests).

    Pass ``k`` delivers index ``k * len(inner) + i`` and timestamp ``t + k * period`` where
    ``period = t_last - t_first + dt`` of the first pass (dt = median frame interval, 1/30 s for a
    single frame). Shares ``inner.stats`` so skips of every pass are counted.
    """

    def __init__(self, inner: FrameSource, repeat: int) -> None:
        super().__init__()
        if repeat < 1:
            raise ValueError(f"repeat must be >= 1, got {repeat}")
        self.inner = inner
        self.repeat = int(repeat)
        self.name = getattr(inner, "name", "source")
        self.stats = inner.stats

    def __len__(self) -> int:
        return len(self.inner) * self.repeat

    def __getattr__(self, item):  # K, calibration, ... of the wrapped loader
        if item == "inner":
            raise AttributeError(item)
        return getattr(self.inner, item)

    def _frames(self) -> Iterator[Frame]:
        try:
            n = len(self.inner)
        except TypeError:
            n = None
        period: Optional[float] = None
        index_offset = 0
        for k in range(self.repeat):
            stamps = []
            max_index = -1
            for frame in self.inner._frames():
                stamps.append(frame.timestamp)
                max_index = max(max_index, frame.index)
                if k == 0:
                    yield frame
                else:
                    object.__setattr__(frame, "index", frame.index + index_offset)
                    object.__setattr__(frame, "timestamp", frame.timestamp + k * period)
                    yield frame
            if k == 0:
                dt = float(np.median(np.diff(stamps))) if len(stamps) > 1 else 1 / 30
                period = (stamps[-1] - stamps[0] + dt) if stamps else 0.0
            index_offset += n if n is not None else max_index + 1

    def close(self) -> None:
        self.inner.close()
