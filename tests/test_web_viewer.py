"""The live view in a real browser: ``run_slam --serve`` streams the bundled sample while headless
Chromium (Debian's, driven through ChromeDriver by selenium) opens the printed page.

Skipped (with the reason) without Chromium + ChromeDriver (``bash scripts/install.sh --browser``).
WebGL: headless Chromium has no GPU here; ``--use-angle=swiftshader --enable-unsafe-swiftshader``
gives rerun's viewer software WebGL 2 (without the second flag Chromium 156 still falls back to
it, with a deprecation warning). The screenshot is kept as a test artefact: the test prints its
path (under pytest's tmp_path).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--window-size=1280,800"]
MIN_DRAWN = 0.05      # share of the 3D view's pixels that must show something (measured: empty view 0.0 %, sample map ~12 %)


def _missing() -> str | None:
    if CHROMIUM is None or CHROMEDRIVER is None:
        return "chromium / chromedriver not installed: `bash scripts/install.sh --browser` (root)"
    try:
        import selenium  # noqa: F401 - the test's browser driver
    except ImportError:
        return "selenium not installed: `bash scripts/install.sh --test`"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drawn_fraction(png: Path) -> float:
    """Share of the 3D view's pixels (left 3/5, top of the default blueprint, inside its border)
    that are coloured or dark: map points, trajectory, camera; the empty view is white with a
    light grey grid."""
    a = np.asarray(Image.open(png).convert("RGB")).astype(np.int32)
    h, w, _ = a.shape
    view = a[int(0.12 * h):int(0.65 * h), int(0.03 * w):int(0.57 * w)]
    saturated = view.max(axis=-1) - view.min(axis=-1) > 60
    dark = view.max(axis=-1) < 150
    return float((saturated | dark).mean())


def _browser(profile_dir: Path):
    """Headless Chromium with its profile in `profile_dir` (a test's tmp_path, so pytest removes it;
    a profile is ~45 MB and one left in /tmp per run fills the disk)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in CHROME_FLAGS + [f"--user-data-dir={profile_dir}"]:
        opts.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def _webgl_renderer(driver) -> str:
    return driver.execute_script(
        "const g = document.createElement('canvas').getContext('webgl2'); if (!g) return 'no WebGL 2';"
        "const e = g.getExtension('WEBGL_debug_renderer_info');"
        "return e ? g.getParameter(e.UNMASKED_RENDERER_WEBGL) : g.getParameter(g.RENDERER);")


def _outside_addresses() -> list:
    """This machine's non-loopback IPv4 addresses."""
    return [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family == socket.AF_INET and not a.address.startswith("127.")]


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def test_browser_shows_the_live_map_while_run_slam_streams(tmp_path, capsys):
    grpc_port, web_port = _free_port(), _free_port()
    log = tmp_path / "run_slam.log"
    env = dict(os.environ, PYTHONPATH=str(REPO), RERUN_ANALYTICS="0")
    cmd = [sys.executable, "-m", "slam.cli", "--serve", "--quiet", "--out", str(tmp_path / "run"),
           "--set", "viewer.bind=127.0.0.1", "--set", f"viewer.grpc_port={grpc_port}",
           "--set", f"viewer.web_port={web_port}", "--set", "viewer.map_every=5", "--set", "output.plots=false"]
    with open(log, "w") as fh:
        run = subprocess.Popen(cmd, env=env, cwd=str(REPO), stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    driver = None
    try:
        deadline = time.monotonic() + 120
        url = None
        while url is None and time.monotonic() < deadline and run.poll() is None:
            m = re.search(r"live view in a browser: (\S+)", log.read_text())
            url = m.group(1) if m else None
            time.sleep(0.2)
        assert url is not None, log.read_text()[-3000:]
        assert url == (f"http://127.0.0.1:{web_port}/?url=rerun%2Bhttp%3A%2F%2F127.0.0.1%3A{grpc_port}%2Fproxy")
        # ports: the data only on localhost (viewer.bind), the page on every interface (rerun's choice)
        assert _accepts("127.0.0.1", grpc_port) and _accepts("127.0.0.1", web_port)
        for host in _outside_addresses():
            assert not _accepts(host, grpc_port), f"gRPC port reachable on {host}"
        driver = _browser(tmp_path / "chromium-profile")
        renderer = _webgl_renderer(driver)
        driver.get(url)
        shot, drawn, streaming = tmp_path / "live_view.png", 0.0, False
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            time.sleep(3)
            streaming = run.poll() is None
            driver.save_screenshot(str(shot))
            drawn = drawn_fraction(shot)
            if drawn > MIN_DRAWN or not streaming:
                break
        with capsys.disabled():
            print(f"\n[web viewer] screenshot {shot} ({drawn:.1%} of the 3D view drawn, WebGL: {renderer})")
        assert streaming, "run_slam ended before the browser showed the map:\n" + log.read_text()[-2000:]
        assert drawn > MIN_DRAWN, f"the 3D view looks empty ({drawn:.2%} drawn), see {shot}"
    finally:
        if driver is not None:
            driver.quit()
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGINT)      # stop early: it writes its outputs
        try:
            run.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            raise
    assert run.returncode in (0, 130), log.read_text()[-3000:]
    viewer = json.loads((tmp_path / "run" / "metrics.json").read_text())["viewer"]
    assert viewer["error"] is None and viewer["payloads_logged"] > 0
    assert viewer["served"] == {"grpc": f"rerun+http://127.0.0.1:{grpc_port}/proxy", "page": url}
