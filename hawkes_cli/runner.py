"""One chain: data -> engine -> sampler loop -> storage, with a stop flag and exact resume.

All ranks of a chain run :func:`run_chain` together. Rank 0 drives the sampler and the chain
file; it tells the other ranks what to do with a broadcast command before each collective step
(evaluate at theta, redraw locations, iteration boundary, done), so the ranks never disagree on
the sequence of likelihood evaluations. At every iteration boundary all ranks agree on stopping
(a float64 allreduce of their stop flags), so a signal that reaches any rank stops the chain at
the same place everywhere, after a commit.

Random numbers: ``SeedSequence(seed, spawn_key=(chain_id,))`` spawns two streams, one for the
sampler (used by rank 0 only) and one for the cut-posterior location draws (used identically by
every rank, so locations need no broadcast). Both states go into each checkpoint; a resumed
chain continues bit-for-bit, whatever the number of ranks or restarts.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .config import Config
from .data import EventData, load_events
from .engine import Likelihood, make_likelihood
from .errors import ConfigError, EventsError, UsageError
from .model import PARAM_NAMES, Params
from .parallel import Comm, SerialComm
from .rundir import Checkpoint, Progress, RunDir

log = logging.getLogger(__name__)

INIT_JITTER = 0.3  # sd of each chain's random start around the initial values, log scale
PROGRESS_SECONDS = 2.0


class StopFlag:
    """Set by signal handlers (which do nothing else); read at iteration boundaries."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.signals: tuple[int, ...] = ()

    def set(self, signum: int = 0, _frame: Any = None) -> None:
        self.signum = signum

    def __bool__(self) -> bool:
        return self.signum is not None

    def install(self, signals: tuple[int, ...] | None = None) -> None:
        """Route SIGTERM, SIGINT, SIGUSR1 (Slurm's warning signal) to :meth:`set`."""
        self.signals = signals or (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
        for sig in self.signals:
            signal.signal(sig, self.set)

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

    @property
    def finished(self) -> bool:
        return self.iteration >= self.iterations


def resolve_area(config: Config, data: EventData) -> float:
    """``data.area`` from the config, else the events file's ``area`` attribute."""
    if config.data.area is not None:
        return float(config.data.area)
    if "area" in data.attrs:
        return float(data.attrs["area"])
    raise ConfigError(
        f"{config.source}: data.area is not set and {data.source} has no 'area' attribute; "
        "set data.area (study-region area in coordinate units squared)"
    )


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


def make_resampler(config: Config, data: EventData):
    """The cut-posterior location sampler and each event's polygon code, or None if off.

    Polygons come from ``data.counties`` when set; else from the synthetic grid of simulated
    data; else from the polygon file ``hawkes-prep`` recorded in the events file (attribute
    ``counties``), which defaults to the package's 2016 Census counties.
    """
    if config.sampler.resample_every == 0:
        return None
    from .geo import PolygonSampler
    from .simulate import DensityGrid

    if data.fips is None:
        raise EventsError(
            f"{data.source}: sampler.resample_every > 0 needs a 'fips' column (each event's "
            "county); add it or set resample_every: 0"
        )
    if config.data.counties is None and "grid_nx" in data.attrs and "bounds" in data.attrs:
        nx, ny = int(data.attrs["grid_nx"]), int(data.attrs["grid_ny"])
        grid = DensityGrid(values=np.ones((ny, nx)), bounds=tuple(data.attrs["bounds"]))
        polys = PolygonSampler.from_grid(grid)
    else:
        from .counties import load_polygons

        path = config.data.counties
        if path is None and data.attrs.get("counties"):
            path = Path(data.attrs["counties"])
        if path is None and str(data.attrs.get("crs", "lonlat")) != "lonlat":
            raise ConfigError(
                f"{config.source}: {data.source} is in {data.attrs['crs']}, so the default "
                "lon/lat counties do not fit; set data.counties to polygons in that system "
                "(hawkes-prep hhs --polygons-out)"
            )
        polys = load_polygons(path)[0]
    return polys, polys.codes(data.fips)


class _Chain:
    """The state of one chain on one rank (internal to :func:`run_chain`)."""

    def __init__(self, config: Config, chain_id: int, comm: Comm) -> None:
        self.config = config
        self.chain_id = chain_id
        self.comm = comm
        model = config.model.kind
        self.data = load_events(config.data.events, need_density=model == 2)
        self.area = resolve_area(config, self.data)
        # the truncated trigger's uneven row work is balanced at the initial lengthscales
        init = default_initial(self.data, self.area) | dict(config.sampler.initial)
        self.lik: Likelihood = make_likelihood(
            self.data,
            model=model,
            area=self.area,
            engine=config.engine.backend,
            precision=config.engine.precision,
            comm=comm,
            device=config.engine.device,
            window_end=config.data.window_end,
            tolerance=config.engine.tolerance,
            background=config.engine.background,
            balance=(init["sigma_x"], init["sigma_t"]),
        )
        self.priors = [config.priors[name] for name in PARAM_NAMES]
        self.resampler = make_resampler(config, self.data)
        seq = np.random.SeedSequence(config.sampler.seed, spawn_key=(chain_id,))
        mcmc_seq, loc_seq = seq.spawn(2)
        self.rng = np.random.default_rng(mcmc_seq)
        self.loc_rng = np.random.default_rng(loc_seq)
        self.loc_state: dict | None = None  # loc_rng state before the last location draw
        self.last_parts = (math.nan, math.nan)  # (loglik, logprior) of the last evaluation

    # --- collective operations (every rank takes part; rank 0 announces them) -------------
    def announce(self, *command: Any) -> None:
        if self.comm.rank == 0 and self.comm.size > 1:
            self.comm.bcast(command)

    def evaluate(self, theta: np.ndarray) -> float:
        """Collective log-likelihood at log-parameters ``theta``."""
        p = Params(**dict(zip(PARAM_NAMES, np.exp(theta).tolist(), strict=True)))
        return self.lik.loglik(p)

    def redraw_locations(self) -> None:
        """Cut posterior: every event uniformly inside its polygon (same on every rank)."""
        polys, codes = self.resampler
        self.loc_state = self.loc_rng.bit_generator.state
        x, y = polys.sample(codes, self.loc_rng)
        self.lik.set_locations(x, y)

    def pin(self, theta) -> None:
        """Keep the current state's pair sums cached (see :meth:`Likelihood.pin`)."""
        self.lik.pin(Params(**dict(zip(PARAM_NAMES, np.exp(theta).tolist(), strict=True))))

    def boundary_stop(self, stop: StopFlag) -> bool:
        """All ranks agree whether to stop here (any rank's flag stops everyone)."""
        if self.comm.size == 1:
            return bool(stop)
        return self.comm.allreduce_sum(1.0 if stop else 0.0) > 0.0

    # --- rank 0 ------------------------------------------------------------------------
    def log_density(self, theta: np.ndarray) -> float:
        """Log posterior (log-likelihood + log prior on the log scale); -inf outside."""
        theta = np.asarray(theta, dtype=np.float64)
        if not np.all(np.isfinite(theta)) or np.any(np.abs(theta) > 700):
            return -math.inf
        lp = sum(prior.logpdf(float(v)) for prior, v in zip(self.priors, theta, strict=True))
        if not math.isfinite(lp):
            return -math.inf
        self.announce("eval", theta.tolist())
        ll = self.evaluate(theta)
        self.last_parts = (ll, lp)
        return ll + lp if math.isfinite(ll) else -math.inf

    # --- other ranks -------------------------------------------------------------------
    def serve(self, stop: StopFlag) -> None:
        """Follow rank 0's commands until it says done."""
        while True:
            command = self.comm.bcast(None)
            kind = command[0]
            if kind == "eval":
                self.evaluate(np.asarray(command[1]))
            elif kind == "resample":
                self.redraw_locations()
            elif kind == "boundary":
                self.pin(command[1])
                self.boundary_stop(stop)
            elif kind == "restore":
                self.restore(command[1], command[2])
            elif kind == "done":
                return
            else:  # pragma: no cover - protocol error
                raise RuntimeError(f"unknown command {command!r}")

    def restore(self, loc_state: dict | None, truncation: dict | None) -> None:
        """Continue from a checkpoint: the truncation's cut-off, then the last location draw
        (or the file's locations)."""
        self.lik.restore_truncation(truncation)
        if loc_state is not None:
            self.loc_rng.bit_generator.state = loc_state
            self.redraw_locations()


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
    chain = _Chain(config, chain_id, comm)
    stop.reinstall()  # after the OpenCL driver started
    if comm.rank != 0:
        chain.serve(stop)
        return ChainOutcome(
            chain_id, 0, config.sampler.iterations, 0, bool(stop), chain.lik.pair_passes
        )
    return _drive(chain, stop, overwrite, on_progress)


def _drive(chain: _Chain, stop: StopFlag, overwrite: bool, on_progress) -> ChainOutcome:
    from .kernels import kernel_sha256
    from .sampler import SamplerState, make_sampler
    from .storage import DRAW_FIELDS, ChainMeta, ChainWriter

    cfg, sc = chain.config, chain.config.sampler
    path = RunDir.of(cfg).chain_path(chain.chain_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = ChainMeta(
        chain_id=chain.chain_id,
        seed=sc.seed,
        model=cfg.model.kind,
        n_events=chain.data.n,
        iterations=sc.iterations,
        warmup=sc.warmup,
        thin=sc.thin,
        config_yaml=cfg.to_yaml(),
        config_sha256=cfg.sha256,
        kernel_sha256=kernel_sha256() if cfg.engine.backend == "opencl" else "",
        param_names=PARAM_NAMES,
        fields=DRAW_FIELDS,
    )
    sampler = make_sampler(
        sc.kind, len(PARAM_NAMES), target_accept=sc.target_accept, initial_scale=sc.initial_scale
    )
    writer, payload = ChainWriter.open(path, meta, overwrite=overwrite)
    try:
        if payload is not None:
            ckpt = Checkpoint.from_json(payload, f"checkpoint of {path}")
            start = ckpt.iteration
            chain.rng.bit_generator.state = dict(ckpt.rng)
            state = SamplerState.from_json(ckpt.sampler)
            loc_rng = None if ckpt.loc_rng is None else dict(ckpt.loc_rng)
            truncation = None if ckpt.truncation is None else dict(ckpt.truncation)
            chain.announce("restore", loc_rng, truncation)
            chain.restore(loc_rng, truncation)
            current = (ckpt.loglik, ckpt.logprior)
            log.info("chain %d: resuming at iteration %d", chain.chain_id, start)
        else:
            start = 0
            init = default_initial(chain.data, chain.area) | dict(sc.initial)
            theta0 = np.log([init[name] for name in PARAM_NAMES])
            theta0 = theta0 + INIT_JITTER * chain.rng.standard_normal(len(PARAM_NAMES))
            lt = chain.log_density(theta0)
            if not math.isfinite(lt):
                raise ConfigError(
                    f"{cfg.source}: the log posterior is not finite at the initial values "
                    f"{dict(zip(PARAM_NAMES, np.exp(theta0).round(6).tolist(), strict=True))}; "
                    "set sampler.initial"
                )
            state = sampler.init(theta0, lt)
            current = chain.last_parts
        outcome = _loop(chain, sampler, state, current, start, writer, stop, on_progress)
    finally:
        chain.announce("done")
        writer.close()
    return outcome


def _loop(chain, sampler, state, current, start, writer, stop, on_progress) -> ChainOutcome:
    cfg, sc = chain.config, chain.config.sampler
    run_dir = cfg.output.run_dir
    progress = _Progress(chain.chain_id, sc.iterations, start, run_dir, on_progress)
    it = start
    stopped = False
    t0 = time.perf_counter()
    while it < sc.iterations:
        chain.announce("boundary", list(state.theta))
        chain.pin(state.theta)
        if chain.boundary_stop(stop):
            stopped = True
            break
        if sc.resample_every and it > 0 and it % sc.resample_every == 0:
            chain.announce("resample")
            chain.redraw_locations()
            lt = chain.log_density(np.asarray(state.theta))
            state = dataclasses.replace(state, log_target=lt)
            current = chain.last_parts
        state, info = sampler.step(state, chain.log_density, chain.rng, adapt=it < sc.warmup)
        if info.accepted:
            current = chain.last_parts
        if it % sc.thin == 0:
            row = dict(zip(PARAM_NAMES, np.exp(state.theta).tolist(), strict=True))
            row.update(
                iteration=it,
                loglik=current[0],
                logprior=current[1],
                accepted=int(info.accepted),
                warmup=int(it < sc.warmup),
                coordinate=info.coordinate,
                scale=info.proposal_scale,
            )
            writer.append(row)
        it += 1
        progress.step(info.accepted, current[0], writer.n_committed)
        if writer.n_pending >= cfg.output.commit_every:
            _commit(chain, writer, state, current, it)
    _commit(chain, writer, state, current, it)
    outcome = ChainOutcome(
        chain.chain_id,
        it,
        sc.iterations,
        writer.n_committed,
        stopped,
        chain.lik.pair_passes,
        time.perf_counter() - t0,
    )
    progress.write(current[0], writer.n_committed, "stopped" if stopped else "finished")
    if stopped:
        log.warning(
            "chain %d: stopped at iteration %d (signal %s); %d draws committed; run again to "
            "resume",
            chain.chain_id,
            it,
            stop.signum,
            writer.n_committed,
        )
    return outcome


def _commit(chain: _Chain, writer, state, current, iteration: int) -> None:
    checkpoint = Checkpoint(
        iteration=iteration,
        sampler=state.to_json(),
        rng=chain.rng.bit_generator.state,
        loc_rng=chain.loc_state,
        truncation=chain.lik.truncation_state(),
        loglik=current[0],
        logprior=current[1],
        finished=iteration >= chain.config.sampler.iterations,
    )
    writer.commit(checkpoint.to_json())


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
            "chain %d: %d/%d  %.1f it/s  acc %.2f  loglik %.6g",
            self.chain_id,
            self.it,
            self.iterations,
            record.it_per_s,
            record.acceptance or 0.0,
            loglik,
        )
        if self.callback is not None:
            self.callback(record.to_json())
