"""Where the shipped configs and the bundled sample live, installed or in a source checkout.

After ``pip install .`` they are package data (``slam/_configs``, ``slam/_sample``); in a source
checkout they are the top-level ``configs/`` and ``datasets/sample/`` folders.
"""
from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _first_existing(*candidates: Path) -> Path:
    for c in candidates:
        if c.is_dir():
            return c
    return candidates[-1]


def configs_dir() -> Path:
    """Folder of the shipped YAML configs."""
    return _first_existing(_PKG / "_configs", _PKG.parent / "configs")


def sample_dir() -> Path:
    """Folder of the bundled sample sequence (TUM layout)."""
    return _first_existing(_PKG / "_sample", _PKG.parent / "datasets" / "sample")


def resolve_config_path(name: str | Path) -> Path:
    """A config path as given if it exists, else a shipped config of that bare name.

    Raises ``FileNotFoundError`` naming both places looked at.
    """
    path = Path(name).expanduser()
    if path.is_file():
        return path.resolve()
    shipped = configs_dir() / path.name
    if not path.suffix:
        shipped = shipped.with_suffix(".yaml")
    if path.parent == Path(".") and shipped.is_file():
        return shipped
    available = sorted(p.name for p in configs_dir().glob("*.yaml"))
    raise FileNotFoundError(
        f"config '{name}' not found (looked at {path.resolve()} and the shipped configs in "
        f"{configs_dir()}: {', '.join(available) or 'none'})"
    )


def resolve_data_path(path: str) -> Path:
    """``"sample"`` means the bundled sample; anything else is a user path."""
    if path == "sample":
        return sample_dir()
    return Path(path).expanduser()
