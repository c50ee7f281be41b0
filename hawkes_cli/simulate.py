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

On real counties (:class:`CountyMap`, e.g. the lower 48 states + DC) the background events are
placed as the paper places cases: each in a county drawn with probability proportional to its
population, uniformly inside its polygon; ``D_parent`` is the density of the parent's county; the
rectangle of step 3 is the land, the union of the county polygons. ``edge`` says what becomes of
a child displaced off it: ``"censored"`` drops it (as in step 3: it happened, unobserved, and has
no children), ``"renormalized"`` redraws its displacement until it lands (the Gaussian kernel
renormalised to the land). Every event records its county (``fips``, ``density``).
"""

from __future__ import annotations

import logging
import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import __version__
from .data import EventData
from .errors import EventsError, UsageError
from .geo import PolygonSampler
from .geo.polygons import checked_polygons, listing
from .model import Params, check_model
from .vocab import DATA_LIMIT, GEOGRAPHIES, SIMULATE_EDGES

log = logging.getLogger(__name__)

Bounds = tuple[float, float, float, float]
#: Default study rectangle ``(x0, x1, y0, y1)`` in coordinate units.
DEFAULT_BOUNDS: Bounds = (0.0, 10.0, 0.0, 10.0)
#: Largest number of grid cells: the cell index must fit a 5-digit FIPS code.
MAX_CELLS = 100_000
#: Largest seed: it is stored as an int64 attribute of the events file.
MAX_SEED = 2**63 - 1
#: Points in a study region: ``x``, ``y`` (coordinate units), cell or county; shape (N,) each.
_Placed = tuple[np.ndarray, np.ndarray, np.ndarray]
#: Rounds of redrawn displacements after which ``edge="renormalized"`` gives up.
MAX_REDRAW_ROUNDS = 1000
#: Points per shapely query in :meth:`CountyMap.locate` (bounds the memory of one query).
_LOCATE_CHUNK = 1 << 18


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
        """Density (persons per square mile) and FIPS code of the cell holding each point
        (``x``, ``y``: shape (N,), inside :attr:`bounds`): shapes (N,), float64 and ``<U5``."""
        return self.columns(self.cell_index(x, y))

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

    @property
    def density(self) -> np.ndarray:
        """Density of each cell in cell-index order: shape (nx*ny,), persons per square mile.
        With :meth:`background`, :meth:`locate`, :meth:`columns`: a study region (as CountyMap)."""
        return self.values.ravel()

    def background(self, n: int, rng: np.random.Generator) -> _Placed:
        """``n`` points uniform in the rectangle: ``x``, ``y`` and their cells, shape (n,) each."""
        x0, x1, y0, y1 = self.bounds
        x = rng.uniform(x0, x1, n)
        y = rng.uniform(y0, y1, n)
        return x, y, self.locate(x, y)

    def locate(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Cell of each point, ``-1`` outside the closed rectangle: shape (N,), int64."""
        x0, x1, y0, y1 = self.bounds
        inside = (x >= x0) & (x <= x1) & (y >= y0) & (y <= y1)
        cell = np.full(x.size, -1, dtype=np.int64)
        cell[inside] = self.cell_index(x[inside], y[inside])
        return cell

    def columns(self, cell: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``density`` and ``fips`` of events in these cells (shape (N,) each)."""
        return self.density[cell], self.fips_codes()[cell]


@dataclass(frozen=True, eq=False)
class CountyMap:
    """Real counties as the study region, whose land is the union of their polygons.

    :meth:`conus` builds the lower 48 states + DC; the constructor takes any counties. Arrays
    are read-only, one entry per county.

    Attributes
    ----------
    fips : numpy.ndarray, shape (K,), ``<U5``
        Unique 5-digit county codes.
    geoms : numpy.ndarray, shape (K,), object
        shapely (Multi)Polygons, coordinate units (invalid ones repaired), prepared.
    population, density : numpy.ndarray, shape (K,), float64
        Persons (``>= 0``, not all 0: the background's weights) and persons per square mile
        (``> 0``: the ``density`` column and model 2's ``D_parent``).
    crs : str
        Label of the coordinates, ``attrs["crs"]`` (``"lonlat"``: ``hawkes-run`` redraws
        locations in the default Census polygons).
    meta : Mapping[str, Any]
        Further attributes of the events file (``region``, ``counties``, ...).
    sampler : PolygonSampler
        The triangulated polygons, indexed as ``fips`` (derived).
    area : float
        The land's area, coordinate units squared: the sum of the polygons' (derived).
    """

    fips: np.ndarray
    geoms: np.ndarray
    population: np.ndarray
    density: np.ndarray
    crs: str = "lonlat"
    meta: Mapping[str, Any] = field(default_factory=dict)
    sampler: PolygonSampler = field(init=False, repr=False)
    area: float = field(init=False)
    _tree: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        import shapely

        fips = np.asarray(self.fips).astype(str)
        if fips.ndim != 1 or not np.all((np.char.str_len(fips) == 5) & np.char.isdigit(fips)):
            raise UsageError("county codes must be a 1-D array of 5-digit FIPS codes")
        geoms, _ = checked_polygons(list(fips), self.geoms)
        pop = np.array(self.population, dtype=np.float64)
        dens = np.array(self.density, dtype=np.float64)
        if pop.shape != fips.shape or dens.shape != fips.shape:
            raise UsageError(f"give one population and density per county ({fips.size})")
        if not (np.all(np.isfinite(pop) & (pop >= 0)) and pop.sum() > 0):
            raise UsageError("county populations must be finite, >= 0 and not all 0")
        if not np.all(np.isfinite(dens) & (dens > 0)):
            bad = list(fips[~(np.isfinite(dens) & (dens > 0))])
            raise EventsError(f"county densities must be finite and > 0: {listing(bad)}")
        sampler = PolygonSampler.from_polygons(list(fips), geoms, crs=self.crs)
        shapely.prepare(geoms)
        arrays = {"fips": fips.astype("<U5"), "geoms": geoms, "population": pop, "density": dens}
        for name, value in arrays.items():
            value.setflags(write=False)
            object.__setattr__(self, name, value)
        object.__setattr__(self, "meta", dict(self.meta))
        object.__setattr__(self, "sampler", sampler)
        object.__setattr__(self, "area", float(sampler.area().sum()))
        object.__setattr__(self, "_tree", shapely.STRtree(geoms))

    @classmethod
    def conus(cls, uniform: bool = False) -> CountyMap:
        """The lower 48 states + DC (region ``conus``): population (the background's weights;
        the counties' areas with ``uniform``: a background uniform on the land, as the model's)
        and density from the package's county table, the 2016 Census polygons (lon/lat
        degrees, EPSG:4269); ~10 s. EventsError when they cannot be read or do not match."""
        from . import counties as us

        table = us.load_county_table()
        layer = us.read_polygon_layer()
        rows = table.lookup(np.char.zfill(layer.keys.astype("<U5"), 5))
        region = table.region_mask("conus")
        keep = np.flatnonzero((rows >= 0) & region[rows])
        lost = np.setdiff1d(table.fips[region], table.fips[rows[keep]])
        if lost.size:
            raise EventsError(f"{layer.path}: no polygon for the counties {listing(list(lost))}")
        rows = rows[keep]
        meta = {
            "crs_definition": f"{us.CENSUS_CRS}: x = longitude, y = latitude, degrees",
            "region": "conus",
            "background_weights": "county area (uniform on the land)" if uniform else "population",
            "land_area_sq_mi": float(table.aland_m2[rows].sum() / us.SQ_METRES_PER_SQ_MILE),
            "counties": str(us.plotly_geo_file()),
            "county_table": table.source,
            "county_table_sha256": dict(table.provenance).get("table_sha256"),
        }
        geoms = np.asarray(layer.geoms, dtype=object)[keep]
        weights = table.area_deg2[rows] if uniform else table.population[rows]
        return cls(table.fips[rows], geoms, weights, table.density[rows], meta=meta)

    def background(self, n: int, rng: np.random.Generator) -> _Placed:
        """``n`` points, each in a county drawn with probability proportional to its
        population, uniform in it: ``x``, ``y`` and the county index, shape (n,) each."""
        county = rng.choice(self.fips.size, size=n, p=self.population / self.population.sum())
        x, y = self.sampler.sample(county, rng)
        return x, y, county

    def locate(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Index of the county holding each point, ``-1`` off the land: shape (N,), int64.

        Borders count as inside, a shared one for the lower index. An STR tree's bounding-box
        query, then exact tests polygon after polygon: ~1.5 s per million points.
        """
        import shapely

        out = np.full(x.size, -1, dtype=np.int64)
        for lo in range(0, x.size, _LOCATE_CHUNK):
            xs, ys = x[lo : lo + _LOCATE_CHUNK], y[lo : lo + _LOCATE_CHUNK]
            pt, poly = self._tree.query(shapely.points(xs, ys))
            order = np.argsort(poly, kind="stable")  # one polygon after another: cache friendly
            hit = shapely.intersects_xy(self.geoms[poly[order]], xs[pt[order]], ys[pt[order]])
            pt, poly = pt[order[hit]], poly[order[hit]]
            points, first = np.unique(pt, return_index=True)  # first: the lowest polygon
            out[lo + points] = poly[first]
        return out

    def columns(self, county: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``density`` and ``fips`` of events in these counties (shape (N,) each)."""
        return self.density[county], self.fips[county]


def simulate(params: Params, **options: Any) -> EventData:
    """Draw events from the model by its branching (cluster) representation.

    See the module docstring for the process. ``mu0`` and ``tau_t`` are not used by the
    generation (the model's background is a kernel smoother of the events); they are recorded in
    ``attrs["true_params"]``, and ``mu0 ~= 1 - xi0`` (the expected background fraction) is the
    consistent choice. The keyword arguments are those of :func:`simulate_with_parents`:

    Parameters
    ----------
    params
        True parameters; ``xi0`` (mean children per event), ``sigma_x`` (coordinate units) and
        ``sigma_t`` (days) drive the simulation.
    model : int
        1 (spatial sd ``sigma_x``) or 2 (``sigma_x / sqrt(D_parent)``; needs ``grid`` or
        ``counties``).
    n_background : int
        Exact number of background events (not Poisson-distributed), ``>= 1``.
    t_end : float
        End of the time window (days); all times lie in ``[0, t_end)``.
    bounds : tuple of float, optional
        Study rectangle ``(x0, x1, y0, y1)``; default: the grid's bounds, else (0, 10, 0, 10).
        Must equal the grid's bounds when both are given.
    seed : int
        Seed of :func:`numpy.random.default_rng`; same seed and arguments, same events.
    grid : DensityGrid, optional
        Synthetic counties. Required for model 2 in a rectangle; optional for model 1. With a grid
        the result has ``density`` and ``fips`` from the cell of each event; without one (and
        without ``counties``) both are None.
    integer_days : bool
        If true, the recorded times are floored to whole days after generation (the process itself
        runs in continuous time), so many events tie; a child recorded on its parent's day then
        contributes no trigger term (``t_m < t_n`` is strict), as with day-resolution data.
    max_events : int
        Cap on the number of kept events (default 2,000,000); exceeding it is an error (guards
        against explosive ``xi0 >= 1`` and runaway sizes).
    counties : CountyMap, optional
        Real counties as the study region instead of a rectangle (:meth:`CountyMap.conus`);
        excludes ``bounds`` and ``grid``. Every event gets its county's ``fips`` and ``density``.
    edge : str
        ``"censored"`` (default) or ``"renormalized"``: what becomes of a child displaced off
        the land (module docstring).

    Returns
    -------
    EventData
        Events sorted by time (stable), with ``attrs``: ``true_params`` (dict), ``model``,
        ``area`` (the region's, coordinate units squared), ``bounds`` (a rectangle's), ``t_end``,
        ``seed``, ``n_background``, ``n_offspring``, ``n_discarded_time``, ``n_discarded_space``,
        ``n_generations``, ``integer_days``, ``time_unit`` ("day"), ``crs`` ("synthetic", or the
        counties' label), ``provenance``; with a grid ``grid_nx``, ``grid_ny``; with counties
        their ``meta``; with counties or ``edge="renormalized"`` also ``geography``
        ("rectangle" or "us"), ``edge``, ``n_redrawn`` and ``n_redraws``.

    Raises
    ------
    UsageError
        Bad arguments, model 2 without a grid or counties, more than ``max_events`` events, or
        children still off the land after :data:`MAX_REDRAW_ROUNDS` redraws.
    """
    return simulate_with_parents(params, **options)[0]


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
    counties: CountyMap | None = None,
    edge: str = "censored",
) -> tuple[EventData, np.ndarray]:
    """:func:`simulate` (its parameters), also returning each event's parent.

    Returns
    -------
    data : EventData
        Exactly what :func:`simulate` returns for the same arguments.
    parent : numpy.ndarray, shape (N,), int64
        Index (into ``data``) of each event's parent, ``-1`` for background events; ``< n``.
    """
    n_bg, cap, t_end = _check_request(params, model, n_background, t_end, max_events, edge)
    space = _check_region(model, bounds, grid, counties)
    req = _Request(model, n_bg, cap, t_end, edge, space, grid, counties)
    rng = np.random.default_rng(_check_seed(seed))
    tree = _branch(params, req, rng)
    order = np.argsort(tree.time, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    parent_raw = tree.parent[order]
    parent = np.where(parent_raw >= 0, rank[np.maximum(parent_raw, 0)], -1)
    time = tree.time[order]
    if integer_days:
        time = np.floor(time)
    located = counties if counties is not None else grid
    density, fips = (None, None) if located is None else located.columns(tree.cell[order])
    attrs = _attrs(params, req, seed, tree, integer_days)
    msg = "simulated %d events (%d background, %d offspring); children %d late, %d outside "
    msg += "(dropped), %d redrawn (%d draws)"
    log.info(msg, time.size, req.n_bg, time.size - req.n_bg, *tree.counts.values())
    data = EventData(time, tree.x[order], tree.y[order], density, fips, attrs=attrs)
    return data, parent


@dataclass(frozen=True, eq=False)
class _Request:
    """The checked arguments; ``space``: the counties, else the grid, else a one-cell grid."""

    model: int
    n_bg: int
    cap: int
    t_end: float
    edge: str
    space: DensityGrid | CountyMap
    grid: DensityGrid | None
    counties: CountyMap | None


def _check_request(
    params: Params, model: int, n_background: int, t_end: float, max_events: int, edge: str
) -> tuple[int, int, float]:
    """The checked ``n_background``, ``max_events`` and ``t_end`` of :func:`simulate`; a
    UsageError for a bad argument, a WARNING for an explosive ``xi0``."""
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
        raise UsageError(f"n_background (--n-background) must be >= 1, got {n_bg}")
    if cap < n_bg:
        raise UsageError(f"max_events={cap} is smaller than n_background={n_bg}")
    t_end = float(t_end)
    if not (math.isfinite(t_end) and 0 < t_end <= DATA_LIMIT):
        raise UsageError(
            f"t_end (--t-end) must be a number of days > 0 and <= {DATA_LIMIT:g} (what an "
            f"events file may hold), got {t_end:g}"
        )
    if edge not in SIMULATE_EDGES:
        raise UsageError(f"edge must be one of {', '.join(SIMULATE_EDGES)}, got {edge!r}")
    if params.xi0 >= 1:
        msg = "xi0 = %g >= 1: the branching process is explosive; only t_end = %g and max_events"
        log.warning(msg + " = %d bound it", params.xi0, t_end, cap)
    return n_bg, cap, t_end


def _check_region(
    model: int, bounds: Bounds | None, grid: DensityGrid | None, counties: CountyMap | None
) -> DensityGrid | CountyMap:
    """The study region (:class:`_Request`); UsageError for a bad or contradictory one."""
    if counties is not None:
        if bounds is not None or grid is not None:
            raise UsageError("the counties are the study region: leave bounds and grid out")
        return counties
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
        raise UsageError("model 2 needs a density grid for D_parent: give grid= or counties=")
    return grid if grid is not None else DensityGrid(values=np.ones((1, 1)), bounds=box)


@dataclass(frozen=True, eq=False)
class _Tree:
    """Every kept event in generation order: ``time``, ``x``, ``y``, ``cell`` (grid cell or
    county) and ``parent`` (index in this order, -1 for background), shape (N,) each; the
    counts of children ``late`` or ``outside`` the region (dropped), those ``redrawn`` and the
    ``redraws`` in all (``edge="renormalized"``), and the number of offspring ``generations``."""

    time: np.ndarray
    x: np.ndarray
    y: np.ndarray
    cell: np.ndarray
    parent: np.ndarray
    counts: dict[str, int]
    generations: int


def _branch(params: Params, req: _Request, rng: np.random.Generator) -> _Tree:
    """The background events, then generation after generation of children until one has
    none (steps 1-3 of the module docstring); UsageError past ``req.cap`` events."""
    space = req.space
    t = rng.uniform(0.0, req.t_end, req.n_bg)
    x, y, cell = space.background(req.n_bg, rng)
    kept: dict[str, list[np.ndarray]] = {"t": [t], "x": [x], "y": [y], "cell": [cell]}
    parents = [np.full(req.n_bg, -1, dtype=np.int64)]
    total = req.n_bg
    start = 0  # global index of the current generation's first event
    n = dict.fromkeys(("late", "outside", "redrawn", "redraws"), 0)
    generation = 0
    while t.size:
        if req.model == 2:
            scale = params.sigma_x / np.sqrt(space.density[cell])
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
        in_time = np.flatnonzero(ct < req.t_end)
        n["late"] += n_children - in_time.size
        src, ct, cx, cy = src[in_time], ct[in_time], cx[in_time], cy[in_time]
        ccell = space.locate(cx, cy)
        if req.edge == "renormalized":
            first, draws = _redraw(space, (x[src], y[src], scale[src]), (cx, cy, ccell), rng)
            n["redrawn"], n["redraws"] = n["redrawn"] + first, n["redraws"] + draws
        keep = ccell >= 0
        n["outside"] += int(np.count_nonzero(~keep))
        next_start = start + t.size
        t, x, y, cell = ct[keep], cx[keep], cy[keep], ccell[keep]
        total += t.size
        if total > req.cap:
            raise UsageError(
                f"the simulation passed max_events={req.cap} events in generation "
                f"{generation + 1} (xi0={params.xi0}"
                f"{', explosive: use xi0 < 1' if params.xi0 >= 1 else ''}); "
                f"lower n_background, t_end or xi0, or raise max_events"
            )
        for key, value in (("t", t), ("x", x), ("y", y), ("cell", cell)):
            kept[key].append(value)
        parents.append(start + src[keep])
        start = next_start
        generation += 1
    columns = (np.concatenate(kept[k]) for k in ("t", "x", "y", "cell"))
    return _Tree(*columns, parent=np.concatenate(parents), counts=n, generations=generation)


def _redraw(
    space: DensityGrid | CountyMap, parents: _Placed, children: _Placed, rng: np.random.Generator
) -> tuple[int, int]:
    """Redraw the displacement of each child off the land (cell ``< 0``) until it lands (the
    kernel renormalised to the land). ``parents``: ``x``, ``y`` and the sd; ``children``: ``x``,
    ``y``, cell, updated in place; shape (M,) each. Returns the children redrawn and the draws;
    UsageError when some are still off the land after :data:`MAX_REDRAW_ROUNDS` rounds."""
    (px, py, scale), (cx, cy, cell) = parents, children
    redo = np.flatnonzero(cell < 0)
    first, draws = redo.size, 0
    for _ in range(MAX_REDRAW_ROUNDS):
        if redo.size == 0:
            return first, draws
        draws += redo.size
        cx[redo] = px[redo] + scale[redo] * rng.standard_normal(redo.size)
        cy[redo] = py[redo] + scale[redo] * rng.standard_normal(redo.size)
        cell[redo] = space.locate(cx[redo], cy[redo])
        redo = redo[cell[redo] < 0]
    raise UsageError(
        f"edge 'renormalized': {redo.size} children are still off the land after "
        f"{MAX_REDRAW_ROUNDS} redraws (sd up to {scale[redo].max():g} coordinate units): the "
        "kernel is too wide for the land; lower sigma_x, or use edge 'censored'"
    )


def _attrs(
    params: Params, req: _Request, seed: int, tree: _Tree, integer_days: bool
) -> dict[str, object]:
    """The events' metadata (:func:`simulate` lists it; a rectangle's keys in their old order)."""
    attrs: dict[str, object] = {"true_params": params.as_dict(), "model": req.model}
    if req.counties is None:
        x0, x1, y0, y1 = req.space.bounds
        attrs.update(area=(x1 - x0) * (y1 - y0), bounds=list(req.space.bounds))
    else:
        attrs["area"] = req.counties.area
    attrs.update(
        {
            "t_end": req.t_end,
            "seed": seed,
            "n_background": req.n_bg,
            "n_offspring": int(tree.time.size - req.n_bg),
            "n_discarded_time": tree.counts["late"],
            "n_discarded_space": tree.counts["outside"],
            "n_generations": tree.generations,
            "integer_days": bool(integer_days),
            "time_unit": "day",
            "crs": "synthetic" if req.counties is None else req.counties.crs,
            "provenance": f"hawkes_cli.simulate (hawkes {__version__})",
        }
    )
    if req.grid is not None:
        attrs.update(grid_nx=req.grid.nx, grid_ny=req.grid.ny)
    if req.counties is not None:
        attrs.update({k: v for k, v in req.counties.meta.items() if k not in attrs})
    if req.counties is not None or req.edge != "censored":
        attrs.update(geography="rectangle" if req.counties is None else "us", edge=req.edge)
        attrs.update(n_redrawn=tree.counts["redrawn"], n_redraws=tree.counts["redraws"])
    return attrs


__all__ = ["DEFAULT_BOUNDS", "GEOGRAPHIES", "SIMULATE_EDGES", "CountyMap", "DensityGrid"]
__all__ += ["simulate", "simulate_with_parents"]
