"""The grid as files: map_server's map.pgm + map.yaml (ROS 1 map_server, Nav2's map_server and
slam_toolbox read them), and a PNG for people with the trajectory drawn on it.

map.yaml (map_server's format): ``image`` (the PGM beside it), ``resolution`` (m per pixel),
``origin`` [x, y, yaw] (the lower-left pixel's outer corner in the grid's frame, m, rad),
``negate`` 0, ``occupied_thresh`` 0.65 and ``free_thresh`` 0.196 (map_server's defaults: how to
read the trinary pixels back; the cells were classified with the config's grid.* thresholds),
``mode`` trinary. The PGM (binary P5, 8 bit)
is trinary: 0 (black) occupied, 254 (white) free, 205 (grey) unknown, the image's last row the
grid's row 0 (map_server flips it). The grid's frame is the floor frame (``FloorFrame``): its
pose in the SLAM world is written as a comment line and into metrics.json (grid.T_world_floor).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from slam.grid.occupancy import GridSnapshot

OCCUPIED, FREE, UNKNOWN = 0, 254, 205      # trinary PGM values (map_saver's)
READ_OCCUPIED, READ_FREE = 0.65, 0.196     # map.yaml's thresholds: map_server reads 0 / 254 / 205 back


def trinary_pixels(tri: np.ndarray) -> np.ndarray:
    """(H, W) int8 trinary grid (100 / 0 / -1, row 0 = lowest y) -> (H, W) uint8 image rows
    top-down (row 0 = highest y), map_saver's values."""
    px = np.full(tri.shape, UNKNOWN, np.uint8)
    px[tri == 100] = OCCUPIED
    px[tri == 0] = FREE
    return px[::-1].copy()


def write_pgm(path: Path, pixels: np.ndarray) -> None:
    """(H, W) uint8 -> binary PGM (P5, maxval 255)."""
    h, w = pixels.shape
    with open(path, "wb") as f:
        f.write(f"P5\n{w} {h}\n255\n".encode("ascii"))
        f.write(np.ascontiguousarray(pixels, dtype=np.uint8).tobytes())


def read_pgm(path: Path) -> np.ndarray:
    """A binary 8-bit PGM (P5; comment lines allowed) -> (H, W) uint8."""
    data = Path(path).read_bytes()
    tokens, pos = [], 0
    while len(tokens) < 4:
        while data[pos:pos + 1].isspace():
            pos += 1
        if data[pos:pos + 1] == b"#":
            pos = data.index(b"\n", pos) + 1
            continue
        end = pos
        while not data[end:end + 1].isspace():
            end += 1
        tokens.append(data[pos:end])
        pos = end
    if tokens[0] != b"P5" or int(tokens[3]) > 255:
        raise ValueError(f"{path}: not an 8-bit binary PGM")
    w, h = int(tokens[1]), int(tokens[2])
    return np.frombuffer(data[pos + 1:pos + 1 + w * h], dtype=np.uint8).reshape(h, w)


def write_map_files(run_dir: Path, grid: GridSnapshot, occupied_thresh: float, free_thresh: float,
                    stem: str = "map") -> tuple[Path, Path]:
    """``<stem>.pgm`` + ``<stem>.yaml`` (map_server's format, module docstring): cells classified
    with ``occupied_thresh`` / ``free_thresh`` (probabilities); returns both paths."""
    run_dir = Path(run_dir)
    pgm, yml = run_dir / f"{stem}.pgm", run_dir / f"{stem}.yaml"
    write_pgm(pgm, trinary_pixels(grid.trinary(occupied_thresh, free_thresh)))
    x0, y0 = grid.origin_xy
    T = grid.floor.T_world_floor()
    rows = "; ".join(" ".join(f"{v:.6f}" for v in r) for r in T[:3])
    yml.write_text(
        f"# sphere-slam occupancy grid (map_server format). Frame: the floor frame, whose pose in the\n"
        f"# SLAM world (T_world_floor, rows) is: {rows}\n"
        f"image: {pgm.name}\nresolution: {grid.resolution:.6f}\norigin: [{x0:.6f}, {y0:.6f}, 0.0]\n"
        f"negate: 0\noccupied_thresh: {READ_OCCUPIED}\nfree_thresh: {READ_FREE}\nmode: trinary\n")
    return pgm, yml


@dataclass(frozen=True)
class LoadedMap:
    """A map_server map read back: trinary (H, W) int8 (100 occupied, 0 free, -1 unknown; row 0 =
    lowest y, as map_server loads it), resolution (m), origin (x, y, yaw), thresholds, mode."""

    trinary: np.ndarray
    resolution: float
    origin: tuple
    occupied_thresh: float
    free_thresh: float
    negate: int
    mode: str


