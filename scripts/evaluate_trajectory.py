#!/usr/bin/env python3
"""Evaluate a TUM trajectory against a dataset's ground truth (same as the ``slam_eval`` command).

    python scripts/evaluate_trajectory.py est.txt --dataset 7scenes --path ../shared/data/7scenes-redkitchen-0000-0499
    python scripts/evaluate_trajectory.py est.txt --gt groundtruth.txt --json metrics.json
"""
import sys
from pathlib import Path

try:
    from slam.eval.cli import main
except ImportError:  # run from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from slam.eval.cli import main

if __name__ == "__main__":
    sys.exit(main())
