"""The typed config schema: inheritance, overrides, unknown keys, wrong types, shipped configs."""
import dataclasses
import re
from pathlib import Path

import pytest

from slam.config import Config, ConfigError, dump_config, load_config
from slam.config.loading import REMOVED_KEYS
from slam.resources import configs_dir


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_every_shipped_config_loads():
    names = sorted(p.name for p in configs_dir().glob("*.yaml"))
    assert {"base.yaml", "default.yaml", "tum.yaml", "7scenes.yaml", "replica.yaml", "rosbag.yaml"} <= set(names)
    for name in names:
        assert isinstance(load_config(name), Config)


def _strings(node, key=""):
    """(key, value) of every string in a parsed YAML document, nested keys joined by dots."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, f"{key}.{k}" if key else str(k))
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v, key)
    elif isinstance(node, str):
        yield key, node


def test_no_shipped_config_names_a_path_outside_the_package():
    """A shipped config works wherever the package is installed: no absolute path, no home-relative
    one, no '..' (ROS topic names are names, not paths). Data comes from the bundled sample, the
    data cache (a registry name, downloaded on first use) or the user's --set data.path."""
    import yaml

    from slam.data.registry import lookup
    offenders = []
    for config in sorted(configs_dir().glob("*.yaml")):
        for key, value in _strings(yaml.safe_load(config.read_text()) or {}):
            if key.endswith("_topic"):
                continue
            parts = value.replace("\\", "/").split("/")
            if value.startswith(("/", "~", "\\")) or ".." in parts or (len(value) > 1 and value[1] == ":"):
                offenders.append(f"{config.name}: {key}: {value}")
    assert offenders == []
    for name in ("default", "tum", "7scenes", "replica"):        # the datasets' configs run out of the box
        path = load_config(name).data.path
        assert path == "sample" or lookup(path) is not None, (name, path)


def test_a_missing_data_path_names_where_it_came_from(tmp_path, monkeypatch, capsys):
    """rosbag.yaml's data.path is a placeholder for the user's recording: run as shipped, the
    error names the path, the config it came from and the option that gives another."""
    from slam.cli import main
    monkeypatch.chdir(tmp_path)
    assert main(["--config", "rosbag.yaml"]) == 2
    err = capsys.readouterr().err
    assert "recording.bag" in err and "from rosbag.yaml" in err and "--set data.path=PATH" in err
    assert main(["--config", "rosbag.yaml", "--set", f"data.path={tmp_path / 'mine.bag'}"]) == 2
    err = capsys.readouterr().err
    assert "mine.bag" in err and "from --set" in err


def test_bare_name_resolves_to_shipped_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # works from any folder
    cfg = load_config("7scenes.yaml")
    assert cfg.data.dataset == "7scenes"
    assert load_config("replica").data.intrinsics == [600.0, 600.0, 599.5, 339.5]


def test_inheritance_and_override_order(tmp_path):
    write(tmp_path / "parent.yaml", "tracking: {iters: 7, damping: 0.1}\nmapping: {iters: 3}\n")
    child = write(tmp_path / "child.yaml", "inherit_from: parent.yaml\ntracking: {iters: 9}\n")
    cfg = load_config(child, overrides=["mapping.iters=11", "data.intrinsics=[1, 2, 3, 4]"])
    assert cfg.tracking.iters == 9          # child beats parent
    assert cfg.tracking.damping == 0.1      # parent kept where the child is silent
    assert cfg.mapping.iters == 11          # command line beats both
    assert cfg.data.intrinsics == [1.0, 2.0, 3.0, 4.0]


def test_unknown_key_names_key_and_close_match(tmp_path):
    bad = write(tmp_path / "bad.yaml", "tracking: {itres: 5}\n")
    with pytest.raises(ConfigError, match=r"tracking\.itres.*did you mean 'tracking\.iters'"):
        load_config(bad)
    with pytest.raises(ConfigError, match=r"unknown config key 'trackin'.*'tracking'"):
        load_config("default.yaml", overrides=["trackin.iters=3"])


