"""Verdicts: the thresholds, the findings about chains and rows, and the exit code.

Every message a person reads about the run is written here; :func:`exit_code` turns the
worst verdict into ``hawkes-diagnose``'s exit status.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .read import ChainRead
from .records import Draws, Report, SummaryRow, Verdict
from .stats import MIN_DRAWS

__all__ = [
    "ESS_WARN",
    "RHAT_FAIL",
    "RHAT_WARN",
    "SHORT_CHAIN_FRACTION",
    "STRICT_FAILURE_EXIT_CODE",
    "chain_verdicts",
    "county_problem",
    "excluded",
    "exit_code",
    "row_verdicts",
    "sort_verdicts",
    "time_unit_assumed",
]

RHAT_WARN = 1.01
"""R-hat above this warns."""
RHAT_FAIL = 1.05
"""R-hat above this fails."""
ESS_WARN = 400.0
"""Bulk or tail ESS below this warns."""
SHORT_CHAIN_FRACTION = 0.5
"""A chain with fewer retained draws than this fraction of the longest chain's is named."""
STRICT_FAILURE_EXIT_CODE = 8
"""Exit code of ``hawkes-diagnose --strict`` when a verdict fails (not used by any HawkesError)."""

_ORDER = {"fail": 0, "warn": 1, "ok": 2}


# --------------------------------------------------------------------------- notes of reading


def excluded(chain: ChainRead) -> Verdict:
    """A chain without draws after burn-in is left out."""
    return Verdict(
        "warn",
        f"chain {chain.chain_id} ({chain.path.name}) has no draws after burn-in yet "
        f"({chain.n_committed} committed); it is left out",
        "excluded",
        chain=chain.chain_id,
    )


def time_unit_assumed(why: str) -> Verdict:
    """The time unit was taken to be days (``why``: the reason)."""
    return Verdict("ok", f"time unit assumed to be days: {why}", "time_unit")


def events_changed(why: str) -> Verdict:
    """The events file is not the one the chains ran on (``why``): nothing was read from it."""
    return Verdict(
        "warn",
        f"{why}: the checks that read the events are left out; restore it or pass --events "
        "with the file the chains ran on",
        "events",
    )


def county_problem(problem: str) -> Verdict:
    """A county's lengthscale is NaN (``problem``: why)."""
    return Verdict("warn", f"{problem}; its lengthscale is NaN", "crs")


# --------------------------------------------------------------------------- chains


def _nonfinite(c: ChainRead, names: Sequence[str]) -> list[Verdict]:
    out = []
    for name in names:
        values = c.after_burn_params[name]  # before thinning: no NaN hides between kept draws
        bad = ~np.isfinite(values)
        if not bad.any():
            continue
        k = int(np.count_nonzero(bad))
        it = int(c.after_burn_iterations[np.flatnonzero(bad)[0]])
        kinds = "/".join(
            s for s, m in (("NaN", np.isnan(values)), ("inf", np.isinf(values))) if m.any()
        )
        out.append(
            Verdict(
                "fail",
                f"chain {c.chain_id}: {k} {kinds} draw(s) of {name} (first at iteration "
                f"{it}); the likelihood or sampler broke down: check the chain's log",
                "nonfinite",
                chain=c.chain_id,
                parameter=name,
            )
        )
    return out


def _stuck(c: ChainRead) -> list[Verdict]:
    after = c.after_burn_params
    n_after = len(next(iter(after.values())))
    if n_after < 2 or not all(np.all(np.isfinite(a)) and np.all(a == a[0]) for a in after.values()):
        return []
    its = c.after_burn_iterations
    return [
        Verdict(
            "fail",
            f"chain {c.chain_id} is stuck: no accepted proposal in its {n_after} draws "
            f"after burn-in (iterations {int(its[0])}..{int(its[-1])}); check its initial "
            "values and proposal scale",
            "stuck",
            chain=c.chain_id,
        )
    ]


def _bound(c: ChainRead) -> list[Verdict]:
    if not c.bound_exceedances:
        return []
    return [
        Verdict(
            "warn",
            f"chain {c.chain_id}: {c.bound_exceedances} evaluation(s) after warm-up had a "
            f"truncation bound above engine.tolerance (worst {c.worst_bound:.3g} nats): the "
            "cut-off is fixed after warm-up; a longer sampler.warmup lets it adapt to more of "
            "the posterior, engine.tolerance: 0 is exact",
            "bound",
            chain=c.chain_id,
        )
    ]


def _lengths(used: Sequence[ChainRead], common: int) -> list[Verdict]:
    out = []
    lengths = {c.chain_id: int(c.iterations.size) for c in used}
    longest = max(lengths.values())
    for cid, n in lengths.items():
        if n < SHORT_CHAIN_FRACTION * longest:
            out.append(
                Verdict(
                    "warn",
                    f"chain {cid} is much shorter than the others: {n} draws after burn-in, the "
                    f"longest has {longest}; R-hat and ESS use only the first {common} draws of "
                    "every chain",
                    "short",
                    chain=cid,
                )
            )
    if len(set(lengths.values())) > 1:
        out.append(
            Verdict(
                "ok",
                f"chains differ in length ({min(lengths.values())}..{longest} draws after "
                f"burn-in): R-hat, ESS and MCSE use the common prefix of {common} draws per "
                f"chain; medians and intervals use all {sum(lengths.values())} draws",
                "prefix",
            )
        )
    return out


