"""Synthetic events drawn from the model (DESIGN section 2) by its branching representation.

The generative process, in a rectangle ``[x0, x1] x [y0, y1]`` (coordinate units) and a time
window ``[0, t_end)`` (days):

1. Background ("immigrant") events: exactly ``n_background`` of them, times uniform on
   ``[0, t_end)``, locations uniform in the rectangle.
2. Every event, background or offspring, has ``Poisson(xi0)`` children. A child's time is its
   parent's time plus an ``Exponential`` delay with mean ``sigma_t`` (days); its location is the
   parent's plus a Gaussian displacement with standard deviation ``s`` in each coordinate, where
   ``s = sigma_x`` (model 1) or ``s = sigma_x / sqrt(D_parent)`` (model 2; ``D_parent`` is the
   density of the grid cell holding the parent).
3. A child with time ``>= t_end`` or outside the rectangle is discarded, and so has no children
   itself (the counts are recorded in ``attrs["n_discarded_time"]`` and
   ``attrs["n_discarded_space"]``). Discarding late children is exact (descendants of a late
   child would all be late too); discarding children outside the rectangle is an edge effect that
   thins clusters near the boundary.

This is the cluster form of the trigger part of the model's rate,
``xi0 * (1/sigma_t) exp(-dt/sigma_t) * phi2(dx; s_parent)``: each event's trigger kernel
integrates to ``xi0``, so ``xi0`` is the mean number of children and ``xi0 < 1`` is needed for a
finite (subcritical) process; the expected total is ``n_background / (1 - xi0)`` when few children
are discarded.

The model's background term is not a separate Poisson process but a temporal kernel smoother of
all events, ``mu0 * rho * sum_m phi1(t_n - t_m; tau_t)``; its integral over space and time is about
``mu0 * N``, while the trigger part integrates to about ``xi0 * N``. So ``mu0`` and ``tau_t`` do not
enter the generation here; a consistent choice for the "true" ``mu0`` is the expected background
fraction ``mu0 ~= 1 - xi0``, and ``tau_t`` should be comparable to the time scale on which the
background intensity varies (it is constant here, so large values fit best).
"""

from __future__ import annotations

import logging
import math
import operator
from dataclasses import dataclass

import numpy as np

from . import __version__
from .data import EventData
from .errors import UsageError
from .model import Params, check_model

log = logging.getLogger(__name__)

Bounds = tuple[float, float, float, float]
#: Default study rectangle ``(x0, x1, y0, y1)`` in coordinate units.
DEFAULT_BOUNDS: Bounds = (0.0, 10.0, 0.0, 10.0)
#: Largest number of grid cells: the cell index must fit a 5-digit FIPS code.
MAX_CELLS = 100_000
#: Largest seed: it is stored as an int64 attribute of the events file.
MAX_SEED = 2**63 - 1


def _check_bounds(bounds: object) -> Bounds:
    """Validate ``(x0, x1, y0, y1)`` with ``x0 < x1``, ``y0 < y1``, all finite."""
    try:
        x0, x1, y0, y1 = (float(b) for b in bounds)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise UsageError(f"bounds must be four numbers (x0, x1, y0, y1), got {bounds!r}") from None
    if not all(math.isfinite(b) for b in (x0, x1, y0, y1)) or not (x0 < x1 and y0 < y1):
        raise UsageError(
            f"bounds (x0, x1, y0, y1) = {bounds!r} must be finite with x0 < x1 and y0 < y1"
        )
    width, height = x1 - x0, y1 - y0
    if not (math.isfinite(width * height) and width * height > 0):
        raise UsageError(
            f"bounds (x0, x1, y0, y1) = {bounds!r} span {width:g} x {height:g}, an area that "
            "is not a finite number > 0 in float64; choose a smaller (or larger) rectangle"
        )
    return (x0, x1, y0, y1)


def _check_seed(seed: object) -> int:
    """A seed of :func:`numpy.random.default_rng` that the events file can store (int64)."""
    try:
        value = operator.index(seed)  # type: ignore[arg-type]
    except TypeError:
        raise UsageError(f"seed must be an integer, got {seed!r}") from None
    if not 0 <= value <= MAX_SEED:
        raise UsageError(f"seed must be an integer in [0, {MAX_SEED}], got {value}")
    return value


