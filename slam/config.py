"""The one typed configuration schema, YAML loading with inheritance, and ``--set`` overrides.

A config file is YAML whose top-level keys are the sections below. ``inherit_from: base.yaml``
(a path relative to the file, or a bare name of a shipped config) merges the parent first; the
child's keys override key by key. Unknown keys and wrong types are errors naming the key and a
close match. ``load_config(path, overrides=["tracking.iters=20"])`` returns a ``Config``.
"""
from __future__ import annotations

import dataclasses
import difflib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Literal, Optional

import yaml

from slam.resources import resolve_config_path


class ConfigError(ValueError):
    """A config file or override is invalid; the message names the key or file."""


# --------------------------------------------------------------------------- schema
@dataclass
class DataConfig:
    """Where frames come from and how they are subsampled."""

    dataset: Literal["tum", "7scenes", "replica", "rosbag", "realsense"] = "tum"
    path: str = "sample"            # folder, bag or recording; "sample" = the bundled sample;
                                    # a registry name (slam_data list) or "live": docs/DATA.md
    download: bool = True           # fetch a registry sequence missing from the data cache
    realsense: List[int] = field(default_factory=lambda: [640, 480, 30])  # live [w, h, fps]
    stride: int = 1                 # take every stride-th frame
    first: int = 0                  # first frame index (before stride)
    last: Optional[int] = None      # one past the last frame index (before stride); None = to the end
    downscale: int = 1              # integer factor applied to both images and K
    intrinsics: Optional[List[float]] = None   # [fx, fy, cx, cy] override (required for replica)
    distortion: Optional[List[float]] = None   # OpenCV k1 k2 p1 p2 [k3] override
    depth_scale: Optional[float] = None        # raw depth units per metre override
    # Unregistered colour (7-Scenes, raw Kinect v1): the colour camera's [fx, fy, cx, cy] and the
    # depth-to-colour translation [tx, ty, tz] (m); colour is resampled into the depth camera.
    # scripts/estimate_color_registration.py estimates both from the data.
    color_intrinsics: Optional[List[float]] = None
    color_translation: Optional[List[float]] = None
    max_time_diff: float = 0.02     # s, colour/depth/ground-truth association tolerance
    color_topic: str = "/camera/color/image_raw"
    depth_topic: str = "/camera/aligned_depth_to_color/image_raw"
    camera_info_topic: str = "/camera/color/camera_info"
    repeat: int = 1                 # play the sequence this many times (soak tests)


@dataclass
class RasterConfig:
    backend: Literal["auto", "cuda", "cpu", "reference"] = "auto"


@dataclass
class TrackingConfig:
    iters: int = 8                  # Gauss-Newton (LM) iterations per frame, all pyramid levels
    fd_rot: float = 0.001           # finite-difference step of the pose Jacobian, rad
    fd_trans: float = 0.001         # finite-difference step of the pose Jacobian, m
    damping: float = 1e-3           # initial Levenberg-Marquardt damping (relative to diag(H))
    damping_down: float = 0.3       # damping factor after an accepted LM step ...
    damping_up: float = 10.0        # ... and after a rejected one
    lm_attempts: int = 4            # damped steps tried per iteration before giving up (converged)
    huber_color: float = 0.1        # Huber threshold of the colour residuals (0-1 intensity)
    huber_depth: float = 0.05       # Huber threshold of the depth residuals (m)
    depth_weight: float = 1.0       # lambda in L1 colour + lambda * L1 depth
    alpha_threshold: float = 0.95   # pixels with rendered alpha above this count as known
    pyramid_levels: int = 2         # coarse-to-fine levels (1 = the finest only)
    coarse_share: float = 0.6       # share of the iterations spent on the coarser levels
    downscale: int = 1              # frames are tracked (and relocalised) at the input / this
                                    # factor: the finest pyramid level
    exposure: bool = True           # per-frame affine exposure (gain, bias) on colour
    min_known_fraction: float = 0.2 # fewer known pixels than this = tracking failure
    residual_spike: float = 3.0     # final loss above spike * running median = failure
    recovery_iters: int = 20        # iterations for a recovery attempt
    converged_step: float = 1e-5    # stop a level when the pose step is below this (rad / m)
    analytic_iters: int = 6         # the first N LM iterations (coarse-to-fine order) take the
                                    # pose Jacobian from the render's image gradients (no extra
                                    # render); the rest use finite differences (6 extra renders)


