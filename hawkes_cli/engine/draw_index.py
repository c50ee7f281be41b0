"""One location draw's grid indexes and row blocks on the device: the truncated path's stages
between the locations and the pass.

The truncated trigger (:mod:`.truncated`) reads the sources through a grid index of the
current locations and the rows in blocks, both made for the lengthscales and the cut-off
rounded up to the lattice (:func:`~.grid.lattice_up`). :class:`DrawIndex` owns what those
stages keep for the current draw (the locations' corner, the presence grid the blocks' levels
are read from, the device indexes and the uploaded blocks of the last lattice points) and the
worker that builds the next draw's (:class:`~.ahead.IndexAhead`); a new draw retires them.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from . import profile
from .ahead import IndexAhead, IndexInputs, blocks_for, index_for
from .device import DeviceEvents
from .grid import LATTICE_STEPS, lattice_up, level_kappas
from .grid_upload import DeviceBlocks, DeviceIndex, DevicePresence, index_arrays, upload_index

__all__ = ["BLOCK_WIDTH", "NEIGHBOUR_STEPS", "REACH", "DrawIndex", "neighbour_width"]

#: Indexes (and uploaded row blocks) kept per draw: the chain's current lattice point and one
#: other.
KEPT = 2
#: Longest time span of a row block, in units of ``sigma_t``.
BLOCK_WIDTH = 8.0
#: Row blocks bound cells up to this many cut-off radii exactly, beyond by the far sums.
REACH = 1.5
#: A ``sigma_t`` within this many lattice steps of the next lattice point (either way) has the
#: worker build the next draw's blocks there too (:meth:`DrawIndex.start_ahead`): a quarter of
#: a step is 1.1% of ``sigma_t``, about a 1M posterior's sd, so the chain's next proposals
#: often cross it (a bench chain's sigma_t of 91, 0.13 steps above 90.5, built blocks on the
#: main thread in half its iterations). Only where the device is not the CPU: on a CPU device
#: the worker's builds take cores from the kernels, and a 2-core PoCL chain at 1M ran 4-5%
#: slower in wall time with them (model 1, which never used them) for 0.01-0.02 s less
#: main-thread CPU (model 2) (``docs/speed.md``, *The compensator's edge sums on the device*).
NEIGHBOUR_STEPS = 0.25


def neighbour_width(sigma_t: float) -> float | None:
    """The row-block width of the ``sigma_t`` lattice point next to ``sigma_t``'s own
    (``BLOCK_WIDTH`` times the point below ``lattice_up(sigma_t)`` or the one above it,
    whichever ``sigma_t`` lies nearer) when it lies within :data:`NEIGHBOUR_STEPS` lattice
    steps of ``sigma_t``, else None."""
    up = lattice_up(sigma_t)
    above = LATTICE_STEPS * math.log2(up / sigma_t)  # steps from sigma_t up to its own point
    below = 1.0 - above  # and down to the point below it
    if min(above, below) >= NEIGHBOUR_STEPS:
        return None
    step = 2.0 ** (1.0 / LATTICE_STEPS)
    return BLOCK_WIDTH * (up * step if above < below else up / step)


class DrawIndex:
    """The current locations' device indexes and row blocks (module docstring).

    Parameters
    ----------
    events
        The events on the device; its float64 locations are the current draw's.
    inputs
        What the index and the blocks need besides the locations.
    weight_buffer, level_buffer
        The sources' weights (float64) and density levels (int32) on the device.
    floor : (L,) float64
        The smallest density of each level.
    """

    def __init__(
        self,
        events: DeviceEvents,
        inputs: IndexInputs,
        weight_buffer: Any,
        level_buffer: Any,
        floor: np.ndarray,
    ) -> None:
        self.events = events
        self.inputs = inputs
        self.ahead = IndexAhead(inputs)
        self._buf_wd, self._buf_level = weight_buffer, level_buffer
        self._floor = floor
        self._neighbours = events.device.info.kind != "cpu"  # see NEIGHBOUR_STEPS
        self.presence: DevicePresence | None = None
        self._indexes: OrderedDict[tuple[float, float], DeviceIndex] = OrderedDict()
        self._blocks: OrderedDict[tuple[float, float, float], DeviceBlocks] = OrderedDict()
        self.reset()

    def prepare(self, x: np.ndarray, y: np.ndarray, ready: Callable[[], Any]) -> None:
        """The next locations will be ``x``, ``y`` (see :meth:`.ahead.IndexAhead.expect`)."""
        self.ahead.expect(x, y, ready)

    def reset(self) -> None:
        """The events' locations changed: take the worker's builds made for them, if any, and
        retire the last draw's indexes and blocks."""
        self.x, self.y = self.events.x, self.events.y
        self.ahead.take(self.x, self.y)
        if self.presence is not None:  # freed on the worker when it builds
            self.ahead.retire(self.presence, self._indexes, self._blocks)
            self._indexes, self._blocks = OrderedDict(), OrderedDict()
        with profile.stage("presence"):
            self.presence = DevicePresence.build(
                self.events, self.x, self.y, self._buf_level, self.inputs.nlevels
            )
        self.x0, self.y0 = self.presence.x0, self.presence.y0  # the locations' smallest

    def start_ahead(self, sigma_x: float, sigma_t: float, kappa: float) -> None:
        """Have the worker build the next draw's index and blocks at this lattice point, and
        the blocks of the next ``sigma_t`` lattice point where ``sigma_t`` lies within
        :data:`NEIGHBOUR_STEPS` of it (:func:`neighbour_width`) and the device is not the
        CPU."""
        key = (lattice_up(sigma_x), lattice_up(kappa))
        self.ahead.start(key, BLOCK_WIDTH * lattice_up(sigma_t))
        other = neighbour_width(sigma_t) if self._neighbours else None
        if other is not None:
            self.ahead.start(key, other)

    def index(self, sigma_x: float, kappa: float) -> DeviceIndex:
        """The grid index for ``sigma_x`` and the cut-off ``kappa`` on the device, built for
        both rounded up to the lattice (cells at least the cut-off radius) and cached: every
        ``sigma_x`` and ``kappa`` of one lattice step share it, so a chain's proposals and the
        calibration's ladder reuse it."""
        key = (lattice_up(sigma_x), lattice_up(kappa))
        hit = self._indexes.get(key)
        if hit is not None:
            self._indexes.move_to_end(key)
            return hit
        built = self.ahead.index(key)  # on the worker while the last iteration ran
        if built is None:
            with profile.stage("grid index"):
                index = index_for(self.inputs, self.x, self.y, key)
                built = (index, index_arrays(index, self.inputs.weight))
        index = built[0]
        with profile.stage("index upload"):
            buffers = upload_index(
                self.events,
                *built,
                origin=(self.x0, self.y0),
                weight_buffer=self._buf_wd,
                floor=self._floor,
            )
        hit = DeviceIndex(index, buffers)
        self._indexes[key] = hit
        while len(self._indexes) > KEPT:
            self._indexes.popitem(last=False)
        return hit

    def blocks(self, di: DeviceIndex, sigma_x: float, sigma_t: float, kappa: float) -> DeviceBlocks:
        """Row blocks of the rows for the index ``di``, uploaded with their levels (cached; the
        same for every ``sigma_x``, ``kappa`` and ``sigma_t`` of one lattice step)."""
        kappa = lattice_up(kappa)
        key = (lattice_up(sigma_x), kappa, lattice_up(sigma_t))
        hit = self._blocks.get(key)
        if hit is not None:
            self._blocks.move_to_end(key)
            return hit
        hit = self.upload_blocks(self.rows(di, sigma_t), sigma_x, kappa)
        self._blocks[key] = hit
        while len(self._blocks) > KEPT:
            self._blocks.popitem(last=False)
        return hit

    def rows(self, di: DeviceIndex, sigma_t: float) -> np.ndarray:
        """The rows in blocks (:func:`~.ahead.blocks_for`; kept in ``di``, so the calibration's
        probe and the first evaluation share them). The blocks span up to
        :data:`BLOCK_WIDTH` ``sigma_t`` rounded up to the lattice (the width only decides
        which rows share one)."""
        width = BLOCK_WIDTH * lattice_up(sigma_t)
        rows = di.rows.get(width)
        if rows is not None:
            return rows
        rows = self.ahead.blocks(di.index, width)
        if rows is None:
            with profile.stage("row blocks"):
                rows = blocks_for(self.inputs, di.index, self.x, self.y, width)
        di.rows[width] = rows
        while len(di.rows) > KEPT:
            di.rows.pop(next(iter(di.rows)))
        return rows

    def upload_blocks(self, blocks: np.ndarray, sigma_x: float, kappa: float) -> DeviceBlocks:
        """Upload row blocks with the levels within reach of each, for cut-offs up to
        ``kappa`` and lengthscales up to ``sigma_x`` rounded up to the lattice (the kernel's
        reach per level is :data:`REACH` ``R_l``, see :mod:`.truncated`)."""
        reach = REACH * np.sqrt(2.0 * level_kappas(kappa, self.inputs.ceil) / self._floor)
        reach = reach * lattice_up(sigma_x)
        assert self.presence is not None
        with profile.stage("block levels"):  # on the device (grid.block_levels, same bits)
            rows = self.events.upload(blocks)
            near = self.presence.block_levels(self.events, rows, blocks.shape[0], reach)
        return DeviceBlocks(rows, near, blocks.shape[0])
