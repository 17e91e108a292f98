"""A local HTTP server for the download tests (127.0.0.1 only) and archives made from test data."""
from __future__ import annotations

import io
import socket
import tarfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, List, Optional

from slam.resources import sample_dir


class ArchiveServer:
    """Serves ``files`` ({url path: bytes}) with HTTP Range support and a request log.

    ``drop_after[path] = n``: the next request for ``path`` announces the full length, sends ``n``
    bytes of the body and closes the connection (an interrupted transfer), once.
    ``log``: one dict per request: path, range header, status, body bytes sent.
    """

    def __init__(self) -> None:
        self.files: Dict[str, bytes] = {}
        self.drop_after: Dict[str, int] = {}
        self.log: List[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                data = server.files.get(self.path)
                entry = {"path": self.path, "range": self.headers.get("Range"), "status": 404, "sent": 0}
                server.log.append(entry)
                if data is None:
                    self.send_error(404)
                    return
                start = 0
                if entry["range"]:
                    start = int(entry["range"].split("=")[1].split("-")[0])
                    if start >= len(data):
                        entry["status"] = 416
                        self.send_response(416)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                body = data[start:]
                entry["status"] = 206 if start else 200
                self.send_response(entry["status"])
                self.send_header("Content-Length", str(len(body)))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                cut = server.drop_after.pop(self.path, None)
                if cut is not None:
                    body = body[:cut]
                self.wfile.write(body)
                entry["sent"] = len(body)
                if cut is not None:
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return self.base + path

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def closed_port_url(path: str = "/x.tgz") -> str:
    """A URL on 127.0.0.1 where nothing listens (connection refused at once)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}{path}"


def _lines_for(text: str, keep: set) -> str:
    out = []
    for line in text.splitlines():
        if line.startswith("#") or not line.strip() or line.split()[0] in keep:
            out.append(line)
    return "\n".join(out) + "\n"


def sample_tgz(top: str, frames: int = 20, drop: Optional[str] = None) -> bytes:
    """A TUM-layout .tgz of the bundled sample's first ``frames`` frames under folder ``top``.

    ``drop``: leave this index file out (a broken archive).
    """
    src = sample_dir()
    rgb = [ln.split() for ln in (src / "rgb.txt").read_text().splitlines() if ln and not ln.startswith("#")][:frames]
    dep = [ln.split() for ln in (src / "depth.txt").read_text().splitlines() if ln and not ln.startswith("#")][:frames]
    stamps = {r[0] for r in rgb} | {d[0] for d in dep}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tf:
        def add_bytes(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))

        for name in ("rgb.txt", "depth.txt", "groundtruth.txt"):
            if name != drop:
                add_bytes(name, _lines_for((src / name).read_text(), stamps).encode())
        add_bytes("camera.yaml", (src / "camera.yaml").read_bytes())
        for _, rel in rgb + dep:
            tf.add(src / rel, arcname=f"{top}/{rel}")
    return buf.getvalue()


def zip_folder(folder: Path, arcroot: str) -> bytes:
    """A .zip of ``folder``'s files under ``arcroot/``."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                zf.write(p, f"{arcroot}/{p.relative_to(folder).as_posix()}")
    return buf.getvalue()
