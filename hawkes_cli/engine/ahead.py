"""The next location draw's grid index and row blocks, built while the device runs this one.

The cut posterior's locations do not depend on the parameters, so a chain that redraws them
every iteration (``sampler.resample_every: 1``) can make the next draw as soon as the current
one is in use: :meth:`~hawkes_cli.resample.LocationStream.draw_ahead` starts it on the device,
and :class:`IndexAhead` sorts its points into the grid index and the row blocks of the chain's
current lengthscales on one worker thread (numpy, which releases the GIL in its sorts and
gathers), while the main thread drives this iteration's passes. When the draw is taken, the
truncated backend finds them ready. The worker builds them at the lattice point of the
iteration's first pass, at those the last few draws' passes reached and at each other lattice
point this draw's later passes reach (a chain near a lattice boundary crosses it back and
forth); at any other, the backend builds them itself.

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
#: pass's, then the recent ones of :data:`RECENT_DRAWS`, then those the current draw's other
#: passes reach (a chain near a lattice boundary of ``sigma_x`` and of ``sigma_t`` may use
#: four, crossing back and forth).
MAX_BUILDS = 4
#: A point that the passes of one of the last this many draws reached is built ahead for the
#: next draw too when its grid index's key or its blocks' width scores :data:`SCORE_MIN` (a
#: chain whose proposals cross a boundary back and forth needs the point beyond it before it
#: crosses again). Only then: on a CPU device the worker's builds take cores from the kernels,
#: so a build nobody uses costs wall time.
RECENT_DRAWS = 4
#: A key's or a width's score: +1 for each build a pass had to make on the main thread
#: although the draw was built ahead, and for each such build ahead a pass used; times
#: :data:`SCORE_DECAY` at each draw. Two misses up to three draws apart score above
#: :data:`SCORE_MIN`, a one-off (a jump proposal's point) does not; a point used in 30% of
#: the draws keeps its builds.
SCORE_DECAY = 0.8
SCORE_MIN = 1.5
#: Things retired (:meth:`IndexAhead.retire`) kept for the worker to free at most: two draws'.
_RETIRED_KEPT = 8


@dataclass(frozen=True)
class _Job:
    """One build on the worker for the next draw's points: at ``key`` and ``width``."""

    key: tuple[float, float]
    width: float
    result: Future  # -> (GridIndex, IndexArrays, row blocks)
    recent: bool = False  # built for a recent point's score (:data:`RECENT_DRAWS`)


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
    state, with it those the passes of the last :data:`RECENT_DRAWS` draws reached (latest
    first) if a pass missed their index or blocks lately, then one for each other lattice
    point a later pass of the same draw reaches (up to :data:`MAX_BUILDS` in all), since a
    chain near a lattice boundary keeps crossing it.

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
        self._draws = 0  # draws whose builds started
        self._seen: dict[tuple[tuple[float, float], float], int] = {}  # point -> last draw
        self._score: dict[tuple[float, float] | float, float] = {}  # key or width (SCORE_MIN)

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
        first = self._expected is not None  # the first pass since the next draw was announced
        if first:
            self._building, self._expected, self._next = self._expected, None, {}
            self._draws += 1
        self._seen[key, width] = self._draws
        if self._building is None:
            return
        self._submit(key, width)
        if first:
            self._submit_recent()
        if self._retired:  # freed on the worker once it has built this (the GIL is free then)
            _executor().submit(list.clear, self._retired)
            self._retired = []

    def _submit_recent(self) -> None:
        """Queue the points the last draws' passes reached whose index or blocks a pass built
        on the main thread lately, latest first (:data:`RECENT_DRAWS`)."""
        score = self._score
        self._seen = {p: d for p, d in self._seen.items() if self._draws - d <= RECENT_DRAWS}
        for point, _ in sorted(self._seen.items(), key=lambda item: -item[1]):
            if max(score.get(point[0], 0.0), score.get(point[1], 0.0)) >= SCORE_MIN:
                self._submit(*point, recent=True)
        self._score = {k: SCORE_DECAY * v for k, v in score.items() if v > 0.05}

    def _submit(self, key: tuple[float, float], width: float, recent: bool = False) -> None:
        """Queue the build at ``key`` and ``width`` for the next locations, unless queued
        already or :data:`MAX_BUILDS` are (``recent``: for its score alone)."""
        if (key, width) in self._next or len(self._next) >= MAX_BUILDS:
            return
        assert self._building is not None
        x, y, ready = self._building
        built = next((job.result for job in self._next.values() if job.key == key), None)
        future = _executor().submit(_build, self.inputs, x, y, ready, key, width, built)
        self._next[key, width] = _Job(key, width, future, recent)

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
        if job is None or job.recent:
            self._count(key)  # a miss, or a use of a build for the score
        return None if job is None else job.result.result()[:2]

    def blocks(self, index: GridIndex, width: float) -> np.ndarray | None:
        """The worker's row blocks for ``index`` (the worker's own) and ``width``, or None."""
        for job in (j for j in self._now.values() if j.width == width):
            built, _, rows = job.result.result()
            if built is index:
                if job.recent:
                    self._count(width)
                return rows
        # a miss of the blocks alone when the index is the worker's (done: it is in use), else
        # the index's own miss counted
        jobs = self._now.values()
        if any(j.result.done() and j.result.result()[0] is index for j in jobs):
            self._count(width)
        return None

    def _count(self, what: tuple[float, float] | float) -> None:
        """Score a key or width (:data:`SCORE_DECAY`): a pass builds its index or blocks on the
        main thread although the draw was built ahead, or uses a build made for its score."""
        if self._now:
            self._score[what] = self._score.get(what, 0.0) + 1.0