def chain_verdicts(chains: Sequence[ChainRead], draws: Draws) -> list[Verdict]:
    """Findings about the chains: NaN/inf draws, stuck chains, truncation bounds above the
    tolerance after warm-up, short chains, a single chain."""
    used = [c for c in chains if c.used]
    out: list[Verdict] = []
    for c in used:
        out += _nonfinite(c, draws.param_names)
        out += _stuck(c)
        out += _bound(c)
    out += _lengths(used, draws.common_draws)
    if len(used) == 1:
        out.append(
            Verdict(
                "warn",
                f"only one chain ({used[0].path.name}) has draws: R-hat needs at least two "
                "chains, so between-chain convergence is not checked",
                "one_chain",
            )
        )
    return out


# --------------------------------------------------------------------------- rows


def _rhat_text(value: float) -> str:
    """An R-hat for a message: three decimals, or three digits when chains stuck apart make
    it astronomically large (an O(1) variance over rounding noise)."""
    return f"{value:.3f}" if value < 1e6 else f"{value:.3g}"


def _ess_text(value: float) -> str:
    """An ESS below the threshold for a message (NaN: constant or too few draws)."""
    return f"{value:.0f} < {ESS_WARN:.0f}" if math.isfinite(value) else "not computable"


def _rhat(r: SummaryRow, n_chains: int) -> list[Verdict]:
    if math.isnan(r.rhat) and n_chains >= 2:
        return [Verdict("fail", f"R-hat of {r.label} cannot be computed", "rhat", parameter=r.name)]
    if r.rhat > RHAT_FAIL:
        message = (
            f"R-hat of {r.label} is {_rhat_text(r.rhat)} > {RHAT_FAIL}: the chains disagree; run "
            "longer or check for a stuck or diverging chain"
        )
        return [Verdict("fail", message, "rhat", parameter=r.name)]
    if r.rhat > RHAT_WARN:
        message = (
            f"R-hat of {r.label} is {_rhat_text(r.rhat)} > {RHAT_WARN}: not yet converged; run "
            "longer"
        )
        return [Verdict("warn", message, "rhat", parameter=r.name)]
    return []


def _ess(r: SummaryRow) -> list[Verdict]:
    low = [
        (kind, value)
        for kind, value in (("bulk", r.ess_bulk), ("tail", r.ess_tail))
        if not value >= ESS_WARN
    ]
    if not low:
        return []
    what = ", ".join(f"{kind} ESS {_ess_text(value)}" for kind, value in low)
    message = f"{r.label}: {what}; its intervals are unreliable: run longer or more chains"
    return [Verdict("warn", message, "ess", parameter=r.name)]


def _all_good(usable: Sequence[SummaryRow], found: Sequence[Verdict], n_chains: int):
    """The ``ok`` verdicts when no row warned about R-hat or ESS."""
    out = []
    codes = {v.code for v in found}
    if usable and "rhat" not in codes and n_chains >= 2:
        worst = max(usable, key=lambda r: r.rhat)
        out.append(
            Verdict(
                "ok",
                f"R-hat <= {RHAT_WARN} for every parameter (largest {worst.rhat:.4f}, "
                f"{worst.label})",
                "rhat",
            )
        )
    if usable and "ess" not in codes:
        worst = min(usable, key=lambda r: min(r.ess_bulk, r.ess_tail))
        kind = "bulk" if worst.ess_bulk <= worst.ess_tail else "tail"
        out.append(
            Verdict(
                "ok",
                f"bulk and tail ESS >= {ESS_WARN:.0f} for every parameter (smallest "
                f"{min(worst.ess_bulk, worst.ess_tail):.0f}, {worst.label} {kind})",
                "ess",
            )
        )
    return out


def row_verdicts(rows: Sequence[SummaryRow], draws: Draws, nonfinite: set[str]) -> list[Verdict]:
    """Findings about the checked rows' R-hat and ESS (rows in ``nonfinite`` already failed)."""
    if draws.common_draws < MIN_DRAWS:
        return [
            Verdict(
                "fail",
                f"only {draws.common_draws} draw(s) per chain in the common prefix; R-hat and ESS "
                f"need at least {MIN_DRAWS}: wait for more draws or lower --burn/--thin",
                "too_few",
            )
        ]
    n_chains = len(draws.chain_ids)
    usable = [r for r in rows if r.checked and r.name not in nonfinite]
    out: list[Verdict] = []
    for r in usable:
        out += _rhat(r, n_chains)
        out += _ess(r)
    return out + _all_good(usable, out, n_chains)


def sort_verdicts(verdicts: Sequence[Verdict]) -> tuple[Verdict, ...]:
    """Failures first, then warnings, then the rest (stable within a level)."""
    return tuple(sorted(verdicts, key=lambda v: _ORDER[v.level]))


def exit_code(report: Report) -> int:
    """0, or :data:`STRICT_FAILURE_EXIT_CODE` when ``options.strict`` and a verdict fails."""
    if report.options.strict and report.status == "fail":
        return STRICT_FAILURE_EXIT_CODE
    return 0
