"""YAML loading with inheritance, ``--set`` overrides and validation of the typed schema
(``slam.config.schema``).

A config file is YAML whose top-level keys are the sections of ``slam.config.schema``. ``inherit_from: base.yaml``
(a path relative to the file, or a bare name of a shipped config) merges the parent first; the
child's keys override key by key. Unknown keys and wrong types are errors naming the key and a
close match; a key that was removed (``REMOVED_KEYS``) says why and what to do instead.
``load_config(path, overrides=["tracking.iters=20"])`` returns a ``Config``.
"""
from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import math
import re
import typing
from pathlib import Path
from typing import Any, List, Literal, Optional

import yaml

from slam.config.schema import Config
from slam.resources import resolve_config_path


class ConfigError(ValueError):
    """A config file or override is invalid; the message names the key or file."""


# Keys that no longer exist, with why and what to do instead: a config that still sets one fails
# with this message (not a bare "unknown key"). Remove an entry once configs that old are unlikely.
_RENDER_ORACLE = ("was read only by the render-difference solver ('renders'), which is no longer a run-time "
                  "solver (issue 36: it is the tests' oracle, tests/render_oracle.py)")
REMOVED_KEYS = {
    "tracking.solver": "the tracker has one solver, the fused Gauss-Newton LM (slam/tracking/fused.py), on every "
                       "raster backend (reference included); 'renders' is the tests' oracle now (issue 36)",
    "loop.align_solver": "loop verification's dense alignment runs the tracker's one solver (issue 36)",
    "tracking.analytic_iters": _RENDER_ORACLE,
    "tracking.fd_rot": _RENDER_ORACLE,
    "tracking.fd_trans": _RENDER_ORACLE,
    "reinit.search_first_interval_s": "renamed system.slow_stream_interval_s (one notion of a slow stream for "
                                      "the re-initialiser and the threaded runner); set that key instead",
}


# --------------------------------------------------------------------------- loading
INHERIT_KEY = "inherit_from"


def _read_yaml(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a text file (byte {exc.start} is not UTF-8); a config is YAML text") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{yaml_error_text(path, exc)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections, got {type(data).__name__}")
    return data


