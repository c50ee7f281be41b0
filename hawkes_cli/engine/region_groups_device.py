"""Per-county edge masses (:mod:`.region_groups`) read on the OpenCL device.

When locations are redrawn inside their counties, :class:`~.region_groups.GroupedMass` plans
the reads once per set of county levels: every county near the boundary belongs to one tile,
whose raster covers the county's box. The plan and its rasters stay fixed while the chain runs,
so :class:`DeviceGroupedMass` puts them and each row's tile on the device once, and every later
evaluation at that lattice point is one kernel (``raster_mass``, ``kernels/hawkes.cl``) over
the rows, reading the locations the events' buffers already hold (after a device draw they
never crossed to the host and back for this). Only the masses and error scales come back, and
the few rows of counties wider than a tile (island chains) take the host's per-event path.
Model 1 reads one level at a lattice point; model 2's counties (a lengthscale each) read the
two levels around their own lengthscale, weighted per row, unless (as
:class:`~.edge_mass.EdgeMass` plans them) their lengthscales are snapped to the lattice.
:meth:`DeviceGroupedMass.mass_error_rows` reads several lattice points for only the rows that
can lose mass at one of them (those of a tile, of a county wider than a tile or on the per-event
path in one of their plans: fixed while the chain runs, so kept on the device), so that a
redraw brings back and sorts through those rows, not all.

The kernel is the host's read (:meth:`~.raster.Field.read`) in float64 from the same float32
rasters, behind the same distance screen: the masses agree with
:meth:`~.region_groups.GroupedMass.mass_error` to float64 rounding
(``tests/test_device_stages.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import profile
from .device import DeviceEvents, item_range
from .launch import RasterMassArgs, TakeRowsArgs, kernel
from .region import FIELD_ERROR
from .region_groups import GroupedMass, TilePlan

#: Lattice points' rasters kept on the device by default: two around a chain's sigma_x and a
#: third when it crosses one (the lower 48 states at 0.046 degrees: 11 million cells, 130 MB a
#: level). :class:`~.edge_mass.EdgeMass` asks for one more than its stencil's points (model 1's
#: cubic: five; model 2's, up to five points: six), or every redraw would upload them all again.
LEVELS_KEPT = 3
#: Sets of rows that can lose mass (one per set of lattice points read together) kept on the
#: device.
PICKS_KEPT = 8


@dataclass(frozen=True)
class _Level:
    """One plan's rasters on the device: each row's tile (int32, -1: none) and weight of the
    upper raster (float64; one zero when no tile has one), each tile's ``x0, y0, h, reach``
    (float64), ``nx, ny, offset`` (int64) and upper raster's tile (int32, -1: none), the
    rasters' values (float32, three layers each); and on the host the plan, each row's tile
    (int32), whose wide counties' rows change with every draw, and whether each row can lose
    mass at all (bool: a tile's, a wide county's or a per-event row)."""

    tile: Any
    frac: Any
    geom: Any
    shape: Any
    upper: Any
    values: Any
    plan: TilePlan
    row_tile: np.ndarray
    candidate: np.ndarray


@dataclass(frozen=True)
class DeviceMasses:
    """The masses at several lattice points of the rows that can lose mass at one of them,
    left on the device (:meth:`DeviceGroupedMass.masses_on_device`).

    Attributes
    ----------
    rows : (k,) int64
        The rows (indices from the planner's first row), on the host.
    pick
        The same rows on the device (int32).
    mass
        Their masses, float64, one block of ``k`` per point (``points`` blocks); 1 for the
        rows of ``host_rows`` (field error exactly where the mass is below 1).
    points
        The lattice points (1 to 5).
    host_rows : (h,) int64
        The rows the host computed at some point: their masses count in ``host_at`` only.
    host_at : list of ((h,) float64, (h,) float64)
        Their (mass, error scale) at each point.
    """

    rows: np.ndarray
    pick: Any
    mass: Any
    points: int
    host_rows: np.ndarray
    host_at: list[tuple[np.ndarray, np.ndarray]]


class DeviceGroupedMass:
    """The masses of :class:`~.region_groups.GroupedMass` at lattice points, on the device.

    Parameters
    ----------
    events
        The events on the device; their float64 locations are read there.
    grouped
        The host's per-county planner (its plans and rasters are built there and kept).
    row0
        The event index of the planner's first row (its rows are events ``row0 ..``).
    kept
        Lattice points whose rasters stay on the device (the least recently used go).
    """

    def __init__(
        self, events: DeviceEvents, grouped: GroupedMass, row0: int, kept: int = LEVELS_KEPT
    ) -> None:
        events.keep_float64_copies()
        self.kept = kept
        self._events = events
        self.grouped = grouped
        self.row0 = row0
        self._kernel = kernel(events.program(), "raster_mass")
        self._take = kernel(events.program(), "take_rows")
        self._levels: dict[bytes, _Level] = {}
        self._screen: tuple[Any, Any] | None = None
        self._screen_of: tuple[np.ndarray | None, np.ndarray | None] = (None, None)
        self._picks: dict[tuple[float, ...], tuple[np.ndarray, Any]] = {}
        self._all_rows: Any = None

    def mass_error(
        self, x: np.ndarray, y: np.ndarray, sigma_x: float
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(mass, error scale) of the rows at ``sigma_x`` as
        :meth:`~.region_groups.GroupedMass.mass_error` gives them, or None for model 1 off
        the lattice points (the host's path).

        Parameters
        ----------
        x, y : (rows,) float64
            The rows' locations, host copies of what the device holds (the screen's box and
            the per-event rows).
        sigma_x
            The lengthscale (coordinate units): model 1's a point of the raster lattice.
        """
        level, frac = self.grouped.levels(sigma_x)
        if self.grouped.factors is None and frac[0] > 0.0:
            return None
        if self._all_rows is None:
            self._all_rows = self._events.upload(np.arange(x.size, dtype=np.int32))
        return self._read(self._level(level, frac), x, y, sigma_x, None)

    def mass_error_rows(
        self, x: np.ndarray, y: np.ndarray, points: tuple[float, ...]
    ) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]] | None:
        """The rows that can lose mass at one of the lattice points ``points`` and their
        (mass, error scale) at each, as :meth:`mass_error` gives them: ``(rows, [(mass,
        error)] per point)``, int64 row indices and float64 arrays of their size (every other
        row keeps mass 1, error 0 at every point); None where :meth:`mass_error` is, or when
        the points' rasters cannot all stay on the device. The rows are kept per set of
        points (they depend on the plans, not on the locations)."""
        picked = self._picked(x, points)
        if picked is None:
            return None
        got, pick = picked
        return pick[0], [self._read(g, x, y, s, pick) for g, s in zip(got, points, strict=True)]

    def masses_on_device(
        self, x: np.ndarray, y: np.ndarray, points: tuple[float, ...]
    ) -> DeviceMasses | None:
        """The masses of :meth:`mass_error_rows` left on the device, but for the rows the host
        computes (per-event rows, and rows of counties wider than a tile that no square took
        this draw): those come back with their masses and errors at every point (the device's
        where it read them, the host's elsewhere), and their device masses are set to 1. None
        where :meth:`mass_error_rows` is."""
        picked = self._picked(x, points)
        if picked is None:
            return None
        got, (rows, pick) = picked
        ev, k, count = self._events, rows.size, len(points)
        mass, err = ev.output(8 * count * k, read=True), ev.output(8 * count * k, read=True)
        host = [
            self._launch(g, x, y, (rows, pick), mass, err, j * k) if k else np.empty(0, int)
            for j, g in enumerate(got)
        ]
        at = [np.searchsorted(rows, h) for h in host]
        mine = np.unique(np.concatenate(at)) if k else np.empty(0, np.int64)
        m, e = np.ones((count, mine.size)), np.zeros((count, mine.size))
        if mine.size:
            out_m, out_e = ev.output(m.nbytes), ev.output(e.nbytes)
            args = TakeRowsArgs(
                mass, err, k, count, ev.upload(mine.astype(np.int32)), mine.size, out_m, out_e
            )
            self._take(ev.queue, item_range(mine.size), None, args)
            ev.read(m, out_m)
            ev.read(e, out_e)
            with profile.stage("edge per-event rows"):
                for j, s in enumerate(points):
                    if host[j].size:
                        put = np.searchsorted(mine, at[j])
                        m[j, put], e[j, put] = self.grouped.per_event(x, y, s, host[j])
        return DeviceMasses(rows, pick, mass, count, rows[mine], list(zip(m, e, strict=True)))

    def _picked(
        self, x: np.ndarray, points: tuple[float, ...]
    ) -> tuple[list[_Level], tuple[np.ndarray, Any]] | None:
        """The plans of the lattice points ``points`` on the device and the rows that can lose
        mass at one of them (host indices and device copy, kept per set of points); None where
        :meth:`mass_error_rows` is."""
        levels = [self.grouped.levels(s) for s in points]
        if len(points) >= self.kept or (
            self.grouped.factors is None and any(f[0] > 0.0 for _, f in levels)
        ):
            return None
        got = [self._level(level, frac) for level, frac in levels]
        pick = self._picks.pop(points, None)
        if pick is None:
            can_lose = np.zeros(x.size, dtype=bool)
            for g in got:
                can_lose |= g.candidate
            rows = np.flatnonzero(can_lose)
            pick = (rows, self._events.upload(rows.astype(np.int32)))
        self._picks[points] = pick  # most recently used last
        while len(self._picks) > PICKS_KEPT:
            self._picks.pop(next(iter(self._picks)))
        return got, pick

    def _read(
        self,
        got: _Level,
        x: np.ndarray,
        y: np.ndarray,
        sigma_x: float,
        pick: tuple[np.ndarray, Any] | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(mass, error scale) at one plan of the rows ``pick`` (their indices and device
        copy; None: all rows)."""
        ev = self._events
        rows = x.size if pick is None else pick[0].size
        if rows == 0:
            return np.empty(0), np.empty(0)
        out_m, out_e = ev.output(8 * rows), ev.output(8 * rows)
        per_event = self._launch(got, x, y, pick, out_m, out_e, 0)
        m, e = np.empty(rows), np.empty(rows)
        ev.read(m, out_m)
        ev.read(e, out_e)
        if per_event.size:
            with profile.stage("edge per-event rows"):
                at = per_event if pick is None else np.searchsorted(pick[0], per_event)
                m[at], e[at] = self.grouped.per_event(x, y, sigma_x, per_event)
        return m, e

    def _launch(
        self,
        got: _Level,
        x: np.ndarray,
        y: np.ndarray,
        pick: tuple[np.ndarray, Any] | None,
        out_m: Any,
        out_e: Any,
        out0: int,
    ) -> np.ndarray:
        """Start ``raster_mass`` at one plan over the rows ``pick`` (None: all), writing from
        ``out0`` of ``out_m`` and ``out_e``; returns the rows the host computes at this plan
        this draw (int64 row indices: the per-event rows and the wide counties' rows no square
        took), which the kernel gives mass 1 and error 0."""
        ev = self._events
        rows = x.size if pick is None else pick[0].size
        tile, per_event = got.tile, got.plan.per_event
        if got.plan.wide:  # the squares the wide counties' rows are drawn in, this draw
            wide_rows, wide_tile, missing = got.plan.assign(x, y)
            row_tile = got.row_tile.copy()
            row_tile[wide_rows] = wide_tile
            tile, per_event = ev.upload(row_tile), np.concatenate([per_event, missing])
        bound, shot = self._screen_buffer(x, y)
        ny, nx = shot.bound.shape
        args = RasterMassArgs(
            ev.buf_xd, ev.buf_yd, self.row0, rows, self._all_rows if pick is None else pick[1],
            tile, got.frac, got.geom, got.shape, got.upper, got.values, bound, nx, ny,
            shot.box[0], shot.box[2], shot.h, FIELD_ERROR, out0, out_m, out_e,
        )  # fmt: skip
        self._kernel(ev.queue, item_range(rows), None, args)
        return per_event

    def _screen_buffer(self, x: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
        """The region's distance screen for these rows, its raster uploaded once per screen;
        looked up once per draw (the two lattice points of a draw pass the same arrays)."""
        if self._screen is not None and self._screen_of[0] is x and self._screen_of[1] is y:
            return self._screen
        with profile.stage("edge screen"):
            shot = self.grouped.region.screen(x, y)
        self._screen_of = (x, y)
        if self._screen is None or self._screen[1] is not shot:
            with profile.stage("edge screen upload"):
                self._screen = (self._events.upload(shot.bound), shot)
        return self._screen

    def _level(self, level: np.ndarray, frac: np.ndarray) -> _Level:
        """The plan of the groups' ``level`` with weights ``frac`` on the device (kept)."""
        key = level.tobytes() + frac.tobytes()
        got = self._levels.pop(key, None)
        if got is None:
            with profile.stage("edge raster upload"):
                got = self._upload_level(level, frac)
        self._levels[key] = got
        while len(self._levels) > self.kept:
            self._levels.pop(next(iter(self._levels)))
        return got

    def _upload_level(self, level: np.ndarray, frac: np.ndarray) -> _Level:
        plan = self.grouped.plan(level)
        region = self.grouped.region
        row_frac = frac[self.grouped.groups.group]
        tile = np.full(row_frac.size, -1, dtype=np.int32)
        upper = np.full(max(len(plan.tiles), 1), -1, dtype=np.int32)
        # every raster with its reach: the tiles' own, then the upper levels' of those with rows
        # between two levels
        fields = []
        for i, t in enumerate(plan.tiles):
            tile[t.rows] = i
            fields.append(
                (region.raster(t.level, t.tag, t.box, t.box), self.grouped.reach(t.level))
            )
        wide = np.zeros(len(plan.tiles), dtype=bool)  # squares with a wide row between levels
        for w in plan.wide:
            wide[w.tile[w.tile >= 0]] = np.any(row_frac[w.rows] > 0)
        for i, t in enumerate(plan.tiles):
            if wide[i] or np.any(row_frac[t.rows] > 0):
                upper[i] = len(fields)
                hi = region.raster(t.level + 1, (*t.tag, t.level), t.box, t.box)
                fields.append((hi, 0.0))
        n = max(len(fields), 1)
        geom = np.zeros((n, 4))
        shape = np.zeros((n, 3), dtype=np.int64)
        parts, off = [], 0
        for i, (field, reach) in enumerate(fields):
            _, ny, nx = field.values.shape
            geom[i] = (field.box[0], field.box[2], field.h, reach)
            shape[i] = (nx, ny, off)
            parts.append(field.values.ravel())
            off += field.values.size
        up = self._events.upload
        values = np.concatenate(parts) if parts else np.zeros(1, np.float32)
        weights = row_frac if np.any(upper >= 0) else np.zeros(1)
        candidate = tile >= 0
        for w in plan.wide:
            candidate[w.rows] = True
        candidate[plan.per_event] = True
        return _Level(
            up(tile), up(weights), up(geom), up(shape), up(upper), up(values), plan, tile,
            candidate,
        )  # fmt: skip
