"""Resuming a chain from its checkpoint: check the commit record, then restore the state.

:func:`check_record` runs before the chain file is rewritten (a refusal touches nothing);
:func:`resume` restores the sampler state, both random streams and the truncation cut-off. The
current state's B and E are recomputed (their values are not used: the state's density is the
checkpoint's), counted in :attr:`~hawkes_cli.runner.loop.ChainOutcome.start_passes`, not in a
draw's row, so the chain file's ``pair_passes`` column is the same as that of a chain never
stopped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..distributed import ChainSetup, DistributedLikelihood
from ..engine.choice import TriggerChoice
from ..errors import ConfigError, StorageError
from ..posterior import Density, LogPosterior
from ..rundir import Checkpoint
from ..sampler import SamplerState
from ..start import StartResult
from ..storage import ChainMeta
from ..vocab import PARAM_NAMES

__all__ = ["check_record", "resume", "start_result"]


def check_record(
    setup: ChainSetup, where: str, record: Mapping[str, Any] | None, found: ChainMeta
) -> None:
    """Refuse to resume from a commit record whose checkpoint is damaged or does not fit the
    committed draws (called before the chain file, of identity ``found``, is rewritten, so a
    refusal touches nothing).

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
        record["draws"], record.get("last_iteration"), found.iterations, sc.thin, where
    )
    if checkpoint.iteration > sc.iterations:  # RunDir.write_config refuses it where it can
        raise ConfigError(
            f"{setup.config.source}: chain {setup.chain_id} has run {checkpoint.iteration} "
            f"iterations, more than sampler.iterations ({sc.iterations}); set it to "
            f"{checkpoint.iteration} or more to resume (its draws stay)"
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
    start_result(checkpoint, where)
    chosen = (checkpoint.truncation or {}).get("trigger")
    if chosen is not None:
        try:
            TriggerChoice.from_json(chosen)
        except ValueError as exc:
            raise StorageError(
                f"{where}: checkpoint member 'truncation' holds no trigger choice ({exc}); "
                "restore the checkpoint, or start over with --overwrite"
            ) from exc


def start_result(checkpoint: Checkpoint, where: str) -> StartResult | None:
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


def resume(
    setup: ChainSetup,
    likelihood: DistributedLikelihood,
    posterior: LogPosterior,
    checkpoint: Checkpoint,
) -> tuple[SamplerState, Density]:
    """Continue from ``checkpoint``: sampler state, both random streams, truncation cut-off
    (with the trigger ``engine.trigger: auto`` chose at the chain's start, not timed again).

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