def yaml_error_text(path: Path, exc: yaml.YAMLError) -> str:
    """``path:line:column: not valid YAML: problem (context)`` for a PyYAML error (its own text
    spans several lines and names "<unicode string>" instead of the file)."""
    mark = getattr(exc, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(exc, "problem", None) or str(exc).strip().splitlines()[-1]
    context = getattr(exc, "context", None)
    return f"{where}: not valid YAML: {problem}" + (f" ({context})" if context else "")


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
        if math.isnan(value):
            raise ConfigError(f"{key}: expected a number, got nan")
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
        if full in REMOVED_KEYS:
            raise ConfigError(f"config key '{full}' was removed: {REMOVED_KEYS[full]}. Delete it from the "
                              f"config file or --set")
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
        "loop.queue_size": cfg.loop.queue_size, "loop.min_separation": cfg.loop.min_separation,
        "loop.top_k": cfg.loop.top_k,
    }
    for key, value in positive.items():
        if value < 1:
            raise ConfigError(f"{key}: must be >= 1, got {value}")
    if cfg.data.read_threads < 0:
        raise ConfigError(f"data.read_threads: must be >= 0 (0: read in the caller's thread), got {cfg.data.read_threads}")
    if not cfg.data.max_time_diff > 0:
        raise ConfigError(f"data.max_time_diff: seconds, must be > 0, got {cfg.data.max_time_diff}")
    if cfg.data.depth_scale is not None and not cfg.data.depth_scale > 0:
        raise ConfigError(f"data.depth_scale: raw depth units per metre, must be > 0, got {cfg.data.depth_scale}")
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", cfg.system.device):
        raise ConfigError(f"system.device: one of auto, cpu, cuda, cuda:N, got '{cfg.system.device}'")
    if cfg.data.first < 0:
        raise ConfigError(f"data.first: must be >= 0, got {cfg.data.first}")
    if cfg.data.last is not None and cfg.data.last <= cfg.data.first:
        raise ConfigError(f"data.last: must be > data.first ({cfg.data.first}), got {cfg.data.last}")
    for key in ("rolling_shutter_s", "depth_rolling_shutter_s"):
        value = getattr(cfg.data, key)
        if value is not None and not -1.0 < value < 1.0:
            raise ConfigError(f"data.{key}: the readout in seconds, in (-1, 1) (negative: rows read bottom "
                              f"to top), got {value}")
    if cfg.data.intrinsics is not None and len(cfg.data.intrinsics) != 4:
        raise ConfigError(f"data.intrinsics: expected [fx, fy, cx, cy], got {cfg.data.intrinsics}")
    if cfg.system.max_unmapped_keyframes < 0:
        raise ConfigError(f"system.max_unmapped_keyframes: must be >= 0, got {cfg.system.max_unmapped_keyframes}")
    interval = cfg.system.switch_interval_ms
    if interval is not None and not 0.0 < interval <= 1000.0:
        raise ConfigError(f"system.switch_interval_ms: milliseconds in (0, 1000] or null (Python's own), got {interval}")
    if cfg.tracking.iters < 0 or cfg.mapping.iters < 0:
        raise ConfigError("tracking.iters and mapping.iters must be >= 0")
    if not 0.0 <= cfg.tracking.coarse_share <= 1.0:
        raise ConfigError(f"tracking.coarse_share: must be in [0, 1], got {cfg.tracking.coarse_share}")
    if cfg.tracking.huber_color <= 0 or cfg.tracking.huber_depth <= 0:
        raise ConfigError("tracking.huber_color and tracking.huber_depth must be > 0")
    if not 0.0 <= cfg.tracking.obs_gradient <= 1.0:
        raise ConfigError(f"tracking.obs_gradient: must be in [0, 1], got {cfg.tracking.obs_gradient}")
    lp = cfg.loop
    sigmas = (lp.odometry_sigma_trans, lp.odometry_sigma_rot_deg, lp.loop_sigma_trans, lp.loop_sigma_rot_deg)
    if min(sigmas) <= 0:
        raise ConfigError("loop.*_sigma_*: pose-graph standard deviations must be > 0")
    if cfg.mapping.lr_pose_rot < 0 or cfg.mapping.lr_pose_trans < 0 or cfg.mapping.seam_iters < 0:
        raise ConfigError("mapping.lr_pose_rot / lr_pose_trans / seam_iters must be >= 0")
    v = cfg.viewer
    if not 1 <= v.grpc_port <= 65535 or not 0 <= v.web_port <= 65535 or (v.web_port and v.web_port == v.grpc_port):
        raise ConfigError(f"viewer.grpc_port / viewer.web_port: ports 1-65535 (web 0 = no page), different, "
                          f"got {v.grpc_port} / {v.web_port}")
    if v.server_memory_mb < 1:
        raise ConfigError(f"viewer.server_memory_mb: must be >= 1, got {v.server_memory_mb}")
    _validate_grid(cfg.grid)
    try:
        ipaddress.ip_address(v.bind)
    except ValueError:
        raise ConfigError(f"viewer.bind: an IP address (0.0.0.0 = every interface, 127.0.0.1 = this machine), "
                          f"got '{v.bind}'") from None


def _validate_grid(g) -> None:
    """``grid.*``: sizes positive, the height band and ranges ordered, thresholds probabilities."""
    if g.resolution <= 0 or g.points_per_keyframe < 1 or g.floor_keyframes < 1 or g.max_reintegrations < 1:
        raise ConfigError("grid.resolution, points_per_keyframe, floor_keyframes, max_reintegrations must be > 0")
    if not 0.0 <= g.min_height < g.max_height:
        raise ConfigError(f"grid: need 0 <= min_height < max_height, got {g.min_height} / {g.max_height}")
    if not 0.0 < g.free_coverage <= 1.0:
        raise ConfigError(f"grid.free_coverage: must be in (0, 1], got {g.free_coverage}")
    if not 0.0 <= g.min_range < g.max_range:
        raise ConfigError(f"grid: need 0 <= min_range < max_range, got {g.min_range} / {g.max_range}")
    if not 0.0 < g.free_thresh < g.occupied_thresh < 1.0:
        raise ConfigError(f"grid: need 0 < free_thresh < occupied_thresh < 1, got {g.free_thresh} / {g.occupied_thresh}")
    if g.log_odds_hit <= 0 or g.log_odds_miss >= 0:
        raise ConfigError(f"grid: log_odds_hit must be > 0 and log_odds_miss < 0, got {g.log_odds_hit} / {g.log_odds_miss}")
    if g.floor == "camera" and g.camera_height <= g.min_height:
        raise ConfigError(f"grid.floor camera: grid.camera_height (m above the floor) must exceed grid.min_height, "
                          f"got {g.camera_height}")


def dump_config(cfg: Config, path: str | Path) -> None:
    """Write the resolved config as YAML (loadable again with ``load_config``)."""
    Path(path).write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
