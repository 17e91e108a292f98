"""Shared pytest setup: quiet third-party telemetry, locate the shared real data."""
import os
from pathlib import Path

import pytest

os.environ.setdefault("RERUN_ANALYTICS", "0")  # never phone home from tests
os.environ.setdefault("RERUN_STRICT", "0")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
SEVEN_SCENES = SHARED_DATA / "7scenes-redkitchen-0000-0499"


@pytest.fixture
def seven_scenes_path() -> Path:
    if not SEVEN_SCENES.is_dir():
        pytest.skip(f"real 7-Scenes data not present at {SEVEN_SCENES} (only in the project's shared/)")
    return SEVEN_SCENES
