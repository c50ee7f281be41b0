"""Reading a run: its chain files, the burn-in/thinning selection, its config and events.

The run directory's layout is :class:`hawkes_cli.rundir.RunDir`'s; the chain-file schema is
:mod:`hawkes_cli.storage`'s (only committed draws are read). h5py, the config and the events
reader are imported inside the functions that need them, so importing this module is cheap.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import draws_digest
from ..errors import ConfigError, EventsError, StorageError, UsageError
from .options import DiagnoseOptions
from .records import ChainSummary

if TYPE_CHECKING:  # pragma: no cover
    from ..data import EventData
    from ..storage import ChainMeta

__all__ = [
    "ChainRead",
    "EventsInfo",
    "burn_description",
    "check_no_duplicates",
    "check_same_config",
    "find_chain_files",
    "read_chain_file",
    "read_chains",
    "read_events_info",
    "require_draws",
    "select_rows",
]

log = logging.getLogger(__package__)

#: Per-draw sampler fields the diagnostics carry along (when the chain files have them).
STAT_KEYS = ("loglik", "logprior", "accepted", "n_accepted", "n_proposals")
_HDF5_SUFFIXES = (".h5", ".hdf5", ".he5")


# --------------------------------------------------------------------------- chain files


def find_chain_files(run_dir: Path) -> list[Path]:
    """The chain files of a run, by chain number.

    Parameters
    ----------
    run_dir
        The run directory (its ``chains/`` folder is searched), or the ``chains/`` folder
        itself.

    Returns
    -------
    list of Path
        ``chain-XX.h5`` files, ascending by number.

    Raises
    ------
    UsageError
        ``run_dir`` does not exist or is not a directory, or holds no chain file.
    """
    from ..rundir import RunDir

    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise UsageError(f"run directory {run_dir} does not exist; give the run_dir of a run")
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir} is not a directory; give the run_dir of a run")
    found = RunDir(run_dir).chain_files()
    if not found:
        raise UsageError(
            f"no chain files (chains/chain-XX.h5) in {run_dir}; has hawkes-run started this run "
            "yet? (hawkes-run writes RUN_DIR/chains/chain-00.h5, ...)"
        )
    return [path for _, path in found]


@dataclass(frozen=True, eq=False)
class ChainRead:
    """One chain file's committed draws, with the burn-in/thinning selection applied.

    Attributes
    ----------
    chain_id, path, meta, n_committed
        The chain's id, file, typed metadata (its root attributes) and committed draw count.
    params, iterations, stats
        Parameter draws, iteration numbers and sampler fields after burn-in and thinning.
    after_burn_params, after_burn_iterations
        Parameter draws and iteration numbers after burn-in, before thinning.
    acceptance
        Fraction of accepted proposals after burn-in, or None.
    iterations_done, finished
        The chain's progress.
    bound_exceedances, worst_bound
        From the checkpoint: evaluations after warm-up whose truncation bound exceeded
        ``engine.tolerance``, and the largest bound (nats); 0 when none was recorded.
    """

    chain_id: int
    path: Path
    meta: ChainMeta
    n_committed: int
    params: dict[str, np.ndarray]
    iterations: np.ndarray
    stats: dict[str, np.ndarray]
    after_burn_params: dict[str, np.ndarray]
    after_burn_iterations: np.ndarray
    acceptance: float | None
    iterations_done: int
    finished: bool
    bound_exceedances: int = 0
    worst_bound: float = 0.0
    planned: int | None = None  # the checkpoint's iterations (a run extended since it began)

    @property
    def used(self) -> bool:
        """Whether any draw is left after burn-in and thinning."""
        return self.iterations.size > 0

    @property
    def warmup(self) -> int:
        """The run's warm-up iterations (root attribute ``warmup``)."""
        return self.meta.warmup

    @property
    def iterations_planned(self) -> int:
        """The configured total of iterations: the last checkpoint's, else the chain file's
        (root attribute ``iterations``: those it began with)."""
        return self.meta.iterations if self.planned is None else self.planned

    def summary(self, used: bool) -> ChainSummary:
        """The chain as the report shows it (``used``: whether its draws were taken)."""
        its = self.iterations
        return ChainSummary(
            chain_id=self.chain_id,
            path=self.path,
            draws_committed=self.n_committed,
            draws_used=int(its.size) if used else 0,
            first_iteration=int(its[0]) if its.size else None,
            last_iteration=int(its[-1]) if its.size else None,
            acceptance=self.acceptance,
            iterations_done=self.iterations_done,
            iterations_planned=self.iterations_planned,
            finished=self.finished,
        )


