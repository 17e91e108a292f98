"""Save and load the sphere map as a standard 3D Gaussian Splatting PLY.

Layout (one vertex per sphere, float32): x y z, nx ny nz (0), f_dc_0..2 (SH degree-0 colour:
rgb = 0.5 + C0 * f_dc), opacity (logit), scale_0..2 (log radius, repeated: isotropic),
rot_0..3 (identity quaternion w x y z = 1 0 0 0), and, when known, anchor_kf (int32: the id of
the keyframe that created the sphere, ``SphereMap.anchors``; viewers ignore the extra field).
Common splat viewers open it; ``load_map_rows`` restores the parameter rows (means, log radius,
opacity logit exact; colour within float rounding); ``load_map`` also the anchors (None for a map
saved without them: it loads, unanchored).
"""
from __future__ import annotations

import logging
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple, Optional

import numpy as np
import torch
from plyfile import PlyData, PlyElement

from slam.camera import scale_K
from slam.map.keyframes import Keyframe
from slam.map.sphere_map import COLOR, LOG_RADIUS, MEANS, OPACITY, PARAM_DIM

log = logging.getLogger("slam.map")

SH_C0 = 0.28209479177387814
FIELDS = ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2", "opacity",
          "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
REQUIRED = ["x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1", "scale_2"]


class MapFormatError(ValueError):
    """The file is not a sphere map this package can load; the message names file and problem."""


def save_map(path: str | Path, rows: torch.Tensor, anchors: Optional[torch.Tensor] = None,
             commit: bool = True) -> Path:
    """Write parameter rows (N, 8) (see ``slam.map.sphere_map``) as a 3DGS PLY, with the
    spheres' anchor keyframe ids (N,) when given: to ``pending_map_path(path)``, then renamed to
    ``path`` (``commit=False``: left under the temporary name, which is returned)."""

    rows = rows.detach().float().cpu()
    n = rows.shape[0]
    rgb = torch.sigmoid(rows[:, COLOR]).numpy()
    dtype = [(f, "f4") for f in FIELDS] + ([("anchor_kf", "i4")] if anchors is not None else [])
    data = np.zeros(n, dtype=dtype)
    if anchors is not None:
        data["anchor_kf"] = anchors.detach().cpu().numpy().astype(np.int32)
    xyz = rows[:, MEANS].numpy()
    data["x"], data["y"], data["z"] = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    for i in range(3):
        data[f"f_dc_{i}"] = (rgb[:, i] - 0.5) / SH_C0
        data[f"scale_{i}"] = rows[:, LOG_RADIUS].numpy()
    data["opacity"] = rows[:, OPACITY].numpy()
    data["rot_0"] = 1.0
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = pending_map_path(path)
    PlyData([PlyElement.describe(data, "vertex")], text=False).write(str(tmp))
    if commit:
        tmp.replace(path)  # never leave a half-written map under the real name
    return tmp


def pending_map_path(map_path: str | Path) -> Path:
    """``runs/x/map.ply`` -> ``runs/x/map.ply.tmp``: where ``save_map`` writes before renaming."""
    p = Path(map_path)
    return p.with_suffix(p.suffix + ".tmp")


def save_map_pair(map_path: str | Path, rows: torch.Tensor, anchors: Optional[torch.Tensor], keyframes: list,
                  compress: bool = True, side_optional: bool = False) -> None:
    """The map and its keyframe side file, replaced together: both are written under temporary
    names, then renamed back to back, the side file first. A process killed before the renames
    leaves the old pair; between them, the new side file with the new map complete under
    ``pending_map_path``, which ``load_saved_map_anchored`` then reads (a map written alone, then
    its side file, left a mismatched pair for the whole side-file write). A side file that cannot
    be written raises (nothing replaced), or with ``side_optional`` (a run's final outputs) is
    logged and the map replaced alone."""
    tmp_map = save_map(map_path, rows, anchors, commit=False)
    try:
        save_keyframes(keyframes_path(map_path), keyframes, int(rows.shape[0]), compress=compress)
    except Exception as exc:
        if not side_optional:
            tmp_map.unlink(missing_ok=True)
            raise
        log.error("%s: could not write the keyframe side file (%s: %s); the map is written alone",
                  map_path, type(exc).__name__, exc)
    tmp_map.replace(map_path)


