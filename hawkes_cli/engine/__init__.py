"""Likelihood engines: build the pair-sum backend of one rank and wrap it in a Likelihood.

Modules, imports flowing one way (each uses only those above it):

- :mod:`.row_sums`: an evaluation's per-row sums (numpy); :mod:`.base`: the tie structure, the
  pair-sum interfaces (:class:`PairBackend`, :class:`BoundedPairBackend`) and
  :class:`Likelihood` (numpy);
- :mod:`.reference`: the float64 numpy backend; :mod:`.grid`: the truncated trigger's host-side
  grid index (numpy);
- :mod:`.device`: the OpenCL device (chosen once per process and slot) and the events uploaded
  to it; :mod:`.launch`: the kernels' arguments as typed records, one per kernel signature;
  :mod:`.device_sums`: the per-row sums on the device;
- :mod:`.opencl`: the exact OpenCL backend; :mod:`.grid_upload`: the grid index on the device;
  :mod:`.calibration`: the truncated trigger's starting cut-off; :mod:`.rowcheck`: its check
  of its own device; :mod:`.choice`: ``engine.trigger: auto``, the exact or the truncated
  trigger by their timings; :mod:`.truncated`: the error-bounded backend, built on the same
  uploaded events;
- this module: :func:`build_likelihood`, which takes the engine settings as one typed record
  (the config's :class:`~hawkes_cli.config.EngineConfig`), chooses the device and builds the
  tie structure once and hands them down; :func:`make_likelihood`, its keyword form.
"""

from __future__ import annotations

import logging
import math
import os
from typing import TYPE_CHECKING

import numpy as np

from ..config import EngineConfig
from ..data import EventData
from ..device_slots import rank_slot
from ..errors import UsageError
from ..parallel import Comm, SerialComm, local_rank, partition_rows
from ..vocab import (
    BACKGROUNDS,
    DEFAULT_BACKGROUND,
    DEFAULT_ENGINE,
    DEFAULT_PRECISION,
    DEFAULT_TRIGGER,
    EDGE_CENSORED,
    EDGE_RENORMALIZED,
    EDGES,
    ENGINES,
    EXACT_TOLERANCE,
    LATTICE_FROM,
    TRIGGER_EXACT,
    TRIGGERS,
    tolerance_problem,
)
from .base import BoundedPairBackend, Evaluation, Likelihood, PairBackend
from .edge_mass import EdgeMass
from .region import Region
from .region_groups import EventGroups
from .times import TimeStructure

if TYPE_CHECKING:
    from .binned import BinnedBackground
    from .device import DeviceEvents
    from .device_sums import DeviceRowSums

log = logging.getLogger(__name__)

__all__ = [
    "ENGINES",
    "BoundedPairBackend",
    "Evaluation",
    "Likelihood",
    "PairBackend",
    "TimeStructure",
    "build_likelihood",
    "make_likelihood",
]


