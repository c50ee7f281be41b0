"""One chain: set-up, resume, the iteration loop, commits and progress.

The pieces it ties together, each with one job:

* :class:`~hawkes_cli.posterior.LogPosterior` - priors + likelihood on the log scale, the
  sampler's ``log_density``; its :class:`~hawkes_cli.posterior.Density` parts are what the
  chain file records;
* :class:`~hawkes_cli.distributed.DistributedLikelihood` - rank 0's handle on the chain's
  collective work (likelihood, pinned pair sums, location draws, stop agreement), replayed by
  the other ranks in :func:`~hawkes_cli.distributed.serve`;
* :mod:`hawkes_cli.sampler` - the MH kernel (pure ``init``/``step`` over a state);
* :mod:`hawkes_cli.start` - the fast start of ``sampler.initial: auto``;
* :class:`~hawkes_cli.resample.LocationStream` - the cut-posterior location draws;
* :class:`~hawkes_cli.storage.ChainWriter` and :class:`~hawkes_cli.rundir.RunDir` - draws,
  atomic commits with a typed :class:`~hawkes_cli.rundir.Checkpoint`, progress.

All ranks of a chain run :func:`run_chain` together: rank 0 drives the sampler and writes the
chain file; the other ranks replay its collective calls. At every iteration boundary all ranks
agree on stopping (a float64 allreduce of their stop flags), so a signal that reaches any rank
stops the chain at the same place everywhere, after a commit.

Random numbers: ``SeedSequence(seed, spawn_key=(chain_id,))`` spawns two streams, one for the
sampler (used by rank 0 only) and one for the cut-posterior location draws (used identically by
every rank, so locations need no broadcast). Both states go into each checkpoint; a resumed
chain continues bit-for-bit, whatever the number of ranks or restarts.

Starting a fresh chain. With explicit ``sampler.initial`` values the chain starts at them
(data-scaled defaults for the others), jittered by its sampler stream. With ``initial: auto``
(the default) it first finds the posterior mode and its curvature
(:func:`~hawkes_cli.start.find_start`, searching on the scaled log-likelihood of a subsample
of ``start_subsample`` events drawn from the root ``SeedSequence(seed)``, so every chain finds
the same mode), then draws its own over-dispersed start around it from its sampler stream
(:func:`~hawkes_cli.start.overdispersed_starts`, so R-hat keeps its meaning). The tiered
sampler starts from the mode's covariance and jumps between the modes found. The result goes
into every checkpoint, and the start is committed at once (iteration 0, no draws): a resumed
chain rebuilds the same sampler without searching again.

The current state's density is held once: the sampler state's ``log_target`` and, beside it,
the :class:`~hawkes_cli.posterior.Density` of the same point (its log-likelihood and log-prior,
``log_target`` equal to the state's).

Pair passes. At every iteration boundary the current state's B and E are cached on every rank
(the tiered kind keeps ``n_cheap + 3`` B arrays, so that an iteration's new ``tau_t`` values
never evict the current one; after a truncation tightening drops the cached E, the current one
is recomputed at once). A resumed chain recomputes them before its first iteration (counted
in :attr:`ChainOutcome.start_passes`, not in a draw's row), so the chain file's
``pair_passes`` column is the same as that of a chain never stopped.

Truncation cut-off. It adapts (tightens) during the fast start and the warm-up only: from the
first iteration after warm-up (or a resume there) it is fixed on every rank, so the target no
longer changes; a bound above ``engine.tolerance`` is then counted (in the checkpoint and
:class:`ChainOutcome`) and logged, not tightened.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import signal
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .config import Config
from .data import EventData, load_events, resolve_area
from .distributed import ChainRank, DistributedLikelihood, serve
from .engine import Likelihood, make_likelihood
from .errors import ConfigError, Interrupted, StorageError, UsageError
from .parallel import Comm, SerialComm
from .posterior import Density, LogPosterior, ScaledLikelihood, to_theta
from .resample import LocationStream, make_resampler
from .rundir import Checkpoint, Progress, RunDir
from .sampler import Sampler, SamplerState, StepInfo, make_sampler
from .shared_start import SharedStart, shared_start, start_key
from .start import StartResult, find_start, overdispersed_starts
from .storage import DRAW_FIELDS, ChainMeta, ChainWriter, sidecar_path
from .vocab import LAUNCHER_PID_ENV, PARAM_NAMES

if TYPE_CHECKING:
    from .geo import PolygonSampler

log = logging.getLogger(__name__)

__all__ = [
    "ChainOutcome",
    "ChainSetup",
    "StopFlag",
    "build_chain",
    "default_initial",
    "make_resampler",
    "resolve_area",
    "run_chain",
    "start_locations",
    "subsample_events",
]

#: ``spawn_key`` of the fast start's location draw (chains use their number, < 10,000).
START_LOCATIONS_KEY = 2**31 - 1
INIT_JITTER = 0.3  # sd of each chain's random start around the initial values, log scale
PROGRESS_SECONDS = 2.0
#: Data whose events outnumber their distinct times this many times over are on a day lattice
#: (a ``tau_t`` change then costs the fast start's cheap-coordinate polish no pair pass).
LATTICE_SHARE = 10
#: Search starts of ``tau_t`` besides the default (log-spaced from 1 day to the data's span).
N_TAU_STARTS = 5
#: Over-dispersed start draws tried (each must have a finite log posterior) before a chain
#: starts at the mode itself.
MAX_START_DRAWS = 20


class StopFlag:
    """Set by signal handlers (which do nothing else); read at iteration boundaries."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.signals: tuple[int, ...] = ()
        self.launcher: int | None = None  # the launcher's pid, watched (see install)

    def set(self, signum: int = 0, _frame: Any = None) -> None:
        self.signum = signum

    def __bool__(self) -> bool:
        if self.signum is None and self.launcher is not None and os.getppid() != self.launcher:
            log.warning("the launcher (pid %d) is gone; stopping", self.launcher)
            self.signum = signal.SIGHUP
        return self.signum is not None

    def requested(self) -> bool:
        """Whether a stop was requested, read anywhere (not only at a boundary): the fast start
        polls it between evaluations."""
        return StopFlag.__bool__(self)

    def install(self, signals: tuple[int, ...] | None = None) -> None:
        """Route SIGTERM, SIGINT, SIGHUP and SIGUSR1 (Slurm's warning signal) to :meth:`set`.

        A chain started by ``hawkes-run local`` (:data:`LAUNCHER_PID_ENV` set to its pid) also
        stops once its parent is no longer that process: the launcher died, however it died
        (its ``PR_SET_PDEATHSIG`` is the first line of defence, this the fallback).
        """
        self.signals = signals or (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)
        for sig in self.signals:
            signal.signal(sig, self.set)
        launcher = os.environ.get(LAUNCHER_PID_ENV, "")
        if launcher.isdigit():
            self.launcher = int(launcher)

    def reinstall(self) -> None:
        """Install again the handlers of :meth:`install` (an OpenCL driver may have taken one:
        PoCL claims SIGUSR1 when it lists devices)."""
        if self.signals:
            self.install(self.signals)