@dataclass
class RelocaliseConfig:
    """Finding the camera in a map it lost (or in a saved map): see slam/tracking/relocalise.py."""

    after_failures: int = 2         # SLAM: consecutive tracking failures before relocalising
    after_failures_saved_map: int = 5  # saved map: consecutive failed verifications before
                                    # relocalising again (views leaving the saved map fail
                                    # verification while the local layer still tracks them)
    max_skip: int = 16              # while lost, attempts back off to one every N frames
    coarse_width: int = 40          # px: render-and-compare candidates are scored at this width
    top_k: int = 4                  # best keyframe poses perturbed and scored
    refine_k: int = 3               # render-and-compare candidates refined by the tracker
    pnp_k: int = 8                  # best-scoring keyframes matched with ORB + PnP
    pnp_refine: int = 2             # PnP candidates refined by the tracker
    shift: float = 0.1              # m: perturbation of the candidate poses
    angle_deg: float = 8.0          # pan/tilt perturbation of the candidate poses
    min_coverage: float = 0.3       # accept: share of valid-depth pixels the map covers ...
    min_agreement: float = 0.7      # ... and share of those where depth and colour agree
    use_features: bool = True       # ORB + PnP candidates (OpenCV)


@dataclass
class MappingConfig:
    iters: int = 30                 # optimisation iterations per new keyframe
    final_iters: int = 300          # refinement steps over all keyframes at the end of input
    window: int = 6                 # recent keyframes optimised together
    random_keyframes: int = 2       # older keyframes added at random per step
    max_keyframes: int = 200        # keyframes kept (compact, host memory); oldest covisible dropped
    keyframe_every: int = 5         # a keyframe at least every N frames ...
    keyframe_translation: float = 0.05  # ... or after this many metres ...
    keyframe_rotation_deg: float = 5.0  # ... or this many degrees
    keyframe_downscale: Optional[int] = None  # stored keyframes = input / this factor; null =
                                    # tracking.downscale (map at the resolution the tracker sees)
    lr_means: float = 0.001
    lr_radii: float = 0.01          # on log radius
    lr_colors: float = 0.02
    lr_opacities: float = 0.05      # on opacity logit
    depth_weight: float = 1.0
    densify_alpha: float = 0.9      # add spheres where rendered alpha is below this ...
    densify_depth_error: float = 0.05  # ... or depth error above this (m) in front of the surface
    densify_color_error: float = 1.0   # ... or mean |colour error| above this (0-1; 1 = off)
    densify_stride: int = 2         # sample every n-th pixel when adding spheres
    radius_scale: float = 0.5       # initial radius = scale * stride * z / f (half a grid cell)
    initial_opacity: float = 0.9


@dataclass
class MapConfig:
    max_spheres: int = 2_000_000    # hard budget, never exceeded
    max_mb: Optional[float] = None  # optional hard budget in megabytes of parameters
    chunk: int = 65536              # capacity grows in chunks of this many spheres


@dataclass
class PrunerConfig:
    enabled: bool = True
    every: int = 5                  # prune after every N keyframes
    window: int = 3                 # a score must stay low over this many prune rounds
    weight_ema: float = 0.5         # EMA factor of the per-keyframe statistics
    score_error_weight: float = 1.0 # how much low reprojection error raises importance
    threshold: float = 0.3          # importance below this (relative to the median) is low
    min_opacity: float = 0.05       # transparent spheres are removed
    max_radius_px: float = 60.0     # oversized spheres (screen radius) are removed
    explore_keep: float = 0.5       # threshold multiplier while exploring new space (keeps more)
    revisit_prune: float = 2.0      # threshold multiplier while revisiting known space


