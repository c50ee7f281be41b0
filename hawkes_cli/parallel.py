"""Ranks of one chain: the communicator protocol, MPI detection, row partitioning.

:mod:`mpi4py` is imported only when the process was started by an MPI launcher (or when asked
to), so serial use never initialises MPI.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .errors import ParallelError

log = logging.getLogger(__name__)

# Environment variables by which launchers announce a multi-process world.
_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "PMIX_SIZE")
_LOCAL_RANK_VARS = (
    "SLURM_LOCALID",
    "MPI_LOCALRANKID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_RANK",
)


class Comm(Protocol):
    """The few collectives a chain needs."""

    rank: int
    size: int

    def allreduce_sum(self, value: float) -> float:
        """Sum of ``value`` over all ranks, in float64, returned on every rank."""
        ...

    def bcast(self, obj: Any, root: int = 0) -> Any:
        """``obj`` from ``root`` on every rank."""
        ...

    def barrier(self) -> None:
        """Wait for all ranks."""
        ...

    def allgather(self, obj: Any) -> list[Any]:
        """``obj`` of every rank, in rank order, on every rank."""
        ...


class SerialComm:
    """A world of one rank.

    Parameters
    ----------
    local_rank
        Rank on the node to report (see :func:`local_rank`); ``None`` lets the launcher's
        environment decide.
    """

    rank = 0
    size = 1

    def __init__(self, local_rank: int | None = None) -> None:
        self.pinned_local_rank = local_rank

    def allreduce_sum(self, value: float) -> float:
        return float(value)

    def bcast(self, obj: Any, root: int = 0) -> Any:
        return obj

    def barrier(self) -> None:
        return None

    def allgather(self, obj: Any) -> list[Any]:
        return [obj]


class MPIComm:
    """An :mod:`mpi4py` communicator behind the :class:`Comm` protocol.

    Parameters
    ----------
    comm
        An ``mpi4py.MPI.Comm``.
    local_rank
        This process's rank on its node, when the caller knows it better than the launcher's
        environment (e.g. a chain communicator split from a node's world, where the device
        must follow the rank on the node, not the rank in the chain); see :func:`local_rank`.
    """

    def __init__(self, comm: Any, local_rank: int | None = None) -> None:
        self._comm = comm
        self.rank = int(comm.Get_rank())
        self.size = int(comm.Get_size())
        self.pinned_local_rank = local_rank

    def allreduce_sum(self, value: float) -> float:
        from mpi4py import MPI

        send = np.array([value], dtype=np.float64)
        recv = np.empty(1, dtype=np.float64)
        self._comm.Allreduce(send, recv, op=MPI.SUM)
        return float(recv[0])

    def bcast(self, obj: Any, root: int = 0) -> Any:
        return self._comm.bcast(obj, root=root)

    def barrier(self) -> None:
        self._comm.Barrier()

    def allgather(self, obj: Any) -> list[Any]:
        return list(self._comm.allgather(obj))

    def split(self, color: int, key: int = 0, *, local_rank: int | None = None) -> MPIComm:
        """Split into sub-communicators (collective over this communicator).

        Parameters
        ----------
        color
            Ranks with the same colour (>= 0) end up in one communicator.
        key
            Orders the ranks within the new communicator (ties: by rank here).
        local_rank
            Rank on the node to pin on the new communicator (see :class:`MPIComm`).

        Returns
        -------
        MPIComm
            The communicator of this rank's colour.
        """
        return MPIComm(self._comm.Split(int(color), int(key)), local_rank=local_rank)

    def local_rank(self) -> int:
        """Rank among the processes of this node (shared-memory split)."""
        from mpi4py import MPI

        node = self._comm.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            return int(node.Get_rank())
        finally:
            node.Free()


def launched_by_mpi() -> bool:
    """True when an MPI launcher started this process with more than one rank."""
    for var in _SIZE_VARS:
        value = os.environ.get(var)
        if value and value.isdigit() and int(value) > 1:
            return True
    return False


def world_comm(force_mpi: bool = False) -> Comm:
    """The world communicator: MPI when launched by ``mpiexec``/``srun``, else serial.

    Raises
    ------
    ParallelError
        If MPI is needed but :mod:`mpi4py` cannot be imported.
    """
    if not (force_mpi or launched_by_mpi()):
        return SerialComm()
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise ParallelError(
            f"started under an MPI launcher but mpi4py is not importable ({exc}); "
            "install it with `pip install mpi4py mpich`"
        ) from None
    return MPIComm(MPI.COMM_WORLD)


def local_rank(comm: Comm) -> int:
    """This process's rank on its node.

    The rank pinned on ``comm`` when there is one (see :class:`MPIComm`), else from the
    launcher's environment, else from MPI (shared-memory split).
    """
    pinned = getattr(comm, "pinned_local_rank", None)
    if pinned is not None:
        return int(pinned)
    for var in _LOCAL_RANK_VARS:
        value = os.environ.get(var)
        if value is not None and value.isdigit():
            return int(value)
    if isinstance(comm, MPIComm):
        return comm.local_rank()
    return 0


def partition_rows(cost: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """Split rows into ``parts`` contiguous blocks of about equal total cost.

    Parameters
    ----------
    cost : (N,) float
        Work of each row (e.g. pair terms), all >= 0.
    parts
        Number of blocks (ranks), >= 1.

    Returns
    -------
    list of (start, stop)
        Contiguous, covering ``[0, N)`` in order; a block may be empty only when
        ``parts > N``.
    """
    n = int(np.asarray(cost).size)
    if parts < 1:
        raise ParallelError(f"number of ranks must be >= 1, got {parts}")
    cum = np.cumsum(np.asarray(cost, dtype=np.float64))
    total = cum[-1] if n else 0.0
    targets = total * np.arange(1, parts) / parts
    cuts = np.searchsorted(cum, targets, side="left") + 1 if n else np.zeros(parts - 1, int)
    cuts = np.minimum(np.maximum.accumulate(np.asarray(cuts, dtype=np.int64)), n)
    bounds = [0, *cuts.tolist(), n]
    return [(bounds[k], bounds[k + 1]) for k in range(parts)]


def find_mpiexec(remedy: str) -> str:
    """The ``mpiexec`` next to this Python (the MPI wheel's), else the one on PATH.

    Raises
    ------
    ParallelError
        None found; the message ends with ``remedy``.
    """
    here = Path(sys.executable).with_name("mpiexec")
    found = str(here) if here.exists() else shutil.which("mpiexec")
    if not found:
        raise ParallelError(f"mpiexec not found (next to this Python or on PATH); {remedy}")
    return found
