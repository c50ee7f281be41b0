"""Each event's trigger mass inside the study region, per rank, as the likelihood asks for it.

:class:`EdgeMass` keeps one rank's rows' locations and (model 2) lengthscale factors, computes
their masses with a :mod:`~hawkes_cli.engine.region` region at the lattice points of
:func:`mass_lattice` and interpolates between them (DESIGN section 2b, ``censored``).
"""

from __future__ import annotations

import math

import numpy as np

from .device import DeviceEvents
from .region import LATTICE_STEPS, BoundaryRegion, RectangleRegion, Region
from .region_groups import EventGroups, GroupedMass
from .region_groups_device import DeviceGroupedMass

#: :class:`EdgeMass` computes masses at ``sigma_x`` on a lattice of ``2^(1/MASS_STEPS)`` steps
#: (cached per lattice point until the locations change) and interpolates linearly in
#: ``log sigma_x`` between the two around the asked value: a chain whose ``sigma_x`` moves within
#: a few steps (a 1M posterior's sd is a fifteenth of one) computes each lattice point once per
#: location draw instead of once per move. The interpolation's error is at most ``step^2 / 8``
#: times ``|d^2 M / d(log s)^2|`` (below 0.33 for a straight boundary; 0.5 taken):
#: :data:`MASS_INTERPOLATION_ERROR`, added to the error scale of every event that loses mass.
#: The steps are the region's raster lattice (16 per octave), so that on the raster path a
#: lattice point reads one raster level, and the interpolation is the one the raster path
#: makes between its levels anyway (model 1).
MASS_STEPS = LATTICE_STEPS
MASS_INTERPOLATION_ERROR = (math.log(2.0) / MASS_STEPS) ** 2 / 8.0 * 0.5
#: Lattice points of masses kept by :class:`EdgeMass` (a small-N chain's sigma_x wanders over a
#: few).
MASS_POINTS_KEPT = 8


def mass_lattice(sigma_x: float) -> tuple[float, float, float]:
    """``(lo, hi, w)``: the lattice points around ``sigma_x`` (``lo <= sigma_x < hi``, steps of
    ``2^(1/MASS_STEPS)``) and the weight of ``hi`` in the linear interpolation in ``log
    sigma_x`` that :class:`EdgeMass` uses."""
    pos = MASS_STEPS * math.log2(float(sigma_x))
    k = math.floor(pos)
    return 2.0 ** (k / MASS_STEPS), 2.0 ** ((k + 1) / MASS_STEPS), pos - k