@dataclass
class OutputConfig:
    root: str = "runs"              # run folders are created under this
    name: Optional[str] = None      # run folder name; None = timestamped
    save_map: bool = True
    mesh: bool = False              # TSDF mesh export (open3d)
    plots: bool = True
    eval_images_every: int = 1      # evaluate PSNR/SSIM on every n-th keyframe


@dataclass
class ViewerConfig:
    enabled: bool = False           # spawn / connect to a rerun viewer
    rrd: Optional[str] = None       # record to this .rrd file instead
    map_every: int = 10             # log the map every N frames
    max_points: int = 100_000


@dataclass
class SystemConfig:
    device: str = "auto"            # "auto" | "cpu" | "cuda" | "cuda:1"
    threaded: bool = True           # False = deterministic single-thread mode
    queue_size: int = 4             # bounded keyframe queue
    seed: int = 0
    progress: bool = True


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    raster: RasterConfig = field(default_factory=RasterConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    relocalise: RelocaliseConfig = field(default_factory=RelocaliseConfig)
    mapping: MappingConfig = field(default_factory=MappingConfig)
    map: MapConfig = field(default_factory=MapConfig)
    pruner: PrunerConfig = field(default_factory=PrunerConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    viewer: ViewerConfig = field(default_factory=ViewerConfig)
    system: SystemConfig = field(default_factory=SystemConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------- loading
INHERIT_KEY = "inherit_from"


def _read_yaml(path: Path) -> dict:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections, got {type(data).__name__}")
    return data


def _merge(base: dict, child: dict) -> dict:
    out = dict(base)
    for key, value in child.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def load_raw(path: str | Path, _seen: tuple = ()) -> dict:
    """Read a config file and its ``inherit_from`` chain into one merged dict."""
    path = resolve_config_path(path)
    if path in _seen:
        raise ConfigError(f"{path}: inheritance cycle through {[str(p) for p in _seen]}")
    data = _read_yaml(path)
    parent = data.pop(INHERIT_KEY, None)
    if parent is None:
        return data
    parent_path = Path(parent)
    if not parent_path.is_absolute() and (path.parent / parent_path).exists():
        parent_path = path.parent / parent_path
    return _merge(load_raw(parent_path, _seen + (path,)), data)


def _parse_override(text: str) -> tuple[list[str], Any]:
    if "=" not in text:
        raise ConfigError(f"override '{text}' must look like section.key=value")
    key, value = text.split("=", 1)
    try:
        parsed = yaml.safe_load(value) if value.strip() else None
    except yaml.YAMLError:
        parsed = value
    return key.strip().split("."), parsed


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Apply ``section.key=value`` strings (values parsed as YAML) to a raw config dict."""
    raw = _merge({}, raw)
    for text in overrides:
        keys, value = _parse_override(text)
        node = raw
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override '{text}': '{k}' is not a section")
        node[keys[-1]] = value
    return raw


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union:  # Optional[X]
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0], key)
    if origin is Literal:
        if value not in args:
            close = difflib.get_close_matches(str(value), [str(a) for a in args], n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"{key}: '{value}' is not one of {list(args)}{hint}")
        return value
    if origin in (list, List):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {type(value).__name__} {value!r}")
        return [_coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(value)] if args else list(value)
    if tp is float:
        if isinstance(value, str):
            # YAML 1.1 reads '3e-4' (no dot) as a string; accept any plain float literal.
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {type(value).__name__} {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {type(value).__name__} {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true/false, got {type(value).__name__} {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {type(value).__name__} {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, key)
    raise ConfigError(f"{key}: unsupported type {_type_name(tp)}")  # pragma: no cover


def _build(cls: type, raw: Any, prefix: str = "") -> Any:
    where = prefix or "config"
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a section (mapping), got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in raw.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f" (did you mean '{(prefix + '.') if prefix else ''}{close[0]}'?)" if close else ""
            raise ConfigError(f"unknown config key '{full}'{hint}")
        kwargs[key] = _coerce(value, hints[key], full)
    return cls(**kwargs)


def config_from_dict(raw: dict) -> Config:
    """Build a typed ``Config`` from a plain dict; raises ``ConfigError`` on any problem."""
    return _build(Config, raw)


def load_config(path: str | Path | None = None, overrides: Optional[list[str]] = None) -> Config:
    """Load ``path`` (default: the shipped ``default.yaml``), apply overrides, validate.

    path: a file path, or a bare name such as ``tum.yaml`` of a config shipped with the package.
    overrides: ``["tracking.iters=20", ...]``, values parsed as YAML.
    """
    raw = load_raw(path or "default.yaml")
    raw = apply_overrides(raw, overrides or [])
    cfg = config_from_dict(raw)
    validate(cfg)
    return cfg


def validate(cfg: Config) -> None:
    """Range checks the types alone cannot express."""
    # null means tracking.downscale; an explicit value is a factor like the others (0 is refused).
    kf_downscale = cfg.mapping.keyframe_downscale
    kf_downscale = 1 if kf_downscale is None else kf_downscale
    positive = {
        "data.stride": cfg.data.stride, "data.downscale": cfg.data.downscale,
        "data.repeat": cfg.data.repeat, "tracking.pyramid_levels": cfg.tracking.pyramid_levels,
        "tracking.downscale": cfg.tracking.downscale,
        "mapping.window": cfg.mapping.window, "mapping.max_keyframes": cfg.mapping.max_keyframes,
        "mapping.keyframe_every": cfg.mapping.keyframe_every, "map.max_spheres": cfg.map.max_spheres,
        "map.chunk": cfg.map.chunk, "system.queue_size": cfg.system.queue_size,
        "mapping.densify_stride": cfg.mapping.densify_stride,
        "mapping.keyframe_downscale": kf_downscale,
        "pruner.every": cfg.pruner.every, "pruner.window": cfg.pruner.window,
        "tracking.lm_attempts": cfg.tracking.lm_attempts,
        "relocalise.after_failures": cfg.relocalise.after_failures,
        "relocalise.after_failures_saved_map": cfg.relocalise.after_failures_saved_map,
        "relocalise.max_skip": cfg.relocalise.max_skip, "relocalise.coarse_width": cfg.relocalise.coarse_width,
        "relocalise.top_k": cfg.relocalise.top_k,
    }
    for key, value in positive.items():
        if value < 1:
            raise ConfigError(f"{key}: must be >= 1, got {value}")
    if cfg.data.first < 0:
        raise ConfigError(f"data.first: must be >= 0, got {cfg.data.first}")
    if cfg.data.last is not None and cfg.data.last <= cfg.data.first:
        raise ConfigError(f"data.last: must be > data.first ({cfg.data.first}), got {cfg.data.last}")
    if cfg.data.intrinsics is not None and len(cfg.data.intrinsics) != 4:
        raise ConfigError(f"data.intrinsics: expected [fx, fy, cx, cy], got {cfg.data.intrinsics}")
    if cfg.tracking.iters < 0 or cfg.mapping.iters < 0:
        raise ConfigError("tracking.iters and mapping.iters must be >= 0")
    if not 0.0 <= cfg.tracking.coarse_share <= 1.0:
        raise ConfigError(f"tracking.coarse_share: must be in [0, 1], got {cfg.tracking.coarse_share}")
    if cfg.tracking.huber_color <= 0 or cfg.tracking.huber_depth <= 0:
        raise ConfigError("tracking.huber_color and tracking.huber_depth must be > 0")
    if cfg.tracking.analytic_iters < 0:
        raise ConfigError(f"tracking.analytic_iters: must be >= 0, got {cfg.tracking.analytic_iters}")


def dump_config(cfg: Config, path: str | Path) -> None:
    """Write the resolved config as YAML (loadable again with ``load_config``)."""
    Path(path).write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
