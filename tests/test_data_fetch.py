"""Datasets that fetch themselves, against a local HTTP server on 127.0.0.1 (no other network):
download + verify + extract, resume, corrupt and incomplete archives, the offline message, the
registry names in data.path, and the 7-Scenes / Replica layouts."""
import hashlib
import json
import logging

import pooch
import pytest

from data_helpers import K_PARAMS, write_7scenes_sequence, write_replica_sequence
from fetch_helpers import ArchiveServer, closed_port_url, sample_tgz, zip_folder
from slam.config import DataConfig
from slam.data import open_source
from slam.data.errors import ArchiveError, DownloadError
from slam.data.fetch import HASHES_FILE, fetch, sequence_folder
from slam.data.registry import REGISTRY, RegistryEntry, lookup
from slam.data.sources import data_path

TOP = "rgbd_dataset_freiburg1_desk"


@pytest.fixture(scope="module")
def archive() -> bytes:
    return sample_tgz(TOP, frames=20)


@pytest.fixture
def server():
    s = ArchiveServer()
    yield s
    s.close()


def _entry(url: str, sha256=None) -> RegistryEntry:
    return RegistryEntry("tum/test_desk", "tum", url, f"{TOP}.tgz", TOP, sha256=sha256)


def _leftovers(target):
    return sorted(p.name for p in target.iterdir()) if target.is_dir() else []


def test_download_verifies_extracts_and_records_the_first_hash(tmp_path, server, archive):
    server.files["/a.tgz"] = archive
    entry = _entry(server.url("/a.tgz"))
    folder = fetch(entry, root=tmp_path, progress=False)
    assert folder == tmp_path / "tum/test_desk" / TOP
    frames = list(open_source(DataConfig(dataset="tum", path=str(folder))))
    assert len(frames) == 20 and frames[0].gt_pose is not None
    assert _leftovers(folder.parent) == [TOP]                    # no archive, .part or temp folder
    recorded = json.loads((tmp_path / HASHES_FILE).read_text())["tum/test_desk"]
    assert recorded["sha256"] == hashlib.sha256(archive).hexdigest() and recorded["url"] == entry.url
    assert fetch(entry, root=tmp_path) == folder and len(server.log) == 1   # present: no request


def test_published_checksum_mismatch_leaves_nothing(tmp_path, server, archive):
    server.files["/a.tgz"] = archive
    with pytest.raises(ArchiveError, match="published"):
        fetch(_entry(server.url("/a.tgz"), sha256="0" * 64), root=tmp_path, progress=False)
    assert _leftovers(tmp_path / "tum/test_desk") == []
    good = _entry(server.url("/a.tgz"), sha256=hashlib.sha256(archive).hexdigest())
    assert fetch(good, root=tmp_path, progress=False).is_dir()


def test_recorded_hash_guards_a_later_download(tmp_path, server, archive):
    server.files["/a.tgz"] = archive
    entry = _entry(server.url("/a.tgz"))
    folder = fetch(entry, root=tmp_path, progress=False)
    for p in sorted(folder.rglob("*"), reverse=True):            # the user deletes the sequence
        p.rmdir() if p.is_dir() else p.unlink()
    folder.rmdir()
    server.files["/a.tgz"] = sample_tgz(TOP, frames=5)           # upstream changed (or a bad mirror)
    with pytest.raises(ArchiveError, match="recorded at the first download"):
        fetch(entry, root=tmp_path, progress=False)
    assert not folder.exists()


def test_interrupted_download_resumes_with_a_range_request(tmp_path, server, archive):
    server.files["/a.tgz"] = archive
    server.drop_after["/a.tgz"] = 300_000
    folder = fetch(_entry(server.url("/a.tgz")), root=tmp_path, progress=False)
    first, second = server.log                                   # one interrupted, one resumed request
    assert (first["range"], first["status"], first["sent"]) == (None, 200, 300_000)
    start = int(second["range"].split("=")[1].rstrip("-"))
    assert 0 < start <= 300_000 and second["status"] == 206      # asks only for what it lacks
    assert second["sent"] == len(archive) - start                 # (less the chunk cut short)
    assert len(list(open_source(DataConfig(dataset="tum", path=str(folder))))) == 20


def test_partial_file_of_an_earlier_run_is_resumed(tmp_path, server, archive):
    server.files["/a.tgz"] = archive
    target = tmp_path / "tum/test_desk"
    target.mkdir(parents=True)
    (target / f"{TOP}.tgz.part").write_bytes(archive[:100_000])  # left by a killed run
    fetch(_entry(server.url("/a.tgz")), root=tmp_path, progress=False)
    assert [(r["range"], r["sent"]) for r in server.log] == [("bytes=100000-", len(archive) - 100_000)]
    assert _leftovers(target) == [TOP]