@dataclass(frozen=True)
class ChainOutcome:
    """How a call of :func:`run_chain` ended."""

    chain_id: int
    iteration: int  # next iteration to run (== iterations when finished)
    iterations: int
    draws_committed: int
    stopped: bool  # stopped early on request
    pair_passes: int = 0  # O(N^2) passes this call ran on this rank (background + trigger)
    loop_seconds: float = 0.0  # wall time of this call's iterations (set-up excluded)
    # passes before the first iteration (in pair_passes, in no row): the fast start (chain
    # likelihood; the subsample's apart) and the first evaluation, or a resume's recomputation
    # of the current state. With thin 1, pair_passes - start_passes = this call's rows' sum.
    start_passes: int = 0
    # after warm-up (the truncation cut-off fixed), over the chain's whole life (checkpointed):
    # evaluations whose truncation bound exceeded engine.tolerance, and the largest bound (nats)
    bound_exceedances: int = 0
    worst_bound: float = 0.0

    @property
    def finished(self) -> bool:
        return self.iteration >= self.iterations


def default_initial(data: EventData, area: float) -> dict[str, float]:
    """Data-scaled starting values (natural scale) for parameters the config leaves open."""
    span = float(data.time[-1] - data.time[0]) or 1.0
    return {
        "mu0": 0.5,
        "tau_t": span / 10.0,
        "xi0": 0.5,
        "sigma_x": math.sqrt(area) / 20.0,
        "sigma_t": span / 100.0,
    }


@dataclass(frozen=True)
class ChainSetup:
    """What one rank of a chain is built from (:func:`build_chain`).

    Attributes
    ----------
    config
        The run's configuration.
    chain_id
        0-based chain number.
    data
        The events (sorted by time).
    area
        Study-region area (coordinate units squared).
    initial
        Natural-scale starting values by name: the config's ``sampler.initial`` over
        :func:`default_initial` (before the chain's random jitter), or with ``initial: auto``
        :func:`default_initial`, where the mode search starts.
    rank
        This rank's share of the collective work (likelihood rows, location stream, stop
        flag).
    rng
        The sampler's random stream (rank 0 uses it; restored from checkpoints).
    """

    config: Config
    chain_id: int
    data: EventData
    area: float
    initial: Mapping[str, float]
    rank: ChainRank
    rng: np.random.Generator


