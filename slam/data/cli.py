"""``slam_data``: list and download the registry's sequences (the data cache ``run_slam`` uses).

    slam_data list                        # every registry name, whether it is in the cache, its URL
    slam_data download tum/fr1_desk       # download, verify and extract (resumes a partial download)
    slam_data download replica --keep-archive
Environment: SPHERE_SLAM_DATA (the cache folder), SPHERE_SLAM_MIRROR (base URL of a mirror).
Exit codes: 0 done, 2 unknown name, download or archive problem (the message says what to do).
"""
from __future__ import annotations

import argparse
import logging
import sys
from typing import Optional

from slam.data.errors import ArchiveError, DataNotFoundError
from slam.data.fetch import ENV_CACHE, ENV_MIRROR, data_root, entry_dir, fetch, recorded_hash, source_url
from slam.data.registry import REGISTRY


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="slam_data", description="Datasets that fetch themselves: list the registry, download a sequence.",
        epilog=f"Cache: ${ENV_CACHE} (now {data_root()}). Mirror: ${ENV_MIRROR} serves "
               "<mirror>/<dataset>/<archive>. In a config, data.path: <name> uses the cache (see docs/DATA.md).")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="registry names, cache state, download URLs")
    d = sub.add_parser("download", help="download, verify and extract sequences into the cache")
    d.add_argument("names", nargs="+", metavar="NAME", help="registry names, e.g. tum/fr1_desk 7scenes/chess replica")
    d.add_argument("--keep-archive", action="store_true", help="keep the downloaded archive next to the data")
    return p


def _list() -> int:
    root = data_root()
    print(f"data cache: {root}")
    for name, entry in REGISTRY.items():
        state = "present" if (entry_dir(entry, root) / entry.root).is_dir() else "-"
        checksum = "published" if entry.sha256 else ("recorded" if recorded_hash(entry, root) else "none yet")
        seq = f" (default sequence {entry.sequence})" if entry.sequence else ""
        print(f"  {name:<20} {entry.dataset:<8} {state:<8} sha256 {checksum:<9} {source_url(entry)}{seq}")
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "list":
        return _list()
    unknown = [n for n in args.names if n not in REGISTRY]
    if unknown:
        print(f"slam_data: unknown name {', '.join(unknown)} (one of {', '.join(REGISTRY)})", file=sys.stderr)
        return 2
    for name in args.names:
        try:
            folder = fetch(REGISTRY[name], keep_archive=args.keep_archive)
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
