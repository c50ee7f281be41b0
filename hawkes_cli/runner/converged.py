"""``sampler.stop_when: converged``: whether the run's chains may end.

At each commit after warm-up, a chain's rank 0 asks :func:`run_converged`. The answer is the
run's :class:`RunConverged` record (``chains/converged.json``) when one holds for the current
chain files; otherwise the chains' committed draws are read as ``hawkes-diagnose`` reads them
(:func:`hawkes_cli.diagnostics.diagnose`, default burn-in: each chain's warm-up) and, when
they pass with every chain of the run contributing (R-hat <= 1.01 and bulk and tail ESS >= 400
for every checked quantity, no stuck chain, no chain much shorter than the others), the record
is written and returned. Findings that more draws cannot change (:data:`NOT_FROM_DRAWS`: a
truncation bound above the tolerance after warm-up, whose cut-off is fixed by then; the edge,
ties, time unit, coordinate and changed-events notes about the data and the model) stay in the
diagnosis, and in the finding chain's log, but do not hold the chains back: a run that waited
for them would run to ``sampler.iterations``. The first chain to find it ends at once; the
others end as soon as they see the record (:func:`found`, looked for between commits every
:data:`LOOK_SECONDS`), whatever their own draws say then, so the run ends with the check that
passed.

The check only reads committed draws (SWMR readers; a chain being written is read as of its
last commit). A chain whose file cannot be read yet, or a run with fewer chains with draws
than ``chains.count``, is simply not converged yet.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .. import atomic
from ..config import Config
from ..diagnostics import SummaryRow, diagnose
from ..errors import HawkesError
from ..rundir import RunDir, now_utc

log = logging.getLogger(__name__)

#: Seconds between a chain's looks for another chain's record between its commits.
LOOK_SECONDS = 5.0
#: Verdict codes (:class:`~hawkes_cli.diagnostics.records.Verdict`) that more draws cannot
#: change: they do not hold the chains back (module docstring).
NOT_FROM_DRAWS = frozenset({"bound", "edge", "ties", "time_unit", "crs", "events"})

__all__ = [
    "LOOK_SECONDS",
    "NOT_FROM_DRAWS",
    "Check",
    "RunConverged",
    "committed_draws",
    "forget",
    "found",
    "read_record",
    "run_converged",
]


@dataclass(frozen=True)
class RunConverged:
    """The run passed its convergence check (``sampler.stop_when: converged``): every chain
    ends, as finished, as soon as it sees this record.

    Attributes
    ----------
    config_sha256
        The draws' config of the run it was found for (:attr:`Config.draws_sha256`: a change
        of ``RUN_ONLY_KEYS`` since keeps it).
    chain
        The chain whose check found it.
    draws
        Committed draws of each chain (warm-up included) when it was found, by chain id; a
        record whose counts exceed a chain's committed draws belongs to chain files that were
        replaced since, and is ignored.
    common_draws
        Post-warm-up draws per chain that R-hat and ESS used.
    largest_rhat, smallest_ess
        The worst R-hat and the smallest bulk or tail ESS over the checked quantities.
    at
        When it was found (UTC, ISO 8601).
    """

    config_sha256: str
    chain: int
    draws: tuple[int, ...]
    common_draws: int
    largest_rhat: float
    smallest_ess: float
    at: str

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict."""
        out = asdict(self)
        out["draws"] = list(self.draws)
        return out

    @classmethod
    def from_json(cls, data: Any) -> RunConverged | None:
        """The record, or None when ``data`` is not one (a damaged file is no record)."""
        try:
            return cls(
                config_sha256=str(data["config_sha256"]),
                chain=int(data["chain"]),
                draws=tuple(int(n) for n in data["draws"]),
                common_draws=int(data["common_draws"]),
                largest_rhat=float(data["largest_rhat"]),
                smallest_ess=float(data["smallest_ess"]),
                at=str(data["at"]),
            )
        except (KeyError, TypeError, ValueError):
            return None

    def holds_for(self, config_sha256: str, draws: Mapping[int, int]) -> bool:
        """Whether the record belongs to this run's current chain files: the same config, and
        every chain it counted holds at least as many committed draws now (``draws``)."""
        return self.config_sha256 == config_sha256 and all(
            draws.get(k, 0) >= n for k, n in enumerate(self.draws)
        )


