"""The run directory: the one module that knows its layout and its small records.

::

    RUN_DIR/config.yaml                 the resolved config (``# sha256: ...`` first line)
    RUN_DIR/chains/chain-00.h5          draws (HDF5, written only by the chain's rank 0)
    RUN_DIR/chains/chain-00.ckpt.json   commit record: draw count + the typed :class:`Checkpoint`
    RUN_DIR/chains/chain-00.lock        advisory lock held by the one live writer
    RUN_DIR/chains/chain-00.progress.json   :class:`Progress`, rewritten every few seconds
    RUN_DIR/chains/converged.json       the run passed its convergence check (runner/converged)
    RUN_DIR/logs/chain-00.log           a local chain's stdout and stderr
    RUN_DIR/slurm/job.sbatch            the batch script of the last submission
    RUN_DIR/slurm/plan.json             the placement plan of the last submission
    RUN_DIR/slurm/jobs.json             every submission: job id, array, time
    RUN_DIR/slurm/node-00.json          starts, requeues and ends of one array task
    RUN_DIR/slurm/logs/                 Slurm's own output files

Everything else reaches these files through :class:`RunDir`. The chain file, its commit record
(``.ckpt.json``: schema, chain, config, committed draw count, checkpoint payload) and its lock
are :mod:`hawkes_cli.storage`'s protocol; what the checkpoint payload of an MCMC chain holds is
:class:`Checkpoint`, here.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import atomic
from .chain_progress import Progress
from .config.load import CONFIG_NAME, header_sha256, resolved_text
from .config.schema import run_only, same_draws
from .errors import ConfigError, OtherRunError, StorageError, UsageError
from .storage import is_chain_file, read_chain, read_sidecar, sidecar_path, writer_holder
from .vocab import STOP_CONVERGED

if TYPE_CHECKING:  # pragma: no cover
    from .config import Config

log = logging.getLogger(__name__)
CHAINS_DIR = "chains"
CONVERGED_NAME = "converged.json"
LOGS_DIR = "logs"
SLURM_DIR = "slurm"
SCRIPT_NAME = "job.sbatch"
PLAN_NAME = "plan.json"
JOBS_NAME = "jobs.json"

_CHAIN_FILE = re.compile(r"^chain-(\d+)\.h5$")


# --------------------------------------------------------------------------- chain-file siblings


def progress_path(chain_file: Path) -> Path:
    """Progress record of a chain file: ``chain-00.h5`` -> ``chain-00.progress.json``."""
    return Path(chain_file).with_suffix(".progress.json")


def now_utc(timespec: str = "milliseconds") -> str:
    """The current UTC time, ISO 8601 (commit records: milliseconds; job records: seconds)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec=timespec)


# --------------------------------------------------------------------------- typed records