def select_rows(draws: Mapping[str, np.ndarray], meta: ChainMeta, burn: int | None) -> np.ndarray:
    """Boolean mask of the rows after burn-in (see the package docstring)."""
    n = next(iter(draws.values())).shape[0] if draws else 0
    iteration = draws.get("iteration")
    if burn is None:
        if "warmup" in draws:
            return np.asarray(draws["warmup"]) == 0
        if iteration is not None:
            return np.asarray(iteration) >= meta.warmup
        burn_rows = meta.warmup // meta.thin
        return np.arange(n) >= burn_rows
    if iteration is not None:
        return np.asarray(iteration) >= burn
    return np.arange(n) >= burn


def _all_iterations(draws: Mapping[str, np.ndarray], meta: ChainMeta, n_rows: int):
    """Iteration number of every committed row (from the sampler's thinning without a field)."""
    if "iteration" in draws:
        return np.asarray(draws["iteration"], dtype=np.int64)
    return np.arange(n_rows, dtype=np.int64) * meta.thin


def _progress(
    checkpoint: Mapping[str, Any], iterations: np.ndarray, n_rows: int, planned: int
) -> tuple[int, bool]:
    """Iterations done (from the checkpoint, else the last committed row) and finished."""
    if isinstance(checkpoint.get("iteration"), int):
        done = int(checkpoint["iteration"])
    else:
        done = int(iterations[-1]) + 1 if n_rows else 0
    return done, bool(checkpoint.get("finished", planned > 0 and done >= planned))


