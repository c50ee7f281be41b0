"""What ``hawkes-run devices --bench`` measured (frozen records), the projected seconds per
MCMC iteration (:func:`project`) and the report as text (:func:`render`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..vocab import COVID_N_EXPENSIVE, DEFAULT_ITERATIONS, DEFAULT_JUMP_PROB, DEFAULT_N_CHEAP

#: Timed evaluations of each cheap kind (their mean is reported).
CHEAP_REPEATS = 3
#: On a CPU device the exact pass is timed on at most this many events (about 3 s on 2 cores;
#: at 1M it takes 270 s there) and projected to N by (N/n)^2.
EXACT_CPU_MAX = 100_000


@dataclass(frozen=True)
class KernelTime:
    """One kernel's device seconds in a pass (OpenCL profiling events, ``end - start``)."""

    name: str
    seconds: float
    launches: int


@dataclass(frozen=True)
class PassTiming:
    """One timed evaluation (or the mean of a few).

    Attributes
    ----------
    label : str
        What was timed, e.g. ``"truncated"``.
    n : int
        Events it ran on.
    wall_s : float
        Wall-clock seconds of the evaluation.
    host_s : float
        The main thread's CPU seconds (host work; on a CPU device the kernels run on the
        driver's threads, not in it).
    kernel_s : float or None
        Device seconds of all kernels (None: profiling was not on for the device's queue).
    kernels : tuple of KernelTime
        By kernel name, largest first.
    bytes_up, bytes_down : int or None
        Bytes copied to and from the device.
    syncs : int or None
        Blocking reads (each waits for the queue).
    trigger_passes, background_passes : float
        Pair passes the evaluation ran.
    loglik : float
        The log-likelihood (nats).
    error_bound : float
        The truncation's rigorous bound (nats; 0 for the exact kernels).
    """

    label: str
    n: int
    wall_s: float
    host_s: float
    kernel_s: float | None
    kernels: tuple[KernelTime, ...] = ()
    bytes_up: int | None = None
    bytes_down: int | None = None
    syncs: int | None = None
    trigger_passes: float = 0.0
    background_passes: float = 0.0
    loglik: float = math.nan
    error_bound: float = 0.0


@dataclass(frozen=True)
class Projection:
    """Seconds per iteration of the shipped tiered sampler, from measured evaluations:
    ``seconds = n_expensive * expensive_s + (n_cheap + jump_prob) * cheap_s``.

    Attributes
    ----------
    n_expensive, n_cheap : int
        Moves per iteration (``sampler.n_expensive``, ``sampler.n_cheap``).
    jump_prob : float
        Probability of the mode-jumping move (one more cheap evaluation).
    expensive_s : float
        Wall seconds of the truncated pass (new sigma_x, sigma_t, tau_t).
    cheap_s : float
        Mean wall seconds of an evaluation at a new tau_t (mu0, xi0 new too).
    seconds : float
        The projected wall seconds per iteration.
    kernel_s, host_s : float or None
        The same sum over the kernel and host parts.
    """

    n_expensive: int
    n_cheap: int
    jump_prob: float
    expensive_s: float
    cheap_s: float
    seconds: float
    kernel_s: float | None
    host_s: float

    #: The sum :func:`project` computes.
    FORMULA = "n_expensive x truncated + (n_cheap + jump_prob) x tau_t change"

    @property
    def arithmetic(self) -> str:
        """The sum with the measured numbers, and its result."""
        return (
            f"{self.n_expensive} x {self.expensive_s:.4g} + ({self.n_cheap} + "
            f"{self.jump_prob:g}) x {self.cheap_s:.4g} = {self.seconds:.4g} s"
        )


