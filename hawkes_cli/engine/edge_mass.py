"""Each event's trigger mass inside the study region, per rank, as the likelihood asks for it.

:class:`EdgeMass` keeps one rank's rows' locations and (model 2) lengthscale factors, computes
their masses with a :mod:`~hawkes_cli.engine.region` region at the lattice points of
:func:`mass_lattice` and interpolates between them (DESIGN section 2b, ``censored``).
"""

from __future__ import annotations

import math

import numpy as np

from .device import DeviceEvents
from .edge_lost_device import DeviceEdgeLost
from .region import LATTICE_STEPS, BoundaryRegion, RectangleRegion, Region
from .region_groups import EventGroups, GroupedMass
from .region_groups_device import DeviceGroupedMass, DeviceMasses

#: :class:`EdgeMass` computes masses at ``sigma_x`` on a lattice of ``2^(1/MASS_STEPS)`` steps
#: (cached per lattice point until the locations change) and interpolates between the four
#: around the asked value by the cubic through them in ``log sigma_x`` (:func:`mass_stencil`): a
#: chain whose ``sigma_x`` moves within a few steps (a 1M posterior's sd is a nineteenth of one)
#: computes each lattice point once per location draw instead of once per move. Not linear
#: between two: every event near the boundary loses mass like ``sigma_x`` (a straight boundary's
#: share outside grows like ``s``), so a chord between two points lies above the lost mass by up
#: to ``step^2 / 8`` of it, for all events together; at 1M (2.1% of the trigger mass outside,
#: ``xi0 * lost`` 22,500 nats) that was 2.7 nats at mid-step, a slope error of up to
#: ``lost'' * step / 2`` (221 nats per unit of ``log sigma_x``: 0.5 posterior sds of shift) and none
#: of the lost mass's curvature (6% of the posterior's in ``log sigma_x``). The cubic's error is
#: at most ``(9/16) step^4 / 24`` times ``|d^4 M / d(log s)^4|`` (3.1 for a straight boundary, 6.9
#: at a right-angle corner; 8 taken): :data:`MASS_INTERPOLATION_ERROR`, 6.6e-7 per event, added
#: to the error scale of every event that loses mass (``benchmarks/edge_interpolation.py``).
#: The steps are the region's raster lattice (16 per octave), so that on the raster path a
#: lattice point reads one raster level. Model 2's events (lengthscale ``sigma_x / sqrt(D)``)
#: each take the cubic around their own lengthscale on the same lattice: a "lattice point" of
#: model 2 holds every event's mass at its lengthscale snapped down to the raster lattice, and
#: each event weighs the points by its own offset from that snap (:meth:`EdgeMass.stencil`).
MASS_STEPS = LATTICE_STEPS
MASS_INTERPOLATION_ERROR = (math.log(2.0) / MASS_STEPS) ** 4 * (9.0 / 16.0) / 24.0 * 8.0
#: Lattice points of masses kept by :class:`EdgeMass` (a small-N chain's sigma_x wanders over a
#: few).
MASS_POINTS_KEPT = 8
#: Stencils whose masses stay on the device per location draw (:meth:`EdgeMass.lost_sums`;
#: model 2's five points at 1M: 40 MB each): the chain's and one a step away.
DEVICE_STENCILS_KEPT = 2


def _position(sigma_x: float) -> tuple[int, float]:
    """``(k, t)``: ``sigma_x`` is ``2^((k + t) / MASS_STEPS)``, ``0 <= t < 1``."""
    pos = MASS_STEPS * math.log2(float(sigma_x))
    k = math.floor(pos)
    return k, pos - k


def mass_lattice(sigma_x: float) -> tuple[float, float, float]:
    """``(lo, hi, t)``: the lattice points around ``sigma_x`` (``lo <= sigma_x < hi``, steps of
    ``2^(1/MASS_STEPS)``) and where ``sigma_x`` lies between them in ``log sigma_x`` (0 at
    ``lo``, 1 at ``hi``)."""
    k, t = _position(sigma_x)
    return 2.0 ** (k / MASS_STEPS), 2.0 ** ((k + 1) / MASS_STEPS), t