@pytest.mark.parametrize(
    "override, message",
    [
        ("tracking.iters=fast", r"tracking\.iters: expected an integer"),
        ("tracking.iters=2.5", r"tracking\.iters: expected an integer"),
        ("system.threaded=3", r"system\.threaded: expected true/false"),
        ("data.dataset=tumm", r"data\.dataset: 'tumm' is not one of .*did you mean 'tum'"),
        ("data.stride=0", r"data\.stride: must be >= 1"),
        ("data.intrinsics=[1, 2]", r"data\.intrinsics"),
        ("mapping.lr_means=[1]", r"mapping\.lr_means: expected a number"),
        ("tracking.obs_gradient=1.5", r"tracking\.obs_gradient: must be in \[0, 1\]"),
        ("mapping.keyframe_downscale=0", r"mapping\.keyframe_downscale: must be >= 1"),
        ("viewer.bind=robot.local", r"viewer\.bind: an IP address"),
        ("viewer.web_port=9876", r"viewer\.grpc_port / viewer\.web_port: .*different"),
        ("viewer.grpc_port=0", r"viewer\.grpc_port / viewer\.web_port: ports 1-65535"),
        ("viewer.server_memory_mb=0", r"viewer\.server_memory_mb: must be >= 1"),
        ("system.switch_interval_ms=0", r"system\.switch_interval_ms: milliseconds in \(0, 1000\]"),
        ("data.max_time_diff=-1", r"data\.max_time_diff: seconds, must be > 0, got -1"),
        ("data.max_time_diff=0", r"data\.max_time_diff: seconds, must be > 0, got 0"),
        ("data.max_time_diff=.nan", r"data\.max_time_diff: expected a number, got nan"),
        ("tracking.huber_color=.nan", r"tracking\.huber_color: expected a number, got nan"),
        ("data.depth_scale=0", r"data\.depth_scale: raw depth units per metre, must be > 0"),
        ("system.device=tpu", r"system\.device: one of auto, cpu, cuda, cuda:N, got 'tpu'"),
        ("system.device=cuda:x", r"system\.device: one of auto, cpu, cuda, cuda:N"),
    ],
)
def test_wrong_values_fail_with_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config("default.yaml", overrides=[override])


def test_the_reference_backend_loads_with_the_default_config():
    # the tracker's one solver runs on every raster backend, the PyTorch oracles included
    assert load_config("default.yaml", overrides=["raster.backend=reference"]).raster.backend == "reference"


@pytest.mark.parametrize("key, value", [("tracking.solver", "renders"), ("loop.align_solver", "fused"),
                                        ("tracking.analytic_iters", 6), ("tracking.fd_rot", 0.001),
                                        ("tracking.fd_trans", 0.001)])
def test_a_removed_key_says_it_was_removed_and_why(tmp_path, key, value):
    section, name = key.split(".")
    assert name not in {f.name for f in dataclasses.fields(getattr(Config(), section))}
    assert key in REMOVED_KEYS
    message = rf"config key '{re.escape(key)}' was removed: .*issue 36.*Delete it"
    with pytest.raises(ConfigError, match=message):
        load_config("default.yaml", overrides=[f"{key}={value}"])
    old = write(tmp_path / "old.yaml", f"inherit_from: default.yaml\n{section}:\n  {name}: {value}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(old)


def test_a_renamed_key_names_its_new_name():
    with pytest.raises(ConfigError, match=r"'reinit\.search_first_interval_s' was removed: renamed "
                                          r"system\.slow_stream_interval_s"):
        load_config("default.yaml", overrides=["reinit.search_first_interval_s=0.2"])


def test_exponent_without_dot_is_a_number(tmp_path):
    # YAML 1.1 (PyYAML) reads 3e-4 as the string '3e-4'; float keys accept it.
    cfg = load_config("default.yaml", overrides=["tracking.converged_step=3e-4"])
    assert cfg.tracking.converged_step == pytest.approx(3e-4)
    f = write(tmp_path / "exp.yaml", "inherit_from: default.yaml\nmapping: {lr_means: 1e-3}\n")
    assert load_config(f).mapping.lr_means == pytest.approx(1e-3)
    with pytest.raises(ConfigError, match=r"tracking\.converged_step: expected a number"):
        load_config("default.yaml", overrides=["tracking.converged_step=small"])


def test_missing_config_and_bad_yaml(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        load_config("nope.yaml")
    broken = write(tmp_path / "broken.yaml", "tracking: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken)
    cyc = write(tmp_path / "cyc.yaml", "inherit_from: cyc.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_config(cyc)


def test_a_config_that_is_not_text_or_not_yaml_names_file_line_and_problem(tmp_path):
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe" + bytes(range(256)))
    with pytest.raises(ConfigError, match=r"binary.yaml: not a text file \(byte 0 is not UTF-8\)"):
        load_config(binary)
    broken = write(tmp_path / "broken.yaml", "data:\n  path: [1, 2\n")
    with pytest.raises(ConfigError) as err:
        load_config(broken)
    assert re.fullmatch(r".*broken\.yaml:3:1: not valid YAML: expected ',' or '\]'.*", str(err.value))
    assert "\n" not in str(err.value) and "<unicode string>" not in str(err.value)


def test_resolved_config_round_trips(tmp_path):
    cfg = load_config("default.yaml", overrides=["tracking.iters=13", "output.name=x"])
    dump_config(cfg, tmp_path / "resolved.yaml")
    again = load_config(tmp_path / "resolved.yaml")
    assert again == cfg
