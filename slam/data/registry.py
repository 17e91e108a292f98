"""The registry of sequences that fetch themselves: where each archive lives and what it holds.

A registry name is ``<dataset>/<name>`` (``tum/fr1_desk``, ``7scenes/chess``, ``replica``);
``data.path`` may name one, optionally followed by a sequence inside the archive
(``7scenes/chess/seq-02``, ``replica/office3``). ``slam.data.fetch`` downloads the archive into the
data cache, extracts it, checks it with the entry's layout check and only then gives it its name.

Checksums: none of the three publishers (TUM CVG, Microsoft Research, the NICE-SLAM authors at
ETH) publishes a checksum for these archives, so ``sha256`` is None for every entry and the layout
check is the verification; the SHA-256 of the first download is recorded in the cache
(``hashes.json``) and later downloads must match it. An entry with a published checksum sets
``sha256`` and pooch checks it.

Layout checks (raise ``ArchiveError`` naming the file and the problem):
- TUM: ``rgb.txt``, ``depth.txt`` and ``groundtruth.txt``; every image the index files list exists.
- 7-Scenes: ``TrainSplit.txt`` and ``TestSplit.txt``; every sequence they name exists; each
  ``seq-XX`` folder has as many depth images and pose files as colour images (and at least one).
- Replica (NICE-SLAM): ``cam_params.json``; each scene folder has ``traj.txt`` with one pose per
  colour image and a depth image per colour image.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

from slam.data.errors import ArchiveError, DataNotFoundError
from slam.data.frame import FrameError
from slam.data.tum import read_file_list


@dataclass(frozen=True)
class RegistryEntry:
    """One downloadable archive.

    name:     registry name, ``<dataset>/<name>``; also its folder under the data cache
    dataset:  the loader that reads it (``data.dataset``)
    url:      official download location of the archive
    archive:  the archive's file name (also its name under a mirror: ``<mirror>/<dataset>/<archive>``)
    root:     the top-level folder the archive extracts to
    sequence: the folder below ``root`` the loader reads when ``data.path`` names no sequence
              ("" = ``root`` itself)
    sha256:   the publisher's checksum, if one is published (None: layout check + first-download hash)
    nested:   glob of archives inside ``root`` that are extracted in place (7-Scenes: ``seq-*.zip``)
    scenes:   the sequences of a multi-scene archive, each listed by ``slam_data list`` under its own
              name ``<name>/<scene>`` (Replica: ``replica/office0``); empty for one-sequence entries
    """

    name: str
    dataset: str
    url: str
    archive: str
    root: str
    sequence: str = ""
    sha256: Optional[str] = None
    nested: str = ""
    scenes: Tuple[str, ...] = ()

    def names(self) -> Tuple[str, ...]:
        """The names ``data.path`` takes for this archive: one per scene, else the entry's own."""
        return tuple(f"{self.name}/{s}" for s in self.scenes) or (self.name,)


TUM_BASE = "https://cvg.cit.tum.de/rgbd/dataset"
SEVEN_SCENES_BASE = "http://download.microsoft.com/download/2/8/5/28564B23-0828-408F-8631-23B1EFF1DAC8"
REPLICA_URL = "https://cvg-data.inf.ethz.ch/nice-slam/data/Replica.zip"   # NICE-SLAM's download script


def _tum(short: str, folder: str) -> RegistryEntry:
    seq = f"rgbd_dataset_{folder}"
    group = folder.split("_")[0]                       # freiburg1 | freiburg2 | freiburg3
    return RegistryEntry(f"tum/{short}", "tum", f"{TUM_BASE}/{group}/{seq}.tgz", f"{seq}.tgz", seq)


def _seven(scene: str) -> RegistryEntry:
    return RegistryEntry(f"7scenes/{scene}", "7scenes", f"{SEVEN_SCENES_BASE}/{scene}.zip", f"{scene}.zip",
                         scene, sequence="seq-01", nested="seq-*.zip")


ENTRIES = (
    _tum("fr1_desk", "freiburg1_desk"),
    _tum("fr1_desk2", "freiburg1_desk2"),
    _tum("fr1_room", "freiburg1_room"),
    _tum("fr1_xyz", "freiburg1_xyz"),
    _tum("fr2_xyz", "freiburg2_xyz"),
    _tum("fr3_office", "freiburg3_long_office_household"),
    *(_seven(s) for s in ("chess", "fire", "heads", "office", "pumpkin", "redkitchen", "stairs")),
    RegistryEntry("replica", "replica", REPLICA_URL, "Replica.zip", "Replica", sequence="room0",
                  scenes=("room0", "room1", "room2", "office0", "office1", "office2", "office3", "office4")),
)

