"""Cut-posterior location draws: every event uniformly inside its county polygon.

:func:`make_resampler` finds the polygons of a run (config, synthetic grid or the events file's
record) and each event's polygon code; :class:`LocationStream` draws all N locations at once
from a random stream that every rank of a chain holds identically, so locations are never
broadcast. The stream remembers its state before its last draw: that is what a checkpoint
stores, and :meth:`LocationStream.rewind` plus one draw gives the same locations back.
:meth:`LocationStream.draw_ahead` starts the next draw early on a copy of the stream; the
stream itself moves only when that draw is taken, so checkpoints are the same with it.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .config import Config
from .data import EventData
from .engine.ahead import on_worker
from .errors import EventsError
from .regions import run_polygons

if TYPE_CHECKING:
    from .engine.point_draw import DevicePointDraw, PendingPoints
    from .geo import PolygonSampler

log = logging.getLogger(__name__)

__all__ = ["LocationStream", "make_resampler"]


def make_resampler(config: Config, data: EventData) -> tuple[PolygonSampler, np.ndarray] | None:
    """The cut-posterior location sampler and each event's polygon code, or None if off.

    Polygons come from ``data.counties`` when set; else from the synthetic grid of simulated
    data; else from the polygon file ``hawkes-prep`` recorded in the events file (attribute
    ``counties``), which defaults to the package's 2016 Census counties.

    Returns
    -------
    (PolygonSampler, (N,) int array) or None
        The polygons and the polygon index of each event; None when
        ``sampler.resample_every`` is 0.

    Raises
    ------
    EventsError
        The events have no ``fips`` column.
    ConfigError
        Projected events with the default lon/lat counties.
    """
    if config.sampler.resample_every == 0:
        return None
    if data.fips is None:
        raise EventsError(
            f"{data.source}: sampler.resample_every > 0 needs a 'fips' column (each event's "
            "county); add it or set resample_every: 0"
        )
    polys = run_polygons(config, data)
    return polys, polys.codes(data.fips)


def _uniforms(rng: np.random.Generator, n: int) -> tuple[np.ndarray, dict[str, Any]]:
    """What one draw of ``n`` events consumes from ``rng`` (as ``PolygonSampler.sample``),
    shape (n, 3), and the generator's state after it."""
    return rng.random((n, 3)), rng.bit_generator.state


@dataclass(frozen=True)
class _Ahead:
    """A draw started early: the stream's state before and after it, and its points."""

    before: dict[str, Any]
    after: dict[str, Any]
    points: PendingPoints


class LocationStream:
    """Draws of all event locations from one random stream (the same on every rank).

    Parameters
    ----------
    polygons
        The polygons events are drawn in.
    codes : (N,) int
        Polygon index of each event (:meth:`PolygonSampler.codes`).
    rng
        The chain's location stream; advanced by every :meth:`draw`.
    device
        Draw on the likelihood's OpenCL device (:mod:`hawkes_cli.engine.point_draw`): the same
        points from the same uniforms, left where the kernels read them. None: on the host.

    Notes
    -----
    Stateful by design (it owns a ``numpy`` generator); its whole state for a checkpoint is
    :attr:`last_state`.
    """

    def __init__(
        self,
        polygons: PolygonSampler,
        codes: np.ndarray,
        rng: np.random.Generator,
        device: DevicePointDraw | None = None,
    ) -> None:
        self.polygons = polygons
        self.codes = np.asarray(codes, dtype=np.int64)
        if self.codes.size and (self.codes.min() < 0 or self.codes.max() >= len(polygons)):
            raise ValueError(f"codes must lie in [0, {len(polygons)})")
        self.order = polygons.code_order(self.codes)  # the same events at every draw
        self.rng = rng
        self.device = device
        self._last_state: dict[str, Any] | None = None
        self._ahead: _Ahead | None = None
        self._uniforms: tuple[dict[str, Any], Future] | None = None  # the next's, on the worker

    @property
    def last_state(self) -> dict[str, Any] | None:
        """The generator's state before the last :meth:`draw` (None before any draw)."""
        return self._last_state

    def draw(self) -> tuple[np.ndarray, np.ndarray]:
        """New locations of all N events, uniform in each event's polygon (the draw
        :meth:`draw_ahead` started, when it is the one the stream is at).

        Returns
        -------
        x, y : (N,) float64
            Coordinates (coordinate units).
        """
        ahead, self._ahead = self._ahead, None
        self._last_state = self.rng.bit_generator.state
        if ahead is not None and self.device is not None and ahead.before == self._last_state:
            self.rng.bit_generator.state = ahead.after
            return self.device.take(ahead.points)
        r = self.rng.random((self.codes.size, 3))  # what PolygonSampler.sample consumes
        if self.device is not None:
            return self.device.draw(r)
        return self.polygons.place(self.codes, r, self.order)

    def draw_ahead(self) -> PendingPoints | None:
        """Start the next :meth:`draw` on the device now, from a copy of the stream, and
        return its pending points (None when draws are made on the host). The stream and
        :attr:`last_state` stay as they are until :meth:`draw` takes it. The uniforms of the
        draw after it are then made on the worker thread (:func:`~.engine.ahead.on_worker`;
        the same numbers, 10 ms of the main thread's time at 1M)."""
        if self.device is None:
            return None
        before = self.rng.bit_generator.state
        prefetched, self._uniforms = self._uniforms, None
        if prefetched is not None and prefetched[0] == before:
            r, after = prefetched[1].result()
        else:
            r, after = _uniforms(copy.deepcopy(self.rng), self.codes.size)
        points = self.device.enqueue(r)
        self._ahead = _Ahead(before, after, points)
        rng = copy.deepcopy(self.rng)
        rng.bit_generator.state = after
        self._uniforms = (after, on_worker(_uniforms, rng, self.codes.size))
        return points

    def rewind(self, state: Mapping[str, Any]) -> None:
        """Set the generator to ``state`` (a :attr:`last_state`): the next :meth:`draw`
        repeats the draw that followed it."""
        self._ahead = self._uniforms = None
        self.rng.bit_generator.state = dict(state)
