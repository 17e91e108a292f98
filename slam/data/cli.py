"""slam_data: list and download the registry's sequences (the data cache run_slam uses).

    slam_data list                        # every name data.path takes, whether it is cached, its URL
    slam_data download tum/fr1_desk       # download, verify and extract (resumes a partial download)
    slam_data download replica/office0 --keep-archive
Environment: SPHERE_SLAM_DATA (the cache folder), SPHERE_SLAM_MIRROR (base URL of a mirror).
Exit codes: 0 done, 2 unknown name, download or archive problem (the message says what to do).
"""
from __future__ import annotations

import argparse
import logging
import sys
from typing import Optional

from slam.data.errors import ArchiveError, DataNotFoundError
from slam.data.fetch import ENV_CACHE, ENV_MIRROR, data_root, entry_dir, recorded_hash, sequence_folder, source_url
from slam.data.registry import REGISTRY, lookup

COLUMNS = ("NAME (data.path)", "DATASET", "CACHED", "CHECKSUM", "ARCHIVE")
LEGEND = f"""\
NAME      what data.path and slam_data download take; 7scenes/<scene>/seq-02 picks another
          sequence of a scene (default seq-01)
DATASET   the loader that reads it: the config's data.dataset (tum.yaml, 7scenes.yaml, replica.yaml)
CACHED    yes: extracted in the data cache; no: downloaded on first use, or ahead of time with
          slam_data download NAME
CHECKSUM  how a download is verified besides its layout: published = the publisher's SHA-256;
          recorded = the SHA-256 of this cache's first download, which a later download must match;
          none yet = nothing published, nothing downloaded (the first download's is recorded)
ARCHIVE   where it downloads from (${ENV_MIRROR} replaces the official location); same archive:
          the one of the row above (one download holds all of Replica's scenes)"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="slam_data", description="Datasets that fetch themselves: list the registry, download a sequence.",
        epilog=f"Cache: ${ENV_CACHE} (now {data_root()}). Mirror: ${ENV_MIRROR} serves "
               "<mirror>/<dataset>/<archive>. In a config, data.path: <name> uses the cache (see docs/DATA.md).")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the names data.path takes, cache state, download URLs (with a legend)")
    d = sub.add_parser("download", help="download, verify and extract sequences into the cache")
    d.add_argument("names", nargs="+", metavar="NAME",
                   help="names as slam_data list shows them, e.g. tum/fr1_desk 7scenes/chess replica/office0")
    d.add_argument("--keep-archive", action="store_true", help="keep the downloaded archive next to the data")
    return p


def listing_rows(root) -> list:
    """One row (the COLUMNS) per name ``data.path`` takes; the scenes of one archive share it."""
    rows = []
    for entry in REGISTRY.values():
        checksum = "published" if entry.sha256 else ("recorded" if recorded_hash(entry, root) else "none yet")
        extracted = entry_dir(entry, root) / entry.root
        for i, name in enumerate(entry.names()):
            folder = extracted / name[len(entry.name) + 1:] if entry.scenes else extracted
            rows.append((name, entry.dataset, "yes" if folder.is_dir() else "no", checksum,
                         source_url(entry) if i == 0 else "same archive"))
    return rows


def _list() -> int:
    root = data_root()
    print(f"data cache: {root} (${ENV_CACHE})")
    rows = [COLUMNS, *listing_rows(root)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS) - 1)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
    print()
    print(LEGEND)
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "list":
        return _list()
    unknown = [n for n in args.names if lookup(n) is None]
    if unknown:
        print(f"slam_data: unknown name {', '.join(unknown)} (slam_data list shows the names)", file=sys.stderr)
        return 2
    for name in args.names:
        entry, sequence = lookup(name)
        try:
            folder = sequence_folder(entry, sequence, keep_archive=args.keep_archive)
        except (DataNotFoundError, ArchiveError) as exc:
            print(f"slam_data: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"slam_data: interrupted; the partial download of {name} resumes next time", file=sys.stderr)
            return 130
        print(f"{name}: {folder}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
