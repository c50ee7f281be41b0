"""The next location draw's grid index and row blocks, built while the device runs this one.

The cut posterior's locations do not depend on the parameters, so a chain that redraws them
every iteration (``sampler.resample_every: 1``) can make the next draw as soon as the current
one is in use: :meth:`~hawkes_cli.resample.LocationStream.draw_ahead` starts it on the device,
and :class:`IndexAhead` sorts its points into the grid index and the row blocks of the chain's
current lengthscales on one worker thread (numpy, which releases the GIL in its sorts and
gathers), while the main thread drives this iteration's passes. When the draw is taken, the
truncated backend finds them ready, unless the lengthscales or the cut-off moved to another
lattice point, where it builds them itself as before.

Both paths build with the same pure functions (:func:`index_for`, :func:`blocks_for`) from the
same inputs, so a chain is the same bit for bit with or without the worker
(``tests/test_runner.py``). The worker only reads arrays nobody writes while it runs (the new
draw's points, once their read from the device is complete, and the backend's fixed arrays);
it never touches the OpenCL queue.

On a GPU node this takes the grid index and the row blocks (0.2-0.3 s of host time per 1M
iteration on the H200's host, :file:`benchmarks/results/iteration-h200-2026-11-28.txt`) off
the path the GPU waits on; on a CPU device the work moves to a thread beside the OpenCL
driver's, with the same total.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..vocab import DRAW_AHEAD_ENV
from . import profile
from .grid import (
    EXPAND_MIN,
    GridIndex,
    build_index,
    grouping_level,
    level_kappas,
    row_blocks,
    row_groups,
)

__all__ = ["IndexAhead", "IndexInputs", "blocks_for", "enabled", "index_for"]


def enabled() -> bool:
    """Whether chains that redraw every iteration build the next draw's index on the worker
    thread: unless the environment's :data:`~hawkes_cli.vocab.DRAW_AHEAD_ENV` is ``0``
    (A/B measurements; the draws are the same either way)."""
    return os.environ.get(DRAW_AHEAD_ENV, "1").strip() != "0"


_LOCK = threading.Lock()
_EXECUTOR: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    """The process's one worker thread (made at first use; Python joins it at exit)."""
    global _EXECUTOR
    with _LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hawkes-ahead")
        return _EXECUTOR


@dataclass(frozen=True)
class IndexInputs:
    """What a truncated backend's grid index and row blocks need besides the locations (all
    fixed for the backend's life).

    Attributes
    ----------
    level : (N,) int64
        Density level of each source (:func:`~.grid.source_levels`).
    nlevels : int
    r_unit : float
        Level-0 radius unit.
    weight : (N,) float64
        Each source's density (ones for model 1).
    ceil : (L,) float64
        Largest density of each level.
    time : (N,) float64
        Event times, sorted.
    span : float
        ``time[-1] - time[0]``.
    rows : (int, int)
        The backend's rows ``[row_start, row_stop)``.
    """

    level: np.ndarray
    nlevels: int
    r_unit: float
    weight: np.ndarray
    ceil: np.ndarray
    time: np.ndarray
    span: float
    rows: tuple[int, int]


def index_for(
    inputs: IndexInputs, x: np.ndarray, y: np.ndarray, key: tuple[float, float]
) -> GridIndex:
    """The grid index of the locations ``x``, ``y`` (each (N,) float64) for ``key = (sigma_x,
    kappa)``, both already on the lattice (:func:`~.grid.build_index` with expansion boxes)."""
    return build_index(
        x,
        y,
        inputs.level,
        inputs.nlevels,
        inputs.r_unit,
        key[0],
        level_kappas(key[1], inputs.ceil),
        weight=inputs.weight,
        ceil=inputs.ceil,
        expand_min=EXPAND_MIN,
    )


def blocks_for(
    inputs: IndexInputs, index: GridIndex, x: np.ndarray, y: np.ndarray, width: float
) -> np.ndarray:
    """The row blocks of the backend's rows for ``index`` and blocks ``width`` time units
    wide, rows of dense levels grouped by the cells of :func:`~.grid.grouping_level`
    (:func:`~.grid.row_blocks`), shape (nblocks, 16), int32."""
    g = grouping_level(index, x, y, inputs.level, inputs.span, width)
    group = row_groups(index, x, y, inputs.level, g) if g > 0 else None
    return row_blocks(index, inputs.time, *inputs.rows, width, group)


@dataclass(frozen=True)
class _Job:
    """One draw's build on the worker: for the points ``x``, ``y`` at ``key`` and ``width``."""

    x: np.ndarray
    y: np.ndarray
    key: tuple[float, float]
    width: float
    result: Future  # -> (GridIndex, row blocks)


def _build(
    inputs: IndexInputs,
    x: np.ndarray,
    y: np.ndarray,
    ready: Callable[[], None],
    key: tuple[float, float],
    width: float,
) -> tuple[GridIndex, np.ndarray]:
    ready()  # the points' read from the device is complete
    with profile.worker_stage("grid index"):
        index = index_for(inputs, x, y, key)
    with profile.worker_stage("row blocks"):
        rows = blocks_for(inputs, index, x, y, width)
    return index, rows


class IndexAhead:
    """A truncated backend's grid index and row blocks for its next locations, built on the
    worker thread (module docstring).

    The next draw's points are announced first (:meth:`expect`); the build starts at the
    backend's next pass (:meth:`start`), the first at the new current locations, so it is made
    for the lattice point of the chain's current state rather than of the last proposal.

    Parameters
    ----------
    inputs
        The backend's fixed inputs.
    """

    def __init__(self, inputs: IndexInputs) -> None:
        self.inputs = inputs
        self._expected: tuple[np.ndarray, np.ndarray, Callable[[], None]] | None = None
        self._next: _Job | None = None  # started for locations not yet set
        self._now: _Job | None = None  # started for the locations set now

    def expect(self, x: np.ndarray, y: np.ndarray, ready: Callable[[], None]) -> None:
        """The next locations will be ``x``, ``y`` (arrays the caller will pass to :meth:`take`
        as they are; ``ready()`` returns once they hold the points)."""
        self._expected = (x, y, ready)

    def start(self, key: tuple[float, float], width: float) -> None:
        """Build the index at ``key = (sigma_x, kappa)`` (on the lattice) and the blocks of
        ``width`` time units for the expected locations, if any are waiting."""
        if self._expected is None or not (all(v > 0 for v in key) and width > 0):
            return
        x, y, ready = self._expected
        self._expected = None
        future = _executor().submit(_build, self.inputs, x, y, ready, key, width)
        self._next = _Job(x, y, key, width, future)

    def take(self, x: np.ndarray, y: np.ndarray) -> None:
        """The backend's locations are now ``x``, ``y``: use the build started for these very
        arrays, if any (others stay for later)."""
        job = self._next
        if job is not None and job.x is x and job.y is y:
            self._now, self._next = job, None
        else:
            self._now = None
        if self._expected is not None and self._expected[0] is x:
            self._expected = None  # set before any pass started its build

    def index(self, key: tuple[float, float]) -> GridIndex | None:
        """The worker's index of the current locations at ``key``, or None (none started for
        them, or at another key; then the caller builds it)."""
        job = self._now
        if job is None or job.key != key:
            return None
        return job.result.result()[0]

    def blocks(self, index: GridIndex, width: float) -> np.ndarray | None:
        """The worker's row blocks for ``index`` (the worker's own) and ``width``, or None."""
        job = self._now
        if job is None or job.width != width or not job.result.done():
            return None
        built, rows = job.result.result()
        return rows if built is index else None
