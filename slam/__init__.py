"""Sphere-splatting RGB-D SLAM for edge GPUs (NVIDIA Jetson): tracking, mapping and a pruned map
of isotropic 3D Gaussians. See docs/ARCHITECTURE.md for the module map."""

__version__ = "0.1.0"
