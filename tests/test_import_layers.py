"""The import graph follows the layer order (docs/ARCHITECTURE.md, "Layers"): frames flow down the
list, and no module imports a package of a later layer, nor a peer of its own layer. Read from the
source with ``ast`` (nothing is imported), every import counted: module level, inside functions
(lazy imports), under ``TYPE_CHECKING``, and ``importlib.import_module`` with a constant name.

Also: no test imports a script, and nothing in scripts/, slam/ or rasterizer/ edits the import
path ("sys.path")."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Lowest first. A unit is ``rasterizer`` (the package: usable alone, it imports no slam), the root
# package ``slam`` (its __init__), or one top-level module / subpackage of slam. A unit may import
# itself and the units of earlier layers only; units in one layer are peers and import none of
# each other.
LAYERS: list[tuple[str, ...]] = [
    ("rasterizer",),                       # the kernels: usable alone
    ("slam", "slam.resources"),            # package settings; where shipped files live
    ("slam.config",),                      # the typed schema: every tuning value
    ("slam.geometry", "slam.camera", "slam.cuda_graphs", "slam.tensor_ops"),  # SE(3) / pose math;
                                           # pinhole intrinsics; the CUDA graph capture; element-wise
                                           # helpers (no slam imports)
    ("slam.data",),                        # frames in
    ("slam.observation",),                 # a frame on the device
    ("slam.map",),                         # the shared state: spheres, keyframes, snapshots, files
    ("slam.tracking",),                    # the tracking thread
    ("slam.mapping",),                     # the mapping thread (the map's one writer)
    ("slam.loop",),                        # the loop thread
    ("slam.grid",),                        # the grid thread (the occupancy grid for navigation)
    ("slam.runtime",),                     # wiring and threads
    ("slam.eval",),                        # scores of a run (quality calibration runs the system)
    ("slam.output",),                      # what a run leaves (reads a RunResult, scores it)
    ("slam.cli", "slam.ros", "slam.batch"),  # entry points: run_slam, the ROS nodes, slam_batch
    ("slam.tools",),                       # tools around a run (may call run_slam, slam_batch)
]
RANK = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}


def module_name(path: Path, root: Path) -> str:
    """``slam/map/keyframes.py`` -> ``slam.map.keyframes``; a package's __init__ -> the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit_of(module: str) -> str | None:
    """The layer unit of a dotted module name; None outside slam and rasterizer."""
    parts = module.split(".")
    if parts[0] == "rasterizer":
        return "rasterizer"
    if parts[0] != "slam":
        return None
    return "slam" if len(parts) == 1 else f"slam.{parts[1]}"


def imported_modules(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, dotted name) of everything ``path`` imports, relative imports resolved; for
    ``from pkg import name`` the name is appended (it may be a submodule: ``from slam import geometry``)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found += [(node.lineno, f"{base}.{a.name}" if a.name != "*" else base) for a in node.names]
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"):
            found.append((node.lineno, node.args[0].value))
    return found


def offending_edges(root: Path, packages=("slam", "rasterizer")) -> list[str]:
    """Every import under ``root/<packages>`` that runs up the layer order or sideways to a peer,
    as 'file:line: unit -> unit (name)'; also modules whose unit no layer names."""
    bad = []
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            module = module_name(path, root)
            unit = unit_of(module)
            if unit not in RANK:
                bad.append(f"{path.relative_to(root)}: unit {unit} is in no layer (add it to LAYERS)")
                continue
            for line, name in imported_modules(path, module):
                target = unit_of(name)
                if target is None or target == unit:
                    continue
                if target not in RANK or RANK[target] >= RANK[unit]:
                    where = "a peer" if RANK.get(target) == RANK[unit] else "a higher layer"
                    bad.append(f"{path.relative_to(root)}:{line}: {unit} -> {target} ({name}: {where})")
    return bad


def test_no_import_runs_up_the_layers():
    bad = offending_edges(REPO)
    assert not bad, "imports against the layer order (tests/test_import_layers.py LAYERS):\n" + "\n".join(bad)


def test_the_check_sees_upward_lazy_and_relative_imports(tmp_path):
    """The check itself can fail: an upward import inside a function, a relative one, and a peer."""
    (tmp_path / "slam" / "map").mkdir(parents=True)
    (tmp_path / "slam" / "__init__.py").write_text("")
    (tmp_path / "slam" / "map" / "__init__.py").write_text("from . import io\n")
    (tmp_path / "slam" / "map" / "io.py").write_text(
        "from slam.geometry import invert\n\ndef f():\n    from slam.mapping.mapper import Mapper\n"
        "    from ..tracking import tracker\n    return Mapper, tracker\n")
    (tmp_path / "slam" / "camera.py").write_text("import slam.geometry\n")
    bad = offending_edges(tmp_path, packages=("slam",))
    assert [b.split(": ", 1)[1] for b in bad] == [
        "slam.camera -> slam.geometry (slam.geometry: a peer)",
        "slam.map -> slam.mapping (slam.mapping.mapper.Mapper: a higher layer)",
        "slam.map -> slam.tracking (slam.tracking.tracker: a higher layer)",
    ], bad


def test_every_layer_unit_exists():
    """LAYERS names only what the tree has (a moved module must be renamed here too)."""
    for unit in RANK:
        path = REPO / unit.replace(".", "/")
        assert path.is_dir() or path.with_suffix(".py").is_file(), unit


def test_no_test_imports_a_script():
    scripts = {p.stem for p in (REPO / "scripts").glob("*.py")} | {"scripts"}
    loaders = {"run_path", "spec_from_file_location", "SourceFileLoader", "import_module", "run_module"}
    bad = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for line, name in imported_modules(path, module_name(path, REPO)):
            if name.split(".")[0] in scripts:
                bad.append(f"{path.name}:{line}: imports {name}")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in loaders:
                if any(isinstance(c, ast.Constant) and isinstance(c.value, str) and "scripts" in c.value
                       for arg in node.args for c in ast.walk(arg)):
                    bad.append(f"{path.name}:{node.lineno}: loads a script")
    assert not bad, "\n".join(bad)


def test_nothing_edits_the_import_path():
    """Issue 36: `grep -rn "sys.path" scripts slam rasterizer` finds nothing."""
    needle = "sys." + "path"
    bad = [f"{p.relative_to(REPO)}:{i}" for folder in ("scripts", "slam", "rasterizer")
           for p in sorted((REPO / folder).rglob("*")) if p.is_file() and p.suffix not in (".pyc", ".so", ".o")
           for i, text in enumerate(p.read_text(errors="replace").splitlines(), 1) if needle in text]
    assert not bad, "\n".join(bad)