Registry = Dict[str, RegistryEntry]
REGISTRY: Registry = {e.name: e for e in ENTRIES}


def lookup(path: str, registry: Optional[Registry] = None) -> Optional[Tuple[RegistryEntry, str]]:
    """``data.path`` -> (entry, sequence folder below the entry's root), or None if not a registry name.

    The longest registry name that is a leading part of ``path`` wins; the rest of ``path`` is the
    sequence (the entry's default when empty). A path such as ``./tum/fr1_desk`` is a local path.
    """
    registry = REGISTRY if registry is None else registry
    parts = path.strip("/").split("/")
    if path.startswith((".", "/", "~")):
        return None
    for n in range(len(parts), 0, -1):
        entry = registry.get("/".join(parts[:n]))
        if entry is not None:
            return entry, "/".join(parts[n:]) or entry.sequence
    return None


# --------------------------------------------------------------------------- layout checks
def _count(folder: Path, pattern: str) -> int:
    return sum(1 for _ in folder.glob(pattern))


def check_tum(root: Path) -> None:
    """A TUM sequence folder: index files present, every listed image present."""
    for name in ("rgb.txt", "depth.txt", "groundtruth.txt"):
        if not (root / name).is_file():
            raise ArchiveError(f"{root / name}: index file missing from the archive")
    for name in ("rgb.txt", "depth.txt"):
        try:
            _, files = read_file_list(root / name)
        except (FrameError, DataNotFoundError) as exc:
            raise ArchiveError(str(exc)) from None
        missing = [f for f in files if not (root / f).is_file()]
        if missing:
            raise ArchiveError(f"{root / name}: {len(missing)} of {len(files)} listed images are missing "
                               f"(first: {missing[0]})")


_SPLIT_RE = re.compile(r"^sequence(\d+)$", re.IGNORECASE)


def check_7scenes(root: Path) -> None:
    """A 7-Scenes scene folder: split files, the sequences they name, per-sequence file counts."""
    named = set()
    for name in ("TrainSplit.txt", "TestSplit.txt"):
        split = root / name
        if not split.is_file():
            raise ArchiveError(f"{split}: split file missing from the archive")
        for line in split.read_text(errors="replace").split():
            m = _SPLIT_RE.match(line.strip())
            if m:
                named.add(f"seq-{int(m.group(1)):02d}")
    seqs = sorted(p for p in root.glob("seq-*") if p.is_dir())
    for seq in sorted(named - {p.name for p in seqs}):
        raise ArchiveError(f"{root / seq}: sequence named in the split files is missing")
    if not seqs:
        raise ArchiveError(f"{root}: no seq-XX folder in the archive")
    for seq in seqs:
        n_color = _count(seq, "frame-*.color.*")
        n_depth, n_pose = _count(seq, "frame-*.depth.png"), _count(seq, "frame-*.pose.txt")
        if n_color == 0 or n_depth != n_color or n_pose != n_color:
            raise ArchiveError(f"{seq}: {n_color} colour images, {n_depth} depth images, {n_pose} pose files "
                               "(expected the same number, at least one)")


def check_replica(root: Path) -> None:
    """The NICE-SLAM Replica folder: cam_params.json; per scene, one pose and one depth per colour image."""
    if not (root / "cam_params.json").is_file():
        raise ArchiveError(f"{root / 'cam_params.json'}: missing from the archive")
    scenes = sorted(p for p in root.iterdir() if (p / "results").is_dir())
    if not scenes:
        raise ArchiveError(f"{root}: no scene folder with results/ in the archive")
    for scene in scenes:
        traj = scene / "traj.txt"
        if not traj.is_file():
            raise ArchiveError(f"{traj}: trajectory missing from the archive")
        n_pose = sum(1 for line in traj.read_text(errors="replace").splitlines() if line.strip())
        n_color = _count(scene / "results", "frame*.*")
        n_depth = _count(scene / "results", "depth*.png")
        if n_color == 0 or n_depth != n_color or n_pose != n_color:
            raise ArchiveError(f"{scene}: {n_color} colour images, {n_depth} depth images, {n_pose} poses in "
                               "traj.txt (expected the same number, at least one)")


LAYOUT_CHECKS: Dict[str, Callable[[Path], None]] = {
    "tum": check_tum, "7scenes": check_7scenes, "replica": check_replica,
}
