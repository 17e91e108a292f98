#!/usr/bin/env python3
"""Resolve every runtime dependency for a Jetson (aarch64, CPython 3.10, glibc 2.35 = JetPack 6)
from the package registry, binary wheels only, and report what is missing with the fallback.

    python scripts/resolve_aarch64.py --out docs/aarch64_report.md            # resolve + download check
    python scripts/resolve_aarch64.py --no-download --out /tmp/report.md      # metadata only (seconds)

What it does:
1. reads ``install_requires`` and the ``viewer`` extra from setup.py (the runtime dependencies
   scripts/install.sh installs);
2. resolves them together with pip for the target (``pip install --dry-run --report`` with
   ``--platform manylinux2014_aarch64 --platform manylinux_2_17_aarch64 ... manylinux_2_35_aarch64
   --python-version 3.10 --implementation cp --abi cp310 --only-binary=:all:``: pip reads the
   wheels' metadata only);
   when that fails, each requirement alone, to name the ones without a wheel;
3. resolves again with ``numpy<2`` (NVIDIA's torch 2.5 wheel for JetPack 6 is built against
   NumPy 1.x), the package alone and with the viewer extra;
4. downloads every resolved wheel with ``pip download --no-deps`` (the same target options) into
   a temporary folder and records its size - except PyPI's torch and the CUDA packages it pulls,
   which a Jetson replaces with NVIDIA's torch and JetPack's CUDA (their metadata was resolved);
5. writes a markdown report: one row per package with its wheel, status and, where it is not
   usable on a Jetson as is, the fallback (``FALLBACKS`` below).
Exit code 0 when every package is available or has a fallback, 1 otherwise.
"""
from __future__ import annotations

import argparse
import ast
import datetime as dt
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# JetPack 6 is Ubuntu 22.04 (glibc 2.35): every manylinux tag up to 2_35 fits. pip takes each
# --platform literally (manylinux_2_35 does not imply 2_28), so all of them are listed.
GLIBC_MINORS = range(17, 36)
TARGET = ["--only-binary=:all:", "--platform", "manylinux2014_aarch64",
          *sum((["--platform", f"manylinux_2_{m}_aarch64"] for m in GLIBC_MINORS), []),
          "--python-version", "3.10", "--implementation", "cp", "--abi", "cp310"]
# CUDA builds PyPI's torch pulls in: a Jetson has JetPack's CUDA and NVIDIA's torch instead.
REPLACED_PREFIXES = ("torch", "nvidia-", "triton", "cuda-", "cuda_")
FALLBACKS = {
    "torch": "not for a Jetson: PyPI's aarch64 torch is a server (SBSA) CUDA build. Install NVIDIA's "
             "torch wheel for your JetPack first (JetPack 6: https://developer.download.nvidia.com/compute/"
             "redist/jp/v61/pytorch/, cp310); install.sh keeps an installed torch",
    "gsplat": "pure Python, compiles its CUDA code on first use; only the `gsplat` comparison backend "
              "imports it (raster.backend cuda/cpu never do), so it may stay uninstalled "
              "(pip install --no-deps, then the rest)",
    "open3d": "only for mesh export (output.mesh) and sample generation; if its wheel fails to import, "
              "leave output.mesh false",
    "rerun-sdk": "the optional viewer extra (--viewer/--rrd/--serve); 0.39 is the newest for Python 3.10 and "
                 "needs NumPy 2: next to a NumPy-1 torch install without it (NO_VIEWER=1)",
}
REPLACED_NOTE = "pulled by PyPI's torch only; JetPack provides CUDA (not downloaded)"


def setup_requirements(setup_py: Path = REPO / "setup.py") -> tuple[list[str], dict]:
    """(``install_requires``, ``extras_require``) of setup.py, read with ast (setup.py is not run)."""
    found = {}
    for node in ast.walk(ast.parse(setup_py.read_text())):
        if isinstance(node, ast.keyword) and node.arg in ("install_requires", "extras_require"):
            found[node.arg] = ast.literal_eval(node.value)
    if "install_requires" not in found:
        raise SystemExit(f"{setup_py}: no install_requires list")
    return found["install_requires"], found.get("extras_require", {})


def _pip(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=timeout)


