"""The temporal goodness-of-fit pictures (PNG, matplotlib's Agg backend): the time-rescaling QQ
plot and the observed against expected counts per cell. The maps are in :mod:`.mapping`.

The QQ plot compares the sorted gaps of the rescaled times with Exponential(1) quantiles. Its
95% band is pointwise: the ``i``-th of ``n`` sorted Exponential(1) gaps is ``-log(1 - U)`` with
``U ~ Beta(i, n - i + 1)`` (the ``i``-th order statistic of ``n`` uniforms), so its 2.5% and
97.5% quantiles are ``-log(1 - Beta.ppf(0.025 | 0.975; i, n - i + 1))``. The plotted points are
thinned to about :data:`QQ_POINTS` ranks evenly spaced along the theoretical axis (with the
first and the last), so they stay apart at a million events; the KS test uses every gap.
"""

from __future__ import annotations

import io
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import atomic

log = logging.getLogger(__name__)

#: Resolution of the goodness-of-fit pictures (dots per inch).
DPI = 150
#: About how many ranks the QQ plot draws.
QQ_POINTS = 300
#: Probability of the pointwise band.
BAND = 0.95
#: Gaps above this multiple of the largest theoretical quantile (or band) are off the QQ axes.
OFF_SCALE = 1.25


def figure(width: float, height: float) -> Any:
    """A matplotlib ``Figure`` (constrained layout), on the Agg backend unless pyplot is in
    use."""
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def save(fig: Any, path: Path) -> Path:
    """Write ``fig`` as PNG atomically, cropped to its content (:data:`DPI`): drawn in memory,
    then written (a full disk is a :class:`~hawkes_cli.atomic.NoSpaceError`, which
    :func:`~.api.run_gof` words)."""
    buf = io.BytesIO()
    fig.savefig(buf, dpi=DPI, format="png", bbox_inches="tight", pad_inches=0.04)
    atomic.write_bytes(path, buf.getbuffer())
    log.info("wrote %s", path)
    return path


@dataclass(frozen=True)
class QQ:
    """The points and band of a QQ plot of rescaled gaps against Exponential(1).

    Attributes
    ----------
    rank : (M,) int64
        1-based ranks ``i`` of the plotted order statistics (ascending, first and last
        included).
    theoretical : (M,) float64
        Exponential(1) quantiles ``-log(1 - (i - 0.5)/n)``.
    empirical : (M,) float64
        The ``i``-th smallest gap.
    lower, upper : (M,) float64
        The pointwise band of the ``i``-th smallest of ``n`` Exponential(1) gaps.
    n : int
        Gaps in all.
    """

    rank: np.ndarray
    theoretical: np.ndarray
    empirical: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    n: int


def rescaled_gaps(tau: np.ndarray) -> np.ndarray:
    """Gaps of the sorted rescaled times, the first from 0: (N,) float64."""
    return np.diff(np.concatenate([[0.0], np.sort(np.asarray(tau, dtype=np.float64))]))


def qq_points(gaps: np.ndarray, points: int = QQ_POINTS, level: float = BAND) -> QQ:
    """The thinned QQ points of ``gaps`` and their pointwise band (module docstring).

    Parameters
    ----------
    gaps : (N,) float64
        Rescaled gaps (any order), N >= 1.
    points
        About how many ranks to keep: those nearest ``points`` theoretical quantiles evenly
        spaced between the first and the last.
    level
        Probability of the band.
    """
    from scipy import stats

    g = np.sort(np.asarray(gaps, dtype=np.float64))
    n = g.size
    q_first, q_last = -np.log1p(-0.5 / n), -np.log1p(-(n - 0.5) / n)
    targets = np.linspace(q_first, q_last, max(points, 2))
    rank = np.unique(np.clip(np.rint(n * -np.expm1(-targets) + 0.5), 1, n).astype(np.int64))
    rank = np.union1d(rank, [1, n])
    a, b = rank.astype(np.float64), (n - rank + 1).astype(np.float64)
    tail = (1.0 - level) / 2
    return QQ(
        rank=rank,
        theoretical=-np.log1p(-(rank - 0.5) / n),
        empirical=g[rank - 1],
        lower=-np.log1p(-stats.beta.ppf(tail, a, b)),
        upper=-np.log1p(-stats.beta.ppf(1.0 - tail, a, b)),
        n=n,
    )


