"""Shared pytest setup: quiet third-party telemetry, locate the shared real data, and the short
SLAM runs on the bundled sample that several test modules use (``sample_run`` fixture)."""
import os
from pathlib import Path

import pytest

os.environ.setdefault("RERUN_ANALYTICS", "0")  # never phone home from tests
os.environ.setdefault("RERUN_STRICT", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # nor from the Ray clusters of tests/test_batch.py

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
SEVEN_SCENES = SHARED_DATA / "7scenes-redkitchen-0000-0499"


@pytest.fixture
def seven_scenes_path() -> Path:
    if not SEVEN_SCENES.is_dir():
        pytest.skip(f"real 7-Scenes data not present at {SEVEN_SCENES} (only in the project's shared/)")
    return SEVEN_SCENES


# --------------------------------------------------------------------------- short sample runs
FAST = ["mapping.final_iters=20", "output.plots=false", "system.progress=false"]


class SampleRun:
    """Short SLAM runs on the bundled sample (the first ``frames`` frames)."""

    FAST = FAST

    @staticmethod
    def cfg(frames: int, *extra: str):
        from slam.config import load_config
        return load_config("default.yaml", [f"data.last={frames}", *FAST, *extra])

    @staticmethod
    def run(cfg, frames=None):
        from slam.data.sources import open_source
        from slam.runtime.system import SlamSystem
        system = SlamSystem(cfg)
        system.run(frames if frames is not None else open_source(cfg.data))
        return system

    @staticmethod
    def metrics(system) -> dict:
        """metrics.json's content for a finished run (without the image metrics)."""
        from slam.output.metrics import collect_metrics
        return collect_metrics(system.result(), eval_images_every=None)

    @staticmethod
    def ate_cm(system) -> float:
        from slam.output.metrics import trajectory_metrics
        frames, _, _ = system.recorder.snapshot()
        return trajectory_metrics(frames)["trajectory"]["ate_rmse_m"] * 100


@pytest.fixture(scope="session")
def sample_run() -> type:
    """``SampleRun``: build configs, run the system and score ATE on the bundled sample."""
    return SampleRun
