"""Node parameters that are not part of the SLAM ``Config`` (frames, throttles, queue policy).

The SLAM itself is configured exactly like ``run_slam``: a ``config`` YAML (path or shipped name)
plus ``overrides`` (``section.key=value`` strings). Topic names default to ``data.color_topic`` /
``data.depth_topic`` / ``data.camera_info_topic`` of that config (RealSense names), the pairing
tolerance to ``data.max_time_diff``, raw depth units to ``data.depth_scale`` (None = 1000/m, the
ROS millimetre convention), and ``data.intrinsics`` / ``data.distortion`` override CameraInfo.
"""
from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any, List, Mapping

from slam.config import ConfigError

TF_MODES = ("auto", "map_camera", "map_odom_camera", "external_odom")
QUEUE_POLICIES = ("drop_oldest", "block")
RELIABILITIES = ("best_effort", "reliable")


@dataclass
class RosParams:
    """Everything the node reads besides the SLAM config. Units: seconds, metres."""

    config: str = "base.yaml"           # SLAM config: a path or a shipped name
    overrides: List[str] = field(default_factory=list)   # ["tracking.iters=6", ...]
    out: str = ""                        # run folder ("" = output.root/<timestamp>, like run_slam)
    color_topic: str = ""                # "" = data.color_topic of the config
    depth_topic: str = ""                # "" = data.depth_topic
    camera_info_topic: str = ""          # "" = data.camera_info_topic
    map_frame: str = "map"
    odom_frame: str = "odom"             # "" = no odom frame (map -> camera directly)
    camera_frame: str = ""               # "" = frame_id of the colour images
    # auto: map -> odom -> camera when odom_frame is set (SLAM is the odometry, map -> odom is
    # identity), else map -> camera. external_odom: another node publishes odom -> camera; the
    # node publishes the correction map -> odom = T_map_cam * inv(T_odom_cam).
    tf_mode: str = "auto"
    publish_tf: bool = True
    rep103_map: bool = True              # map axes x forward, y left, z up (REP-103) instead of
                                         # the first camera's optical axes (x right, y down, z fwd)
    queue_size: int = 2                  # frames waiting for tracking
    queue_policy: str = "drop_oldest"    # live: drop the oldest waiting frame; replay: block
    sub_queue_size: int = 5              # middleware subscriber queue per topic
    # ROS 2 only: reliability of the image and CameraInfo subscriptions. best_effort (the
    # sensor-data profile) connects to best-effort and reliable cameras; reliable (lossless
    # replay, e.g. `ros2 bag play`) gets nothing from a best-effort camera: the node then logs the
    # QoS mismatch and counts it in metrics.json (ros_input.qos_incompatible).
    input_reliability: str = "best_effort"
    cloud_period_s: float = 2.0          # point cloud at most this often (<= 0: never)
    cloud_max_points: int = 100_000      # subsampled (evenly) above this
    render_period_s: float = 0.0         # rendered image at most this often (<= 0: never)
    grid_topic: str = "/map"             # the occupancy grid (grid.enabled; nav_msgs/OccupancyGrid,
                                         # latched / transient local: what Nav2 and map_server use)
    grid_period_s: float = 1.0           # occupancy grid at most this often (<= 0: only at shutdown)
    info_warn_period_s: float = 5.0      # how often "waiting for CameraInfo" is repeated
    max_pending: int = 30                # unmatched messages kept per stream

    def resolved_tf_mode(self) -> str:
        if self.tf_mode != "auto":
            return self.tf_mode
        return "map_odom_camera" if self.odom_frame else "map_camera"


def params_from_mapping(raw: Mapping[str, Any]) -> RosParams:
    """Typed, checked ``RosParams`` from a plain mapping (ROS parameter server values).

    Unknown keys and wrong types raise ``ConfigError`` naming the key. ``overrides`` may be a
    list or one string with entries separated by ``;`` or newlines.
    """
    names = {f.name: f for f in dataclasses.fields(RosParams)}
    kwargs: dict = {}
    for key, value in raw.items():
        if key not in names:
            close = difflib.get_close_matches(str(key), list(names), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"unknown node parameter '{key}'{hint}")
        default = getattr(RosParams(), key)
        kwargs[key] = _coerce(key, value, default)
    p = RosParams(**kwargs)
    _validate(p)
    return p


def _coerce(key: str, value: Any, default: Any) -> Any:
    if isinstance(default, list):
        if isinstance(value, str):
            return [s.strip() for s in value.replace("\n", ";").split(";") if s.strip()]
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return list(value)
        raise ConfigError(f"node parameter '{key}': expected a list of strings, got {value!r}")
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"node parameter '{key}': expected true/false, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"node parameter '{key}': expected an integer, got {value!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"node parameter '{key}': expected a number, got {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise ConfigError(f"node parameter '{key}': expected a string, got {value!r}")
    return value


def _validate(p: RosParams) -> None:
    if p.tf_mode not in TF_MODES:
        raise ConfigError(f"node parameter 'tf_mode': '{p.tf_mode}' is not one of {list(TF_MODES)}")
    if p.queue_policy not in QUEUE_POLICIES:
        raise ConfigError(f"node parameter 'queue_policy': '{p.queue_policy}' is not one of {list(QUEUE_POLICIES)}")
    if p.input_reliability not in RELIABILITIES:
        raise ConfigError(f"node parameter 'input_reliability': '{p.input_reliability}' is not one of "
                          f"{list(RELIABILITIES)}")
    if p.tf_mode in ("map_odom_camera", "external_odom") and not p.odom_frame:
        raise ConfigError(f"node parameter 'tf_mode': '{p.tf_mode}' needs a non-empty odom_frame")
    for key in ("queue_size", "sub_queue_size", "cloud_max_points", "max_pending"):
        if getattr(p, key) < 1:
            raise ConfigError(f"node parameter '{key}': must be >= 1, got {getattr(p, key)}")
    if not p.map_frame:
        raise ConfigError("node parameter 'map_frame' must not be empty")


def topics(p: RosParams, cfg) -> dict:
    """{'color', 'depth', 'info'} topic names: node parameters, else the config's data.* names."""
    return {"color": p.color_topic or cfg.data.color_topic,
            "depth": p.depth_topic or cfg.data.depth_topic,
            "info": p.camera_info_topic or cfg.data.camera_info_topic}


def default_values() -> dict:
    """Parameter name -> default value (for ROS 2 ``declare_parameter``)."""
    return dataclasses.asdict(RosParams())

