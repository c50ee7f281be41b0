"""The cut-posterior check as text: the table ``hawkes-diagnose --cut-check`` prints, a note per
row not compared or warned, where the between-draw sds come from, and the verdict line."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .cut import STATUS_LINEAR, CutCheck, CutRow

__all__ = ["format_cut"]


def _g(x: float, digits: int = 3) -> str:
    return "nan" if not math.isfinite(x) else f"{x:.{digits}g}"


def _pm(x: float, se: float) -> str:
    return f"{_g(x)} ({_g(se, 2)})"


def _linear_lines(rows: Sequence[CutRow], n_newton: int) -> list[str]:
    """How the between-draw sds used the linear modes (slope and correlation per parameter)."""
    used = [r for r in rows if math.isfinite(r.linear_slope)]
    if not used:
        return []
    cells = ", ".join(f"{r.name} {r.linear_slope:.3f} ({r.linear_corr:.3f})" for r in used)
    return [
        f"between-draw sds by double sampling: the Newton modes of {n_newton} draws regressed on "
        f"their linear modes, whose spread over all {used[0].between_draws} draws the slope "
        f"carries; slope (correlation): {cells}"
    ]


def format_cut(check: CutCheck) -> str:
    """The check as a table (sds of the log-parameters, i.e. relative sds), a note per row not
    compared or warned, and the verdict line."""
    n_newton = sum(c.status != STATUS_LINEAR for c in check.conditionals)
    on = "each" if n_newton == check.n_draws else f"{n_newton} of them, the linear mode on all"
    head = (
        f"cut posterior check: {check.n_draws} location draws (each event uniform in its "
        f"county), the conditional mode and curvature of the log parameters on {on}; "
        f"{check.evaluations} evaluations, {check.pair_passes} pair passes, {check.seconds:.0f} s"
    )
    cols = ("log param", "within sd", "between sd", "cut sd (se)", "chains' sd (MCSE)", "ratio")
    cols += ("skew", "status")
    table = [cols]
    for r in check.rows:
        ratio = "nan" if not math.isfinite(r.ratio) else f"{r.ratio:.3f} +- {_g(r.ratio_se, 2)}"
        table.append(
            (
                r.name,
                _g(r.within_sd),
                _g(r.between_sd),
                _pm(r.cut_sd, r.cut_se),
                _pm(r.chains_sd, r.chains_se),
                ratio,
                f"{r.skewness:+.2f}" if math.isfinite(r.skewness) else "nan",
                r.status,
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    lines = [head] + [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table
    ]
    lines += [f"  {r.name}: {r.reason}" for r in check.rows if r.reason]
    lines += _linear_lines(check.rows, n_newton)
    sampled = [c for c in check.conditionals if c.is_sd is not None]
    if sampled:
        factors = ", ".join(f"{r.name} {_pm(r.is_factor, r.is_factor_se)}" for r in check.rows)
        lines.append(
            f"within-draw sds: each draw's Laplace sd times the importance-sampled / Laplace sd "
            f"of {len(sampled)} draw(s) (Kish ESS "
            f"{', '.join(f'{c.is_ess:.0f}' for c in sampled)}): {factors}"
        )
    lines.append(f"cut check: {check.verdict}: {check.message}")
    return "\n".join(lines)