def _bound_report(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """The checkpoint's counts of truncation bounds above the tolerance after warm-up."""
    count, worst = checkpoint.get("bound_exceedances"), checkpoint.get("worst_bound")
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        return {}
    ok = isinstance(worst, int | float) and not isinstance(worst, bool)
    return {"bound_exceedances": count, "worst_bound": float(worst) if ok else math.nan}


def read_chain_file(path: Path, options: DiagnoseOptions) -> ChainRead:
    """Read one chain file's committed draws and apply burn-in and thinning."""
    from ..storage import read_chain

    cd = read_chain(path)
    meta, draws = cd.meta, cd.draws
    keep = select_rows(draws, meta, options.burn)
    after = {name: np.asarray(draws[name], dtype=np.float64)[keep] for name in meta.param_names}
    iters_all = _all_iterations(draws, meta, cd.n_committed)
    iters_after = iters_all[keep]
    sl = slice(None, None, options.thin)
    acceptance = None
    if "accepted" in draws and iters_after.size:
        acceptance = float(np.mean(np.asarray(draws["accepted"])[keep] != 0))
    planned = (cd.checkpoint or {}).get("iterations")
    planned = planned if isinstance(planned, int) and not isinstance(planned, bool) else None
    done, finished = _progress(
        cd.checkpoint or {}, iters_all, cd.n_committed, planned or meta.iterations
    )
    log.debug("%s: %d committed draws, %d used", path, cd.n_committed, len(iters_after[sl]))
    return ChainRead(
        chain_id=meta.chain_id,
        path=Path(path),
        meta=meta,
        n_committed=cd.n_committed,
        params={name: arr[sl] for name, arr in after.items()},
        iterations=iters_after[sl],
        stats={k: np.asarray(draws[k])[keep][sl] for k in STAT_KEYS if k in draws},
        after_burn_params=after,
        after_burn_iterations=iters_after,
        acceptance=acceptance,
        iterations_done=done,
        finished=finished,
        **_bound_report(cd.checkpoint or {}),
        planned=planned,
    )


def read_chains(files: Sequence[Path], options: DiagnoseOptions) -> list[ChainRead]:
    """Read every chain file (see :func:`read_chain_file`); refuse duplicates.

    Raises
    ------
    StorageError
        Two files hold the same chain (:func:`check_no_duplicates`).
    """
    chains = [read_chain_file(path, options) for path in files]
    check_no_duplicates(chains)
    return chains


def check_no_duplicates(chains: Sequence[ChainRead]) -> None:
    """Refuse two files of one chain: the same chain id of one config, or the same draws.

    A copied chain file would be counted twice (bulk ESS inflated, R-hat too optimistic). This
    is an error, not a warning and a dropped file: which copy is the chain's own is not for the
    reader to guess (a copy may be the longer one), and the user removes one in a second.
    Chains of one config and chain id are the same chain (same seed stream) even when their
    lengths differ.
    """
    seen: dict[tuple[str, object], ChainRead] = {}
    for c in chains:
        params = np.stack([c.after_burn_params[n] for n in c.meta.param_names])
        keys = [
            ("chain", (draws_digest(c.meta.config_yaml), c.chain_id)),
            ("draws", hashlib.sha256(params.tobytes()).hexdigest() if params.size else None),
        ]
        for kind, key in keys:
            if key is None:
                continue
            first = seen.setdefault((kind, key), c)
            if first is not c:
                what = (
                    f"chain {c.chain_id} of the same config"
                    if kind == "chain"
                    else "the same draws"
                )
                raise StorageError(
                    f"{c.path} and {first.path} hold {what}: a copied chain file would be "
                    "counted twice; remove the copy from the run directory"
                )


def check_same_config(chains: Sequence[ChainRead]) -> None:
    """Refuse chains of different configs or parameters (``StorageError`` naming the files).

    Configs that differ only in :data:`~hawkes_cli.config.RUN_ONLY_KEYS` are one config here: a
    chain first started after such a change records the new one, its siblings the old."""
    groups: dict[str, list[ChainRead]] = {}
    for c in chains:
        groups.setdefault(draws_digest(c.meta.config_yaml), []).append(c)
    if len(groups) > 1:
        parts = "; ".join(
            f"config sha256 {group[0].meta.config_sha256} in "
            + ", ".join(c.path.name for c in group)
            for group in groups.values()
        )
        raise StorageError(
            f"chain files from different configs cannot be diagnosed together: {parts}. Each run "
            "directory must hold the chains of one config: move the foreign chain files into "
            "their own run directory"
        )
    params = {tuple(c.meta.param_names) for c in chains}
    if len(params) > 1:
        raise StorageError(
            f"chain files store different parameters ({' vs '.join(map(str, params))}); they "
            "cannot be diagnosed together"
        )


def require_draws(
    chains: Sequence[ChainRead], run_dir: Path, options: DiagnoseOptions
) -> list[ChainRead]:
    """The chains with draws after burn-in (``UsageError`` saying why when there is none)."""
    used = [c for c in chains if c.used]
    if used:
        return used
    done = max(c.iterations_done for c in chains)
    if options.burn is None:
        warmup = max(c.warmup for c in chains)
        raise UsageError(
            f"no draws after warm-up yet in {run_dir}: the chains are at iteration {done} at "
            f"most and the first {warmup} iterations are warm-up; wait, or pass --burn 0 to "
            "look at the warm-up draws"
        )
    raise UsageError(
        f"no draws after burn-in in {run_dir}: --burn {options.burn} drops every draw (the "
        f"chains are at iteration {done} at most); use a smaller --burn"
    )


def burn_description(options: DiagnoseOptions, chains: Sequence[ChainRead]) -> str:
    """How burn-in and thinning were applied, in words."""
    if options.burn is None:
        warmup = max(c.warmup for c in chains)
        text = f"warm-up dropped (the run's first {warmup} iterations)"
    elif options.burn == 0:
        text = "no burn-in (warm-up draws kept)"
    else:
        text = f"burn-in: iterations < {options.burn} dropped"
    if options.thin > 1:
        text += f"; thinned: every {options.thin}th remaining draw kept"
    return text


# --------------------------------------------------------------------------- config and events


@dataclass(frozen=True, eq=False)
class EventsInfo:
    """The run's events as far as the diagnosis needs them.

    Attributes
    ----------
    path
        The events file (``--events``, else the config's ``data.events``), or None.
    events
        The events, when they were needed (``--county``, or the systematic verdicts on an
        HDF5 file), else None.
    attrs
        The events file's metadata (an HDF5 file's ``/events`` attributes; read without its
        datasets when ``events`` is not needed), empty when unknown.
    time_unit
        The data's time unit (``"day"`` unless the events file says otherwise).
    assumed
        Why the time unit was assumed to be days, or None.
    config
        The run's config as recorded in the chain files, or None when it cannot be read.
    changed
        Why the events file was not read although it exists: its content is not what the
        chain files record (then ``events`` is None and ``attrs`` empty), or None.
    """

    path: Path | None
    events: EventData | None
    time_unit: str
    assumed: str | None
    config: Any = None
    attrs: Mapping[str, Any] = field(default_factory=dict)
    changed: str | None = None

    @property
    def crs(self) -> str:
        """The events' coordinate reference system (``""`` when unknown)."""
        return str(self.attrs.get("crs", ""))


def _run_config(chains: Sequence[ChainRead], run_dir: Path) -> tuple[Any, str | None]:
    """The config recorded in the first chain file, or None (with the reason)."""
    from ..config import config_from_yaml_text

    first = chains[0]
    text = first.meta.config_yaml
    try:
        config = config_from_yaml_text(
            text, base_dir=run_dir, where=f"{first.path} (attribute config_yaml)"
        )
    except ConfigError as exc:
        return None, str(exc)
    return config, None


def _events_path(options: DiagnoseOptions, config: Any) -> Path | None:
    if options.events is not None:
        return options.events
    if config is not None:
        return Path(config.data.events)
    return None


def _read_events(
    path: Path | None, options: DiagnoseOptions, model: int, config_problem: str | None
) -> tuple[EventData | None, Mapping[str, Any] | None, str | None]:
    """The events when ``--county`` or the systematic verdicts need them, else an HDF5 file's
    metadata alone (the time unit, the crs, a simulation's truth: the convergence check of
    running chains reads no event arrays); or why they are missing."""
    hdf5 = path is not None and path.suffix.lower() in _HDF5_SUFFIXES and path.exists()
    if not (options.counties or hdf5):
        return None, None, None
    if path is None:
        raise UsageError(
            f"--county needs the events file, but the config in the chain files cannot be "
            f"read ({config_problem}); pass the events file explicitly"
        )
    if not (options.counties or options.systematic):
        from ..data.hdf5_file import load_hdf5_attrs

        try:
            return None, load_hdf5_attrs(path), None
        except EventsError as exc:
            return None, None, f"cannot read {path} ({exc})"
    from ..data import load_events

    try:
        events = load_events(path, need_density=model == 2 and bool(options.counties))
    except EventsError as exc:
        if options.counties:
            raise
        return None, None, f"cannot read {path} ({exc})"
    return events, events.attrs, None


def _changed_since_the_run(
    events: EventData, chains: Sequence[ChainRead], path: Path | None, options: DiagnoseOptions
) -> str | None:
    """Why the events cannot describe the run: their content is not what the chain files
    record (``events_sha256``; chains of versions before it record nothing). Raises where the
    user asked for them: an explicit ``--events`` file, ``--county``."""
    recorded = {c.meta.events_sha256 for c in chains} - {""}
    if not recorded or events.digest() in recorded:
        return None
    problem = (
        f"{path} is not the events the chains ran on (its content differs from what the chain "
        "files record)"
    )
    if options.events is not None or options.counties:
        raise UsageError(
            f"{problem}: its numbers would describe other data; pass the events file the "
            "chains ran on" + (" with --events" if options.events is None else "")
        )
    return problem


def _time_unit(
    events_path: Path | None, attrs: Mapping[str, Any] | None, problem: str | None
) -> tuple[str, str | None]:
    """The data's time unit and, when it was assumed, why."""
    if problem is not None:
        return "day", problem
    if attrs is not None:
        unit = attrs.get("time_unit")
        if unit:
            return str(unit), None
        return "day", f"{events_path} has no time_unit attribute"
    if events_path is None:
        return "day", "no events file is known (the chain's config could not be read)"
    if not events_path.exists():
        return "day", f"events file {events_path} not found"
    return "day", f"{events_path} has no time_unit attribute (CSV)"


def read_events_info(
    chains: Sequence[ChainRead], run_dir: Path, options: DiagnoseOptions, model: int
) -> EventsInfo:
    """Find and, where needed, read the run's events (see :class:`EventsInfo`).

    Raises
    ------
    UsageError
        ``--county`` given but no events file is known.
    EventsError
        ``--county`` given but the events file cannot be read.
    """
    config, config_problem = _run_config(chains, run_dir)
    path = _events_path(options, config)
    if options.events is not None and not options.events.is_file():
        raise UsageError(
            f"--events {options.events}: no such file; pass the events file the chains ran on"
        )
    events, attrs, events_problem = _read_events(path, options, model, config_problem)
    changed = None if events is None else _changed_since_the_run(events, chains, path, options)
    if changed:  # nothing read from other data: the verdicts say why
        events, attrs, events_problem = None, None, "the events file changed since the run"
    time_unit, assumed = _time_unit(path, attrs, events_problem)
    if config_problem and not options.counties:
        log.info("config in the chain files not readable: %s", config_problem)
    return EventsInfo(
        path=path,
        events=events,
        time_unit=time_unit,
        assumed=assumed,
        config=config,
        attrs=dict(attrs or {}),
        changed=changed,
    )
