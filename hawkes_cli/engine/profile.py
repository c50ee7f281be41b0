"""Where an iteration's seconds go: OpenCL kernel times, host CPU, transfers, per iteration.

Off unless the environment variable :data:`PROFILE_ENV` names a file when the process first
opens a device (:meth:`hawkes_cli.engine.device.Device.select`). Then:

* the command queue is opened with profiling enabled, and every kernel launch
  (:class:`~hawkes_cli.engine.launch.Kernel`) keeps its event: at the end of an iteration the
  device seconds of each kernel (``end - start`` of its profiling info) are summed by name;
* every upload (a buffer made from host memory) and every read back into host memory is
  counted with its bytes; a read blocks until the queue has run, so each is a
  synchronisation;
* host stages (:func:`stage`: the grid index, row blocks, a location draw, ...) are timed with
  the main thread's CPU clock (:func:`time.thread_time`, which leaves out the threads an
  OpenCL CPU driver runs kernels on, and the time the main thread waits);
* work a worker thread does for the next iteration (:mod:`.ahead`; :func:`worker_stage`) is
  timed with that thread's CPU clock and reported apart, as ``worker_stages`` and
  ``worker_cpu_s``, in the iteration in which it ends;
* :func:`iteration_end` appends one JSON object per iteration to the file (the chain loop
  calls it; ``benchmarks/bench_iteration.py`` summarises the file).

With profiling off every hook is one global read and returns at once.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Environment variable naming the JSON-lines file that per-iteration records go to.
PROFILE_ENV = "HAWKES_PROFILE"


@dataclass
class _Counters:
    """What one iteration did (mutable: reset by :func:`iteration_begin`)."""

    launches: list[tuple[str, Any]] = field(default_factory=list)
    uploads: int = 0
    bytes_up: int = 0
    reads: int = 0
    bytes_down: int = 0
    syncs: int = 0
    stages: dict[str, list[float]] = field(default_factory=dict)  # name -> [seconds, calls]
    worker: dict[str, list[float]] = field(default_factory=dict)  # the same, worker thread
    cpu0: float = 0.0
    wall0: float = 0.0


class _Recorder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.now = _Counters()


_ACTIVE: _Recorder | None = None
_CHECKED = False
_LOCK = threading.Lock()


def active() -> bool:
    """Whether profiling is on in this process (decided once, from :data:`PROFILE_ENV`)."""
    global _ACTIVE, _CHECKED
    if not _CHECKED:
        _CHECKED = True
        path = os.environ.get(PROFILE_ENV)
        _ACTIVE = _Recorder(Path(path)) if path else None
    return _ACTIVE is not None


def queue_properties(cl: Any) -> int:
    """Command-queue properties for a new queue: profiling when :func:`active`."""
    return cl.command_queue_properties.PROFILING_ENABLE if active() else 0


def launched(name: str, event: Any) -> None:
    """Keep the event of a launch of kernel ``name`` (its device time is read at the end)."""
    if _ACTIVE is not None:
        _ACTIVE.now.launches.append((name, event))


def uploaded(nbytes: int) -> None:
    """Count one host-to-device copy of ``nbytes`` bytes."""
    if _ACTIVE is not None:
        _ACTIVE.now.uploads += 1
        _ACTIVE.now.bytes_up += int(nbytes)


def read_back(nbytes: int, *, sync: bool = True) -> None:
    """Count one device-to-host copy of ``nbytes`` bytes (with ``sync``, a blocking one: a
    synchronisation)."""
    if _ACTIVE is not None:
        _ACTIVE.now.reads += 1
        _ACTIVE.now.bytes_down += int(nbytes)
        _ACTIVE.now.syncs += int(sync)


def synced() -> None:
    """Count one wait for the device that is not a blocking copy (a draw's points, taken)."""
    if _ACTIVE is not None:
        _ACTIVE.now.syncs += 1


@contextmanager
def _timed(name: str, table: str) -> Iterator[None]:
    """Add the calling thread's CPU seconds in the block to ``name`` of the iteration's
    ``table`` (``"stages"`` or ``"worker"``)."""
    if _ACTIVE is None:
        yield
        return
    c0 = time.thread_time()
    try:
        yield
    finally:
        seconds = time.thread_time() - c0
        with _LOCK:
            entry = getattr(_ACTIVE.now, table).setdefault(name, [0.0, 0])
            entry[0] += seconds
            entry[1] += 1


def stage(name: str) -> AbstractContextManager[None]:
    """Time a host stage with the main thread's CPU clock (nested stages count in both)."""
    return _timed(name, "stages")


def worker_stage(name: str) -> AbstractContextManager[None]:
    """Time a stage a worker thread runs (:mod:`.ahead`) with that thread's CPU clock."""
    return _timed(name, "worker")


def iteration_begin() -> None:
    """Start counting an iteration (drops what came before: set-up, the previous one)."""
    if _ACTIVE is not None:
        with _LOCK:
            _ACTIVE.now = _Counters(cpu0=time.thread_time(), wall0=time.perf_counter())


def _kernel_seconds(launches: list[tuple[str, Any]]) -> dict[str, list[float]]:
    """Device seconds and launches per kernel name (waits for each event)."""
    out: dict[str, list[float]] = {}
    for name, event in launches:
        event.wait()
        seconds = (event.profile.end - event.profile.start) * 1e-9
        entry = out.setdefault(name, [0.0, 0])
        entry[0] += seconds
        entry[1] += 1
    return out


def iteration_end(iteration: int, **extra: Any) -> dict[str, Any] | None:
    """Close the iteration's record, append it to the profile file and return it (None when
    profiling is off). ``extra``: fields the caller knows (trigger passes, a redraw)."""
    if _ACTIVE is None:
        return None
    now = _ACTIVE.now
    host = time.thread_time() - now.cpu0
    wall = time.perf_counter() - now.wall0
    kernels = _kernel_seconds(now.launches)
    record = {
        "iteration": int(iteration),
        "wall_s": wall,
        "host_cpu_s": host,
        "kernel_s": sum(v[0] for v in kernels.values()),
        "kernels": {k: {"seconds": v[0], "launches": v[1]} for k, v in sorted(kernels.items())},
        "uploads": now.uploads,
        "bytes_up": now.bytes_up,
        "reads": now.reads,
        "bytes_down": now.bytes_down,
        "syncs": now.syncs,
        "stages": {k: {"cpu_s": v[0], "calls": v[1]} for k, v in sorted(now.stages.items())},
        **extra,
    }
    with _LOCK:
        worker = dict(now.worker)
    record["worker_cpu_s"] = sum(v[0] for v in worker.values())
    record["worker_stages"] = {k: {"cpu_s": v[0], "calls": v[1]} for k, v in sorted(worker.items())}
    with open(_ACTIVE.path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    with _LOCK:
        _ACTIVE.now = _Counters(cpu0=time.thread_time(), wall0=time.perf_counter())
    return record


def reset() -> None:
    """Decide :func:`active` again from the environment at its next call (a process that
    starts another run with another :data:`PROFILE_ENV`)."""
    global _ACTIVE, _CHECKED
    _ACTIVE, _CHECKED = None, False
