"""The fetch from the user's side: ``run_slam --config tum.yaml`` with fr1/desk missing downloads it
(here from a local mirror serving an archive of the bundled sample under fr1/desk's name) and runs;
offline it exits 2 with the URL, the target folder and the manual commands, without a traceback;
``slam_data list`` / ``download``."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fetch_helpers import ArchiveServer, closed_port_url, sample_tgz
from slam.data import cli as data_cli
from slam.data.registry import lookup

REPO = Path(__file__).resolve().parents[1]
TOP = "rgbd_dataset_freiburg1_desk"
FAST = ["--set", "data.last=8", "--set", "data.downscale=1", "--set", "mapping.final_iters=5",
        "--set", "output.plots=false", "--quiet"]


@pytest.fixture(scope="module")
def mirror():
    s = ArchiveServer()
    s.files[f"/tum/{TOP}.tgz"] = sample_tgz(TOP, frames=12)
    yield s
    s.close()


def _run_slam(tmp_path, env_extra, *args):
    env = dict(os.environ, PYTHONPATH=str(REPO), SPHERE_SLAM_DATA=str(tmp_path / "cache"), **env_extra)
    return subprocess.run([sys.executable, "-m", "slam.cli", "--config", "tum.yaml", *args], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)


def test_run_slam_tum_yaml_downloads_the_missing_sequence_then_runs(tmp_path, mirror):
    proc = _run_slam(tmp_path, {"SPHERE_SLAM_MIRROR": mirror.base}, "--out", str(tmp_path / "run"), *FAST)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "cache/tum/fr1_desk" / TOP / "rgb.txt").is_file()
    assert [r["path"] for r in mirror.log] == [f"/tum/{TOP}.tgz"]
    assert "ATE" in proc.stdout and (tmp_path / "run/metrics.json").is_file()


def test_run_slam_without_network_exits_2_with_the_manual_commands(tmp_path):
    base = closed_port_url("")
    proc = _run_slam(tmp_path, {"SPHERE_SLAM_MIRROR": base}, *FAST)
    url = f"{base}/tum/{TOP}.tgz"
    target = tmp_path / "cache/tum/fr1_desk"
    assert proc.returncode == 2
    assert proc.stderr.startswith("run_slam: cannot download tum/fr1_desk: ")   # nothing printed before
    assert url in proc.stderr and f"target: {target}" in proc.stderr
    assert f"curl -L -C - -o {target / (TOP + '.tgz')} {url}" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "cache").exists()   # no empty folders


def test_slam_data_list_and_download(tmp_path, mirror, monkeypatch, capsys):
    monkeypatch.setenv("SPHERE_SLAM_DATA", str(tmp_path))
    monkeypatch.setenv("SPHERE_SLAM_MIRROR", mirror.base)
    assert data_cli.main(["download", "tum/fr1_desk"]) == 0
    assert capsys.readouterr().out.strip() == f"tum/fr1_desk: {tmp_path / 'tum/fr1_desk' / TOP}"
    assert data_cli.main(["list"]) == 0
    listing = capsys.readouterr().out
    line = next(ln for ln in listing.splitlines() if ln.startswith("tum/fr1_desk "))
    assert line.split()[:4] == ["tum/fr1_desk", "tum", "yes", "recorded"] and line.endswith(f"{mirror.base}/tum/{TOP}.tgz")
    assert data_cli.main(["download", "tum/fr9_nope"]) == 2
    assert "unknown name tum/fr9_nope" in capsys.readouterr().err


def test_slam_data_list_has_a_header_a_legend_and_the_names_data_path_takes(tmp_path, monkeypatch, capsys):
    """Every listed name is one that data.path (and slam_data download) accepts, as the README
    writes them (replica/office0); the header names the columns and the legend explains each."""
    monkeypatch.setenv("SPHERE_SLAM_DATA", str(tmp_path))
    assert data_cli.main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert re.split(r"\s{2,}", lines[1].strip()) == list(data_cli.COLUMNS)
    table = lines[2:lines.index("")]
    names = [row.split()[0] for row in table]
    readme_names = re.findall(r"`((?:tum|7scenes|replica)/[\w-]+)`", (REPO / "README.md").read_text())
    assert "replica/office0" in readme_names and set(readme_names) <= set(names)
    assert "replica" not in names and all(lookup(n) is not None for n in names)
    legend = lines[lines.index("") + 1:]
    for column in data_cli.COLUMNS:                        # every column explained, with its values
        assert any(ln.startswith(column.split()[0] + " ") for ln in legend), column
    assert "none yet" in "\n".join(legend) and "no:" in "\n".join(legend)
