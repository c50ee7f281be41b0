"""One chain from its call to its outcome: every rank builds its share, rank 0 drives.

:func:`run_chain` builds the chain (:func:`~hawkes_cli.runner.setup.build_chain`); the other
ranks replay rank 0's collective calls (:func:`~hawkes_cli.distributed.serve`); rank 0 opens the
chain file (:class:`~hawkes_cli.storage.ChainWriter`), resumes from its checkpoint
(:mod:`.resume`) or starts afresh (:mod:`hawkes_cli.start.chain`; a fast start is committed at
once, iteration 0 and no draws, so it is never repeated), then runs the loop (:mod:`.loop`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any

from ..config import Config
from ..distributed import ChainSetup, DistributedLikelihood, serve
from ..errors import Interrupted, UsageError
from ..model import Params
from ..parallel import Comm, SerialComm
from ..posterior import LogPosterior, to_params
from ..rundir import Checkpoint, RunDir
from ..sampler import Sampler, make_sampler
from ..start import StartResult
from ..start.chain import fast_start, first_state
from ..stop import StopFlag
from ..storage import DRAW_FIELDS, ChainMeta, ChainWriter, sidecar_path
from ..vocab import PARAM_NAMES, PHASE_FAILED, PHASE_STOPPED, TRIGGER_AUTO
from .converged import forget
from .loop import ChainOutcome, _Loop
from .progress import ProgressWriter
from .resume import check_record, resume, start_result
from .setup import build_chain

log = logging.getLogger(__name__)

__all__ = ["run_chain"]


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
        Stop flag (:class:`~hawkes_cli.stop.StopFlag`); read at every iteration boundary and
        between the fast start's evaluations.
    overwrite
        Start afresh even if the chain file exists (otherwise resume from its checkpoint).
    on_progress
        Called on rank 0 with the progress record (as JSON) at every write: each phase change
        and every few seconds (:mod:`.progress`).
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
    """Rank 0: open the chain file, start or resume, run the loop.

    Once the chain file is open (this process is the chain's one writer), the progress record
    follows the chain from the fast start to the end, a stop or a failure.
    """
    config, sc = setup.config, setup.config.sampler
    path = RunDir.of(config).chain_path(setup.chain_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    check = functools.partial(check_record, setup, str(sidecar_path(path)))
    writer, payload = ChainWriter.open(path, _chain_meta(setup), overwrite=overwrite, check=check)
    if overwrite:  # the run's chains start afresh: an earlier convergence is not theirs
        forget(RunDir.of(config))
    progress = ProgressWriter(
        setup.chain_id, sc.iterations, sc.warmup, config.output.run_dir, on_progress
    )
    try:
        resumed = None if payload is None else (payload, f"checkpoint of {path}")
        return _start_and_run(setup, likelihood, stop, writer, resumed, progress)
    except Interrupted:
        _end_quietly(progress, PHASE_STOPPED)
        raise
    except Exception:
        _end_quietly(progress, PHASE_FAILED)
        raise
    finally:
        writer.close()


def _start_and_run(
    setup: ChainSetup,
    likelihood: DistributedLikelihood,
    stop: StopFlag,
    writer: ChainWriter,
    resumed: tuple[Mapping[str, Any], str] | None,
    progress: ProgressWriter,
) -> ChainOutcome:
    """Resume from ``resumed`` (the checkpoint payload, and where it is for messages), or start
    afresh (committing a fast start at once); then run the loop."""
    config, rank = setup.config, setup.rank
    posterior = LogPosterior.from_mapping(likelihood, config.priors)
    passes0 = rank.pair_passes
    if resumed is not None:
        payload, where = resumed
        checkpoint = Checkpoint.from_json(payload, where)
        start = start_result(checkpoint, where)
        sampler = _make_sampler(config, posterior, start)
        state, current = resume(setup, likelihood, posterior, checkpoint)
        first = checkpoint.iteration
        log.info("chain %d: resuming at iteration %d", setup.chain_id, first)
    else:
        start = None
        if config.sampler.fast_start:
            start = fast_start(setup, likelihood, posterior, report=progress)
        _choose_trigger(setup, likelihood, start)
        sampler = _make_sampler(config, posterior, start)
        state, current = first_state(setup, posterior, sampler, start)
        first = 0
    loop = _Loop(setup, likelihood, posterior, sampler, writer, stop, progress, start)
    if resumed is None and start is not None:
        loop.commit(state, current, 0)  # the search is never repeated
    return loop.run(state, current, first, rank.pair_passes - passes0)


def _choose_trigger(
    setup: ChainSetup, likelihood: DistributedLikelihood, start: StartResult | None
) -> None:
    """``engine.trigger: auto``, a fresh chain: time one exact and one truncated pass at the
    start's mode (or the initial values) on the chain's ranks and keep the faster
    (:mod:`hawkes_cli.engine.choice`); log the choice and both times. The choice is part of the
    truncation state every checkpoint records, so a resume continues with it, never timing
    again (:func:`.resume.resume`)."""
    config = setup.config
    if config.engine.trigger != TRIGGER_AUTO:
        return
    p = to_params(start.theta) if start is not None else Params(**setup.initial)
    choice = likelihood.choose_trigger(p)
    if choice is None:
        return
    log.info(
        "chain %d: engine.trigger auto: %s on %d rank(s); sigma_x %.4g, sigma_t %.4g",
        setup.chain_id,
        choice.describe(),
        setup.rank.comm.size,
        p.sigma_x,
        p.sigma_t,
    )


def _end_quietly(progress: ProgressWriter, phase: str) -> None:
    """Record how the call ended, never hiding the error that ended it (a full disk)."""
    with contextlib.suppress(OSError):
        progress.end(phase)


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
            "expensive_move": sc.expensive_move,
            "jump_modes": () if start is None else start.jump_modes(),
        }
    return make_sampler(
        sc.kind,
        len(posterior.names),
        target_accept=sc.target_accept,
        initial_scale=sc.initial_scale,
        **options,
    )