@pytest.mark.parametrize("broken,match", [("truncated", "corrupt or truncated"), ("no_index", "rgb.txt")])
def test_bad_archive_is_an_error_and_nothing_is_half_extracted(tmp_path, server, archive, broken, match):
    server.files["/a.tgz"] = archive[: len(archive) // 2] if broken == "truncated" else sample_tgz(TOP, 5, drop="rgb.txt")
    with pytest.raises(ArchiveError, match=match) as err:
        fetch(_entry(server.url("/a.tgz")), root=tmp_path, progress=False)
    assert str(tmp_path / "tum/test_desk" / f"{TOP}.tgz") in str(err.value)   # names the archive ...
    assert ".extract-" not in str(err.value)                          # ... not a temporary folder
    assert _leftovers(tmp_path / "tum/test_desk") == []          # no folder, temp folder or archive
    assert not (tmp_path / HASHES_FILE).exists()                 # a bad download records no hash


def test_without_network_the_error_names_url_target_and_manual_commands(tmp_path, capsys):
    url = closed_port_url(f"/{TOP}.tgz")
    root = tmp_path / "cache"
    said = []                                          # pooch's own logger (not under logging's root)
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    pooch.get_logger().addHandler(handler)
    try:
        with pytest.raises(DownloadError) as err:
            fetch(_entry(url), root=root)
    finally:
        pooch.get_logger().removeHandler(handler)
    text = str(err.value)
    target = root / "tum/test_desk"
    assert text.startswith("cannot download tum/test_desk: ")
    assert url in text and str(target) in text
    assert f"curl -L -C - -o {target / (TOP + '.tgz')} {url}" in text and "slam_data download tum/test_desk" in text
    assert "SPHERE_SLAM_MIRROR" in text
    assert not root.exists()                           # nothing on disk: not even an empty folder
    printed = capsys.readouterr()
    assert said == [] and "ownloading" not in printed.out + printed.err   # nothing said before the server answered


def test_a_failed_download_keeps_the_folders_that_were_there(tmp_path):
    (tmp_path / "tum").mkdir()
    with pytest.raises(DownloadError):
        fetch(_entry(closed_port_url(f"/{TOP}.tgz")), root=tmp_path, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tum"] and not any((tmp_path / "tum").iterdir())


def test_a_download_says_what_it_fetches_once_the_server_answers(tmp_path, server, archive, capsys):
    server.files["/a.tgz"] = archive
    fetch(_entry(server.url("/a.tgz")), root=tmp_path)
    err = capsys.readouterr().err
    assert f"downloading {server.url('/a.tgz')} ({len(archive) / 1e6:.0f} MB) into {tmp_path / 'tum/test_desk'}" in err


def test_download_false_asks_for_the_manual_commands_without_a_request(tmp_path, server):
    with pytest.raises(DownloadError, match="data.download is false"):
        fetch(_entry(server.url("/a.tgz")), root=tmp_path, download=False)
    assert server.log == []


def test_registry_names_in_data_path(tmp_path, server, archive, monkeypatch):
    assert lookup("tum/fr1_desk") == (REGISTRY["tum/fr1_desk"], "")
    assert lookup("7scenes/chess/seq-02") == (REGISTRY["7scenes/chess"], "seq-02")
    assert lookup("replica") == (REGISTRY["replica"], "room0")
    assert lookup("./tum/fr1_desk") is None and lookup("datasets/tum/x") is None
    assert REGISTRY["tum/fr1_desk"].url == "https://cvg.cit.tum.de/rgbd/dataset/freiburg1/rgbd_dataset_freiburg1_desk.tgz"
    with pytest.raises(ValueError, match="is a tum sequence but data.dataset is '7scenes'"):
        data_path(DataConfig(dataset="7scenes", path="tum/fr1_desk"))
    # the mirror variable redirects the real registry entry; the cache variable places it
    server.files[f"/tum/{TOP}.tgz"] = archive
    monkeypatch.setenv("SPHERE_SLAM_MIRROR", server.base)
    monkeypatch.setenv("SPHERE_SLAM_DATA", str(tmp_path))
    src = open_source(DataConfig(dataset="tum", path="tum/fr1_desk", last=3))
    assert len(list(src)) == 3 and (tmp_path / "tum/fr1_desk" / TOP / "rgb.txt").is_file()


def test_seven_scenes_nested_zips_and_replica_layout(tmp_path, server):
    scene = tmp_path / "src7" / "chess"
    write_7scenes_sequence(scene / "seq-01", n=3)
    write_7scenes_sequence(scene / "seq-02", n=3)
    for seq in ("seq-01", "seq-02"):                              # the scene zip holds one zip per sequence
        (scene / f"{seq}.zip").write_bytes(zip_folder(scene / seq, seq))
        for p in (scene / seq).iterdir():
            p.unlink()
        (scene / seq).rmdir()
    (scene / "TrainSplit.txt").write_text("sequence1\n")
    (scene / "TestSplit.txt").write_text("sequence2\n")
    server.files["/chess.zip"] = zip_folder(scene, "chess")
    seven = RegistryEntry("7scenes/chess", "7scenes", server.url("/chess.zip"), "chess.zip", "chess",
                          sequence="seq-01", nested="seq-*.zip")
    folder = sequence_folder(seven, "seq-02", root=tmp_path / "cache", progress=False)
    assert len(list(open_source(DataConfig(dataset="7scenes", path=str(folder))))) == 3
    assert not list(folder.parent.glob("*.zip"))                  # inner zips extracted and removed

    rep = tmp_path / "srcR" / "Replica"
    write_replica_sequence(rep / "room0", n=3)
    (rep / "cam_params.json").write_text("{}")
    server.files["/Replica.zip"] = zip_folder(rep, "Replica")
    replica = RegistryEntry("replica", "replica", server.url("/Replica.zip"), "Replica.zip", "Replica", sequence="room0")
    folder = sequence_folder(replica, "room0", root=tmp_path / "cache", progress=False)
    frames = list(open_source(DataConfig(dataset="replica", path=str(folder), intrinsics=list(K_PARAMS))))
    assert len(frames) == 3
    with pytest.raises(FileNotFoundError, match="no sequence 'office9' in replica"):
        sequence_folder(replica, "office9", root=tmp_path / "cache")
