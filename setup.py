"""Installs the ``slam`` and ``rasterizer`` packages.

Install torch first (a CPU wheel on a laptop/CI, NVIDIA's wheel on a Jetson): the plain ``torch``
requirement below is then already met and pip pulls no multi-GB CUDA build.

Ahead-of-time build of the rasterizer kernels (deployment, e.g. on a Jetson):
    SPHERE_RASTER_AOT=1 pip install --no-build-isolation .
Without it the kernels are compiled just-in-time on first use and cached.
"""
import os
import runpy
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent


def rasterizer_extensions():
    """(ext_modules, cmdclass) for the ahead-of-time build, or empty when not requested."""
    if os.environ.get("SPHERE_RASTER_AOT", "0") != "1":
        return [], {}
    build = runpy.run_path(str(HERE / "rasterizer" / "_build.py"))
    return build["aot_extensions"]()


ext_modules, cmdclass = rasterizer_extensions()

setup(
    name="sphere-slam",
    version="0.1.0",
    description="Sphere-splatting RGB-D SLAM for NVIDIA Jetson: isotropic Gaussians, custom rasterizer",
    long_description=(HERE / "README.md").read_text() if (HERE / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["slam", "slam.*", "rasterizer", "rasterizer.*"])
    + ["slam._configs", "slam._sample"],
    package_dir={"slam._configs": "configs", "slam._sample": "datasets/sample"},
    package_data={
        "rasterizer": ["csrc/*", "csrc/**/*"],
        "slam._configs": ["*.yaml"],
        "slam._sample": ["*.txt", "*.yaml", "*.md", "rgb/*", "depth/*"],
        "slam.ros": ["launch/*", "package.xml", "scripts/*"],
    },
    install_requires=[
        "torch>=2.1",
        "gsplat>=1.4",
        "open3d>=0.18",
        "opencv-python-headless>=4.8",
        # JPEG colour images (slam/data/imageio.py): libjpeg-turbo in strict mode reports damaged
        # data that OpenCV's decoder only prints; wheels for x86-64 and aarch64 (3.10-3.12)
        "simplejpeg>=1.7",
        "numpy>=1.24",
        "pyyaml>=6",
        "evo>=1.28",
        "rosbags>=0.10",
        "plyfile>=1.0",
        "tqdm>=4.60",
        "pooch>=1.7",           # dataset download, cache and checksum (slam/data/fetch.py)
        # loop closure's pose graph (slam/loop/pose_graph.py, docs/ARCHITECTURE.md): 4.3.0 wheels
        # for x86-64 3.11/3.12 and aarch64 3.12; aarch64 3.10 (JetPack 6) has only 4.3a1, which
        # the pre-release in this specifier admits
        "gtsam>=4.3a1",
        "requests>=2.28",       # resumable HTTP transfers under pooch (slam/data/fetch.py)
        # RealSense cameras and recordings (slam/data/realsense.py): PyPI has wheels for Linux
        # x86-64 and aarch64 (2.59.1+) and Windows x64, none for macOS (docs/DATA.md)
        "pyrealsense2>=2.54; sys_platform == 'linux' or (sys_platform == 'win32' and platform_machine == 'AMD64')",
        "pytorch-msssim>=1.0",
        "matplotlib>=3.6",
        "ninja",
        "psutil",
        "fsspec>=2023.1",       # slam_batch output storage: paths and fsspec URLs (torch needs it too)
    ],
    extras_require={
        # the rerun live view / recordings (run_slam --viewer/--rrd/--serve): optional because
        # rerun-sdk >= 0.24 needs NumPy 2, which NVIDIA's torch for JetPack 6 is not built for
        # (docs/JETSON.md); 0.36 is the first with a gRPC server sink that can be bound to an address
        "viewer": ["rerun-sdk>=0.36"],
        # slam_batch on Ray (without it: slam_batch --local). Ray core is enough: local clusters and
        # existing ones (--address auto / HOST:PORT); tested with 2.60.0
        "batch": ["ray>=2.9"],
        # selenium drives Chromium in tests/test_web_viewer.py; ray runs tests/test_batch.py's local cluster;
        # ruff is the lint the README's test command runs (ruff.toml): pinned to one minor version,
        # whose releases can make new rules under the selected prefixes stable (raise it on purpose)
        "test": ["pytest>=7", "selenium>=4.10", "rerun-sdk>=0.36", "ray>=2.9", "ruff>=0.17,<0.18"],
    },
    entry_points={
        "console_scripts": [
            "run_slam=slam.cli:main",
            "slam_eval=slam.eval.cli:main",
            "slam_data=slam.data.cli:main",
            "slam_batch=slam.batch.cli:main",
            "slam_suite=slam.batch.suite:main",
            "slam_ros1_node=slam.ros.ros1_node:main",
            "slam_ros2_node=slam.ros.ros2_node:main",
            # tools around a run (slam/tools, docs/ARCHITECTURE.md "Tools")
            "slam_measure_device=slam.tools.measure_device:main",
            "slam_profile=slam.tools.profile_tracking:main",
            "slam_jetson_projection=slam.tools.jetson_projection:main",
            "slam_color_registration=slam.tools.color_registration:main",
            "slam_view_run=slam.output.view_run:main",
            # the rasterizer's benchmarks (rasterizer/bench, docs/RASTERIZER.md)
            "slam_bench_rasterizer=rasterizer.bench.render:main",
            "slam_bench_gauss_newton=rasterizer.bench.gauss_newton:main",
        ]
    },
    ext_modules=ext_modules,
    cmdclass=cmdclass,
)
