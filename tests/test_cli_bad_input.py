"""run_slam on bad command-line input: a clear one-line error (exit 2, no traceback), nothing run.

The data loaders' own catalogue is tests/test_data_bad_input.py; this file holds what only the
command line sees (the run folder, the frame selection as a whole)."""
from pathlib import Path

import pytest

from slam.cli import main


def run(capsys, *args):
    rc = main(["--quiet", *args])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err.strip().splitlines()[-1] if err.strip() else ""


def test_out_that_is_a_file_is_refused_before_anything_runs(tmp_path, capsys):
    taken = tmp_path / "taken.txt"
    taken.write_text("mine\n")
    rc, line = run(capsys, "--out", str(taken))
    assert rc == 2 and line == f"run_slam: --out '{taken}' is a file, not a folder: pass a new or existing folder"
    assert taken.read_text() == "mine\n"


@pytest.mark.parametrize("where", ["file/sub", "/proc/sphere-slam-nope/run"])
def test_out_that_cannot_be_created_names_it(tmp_path, capsys, where):
    (tmp_path / "file").write_text("")
    out = where if where.startswith("/") else str(tmp_path / where)
    rc, line = run(capsys, "--set", "data.last=2", "--out", out)
    assert rc == 2
    assert line.startswith(f"run_slam: cannot create the run folder under '{out}': ")
    assert line.endswith("pass --out (or set output.root) with a writable folder")
    assert not Path(out).exists()


def test_a_selection_with_no_frame_is_an_error_not_an_empty_run(tmp_path, capsys):
    out = tmp_path / "run"
    rc, line = run(capsys, "--set", "data.first=1000", "--out", str(out))
    assert rc == 2
    assert line.endswith("sample: data.first=1000 selects no frame: the sequence has 150 frames (0..149)")
    assert not out.exists()


def test_a_run_folder_reused_on_purpose_is_named_in_a_warning(tmp_path, caplog):
    from slam.config import load_config
    from slam.output.run_folder import make_run_dir

    cfg = load_config("default.yaml")
    fresh = tmp_path / "run"
    with caplog.at_level("WARNING", logger="slam.output.run_folder"):
        assert make_run_dir(cfg, str(fresh)) == fresh
        assert not caplog.records
        (fresh / "metrics.json").write_text("{}")
        assert make_run_dir(cfg, str(fresh)) == fresh
    assert [r.getMessage() for r in caplog.records] == [
        f"{fresh} holds an earlier run: its files are replaced where this run writes them, the others stay "
        "(log.txt is appended to)"]


def test_data_of_another_layout_is_named_without_the_data_path_hint(tmp_path, capsys):
    from data_helpers import write_tum_sequence

    seq = write_tum_sequence(tmp_path / "rgbd_dataset_freiburg1_x", n=2)
    rc, line = run(capsys, "--config", "7scenes.yaml", "--set", f"data.path={seq}", "--out", str(tmp_path / "run"))
    assert rc == 2
    assert line.endswith(f"{seq} looks like a tum sequence: set data.dataset=tum (configs/tum.yaml)")
    assert "give your data with --set data.path" not in line


def test_a_saved_map_that_cannot_be_used_closes_the_input(tmp_path, capsys, monkeypatch):
    """The input is opened before the saved map is read: a map that fails leaves no source open
    (a live camera would keep streaming until the process ends)."""
    import slam.cli as cli

    closed = []
    open_source = cli.open_source

    def recording(cfg):
        source = open_source(cfg)
        close = source.close
        source.close = lambda: closed.append(True) or close()
        return source

    monkeypatch.setattr(cli, "open_source", recording)
    rc, line = run(capsys, "--map", str(tmp_path / "missing.ply"), "--out", str(tmp_path / "run"))
    assert rc == 2 and line.startswith("run_slam: cannot use saved map: ") and "missing.ply" in line
    assert closed == [True]
