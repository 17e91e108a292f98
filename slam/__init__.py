"""Sphere-splatting RGB-D SLAM for edge GPUs (NVIDIA Jetson): tracking, mapping and a pruned map
of isotropic 3D Gaussians. See docs/ARCHITECTURE.md for the module map."""

import os

# OpenCV probes for an OpenCL runtime the first time one of its functions could use it (ORB in
# the relocaliser and loop closure): where an OpenCL driver is installed (e.g. pocl, which loads
# LLVM) that costs ~70 MB of resident memory and nothing is gained, as no UMat is ever used here.
# A value the user set is kept.
os.environ.setdefault("OPENCV_OPENCL_RUNTIME", "disabled")

__version__ = "0.1.0"
