"""Where the viewer's rerun recording goes: an .rrd file, a native viewer, or browsers.

``open_recording`` builds a ``rerun.RecordingStream`` with any of these sinks:
- ``rrd``: a file (``rerun run.rrd`` shows it later);
- ``spawn`` / ``connect``: a native rerun viewer started here, or one already running at a URL;
- ``serve``: a gRPC server inside this process that buffers the recording (up to
  ``server_memory_mb``; a browser that connects late still gets the map, the camera and the whole
  trajectory), plus rerun's web viewer page on ``web_port``. A browser on the network opens
  ``page_url`` (see ``live_view_urls``). Ports: ``grpc_port`` (TCP, the data; bound to ``bind``)
  and ``web_port`` (TCP, HTML + JS + Wasm only; rerun-sdk binds it on all interfaces, it has no
  bind option; ``web_port: 0`` serves no page).

rerun is imported only inside these functions: it is optional at run time (a heavy import,
~0.1 s and ~40 MB; nothing loads it while no viewer is asked for).
"""
from __future__ import annotations

import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional
from urllib.parse import quote

APP_ID = "sphere_slam"
MIN_RERUN = (0, 36)     # set_sinks (0.24) and a gRPC server sink bound to an address (0.36)


def import_rerun():
    """rerun, or a clear error when it is missing (the optional ``viewer`` extra) or too old."""
    try:
        import rerun as rr
    except ImportError:
        raise RuntimeError("the viewer needs rerun-sdk (pip install 'sphere-slam[viewer]'; not installable "
                           "next to NumPy 1, see docs/JETSON.md)") from None
    version = tuple(int(p) for p in rr.__version__.split(".")[:2] if p.isdigit())
    if version < MIN_RERUN:
        raise RuntimeError(f"the viewer needs rerun-sdk >= {'.'.join(map(str, MIN_RERUN))}, found {rr.__version__}")
    return rr


@dataclass(frozen=True)
class LiveView:
    """Where browsers find a served recording: ``grpc_url`` (rerun+http://host:port/proxy, also
    for a native viewer: ``rerun <grpc_url>``) and ``page_url`` (the web viewer page; None when
    ``web_port`` is 0)."""

    grpc_url: str
    page_url: Optional[str]


def reachable_host(bind: str) -> str:
    """The host name a browser elsewhere uses for a server bound to ``bind``: the bind address
    itself, or for 0.0.0.0 the address of the interface that routes outwards (no packet is sent),
    else this machine's host name."""
    if bind not in ("0.0.0.0", "::", ""):
        return bind
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))    # TEST-NET-1: only selects the outgoing interface
            return s.getsockname()[0]
    except OSError:
        return socket.gethostname()


def live_view_urls(host: str, grpc_port: int, web_port: int) -> LiveView:
    """The gRPC URL and the page URL (``?url=`` names the data server) for ``host``."""
    grpc_url = f"rerun+http://{host}:{grpc_port}/proxy"
    page = f"http://{host}:{web_port}/?url={quote(grpc_url, safe='')}" if web_port > 0 else None
    return LiveView(grpc_url, page)


def serve_sink(bind: str, grpc_port: int, server_memory_mb: float):
    """A rerun gRPC server sink bound to ``bind``:``grpc_port``, buffering at most
    ``server_memory_mb`` of the recording (the oldest non-static data is dropped beyond it)."""
    rr = import_rerun()
    return rr.GrpcServerSink(bind_ip=bind, port=int(grpc_port), server_memory_limit=f"{int(server_memory_mb)}MiB")


def serve_web_page(web_port: int, grpc_url: str) -> None:
    """Serve rerun's web viewer page on ``web_port`` (all interfaces) until the process exits."""
    rr = import_rerun()
    rr.serve_web_viewer(web_port=int(web_port), open_browser=False, connect_to=grpc_url)


def open_recording(rrd: Optional[str] = None, spawn: bool = False, connect: Optional[str] = None,
                   blueprint=None, recording_id: Optional[str] = None, serve=None):
    """A rerun ``RecordingStream`` writing to ``rrd`` and/or a viewer (spawned, or at ``connect``)
    and/or served to browsers. ``serve``: an object with ``bind``, ``grpc_port``, ``web_port``,
    ``server_memory_mb`` (``ViewerConfig``) or None. -> (recording, ``LiveView`` or None)."""
    rr = import_rerun()
    rec = rr.RecordingStream(APP_ID, recording_id=recording_id)
    sinks = []
    live = None
    if rrd:
        Path(rrd).expanduser().parent.mkdir(parents=True, exist_ok=True)
        sinks.append(rr.FileSink(str(Path(rrd).expanduser())))
    if serve is not None:
        sinks.append(serve_sink(serve.bind, serve.grpc_port, serve.server_memory_mb))
        live = live_view_urls(reachable_host(serve.bind), serve.grpc_port, serve.web_port)
    if connect:
        sinks.append(rr.GrpcSink(connect))
    elif spawn:
        local = Path(sys.executable).with_name("rerun")   # the venv's viewer, even when not on PATH
        exe = str(local) if local.is_file() else shutil.which("rerun")
        if exe is None:
            raise RuntimeError("the rerun viewer executable was not found (pip install rerun-sdk); "
                               "use --rrd to record to a file instead")
        rr.spawn(connect=False, hide_welcome_screen=True, executable_path=exe)
        sinks.append(rr.GrpcSink())
    if not sinks:
        raise ValueError("the viewer needs a sink: an .rrd path, spawn=True, a connect URL or serve")
    rec.set_sinks(*sinks, default_blueprint=blueprint)
    if live is not None and live.page_url is not None:
        serve_web_page(serve.web_port, live.grpc_url)
    return rec, live