def build_likelihood(
    data: EventData,
    settings: EngineConfig,
    *,
    model: int,
    area: float,
    comm: Comm | None = None,
    window_end: float | None = None,
    balance: tuple[float, float] | None = None,
    region: Region | None = None,
    edge: str = EDGE_CENSORED,
    counties: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> Likelihood:
    """The log-likelihood of ``data`` for this rank of ``comm``, on the engine of ``settings``.

    Rows are split into ``comm.size`` contiguous blocks balanced by pair work
    (:meth:`TimeStructure.row_cost`); this rank evaluates its block and the partial sums are
    reduced in float64. The tie structure of the times is built once here and the OpenCL
    device chosen once (for this rank: :meth:`.device.Device.select` with the rank's slot on
    its node, :func:`hawkes_cli.parallel.device_slot`), then handed to the backend and the
    likelihood.

    Parameters
    ----------
    data
        Events sorted by time (see :mod:`hawkes_cli.data`).
    settings
        The engine section (:class:`~hawkes_cli.config.EngineConfig`): ``backend``
        (``"opencl"`` or ``"reference"``, numpy float64), ``precision`` of the OpenCL pair
        terms, OpenCL ``device`` spec (:func:`hawkes_cli.kernels.select_device`),
        ``tolerance`` in nats (0: the exact pair sum; ``T >=``
        :data:`~hawkes_cli.vocab.MIN_TOLERANCE` guarantees ``|ell~ - ell| <= T`` for every
        evaluation, :mod:`hawkes_cli.engine.truncated`; see :attr:`Likelihood.adapt_cutoff`
        for when the cut-off may change), ``trigger`` (with ``T > 0``: ``"exact"`` the pair
        sum; ``"truncated"`` and ``"auto"`` the truncated backend, which ``auto`` may switch
        to the exact pair sum at a chain's start, :mod:`.choice`) and ``background``
        (``"auto"``: once per distinct time, or on a time lattice above
        :data:`~hawkes_cli.vocab.LATTICE_FROM` distinct times; ``"lattice"``: on a time lattice
        by FFT, :mod:`.binned`; ``"pairs"``: the plain pair sum). The reference engine is
        always the exact float64 pair sum and ignores all but ``backend``.
    model
        1 or 2 (model 2 needs ``data.density``).
    area
        Study-region area in coordinate units squared (> 0).
    comm
        The chain's communicator (default: serial).
    window_end
        End ``T`` of the observation window (default: the last event time).
    balance
        ``(sigma_x, sigma_t)`` at which to estimate the truncated work per row when splitting
        rows over ranks (``tolerance > 0`` and ``comm.size > 1``); default: pair-term counts.
    region, edge, counties
        The study region of the edge correction (:mod:`.region`; None: the paper's likelihood),
        how it enters, ``"censored"`` or ``"renormalized"`` (DESIGN section 2b), and
        ``(triangles, tri_owner, codes)`` of the polygons the locations are redrawn in (masses
        planned per county, :mod:`.region_groups`; None: per event).

    Raises
    ------
    hawkes_cli.errors.UsageError
        An invalid choice or value.
    hawkes_cli.errors.DeviceError
        No usable OpenCL device (``backend="opencl"``).
    """
    comm = comm or SerialComm()
    _check(data, settings, model=model, area=area, window_end=window_end)
    ts = TimeStructure.from_times(data.time)
    rows = _rows(data, ts, settings, model=model, comm=comm, balance=balance)
    backend = _pair_backend(data, ts, settings, model=model, area=area, rows=rows, comm=comm)
    log.info("rank %d/%d: rows %d..%d of %d", comm.rank, comm.size, *rows, data.n)
    masses = _edge_masses(
        data, region, edge, model=model, rows=rows, counties=counties,
        events=getattr(backend, "events", None),
    )  # fmt: skip
    lattice = _lattice(data, ts, settings, area=area, rows=rows)
    return Likelihood(
        backend, data.time, window_end=window_end, comm=comm, times=ts, edge=masses,
        edge_kind=edge, lattice=lattice, row_sums=_row_sums(backend, lattice),
    )  # fmt: skip


def _row_sums(backend: object, lattice: BinnedBackground | None) -> DeviceRowSums | None:
    """The per-row sums on the backend's OpenCL device (:mod:`.device_sums`) where the
    background is on a time lattice; else None (numpy)."""
    events = getattr(backend, "events", None)
    if lattice is None or events is None:
        return None
    from .device_sums import DeviceRowSums

    return DeviceRowSums(events, lattice, getattr(backend, "resident", None))


def _edge_masses(
    data: EventData,
    region: Region | None,
    edge: str,
    *,
    model: int,
    rows: tuple[int, int],
    counties: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
    events: DeviceEvents | None = None,
) -> EdgeMass | None:
    """The trigger masses inside ``region`` the likelihood needs: this rank's rows'
    (``censored``: their compensator terms) or all N events' (``renormalized``: every source of
    this rank's rows), or None without a region; the per-county rasters read on the OpenCL
    device of ``events`` when given (:mod:`.region_groups_device`)."""
    if region is None:
        return None
    if edge not in EDGES:
        raise UsageError(f"edge must be one of {', '.join(EDGES)}, got {edge!r}")
    r0, r1 = (0, data.n) if edge == EDGE_RENORMALIZED else rows
    groups = None
    if counties is not None and EdgeMass.plans_per_county(region):
        triangles, owner, codes = counties
        groups = EventGroups.of_polygons(triangles, owner, np.asarray(codes)[r0:r1])
    return EdgeMass(
        region, data.x, data.y, rows=(r0, r1), density=data.density if model == 2 else None,
        groups=groups, events=events,
    )  # fmt: skip


def _lattice(
    data: EventData,
    ts: TimeStructure,
    settings: EngineConfig,
    *,
    area: float,
    rows: tuple[int, int],
) -> BinnedBackground | None:
    """The background on a time lattice for ``rows`` when :func:`uses_lattice`, else None."""
    if not uses_lattice(settings, ts):
        return None
    from .binned import BinnedBackground

    return BinnedBackground(data.time, area=area, rows=rows, times=ts)


def uses_lattice(settings: EngineConfig, times: TimeStructure) -> bool:
    """Whether the background is summed on a time lattice (:mod:`.binned`): ``lattice``, or
    ``auto`` with more than :data:`~hawkes_cli.vocab.LATTICE_FROM` distinct times (OpenCL;
    the reference engine always sums every pair)."""
    if settings.backend != "opencl":
        return False
    if settings.background == "lattice":
        return True
    return settings.background == "auto" and times.unique.size > LATTICE_FROM


def make_likelihood(
    data: EventData,
    *,
    model: int,
    area: float,
    engine: str = DEFAULT_ENGINE,
    precision: str = DEFAULT_PRECISION,
    comm: Comm | None = None,
    device: str | None = None,
    window_end: float | None = None,
    tolerance: float = EXACT_TOLERANCE,
    balance: tuple[float, float] | None = None,
    background: str = DEFAULT_BACKGROUND,
    region: Region | None = None,
    trigger: str = DEFAULT_TRIGGER,
    edge: str = EDGE_CENSORED,
) -> Likelihood:
    """:func:`build_likelihood` with the engine settings as keywords (``engine`` is the
    section's ``backend``), for ``hawkes-run loglik`` and tests; ``tolerance`` defaults to
    :data:`~hawkes_cli.vocab.EXACT_TOLERANCE` (the exact pair sum) here, where an MCMC run's
    config defaults to :data:`~hawkes_cli.vocab.DEFAULT_TOLERANCE`."""
    settings = EngineConfig(
        backend=engine,
        precision=precision,
        device=device,
        tolerance=tolerance,
        trigger=trigger,
        background=background,
    )
    return build_likelihood(
        data,
        settings,
        model=model,
        area=area,
        comm=comm,
        window_end=window_end,
        balance=balance,
        region=region,
        edge=edge,
    )


def _check(
    data: EventData,
    settings: EngineConfig,
    *,
    model: int,
    area: float,
    window_end: float | None,
) -> None:
    """Raise :class:`UsageError` for an invalid engine, area, window, model or engine value."""
    if settings.backend not in ENGINES:
        raise UsageError(f"engine must be one of {', '.join(ENGINES)}, got {settings.backend!r}")
    if not (math.isfinite(area) and area > 0):
        raise UsageError(f"area must be finite and > 0 (coordinate units squared), got {area!r}")
    if window_end is not None and not (math.isfinite(window_end) and window_end >= data.time[-1]):
        raise UsageError(
            f"window end {window_end!r} must be finite and >= the last event time "
            f"{data.time[-1]!r} of {data.source}"
        )
    if model == 2 and data.density is None:
        raise UsageError(
            f"model 2 needs a 'density' column in {data.source}; add it or use --model 1"
        )
    problem = tolerance_problem(settings.tolerance, "tolerance")
    if problem is not None:
        raise UsageError(problem)
    if settings.trigger not in TRIGGERS:
        raise UsageError(f"trigger must be one of {', '.join(TRIGGERS)}, got {settings.trigger!r}")
    if settings.background not in BACKGROUNDS:
        raise UsageError(
            f"background must be one of {', '.join(BACKGROUNDS)}, got {settings.background!r}"
        )


def _truncates(settings: EngineConfig) -> bool:
    """Whether ``settings`` choose the truncated trigger (OpenCL, ``tolerance > 0``, and
    ``trigger`` not ``exact``; ``auto`` may still switch to the exact pair sum, :mod:`.choice`)."""
    return (
        settings.backend == "opencl"
        and settings.tolerance > 0
        and settings.trigger != TRIGGER_EXACT
    )


def _rows(
    data: EventData,
    ts: TimeStructure,
    settings: EngineConfig,
    *,
    model: int,
    comm: Comm,
    balance: tuple[float, float] | None,
) -> tuple[int, int]:
    """This rank's rows ``(start, stop)``: contiguous blocks of about equal pair work (the
    truncated work at ``balance`` when given and there are several ranks)."""
    if _truncates(settings) and balance is not None and comm.size > 1:
        from .grid import truncated_row_cost

        cost = truncated_row_cost(
            data.time,
            data.x,
            data.y,
            data.density if model == 2 else None,
            sigma_x=balance[0],
            sigma_t=balance[1],
            tolerance=settings.tolerance,
            times=ts,
        )
        u = ts.unique.size
        cost = cost + u / ts.counts[ts.inverse] + 1.0  # background share, as row_cost
    else:
        cost = ts.row_cost()
    return partition_rows(cost, comm.size)[comm.rank]


def _pair_backend(
    data: EventData,
    ts: TimeStructure,
    settings: EngineConfig,
    *,
    model: int,
    area: float,
    rows: tuple[int, int],
    comm: Comm,
) -> PairBackend:
    """The pair-sum backend of ``settings`` for ``rows`` (the reference, or the exact or
    truncated OpenCL one on this rank's device, the events uploaded once)."""
    density = data.density if model == 2 else None
    if settings.backend == "reference":
        from .reference import ReferenceBackend

        return ReferenceBackend(
            data.time, data.x, data.y, density, model=model, area=area, rows=rows, times=ts
        )
    from .device import Device, DeviceEvents

    events = DeviceEvents(
        Device.select(settings.device, device_slot(comm, settings.device)),
        data.time,
        data.x,
        data.y,
        density,
        precision=settings.precision,
        times=ts,
    )
    if _truncates(settings):
        from .truncated import TruncatedBackend

        return TruncatedBackend(
            events,
            model=model,
            area=area,
            rows=rows,
            background=_device_background(settings.background),
            tolerance=settings.tolerance,
        )
    from .opencl import OpenCLBackend

    background = _device_background(settings.background)
    return OpenCLBackend(events, model=model, area=area, rows=rows, background=background)


def _device_background(background: str) -> str:
    """The OpenCL backend's own background form (a lattice one is summed on the host)."""
    return "auto" if background == "lattice" else background


def device_slot(comm: Comm, device: str | None = None) -> int:
    """The slot among the devices matching ``device`` (``engine.device``) that this process
    drives (the ``local_rank`` of :func:`hawkes_cli.kernels.select_device`).

    The slot pinned on ``comm`` when there is one (a Slurm node job's rank, mapped and checked
    by :func:`hawkes_cli.slurm.devices.choose_device`); otherwise the same mapping from this
    process's :func:`~hawkes_cli.parallel.local_rank`
    (:func:`hawkes_cli.device_slots.rank_slot`), so ranks of a local ``mpiexec`` take the GPUs
    of ``CUDA_VISIBLE_DEVICES`` / ``ROCR_VISIBLE_DEVICES`` in their order, as on Slurm.
    """
    pinned = getattr(comm, "pinned_local_rank", None)
    if pinned is not None:
        return int(pinned)
    return rank_slot(device, local_rank(comm), os.environ).slot