@dataclass(frozen=True)
class Checkpoint:
    """What a chain needs to continue bit for bit (rank 0 writes it with every commit).

    Attributes
    ----------
    iteration
        Next iteration to run (== the config's ``sampler.iterations`` when finished).
    sampler
        The sampler's state (:meth:`hawkes_cli.sampler.SamplerState.to_json`).
    rng
        State of the sampler's bit generator (numpy ``bit_generator.state``).
    loglik, logprior
        The current state's log-likelihood and log-prior (log scale, Jacobian included).
    finished
        True once the chain ran all its iterations, or ended because the run converged.
    loc_rng
        State of the cut-posterior location stream before its last draw, or None.
    truncation
        The truncated trigger's cut-off (``{"kappa": ...}``), or None for exact engines.
    start
        The fast start's result (:meth:`hawkes_cli.start.StartResult.to_json`: the mode, its
        curvature, the modes found, what it cost), or None when the chain started from given
        values. A resumed chain rebuilds its sampler (the tiered kind's jump vectors) from it
        instead of searching again.
    bound_exceedances, worst_bound
        After warm-up, when the truncation cut-off is fixed: evaluations whose realised
        truncation bound exceeded ``engine.tolerance``, and the largest realised bound (nats);
        0 for exact engines, during warm-up, and in checkpoints written before they existed.
    converged
        True when the chain ended before ``iterations`` because the run converged
        (``sampler.stop_when: converged``, :mod:`hawkes_cli.runner.converged`); then
        ``finished`` too.
    iterations
        The chain's ``sampler.iterations`` when it committed (None in records written before
        the member existed: then the chain file's); ``finished`` is relative to it.
    """

    iteration: int
    sampler: Mapping[str, Any]
    rng: Mapping[str, Any]
    loglik: float
    logprior: float
    finished: bool
    loc_rng: Mapping[str, Any] | None = None
    truncation: Mapping[str, Any] | None = None
    start: Mapping[str, Any] | None = None
    bound_exceedances: int = 0
    worst_bound: float = 0.0
    converged: bool = False
    iterations: int | None = None

    def done(self, iterations: int, stop_when: str = STOP_CONVERGED) -> bool:
        """Whether the chain is complete for a config of ``iterations`` and ``stop_when``: it
        ran them all, or it ended because the run converged and the config still stops there
        (a finished chain whose ``sampler.iterations`` was raised since, or that converged
        where the config now says ``stop_when: iterations``, resumes)."""
        ended = self.converged and stop_when == STOP_CONVERGED
        return self.finished and (ended or self.iteration >= iterations)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (the ``checkpoint`` member of the commit record)."""
        return asdict(self)

    def check_commit(
        self,
        draws: int,
        last_iteration: int | None,
        iterations: int,
        thin: int,
        where: str = "checkpoint",
    ) -> None:
        """Refuse a checkpoint that disagrees with the draws committed with it.

        A chain saves the draw of every iteration ``it`` with ``it % thin == 0`` and commits at
        iteration boundaries, so after ``iteration`` iterations it holds
        ``ceil(iteration / thin)`` draws, the last of iteration
        ``(iteration - 1) // thin * thin``; it is finished exactly when ``iteration`` reached
        ``iterations`` or it ended because the run converged.

        Parameters
        ----------
        draws, last_iteration
            The commit record's draw count and last row's iteration (None: not recorded).
        iterations, thin
            The chain's configured iterations (warm-up included; the checkpoint's own
            :attr:`iterations` when it records them) and thinning.

        Raises
        ------
        StorageError
            Naming ``where`` and the disagreement.
        """
        it = self.iteration
        iterations = iterations if self.iterations is None else self.iterations
        problem = None
        if it > iterations:
            problem = f"iteration {it} is beyond the chain's {iterations} iterations"
        elif self.finished != (it == iterations or self.converged):
            problem = f"'finished' is {str(self.finished).lower()} at iteration {it}/{iterations}"
            if self.converged:
                problem += " of a chain that ended because the run converged"
        elif draws != -(-it // max(thin, 1)):
            problem = f"{draws} committed draws do not fit iteration {it} (thin {thin})"
        elif draws and last_iteration is not None and last_iteration != (it - 1) // thin * thin:
            problem = f"the last committed draw is of iteration {last_iteration}, not {it - 1}"
        if problem:
            raise StorageError(
                f"{where}: the checkpoint disagrees with the committed draws ({problem}); the "
                "chain file or its checkpoint was changed: restore both, or start over with "
                "--overwrite"
            )

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "checkpoint") -> Checkpoint:
        """Parse and check a checkpoint payload.

        Raises
        ------
        StorageError
            A member is missing or of the wrong type (names ``where`` and the member).
        """
        if not isinstance(data, Mapping):
            raise StorageError(f"{where}: 'checkpoint' must be a JSON object, got {data!r}")

        def need(key: str, kinds: tuple[type, ...], what: str) -> Any:
            value = data.get(key)
            if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                raise StorageError(
                    f"{where}: checkpoint member {key!r} must be {what}, got {value!r}; the "
                    "checkpoint is damaged: restore it, or start over with --overwrite"
                )
            return value

        def need_iterations() -> int:
            value = need("iterations", (int,), "an integer >= 1")
            if value < 1:
                raise StorageError(f"{where}: checkpoint iterations {value} is not >= 1")
            return value

        def optional(key: str) -> Mapping[str, Any] | None:
            value = data.get(key)
            return None if value is None else need(key, (dict,), "an object or null")

        iteration = need("iteration", (int,), "an integer >= 0")
        if iteration < 0:
            raise StorageError(f"{where}: checkpoint iteration {iteration} is negative")
        for key in ("loglik", "logprior"):
            value = need(key, (int, float), "a number")
            if not math.isfinite(value):
                raise StorageError(
                    f"{where}: checkpoint member {key!r} is {value!r}, not a finite number (a "
                    "chain's current state always has one); the checkpoint is damaged: restore "
                    "it, or start over with --overwrite"
                )
        bound_exceedances = data.get("bound_exceedances", 0)
        worst_bound = data.get("worst_bound", 0.0)
        if bound_exceedances != 0 or worst_bound != 0.0:
            need("bound_exceedances", (int,), "an integer >= 0")
            need("worst_bound", (int, float), "a number >= 0")
            if bound_exceedances < 0 or not (math.isfinite(worst_bound) and worst_bound >= 0):
                raise StorageError(
                    f"{where}: checkpoint members 'bound_exceedances' ({bound_exceedances!r}) "
                    f"and 'worst_bound' ({worst_bound!r}) must be >= 0; the checkpoint is "
                    "damaged: restore it, or start over with --overwrite"
                )
        return cls(
            iteration=iteration,
            sampler=need("sampler", (dict,), "an object"),
            rng=need("rng", (dict,), "an object"),
            loglik=float(need("loglik", (int, float), "a number")),
            logprior=float(need("logprior", (int, float), "a number")),
            finished=need("finished", (bool,), "true or false"),
            loc_rng=optional("loc_rng"),
            truncation=optional("truncation"),
            start=optional("start"),
            bound_exceedances=bound_exceedances,
            worst_bound=float(worst_bound),
            converged=need("converged", (bool,), "true or false") if "converged" in data else False,
            iterations=None if data.get("iterations") is None else need_iterations(),
        )


# --------------------------------------------------------------------------- output guards


def _is_run_config(path: Path) -> bool:
    """Whether ``path`` is a run directory's resolved config (its ``# sha256:`` header)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return header_sha256(fh.readline()) is not None
    except OSError:
        return False


