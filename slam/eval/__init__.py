"""Evaluation: trajectory metrics through evo (ATE, RPE) and image metrics (PSNR, SSIM, depth L1)."""
from slam.eval.images import depth_l1, psnr, ssim
from slam.eval.trajectory import evaluate_ate, evaluate_rpe, evaluate_trajectory

__all__ = ["evaluate_ate", "evaluate_rpe", "evaluate_trajectory", "psnr", "ssim", "depth_l1"]
