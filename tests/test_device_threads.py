"""slam.runtime.device.prepare_device: the host's OpenMP threads for each kind of run."""
import torch

from slam.runtime.device import cpu_share, prepare_device


def _threads_after(device: str, threaded: bool) -> int:
    before = torch.get_num_threads()
    try:
        prepare_device(torch.device(device), threaded, seed=0)
        return torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def test_a_gpu_run_s_host_work_runs_on_one_thread():
    """(A CUDA device object needs no GPU to be made: only the settings are checked.)"""
    assert _threads_after("cuda", True) == 1
    assert _threads_after("cuda", False) == 1


def test_a_threaded_cpu_run_splits_the_cores_between_tracking_and_mapping(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    assert cpu_share() == 8
    assert _threads_after("cpu", True) == 4