def qq_plot(tau: np.ndarray, path: Path, title: str) -> Path:
    """QQ plot of the rescaled gaps against Exponential(1) (left) and the same as differences
    from the line (right), each with the pointwise 95% band. Gaps far beyond the band (a
    stretch of days without events, say) are drawn as triangles at the top edge and counted in
    the legend, so that they do not squeeze the rest into a corner."""
    qq = qq_points(rescaled_gaps(tau))
    x, y = qq.theoretical, qq.empirical
    top = OFF_SCALE * float(max(x[-1], qq.upper[-1]))
    off = y > top
    fig = figure(9.0, 4.2)
    left, right = fig.subplots(1, 2)
    band = f"pointwise {BAND:.0%} band (Exp(1) order statistics)"
    dots = {"ms": 2.5, "mfc": "none", "mew": 0.7, "color": "C0", "ls": "none"}
    left.fill_between(x, qq.lower, qq.upper, color="0.8", lw=0, label=band)
    left.plot([0, top], [0, top], color="k", lw=0.8, label="y = x")
    left.plot(x[~off], y[~off], "o", label=f"gaps ({x.size} of {qq.n:,} ranks shown)", **dots)
    right.fill_between(x, qq.lower - x, qq.upper - x, color="0.8", lw=0, label=band)
    right.axhline(0.0, color="k", lw=0.8)
    right.plot(x[~off], (y - x)[~off], "o", label="gap - quantile", **dots)
    if np.any(off):
        beyond = f"{int(off.sum())} gap(s) beyond the axis (largest {float(y.max()):.4g})"
        left.plot(x[off], np.full(int(off.sum()), top), "^", label=beyond, clip_on=False, **dots)
        right.plot(x[off], np.full(int(off.sum()), top - x[-1]), "^", clip_on=False, **dots)
        right.set_ylim(top=top - x[-1])
    left.set(xlabel="Exponential(1) quantile", ylabel="rescaled gap (sorted)", xlim=(0, top),
             ylim=(0, top * 1.02), aspect="equal")  # fmt: skip
    right.set(xlabel="Exponential(1) quantile", ylabel="rescaled gap - Exponential(1) quantile")
    left.legend(loc="upper left", fontsize=7, frameon=False)
    right.legend(loc="upper left", fontsize=7, frameon=False)
    fig.suptitle(title, fontsize=10)
    return save(fig, path)


def cell_label(width: float, unit: str) -> str:
    """What one counting cell is, e.g. ``day`` (width 1, days) or ``7 days``."""
    from ..diagnostics.derived import time_unit_name

    name = time_unit_name(unit)
    if width == 1.0:
        return {"days": "day", "weeks": "week"}.get(name, f"1 {name}")
    return f"{width:g} {name}"


def counts_plot(
    times: np.ndarray,
    observed: np.ndarray,
    expected: np.ndarray,
    path: Path,
    unit: str,
    width: float = 1.0,
) -> Path:
    """Observed against expected counts per cell, with a 95% Poisson band.

    Parameters
    ----------
    times : (C,) float64
        Start of each cell (time units).
    observed, expected : (C,)
        Events in each cell, and the compensator's increment over it.
    unit
        The time unit (e.g. ``day``).
    width
        The cells' width in time units (a cell of width 1 in days is a day).
    """
    from scipy import stats

    from ..diagnostics.derived import time_unit_name

    cell = cell_label(width, unit)
    fig = figure(9.0, 3.8)
    ax = fig.subplots()
    lo = stats.poisson.ppf(0.025, expected)
    hi = stats.poisson.ppf(0.975, expected)
    ax.fill_between(times, lo, hi, step="post", color="C1", alpha=0.25, lw=0,
                    label="95% Poisson band of the model")  # fmt: skip
    ax.step(times, expected, where="post", color="C1", lw=1, label="expected (model)")
    ax.step(times, observed, where="post", color="C0", lw=0.7, label="observed")
    ax.set(xlabel=f"time ({time_unit_name(unit)})", ylabel=f"events per {cell}")
    ax.set_title(f"Observed and expected events per {cell} (all locations)", fontsize=10)
    ax.legend(fontsize=8, frameon=False)
    ax.margins(x=0.01)
    return save(fig, path)
