"""Time the engine on one device: :func:`run_bench` (``hawkes-run devices --bench``).

It generates ``n`` events on the US counties (:func:`.events.county_events`, a few seconds at
1M), builds the shipped configs' likelihood (OpenCL float32, background ``auto``,
``model.edge: censored`` on the county polygons) on one device and times, each after a warm-up
evaluation that compiles, calibrates the cut-off and builds the grids and edge-mass lattice:

* one **truncated** pass (``engine.tolerance`` 0.05 nats, the MCMC default) at lengthscales a
  tuned proposal away (sigma_x, sigma_t and tau_t new: a trigger and a background pass, as the
  tiered sampler's expensive move);
* one **exact** pass (tolerance 0) the same way; on a CPU device above
  :data:`~.report.EXACT_CPU_MAX` events it is timed on a random subsample of that size (its
  seconds are projected by ``(N / n)^2`` in the report: the exact kernel sums all pairs);
* the **cheap moves**: evaluations at a new tau_t (a background pass, with mu0 and xi0 new)
  and at new mu0, xi0 alone (no pass: the floor of a move).

Each timing comes from :mod:`hawkes_cli.engine.profile` (wall seconds, the main thread's CPU
seconds, each kernel's device seconds from OpenCL profiling events, bytes each way, blocking
reads), which must be on before the device's queue is opened: :func:`profiling`.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..data import EventData
from ..errors import HawkesError, UsageError
from ..model import Params
from ..vocab import DEFAULT_BACKGROUND, DEFAULT_PRECISION, DEFAULT_TOLERANCE
from .events import county_events, subsample
from .report import CHEAP_REPEATS, EXACT_CPU_MAX, KernelTime, NodeBench, PassTiming, project

log = logging.getLogger(__name__)

#: Events of the default bench (the 1M fit's size).
DEFAULT_EVENTS = 1_000_000
#: Fewest events a bench runs on (below, the fixed costs are all it would time).
MIN_EVENTS = 1_000
#: Starting values near the 1M posterior of each model
#: (``benchmarks/results/mission-m*-1000000-*``, as ``benchmarks/bench_iteration.py``).
START = {
    1: Params(mu0=0.5, tau_t=9000.0, xi0=1.07, sigma_x=0.046, sigma_t=97.0),
    2: Params(mu0=0.5, tau_t=9000.0, xi0=1.07, sigma_x=0.82, sigma_t=91.0),
}
#: Relative step of a timed move: a tuned chain's proposals at 1M are 0.1-0.3 % in log scale,
#: so the lengthscales stay in the grids' lattice cell (steps of 2^(1/16)) as in a chain.
STEP = 0.002
#: What a timed pass moves (an expensive move: the lengthscales, tau_t along its regression).
_LENGTHSCALES = ("tau_t", "sigma_x", "sigma_t")


@dataclass(frozen=True)
class _Setting:
    """What every timed likelihood shares."""

    model: int
    device: str | None
    region: Any
    profiled: bool


def out_problem(path: Path) -> str | None:
    """Why the report cannot be written to ``path``, or None: checked before minutes of
    timing, by creating (and removing) a file beside it, as the atomic writer will."""
    parent = path.parent
    if path.is_dir():
        return f"--out {path} is a folder; name a file"
    if not parent.is_dir():
        return f"--out {path}: the folder {parent} does not exist"
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as exc:
        return f"--out {path}: cannot write in {parent}: {exc.strerror or exc}"
    return None


@contextlib.contextmanager
def profiling() -> Iterator[None]:
    """Turn :mod:`~hawkes_cli.engine.profile` on for what runs inside (its records go to a
    temporary file), then restore the environment. It takes effect for a device queue opened
    inside; a queue this process opened before keeps running without profiling events
    (:func:`run_bench` then reports no kernel seconds)."""
    from ..engine import profile

    before = os.environ.get(profile.PROFILE_ENV)
    with tempfile.TemporaryDirectory(prefix="hawkes-nodebench-") as folder:
        os.environ[profile.PROFILE_ENV] = str(Path(folder) / "profile.jsonl")
        profile.reset()
        profile.active()
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(profile.PROFILE_ENV, None)
            else:
                os.environ[profile.PROFILE_ENV] = before
            profile.reset()


def _moved(p: Params, factor: float, names: tuple[str, ...]) -> Params:
    """``p`` with each of ``names`` multiplied by ``factor``."""
    return replace(p, **{k: getattr(p, k) * factor for k in names})


def _timed(lik: Any, p: Params, label: str, n: int, profiled: bool) -> PassTiming:
    """One evaluation of ``lik`` at ``p``, bracketed as a profiling record when ``profiled``
    (the device's queue records profiling events)."""
    from ..engine import profile

    trig0, back0 = lik.trigger_passes, lik.background_passes
    if profiled:
        profile.iteration_begin()
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    ev = lik.evaluate(p)
    wall, host = time.perf_counter() - wall0, time.thread_time() - cpu0
    rec = profile.iteration_end(0, label=label) if profiled else None
    kernels: tuple[KernelTime, ...] = ()
    if rec is not None:
        kernels = tuple(
            sorted(
                (
                    KernelTime(k, v["seconds"], int(v["launches"]))
                    for k, v in rec["kernels"].items()
                ),
                key=lambda k: -k.seconds,
            )
        )
    return PassTiming(
        label=label,
        n=n,
        wall_s=wall,
        host_s=host,
        kernel_s=None if rec is None else float(rec["kernel_s"]),
        kernels=kernels,
        bytes_up=None if rec is None else int(rec["bytes_up"]),
        bytes_down=None if rec is None else int(rec["bytes_down"]),
        syncs=None if rec is None else int(rec["syncs"]),
        trigger_passes=float(lik.trigger_passes - trig0),
        background_passes=float(lik.background_passes - back0),
        loglik=float(ev.loglik),
        error_bound=float(ev.error_bound),
    )


def _mean(label: str, runs: list[PassTiming]) -> PassTiming:
    """The mean of several timings of one kind (kernels by name)."""
    k = len(runs)

    def avg(name: str) -> Any:
        values = [getattr(r, name) for r in runs]
        return None if any(v is None for v in values) else sum(values) / k

    by_name: dict[str, list[float]] = {}
    for r in runs:
        for kt in r.kernels:
            entry = by_name.setdefault(kt.name, [0.0, 0.0])
            entry[0] += kt.seconds / k
            entry[1] += kt.launches / k
    kernels = tuple(
        sorted(
            (KernelTime(n, s, round(c)) for n, (s, c) in by_name.items()), key=lambda x: -x.seconds
        )
    )
    whole = {name: avg(name) for name in ("bytes_up", "bytes_down", "syncs")}
    return PassTiming(
        label=label,
        n=runs[0].n,
        wall_s=avg("wall_s"),
        host_s=avg("host_s"),
        kernel_s=avg("kernel_s"),
        kernels=kernels,
        **{name: None if v is None else round(v) for name, v in whole.items()},
        trigger_passes=avg("trigger_passes"),
        background_passes=avg("background_passes"),
        loglik=runs[-1].loglik,
        error_bound=runs[-1].error_bound,
    )


def _study_region(data: EventData) -> tuple[Any, str]:
    """The county polygons' region for the censored edge, or None and why not."""
    from ..regions import region_for

    try:
        return region_for(data), "censored (the county polygons)"
    except HawkesError as exc:
        return None, f"none: the county polygons could not be loaded ({exc})"


def _likelihood(data: EventData, s: _Setting, tolerance: float) -> Any:
    """The shipped configs' likelihood of ``data`` (truncated at ``tolerance``; 0: exact)."""
    from ..engine import make_likelihood

    return make_likelihood(
        data,
        model=s.model,
        area=float(data.attrs["area"]),
        engine="opencl",
        precision=DEFAULT_PRECISION,
        device=s.device,
        window_end=float(math.ceil(data.time[-1])),
        tolerance=tolerance,
        background=DEFAULT_BACKGROUND,
        region=s.region,
    )


def _warm_and_time(
    lik: Any, p0: Params, label: str, n: int, profiled: bool
) -> tuple[float, PassTiming]:
    """Warm up at ``p0`` (programs, cut-off calibration, grids, edge-mass lattice), fix the
    cut-off as a chain does after its warm-up, and time one pass a tuned proposal away (new
    sigma_x, sigma_t and tau_t). Returns the warm-up's seconds and the timing."""
    t0 = time.perf_counter()
    lik.evaluate(p0)
    warm_s = time.perf_counter() - t0
    lik.adapt_cutoff = False
    return warm_s, _timed(lik, _moved(p0, 1.0 + STEP, _LENGTHSCALES), label, n, profiled)


def _truncated(
    data: EventData, s: _Setting, tolerance: float
) -> tuple[float, PassTiming, PassTiming, PassTiming]:
    """The truncated likelihood's build and warm-up seconds, its timed pass, and the means of
    the cheap evaluations (a new tau_t with mu0 and xi0; mu0 and xi0 alone) after it."""
    t0 = time.perf_counter()
    lik = _likelihood(data, s, tolerance)
    build_s = time.perf_counter() - t0
    p0 = START[s.model]
    warm_s, truncated = _warm_and_time(lik, p0, "truncated", data.n, s.profiled)
    p = _moved(p0, 1.0 + STEP, _LENGTHSCALES)
    taus, weights = [], []
    for _ in range(CHEAP_REPEATS):
        p = _moved(p, 1.0 + STEP, ("mu0", "tau_t", "xi0"))
        taus.append(_timed(lik, p, "tau_t change", data.n, s.profiled))
    for j in range(1, CHEAP_REPEATS + 1):
        q = _moved(p, 1.0 + STEP * j, ("mu0", "xi0"))
        weights.append(_timed(lik, q, "mu0/xi0 change", data.n, s.profiled))
    return (
        build_s + warm_s,
        truncated,
        _mean("tau_t change", taus),
        _mean("mu0/xi0 change", weights),
    )


def _exact(data: EventData, s: _Setting) -> PassTiming:
    """The exact pass, timed after a warm-up."""
    lik = _likelihood(data, s, 0.0)
    return _warm_and_time(lik, START[s.model], "exact", data.n, s.profiled)[1]


def _queue_profiles(dev: Any) -> bool:
    """Whether the device's queue records profiling events and profiling is on."""
    import pyopencl as cl

    from ..engine import profile

    enabled = bool(dev.queue.properties & cl.command_queue_properties.PROFILING_ENABLE)
    if profile.active() and not enabled:
        log.warning("the device's queue was opened without profiling: no kernel seconds")
    return enabled and profile.active()


def _cores() -> int:
    """CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _check_request(n: int, model: int) -> None:
    """Raise :class:`UsageError` for too few events or an unknown model."""
    if int(n) != n or n < MIN_EVENTS:
        raise UsageError(f"--n must be a whole number of events >= {MIN_EVENTS:,}, got {n}")
    if model not in START:
        raise UsageError(f"--model must be 1 or 2, got {model}")


def run_bench(
    n: int = DEFAULT_EVENTS,
    *,
    model: int = 1,
    device: str | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    edge: bool = True,
    note: Callable[[str], None] = log.info,
) -> NodeBench:
    """Time the truncated and exact passes and the cheap moves at ``n`` events on ``device``
    and project an iteration of the shipped configs.

    Parameters
    ----------
    n
        Events (>= :data:`MIN_EVENTS`).
    model
        1 or 2.
    device
        As ``engine.device`` (None: the automatic choice); the process's device for it
        (:meth:`hawkes_cli.engine.device.Device.select`) reports kernel seconds when
        :func:`profiling` was on when it was opened.
    tolerance
        Of the truncated pass (nats).
    edge
        Time ``model.edge: censored`` on the county polygons (as shipped); False: none.
    note
        Called with a line before each stage (progress: minutes at 1M on a CPU).

    Raises
    ------
    UsageError
        ``n`` below :data:`MIN_EVENTS` or ``model`` not 1 or 2.
    hawkes_cli.errors.DeviceError
        No such device (or a pass failed on it).
    """
    from ..engine.device import Device

    _check_request(n, model)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None  # before our own work
    dev = Device.select(device)
    note(f"generating {n:,} events on the US counties")
    t0 = time.perf_counter()
    data, data_s = county_events(n, model=model), time.perf_counter() - t0
    t0 = time.perf_counter()
    region, edge_text = None, "none (not timed)"
    if edge:
        note("building the study region (county polygons)")
        region, edge_text = _study_region(data)
    region_s = time.perf_counter() - t0
    setting = _Setting(model, device, region, _queue_profiles(dev))
    note(f"truncated pass (tolerance {tolerance:g} nats) and cheap moves: build, warm-up, timed")
    warmup_s, truncated, tau_change, weights_change = _truncated(data, setting, tolerance)
    gc.collect()
    exact_data = data
    if dev.info.kind == "cpu" and n > EXACT_CPU_MAX:
        exact_data = subsample(data, EXACT_CPU_MAX)
    note(f"exact pass at {exact_data.n:,} events: build, warm-up, timed pass")
    exact = _exact(exact_data, setting)
    gc.collect()
    return NodeBench(
        host=socket.gethostname(),
        cores=_cores(),
        load=load,
        device=f"{dev.info.ident} {dev.info.name} ({dev.info.platform})",
        kind=dev.info.kind,
        n=n,
        model=model,
        precision=DEFAULT_PRECISION,
        tolerance=tolerance,
        edge=edge_text,
        data_s=data_s,
        region_s=region_s,
        warmup_s=warmup_s,
        truncated=truncated,
        exact=exact,
        tau_change=tau_change,
        weights_change=weights_change,
        projection=project(truncated, tau_change),
    )