def read_record(run_dir: RunDir) -> RunConverged | None:
    """The run's :class:`RunConverged` record (``RunDir.converged_path``); None when there is
    none or it is damaged (whether it holds for the current chains: :meth:`~RunConverged.
    holds_for`)."""
    try:
        data = json.loads(run_dir.converged_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return RunConverged.from_json(data)


def found(run_dir: RunDir, config: Config) -> RunConverged | None:
    """The run's record when another chain found the run converged and it holds for the
    current chain files (reads small JSON files only: cheap enough between commits)."""
    record = read_record(run_dir)
    if record is None:
        return None
    draws = committed_draws(run_dir, config.chains.count)
    return record if record.holds_for(config.draws_sha256, draws) else None


def forget(run_dir: RunDir) -> None:
    """Remove the run's record (its chains start afresh: their files are new)."""
    run_dir.converged_path.unlink(missing_ok=True)


def committed_draws(run_dir: RunDir, chains: int) -> dict[int, int]:
    """Committed draws (warm-up included) of each chain with a commit record, by chain id."""
    out = {}
    for k in range(chains):
        try:
            record = run_dir.commit_record(k)
        except (HawkesError, OSError):
            continue
        if record is not None:
            out[k] = int(record.get("draws", 0))
    return out


@dataclass(frozen=True)
class Check:
    """One convergence check: the run's record when it has converged, and a short line for
    the progress display (e.g. ``"not yet at 350 draws/chain: R-hat 1.021 (sigma_x), ESS 226
    (mu0)"``), and the smallest bulk or tail ESS of the checked quantities when every chain
    contributed draws (None otherwise; the progress line projects the end from it)."""

    record: RunConverged | None
    summary: str
    smallest_ess: float | None = None

    @property
    def converged(self) -> bool:
        return self.record is not None


def _worst(rows: list[SummaryRow]) -> tuple[SummaryRow, SummaryRow]:
    """The checked row of the largest R-hat and the one of the smallest bulk or tail ESS."""
    return max(rows, key=lambda r: r.rhat), min(rows, key=lambda r: min(r.ess_bulk, r.ess_tail))


def run_converged(run_dir: RunDir, config: Config, chain_id: int) -> Check:
    """Check whether the run has converged (see the module docstring).

    Parameters
    ----------
    run_dir
        The run directory.
    config
        The run's configuration (its hash identifies the record; ``chains.count`` chains must
        all contribute draws).
    chain_id
        The asking chain (recorded when it finds convergence).
    """
    count = config.chains.count
    record = found(run_dir, config)
    if record is not None:
        return Check(record, f"converged (found by chain {record.chain})")
    draws = committed_draws(run_dir, count)
    try:
        report = diagnose(run_dir.root)
    except HawkesError as exc:  # no draws after warm-up yet, a file mid-creation
        log.info("chain %d: not converged yet: %s", chain_id, exc)
        return Check(None, "not yet: the run cannot be diagnosed yet (see the chain's log)")
    except (OSError, KeyError, ValueError, RuntimeError) as exc:
        # another chain's file as h5py saw it mid-write: the check is advice, and this chain
        # goes on (it checks again at its next commit) rather than fail for another's file
        log.warning("chain %d: convergence not checked this time: %r", chain_id, exc)
        return Check(None, "not checked this time (see the chain's log)")
    used = len(report.used_chains)
    checked = [r for r in report.rows if r.checked]
    holding = [v for v in report.verdicts if v.level != "ok" and v.code not in NOT_FROM_DRAWS]
    if used < count or holding or not checked:
        why = holding[0].message if holding else ""
        log.info(
            "chain %d: not converged yet (%d post-warm-up draws per chain in common, %d of %d "
            "chains)%s",
            chain_id,
            report.common_draws,
            used,
            count,
            f": {why}" if why else "",
        )
        if used < count or not checked:
            return Check(None, f"not yet: {used} of {count} chains have draws after warm-up")
        rhat, ess = _worst(checked)
        smallest = min(ess.ess_bulk, ess.ess_tail)
        return Check(
            None,
            f"not yet at {report.common_draws} draws/chain: R-hat {rhat.rhat:.3f} "
            f"({rhat.label}), ESS {smallest:.0f} ({ess.label})",
            smallest,
        )
    rhat, ess = _worst(checked)
    record = RunConverged(
        config_sha256=config.draws_sha256,
        chain=chain_id,
        draws=tuple(draws.get(k, 0) for k in range(count)),
        common_draws=report.common_draws,
        largest_rhat=rhat.rhat,
        smallest_ess=min(ess.ess_bulk, ess.ess_tail),
        at=now_utc(),
    )
    atomic.write_json(run_dir.converged_path, record.to_json())
    log.info(
        "chain %d: the run converged at %d post-warm-up draws per chain (largest R-hat %.4f, "
        "smallest ESS %.0f); every chain ends as soon as it sees this",
        chain_id,
        record.common_draws,
        record.largest_rhat,
        record.smallest_ess,
    )
    for v in report.verdicts:  # NOT_FROM_DRAWS: they stay in hawkes-diagnose's verdict
        if v.level != "ok":
            log.warning(
                "chain %d: converged, but the diagnosis still says: %s", chain_id, v.message
            )
    return Check(record, f"converged at {record.common_draws} draws/chain", record.smallest_ess)
