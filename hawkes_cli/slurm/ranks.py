"""Each MPI rank of a node job (``hawkes-run node CONFIG --node N --ranks``).

The rank checks the world size against the plan, picks its device from its local rank among the
devices the job may see, refuses GPU sharing within the node, splits the world into one
communicator per chain and runs :func:`~hawkes_cli.runner.run_chain` on it (skipping a finished
chain). SIGUSR1, SIGTERM and SIGINT only set the :class:`~hawkes_cli.runner.StopFlag`; the ranks
of a chain agree on it at the next iteration boundary and commit before they exit. A rank whose
chain is done ignores them while it waits for the node's other chains.
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Config, load_config
from ..errors import ParallelError
from ..parallel import Comm, MPIComm, SerialComm, world_comm
from ..rundir import RunDir
from ..vocab import EXIT_STOPPED
from .devices import DeviceChoice, check_devices, choose_device
from .plan import NodePlan, Plan, RankSlot, make_plan

if TYPE_CHECKING:  # pragma: no cover
    from ..stop import StopFlag

log = logging.getLogger(__name__)


def _node_local_rank(world: Comm) -> int:
    if isinstance(world, MPIComm):
        return world.local_rank()
    return 0


def _my_slot(plan: Plan, node: NodePlan, world: Comm) -> tuple[RankSlot, int]:
    """This rank's slot in the plan and its local rank, after checking the world against it."""
    if world.size != node.n_ranks:
        raise ParallelError(
            f"node {node.index} runs chains {list(node.chains)} with "
            f"{plan.gpus_per_chain} rank(s) each, so it needs {node.n_ranks} MPI rank(s), but "
            f"the launcher started {world.size}; start it with `srun --ntasks={node.n_ranks}` "
            f"(or mpiexec -n {node.n_ranks}), as the batch script of `hawkes-run submit` does"
        )
    lrank = _node_local_rank(world)
    if lrank != world.rank:
        raise ParallelError(
            f"rank {world.rank} of node {node.index} has local rank {lrank}: the ranks of one "
            "node job span several hosts; an array task must run on one node (--nodes=1)"
        )
    return node.ranks[world.rank], lrank


def _checked_device(
    config: Config, node: NodePlan, world: Comm, slot: RankSlot, lrank: int, stop: StopFlag
) -> DeviceChoice:
    """This rank's device, once every rank's choice passed :func:`check_devices`."""
    choice = choose_device(
        config,
        rank=world.rank,
        chain=slot.chain,
        chain_rank=slot.chain_rank,
        local_rank=lrank,
        env=os.environ,
    )
    # OpenCL drivers may take signals when they load (PoCL installs its own SIGUSR1 handler
    # while it enumerates devices, which choose_device just did): route them to the flag again.
    stop.install()
    choices = world.allgather(choice)
    notes = check_devices(choices)
    log.info("node %d: %s", node.index, choice.describe())
    if world.rank == 0:
        for note in notes:
            log.info("node %d: %s", node.index, note)
    return choice


def _chain_comm(world: Comm, plan: Plan, slot: RankSlot, choice: DeviceChoice) -> Comm:
    """The communicator of this rank's chain (world split by chain)."""
    if isinstance(world, MPIComm):
        comm: Comm = world.split(slot.chain, slot.chain_rank, local_rank=choice.slot)
    else:
        comm = SerialComm(local_rank=choice.slot)
    if comm.size != plan.gpus_per_chain or comm.rank != slot.chain_rank:  # pragma: no cover
        raise ParallelError(
            f"chain {slot.chain}: communicator split gave rank {comm.rank} of "
            f"{comm.size}, expected {slot.chain_rank} of {plan.gpus_per_chain}"
        )
    return comm


def _run_slot(config: Config, chain: int, comm: Comm, stop: StopFlag) -> int:
    """Run (or skip, when finished) ``chain`` on ``comm``; the rank's exit code."""
    from ..runner import run_chain

    finished = comm.bcast(RunDir.of(config).is_finished(chain) if comm.rank == 0 else None)
    if finished:
        if comm.rank == 0:
            log.info("chain %d is finished; nothing to do", chain)
        return 0
    outcome = run_chain(config, chain, comm=comm, stop=stop)
    done = comm.bcast(outcome.finished if comm.rank == 0 else None)
    if comm.rank == 0:
        log.info(
            "chain %d: %s at iteration %d/%d, %d draws committed",
            chain,
            "finished" if done else "stopped",
            outcome.iteration,
            outcome.iterations,
            outcome.draws_committed,
        )
    return 0 if done else EXIT_STOPPED


def run_node_ranks(config_path: Path, node_index: int, *, stop: StopFlag) -> int:
    """Run this rank's part of node ``node_index``; all ranks of the node call it.

    Returns
    -------
    int
        0 when this rank's chain is finished (or was already), :data:`EXIT_STOPPED` when it
        stopped early on request (after committing).

    Raises
    ------
    ParallelError
        The MPI world differs from the plan, or ranks would share a GPU.
    """
    config = load_config(config_path)
    plan = make_plan(config)
    node = plan.node(node_index)
    world = world_comm(force_mpi=node.n_ranks > 1)
    slot, lrank = _my_slot(plan, node, world)
    choice = _checked_device(config, node, world, slot, lrank, stop)
    comm = _chain_comm(world, plan, slot, choice)
    try:
        return _run_slot(config, slot.chain, comm, stop)
    finally:
        _ignore_stop_signals()


def _ignore_stop_signals() -> None:
    """Once this rank's chain is done, ignore SIGUSR1, SIGTERM and SIGINT.

    The rank still waits for the node's other chains (MPI finalisation), and Python restores
    the default action (death) of the signals it handled as it shuts down; a warning signal
    landing then would kill the rank, and ``srun --kill-on-bad-exit`` the other chains' ranks
    with it, before they commit. Ignored signals stay ignored.
    """
    for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
