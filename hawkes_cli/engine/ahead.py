"""The next location draw's grid index and row blocks, built while the device runs this one.

The cut posterior's locations do not depend on the parameters, so a chain that redraws them
every iteration (``sampler.resample_every: 1``) can make the next draw as soon as the current
one is in use: :meth:`~hawkes_cli.resample.LocationStream.draw_ahead` starts it on the device,
and :class:`IndexAhead` sorts its points into the grid index and the row blocks of the chain's
current lengthscales on one worker thread (numpy, which releases the GIL in its sorts and
gathers), while the main thread drives this iteration's passes. When the draw is taken, the
truncated backend finds them ready. The worker builds them at the lattice point of the
iteration's first pass and at each other lattice point its later passes reach (a chain near a
lattice boundary crosses it back and forth); at any other, the backend builds them itself.

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
from typing import Any

import numpy as np

from ..errors import UsageError
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
from .grid_upload import IndexArrays, index_arrays

__all__ = ["IndexAhead", "IndexInputs", "blocks_for", "enabled", "index_for", "on_worker"]


def enabled() -> bool:
    """Whether chains that redraw every iteration build the next draw's index on the worker
    thread: unless the environment's :data:`~hawkes_cli.vocab.DRAW_AHEAD_ENV` is ``0``
    (A/B measurements; the draws are the same either way).

    Raises
    ------
    UsageError
        The variable holds something other than ``0`` or ``1``.
    """
    value = os.environ.get(DRAW_AHEAD_ENV, "1").strip() or "1"
    if value not in ("0", "1"):
        raise UsageError(
            f"environment variable {DRAW_AHEAD_ENV}={value!r}: expected 0 (build no index ahead) "
            "or 1 (the default); unset it or fix it"
        )
    return value == "1"


_LOCK = threading.Lock()
_EXECUTOR: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    """The process's one worker thread (made at first use; Python joins it at exit)."""
    global _EXECUTOR
    with _LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hawkes-ahead")
        return _EXECUTOR


def on_worker(fn: Callable[..., Any], *args: Any) -> Future:
    """Run ``fn(*args)`` on the worker thread, after what is queued there (work that must not
    touch the OpenCL queue, such as the next location draw's uniforms)."""
    return _executor().submit(fn, *args)


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


#: Lattice points (grid index and row-block width) built ahead per draw at most: the first
#: pass's and its ``sigma_t`` neighbour's (:meth:`~.draw_index.DrawIndex.start_ahead`), then
#: those the iteration's other passes reach (a chain whose proposals cross a lattice boundary
#: uses two each iteration).
MAX_BUILDS = 4
#: Things retired (:meth:`IndexAhead.retire`) kept for the worker to free at most: two draws'.
_RETIRED_KEPT = 8


@dataclass(frozen=True)
class _Job:
    """One build on the worker for the next draw's points: at ``key`` and ``width``."""

    key: tuple[float, float]
    width: float
    result: Future  # -> (GridIndex, IndexArrays, row blocks)


def _build(
    inputs: IndexInputs,
    x: np.ndarray,
    y: np.ndarray,
    ready: Callable[[], None],
    key: tuple[float, float],
    width: float,
    built: Future | None,
) -> tuple[GridIndex, IndexArrays, np.ndarray]:
    ready()  # the points' read from the device is complete
    if built is not None:  # the index of an earlier job at this key (done: one FIFO thread)
        index, arrays = built.result()[:2]
    else:
        with profile.worker_stage("grid index"):
            index = index_for(inputs, x, y, key)
            arrays = index_arrays(index, inputs.weight)
    with profile.worker_stage("row blocks"):
        rows = blocks_for(inputs, index, x, y, width)
    return index, arrays, rows


class IndexAhead:
    """A truncated backend's grid indexes and row blocks for its next locations, built on the
    worker thread (module docstring).

    The next draw's points are announced first (:meth:`expect`); the builds start at the
    backend's passes (:meth:`start`): the first at the first pass, at the chain's current
    state, then one for each other lattice point a later pass of the same draw reaches (up to
    :data:`MAX_BUILDS`), since a chain near a lattice boundary keeps crossing it.

    Parameters
    ----------
    inputs
        The backend's fixed inputs.
    """

    def __init__(self, inputs: IndexInputs) -> None:
        self.inputs = inputs
        self._expected: tuple[np.ndarray, np.ndarray, Callable[[], None]] | None = None
        self._building: tuple[np.ndarray, np.ndarray, Callable[[], None]] | None = None
        self._next: dict[tuple[tuple[float, float], float], _Job] = {}  # for _building
        self._now: dict[tuple[tuple[float, float], float], _Job] = {}  # for the set locations
        self._retired: list[object] = []  # the last locations' indexes, freed after a build

    def expect(self, x: np.ndarray, y: np.ndarray, ready: Callable[[], None]) -> None:
        """The next locations will be ``x``, ``y`` (arrays the caller will pass to :meth:`take`
        as they are; ``ready()`` returns once they hold the points)."""
        self._expected = (x, y, ready)

    def start(self, key: tuple[float, float], width: float) -> None:
        """Build the index at ``key = (sigma_x, kappa)`` (on the lattice) and the blocks of
        ``width`` time units for the next locations, unless built already or
        :data:`MAX_BUILDS` are."""
        if not (all(v > 0 for v in key) and width > 0):
            return
        if self._expected is not None:  # the first pass since the next draw was announced
            self._building, self._expected, self._next = self._expected, None, {}
        if self._building is None or (key, width) in self._next:
            return
        if len(self._next) >= MAX_BUILDS:
            return
        x, y, ready = self._building
        built = next((job.result for job in self._next.values() if job.key == key), None)
        future = _executor().submit(_build, self.inputs, x, y, ready, key, width, built)
        self._next[key, width] = _Job(key, width, future)
        if self._retired:  # freed on the worker once it has built this (the GIL is free then)
            _executor().submit(list.clear, self._retired)
            self._retired = []

    def retire(self, *things: object) -> None:
        """Free ``things`` (the last locations' grid indexes, row blocks and device buffers:
        tens of 1M-long arrays, 25 ms to free at 1M) on the worker after its next build, while
        the main thread waits for the device, when the locations just set were built ahead
        (a next build follows); else here and now. At most :data:`_RETIRED_KEPT` wait."""
        if self._now:
            self._retired.extend(things)
            del self._retired[:-_RETIRED_KEPT]

    def take(self, x: np.ndarray, y: np.ndarray) -> None:
        """The backend's locations are now ``x``, ``y``: use the builds started for these very
        arrays, if any."""
        mine = self._building is not None and self._building[0] is x and self._building[1] is y
        last, self._now = self._now, self._next if mine else {}
        self._building, self._next = None, {}
        self.retire(last)  # the last draw's builds
        if self._expected is not None and self._expected[0] is x:
            self._expected = None  # set before any pass started its build

    def index(self, key: tuple[float, float]) -> tuple[GridIndex, IndexArrays] | None:
        """The worker's index of the current locations at ``key`` and its arrays for the
        device, or None (none started for them, or at another key; then the caller builds
        them)."""
        job = next((job for job in self._now.values() if job.key == key), None)
        return None if job is None else job.result.result()[:2]

    def blocks(self, index: GridIndex, width: float) -> np.ndarray | None:
        """The worker's row blocks for ``index`` (the worker's own) and ``width``, or None."""
        for job in (j for j in self._now.values() if j.width == width):
            built, _, rows = job.result.result()
            if built is index:
                return rows
        return None