def _lagrange(t: float | np.ndarray) -> tuple:
    """Weights of the cubic through nodes -1, 0, 1, 2 at ``t`` (a float, or an array of them
    in [0, 1]): ``(w_-1, w_0, w_1, w_2)``, summing to 1; ``(0, 1, 0, 0)`` at ``t = 0``."""
    return (
        -t * (t - 1.0) * (t - 2.0) / 6.0,
        (t + 1.0) * (t - 1.0) * (t - 2.0) / 2.0,
        -(t + 1.0) * t * (t - 2.0) / 2.0,
        (t + 1.0) * t * (t - 1.0) / 6.0,
    )


def mass_stencil(sigma_x: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The lattice points whose masses :class:`EdgeMass` interpolates at the lengthscale
    ``sigma_x``, and their weights: the cubic in ``log sigma_x`` through the four points around
    it (two below, two above: Lagrange weights at ``t`` of :func:`mass_lattice` on nodes -1, 0,
    1, 2); at a lattice point the point alone (weight 1). Model 2's events each read the
    stencil of their own lengthscale (:meth:`EdgeMass.stencil`)."""
    k, t = _position(sigma_x)
    if t == 0.0:
        return (2.0 ** (k / MASS_STEPS),), (1.0,)
    points = tuple(2.0 ** ((k + j) / MASS_STEPS) for j in (-1, 0, 1, 2))
    return points, _lagrange(t)


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

    Masses are computed at the four lattice points around ``sigma_x`` and interpolated by the
    cubic through them in ``log sigma_x`` (model 2: around each row's own lengthscale, up to
    five points, :meth:`stencil`); each lattice point's are cached (the last
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
        # model 2: each row's lengthscale factor snapped down to the lattice, and the offset of
        # its own lengthscale above the snap (in lattice steps, [0, 1)); model 1: none
        self._snapped, self._offset = (None, None) if self._scale is None else _snap(self._scale)
        self._offset_range = (
            (0.0, 0.0) if self._offset is None else (self._offset.min(), self._offset.max())
        )
        self._grouped = self._grouped_mass(groups)
        # the device keeps the rasters of a stencil's points (off the lattice: model 1's four,
        # model 2's up to five) and of one more (sigma_x crossing a lattice point), so that a
        # redraw uploads none
        kept = (4 if self._offset is None else 5) + 1
        self._device = (
            None
            if self._grouped is None or events is None
            else DeviceGroupedMass(events, self._grouped, r0, kept=kept)
        )
        self._device_lost = (
            None
            if self._device is None or events is None
            else DeviceEdgeLost(events, self._offset, MASS_INTERPOLATION_ERROR)
        )
        self._cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._losing: dict[tuple[int, ...], _LostCubics] = {}
        self._on_device: dict[tuple[int, ...], tuple[DeviceMasses, _LostCubics]] = {}
        self._tail: tuple[np.ndarray | None, np.ndarray | None, np.ndarray] = (
            None, None, np.empty(0),
        )  # fmt: skip
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
        if self._scale is None or self._snapped is None:
            return GroupedMass(self.region, groups)
        factors = np.zeros(groups.boxes.shape[0])
        factors[groups.group] = self._scale
        if not np.array_equal(factors[groups.group], self._scale):
            return None
        factors[groups.group] = self._snapped  # a lattice point reads one raster level a county
        return GroupedMass(self.region, groups, factors)

    def set_locations(self, x: np.ndarray, y: np.ndarray) -> None:
        """New locations of all N events; the cached masses are dropped."""
        r0, r1 = self.rows
        self._x = np.asarray(x, dtype=np.float64)[r0:r1]
        self._y = np.asarray(y, dtype=np.float64)[r0:r1]
        self._cache.clear()
        self._losing.clear()
        self._on_device.clear()
        self._outside = (
            None
            if self._grouped is None
            else np.flatnonzero(~self._grouped.groups.inside(self._x, self._y))
        )

    def lengthscales(self, sigma_x: float) -> np.ndarray | float:
        """Each row's trigger lengthscale (coordinate units)."""
        return sigma_x if self._scale is None else sigma_x * self._scale

    def _lattice_lengthscales(self, sigma_x: float) -> np.ndarray | float:
        """Each row's lengthscale at the lattice point ``sigma_x``: model 2's snapped down to
        the raster lattice (:func:`_snap`), so that every row reads one raster level."""
        return sigma_x if self._snapped is None else sigma_x * self._snapped

    def stencil(
        self, sigma_x: float
    ) -> tuple[tuple[float, ...], tuple[float, ...] | tuple[np.ndarray, ...]]:
        """The lattice points and weights of the masses at ``sigma_x``: model 1's
        :func:`mass_stencil`; model 2's the cubic around each row's own lengthscale, whose
        lattice position is ``sigma_x``'s plus the row's offset (up to a step more), so the
        points are up to five (the four around ``sigma_x`` and the next; they depend on
        ``sigma_x`` alone) and the weights one array per point over the rows, each row's four
        of them its own cubic's and the others 0. (:meth:`mass` reads the same points through
        each row's cubic kept as a polynomial, :class:`_LostCubics`.)"""
        if self._offset is None:
            return mass_stencil(sigma_x)
        points, first, t = self._points(sigma_x)
        u = t + self._offset
        up = u >= 1.0  # the row's lengthscale lies in the next step: its nodes one point up
        w = np.zeros((5, u.size))
        low, high = _lagrange(u[~up]), _lagrange(u[up] - 1.0)
        for j in range(4):
            w[j, ~up] = low[j]
            w[j + 1, up] = high[j]
        return points, tuple(w[first : first + len(points)])

    def _points(self, sigma_x: float) -> tuple[tuple[float, ...], int, float]:
        """``(points, first, t)``: the stencil's lattice points at ``sigma_x``
        (:meth:`stencil`'s), model 2's first one node ``k - 1 + first`` (1: every row's
        lengthscale lies a step up; model 1: 0), and ``t`` of :func:`mass_lattice`."""
        k, t = _position(sigma_x)
        if self._offset is None:
            return mass_stencil(sigma_x)[0], 0, t
        first = 0 if t + self._offset_range[0] < 1.0 else 1
        last = 5 if t + self._offset_range[1] >= 1.0 else 4
        return tuple(2.0 ** ((k - 1 + j) / MASS_STEPS) for j in range(first, last)), first, t

    def mass(self, sigma_x: float) -> tuple[np.ndarray, np.ndarray]:
        """(mass inside the region, its error scale) of the rows, float64 shapes (rows,):
        interpolated between the lattice points around ``sigma_x`` (:meth:`stencil`); 1 and 0
        for the rows that keep their whole mass at every point."""
        rows, kept, err = self._losing_mass(sigma_x)
        m = np.ones(self._x.size)
        e = np.zeros(self._x.size)
        m[rows], e[rows] = kept, err
        return m, e

    def deficit(self, sigma_x: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The rows that lose trigger mass at ``sigma_x``, what they lose and its error scale:
        ``(rows, 1 - mass, error scale)``, int64 row indices (from this rank's first row) and
        float64, each shape (k,), with the mass and error of :meth:`mass`; every other row
        keeps its whole mass (1, error 0).

        A quarter of the rows at 1M (those near a coast or a border), so the compensator's
        sums over them cost a quarter of sums over all rows; the rows, their error scales and
        their cubics (:class:`_LostCubics`) are kept per set of lattice points until the
        locations change, so that a move of ``sigma_x`` costs one polynomial per losing row.
        The rows and the error are the same arrays on every call with the same points (read
        only).
        """
        rows, kept, err = self._losing_mass(sigma_x)
        return rows, 1.0 - kept, err

    def lost_sums(self, sigma_x: float, sigma_t: float, tail: np.ndarray) -> tuple[float, float]:
        """What the rows lose outside the region in the compensator, ``sum_n s_n (1 - M_n)``,
        and its error scale's sum, ``sum_n s_n e_n``, with ``s_n = 1 - exp(tail_n /
        sigma_t)`` and each row's mass and error scale those of :meth:`mass`.

        Parameters
        ----------
        sigma_x, sigma_t
            The trigger's lengthscale (coordinate units) and time scale (time units).
        tail : (rows,) float64
            Each row's time less the window's end (time units, <= 0); pass the same array
            on every call (its losing rows' part is kept by identity).

        Where the masses are read on the device (:meth:`.DeviceGroupedMass.masses_on_device`:
        per-county plans, every row inside its county's box) they stay there and the sums
        are the kernel's (:class:`~.edge_lost_device.DeviceEdgeLost`), the host adding its own
        few rows; else from :meth:`deficit` on the host. Both agree to float64 rounding.
        """
        on = self._masses_on_device(sigma_x)
        if on is None:
            rows, kept, err = self._losing_mass(sigma_x)
            lost_sum = err_sum = 0.0
        else:
            got, host, shift = on
            assert self._device_lost is not None
            lost_sum, err_sum = self._device_lost.sums(got, shift, sigma_t, tail)
            rows, kept, err = host.rows, host.mass(shift), host.error
        if self._tail[0] is not tail or self._tail[1] is not rows:
            self._tail = (tail, rows, np.asarray(tail, np.float64)[rows])
        share = -np.expm1(self._tail[2] / sigma_t)
        return lost_sum + float(np.dot(share, 1.0 - kept)), err_sum + float(np.dot(share, err))

    def _masses_on_device(self, sigma_x: float) -> tuple[DeviceMasses, _LostCubics, float] | None:
        """The masses at the stencil's points at ``sigma_x`` left on the device, the host's
        rows' cubics and the rows' shift (:meth:`_LostCubics.mass`); None without a device,
        when some rows lie outside their county's box, or where the device cannot keep the
        points' rasters."""
        if self._device is None or self._outside is None or self._outside.size:
            return None
        points, first, t = self._points(sigma_x)
        key = tuple(round(MASS_STEPS * math.log2(s)) for s in points)
        hit = self._on_device.pop(key, None)
        if hit is None:
            got = self._device.masses_on_device(self._x, self._y, points)
            if got is None:
                return None
            hit = (got, _LostCubics.of(got.host_at, self._offset, got.host_rows))
        self._on_device[key] = hit  # most recently used last
        while len(self._on_device) > DEVICE_STENCILS_KEPT:
            del self._on_device[next(iter(self._on_device))]
        return hit[0], hit[1], t - first

    def _losing_mass(self, sigma_x: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, mass, error scale)`` of the rows that lose mass at some point of the
        stencil at ``sigma_x``."""
        points, first, t = self._points(sigma_x)
        key = tuple(round(MASS_STEPS * math.log2(s)) for s in points)
        got = self._losing.pop(key, None)
        if got is None:
            got = self._device_cubics(points)
        if got is None:
            got = _LostCubics.of([self._at(s) for s in points], self._offset)
        self._losing[key] = got  # most recently used last
        while len(self._losing) > MASS_POINTS_KEPT:
            del self._losing[next(iter(self._losing))]
        # each row's position above the stencil's first point less one (model 2: plus its
        # offset, in the cubics)
        return got.rows, got.mass(t - first), got.error

    def _device_cubics(self, points: tuple[float, ...]) -> _LostCubics | None:
        """The cubics from the device's reads of only the rows that can lose mass
        (:meth:`.DeviceGroupedMass.mass_error_rows`); None without a device, or when some rows
        lie outside their county's box (a file's own locations: the per-event path)."""
        if self._device is None or self._outside is None or self._outside.size:
            return None
        got = self._device.mass_error_rows(self._x, self._y, points)
        return None if got is None else _LostCubics.of(got[1], self._offset, got[0])

    def _at(self, sigma_x: float) -> tuple[np.ndarray, np.ndarray]:
        """(mass, error scale) of the rows at the lattice point ``sigma_x`` (cached)."""
        key = round(MASS_STEPS * math.log2(sigma_x))
        got = self._cache.pop(key, None)
        if got is None:
            if isinstance(self.region, RectangleRegion):
                m = self.region.mass(self._x, self._y, self._lattice_lengthscales(sigma_x))
                got = (m, np.zeros_like(m))
            elif self._grouped is not None:
                got = self._grouped_at(sigma_x)
            else:
                got = self.region.mass_error(self._x, self._y, self._lattice_lengthscales(sigma_x))
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
            s = np.broadcast_to(self._lattice_lengthscales(sigma_x), self._x.shape)[out]
            m[out], e[out] = self.region.mass_error(self._x[out], self._y[out], s)
        return m, e


def _snap(scale: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Model 2's lengthscale factors ``scale`` (shape (rows,)) snapped down to the mass lattice,
    ``2^(floor(MASS_STEPS log2 scale) / MASS_STEPS)``, and each one's offset above its snap in
    lattice steps, [0, 1) (within 1e-9 of a lattice point: the point, offset 0); None for the
    offsets when all are 0 (each row's stencil is then ``sigma_x``'s)."""
    pos = MASS_STEPS * np.log2(scale)
    near = np.rint(pos)
    on = np.abs(pos - near) < 1e-9
    base = np.where(on, near, np.floor(pos))
    offset = np.where(on, 0.0, pos - base)
    return 2.0 ** (base / MASS_STEPS), offset if np.any(offset) else None


#: The Lagrange cubic's weights on nodes -1, 0, 1, 2 (:func:`_lagrange`) as polynomials in
#: ``t``: row ``i`` holds the coefficients of ``t^i`` over the four nodes.
_POWER = np.array(
    [
        [0.0, 1.0, 0.0, 0.0],
        [-1.0 / 3.0, -0.5, 1.0, -1.0 / 6.0],
        [0.5, -1.0, 0.5, 0.0],
        [-1.0 / 6.0, 0.5, -0.5, 1.0 / 6.0],
    ]
)


def _horner(coef: np.ndarray, t: float | np.ndarray) -> np.ndarray:
    """``sum_i coef[i] t^i``, coef shape (4, k), ``t`` a float or shape (k,)."""
    v = coef[3] * t
    for i in (2, 1):
        v += coef[i]
        v *= t
    v += coef[0]
    return v


class _LostCubics:
    """The rows that lose mass at some point of one stencil, with each row's lost mass as the
    cubic through the points in its lattice position, and their error scale.

    Built once per set of lattice points and locations (:meth:`of`); :meth:`mass` is then one
    polynomial per row. The error scale is the largest of the points' plus the cubic's bound
    (:data:`MASS_INTERPOLATION_ERROR`) where an event loses mass at any of them. The lost
    masses ``1 - M`` are interpolated, not the masses, so that an event that keeps its whole
    mass at every point keeps exactly 1 (the weights' sum is 1 only to rounding); the mass is
    clipped to [0, 1] (the cubic can overshoot by its error near 1 or 0). One point (model 1
    on a lattice point): its masses and errors as they are.
    """

    def __init__(
        self,
        rows: np.ndarray,
        error: np.ndarray,
        cubics: tuple[np.ndarray, ...],
        offset: np.ndarray | None,
        at_point: np.ndarray | None = None,
    ) -> None:
        self.rows, self.error = rows, error
        self._cubics, self._offset, self._at_point = cubics, offset, at_point
        for a in (rows, error, at_point, *cubics):
            if a is not None:
                a.setflags(write=False)

    @classmethod
    def of(
        cls,
        at: list[tuple[np.ndarray, np.ndarray]],
        offset: np.ndarray | None,
        candidates: np.ndarray | None = None,
    ) -> _LostCubics:
        """From each point's ``(mass, error scale)`` (1, 4 or, model 2, 5 points) over all
        rows, or over the rows ``candidates`` (every other row keeps mass 1, error 0), and
        model 2's offsets of all rows (None: model 1)."""
        losing = np.zeros(at[0][0].shape, dtype=bool)
        for m_k, e_k in at:
            losing |= m_k < 1.0
            losing |= e_k > 0.0
        picks = np.flatnonzero(losing)
        rows = picks if candidates is None else candidates[picks]
        if len(at) == 1:
            m, e = at[0]
            return cls(rows, e[picks], (), None, at_point=m[picks])
        lost = np.empty((len(at), rows.size))
        err = np.zeros(rows.size)
        picked = np.empty(rows.size)
        for j, (m_k, e_k) in enumerate(at):
            np.take(m_k, picks, out=lost[j])
            np.maximum(err, np.take(e_k, picks, out=picked), out=err)
        np.subtract(1.0, lost, out=lost)
        err += np.where(np.any(lost > 0.0, axis=0), MASS_INTERPOLATION_ERROR, 0.0)
        # one cubic per four consecutive points: the second (model 2's five) for the rows
        # whose lengthscale lies a step up
        cubics = tuple(_POWER @ lost[j : j + 4] for j in range(len(at) - 3))
        return cls(rows, err, cubics, None if offset is None else offset[rows])

    def mass(self, shift: float) -> np.ndarray:
        """The rows' masses, shape (k,), each row's cubic at ``shift`` (model 1: ``t`` of
        :func:`mass_lattice`; model 2: plus the row's offset, the second cubic where that
        reaches 1, read from 1 less)."""
        if self._at_point is not None:
            return self._at_point
        if self._offset is None:
            lost = _horner(self._cubics[0], shift)
        else:
            u = shift + self._offset
            lost = _horner(self._cubics[0], u)
            if len(self._cubics) == 2:
                lost = np.where(u >= 1.0, _horner(self._cubics[1], u - 1.0), lost)
        return np.clip(1.0 - lost, 0.0, 1.0)
