"""Frames uploaded through the page-locked staging buffers (slam.observation.upload): the device
tensors equal the arrays, also when a buffer is reused while earlier uploads' tensors live on;
on the CPU the upload is the array itself."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from slam.observation import Observation, upload

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_uploads_equal_the_arrays_across_buffer_reuse(device):
    rng = np.random.default_rng(0)
    frames = [(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8), rng.random((48, 64)) * 4)
              for _ in range(4)]
    obs = [Observation.from_numpy(c, d, np.eye(3), torch.device(device)) for c, d in frames]
    for (c, d), o in zip(frames, obs):
        assert o.color.device.type == device and o.color.dtype == torch.float32
        # against a direct copy divided on the same device (CUDA divides by 255 as x * (1 / 255))
        assert torch.equal(o.color, torch.from_numpy(c).to(device) / 255.0)
        assert o.depth.dtype == torch.float32
        assert torch.equal(o.depth.cpu(), torch.from_numpy(d.astype(np.float32)))


def test_cpu_upload_casts_only_when_asked():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert upload(a, torch.device("cpu"), np.float32).data_ptr() == a.ctypes.data
    assert upload(a.astype(np.float64), "cpu", np.float32).dtype == torch.float32
