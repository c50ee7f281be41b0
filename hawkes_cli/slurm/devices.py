"""Which device each rank of a node drives, and the refusal to put two ranks on one GPU.

Rank ``r`` of a node takes the ``r``-th GPU the job may see (``CUDA_VISIBLE_DEVICES``,
``ROCR_VISIBLE_DEVICES`` or ``GPU_DEVICE_ORDINAL``, see :func:`device_slot`); every rank's
:class:`DeviceChoice` is gathered and checked by :func:`check_devices` before any chain starts.
The device is chosen once, by the engine (:meth:`hawkes_cli.engine.device.Device.select`), and
the rank's likelihood is handed the same one.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..config import Config
from ..device_slots import rank_slot
from ..errors import ParallelError


@dataclass(frozen=True)
class DeviceChoice:
    """The device one rank of a node drives (gathered on every rank for the checks).

    Attributes
    ----------
    rank, chain, chain_rank, local_rank
        Where the rank sits.
    ident
        OpenCL ``P:D`` (``"reference"`` for the numpy engine).
    name, kind
        Device name and kind (``gpu``, ``cpu``, ``accelerator``, ``other``).
    var, visible_id
        As in :class:`DeviceSlot`.
    slot
        Index handed to the engine's device selection.
    host
        Host name.
    """

    rank: int
    chain: int
    chain_rank: int
    local_rank: int
    ident: str
    name: str
    kind: str
    var: str | None = None
    visible_id: str | None = None
    slot: int = 0
    host: str = ""

    def describe(self) -> str:
        """One line for the log."""
        where = f" ({self.var} id {self.visible_id})" if self.visible_id is not None else ""
        return (
            f"rank {self.rank} (chain {self.chain} rank {self.chain_rank}, local rank "
            f"{self.local_rank}) on {self.host}: device {self.ident} {self.name!r} "
            f"[{self.kind}]{where}"
        )


def check_devices(choices: Sequence[DeviceChoice]) -> list[str]:
    """Refuse two ranks of a node on one GPU; say where ranks share a CPU device.

    Parameters
    ----------
    choices
        Every rank's choice, in rank order (the same list on every rank).

    Returns
    -------
    list of str
        Notes on shared CPU devices (allowed: PoCL runs each rank on host threads).

    Raises
    ------
    ParallelError
        Two ranks would drive one GPU (same OpenCL device, or the same visible GPU id).
    """
    notes: list[str] = []
    by_device: dict[tuple[str, str], list[DeviceChoice]] = {}
    by_visible: dict[tuple[str, str], list[DeviceChoice]] = {}
    for c in choices:
        by_device.setdefault((c.host, c.ident), []).append(c)
        if c.kind != "cpu" and c.visible_id is not None:  # the reference engine's is "cpu"
            by_visible.setdefault((c.host, c.visible_id), []).append(c)
    for (host, ident), group in by_device.items():
        if len(group) < 2:
            continue
        ranks = ", ".join(f"{c.rank} (chain {c.chain})" for c in group)
        first = group[0]
        if first.kind == "cpu":
            notes.append(
                f"ranks {ranks} share the CPU device {ident} {first.name!r} on {host}; "
                "allowed for a CPU device (they split its cores)"
            )
            continue
        raise ParallelError(
            _sharing_message(f"{first.kind.upper()} {ident} {first.name!r}", ranks, host, group)
        )
    for (host, vid), group in by_visible.items():
        if len(group) > 1:
            ranks = ", ".join(f"{c.rank} (chain {c.chain})" for c in group)
            raise ParallelError(_sharing_message(f"GPU {group[0].var}={vid}", ranks, host, group))
    return notes


def _sharing_message(what: str, ranks: str, host: str, group: Sequence[DeviceChoice]) -> str:
    vis = group[0].var
    seen = f"; the job may see {vis}={os.environ.get(vis, '')}" if vis else ""
    return (
        f"ranks {ranks} on {host} would share {what}{seen}. Each rank needs its own GPU: "
        "request as many GPUs as ranks (--gres=gpu:N, see `hawkes-run plan`), leave "
        "engine.device null or 'gpu' (a fixed 'P:D' puts every rank on one device), or use "
        "a CPU OpenCL device"
    )


def choose_device(
    config: Config,
    *,
    rank: int,
    chain: int,
    chain_rank: int,
    local_rank: int,
    env: Mapping[str, str],
) -> DeviceChoice:
    """This rank's device: by local rank among the devices it may see (see :func:`device_slot`).

    The engine's one chooser makes the choice (:meth:`hawkes_cli.engine.device.Device.select`,
    once per process, spec and slot); the rank pins ``slot`` on its chain's communicator, so
    the likelihood asks for the same spec and slot and drives this very device (the one
    :func:`check_devices` checked).
    """
    host = socket.gethostname()
    if config.engine.backend != "opencl":
        return DeviceChoice(
            rank,
            chain,
            chain_rank,
            local_rank,
            "reference",
            "numpy float64",
            "cpu",
            slot=local_rank,
            host=host,
        )
    from ..engine.device import Device

    ds = rank_slot(config.engine.device, local_rank, env)
    info = Device.select(config.engine.device, ds.slot).info
    return DeviceChoice(
        rank,
        chain,
        chain_rank,
        local_rank,
        info.ident,
        info.name,
        info.kind,
        ds.var,
        ds.visible_id,
        ds.slot,
        host,
    )
