"""The truncated trigger's starting cut-off: ``kappa`` for this data and model, from a probe.

:func:`calibrate` is :meth:`~hawkes_cli.engine.truncated.TruncatedBackend.calibrate`'s
algorithm: the grid index is built for the lattice point above the first guess
(:func:`~hawkes_cli.engine.grid.initial_kappa` plus :data:`LEAD`, rounded up by
:func:`~hawkes_cli.engine.grid.lattice_up`): cells are built for ``kappa`` rounded up to that
lattice, so every cut-off of one step shares them. A sample of the row blocks is evaluated on
it at that lattice point and 2 below (:data:`LADDER`), the realised bound ``sum_n log1p(xi0
omega_n / lambda~_n)`` of the sample is scaled to all rows and summed over ranks, and
``kappa`` is set where the log-linear interpolation of that curve reaches :data:`TARGET` of
the tolerance (per row beyond the top, :func:`solve_rows`). When that lands in the index's
step (or within :data:`STEP` below it, where it is raised to the step), the first evaluation
reuses the index, its row blocks and moments, so it costs little more than a steady one.
Otherwise one more probe on the index of the chosen cut-off (whose cells bound differently)
corrects it half way along the curve's local slope. The first full evaluation then usually
meets the tolerance without tightening.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..parallel import Comm
from .grid import KAPPA_FLOOR, KAPPA_MAX, LATTICE_STEPS, lattice_up

log = logging.getLogger(__name__)

#: Fraction of the tolerance the calibration aims at.
TARGET = 0.5
#: Probed cut-offs relative to the top rung (the lattice point of the ladder's index).
LADDER = np.array([-2.0, 0.0])
#: The ladder's index is for the first guess plus this (rounded up to the lattice).
LEAD = 0.5
#: A correction of the probe's ``kappa`` below this is not worth another index.
STEP = 0.25
#: ``|log(bound / target)|`` within which the correction goes half way.
NEAR = 3.0

#: ``(scale, xi0 omega_n / lambda~_n of the sampled rows)`` of one rank at one cut-off.
RowRatios = tuple[float, np.ndarray]


@dataclass(frozen=True, eq=False)
class ProbePoint:
    """Where the probe evaluates: the first evaluation's parameters, on this rank's rows.

    Attributes
    ----------
    sigma_x, sigma_t
        Lengthscales.
    base : (rows,) float64
        ``mu0 * B_n`` of this backend's rows.
    xi0
        Trigger weight.
    comm
        The chain's communicator (every rank probes its own rows; collective).
    """

    sigma_x: float
    sigma_t: float
    base: np.ndarray
    xi0: float
    comm: Comm


class Probing(Protocol):
    """What :func:`calibrate` needs of a truncated backend."""

    tolerance: float

    def first_guess(self) -> float:
        """:func:`~hawkes_cli.engine.grid.initial_kappa` for this backend's data."""
        ...

    def probe(
        self, kappas: np.ndarray, index_kappa: float, at: ProbePoint
    ) -> tuple[list[float], RowRatios]:
        """The realised bound (nats, all ranks; collective) at each of ``kappas`` on the grid
        index of ``index_kappa``, and this rank's :data:`RowRatios` at the last one."""
        ...


def solve_rows(parts: list[RowRatios], slope: float, target: float, kappa0: float) -> float:
    """The ``kappa`` where ``sum scale * sum_n log1p(r_n exp(-slope (kappa - kappa0)))`` over
    the ranks' ``parts`` (``(scale, r)`` per rank, probed at ``kappa0``) falls to ``target``,
    by bisection in [1, 740]. Per row, unlike a log-linear fit of the sum: where bounds are
    far above one per row (``log1p`` of a huge ratio falls by only ``slope`` per unit of
    kappa) this still lands near the answer."""

    def bound(kappa: float) -> float:
        f = math.exp(-slope * (kappa - kappa0)) if slope * (kappa - kappa0) < 700 else 0.0
        return sum(sc * float(np.sum(np.log1p(r * f))) for sc, r in parts)

    lo, hi = KAPPA_FLOOR, KAPPA_MAX
    if bound(lo) <= target:
        return lo
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if bound(mid) <= target else (mid, hi)
    return hi