class EdgeMass:
    """The trigger mass inside the study region of one rank's rows, at the current locations.

    Parameters
    ----------
    region
        The study region.
    x, y : (N,) float64
        All events' locations (coordinate units).
    rows
        This rank's rows ``(start, stop)``.
    density : (N,) float64 or None
        Model 2's densities (lengthscale ``sigma_x / sqrt(D)``); None for model 1.
    groups
        This rank's rows grouped by county (:class:`~.region_groups.EventGroups`, row indices
        relative to ``rows[0]``) when their locations are redrawn inside their counties: the
        masses in a polygon region are then planned per county once per lattice point
        (:mod:`.region_groups`), not per event and draw. None: per event.
    events
        The events on an OpenCL device: the per-county rasters are then read there
        (:mod:`.region_groups_device`) from the locations the events' buffers hold, which must
        be those :meth:`set_locations` gets. None: on the host.

    Masses are computed at the lattice points of :func:`mass_lattice` around ``sigma_x`` and
    interpolated between them in ``log sigma_x``; each lattice point's are cached (the last
    :data:`MASS_POINTS_KEPT`) until :meth:`set_locations`.
    """

    def __init__(
        self,
        region: Region,
        x: np.ndarray,
        y: np.ndarray,
        *,
        rows: tuple[int, int],
        density: np.ndarray | None = None,
        groups: EventGroups | None = None,
        events: DeviceEvents | None = None,
    ) -> None:
        self.region = region
        self.rows = rows
        r0, r1 = rows
        self._scale = (
            None if density is None else 1.0 / np.sqrt(np.asarray(density, np.float64)[r0:r1])
        )
        self._grouped = self._grouped_mass(groups)
        self._device = (
            None
            if self._grouped is None or events is None
            else DeviceGroupedMass(events, self._grouped, r0)
        )
        self._cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._losing: dict[int, tuple[np.ndarray, ...]] = {}
        self.set_locations(x, y)

    @staticmethod
    def plans_per_county(region: Region) -> bool:
        """Whether masses in ``region`` are planned per county when locations are redrawn in
        their counties (a polygon region); else ``groups`` is unused."""
        return isinstance(region, BoundaryRegion)

    def _grouped_mass(self, groups: EventGroups | None) -> GroupedMass | None:
        """The per-county planner where :meth:`plans_per_county` (model 2: where each county's
        events share one density, as ``hawkes-prep`` writes them; else per event)."""
        if groups is None or not self.plans_per_county(self.region):
            return None
        if groups.group.size != self.rows[1] - self.rows[0]:
            raise ValueError("groups must hold exactly this rank's rows")
        if self._scale is None:
            return GroupedMass(self.region, groups)
        factors = np.zeros(groups.boxes.shape[0])
        factors[groups.group] = self._scale
        if not np.array_equal(factors[groups.group], self._scale):
            return None
        return GroupedMass(self.region, groups, factors)

    def set_locations(self, x: np.ndarray, y: np.ndarray) -> None:
        """New locations of all N events; the cached masses are dropped."""
        r0, r1 = self.rows
        self._x = np.asarray(x, dtype=np.float64)[r0:r1]
        self._y = np.asarray(y, dtype=np.float64)[r0:r1]
        self._cache.clear()
        self._losing.clear()
        self._outside = (
            None
            if self._grouped is None
            else np.flatnonzero(~self._grouped.groups.inside(self._x, self._y))
        )

    def lengthscales(self, sigma_x: float) -> np.ndarray | float:
        """Each row's trigger lengthscale (coordinate units)."""
        return sigma_x if self._scale is None else sigma_x * self._scale

    def mass(self, sigma_x: float) -> tuple[np.ndarray, np.ndarray]:
        """(mass inside the region, its error scale) of the rows, float64 shapes (rows,):
        interpolated between the lattice points around ``sigma_x`` (:func:`mass_lattice`)."""
        lo, hi, w = mass_lattice(sigma_x)
        m_lo, e_lo = self._at(lo)
        m_hi, e_hi = self._at(hi)
        m = (1.0 - w) * m_lo + w * m_hi
        err = np.maximum(e_lo, e_hi)
        err += np.where(m < 1.0, MASS_INTERPOLATION_ERROR, 0.0)
        return m, err

    def deficit(self, sigma_x: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The rows that lose trigger mass at ``sigma_x``, what they lose and its error scale:
        ``(rows, 1 - mass, error scale)``, int64 row indices (from this rank's first row) and
        float64, each shape (k,), with the mass and error of :meth:`mass`; every other row
        keeps its whole mass (1, error 0).

        A quarter of the rows at 1M (those near a coast or a border), so the compensator's
        sums over them cost a quarter of sums over all rows; the rows and their masses at the
        two lattice points around ``sigma_x`` are kept until the locations change.
        """
        lo, hi, w = mass_lattice(sigma_x)
        key = round(MASS_STEPS * math.log2(lo))
        got = self._losing.pop(key, None)
        if got is None:
            m_lo, e_lo = self._at(lo)
            m_hi, e_hi = self._at(hi)
            rows = np.flatnonzero((m_lo < 1.0) | (m_hi < 1.0) | (e_lo > 0.0) | (e_hi > 0.0))
            got = (rows, m_lo[rows], m_hi[rows], np.maximum(e_lo[rows], e_hi[rows]))
        self._losing[key] = got  # most recently used last
        while len(self._losing) > MASS_POINTS_KEPT:
            del self._losing[next(iter(self._losing))]
        rows, a, b, err = got
        m = (1.0 - w) * a + w * b
        return rows, 1.0 - m, err + np.where(m < 1.0, MASS_INTERPOLATION_ERROR, 0.0)

    def _at(self, sigma_x: float) -> tuple[np.ndarray, np.ndarray]:
        """(mass, error scale) of the rows at the lattice point ``sigma_x`` (cached)."""
        key = round(MASS_STEPS * math.log2(sigma_x))
        got = self._cache.pop(key, None)
        if got is None:
            if isinstance(self.region, RectangleRegion):
                m = self.region.mass(self._x, self._y, self.lengthscales(sigma_x))
                got = (m, np.zeros_like(m))
            elif self._grouped is not None:
                got = self._grouped_at(sigma_x)
            else:
                got = self.region.mass_error(self._x, self._y, self.lengthscales(sigma_x))
        self._cache[key] = got  # most recently used last
        while len(self._cache) > MASS_POINTS_KEPT:
            del self._cache[next(iter(self._cache))]
        return got

    def _grouped_at(self, sigma_x: float) -> tuple[np.ndarray, np.ndarray]:
        """(mass, error scale) by the per-county plans; rows outside their county's box (a
        file's own locations) by the per-event path."""
        assert self._grouped is not None and self._outside is not None
        got = None if self._device is None else self._device.mass_error(self._x, self._y, sigma_x)
        m, e = self._grouped.mass_error(self._x, self._y, sigma_x) if got is None else got
        out = self._outside
        if out.size:
            s = np.broadcast_to(self.lengthscales(sigma_x), self._x.shape)[out]
            m[out], e[out] = self.region.mass_error(self._x[out], self._y[out], s)
        return m, e
