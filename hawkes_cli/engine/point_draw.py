"""The cut posterior's location redraw on the OpenCL device.

Every iteration of a chain with ``sampler.resample_every: 1`` puts each of the N events at a
new uniform point of its county. On the host that is a search of each event's triangle among
its county's (a million binary searches over the ~1M triangles of the US counties), the point
in the triangle, and then an upload of the new locations in every form the kernels read. Here
the kernel ``draw_points`` (``kernels/hawkes.cl``) does the search and the point on the
device and writes the locations straight into the buffers the kernels read; the host draws
the uniforms (so the chain's random stream is the one the host draw consumes) and reads back
the float64 locations its own stages need.

The points are those of :meth:`hawkes_cli.geo.PolygonSampler.place` bit for bit: the same
comparisons and the same float64 operations in the same order, none contracted
(``tests/test_device_stages.py`` compares them on the real counties).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import profile
from .device import VEC, DeviceEvents, LocationBuffers, item_range
from .launch import DrawPointsArgs, kernel


class DevicePointDraw:
    """Uniform points in the events' polygons, drawn on the device of ``events``.

    Parameters
    ----------
    events
        The events on the device (their count N, queue and program).
    key : (T,) float64
        Each triangle's search key: its polygon's index plus the polygon's cumulative area
        share up to and including it (:attr:`hawkes_cli.geo.PolygonSampler.draw_tables`).
    offsets : (K + 1,) int
        First triangle of each polygon; ``offsets[K] == T``.
    triangles : (T, 3, 2) float64
        Triangle vertices (coordinate units).
    codes : (N,) int
        Each event's polygon index.

    Notes
    -----
    The tables go up once (about 60 MB for the US counties); each :meth:`draw` sends the
    uniforms (24 bytes per event) and reads back the float64 locations (16 bytes per event).
    """

    def __init__(
        self,
        events: DeviceEvents,
        key: np.ndarray,
        offsets: np.ndarray,
        triangles: np.ndarray,
        codes: np.ndarray,
    ) -> None:
        codes = np.asarray(codes)
        if codes.shape != (events.n,):
            raise ValueError(f"codes must have shape ({events.n},), got {codes.shape}")
        if offsets[-1] >= 2**31:
            raise ValueError(f"at most 2^31 - 1 triangles on the device, got {offsets[-1]}")
        self._events = events
        up = events.upload
        with profile.stage("draw tables upload"):
            self._code = up(codes.astype(np.int32))
            self._offsets = up(np.asarray(offsets).astype(np.int32))
            self._key = up(np.asarray(key, dtype=np.float64))
            self._tri = up(np.asarray(triangles, dtype=np.float64).reshape(-1, 6))
        self._kernel = kernel(events.program(), "draw_points")
        n = events.n
        self._padded = ((n + VEC - 1) // VEC) * VEC + VEC

    def draw(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The point of each event for the uniforms ``r``, left on the device for the events'
        next :meth:`~.device.DeviceEvents.set_locations` with the arrays returned.

        Parameters
        ----------
        r : (N, 3) float64
            Uniforms in [0, 1): the triangle's, then ``u`` and ``v`` in it.

        Returns
        -------
        x, y : (N,) float64
            The points (coordinate units), read back from the device.
        """
        return self.take(self.enqueue(r))

    def enqueue(self, r: np.ndarray) -> PendingPoints:
        """Start the draw of :meth:`draw` on the device and return at once: the points arrive
        in the returned arrays when its ``wait()`` returns; :meth:`take` then makes them the
        events' next locations. Each draw has buffers of its own, so the current locations
        stay valid meanwhile."""
        ev = self._events
        n = ev.n
        r = np.ascontiguousarray(r, dtype=np.float64)
        if r.shape != (n, 3):
            raise ValueError(f"r must have shape ({n}, 3), got {r.shape}")
        size = np.dtype(ev.real).itemsize * self._padded
        xh, yh = ev.output(size, read=True), ev.output(size, read=True)
        if ev.real is np.float32:
            xl, yl = ev.output(size, read=True), ev.output(size, read=True)
        else:  # float64: the kernel writes no remainder; they alias the locations
            xl, yl = xh, yh
        bufs = LocationBuffers(
            xd=ev.output(8 * n, read=True),
            yd=ev.output(8 * n, read=True),
            xh=xh,
            yh=yh,
            xl=xl,
            yl=yl,
        )
        args = DrawPointsArgs(
            ev.upload(r), self._code, self._offsets, self._key, self._tri, n, self._padded,
            bufs.xd, bufs.yd, bufs.xh, bufs.yh, bufs.xl, bufs.yl,
        )  # fmt: skip
        self._kernel(ev.queue, item_range(self._padded), None, args)
        x, y = np.empty(n), np.empty(n)
        # both copies' events are kept: pyopencl blocks when one of them is dropped early
        copies = (ev.read_later(x, bufs.xd), ev.read_later(y, bufs.yd))
        return PendingPoints(x, y, bufs, copies)

    def take(self, pending: PendingPoints) -> tuple[np.ndarray, np.ndarray]:
        """Wait for ``pending``'s points and leave them for the events' next
        :meth:`~.device.DeviceEvents.set_locations` (see :meth:`draw`)."""
        pending.wait()
        profile.synced()
        self._events.drawn_on_device(pending.x, pending.y, pending.buffers)
        return pending.x, pending.y


@dataclass(frozen=True)
class PendingPoints:
    """A location draw started on the device (:meth:`DevicePointDraw.enqueue`).

    Attributes
    ----------
    x, y : (N,) float64
        The points, valid once ``wait()`` has returned.
    buffers
        The points on the device in every form the kernels read.
    copies
        The events of the two copies into ``x`` and ``y`` (pyopencl NannyEvents, which
        keep the host arrays alive until they are complete).
    """

    x: np.ndarray
    y: np.ndarray
    buffers: LocationBuffers
    copies: tuple[Any, ...]

    def wait(self) -> None:
        """Block until ``x`` and ``y`` hold the points (safe from any thread)."""
        for event in self.copies:
            event.wait()


def device_point_draw(
    backend: Any, key: np.ndarray, offsets: np.ndarray, triangles: np.ndarray, codes: np.ndarray
) -> DevicePointDraw | None:
    """A :class:`DevicePointDraw` on the device of a likelihood's pair backend, or None when
    the backend has no OpenCL device (the float64 reference: the host draws)."""
    events = getattr(backend, "events", None)
    if not isinstance(events, DeviceEvents):
        return None
    return DevicePointDraw(events, key, offsets, triangles, codes)