@dataclass(frozen=True, eq=False)
class DensityGrid:
    """Square-ish synthetic "counties": an ``ny x nx`` grid of cells covering a rectangle.

    Cell ``(iy, ix)`` covers ``[x0 + ix*w, x0 + (ix+1)*w] x [y0 + iy*h, y0 + (iy+1)*h]`` with
    ``w = (x1-x0)/nx``, ``h = (y1-y0)/ny``; its index is ``k = iy*nx + ix`` and its FIPS code the
    5-character string ``f"{k:05d}"``.

    Attributes
    ----------
    values : numpy.ndarray, shape (ny, nx), float64
        Population density of each cell, persons per square mile, finite and > 0 (read-only).
    bounds : tuple of float
        ``(x0, x1, y0, y1)``, the rectangle the grid covers (coordinate units).
    """

    values: np.ndarray
    bounds: Bounds = DEFAULT_BOUNDS

    def __post_init__(self) -> None:
        values = np.array(self.values, dtype=np.float64)
        if values.ndim != 2 or values.size == 0:
            raise UsageError(f"grid values must be a non-empty (ny, nx) array, got {values.shape}")
        if values.size > MAX_CELLS:
            raise UsageError(
                f"grid has {values.size} cells; at most {MAX_CELLS} fit 5-digit FIPS codes"
            )
        if not np.all(np.isfinite(values) & (values > 0)):
            raise UsageError("grid densities must be finite and > 0 (persons per square mile)")
        values.setflags(write=False)
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "bounds", _check_bounds(self.bounds))

    @property
    def nx(self) -> int:
        """Number of cells along x."""
        return int(self.values.shape[1])

    @property
    def ny(self) -> int:
        """Number of cells along y."""
        return int(self.values.shape[0])

    @classmethod
    def log_uniform(
        cls,
        bounds: Bounds = DEFAULT_BOUNDS,
        nx: int = 4,
        ny: int = 4,
        low: float = 1.0,
        high: float = 1000.0,
        seed: int = 0,
    ) -> DensityGrid:
        """A grid whose densities are drawn log-uniformly in ``[low, high]``.

        Parameters
        ----------
        bounds
            ``(x0, x1, y0, y1)`` in coordinate units.
        nx, ny
            Number of cells along x and y (``nx * ny <= 100000``).
        low, high
            Density range, persons per square mile, ``0 < low <= high``.
        seed
            Seed of :func:`numpy.random.default_rng` (independent of the event simulation's).
        """
        nx_i, ny_i = operator.index(nx), operator.index(ny)
        if nx_i < 1 or ny_i < 1:
            raise UsageError(f"grid size must be at least 1 x 1, got nx={nx}, ny={ny}")
        if nx_i * ny_i > MAX_CELLS:
            raise UsageError(
                f"grid {nx_i} x {ny_i} has {nx_i * ny_i} cells; at most {MAX_CELLS} fit 5-digit "
                "FIPS codes"
            )
        if not (math.isfinite(low) and math.isfinite(high) and 0 < low <= high):
            raise UsageError(f"grid densities need 0 < low <= high, got low={low}, high={high}")
        rng = np.random.default_rng(_check_seed(seed))
        values = np.exp(rng.uniform(math.log(low), math.log(high), size=(ny_i, nx_i)))
        return cls(values=values, bounds=bounds)

    def cell_index(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Cell index ``k = iy*nx + ix`` of each point.

        Parameters
        ----------
        x, y : array_like, shape (N,)
            Coordinates inside :attr:`bounds` (the closed rectangle).

        Returns
        -------
        numpy.ndarray, shape (N,), int64

        Raises
        ------
        ValueError
            If a point lies outside the rectangle.
        """
        x = np.asarray(x, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        x0, x1, y0, y1 = self.bounds
        outside = ~((x >= x0) & (x <= x1) & (y >= y0) & (y <= y1))
        if np.any(outside):
            i = int(np.flatnonzero(outside)[0])
            raise ValueError(f"point ({x[i]}, {y[i]}) lies outside the grid bounds {self.bounds}")
        ix = np.minimum(((x - x0) * (self.nx / (x1 - x0))).astype(np.int64), self.nx - 1)
        iy = np.minimum(((y - y0) * (self.ny / (y1 - y0))).astype(np.int64), self.ny - 1)
        return iy * self.nx + ix

    def fips_codes(self) -> np.ndarray:
        """FIPS code of every cell, in cell-index order: shape (nx*ny,), ``<U5``."""
        return np.array([f"{k:05d}" for k in range(self.values.size)], dtype="<U5")

    def lookup(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Density and FIPS code of the cell holding each point.

        Parameters
        ----------
        x, y : array_like, shape (N,)
            Coordinates inside :attr:`bounds`.

        Returns
        -------
        density : numpy.ndarray, shape (N,), float64
            Persons per square mile.
        fips : numpy.ndarray, shape (N,), ``<U5``
            Zero-padded cell codes.
        """
        k = self.cell_index(x, y)
        return self.values.ravel()[k], self.fips_codes()[k]

    def polygons(self) -> list[tuple[str, tuple[float, float, float, float]]]:
        """Every cell as ``(fips, (x0, x1, y0, y1))``, in cell-index order (coordinate units)."""
        x0, x1, y0, y1 = self.bounds
        xs = np.linspace(x0, x1, self.nx + 1)
        ys = np.linspace(y0, y1, self.ny + 1)
        xs[-1], ys[-1] = x1, y1
        return [
            (
                f"{iy * self.nx + ix:05d}",
                (float(xs[ix]), float(xs[ix + 1]), float(ys[iy]), float(ys[iy + 1])),
            )
            for iy in range(self.ny)
            for ix in range(self.nx)
        ]


def simulate(
    params: Params,
    *,
    model: int,
    n_background: int,
    t_end: float,
    bounds: Bounds | None = None,
    seed: int = 0,
    grid: DensityGrid | None = None,
    integer_days: bool = False,
    max_events: int = 2_000_000,
) -> EventData:
    """Draw events from the model by its branching (cluster) representation.

    See the module docstring for the process. ``mu0`` and ``tau_t`` are not used by the
    generation (the model's background is a kernel smoother of the events); they are recorded in
    ``attrs["true_params"]``, and ``mu0 ~= 1 - xi0`` (the expected background fraction) is the
    consistent choice.

    Parameters
    ----------
    params
        True parameters; ``xi0`` (mean children per event), ``sigma_x`` (coordinate units) and
        ``sigma_t`` (days) drive the simulation.
    model
        1 (spatial sd ``sigma_x``) or 2 (``sigma_x / sqrt(D_parent)``; needs ``grid``).
    n_background
        Exact number of background events (not Poisson-distributed), ``>= 1``.
    t_end
        End of the time window (days); all times lie in ``[0, t_end)``.
    bounds
        Study rectangle ``(x0, x1, y0, y1)``; default: the grid's bounds, else (0, 10, 0, 10).
        Must equal the grid's bounds when both are given.
    seed
        Seed of :func:`numpy.random.default_rng`; same seed and arguments, same events.
    grid
        Synthetic counties. Required for model 2; optional for model 1. With a grid the result has
        ``density`` and ``fips`` from the cell of each event; without one both are None.
    integer_days
        If true, the recorded times are floored to whole days after generation (the process itself
        runs in continuous time), so many events tie; a child recorded on its parent's day then
        contributes no trigger term (``t_m < t_n`` is strict), as with day-resolution data.
    max_events
        Cap on the number of kept events; exceeding it is an error (guards against explosive
        ``xi0 >= 1`` and runaway sizes).

    Returns
    -------
    EventData
        Events sorted by time (stable), with ``attrs``: ``true_params`` (dict), ``model``,
        ``area`` (rectangle area, coordinate units squared), ``bounds``, ``t_end``, ``seed``,
        ``n_background``, ``n_offspring``, ``n_discarded_time``, ``n_discarded_space``,
        ``integer_days``, ``time_unit`` ("day"), ``crs`` ("synthetic"), ``provenance`` and, with a
        grid, ``grid_nx``, ``grid_ny``.

    Raises
    ------
    UsageError
        Bad arguments, model 2 without a grid, or more than ``max_events`` events.
    """
    data, _ = simulate_with_parents(
        params,
        model=model,
        n_background=n_background,
        t_end=t_end,
        bounds=bounds,
        seed=seed,
        grid=grid,
        integer_days=integer_days,
        max_events=max_events,
    )
    return data


def simulate_with_parents(
    params: Params,
    *,
    model: int,
    n_background: int,
    t_end: float,
    bounds: Bounds | None = None,
    seed: int = 0,
    grid: DensityGrid | None = None,
    integer_days: bool = False,
    max_events: int = 2_000_000,
) -> tuple[EventData, np.ndarray]:
    """:func:`simulate`, also returning each event's parent (for tests and diagnostics).

    Returns
    -------
    data : EventData
        Exactly what :func:`simulate` returns for the same arguments.
    parent : numpy.ndarray, shape (N,), int64
        Index (into ``data``) of each event's parent, ``-1`` for background events. A parent
        always precedes its children (``parent[n] < n``).
    """
    n_bg, cap, t_end, box = _check_request(
        params, model, n_background, t_end, bounds, grid, max_events
    )
    rng = np.random.default_rng(_check_seed(seed))
    tree = _branch(params, model, n_bg, t_end, box, grid, cap, rng)
    order = np.argsort(tree.time, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    parent_raw = tree.parent[order]
    parent = np.where(parent_raw >= 0, rank[np.maximum(parent_raw, 0)], -1)
    time = tree.time[order]
    x_all = tree.x[order]
    y_all = tree.y[order]
    if integer_days:
        time = np.floor(time)
    density_all = fips_all = None
    if grid is not None:
        density_all, fips_all = grid.lookup(x_all, y_all)
    attrs = _attrs(params, model, box, t_end, seed, grid, n_bg, tree, integer_days)
    log.info(
        "simulated %d events (%d background, %d offspring; discarded %d late, %d outside)",
        time.size,
        n_bg,
        time.size - n_bg,
        tree.late,
        tree.outside,
    )
    data = EventData(time=time, x=x_all, y=y_all, density=density_all, fips=fips_all, attrs=attrs)
    return data, parent


def _check_request(
    params: Params,
    model: int,
    n_background: int,
    t_end: float,
    bounds: Bounds | None,
    grid: DensityGrid | None,
    max_events: int,
) -> tuple[int, int, float, Bounds]:
    """The checked arguments of :func:`simulate`: ``n_background``, ``max_events``, ``t_end``
    and the rectangle; UsageError for a bad one, a WARNING for an explosive ``xi0``."""
    check_model(model)
    if not isinstance(params, Params):
        raise UsageError(f"params must be a Params, got {type(params).__name__}")
    try:
        n_bg = operator.index(n_background)
        cap = operator.index(max_events)
    except TypeError:
        raise UsageError(
            f"n_background and max_events must be integers, got {n_background!r}, {max_events!r}"
        ) from None
    if n_bg < 1:
        raise UsageError(f"n_background must be >= 1, got {n_bg}")
    if cap < n_bg:
        raise UsageError(f"max_events={cap} is smaller than n_background={n_bg}")
    t_end = float(t_end)
    if not (math.isfinite(t_end) and t_end > 0):
        raise UsageError(f"t_end must be a finite number of days > 0, got {t_end}")
    if bounds is None:
        box = grid.bounds if grid is not None else DEFAULT_BOUNDS
    else:
        box = _check_bounds(bounds)
        if grid is not None and box != grid.bounds:
            raise UsageError(
                f"bounds {box} differ from the grid's bounds {grid.bounds}; leave bounds out to "
                f"use the grid's"
            )
    if model == 2 and grid is None:
        raise UsageError("model 2 needs a density grid (grid=DensityGrid...) for D_parent")
    if params.xi0 >= 1:
        log.warning(
            "xi0 = %g >= 1: the branching process is explosive; only t_end = %g and "
            "max_events = %d bound it",
            params.xi0,
            t_end,
            cap,
        )
    return n_bg, cap, t_end, box


@dataclass(frozen=True, eq=False)
class _Tree:
    """Every kept event in generation order: ``time``, ``x``, ``y`` and ``parent`` (index in
    this order, -1 for background), shape (N,) each; the children discarded as ``late`` or
    ``outside`` the rectangle, and the number of offspring ``generations``."""

    time: np.ndarray
    x: np.ndarray
    y: np.ndarray
    parent: np.ndarray
    late: int
    outside: int
    generations: int


def _branch(
    params: Params,
    model: int,
    n_bg: int,
    t_end: float,
    box: Bounds,
    grid: DensityGrid | None,
    cap: int,
    rng: np.random.Generator,
) -> _Tree:
    """The background events, then generation after generation of children until one has
    none (steps 1-3 of the module docstring); UsageError past ``cap`` events."""
    x0, x1, y0, y1 = box
    t = rng.uniform(0.0, t_end, n_bg)
    x = rng.uniform(x0, x1, n_bg)
    y = rng.uniform(y0, y1, n_bg)
    ts, xs, ys = [t], [x], [y]
    parents = [np.full(n_bg, -1, dtype=np.int64)]
    total = n_bg
    start = 0  # global index of the current generation's first event
    late = outside = 0
    generation = 0
    while t.size:
        if model == 2 and grid is not None:  # model 2 always has one (_check_request)
            density, _ = grid.lookup(x, y)
            scale = params.sigma_x / np.sqrt(density)
        else:
            scale = np.full(t.size, params.sigma_x)
        counts = rng.poisson(params.xi0, t.size)
        n_children = int(counts.sum())
        if n_children == 0:
            break
        src = np.repeat(np.arange(t.size), counts)
        ct = t[src] + rng.exponential(params.sigma_t, n_children)
        cx = x[src] + scale[src] * rng.standard_normal(n_children)
        cy = y[src] + scale[src] * rng.standard_normal(n_children)
        in_time = ct < t_end
        inside = (cx >= x0) & (cx <= x1) & (cy >= y0) & (cy <= y1)
        keep = in_time & inside
        late += int(np.count_nonzero(~in_time))
        outside += int(np.count_nonzero(in_time & ~inside))
        next_start = start + t.size
        t, x, y = ct[keep], cx[keep], cy[keep]
        total += t.size
        if total > cap:
            raise UsageError(
                f"the simulation passed max_events={cap} events in generation {generation + 1} "
                f"(xi0={params.xi0}{', explosive: use xi0 < 1' if params.xi0 >= 1 else ''}); "
                f"lower n_background, t_end or xi0, or raise max_events"
            )
        ts.append(t)
        xs.append(x)
        ys.append(y)
        parents.append(start + src[keep])
        start = next_start
        generation += 1
    return _Tree(
        time=np.concatenate(ts),
        x=np.concatenate(xs),
        y=np.concatenate(ys),
        parent=np.concatenate(parents),
        late=late,
        outside=outside,
        generations=generation,
    )


def _attrs(
    params: Params,
    model: int,
    box: Bounds,
    t_end: float,
    seed: int,
    grid: DensityGrid | None,
    n_bg: int,
    tree: _Tree,
    integer_days: bool,
) -> dict[str, object]:
    """The events' metadata (:func:`simulate` lists it)."""
    x0, x1, y0, y1 = box
    attrs: dict[str, object] = {
        "true_params": params.as_dict(),
        "model": model,
        "area": (x1 - x0) * (y1 - y0),
        "bounds": list(box),
        "t_end": t_end,
        "seed": seed,
        "n_background": n_bg,
        "n_offspring": int(tree.time.size - n_bg),
        "n_discarded_time": tree.late,
        "n_discarded_space": tree.outside,
        "n_generations": tree.generations,
        "integer_days": bool(integer_days),
        "time_unit": "day",
        "crs": "synthetic",
        "provenance": f"hawkes_cli.simulate (hawkes {__version__})",
    }
    if grid is not None:
        attrs["grid_nx"] = grid.nx
        attrs["grid_ny"] = grid.ny
    return attrs


__all__ = ["DEFAULT_BOUNDS", "DensityGrid", "simulate", "simulate_with_parents"]
