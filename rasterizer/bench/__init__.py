"""Benchmarks of the rasterizer's kernels, printed as markdown tables (docs/RASTERIZER.md):
``render`` (``slam_bench_rasterizer``: ours vs gsplat on CUDA, the CPU kernel vs the PyTorch
reference) and ``gauss_newton`` (``slam_bench_gauss_newton``: the fused pass vs one render).
"""