@dataclass(frozen=True)
class NodeBench:
    """What :func:`run_bench` measured on one device.

    Attributes
    ----------
    host : str
        The machine's name.
    cores : int
        CPU cores this process may use.
    load : float or None
        The machine's 1-minute load average when the bench started (None: unknown); above
        zero, other work shared the cores and the host seconds.
    device : str
        ``"P:D name (platform)"``.
    kind : str
        ``gpu``, ``cpu``, ...
    n, model : int
        Events and model.
    precision : str
    tolerance : float
        The truncated pass's tolerance (nats).
    edge : str
        The edge correction timed (``censored``, or ``none`` and why).
    data_s, region_s : float
        Seconds generating the events and building the study region.
    warmup_s : float
        Seconds of the truncated likelihood's build and first evaluation (programs, cut-off
        calibration, grids, edge-mass lattice).
    truncated : PassTiming
    exact : PassTiming
        Timed at ``exact.n`` events (``< n``: projected by ``(n / exact.n)^2``).
    tau_change, weights_change : PassTiming
        Means of :data:`CHEAP_REPEATS` evaluations at a new tau_t (mu0, xi0 too) and at new
        mu0, xi0 alone.
    projection : Projection
    """

    host: str
    cores: int
    load: float | None
    device: str
    kind: str
    n: int
    model: int
    precision: str
    tolerance: float
    edge: str
    data_s: float
    region_s: float
    warmup_s: float
    truncated: PassTiming
    exact: PassTiming
    tau_change: PassTiming
    weights_change: PassTiming
    projection: Projection

    @property
    def exact_scale(self) -> float:
        """``(n / exact.n)^2``: the factor from the exact pass as timed to ``n`` events."""
        return (self.n / self.exact.n) ** 2

    @property
    def exact_projected_s(self) -> float:
        """Wall seconds of the exact pass at ``n`` events (measured, or projected)."""
        return self.exact.wall_s * self.exact_scale


