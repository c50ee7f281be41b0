"""Model 1's per-county edge masses (:mod:`.region_groups`) read on the OpenCL device.

When locations are redrawn inside their counties, :class:`~.region_groups.GroupedMass` plans
each raster level once: every county near the boundary belongs to one tile, whose raster
covers the county's box. The plan and its rasters stay fixed while the chain runs, so
:class:`DeviceGroupedMass` puts a level's rasters and each row's tile on the device once, and
every later lattice point of that level is one kernel (``raster_mass``, ``kernels/hawkes.cl``)
over the rows, reading the locations the events' buffers already hold (after a device draw
they never crossed to the host and back for this). Only the masses and error scales come back,
and the few rows of counties wider than a tile (island chains) take the host's per-event path.

The kernel is the host's read (:meth:`~.region._Field.read`) in float64 from the same float32
rasters, behind the same distance screen: the masses agree with
:meth:`~.region_groups.GroupedMass.mass_error` to float64 rounding
(``tests/test_device_stages.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import profile
from .device import DeviceEvents, item_range
from .launch import RasterMassArgs, kernel
from .region import FIELD_ERROR
from .region_groups import GroupedMass

#: Raster levels kept on the device: a chain's masses are at the two lattice points around its
#: sigma_x, now and then a third (the lower 48 states at 0.046 degrees: 11 million cells, 130 MB
#: a level).
LEVELS_KEPT = 3


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
    """

    def __init__(self, events: DeviceEvents, grouped: GroupedMass, row0: int) -> None:
        events.keep_float64_copies()
        self._events = events
        self.grouped = grouped
        self.row0 = row0
        self._kernel = kernel(events.program(), "raster_mass")
        self._levels: dict[int, tuple[Any, Any, Any, Any, np.ndarray]] = {}
        self._screen: tuple[Any, Any] | None = None

    def mass_error(
        self, x: np.ndarray, y: np.ndarray, sigma_x: float
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(mass, error scale) of the rows at ``sigma_x`` as
        :meth:`~.region_groups.GroupedMass.mass_error` gives them, or None off the lattice
        points (two levels to interpolate: the host's path).

        Parameters
        ----------
        x, y : (rows,) float64
            The rows' locations, host copies of what the device holds (the screen's box and
            the per-event rows).
        sigma_x
            The lengthscale (coordinate units), a point of the raster lattice.
        """
        k, frac = GroupedMass.level_of(sigma_x)
        if frac > 0.0:
            return None
        ev = self._events
        rows = x.size
        tile, geom, shape, values, per_event = self._level(k)
        bound, shot = self._screen_buffer(x, y)
        ny, nx = shot.bound.shape
        out_m, out_e = ev.output(8 * rows), ev.output(8 * rows)
        args = RasterMassArgs(
            ev.buf_xd, ev.buf_yd, self.row0, rows, tile, geom, shape, values, bound, nx, ny,
            shot.box[0], shot.box[2], shot.h, GroupedMass.reach(k), FIELD_ERROR, out_m, out_e,
        )  # fmt: skip
        self._kernel(ev.queue, item_range(rows), None, args)
        m, e = np.empty(rows), np.empty(rows)
        ev.read(m, out_m)
        ev.read(e, out_e)
        if per_event.size:
            m[per_event], e[per_event] = self.grouped.region.mass_error(
                x[per_event], y[per_event], sigma_x
            )
        return m, e

    def _screen_buffer(self, x: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
        """The region's distance screen for these rows, its raster uploaded once per screen."""
        shot = self.grouped.region.screen(x, y)
        if self._screen is None or self._screen[1] is not shot:
            with profile.stage("edge screen upload"):
                self._screen = (self._events.upload(shot.bound), shot)
        return self._screen

    def _level(self, k: int) -> tuple[Any, Any, Any, Any, np.ndarray]:
        """Level ``k``'s tiles on the device (kept): each row's tile (int32, -1: none),
        each tile's ``x0, y0, h`` (float64) and ``nx, ny, offset`` (int64), the rasters'
        values (float32, three layers each), and the per-event rows (host)."""
        got = self._levels.pop(k, None)
        if got is None:
            with profile.stage("edge raster upload"):
                got = self._upload_level(k)
        self._levels[k] = got
        while len(self._levels) > LEVELS_KEPT:
            self._levels.pop(next(iter(self._levels)))
        return got

    def _upload_level(self, k: int) -> tuple[Any, Any, Any, Any, np.ndarray]:
        plan = self.grouped.plan(k)
        region = self.grouped.region
        tile = np.full(self.grouped.groups.group.size, -1, dtype=np.int32)
        geom = np.zeros((max(len(plan.tiles), 1), 3))
        shape = np.zeros((max(len(plan.tiles), 1), 3), dtype=np.int64)
        parts, off = [], 0
        for i, (tag, box, rows) in enumerate(plan.tiles):
            field = region.raster(k, tag, box, box)
            _, ny, nx = field.values.shape
            tile[rows] = i
            geom[i] = (field.box[0], field.box[2], field.h)
            shape[i] = (nx, ny, off)
            parts.append(field.values.ravel())
            off += field.values.size
        up = self._events.upload
        values = np.concatenate(parts) if parts else np.zeros(1, np.float32)
        return up(tile), up(geom), up(shape), up(values), plan.per_event
