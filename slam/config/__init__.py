"""The one typed configuration: ``schema`` (the sections and their documented keys) and
``loading`` (YAML with ``inherit_from``, ``--set`` overrides, unknown keys fail, range checks).
``load_config(path, overrides=["tracking.iters=20"])`` returns a ``Config``."""
from slam.config.loading import ConfigError, apply_overrides, config_from_dict, dump_config, load_config, load_raw, validate
from slam.config.schema import (
    Config,
    DataConfig,
    GridConfig,
    LoopConfig,
    MapConfig,
    MappingConfig,
    OutputConfig,
    PrunerConfig,
    QualityConfig,
    RasterConfig,
    ReinitConfig,
    RelocaliseConfig,
    SystemConfig,
    TrackingConfig,
    ViewerConfig,
)

__all__ = ["ConfigError", "apply_overrides", "config_from_dict", "dump_config", "load_config", "load_raw", "validate",
           "Config", "DataConfig", "GridConfig", "LoopConfig", "MapConfig", "MappingConfig", "OutputConfig", "PrunerConfig",
           "QualityConfig", "RasterConfig", "ReinitConfig", "RelocaliseConfig", "SystemConfig", "TrackingConfig", "ViewerConfig"]
