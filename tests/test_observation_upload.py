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
        # rasterizer.unpack_frame divides by 255 with rounding, as PyTorch's CPU division does
        assert torch.equal(o.color.cpu(), torch.from_numpy(c) / 255.0)
        assert o.depth.dtype == torch.float32
        assert torch.equal(o.depth.cpu(), torch.from_numpy(d.astype(np.float32)))


def test_cpu_upload_casts_only_when_asked():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert upload(a, torch.device("cpu"), np.float32).data_ptr() == a.ctypes.data
    assert upload(a.astype(np.float64), "cpu", np.float32).dtype == torch.float32


def _frames(n, h=96, w=128):
    from types import SimpleNamespace
    rng = np.random.default_rng(1)
    return [SimpleNamespace(color=rng.integers(0, 256, (h, w, 3), dtype=np.uint8),
                            depth=(rng.random((h, w)) * 4).astype(np.float32), K=np.eye(3))
            for _ in range(n)]


def test_unstaged_frames_carry_no_observation():
    from slam.runtime.staging import FrameStager, StagedFrame
    f = _frames(1)[0]
    assert StagedFrame(f).observation() is None and StagedFrame(f).frame is f
    with pytest.raises(ValueError, match="only on CUDA"):
        FrameStager(lambda fr: None, torch.device("cpu"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available (scripts/gpu_check.sh)")
def test_staged_frames_equal_direct_observations_on_another_stream():
    from slam.runtime.staging import FrameStager
    device = torch.device("cuda")

    def observe(f):
        return Observation.from_numpy(f.color, f.depth, f.K, device).downsampled(2)

    frames = _frames(6)
    stager = FrameStager(observe, device)
    staged = [stager(f) for f in frames]          # all queued before any is used, as the channel does
    consumer = torch.cuda.Stream(device)
    with torch.cuda.stream(consumer):
        for f, s in zip(frames, staged):
            got, want = s.observation(), observe(f)
            assert got.color.shape == (48, 64, 3) and torch.equal(got.K, want.K)
            assert torch.equal(got.color, want.color) and torch.equal(got.depth, want.depth)
    torch.cuda.synchronize()
