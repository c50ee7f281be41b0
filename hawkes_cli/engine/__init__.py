"""Likelihood engines: build the pair-sum backend of one rank and wrap it in a Likelihood.

Modules, imports flowing one way (each uses only those above it):

- :mod:`.base`: the tie structure, the pair-sum interfaces (:class:`PairBackend`,
  :class:`BoundedPairBackend`) and :class:`Likelihood` (numpy);
- :mod:`.reference`: the float64 numpy backend; :mod:`.grid`: the truncated trigger's host-side
  grid index (numpy);
- :mod:`.device`: the OpenCL device and the events uploaded to it;
- :mod:`.opencl`: the exact OpenCL backend; :mod:`.truncated`: the error-bounded one, built on
  the same uploaded events;
- this module: :func:`make_likelihood`, which chooses the device and builds the tie structure
  once and hands them down.
"""

from __future__ import annotations

import logging
import math

from ..data import EventData
from ..errors import UsageError
from ..parallel import Comm, SerialComm, local_rank, partition_rows
from ..vocab import (
    BACKGROUNDS,
    DEFAULT_BACKGROUND,
    DEFAULT_ENGINE,
    DEFAULT_PRECISION,
    ENGINES,
    EXACT_TOLERANCE,
    tolerance_problem,
)
from .base import BoundedPairBackend, Evaluation, Likelihood, PairBackend, TimeStructure

log = logging.getLogger(__name__)

__all__ = [
    "ENGINES",
    "BoundedPairBackend",
    "Evaluation",
    "Likelihood",
    "PairBackend",
    "TimeStructure",
    "make_likelihood",
]


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
) -> Likelihood:
    """The log-likelihood of ``data`` for this rank of ``comm``.

    Rows are split into ``comm.size`` contiguous blocks balanced by pair work
    (:meth:`TimeStructure.row_cost`); this rank evaluates its block and the partial sums are
    reduced in float64. The tie structure of the times is built once here and the OpenCL
    device chosen once (for this rank), then handed to the backend and the likelihood.

    Parameters
    ----------
    data
        Events sorted by time (see :mod:`hawkes_cli.data`).
    model
        1 or 2 (model 2 needs ``data.density``).
    area
        Study-region area in coordinate units squared (> 0).
    engine
        One of :data:`hawkes_cli.vocab.ENGINES`: ``"opencl"`` (default) or ``"reference"``
        (numpy float64).
    precision
        One of :data:`hawkes_cli.vocab.PRECISIONS`, ``"float32"`` (default) or ``"float64"``
        (OpenCL only; the reference is always float64).
    comm
        The chain's communicator (default: serial).
    device
        OpenCL device spec (see :func:`hawkes_cli.kernels.select_device`).
    window_end
        End ``T`` of the observation window (default: the last event time).
    tolerance
        Bound on the log-likelihood error from truncating the trigger, in nats (absolute;
        :mod:`hawkes_cli.engine.truncated`): :data:`~hawkes_cli.vocab.EXACT_TOLERANCE` (0,
        the default here, as for ``hawkes-run loglik``) is the exact pair sum; ``T >=``
        :data:`~hawkes_cli.vocab.MIN_TOLERANCE` guarantees ``|ell~ - ell| <= T`` for every
        evaluation (OpenCL only; the reference engine is always exact and ignores it; see
        :attr:`Likelihood.adapt_cutoff` for when the cut-off may change). MCMC runs pass
        their config's ``engine.tolerance``, whose default is
        :data:`~hawkes_cli.vocab.DEFAULT_TOLERANCE`.
    balance
        ``(sigma_x, sigma_t)`` at which to estimate the truncated work per row when splitting
        rows over ranks (``tolerance > 0`` and ``comm.size > 1``; e.g. the initial values);
        default: the exact pair-term counts.
    background
        ``"auto"`` (default; once per distinct time: the day-lattice form) or ``"pairs"``
        (force the plain pair sum over all events); OpenCL only, the reference is always the
        pair sum.

    Raises
    ------
    hawkes_cli.errors.UsageError
        An invalid choice or value.
    hawkes_cli.errors.DeviceError
        No usable OpenCL device (``engine="opencl"``).
    """
    comm = comm or SerialComm()
    if engine not in ENGINES:
        raise UsageError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
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
    problem = tolerance_problem(tolerance, "tolerance")
    if problem is not None:
        raise UsageError(problem)
    if background not in BACKGROUNDS:
        raise UsageError(f"background must be one of {', '.join(BACKGROUNDS)}, got {background!r}")
    ts = TimeStructure.from_times(data.time)
    density = data.density if model == 2 else None
    truncate = engine == "opencl" and tolerance > 0
    if truncate and balance is not None and comm.size > 1:
        from .grid import truncated_row_cost

        cost = truncated_row_cost(
            data.time,
            data.x,
            data.y,
            density,
            sigma_x=balance[0],
            sigma_t=balance[1],
            tolerance=tolerance,
            times=ts,
        )
        u = ts.unique.size
        cost = cost + u / ts.counts[ts.inverse] + 1.0  # background share, as row_cost
    else:
        cost = ts.row_cost()
    rows = partition_rows(cost, comm.size)[comm.rank]
    backend: PairBackend
    if engine == "reference":
        from .reference import ReferenceBackend

        backend = ReferenceBackend(
            data.time, data.x, data.y, density, model=model, area=area, rows=rows, times=ts
        )
    else:
        from .device import Device, DeviceEvents

        events = DeviceEvents(
            Device.select(device, local_rank(comm)),
            data.time,
            data.x,
            data.y,
            density,
            precision=precision,
            times=ts,
        )
        if truncate:
            from .truncated import TruncatedBackend

            backend = TruncatedBackend(
                events,
                model=model,
                area=area,
                rows=rows,
                background=background,
                tolerance=tolerance,
            )
        else:
            from .opencl import OpenCLBackend

            backend = OpenCLBackend(
                events, model=model, area=area, rows=rows, background=background
            )
    log.info("rank %d/%d: rows %d..%d of %d", comm.rank, comm.size, *rows, data.n)
    return Likelihood(backend, data.time, window_end=window_end, comm=comm, times=ts)
