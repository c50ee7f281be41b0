"""The terminal report: :func:`format_table` and its text helpers."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .records import Report, SummaryRow

__all__ = ["format_table"]

_POSTERIOR_HEADER = (
    "quantity",
    "unit",
    "median",
    "2.5%",
    "97.5%",
    "mean",
    "sd",
    "R-hat",
    "ESS bulk",
    "ESS tail",
    "MCSE mean",
)
_COUNTY_HEADER = ("county", "latitude", "density /mi^2", "events")
_CHAIN_HEADER = ("chain", "file", "committed", "used", "iterations used", "acceptance", "status")


def _num(x: float | None, spec: str = ".4g") -> str:
    if x is None:
        return "-"
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if abs(x) >= 1e6:  # an R-hat of chains stuck apart, not a 17-digit number
        return format(x, ".3g")
    return format(x, spec)


def _ess(x: float) -> str:
    return _num(x, ".0f")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 2) -> list[str]:
    """Aligned text columns: the first ``left`` columns left-aligned, the rest right-aligned."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        parts = [
            str(c).ljust(w) if i < left else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    return [line(header), *[line(r) for r in rows]]


def _header_lines(report: Report) -> list[str]:
    used = report.used_chains
    return [
        f"run        {report.run_dir}",
        f"config     sha256 {report.config_sha256[:16]}  model {report.model}  "
        f"time unit {report.time_unit}",
        f"chains     {len(used)} used of {len(report.chains)}; {report.common_draws} draws per "
        f"chain in common, {sum(c.draws_used for c in used)} in all",
        f"burn-in    {report.burn_description}",
        "",
    ]


def _row_cells(r: SummaryRow) -> list[str]:
    return [
        r.label,
        r.unit,
        _num(r.median),
        _num(r.q2_5),
        _num(r.q97_5),
        _num(r.mean),
        _num(r.sd, ".3g"),
        _num(r.rhat, ".3f"),
        _ess(r.ess_bulk),
        _ess(r.ess_tail),
        _num(r.mcse_mean, ".2g"),
    ]


def _posterior_lines(report: Report) -> list[str]:
    body: list[list[str]] = []
    for i, r in enumerate(report.rows):
        if i == len(report.parameters) and report.derived:
            body.append(["derived:"] + [""] * (len(_POSTERIOR_HEADER) - 1))
        body.append(_row_cells(r))
    lines = _table(_POSTERIOR_HEADER, body)
    lines.append("(median and 95% interval from all retained draws; R-hat rank-normalised split)")
    return lines


def _county_lines(report: Report) -> list[str]:
    if not report.counties:
        return []
    rows = [
        [
            c.fips,
            _num(c.latitude, ".4f"),
            _num(c.density, ".6g") if c.density is not None else "-",
            str(c.n_events),
            _num(c.factor, ".5g"),
        ]
        for c in report.counties
    ]
    units = {r.unit for r in report.rows if r.name == f"lengthscale_{report.counties[0].fips}"}
    unit = units.pop() if units else "miles"
    return ["", *_table((*_COUNTY_HEADER, f"{unit} per sigma_x"), rows, left=1)]


def _chain_lines(report: Report) -> list[str]:
    rows = []
    for c in report.chains:
        iters = f"{c.first_iteration}..{c.last_iteration}" if c.first_iteration is not None else "-"
        acc = f"{c.acceptance:.3f}" if c.acceptance is not None else "-"
        status = "finished" if c.finished else f"at {c.iterations_done}/{c.iterations_planned}"
        if not c.used:
            status += ", not used"
        used = str(c.draws_used)
        rows.append(
            [str(c.chain_id), c.path.name, str(c.draws_committed), used, iters, acc, status]
        )
    return ["", *_table(_CHAIN_HEADER, rows, left=2)]


def _verdict_lines(report: Report) -> list[str]:
    lines = ["", f"verdict: {report.status.upper()}"]
    lines += [f"  {v.level.upper():<4}  {v.message}" for v in report.verdicts]
    return lines


def format_table(report: Report) -> str:
    """A readable terminal report: header, posterior table, chains, verdicts.

    Parameters
    ----------
    report
        From :func:`~hawkes_cli.diagnostics.diagnose`.

    Returns
    -------
    str
        Lines joined by newlines, ending with a newline.
    """
    lines = (
        _header_lines(report)
        + _posterior_lines(report)
        + _county_lines(report)
        + _chain_lines(report)
        + _verdict_lines(report)
    )
    return "\n".join(lines) + "\n"