def project(
    truncated: PassTiming,
    tau_change: PassTiming,
    *,
    n_expensive: int = COVID_N_EXPENSIVE,
    n_cheap: int = DEFAULT_N_CHEAP,
    jump_prob: float = DEFAULT_JUMP_PROB,
) -> Projection:
    """Seconds per tiered iteration (defaults: the shipped covid configs'): ``n_expensive``
    truncated passes (each moves sigma_x, sigma_t and, along their regression, tau_t) plus
    ``n_cheap + jump_prob`` evaluations at a new tau_t (every cheap move and the mode jump move
    mu0, tau_t and xi0 together)."""
    cheap_n = n_cheap + jump_prob

    def total(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else n_expensive * a + cheap_n * b

    seconds = n_expensive * truncated.wall_s + cheap_n * tau_change.wall_s
    return Projection(
        n_expensive=n_expensive,
        n_cheap=n_cheap,
        jump_prob=jump_prob,
        expensive_s=truncated.wall_s,
        cheap_s=tau_change.wall_s,
        seconds=seconds,
        kernel_s=total(truncated.kernel_s, tau_change.kernel_s),
        host_s=n_expensive * truncated.host_s + cheap_n * tau_change.host_s,
    )


def _kernel_list(t: PassTiming, most: int = 3) -> str:
    """``name seconds, ...`` of the largest kernels (launches when not one)."""
    shown = [
        f"{k.name} {k.seconds:.2g} s" + (f" ({k.launches} launches)" if k.launches != 1 else "")
        for k in t.kernels[:most]
    ]
    if not shown:
        return "none" if t.kernel_s is not None else "n/a (no profiling events)"
    more = len(t.kernels) - most
    return ", ".join(shown) + (f", {more} more" if more > 0 else "")


def _row(t: PassTiming, note: str = "") -> str:
    """One line of the passes' table (seconds, megabytes, counts)."""

    def opt(value: float | None, scale: float, fmt: str) -> str:
        return "n/a" if value is None else format(value / scale, fmt)

    return (
        f"{t.label:<15}{t.n:>10,}{t.wall_s:>10.4f}{opt(t.kernel_s, 1, '.4f'):>10}"
        f"{t.host_s:>10.4f}{opt(t.bytes_up, 1e6, '.1f'):>8}{opt(t.bytes_down, 1e6, '.1f'):>8}"
        f"{opt(t.syncs, 1, '.0f'):>6}{t.trigger_passes:>5.3g}{t.background_passes:>4.3g}"
        + (f"  {note}" if note else "")
    )


#: The passes' table header, aligned with :func:`_row`.
_HEADER = (
    f"{'pass':<15}{'events':>10}{'wall s':>10}{'kernel s':>10}{'host s':>10}{'MB up':>8}"
    f"{'MB down':>8}{'syncs':>6}{'trig':>5}{'bg':>4}"
)


def _exact_lines(r: NodeBench) -> list[str]:
    """The exact pass against the truncated one: projected to ``n``, or their difference."""
    exact, trunc = r.exact, r.truncated
    if exact.n < r.n:
        lines = [
            f"  exact at {r.n:,} events: {r.exact_projected_s:.4g} s projected (wall at "
            f"{exact.n:,} x (N/n)^2 = x{r.exact_scale:.4g}; a CPU",
            f"  device times the exact pass on at most {EXACT_CPU_MAX:,} events)",
        ]
    else:
        lines = [
            f"  exact - truncated log-likelihood: {exact.loglik - trunc.loglik:.3g} nats "
            f"(truncation bound {trunc.error_bound:.3g})"
        ]
    speedup = r.exact_projected_s / trunc.wall_s
    projected = " (projected)" if exact.n < r.n else ""
    return [*lines, f"  truncated is {speedup:.3g}x faster than exact{projected}"]


def render(r: NodeBench) -> list[str]:
    """The report as lines of text (one screen: about 30 lines of at most about 100
    characters)."""
    trunc, pr = r.truncated, r.projection
    region = f", region built in {r.region_s:.1f} s" if r.edge.startswith("censored") else ""
    split = f"host {pr.host_s:.3g} s"
    if pr.kernel_s is not None:
        split = f"kernels {pr.kernel_s:.3g} s, {split}"
    hours = pr.seconds * DEFAULT_ITERATIONS / 3600.0
    return [
        f"bench: model {r.model}, {r.n:,} events, {r.precision}; host {r.host}, {r.cores} "
        f"cores" + ("" if r.load is None else f", load average {r.load:.2f} at the start"),
        f"  device: {r.device}",
        f"  events: US counties by population, three waves over 3 years, continuous times "
        f"({r.data_s:.1f} s)",
        f"  edge: {r.edge}{region}",
        f"  truncated likelihood's build and first evaluation (programs, cut-off, grids, edge "
        f"lattice): {r.warmup_s:.1f} s",
        "",
        _HEADER,
        _row(r.exact, "" if r.exact.n == r.n else "(subsample)"),
        _row(trunc, f"({r.tolerance:g} nats)"),
        _row(r.tau_change, f"(mean of {CHEAP_REPEATS})"),
        _row(r.weights_change, f"(mean of {CHEAP_REPEATS})"),
        "  wall: elapsed; kernel: device seconds (OpenCL profiling events); host: the main "
        "thread's CPU",
        "  seconds; trig, bg: trigger and background pair passes",
        *_exact_lines(r),
        f"  kernels, exact:     {_kernel_list(r.exact)}",
        f"  kernels, truncated: {_kernel_list(trunc)}",
        "",
        f"projected per MCMC iteration of configs/covid-model{r.model}.yaml (tiered: "
        f"n_expensive {pr.n_expensive}, n_cheap {pr.n_cheap},",
        f"jump_prob {pr.jump_prob:g}), one chain on this one device:",
        f"  seconds = {pr.FORMULA}",
        f"          = {pr.arithmetic}",
        f"  of which {split}; {DEFAULT_ITERATIONS:,} iterations: {hours:.3g} h per chain",
        "  not projected: location redraws (resample_every: 1, as shipped) add host work (the "
        "draw, a new",
        "  grid, the edge mass), measured by benchmarks/bench_iteration.py; gpus_per_chain: 4 "
        "(as shipped)",
        "  splits a chain's rows, and so its pair passes, over 4 ranks",
    ]