def solve_ladder(ladder: np.ndarray, bounds: np.ndarray, target: float) -> float:
    """Smallest ``kappa`` where the log-linear interpolation of ``bounds`` (probed at the
    increasing ``ladder``) reaches ``target``; extrapolated with the end slopes (at least 1 per
    unit of kappa, the ``exp(-kappa)`` rule) beyond the ladder."""
    logb = np.log(np.maximum(bounds, 1e-300))
    goal = math.log(target)
    if logb[0] <= goal:  # already met at the bottom: extrapolate down (no lower than 1)
        slope = max((logb[0] - logb[1]) / (ladder[1] - ladder[0]), 1.0)
        return float(max(ladder[0] - (goal - logb[0]) / slope, KAPPA_FLOOR))
    for i in range(1, ladder.size):
        if logb[i] <= goal:
            frac = (logb[i - 1] - goal) / max(logb[i - 1] - logb[i], 1e-300)
            return float(ladder[i - 1] + frac * (ladder[i] - ladder[i - 1]))
    slope = max((logb[-2] - logb[-1]) / (ladder[-1] - ladder[-2]), 1.0)
    return float(min(ladder[-1] + (logb[-1] - goal) / slope, KAPPA_MAX))


def calibrate(backend: Probing, at: ProbePoint) -> float:
    """The starting ``kappa`` for ``backend`` at the first evaluation's parameters ``at``
    (collective; see the module docstring)."""
    target = TARGET * backend.tolerance
    # the ladder's index: cells for the lattice point above the guess (plus a lead), so
    # that the chosen cut-off usually shares it and the first evaluation reuses it; rungs
    # within [1, 740] and distinct (the interpolation divides by their spacing)
    top = lattice_up(min(max(backend.first_guess() + LEAD, 1.0 - LADDER[0]), 700.0))
    ladder = top + LADDER
    probed, ratios = backend.probe(ladder, top, at)
    bounds = np.array(probed)
    logb = np.log(np.maximum(bounds, 1e-300))
    slopes = np.maximum(-np.diff(logb) / np.diff(ladder), 1.0)
    if bounds[-1] > target:  # beyond the ladder: from the top rung's rows
        kappa = solve_rows(at.comm.allgather(ratios), float(slopes[-1]), target, top)
    else:
        kappa = solve_ladder(ladder, bounds, target)
    if lattice_up(kappa) < top and lattice_up(kappa + STEP) == top:
        # just below the ladder's cells: a little more kappa is cheaper than another index
        kappa = top * 2.0 ** (-1.0 / LATTICE_STEPS) * (1.0 + 1e-9)
    local, fixed = math.nan, kappa
    if lattice_up(kappa) != top:
        local, fixed = _correct(backend, at, kappa, float(slopes[_rung(ladder, kappa) - 1]), target)
    log.info(
        "truncation: probe bounds %s nats at kappa %s%s; kappa -> %.4g",
        np.array2string(bounds, precision=2),
        np.array2string(ladder, precision=3),
        ""
        if math.isnan(local)
        else f", {local:.3g} at kappa {kappa:.4g} (cells of {lattice_up(kappa):.4g})",
        fixed,
    )
    return fixed


def _rung(ladder: np.ndarray, kappa: float) -> int:
    """The upper end of the ladder's interval holding ``kappa`` (its ends beyond it)."""
    return int(np.clip(np.searchsorted(ladder, kappa), 1, ladder.size - 1))


def _correct(
    backend: Probing, at: ProbePoint, kappa: float, slope: float, target: float
) -> tuple[float, float]:
    """Probe once more on the index of ``kappa`` (another index than the ladder's, whose cells
    bound differently; kept for the first evaluation) and correct ``kappa`` along the ladder's
    ``slope`` there. Returns (the probed bound, the corrected ``kappa``)."""
    (local,), ratios = backend.probe(np.array([kappa]), kappa, at)
    fixed = solve_rows(at.comm.allgather(ratios), slope, target, kappa)
    if abs(math.log(max(local, 1e-300) / target)) <= NEAR:
        # near: the two probes sample different blocks and per-row bounds are
        # heavy-tailed, so go half way
        fixed = 0.5 * (kappa + fixed)
    if abs(fixed - kappa) > STEP:
        return local, float(np.clip(fixed, KAPPA_FLOOR, KAPPA_MAX))
    return local, kappa
