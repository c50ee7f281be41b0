"""Local (non-Slurm) MPI runs take the device of their local rank by the same visible-GPU
mapping as a Slurm node job's ranks (issue 41.4), without a GPU: the OpenCL listing is faked."""

from __future__ import annotations

import pytest

from hawkes_cli import kernels
from hawkes_cli.device_slots import VISIBLE_VARS
from hawkes_cli.engine import device_slot
from hawkes_cli.parallel import SerialComm

LAUNCHER_VARS = ("SLURM_LOCALID", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "PMI_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK")  # fmt: skip


@pytest.fixture
def four_gpus(monkeypatch):
    """OpenCL lists four GPUs (a runtime that ignores CUDA_VISIBLE_DEVICES); no launcher,
    visible-GPU or device variable set."""
    gpus = [kernels.DeviceInfo(0, i, "CUDA", f"G{i}", "gpu", 1, 1, True) for i in range(4)]
    monkeypatch.setattr(kernels, "list_devices", lambda: gpus)
    for var in (*LAUNCHER_VARS, *VISIBLE_VARS, kernels.DEVICE_ENV):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


@pytest.mark.parametrize("rank_var", ["MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK"])
@pytest.mark.parametrize("visible_var", ["CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"])
def test_local_ranks_take_the_visible_gpus_in_order(four_gpus, rank_var, visible_var):
    """mpiexec's local rank r (MPICH or Open MPI) with GPUs "3,1" visible: rank 0 drives GPU 3
    and rank 1 GPU 1 (distinct, in the variable's order), as the Slurm path maps them."""
    from hawkes_cli.device_slots import rank_slot

    four_gpus.setenv(visible_var, "3,1")
    slots = []
    for r in (0, 1):
        four_gpus.setenv(rank_var, str(r))
        slots.append(device_slot(SerialComm()))
        assert slots[-1] == rank_slot(None, r, {visible_var: "3,1"}).slot  # the Slurm mapping
    assert slots == [3, 1]
    assert device_slot(SerialComm(), "gpu") == 1  # "gpu" maps alike
    assert device_slot(SerialComm(local_rank=2)) == 2  # a slot pinned by the Slurm path stays


def test_without_visible_gpus_the_slot_is_the_local_rank(four_gpus):
    """No visible-GPU variable: rank r takes the r-th device, as before; a named device
    ("cpu", "P:D") is never remapped by GPU ids."""
    four_gpus.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2")
    assert device_slot(SerialComm()) == 2
    four_gpus.setenv("CUDA_VISIBLE_DEVICES", "3,1,0")
    assert device_slot(SerialComm()) == 0
    assert device_slot(SerialComm(), "cpu") == 2


def test_the_engine_selects_the_mapped_slot(four_gpus):
    """The likelihood of a local MPI rank asks the device chooser for the mapped slot."""
    from hawkes_cli.config import EngineConfig
    from hawkes_cli.data import EventData
    from hawkes_cli.engine import build_likelihood
    from hawkes_cli.engine import device as device_mod

    from .conftest import make_events

    asked = []

    class Chosen(Exception):
        pass

    def select(spec, slot=0):
        asked.append((spec, slot))
        raise Chosen

    four_gpus.setattr(device_mod.Device, "select", staticmethod(select))
    four_gpus.setenv("MPI_LOCALRANKID", "1")
    four_gpus.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    t, x, y, d = make_events(50, integer_days=True, seed=1)
    data = EventData(t, x, y, d)
    with pytest.raises(Chosen):
        build_likelihood(data, EngineConfig(backend="opencl"), model=1, area=1.0)
    assert asked == [(None, 0)]