def output_problem(path: str | Path, inputs: Iterable[str | Path] = ()) -> str | None:
    """Why an output path must not be written, or None when it may.

    Refused: one of ``inputs`` (events, polygons), a run directory itself or its own files
    (``config.yaml``, ``chains/``, ``logs/``, ``slurm/``), and any hawkes chain file.
    """
    real = Path(os.path.realpath(Path(path).expanduser()))
    for given in inputs:
        if real == Path(os.path.realpath(Path(given).expanduser())):
            return f"it is an input of this command ({given})"
    for d in (real, *list(real.parents)[:3]):
        if not _is_run_config(d / CONFIG_NAME):
            continue
        if d == real:
            return f"it is the run directory {d}"
        top = real.relative_to(d).parts[0]
        if top in (CONFIG_NAME, CHAINS_DIR, LOGS_DIR, SLURM_DIR):
            return f"it is one of the run's own files ({d / top})"
    if real.is_file() and is_chain_file(real):
        return "it is a hawkes chain file"
    return None


def refuse_output(
    path: str | Path, what: str, inputs: Iterable[str | Path] = (), folder: bool | None = None
) -> None:
    """Raise :class:`UsageError` when :func:`output_problem` finds a reason, or, with
    ``folder`` given, :func:`~hawkes_cli.atomic.shape_problem`."""
    why = output_problem(path, inputs)
    why = why or (None if folder is None else atomic.shape_problem(path, folder))
    if why is not None:
        raise UsageError(f"refusing to write {what} to {path}: {why}; choose another path")


_AFRESH = "pass --overwrite to start that run afresh"


def shown(diff: Iterable[str]) -> str:
    """The first four differences, and how many more."""
    diff = list(diff)
    return "; ".join(diff[:4]) + (f"; and {len(diff) - 4} more" if diff[4:] else "")


def _extend_hint(old: Config, diff: list[str]) -> str:
    """For a config that differs from the run's ``old`` in its warm-up and keys no draw depends
    on (more iterations moving a default warm-up), how to extend the run instead."""
    keys = {d.partition(": ")[0] for d in diff}
    if "sampler.warmup" in keys and all(k == "sampler.warmup" or run_only(k) for k in keys):
        return f"; to extend the run, keep its warm-up: set sampler.warmup: {old.sampler.warmup}"
    return ""


# --------------------------------------------------------------------------- the directory