def build_chain(config: Config, chain_id: int, comm: Comm, stop: StopFlag) -> ChainSetup:
    """Load the data and build this rank's likelihood, location stream and random streams.

    Every rank of the chain calls it (the engine's set-up may be collective).

    Parameters
    ----------
    config
        The run's configuration.
    chain_id
        0-based chain number (seeds ``SeedSequence(seed, spawn_key=(chain_id,))``).
    comm
        The chain's communicator; this rank evaluates its share of the rows.
    stop
        This rank's stop flag (read at iteration boundaries).
    """
    model = config.model.kind
    sc = config.sampler
    data = load_events(config.data.events, need_density=model == 2)
    area = resolve_area(config, data)
    initial = default_initial(data, area)
    if not sc.fast_start:
        initial |= dict(sc.initial)
    engine_options: dict[str, Any] = config.likelihood_options(area) | dict(
        comm=comm,
        # the truncated trigger's uneven row work is balanced at the initial lengthscales
        balance=(initial["sigma_x"], initial["sigma_t"]),
    )
    likelihood = make_likelihood(data, **engine_options)
    if sc.kind == "tiered":  # a new tau_t per move: keep the current B; new sigmas: its E
        likelihood.background_cache_size = sc.n_cheap + sc.n_expensive + 2
        likelihood.trigger_cache_size = sc.n_expensive + 1
    resampler = make_resampler(config, data)
    search_locations = None
    if sc.fast_start and resampler is not None:
        search_locations = functools.cache(functools.partial(start_locations, *resampler, sc.seed))
    subsample = None
    if sc.fast_start and data.n > sc.start_subsample:
        subsample = functools.partial(
            _subsample_likelihood,
            data,
            sc.start_subsample,
            sc.seed,
            engine_options,
            search_locations,
        )
    seq = np.random.SeedSequence(sc.seed, spawn_key=(chain_id,))
    mcmc_seq, loc_seq = seq.spawn(2)
    locations = None
    if resampler is not None:
        locations = LocationStream(*resampler, rng=np.random.default_rng(loc_seq))
    rank = ChainRank(
        likelihood,
        comm,
        locations=locations,
        stop=stop,
        subsample=subsample,
        search_locations=search_locations,
        file_locations=(data.x, data.y),
    )
    return ChainSetup(
        config=config,
        chain_id=chain_id,
        data=data,
        area=area,
        initial=initial,
        rank=rank,
        rng=np.random.default_rng(mcmc_seq),
    )


def subsample_events(data: EventData, n: int, seed: int) -> EventData:
    """``n`` events of ``data`` drawn without replacement, in time order.

    Drawn from the run's root ``SeedSequence(seed)`` (chains use its children), so every chain
    and every rank draws the same subsample.
    """
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    idx = np.sort(rng.choice(data.n, size=n, replace=False))

    def pick(values: np.ndarray | None) -> np.ndarray | None:
        return None if values is None else values[idx]

    return EventData(
        time=data.time[idx],
        x=data.x[idx],
        y=data.y[idx],
        density=pick(data.density),
        fips=pick(data.fips),
        attrs=data.attrs,
        source=f"{data.source} (subsample of {n} events)",
    )


