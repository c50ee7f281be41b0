"""Which of the matching OpenCL devices a process drives: rank ``r`` of a node takes the
``r``-th GPU the job may see (``CUDA_VISIBLE_DEVICES``, ``ROCR_VISIBLE_DEVICES`` or
``GPU_DEVICE_ORDINAL``). One mapping for a Slurm node job's ranks
(:func:`hawkes_cli.slurm.devices.choose_device`) and for every other process (``mpiexec`` on
one machine, a single run: :func:`hawkes_cli.engine.build_likelihood`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

VISIBLE_VARS: tuple[str, ...] = (
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
)
"""Environment variables that restrict the GPUs a process may use, in order of precedence."""


def visible_gpus(env: Mapping[str, str]) -> tuple[str, tuple[str, ...]] | None:
    """The GPUs the job may use, from the first of :data:`VISIBLE_VARS` that is set.

    Returns
    -------
    (variable, ids) or None
        ``ids`` in the variable's order (an empty tuple: no GPU allowed); ``None`` when no
        variable is set (every device may be used).
    """
    for var in VISIBLE_VARS:
        value = env.get(var)
        if value is not None:
            return var, tuple(p.strip() for p in value.split(",") if p.strip())
    return None


@dataclass(frozen=True)
class DeviceSlot:
    """Which of the matching OpenCL devices a rank takes.

    Attributes
    ----------
    local_rank
        The rank on the node.
    slot
        Index among the devices matching ``engine.device`` (for
        :func:`hawkes_cli.kernels.select_device`, which takes ``slot % count``).
    var
        The variable that restricted the visible GPUs, or ``None``.
    visible_id
        The GPU's id in that variable (the physical GPU), or ``None``.
    """

    local_rank: int
    slot: int
    var: str | None = None
    visible_id: str | None = None


def device_slot(local_rank: int, env: Mapping[str, str], n_gpus: int | None = None) -> DeviceSlot:
    """The device slot of the rank with ``local_rank`` on its node.

    Rank ``r`` takes the ``r``-th GPU the job may see. Drivers that honour
    ``CUDA_VISIBLE_DEVICES`` (or ROCm's variables) list only those GPUs, so the slot is ``r``;
    when the OpenCL runtime lists more GPUs (``n_gpus``) than the variable allows, it ignored
    the variable and the slot is the ``r``-th listed id instead.

    Parameters
    ----------
    local_rank
        Rank on the node (>= 0).
    env
        The process environment.
    n_gpus
        GPUs the OpenCL runtime lists (None: unknown).
    """
    vis = visible_gpus(env)
    if vis is None or not vis[1]:
        return DeviceSlot(local_rank, local_rank, vis[0] if vis else None, None)
    var, ids = vis
    visible_id = ids[local_rank] if local_rank < len(ids) else None
    slot = local_rank
    if (
        n_gpus is not None
        and n_gpus > len(ids)
        and visible_id is not None
        and visible_id.isdigit()
        and int(visible_id) < n_gpus
    ):
        slot = int(visible_id)
    return DeviceSlot(local_rank, slot, var, visible_id)


def rank_slot(device: str | None, local_rank: int, env: Mapping[str, str]) -> DeviceSlot:
    """:func:`device_slot` of the rank with ``local_rank`` on its node for ``engine.device``
    ``device`` (None: ``$HAWKES_OPENCL_DEVICE``, else automatic): the GPUs OpenCL lists are
    counted when the choice is among GPUs (automatic or ``"gpu"``), so a runtime that ignores
    ``CUDA_VISIBLE_DEVICES`` still gives rank ``r`` the ``r``-th visible GPU. The one mapping
    of a Slurm node job's ranks (:func:`hawkes_cli.slurm.devices.choose_device`) and of every
    other process (:func:`hawkes_cli.engine.device_slot`: ``mpiexec`` on one machine, a single
    run).
    """
    from .kernels import DEVICE_ENV, list_devices

    spec = device if device is not None else env.get(DEVICE_ENV)
    n_gpus = None
    if spec in (None, "", "gpu"):
        n_gpus = sum(1 for d in list_devices() if d.kind == "gpu") or None
    return device_slot(local_rank, env, n_gpus)