def resolve(requirements: list[str], constraints: list[str] = ()) -> tuple[dict, str]:
    """Resolve for the target -> ({name: {version, wheel, url, requested}}, pip's error or "")."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        args = ["install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
                "--target", str(Path(tmp) / "t"), *TARGET]
        if constraints:
            cfile = Path(tmp) / "constraints.txt"
            cfile.write_text("\n".join(constraints) + "\n")
            args += ["-c", str(cfile)]
        r = _pip(*args, *requirements)
        if r.returncode != 0:
            lines = [ln for ln in r.stderr.splitlines() if ln.startswith("ERROR")]
            return {}, " ".join(lines) or r.stderr.strip()[-500:]
        out = {}
        for item in json.loads(report.read_text())["install"]:
            url = item["download_info"]["url"]
            out[item["metadata"]["name"].lower()] = {"version": item["metadata"]["version"], "url": url,
                                                     "wheel": url.rsplit("/", 1)[-1], "requested": item.get("requested", False)}
        return out, ""


def download(name: str, version: str, dest: Path) -> tuple[bool, float, str]:
    """``pip download --no-deps`` of one resolved wheel -> (ok, size MB, error)."""
    before = set(dest.iterdir())
    r = _pip("download", "--no-deps", "--quiet", "-d", str(dest), *TARGET, f"{name}=={version}")
    new = set(dest.iterdir()) - before
    size = sum(p.stat().st_size for p in new) / 1e6
    return r.returncode == 0 and bool(new), size, "" if r.returncode == 0 else r.stderr.strip()[-300:]


def _replaced(name: str) -> bool:
    return name.startswith(REPLACED_PREFIXES)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / "docs" / "aarch64_report.md"), help="markdown report to write")
    ap.add_argument("--no-download", action="store_true", help="resolve metadata only, download nothing")
    args = ap.parse_args(argv)

    core, extras = setup_requirements()
    reqs = core + extras.get("viewer", [])     # what install.sh installs: the package and its viewer
    resolved, error = resolve(reqs)
    missing: dict = {}
    if error:   # which requirements have no wheel: each alone
        for req in reqs:
            alone, err = resolve([req])
            if err:
                missing[req] = err
            resolved.update({k: v for k, v in alone.items() if k not in resolved})
    numpy1, numpy1_error = resolve(core, ["numpy<2"])
    _, numpy1_viewer_error = resolve(extras.get("viewer", []), ["numpy<2"])
    downloads: dict = {}
    if not args.no_download:
        with tempfile.TemporaryDirectory() as tmp:
            for name, info in sorted(resolved.items()):
                if not _replaced(name):
                    downloads[name] = download(name, info["version"], Path(tmp))
    rows, unresolved = [], []
    for name, info in sorted(resolved.items()):
        got = downloads.get(name)
        if _replaced(name):
            status = "resolved, replaced on a Jetson"
        elif got is None:
            status = "resolved (not downloaded)"
        elif got[0]:
            status = f"available ({got[1]:.1f} MB)"
        else:
            status = f"download failed: {got[2]}"
            if name not in FALLBACKS:
                unresolved.append(name)
        note = FALLBACKS.get(name, REPLACED_NOTE if _replaced(name) and name != "torch" else "")
        rows.append(f"| {name} | {info['version']} | `{info['wheel']}` | {status} | {note} |")
    for req, err in missing.items():
        name = req.split(">")[0].split("=")[0].split("<")[0].strip().lower()
        note = FALLBACKS.get(name, "")
        if not note:
            unresolved.append(name)
        rows.append(f"| {name} | - | - | **no wheel**: {err[:200]} | {note or '**no fallback known**'} |")
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    n1 = ("resolves" if not numpy1_error else f"does not resolve: {numpy1_error[:300]}")
    if not numpy1_error:
        n1 += " (" + ", ".join(f"{k} {numpy1[k]['version']}" for k in ("numpy", "opencv-python-headless", "open3d",
                                                                       "scipy", "matplotlib") if k in numpy1) + ")"
    viewer = " ".join(extras.get("viewer", []))
    n1 += f"; the viewer extra (`{viewer}`) " + (
        "resolves too" if not numpy1_viewer_error else
        "has no release that accepts numpy<2: install without it (`NO_VIEWER=1 bash scripts/install.sh`), "
        "the run itself needs no rerun")
    text = "\n".join([
        "# Runtime dependencies on a Jetson (aarch64, CPython 3.10, JetPack 6)",
        "",
        f"Generated by `python scripts/resolve_aarch64.py` on {when} from setup.py's `install_requires` "
        f"and its `viewer` extra ({len(reqs)} requirements: what `scripts/install.sh` installs), binary wheels only, "
        f"pip options `--only-binary=:all: --platform "
        f"manylinux2014_aarch64 --platform manylinux_2_{{17..35}}_aarch64 --python-version 3.10 --implementation cp "
        f"--abi cp310`. "
        + ("Every wheel not replaced on a Jetson was downloaded with `pip download --no-deps` (not kept)."
           if not args.no_download else "Metadata only (--no-download)."),
        "",
        f"Summary: {len(resolved)} packages resolved, {len(missing)} requirements without a wheel, "
        f"{len(unresolved)} without a fallback{': ' + ', '.join(unresolved) if unresolved else ''}.",
        f"With `numpy<2` (NVIDIA's torch 2.5 for JetPack 6 is built against NumPy 1.x) the package alone {n1}.",
        "",
        "| package | version | wheel | status | on a Jetson |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ])
    Path(args.out).write_text(text)
    print(text)
    return 0 if not unresolved else 1


if __name__ == "__main__":
    sys.exit(main())