def load_map_yaml(path: Path) -> LoadedMap:
    """Read a map.yaml + its image as map_server does in trinary mode: p = (255 - v) / 255
    (negate 0); occupied when p > occupied_thresh, free when p < free_thresh, unknown between."""
    import yaml

    path = Path(path)
    meta = yaml.safe_load(path.read_text())
    missing = {"image", "resolution", "origin", "negate", "occupied_thresh", "free_thresh"} - set(meta)
    if missing:
        raise ValueError(f"{path}: map_server keys missing: {sorted(missing)}")
    px = read_pgm(path.parent / meta["image"]).astype(np.float64)
    p = px / 255.0 if meta["negate"] else (255.0 - px) / 255.0
    tri = np.full(px.shape, -1, np.int8)
    tri[p > meta["occupied_thresh"]] = 100
    tri[p < meta["free_thresh"]] = 0
    return LoadedMap(tri[::-1].copy(), float(meta["resolution"]), tuple(float(v) for v in meta["origin"]),
                     float(meta["occupied_thresh"]), float(meta["free_thresh"]), int(meta["negate"]),
                     str(meta.get("mode", "trinary")))


def write_grid_png(path: Path, grid: GridSnapshot, occupied_thresh: float, free_thresh: float,
                   trajectory_w: Optional[np.ndarray] = None, keyframes_w: Optional[np.ndarray] = None,
                   scale: Optional[int] = None) -> Path:
    """A picture of the grid (white free, black occupied, grey unknown; north = the grid's +y up)
    with the camera path (``trajectory_w`` (N, 3) world positions, blue; start green, end red)
    and the keyframes (``keyframes_w`` (K, 3), orange dots). ``scale``: pixels per cell (default:
    about 800 pixels on the longer side, at least 1)."""
    import cv2

    tri = grid.trinary(occupied_thresh, free_thresh)
    # Pad with unknown cells so that the whole path is in the picture.
    marks = [np.asarray(p, dtype=np.float64).reshape(-1, 3) for p in (trajectory_w, keyframes_w) if p is not None]
    marks = np.concatenate(marks) if marks else np.zeros((0, 3))
    pad = np.zeros(4, np.int64)                     # left, bottom, right, top (cells)
    if len(marks):
        cr = grid.cell_of(marks)
        pad[:2] = np.maximum(0, np.ceil(2 - cr.min(axis=0))).astype(np.int64)
        pad[2:] = np.maximum(0, np.ceil(cr.max(axis=0) + 2 - np.array(tri.shape[::-1]))).astype(np.int64)
    tri = np.pad(tri, ((pad[1], pad[3]), (pad[0], pad[2])), constant_values=-1)
    h, w = tri.shape
    s = scale or max(1, min(8, 800 // max(h, w, 1)))
    gray = trinary_pixels(tri)
    gray = np.where(gray == UNKNOWN, 160, gray).astype(np.uint8)
    img = cv2.cvtColor(cv2.resize(gray, (w * s, h * s), interpolation=cv2.INTER_NEAREST), cv2.COLOR_GRAY2BGR)

    def px(points_w: np.ndarray) -> np.ndarray:
        cr = grid.cell_of(np.asarray(points_w, dtype=np.float64)) + pad[:2]
        return np.stack([cr[:, 0] * s, (h - cr[:, 1]) * s], axis=1).round().astype(np.int32)

    if trajectory_w is not None and len(trajectory_w) > 1:
        pts = px(trajectory_w)
        cv2.polylines(img, [pts.reshape(-1, 1, 2)], False, (200, 90, 20), max(1, s // 3), cv2.LINE_AA)
        cv2.circle(img, tuple(int(v) for v in pts[0]), max(3, s), (40, 170, 40), -1, cv2.LINE_AA)
        cv2.circle(img, tuple(int(v) for v in pts[-1]), max(3, s), (40, 40, 220), -1, cv2.LINE_AA)
    if keyframes_w is not None and len(keyframes_w):
        for p in px(keyframes_w):
            cv2.circle(img, tuple(int(v) for v in p), max(1, s // 2), (0, 140, 255), -1, cv2.LINE_AA)
    bar = int(round(1.0 / grid.resolution * s))          # a 1 m scale bar, bottom left
    if bar < img.shape[1] - 10:
        y = img.shape[0] - 6
        cv2.line(img, (5, y), (5 + bar, y), (0, 0, 200), 2)
        cv2.putText(img, "1 m", (8, y - 5), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (0, 0, 200), 1, cv2.LINE_AA)
    cv2.imwrite(str(path), img)
    return Path(path)