@dataclass(frozen=True)
class RunDir:
    """One run directory (see the module docstring for its layout).

    Attributes
    ----------
    root
        The directory (``output.run_dir`` of the config).
    """

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @classmethod
    def of(cls, config: Config) -> RunDir:
        """The run directory of a config."""
        return cls(config.output.run_dir)

    # ---- paths
    @property
    def config_path(self) -> Path:
        return self.root / CONFIG_NAME

    @property
    def chains_dir(self) -> Path:
        return self.root / CHAINS_DIR

    @property
    def logs_dir(self) -> Path:
        return self.root / LOGS_DIR

    @property
    def slurm_dir(self) -> Path:
        return self.root / SLURM_DIR

    @property
    def slurm_logs_dir(self) -> Path:
        return self.slurm_dir / "logs"

    @property
    def script_path(self) -> Path:
        return self.slurm_dir / SCRIPT_NAME

    @property
    def plan_path(self) -> Path:
        return self.slurm_dir / PLAN_NAME

    @property
    def jobs_path(self) -> Path:
        return self.slurm_dir / JOBS_NAME

    def chain_path(self, chain_id: int) -> Path:
        """``RUN_DIR/chains/chain-XX.h5``."""
        return self.chains_dir / f"chain-{chain_id:02d}.h5"

    @property
    def start_path(self) -> Path:
        """``RUN_DIR/chains/start.json``: the fast start the chains share (lock ``start.lock``)."""
        return self.chains_dir / "start.json"

    @property
    def converged_path(self) -> Path:
        """``RUN_DIR/chains/converged.json``: the run passed its convergence check
        (:class:`hawkes_cli.runner.converged.RunConverged`)."""
        return self.chains_dir / CONVERGED_NAME

    def progress_path(self, chain_id: int) -> Path:
        """``RUN_DIR/chains/chain-XX.progress.json``."""
        return progress_path(self.chain_path(chain_id))

    def log_path(self, chain_id: int) -> Path:
        """``RUN_DIR/logs/chain-XX.log`` (a local chain's output)."""
        return self.logs_dir / f"chain-{chain_id:02d}.log"

    def node_state_path(self, node: int) -> Path:
        """``RUN_DIR/slurm/node-NN.json``: starts, requeues and ends of one array task."""
        return self.slurm_dir / f"node-{node:02d}.json"

    def chain_files(self) -> list[tuple[int, Path]]:
        """The chain files present, as ``(chain id, path)`` ascending by id ([] if none).

        A directory without ``chains/`` is read as a folder of chain files itself.
        """
        folder = self.chains_dir if self.chains_dir.is_dir() else self.root
        try:
            entries = list(folder.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return []
        found = []
        for p in entries:
            m = _CHAIN_FILE.match(p.name)
            if m and p.is_file():
                found.append((int(m.group(1)), p))
        return sorted(found)

    def events_digests(self) -> set[str]:
        """The events digests (:meth:`~hawkes_cli.data.EventData.digest`) the chain files
        record; empty for files of versions before the digest was kept.

        Raises
        ------
        StorageError
            A chain file is damaged.
        """
        return {
            str(read_chain(path).attrs.get("events_sha256") or "") for _, path in self.chain_files()
        } - {""}

    # ---- the resolved config
    def write_config(self, config: Config, *, overwrite: bool = False, quiet: bool = False) -> Path:
        """Create the directory and write the resolved config (the path of ``config.yaml``,
        which chains and jobs read); one that differs in run-only keys replaces the run's with a
        WARNING line. Raises as :meth:`config_change`, or StorageError (cannot create it)."""
        change = self.config_change(config, overwrite=overwrite)
        try:
            self.chains_dir.mkdir(parents=True, exist_ok=True)
            self.logs_dir.mkdir(exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"cannot create the run directory {self.root} ({exc.strerror or exc}); choose "
                "another output.run_dir"
            ) from None
        target = self.config_path
        if change == ():
            return target
        if change and not (overwrite or quiet):  # quiet: the caller says it (slurm.jobs)
            log.warning("%s changed: %s (no draw depends on these keys)", target, shown(change))
        atomic.write_text(target, resolved_text(config))
        return target

    def config_change(
        self, config: Config, *, overwrite: bool = False, afresh: str = _AFRESH
    ) -> tuple[str, ...] | None:
        """What writing ``config`` would change in the run's ``config.yaml``; writes nothing.

        Returns ``None`` when there is no config yet, ``()`` when it is the same, else the
        differences (:meth:`~hawkes_cli.config.Config.differences`) of a config that may replace
        it: one differing in run-only keys (no draw depends on them, no fewer iterations than
        a chain has run), or any with ``overwrite``. ``afresh``: the refusal's advice on how
        to start the run afresh.

        Raises
        ------
        OtherRunError
            The directory holds a run of a different config (and not ``overwrite``).
        StorageError
            A chain of the run is being written.
        ConfigError
            Fewer ``sampler.iterations`` than a chain has run.
        """
        target = self.config_path
        if not target.exists():
            return None
        old = self.load_config()
        if old.sha256 == config.sha256:
            return ()
        diff = old.differences(config)
        keeps = old.draws_sha256 == config.draws_sha256  # differs in RUN_ONLY_KEYS only
        if not (overwrite or keeps):
            raise OtherRunError(
                f"{self.root} holds a run of a different config ({target}: {shown(diff)}); "
                f"choose another output.run_dir, or {afresh}" + _extend_hint(old, diff)
            )
        self._refuse_while_running("change its config" if keeps else "replace its config")
        if keeps and not overwrite:  # told: the run's config changes under its draws
            self._refuse_fewer(config.sampler.iterations, config.source or target)
        return tuple(diff)

    def _refuse_fewer(self, iterations: int, where: str | Path) -> None:
        """Raise :class:`ConfigError` when a chain has run more than ``iterations``."""
        ran = [(c.iteration, k) for k, _ in self.chain_files() if (c := self.checkpoint(k))]
        most, chain = max(ran, default=(0, 0))
        if most > iterations:
            raise ConfigError(
                f"{where}: chain {chain} of {self.root} has run {most} iterations, more than "
                f"sampler.iterations ({iterations}); set it to {most} or more (nothing was "
                "changed)"
            )

    def _refuse_while_running(self, what: str) -> None:
        """Raise :class:`StorageError` when a chain of this directory is being written."""
        for chain_id, path in self.chain_files():
            holder = writer_holder(path)
            if holder is not None:
                raise StorageError(
                    f"cannot {what}: chain {chain_id} of {self.root} is running ({holder}); "
                    "stop its chains first (Ctrl-C, `hawkes-run cancel`), nothing was changed"
                )

    def load_config(self) -> Config:
        """The resolved config of this run directory (``config.yaml``; without one, the config
        its first chain file records).

        Raises
        ------
        UsageError
            There is no ``config.yaml``: not a run directory.
        """
        from .config import config_from_yaml_text, load_config

        if not self.config_path.is_file() and self.chain_files():
            # chains run by `hawkes-run chain` of an earlier version: their files hold it
            _, first = self.chain_files()[0]
            chain = read_chain(first)
            return config_from_yaml_text(
                str(chain.attrs.get("config_yaml", "")),
                base_dir=self.root,
                where=f"{first} (attribute config_yaml)",
            )
        if not self.config_path.is_file():
            raise UsageError(
                f"{self.root} is not a run directory (no {CONFIG_NAME}); give the run directory "
                "that `hawkes-run submit` or `hawkes-run local` wrote"
            )
        return load_config(self.config_path)

    # ---- chain records
    def commit_record(self, chain_id: int) -> dict[str, Any] | None:
        """The chain's commit record (``draws``, ``committed_at``, ``checkpoint``, ...; see
        :func:`hawkes_cli.storage.read_sidecar`), None when nothing was committed."""
        return read_sidecar(self.chain_path(chain_id))

    def checkpoint(self, chain_id: int) -> Checkpoint | None:
        """The chain's last committed checkpoint (None when nothing was committed).

        Raises
        ------
        StorageError
            The commit record is unreadable or its checkpoint damaged.
        """
        side = self.commit_record(chain_id)
        if side is None or side.get("checkpoint") is None:
            return None
        where = str(sidecar_path(self.chain_path(chain_id)))
        return Checkpoint.from_json(side["checkpoint"], where)

    def verified_checkpoint(self, chain_id: int) -> Checkpoint | None:
        """The chain's last checkpoint, after checking it against its chain file.

        The file is read (:func:`~hawkes_cli.storage.read_chain`: its commit record's checksum,
        the committed draws' fingerprint), must hold chain ``chain_id`` of this run's config
        (``config.yaml``'s sha256, where there is one), and the checkpoint must fit the draws
        (:meth:`Checkpoint.check_commit`).

        Raises
        ------
        StorageError
            Any disagreement, or a damaged file or record.
        """
        path = self.chain_path(chain_id)
        if not path.exists() and not sidecar_path(path).exists():
            return None
        if not path.exists():
            raise StorageError(
                f"checkpoint {sidecar_path(path)} exists but chain file {path} does not; its "
                "committed draws are lost: restore the file, or pass --overwrite"
            )
        chain = read_chain(path)
        attrs = chain.attrs
        if attrs["chain_id"] != chain_id:
            raise StorageError(
                f"{path} holds chain {attrs['chain_id']}, not chain {chain_id}: chain files were "
                "renamed or swapped; put each back under its own number, or start over with "
                "--overwrite"
            )
        sha = self._other_config(attrs)
        if sha is not None:
            raise StorageError(
                f"{path} was written with another config (sha256 {attrs['config_sha256']}) than "
                f"{self.config_path} ({sha}); move it to its own run directory, or start over "
                "with --overwrite"
            )
        if chain.checkpoint is None:
            return None
        where = str(sidecar_path(path))
        ckpt = Checkpoint.from_json(chain.checkpoint, where)
        ckpt.check_commit(
            chain.n_committed,
            chain.last_iteration,
            int(attrs["iterations"]),
            int(attrs["thin"]),
            where,
        )
        return ckpt

    def _other_config(self, attrs: Mapping[str, Any]) -> str | None:
        """The sha256 of ``config.yaml`` if a chain file's config (its ``attrs``) differs from
        it beyond :data:`~hawkes_cli.config.RUN_ONLY_KEYS`, else (or without one) None."""
        try:
            text = self.config_path.read_text(encoding="utf-8")
        except OSError:
            return None
        sha = header_sha256(text.partition("\n")[0])
        mine = str(attrs.get("config_yaml", ""))
        return None if sha in (None, attrs["config_sha256"]) or same_draws(mine, text) else sha

    def is_finished(self, chain_id: int) -> bool:
        """True when the chain's checkpoint, verified against its file
        (:meth:`verified_checkpoint`), says it is complete.

        Raises
        ------
        StorageError
            The file, its record or its checkpoint is damaged or disagrees.
        """
        ckpt = self.verified_checkpoint(chain_id)
        sc = self.load_config().sampler
        return bool(ckpt and ckpt.done(sc.iterations, sc.stop_when))

    def write_progress(self, progress: Progress) -> None:
        """Replace the chain's progress record."""
        atomic.write_json(self.progress_path(progress.chain), progress.to_json(), indent=None)

    def read_progress(self, chain_id: int, iterations: int = 0) -> Progress:
        """The chain's latest progress record (status ``pending`` where there is none)."""
        try:
            data = json.loads(self.progress_path(chain_id).read_text(encoding="utf-8"))
            if isinstance(data, dict):
                return Progress.from_json(data)
        except (OSError, ValueError, TypeError):
            pass
        return Progress(chain=chain_id, status="pending", iteration=0, iterations=iterations)

    # ---- Slurm job records
    def read_jobs(self) -> list[dict[str, Any]]:
        """The submissions recorded in ``slurm/jobs.json`` (oldest first; [] if none).

        Raises
        ------
        StorageError
            If the file exists but is not a valid record.
        """
        path = self.jobs_path
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise StorageError(f"cannot read {path}: {exc}") from None
        jobs = data.get("jobs") if isinstance(data, dict) else None
        if not isinstance(jobs, list):
            raise StorageError(f"{path}: expected an object with a list 'jobs'")
        return jobs

    def record_job(self, record: Mapping[str, Any]) -> None:
        """Append a submission to ``slurm/jobs.json``."""
        jobs = self.read_jobs()
        jobs.append(dict(record))
        atomic.write_json(self.jobs_path, {"jobs": jobs}, make_parents=True)

    def read_node_state(self, node: int) -> dict[str, Any]:
        """The event record of array task ``node`` (``{"events": []}`` if none yet)."""
        try:
            data = json.loads(self.node_state_path(node).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"node": node, "events": []}
        if not isinstance(data, dict) or not isinstance(data.get("events"), list):
            return {"node": node, "events": []}
        return data

    def record_node_event(self, node: int, event: str, **fields: Any) -> None:
        """Append an event (``start``, ``requeue``, ``finished``, ...) to ``node-NN.json``."""
        data = self.read_node_state(node)
        data["node"] = node
        data["events"].append({"event": event, "time": now_utc("seconds"), **fields})
        atomic.write_json(self.node_state_path(node), data, make_parents=True)

    def requeue_count(self, node: int) -> int:
        """How many times array task ``node`` was started again after a requeue (any cause)."""
        events = self.read_node_state(node)["events"]
        return sum(1 for e in events if e.get("event") == "start" and int(e.get("restart", 0)) > 0)