def start_locations(
    polygons: PolygonSampler, codes: np.ndarray, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The one location draw the fast start searches on when the run redraws locations.

    Drawn from ``SeedSequence(seed, spawn_key=(START_LOCATIONS_KEY,))``: the same for every
    chain and rank of the run, and apart from every chain's own streams.

    Returns
    -------
    x, y : (N,) float64
        Coordinates (coordinate units), event ``n`` uniform in polygon ``codes[n]``.
    """
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(START_LOCATIONS_KEY,)))
    return polygons.sample(codes, rng)


def _subsample_likelihood(
    data: EventData,
    n: int,
    seed: int,
    engine_options: Mapping[str, Any],
    locations: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None,
) -> Likelihood:
    """This rank's share of the likelihood of :func:`subsample_events` (collective over the
    chain's ranks), with the chain's engine settings and observation window; of the events at
    ``locations()`` (the fast start's location draw) when given."""
    if locations is not None:
        x, y = locations()
        data = dataclasses.replace(data, x=x, y=y)
    options = dict(engine_options)
    if options.get("window_end") is None:  # the full data's window, not the subsample's
        options["window_end"] = float(data.time[-1])
    return make_likelihood(subsample_events(data, n, seed), **options)


def run_chain(
    config: Config,
    chain_id: int,
    *,
    comm: Comm | None = None,
    stop: StopFlag | None = None,
    overwrite: bool = False,
    on_progress: Callable[[dict], None] | None = None,
) -> ChainOutcome:
    """Run (or resume) chain ``chain_id`` of ``config`` to its end or until stopped.

    Parameters
    ----------
    config
        The run's configuration.
    chain_id
        0-based chain number (file ``chain-XX.h5`` in ``config.output.run_dir/chains``).
    comm
        The chain's communicator (its ranks split the likelihood rows).
    stop
        Stop flag (set by signal handlers); checked at every iteration boundary.
    overwrite
        Start afresh even if the chain file exists (otherwise resume from its checkpoint).
    on_progress
        Called on rank 0 every few seconds with the progress record.
    """
    comm = comm or SerialComm()
    stop = StopFlag() if stop is None else stop  # (a StopFlag is falsy until set)
    if not 0 <= chain_id < config.chains.count:
        raise UsageError(f"chain {chain_id} is out of range 0..{config.chains.count - 1}")
    setup = build_chain(config, chain_id, comm, stop)
    stop.reinstall()  # after the OpenCL driver started
    if comm.rank != 0:
        serve(setup.rank)
        return ChainOutcome(
            chain_id, 0, config.sampler.iterations, 0, bool(stop), setup.rank.pair_passes
        )
    # the run directory's config, so that `hawkes-run status` and `local` know the run
    RunDir.of(config).write_config(config, overwrite=overwrite)
    with DistributedLikelihood(setup.rank) as likelihood:
        return _drive(setup, likelihood, stop, overwrite, on_progress)


def _chain_meta(setup: ChainSetup) -> ChainMeta:
    """The chain file's identity and provenance; its ``kernel_sha256`` is the likelihood's
    :attr:`~hawkes_cli.engine.Likelihood.kernel_fingerprint` (every kernel source, build option
    and precision compiled; "" for the reference engine)."""
    cfg, sc = setup.config, setup.config.sampler
    return ChainMeta(
        chain_id=setup.chain_id,
        seed=sc.seed,
        model=cfg.model.kind,
        n_events=setup.data.n,
        iterations=sc.iterations,
        warmup=sc.warmup,
        thin=sc.thin,
        config_yaml=cfg.to_yaml(),
        config_sha256=cfg.sha256,
        kernel_sha256=setup.rank.likelihood.kernel_fingerprint,
        param_names=PARAM_NAMES,
        fields=DRAW_FIELDS,
        events_sha256=setup.data.digest(),
    )


def _drive(
    setup: ChainSetup,
    likelihood: DistributedLikelihood,
    stop: StopFlag,
    overwrite: bool,
    on_progress: Callable[[dict], None] | None,
) -> ChainOutcome:
    """Rank 0: open the chain file, start or resume, run the loop."""
    config, rank = setup.config, setup.rank
    posterior = LogPosterior.from_mapping(likelihood, config.priors)
    path = RunDir.of(config).chain_path(setup.chain_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    check = functools.partial(_check_record, setup, str(sidecar_path(path)))
    writer, payload = ChainWriter.open(path, _chain_meta(setup), overwrite=overwrite, check=check)
    try:
        passes0 = rank.pair_passes
        if payload is not None:
            where = f"checkpoint of {path}"
            checkpoint = Checkpoint.from_json(payload, where)
            start = _start_result(checkpoint, where)
            sampler = _make_sampler(config, posterior, start)
            state, current = _resume(setup, likelihood, posterior, checkpoint)
            first = checkpoint.iteration
            log.info("chain %d: resuming at iteration %d", setup.chain_id, first)
        else:
            start = _fast_start(setup, likelihood, posterior) if config.sampler.fast_start else None
            sampler = _make_sampler(config, posterior, start)
            state, current = _start(setup, posterior, sampler, start)
            first = 0
        loop = _Loop(setup, likelihood, posterior, sampler, writer, stop, on_progress, start)
        if payload is None and start is not None:
            loop.commit(state, current, 0)  # the search is never repeated
        return loop.run(state, current, first, rank.pair_passes - passes0)
    finally:
        writer.close()


def _check_record(setup: ChainSetup, where: str, record: Mapping[str, Any] | None) -> None:
    """Refuse to resume from a commit record whose checkpoint is damaged or does not fit the
    committed draws (called before the chain file is rewritten, so a refusal touches nothing).

    Every member the resume restores is tried on a scratch object first: the checkpoint's
    agreement with the draws (:meth:`Checkpoint.check_commit`), both random streams' states,
    the sampler state (its coordinates finite and of this model), the fast start.
    """
    if record is None or record.get("checkpoint") is None:
        if record is not None and record["draws"]:
            raise StorageError(
                f"{where}: {record['draws']} committed draws but no checkpoint to continue "
                "from; the checkpoint is damaged: restore it, or start over with --overwrite"
            )
        return
    sc = setup.config.sampler
    checkpoint = Checkpoint.from_json(record["checkpoint"], where)
    checkpoint.check_commit(
        record["draws"], record.get("last_iteration"), sc.iterations, sc.thin, where
    )
    for key in ("rng", "loc_rng"):
        state = getattr(checkpoint, key)
        if state is None:
            continue
        try:
            type(setup.rng.bit_generator)().state = dict(state)
        except (TypeError, ValueError, KeyError) as exc:
            raise StorageError(
                f"{where}: checkpoint member {key!r} is not a random generator state ({exc}); "
                "restore the checkpoint, or start over with --overwrite"
            ) from exc
    try:
        state = SamplerState.from_json(checkpoint.sampler)
        theta = np.asarray(state.theta, dtype=float)
        ok = theta.shape == (len(PARAM_NAMES),) and bool(np.all(np.isfinite(theta)))
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        ok, why = False, str(exc)
    else:
        why = f"theta {theta.tolist()}"
    if not ok:
        raise StorageError(
            f"{where}: checkpoint member 'sampler' is not a sampler state of this model ({why}); "
            "restore the checkpoint, or start over with --overwrite"
        )
    _start_result(checkpoint, where)


def _start_result(checkpoint: Checkpoint, where: str) -> StartResult | None:
    """The fast start recorded in ``checkpoint`` (None when the chain had none)."""
    if checkpoint.start is None:
        return None
    try:
        return StartResult.from_json(checkpoint.start)
    except ValueError as exc:
        raise StorageError(
            f"{where}: checkpoint member 'start' is damaged ({exc}); restore it, or start over "
            "with --overwrite"
        ) from exc


def _make_sampler(
    config: Config, posterior: LogPosterior, start: StartResult | None = None
) -> Sampler:
    """The config's MH kernel over the posterior's coordinates.

    The ``tiered`` kind is told which coordinates are cheap (:attr:`LogPosterior.cheap`: no
    trigger pass), gets ``n_cheap`` and ``jump_prob``, and jumps between the modes the fast
    start found (``start``).
    """
    sc = config.sampler
    options: dict[str, Any] = {}
    if sc.kind == "tiered":
        options = {
            "cheap": posterior.cheap,
            "n_cheap": sc.n_cheap,
            "n_expensive": sc.n_expensive,
            "jump_prob": sc.jump_prob,
            "jump_vectors": () if start is None else start.jump_vectors(),
        }
    return make_sampler(
        sc.kind,
        len(posterior.names),
        target_accept=sc.target_accept,
        initial_scale=sc.initial_scale,
        **options,
    )


def _fast_start(
    setup: ChainSetup, likelihood: DistributedLikelihood, posterior: LogPosterior
) -> StartResult:
    """``initial: auto``: the run's shared fast start (:mod:`hawkes_cli.shared_start`).

    The first chain of the run directory to get here searches (:func:`_search_start`) and
    writes the result; the others wait for it, read it and restore the truncation cut-off the
    search left, so their draws are those of a chain that searched itself.
    """
    config = setup.config

    def compute() -> SharedStart:
        result = _search_start(setup, likelihood, posterior)
        return SharedStart(result, setup.rank.truncation_state(), setup.chain_id)

    key = start_key(config.sha256, setup.rank.comm.size, setup.data)
    shared, reused = shared_start(
        RunDir.of(config).start_path,
        key,
        compute,
        chain_id=setup.chain_id,
        should_stop=lambda: _stop_requested(setup),
    )
    if reused:
        likelihood.restore(None, shared.truncation)
        log.info(
            "chain %d: fast start of chain %d reused (its search took %.1f s); mode %s",
            setup.chain_id,
            shared.chain_id,
            shared.result.seconds,
            _natural(shared.result.theta),
        )
    return shared.result


def _stop_requested(setup: ChainSetup) -> bool:
    stop = setup.rank.stop
    requested = getattr(stop, "requested", None)
    return bool(requested()) if callable(requested) else bool(stop)


def _stoppable(log_post: Callable[[np.ndarray], float], setup: ChainSetup) -> Callable:
    """``log_post`` that raises :class:`Interrupted` once this rank's stop flag is set, so a
    signal stops the fast start within one evaluation (nothing is committed before it ends)."""

    def evaluate(theta: np.ndarray) -> float:
        if _stop_requested(setup):
            raise Interrupted(
                f"chain {setup.chain_id}: stopped during the fast start; nothing was committed, "
                "run again to resume (the search starts over)"
            )
        return log_post(theta)

    return evaluate


def _search_start(
    setup: ChainSetup, likelihood: DistributedLikelihood, posterior: LogPosterior
) -> StartResult:
    """The posterior mode and its curvature (the same for every chain).

    Searched from :func:`default_initial` and from ``tau_t`` log-spaced from 1 day to the data's
    span, on the log-likelihood of a subsample scaled by ``N / n`` (on the chain's own
    posterior when the data have at most ``start_subsample`` events); curvature and polish on
    the full posterior. Every evaluation is collective.
    """
    config, data, rank = setup.config, setup.data, setup.rank
    n_sub = min(data.n, config.sampler.start_subsample)
    search = posterior
    if n_sub < data.n:
        search = LogPosterior(
            ScaledLikelihood(likelihood.subsample_loglik, data.n / n_sub), posterior.priors
        )
    span = float(data.time[-1] - data.time[0])
    tau_index = PARAM_NAMES.index("tau_t")
    tau_starts = np.log(np.geomspace(1.0, span, N_TAU_STARTS)) if span > 1.0 else ()
    # a tau_t change costs a background pass: O(U^2 + N) on a day lattice, a pair pass else
    lattice = np.unique(data.time).size * LATTICE_SHARE <= data.n
    cheap = tuple(i for i in posterior.cheap if i != tau_index or lattice)
    passes0, sub_passes0 = rank.pair_passes, rank.subsample_pair_passes
    # a run that redraws locations searches on one draw of them (so do its subsample's events)
    moved = likelihood.use_search_locations()
    try:
        result = find_start(
            _stoppable(posterior, setup),
            to_theta(setup.initial),
            subsample_log_post=_stoppable(search, setup),
            tau_index=tau_index,
            tau_starts=tau_starts,
            cheap=cheap,
        )
    except ValueError as exc:
        raise ConfigError(
            f"{config.source}: the fast start (sampler.initial: auto) found no point with a "
            f"finite log posterior ({exc}); set sampler.initial to starting values"
        ) from exc
    finally:
        if search is not posterior:
            likelihood.end_subsample()
        if moved:
            likelihood.use_file_locations()
    log.info(
        "chain %d: fast start in %.1f s: search %d evaluations on %s, %d cheap-coordinate and "
        "%d curvature evaluations on the full data; pair passes %d on the subsample, %d on the "
        "full data; %d mode(s), curvature from %s; mode %s, log posterior %.6g",
        setup.chain_id,
        result.seconds,
        result.n_sub_evals,
        f"a subsample of {n_sub} events" if search is not posterior else "the full data",
        result.n_cheap_evals,
        result.n_full_evals,
        rank.subsample_pair_passes - sub_passes0,
        rank.pair_passes - passes0,
        len(result.modes),
        result.hessian,
        _natural(result.theta),
        result.log_post,
    )
    return result


def _natural(theta: Any) -> dict[str, float]:
    """Natural-scale values by name of log-parameters ``theta``, rounded for messages."""
    values = np.exp(np.asarray(theta, dtype=float))
    return {n: float(f"{v:.6g}") for n, v in zip(PARAM_NAMES, values, strict=True)}


def _start(
    setup: ChainSetup, posterior: LogPosterior, sampler: Sampler, start: StartResult | None
) -> tuple[SamplerState, Density]:
    """A fresh chain's first state, from the sampler stream.

    Without a fast start: the initial values jittered. With one: an over-dispersed draw
    around the mode (:func:`overdispersed_starts`; redrawn while the log posterior is not
    finite, at most :data:`MAX_START_DRAWS` times, then the mode itself); the tiered sampler
    starts from the mode's covariance.
    """
    if start is None:
        theta0 = to_theta(setup.initial)
        theta0 = theta0 + INIT_JITTER * setup.rng.standard_normal(len(PARAM_NAMES))
        current = posterior.evaluate(theta0)
        if not current.finite:
            raise ConfigError(
                f"{setup.config.source}: the log posterior is not finite at the initial values "
                f"{_natural(theta0)}; set sampler.initial"
            )
        return sampler.init(theta0, current.log_target), current
    for _ in range(MAX_START_DRAWS):
        theta0 = overdispersed_starts(start, 1, setup.rng)[0]
        current = posterior.evaluate(theta0)
        if current.finite:
            break
    else:
        log.warning(
            "chain %d: no over-dispersed start with a finite log posterior in %d draws; "
            "starting at the mode",
            setup.chain_id,
            MAX_START_DRAWS,
        )
        theta0 = np.asarray(start.theta, dtype=float)
        current = posterior.evaluate(theta0)
    log.info("chain %d: starting at %s", setup.chain_id, _natural(theta0))
    if sampler.kind == "tiered":
        return sampler.init(theta0, current.log_target, cov=start.cov_matrix), current
    return sampler.init(theta0, current.log_target), current


def _resume(
    setup: ChainSetup,
    likelihood: DistributedLikelihood,
    posterior: LogPosterior,
    checkpoint: Checkpoint,
) -> tuple[SamplerState, Density]:
    """Continue from ``checkpoint``: sampler state, both random streams, truncation cut-off.

    A chain resumed at or after the end of warm-up keeps the checkpoint's cut-off fixed
    (:meth:`~hawkes_cli.distributed.ChainRank.fix_cutoff`, its counts of bounds above the
    tolerance continued). The current state's B and E are recomputed (their values are not
    used: the state's density is the checkpoint's), so that the iterations run the passes of a
    chain never stopped.
    """
    setup.rng.bit_generator.state = dict(checkpoint.rng)
    state = SamplerState.from_json(checkpoint.sampler)
    likelihood.restore(
        None if checkpoint.loc_rng is None else dict(checkpoint.loc_rng),
        None if checkpoint.truncation is None else dict(checkpoint.truncation),
    )
    if checkpoint.iteration >= setup.config.sampler.warmup:
        likelihood.fix_cutoff(checkpoint.bound_exceedances, checkpoint.worst_bound)
    posterior.evaluate(state.theta)
    return state, Density(state.log_target, checkpoint.loglik, checkpoint.logprior)


class _Tape:
    """The posterior as a sampler's ``log_density``, keeping each call's :class:`Density` in
    call order, so the new state's parts are those of call ``StepInfo.target_call``."""

    def __init__(self, posterior: LogPosterior) -> None:
        self.posterior = posterior
        self.calls: list[Density] = []

    def __call__(self, theta: np.ndarray) -> float:
        density = self.posterior.evaluate(theta)
        self.calls.append(density)
        return density.log_target

    def after(self, info: StepInfo, current: Density) -> Density:
        """The Density of the state a step ended in (``current`` if it did not move)."""
        return current if info.target_call < 0 else self.calls[info.target_call]


class _Loop:
    """Rank 0's iteration loop: boundary (pin, stop agreement), location redraw, sampler step,
    draw row, commit, progress."""

    def __init__(
        self,
        setup: ChainSetup,
        likelihood: DistributedLikelihood,
        posterior: LogPosterior,
        sampler: Sampler,
        writer: ChainWriter,
        stop: StopFlag,
        on_progress: Callable[[dict], None] | None,
        start: StartResult | None = None,
    ) -> None:
        self.setup = setup
        self.likelihood = likelihood
        self.posterior = posterior
        self.sampler = sampler
        self.writer = writer
        self.stop = stop
        self.on_progress = on_progress
        self.start = None if start is None else start.to_json()

    def run(
        self, state: SamplerState, current: Density, first: int, start_passes: int = 0
    ) -> ChainOutcome:
        """Iterations ``first`` .. the end (or a stop), committing every ``commit_every``.

        ``start_passes``: the pair passes this call ran before (reported in the outcome).
        """
        setup, writer, rank = self.setup, self.writer, self.setup.rank
        cfg, sc = setup.config, setup.config.sampler
        progress = _Progress(
            setup.chain_id, sc.iterations, first, cfg.output.run_dir, self.on_progress
        )
        it = first
        stopped = False
        t0 = time.perf_counter()
        while it < sc.iterations:
            if it >= sc.warmup and rank.adapt_cutoff:
                # end of warm-up: the target stays the same from here on (every rank)
                self.likelihood.fix_cutoff()
                if rank.truncation_state() is not None:
                    log.info(
                        "chain %d: warm-up over; truncation cut-off fixed at %s",
                        setup.chain_id,
                        rank.truncation_state(),
                    )
            self.posterior.pin(state.theta)
            if self.likelihood.boundary_stop():
                stopped = True
                break
            passes, tightenings = rank.pair_passes, rank.tightenings
            if sc.resample_every and it > 0 and it % sc.resample_every == 0:
                self.likelihood.redraw_locations()
                current = self.posterior.evaluate(state.theta)
                state = dataclasses.replace(state, log_target=current.log_target)
            tape = _Tape(self.posterior)
            state, info = self.sampler.step(state, tape, setup.rng, adapt=it < sc.warmup)
            current = tape.after(info, current)
            if rank.tightenings != tightenings:
                # the tightening dropped the cached E: recompute the current state's now (its
                # value is not used), so every boundary holds the current B and E
                self.posterior.evaluate(state.theta)
            if it % sc.thin == 0:
                row = self._row(it, state, current, info, rank.pair_passes - passes)
                writer.append(row)
            it += 1
            progress.step(info.accepted, current.loglik, writer.n_committed)
            if writer.n_pending >= cfg.output.commit_every:
                self.commit(state, current, it)
        self.commit(state, current, it)
        outcome = ChainOutcome(
            setup.chain_id,
            it,
            sc.iterations,
            writer.n_committed,
            stopped,
            rank.pair_passes,
            time.perf_counter() - t0,
            start_passes,
            rank.bound_exceedances,
            rank.worst_bound,
        )
        if rank.bound_exceedances:
            log.warning(
                "chain %d: %d evaluation(s) after warm-up had a truncation bound above "
                "engine.tolerance (%g nats; worst %.3g nats); their log-likelihood error may "
                "exceed the tolerance",
                setup.chain_id,
                rank.bound_exceedances,
                cfg.engine.tolerance,
                rank.worst_bound,
            )
        progress.write(current.loglik, writer.n_committed, "stopped" if stopped else "finished")
        if stopped:
            log.warning(
                "chain %d: stopped at iteration %d (signal %s); %d draws committed; run again "
                "to resume",
                setup.chain_id,
                it,
                self.stop.signum,
                writer.n_committed,
            )
        return outcome

    def _row(
        self, it: int, state: SamplerState, current: Density, info: StepInfo, passes: int
    ) -> dict[str, float | int]:
        """One row of the chain file (natural-scale parameters, then :data:`DRAW_FIELDS`);
        ``passes``: the pair passes of the iteration (rank 0's chain likelihood)."""
        row: dict[str, float | int] = dict(
            zip(PARAM_NAMES, np.exp(state.theta).tolist(), strict=True)
        )
        row.update(
            iteration=it,
            loglik=current.loglik,
            logprior=current.logprior,
            accepted=int(info.accepted),
            warmup=int(it < self.setup.config.sampler.warmup),
            coordinate=info.coordinate,
            scale=info.proposal_scale,
            pair_passes=passes,
            n_proposals=info.n_proposals,
            n_accepted=info.n_accepted,
            jump=int(info.jump_accepted) if info.jump_proposed else -1,
        )
        return row

    def commit(self, state: SamplerState, current: Density, iteration: int) -> None:
        """Make the buffered draws and the checkpoint at ``iteration`` durable together."""
        rank = self.setup.rank
        checkpoint = Checkpoint(
            iteration=iteration,
            sampler=state.to_json(),
            rng=self.setup.rng.bit_generator.state,
            loc_rng=rank.location_state,
            truncation=rank.truncation_state(),
            loglik=current.loglik,
            logprior=current.logprior,
            finished=iteration >= self.setup.config.sampler.iterations,
            start=self.start,
            bound_exceedances=rank.bound_exceedances,
            worst_bound=rank.worst_bound,
        )
        self.writer.commit(checkpoint.to_json())


class _Progress:
    """Rank 0's progress record: iteration, rate, acceptance, log-likelihood."""

    def __init__(self, chain_id, iterations, start, run_dir, callback) -> None:
        self.chain_id, self.iterations, self.start = chain_id, iterations, start
        self.run_dir = RunDir(run_dir)
        self.callback = callback
        self.t0 = self.last = time.monotonic()
        self.it = start
        self.accepted = 0

    def step(self, accepted: bool, loglik: float, committed: int) -> None:
        self.it += 1
        self.accepted += bool(accepted)
        now = time.monotonic()
        if now - self.last >= PROGRESS_SECONDS:
            self.last = now
            self.write(loglik, committed, "running")

    def write(self, loglik: float, committed: int, status: str) -> None:
        done = self.it - self.start
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        record = Progress(
            chain=self.chain_id,
            status=status,
            iteration=self.it,
            iterations=self.iterations,
            it_per_s=done / elapsed,
            acceptance=self.accepted / done if done else None,
            loglik=loglik,
            draws_committed=committed,
            host=socket.gethostname(),
            pid=os.getpid(),
            updated=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
        self.run_dir.write_progress(record)
        log.info(
            "chain %d: %d/%d  %.3g it/s  acc %.2f  loglik %.6g",
            self.chain_id,
            self.it,
            self.iterations,
            record.it_per_s,
            record.acceptance or 0.0,
            loglik,
        )
        if self.callback is not None:
            self.callback(record.to_json())
