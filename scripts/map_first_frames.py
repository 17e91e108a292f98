"""The start shared by scripts/calibrate_quality.py and scripts/profile_tracking.py: build a map
on the first frames of a sequence (sequential mode, no final refinement), then load the frames
that are tracked against it. Imported from those scripts (scripts/ is on sys.path when they run);
``slam`` must be importable first.
"""
from __future__ import annotations

from slam.config import load_config
from slam.data.sources import open_source
from slam.runtime.system import SlamSystem


def map_first_frames(config: str, overrides: list, map_frames: int):
    """Runs SLAM on frames [first, first + map_frames) of the configured sequence (``first``:
    its ``data.first``). -> (cfg, system, snapshot of the map, first)."""
    first = load_config(config, overrides).data.first
    cfg = load_config(config, [*overrides, "system.threaded=false", "system.progress=false",
                               f"data.last={first + map_frames}", "mapping.final_iters=0"])
    system = SlamSystem(cfg)
    system.run(open_source(cfg.data))
    return cfg, system, system.latest_map(), first


def load_frames(config: str, overrides: list, first: int, last: int) -> list:
    """Frames [first, last) of the configured sequence (absolute frame numbers), as a list."""
    more = load_config(config, [*overrides, f"data.first={first}", f"data.last={last}"])
    return list(open_source(more.data))