def load_map_rows(path: str | Path, isotropy_tol: float = 1e-4) -> torch.Tensor:
    """Read a 3DGS PLY written by ``save_map`` (or any isotropic one) -> rows (N, 8) float32.
    Raises as ``load_map``."""
    return load_map(path, isotropy_tol)[0]


def load_map(path: str | Path, isotropy_tol: float = 1e-4) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Read a 3DGS PLY -> (rows (N, 8) float32, anchor keyframe ids (N,) int32 or None when the
    file has none).

    Raises ``FileNotFoundError`` or ``MapFormatError`` (missing fields, non-float fields,
    anisotropic scales, non-identity rotations, truncated file, non-finite values).
    """

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: map file not found")
    try:
        ply = PlyData.read(str(path))
        vertex = ply["vertex"]
        data = vertex.data
        n = len(data)
        _ = data[-1] if n else None  # force a full read: a truncated file fails here
    except KeyError:
        raise MapFormatError(f"{path}: no 'vertex' element, not a Gaussian-splat map") from None
    except Exception as exc:  # plyfile raises various errors on truncated/garbled files
        raise MapFormatError(f"{path}: cannot parse PLY ({type(exc).__name__}: {exc})") from None
    names = data.dtype.names or ()
    missing = [f for f in REQUIRED if f not in names]
    if missing:
        raise MapFormatError(f"{path}: not a sphere map, missing fields {missing}")
    for f in REQUIRED:
        if data.dtype[f].kind != "f":
            raise MapFormatError(f"{path}: field '{f}' must be floating point, got {data.dtype[f]}")
    scales = np.stack([data[f"scale_{i}"] for i in range(3)], axis=1).astype(np.float64)
    if n and np.max(np.abs(scales - scales[:, :1])) > isotropy_tol:
        raise MapFormatError(f"{path}: anisotropic scales (scale_0..2 differ); this package stores spheres only")
    if all(f"rot_{i}" in names for i in range(4)) and n:
        q = np.stack([data[f"rot_{i}"] for i in range(4)], axis=1).astype(np.float64)
        q = q / np.linalg.norm(q, axis=1, keepdims=True).clip(1e-12)
        if np.max(np.abs(np.abs(q[:, 0]) - 1.0)) > 1e-4:
            raise MapFormatError(f"{path}: non-identity rotations; this package stores spheres only")
    rows = np.zeros((n, PARAM_DIM), dtype=np.float32)
    rows[:, 0], rows[:, 1], rows[:, 2] = data["x"], data["y"], data["z"]
    rows[:, LOG_RADIUS] = scales[:, 0]
    rgb = np.stack([0.5 + SH_C0 * data[f"f_dc_{i}"].astype(np.float64) for i in range(3)], axis=1)
    rgb = rgb.clip(1e-6, 1 - 1e-6)
    rows[:, 4:7] = np.log(rgb / (1 - rgb))
    rows[:, OPACITY] = data["opacity"]
    if not np.all(np.isfinite(rows)):
        raise MapFormatError(f"{path}: non-finite values in the map")
    anchors = None
    if "anchor_kf" in names:
        anchors = torch.from_numpy(np.asarray(data["anchor_kf"]).astype(np.int32))
    return torch.from_numpy(rows), anchors


# --------------------------------------------------------------------------- keyframe side file
# ``<map>.keyframes.npz`` next to ``<map>.ply`` (numpy .npz, zip, compressed) holds what relocalising
# against and continuing a saved map need beyond the spheres:
#   format        str   "sphere-slam-keyframes"         version     int   SIDE_FILE_VERSION
#   map_spheres   int   sphere count of the map it was saved with (consistency check)
#   frame_index   (K,)  int64   source frame index      timestamp   (K,)  float64 seconds
#   T_wc          (K, 4, 4) float64 camera-to-world pose, the map's world frame
#   K             (K, 3, 3) float64 intrinsics of the stored images (OpenCV pixel centres)
#   color         (K, h, w, 3) uint8 RGB                depth       (K, h, w) float16 metres, 0 = invalid
#   keyframe_id   (K,)  int64   optional: the keyframes' ids (the map's anchor_kf refer to them);
#                 absent in older files: the ids are then 0..K-1
# Images are the keyframe store's, downscaled by an integer factor so that w <= max_width.
SIDE_FILE_FORMAT = "sphere-slam-keyframes"
SIDE_FILE_VERSION = 1
_SIDE_KEYS = ("format", "version", "map_spheres", "frame_index", "timestamp", "T_wc", "K", "color", "depth")


class SideFileError(MapFormatError):
    """The keyframe side file of a saved map is missing, unreadable or inconsistent."""


def keyframes_path(map_path: str | Path) -> Path:
    """``runs/x/map.ply`` -> ``runs/x/map.keyframes.npz``."""
    p = Path(map_path)
    return p.with_name(p.stem + ".keyframes.npz")


def _shrink(kf, max_width: int):
    """Keyframe downscaled by the smallest integer factor that makes its width <= max_width."""
    w = kf.color.shape[1]
    factor = -(-w // max_width) if max_width > 0 else 1
    if factor <= 1:
        return kf
    frame = SimpleNamespace(color=kf.color, depth=kf.depth.astype(np.float32), K=kf.K,
                            index=kf.frame_index, timestamp=kf.timestamp)
    return Keyframe.from_frame(frame, kf.T_wc, factor)


def save_keyframes(path: str | Path, keyframes: list, map_spheres: int, max_width: int = 320,
                   compress: bool = True) -> None:
    """Write keyframes (``slam.map.keyframes.Keyframe``) as the side file (layout above), atomically.
    ``compress=False`` (autosaves) writes the same arrays uncompressed: about 20x less CPU time.
    The image arrays are streamed into the npz one keyframe at a time: no stacked host copy of
    the keyframe store is made (np.savez would need two: the stack and its dtype conversion)."""
    if not keyframes:
        raise ValueError("no keyframes to save")
    shapes = {k.color.shape for k in keyframes}
    if len(shapes) != 1:
        raise ValueError(f"keyframes have different image sizes {sorted(shapes)}; cannot stack")
    h, w = _shrink(keyframes[0], max_width).color.shape[:2]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    small = {"format": np.array(SIDE_FILE_FORMAT), "version": np.array(SIDE_FILE_VERSION),
             "map_spheres": np.array(int(map_spheres)),
             "frame_index": np.array([k.frame_index for k in keyframes], dtype=np.int64),
             "keyframe_id": np.array([k.kf_id for k in keyframes], dtype=np.int64),
             "timestamp": np.array([k.timestamp for k in keyframes], dtype=np.float64),
             "T_wc": np.stack([np.asarray(k.T_wc, dtype=np.float64) for k in keyframes]),
             "K": np.stack([np.asarray(_shrink_K(k, max_width), dtype=np.float64) for k in keyframes])}
    n = len(keyframes)
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED,
                             allowZip64=True) as zf:
            for name, arr in small.items():
                with zf.open(name + ".npy", "w") as fh:
                    np.lib.format.write_array(fh, arr, allow_pickle=False)
            _write_stacked(zf, "color", (n, h, w, 3), np.uint8, (_shrink(k, max_width).color for k in keyframes))
            _write_stacked(zf, "depth", (n, h, w), np.float16, (_shrink(k, max_width).depth for k in keyframes))
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(path)


def _shrink_K(kf, max_width: int) -> np.ndarray:
    """The intrinsics ``_shrink`` gives ``kf`` (without resampling its images)."""
    factor = -(-kf.color.shape[1] // max_width) if max_width > 0 else 1
    return kf.K if factor <= 1 else scale_K(kf.K, factor)


def _write_stacked(zf: zipfile.ZipFile, name: str, shape: tuple, dtype, parts) -> None:
    """One .npy member of ``shape`` written part by part (each part one leading index)."""
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape}
    with zf.open(name + ".npy", "w", force_zip64=True) as fh:
        np.lib.format.write_array_header_2_0(fh, header)
        for part in parts:
            part = np.ascontiguousarray(part, dtype=dtype)
            if part.shape != shape[1:]:
                raise ValueError(f"keyframe {name} of shape {part.shape}, expected {shape[1:]}")
            fh.write(part.data)


def load_keyframes(path: str | Path, map_spheres: int | None = None) -> list:
    """Read a side file -> list of ``Keyframe``. Raises ``SideFileError`` naming the file and the
    problem (missing, not an npz, wrong format/version, missing arrays, inconsistent shapes,
    non-finite poses, or written for a map with a different sphere count)."""

    path = Path(path)
    if not path.is_file():
        raise SideFileError(f"{path}: keyframe side file not found (saved next to the map by run_slam; "
                            "localize/continue need it)")
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in _SIDE_KEYS if k not in z.files]
            if missing:
                raise SideFileError(f"{path}: not a keyframe side file, missing arrays {missing}")
            data = {k: z[k] for k in _SIDE_KEYS}
            ids = z["keyframe_id"] if "keyframe_id" in z.files else None
    except SideFileError:
        raise
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise SideFileError(f"{path}: cannot read keyframe side file ({type(exc).__name__}: {exc})") from None
    if str(data["format"]) != SIDE_FILE_FORMAT:
        raise SideFileError(f"{path}: format '{data['format']}', expected '{SIDE_FILE_FORMAT}'")
    if int(data["version"]) != SIDE_FILE_VERSION:
        raise SideFileError(f"{path}: version {int(data['version'])}, this package reads {SIDE_FILE_VERSION}")
    n = len(data["frame_index"])
    shapes_ok = (
        n > 0 and data["timestamp"].shape == (n,) and data["T_wc"].shape == (n, 4, 4)
        and data["K"].shape == (n, 3, 3) and data["color"].ndim == 4 and data["color"].shape[0] == n
        and data["color"].shape[3] == 3 and data["depth"].shape == data["color"].shape[:3]
        and data["color"].dtype == np.uint8
    )
    if not shapes_ok:
        raise SideFileError(f"{path}: inconsistent array shapes/dtypes "
                            f"({ {k: (v.shape, str(v.dtype)) for k, v in data.items()} })")
    if not (np.all(np.isfinite(data["T_wc"])) and np.all(np.isfinite(data["K"]))):
        raise SideFileError(f"{path}: non-finite keyframe poses or intrinsics")
    if map_spheres is not None and int(data["map_spheres"]) != int(map_spheres):
        raise SideFileError(f"{path}: written for a map of {int(data['map_spheres'])} spheres, but the map "
                            f"has {int(map_spheres)}: the two files do not belong together")
    if ids is None or ids.shape != (n,) or len(set(ids.tolist())) != n or int(ids.min()) < 0:
        ids = np.arange(n)   # older files, or ids never assigned: the order is the id
    return [Keyframe(int(data["frame_index"][i]), float(data["timestamp"][i]), data["T_wc"][i].copy(),
                     np.ascontiguousarray(data["color"][i]), np.ascontiguousarray(data["depth"][i]),
                     data["K"][i].copy(), int(ids[i])) for i in range(n)]


class SavedMap(NamedTuple):
    """rows: (N, 8) parameter rows; keyframes: ``Keyframe`` list (with ids); anchors: (N,) int32
    anchor keyframe ids or None (a map saved without them)."""

    rows: torch.Tensor
    keyframes: list
    anchors: Optional[torch.Tensor]


def load_saved_map(map_path: str | Path) -> tuple[torch.Tensor, list]:
    """A saved map and its keyframes: (rows (N, 8), keyframes). Raises as ``load_saved_map_anchored``."""
    saved = load_saved_map_anchored(map_path)
    return saved.rows, saved.keyframes


def load_saved_map_anchored(map_path: str | Path) -> SavedMap:
    """A saved map, its keyframes and its spheres' anchor keyframe ids. Raises
    ``FileNotFoundError``, ``MapFormatError`` (bad PLY, empty map) or ``SideFileError`` (bad or
    missing side file)."""
    rows, anchors = load_map(map_path)
    side, pending = keyframes_path(map_path), pending_map_path(map_path)
    side_spheres = side_file_spheres(side) if pending.is_file() else None
    if side_spheres not in (None, int(rows.shape[0])):
        # a save_map_pair interrupted between its renames: the side file is the new one, and so
        # is the map under its temporary name, if it is whole and the counts agree
        try:
            new_rows, new_anchors = load_map(pending)
        except (MapFormatError, FileNotFoundError):
            new_rows = None
        if new_rows is not None and int(new_rows.shape[0]) == side_spheres:
            log.warning("%s: the last save was interrupted before the map was renamed; reading its "
                        "complete map from %s, which matches %s", map_path, pending.name, side.name)
            rows, anchors = new_rows, new_anchors
    if rows.shape[0] == 0:
        raise MapFormatError(f"{map_path}: the map has no spheres")
    return SavedMap(rows, load_keyframes(side, map_spheres=int(rows.shape[0])), anchors)


def side_file_spheres(path: str | Path) -> Optional[int]:
    """The map size a keyframe side file was written for (None when it cannot be read)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return int(z["map_spheres"])
    except Exception:  # noqa: BLE001 - load_keyframes reports what is wrong with the file
        return None
