"""Plots of the retained draws: trace, rank and posterior PNG files.

arviz and matplotlib are imported inside :func:`write_plots` (matplotlib's non-interactive Agg
backend unless pyplot is already in use); each file is written through :mod:`hawkes_cli.atomic`.
"""

from __future__ import annotations

import logging
import math
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import atomic
from ..errors import UsageError
from .export import Source, draws_of, to_inference_data
from .options import DiagnoseOptions
from .records import Draws

__all__ = ["write_plots"]

log = logging.getLogger(__package__)


@dataclass(frozen=True, eq=False)
class _Plotting:
    """What every figure needs: the draws, their InferenceData and the plotted names."""

    draws: Draws
    idata: Any
    finite: frozenset[str]
    params: tuple[str, ...]
    what: str

    def title(self, name: str) -> str:
        unit = self.draws.units[name]
        return f"{self.draws.labels[name]} ({unit})" if unit else self.draws.labels[name]

    @property
    def n_chains(self) -> int:
        return len(self.draws.chain_ids)


def _figure_class() -> Any:
    """matplotlib's ``Figure``, on the Agg backend unless pyplot is already in use."""
    import arviz  # noqa: F401  (first: importing arviz may load pyplot and its backend)
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure


def _plotting(draws: Draws, opts: DiagnoseOptions) -> _Plotting:
    """The plotted parameters (those without NaN/inf draws) and the figures' common subtitle."""
    idata = to_inference_data(draws, opts)
    finite = frozenset(draws.finite_names())
    left_out = [name for name in draws.variables if name not in finite]
    params = tuple(p for p in draws.param_names if p in finite)
    what = (
        f"{draws.run_dir.name}: model {draws.model}, {len(draws.chain_ids)} chain(s) x "
        f"{draws.common_draws} draws after burn-in"
    )
    if left_out:
        what += f"\n(not plotted, NaN/inf draws: {', '.join(draws.labels[v] for v in left_out)})"
        log.warning("plots leave out %s: NaN or inf draws", ", ".join(left_out))
    if not params:
        raise UsageError("nothing to plot: every parameter has NaN or inf draws")
    return _Plotting(draws, idata, finite, params, what)


def _trace(p: _Plotting, Figure: Any) -> Any:
    import arviz as az

    fig = Figure(figsize=(12, 2.6 * len(p.params)), layout="constrained")
    axes = fig.subplots(len(p.params), 2, squeeze=False)
    az.plot_trace(
        p.idata,
        var_names=list(p.params),
        axes=axes,
        compact=True,
        chain_prop="color",
        legend=p.n_chains <= 10,
        show=False,
    )
    for i, name in enumerate(p.params):
        axes[i, 0].set_title(f"{p.title(name)}: density per chain")
        axes[i, 0].set_xlabel(p.title(name))
        axes[i, 1].set_title(f"{p.title(name)}: trace")
        axes[i, 1].set_xlabel("draw (after burn-in)")
        axes[i, 1].set_ylabel(p.draws.units[name] or "value")
    fig.suptitle(f"Trace plots — {p.what}")
    return fig


def _rank(p: _Plotting, Figure: Any) -> Any:
    import arviz as az

    fig = Figure(figsize=(12, 2.6 * len(p.params)), layout="constrained")
    axes = fig.subplots(len(p.params), 1, squeeze=False)[:, 0]
    kind = "bars" if p.n_chains <= 8 else "vlines"
    az.plot_rank(p.idata, var_names=list(p.params), ax=axes, kind=kind, show=False)
    for ax, name in zip(axes, p.params, strict=True):
        ax.set_title(f"{p.title(name)}: rank plot (uniform when the chains agree)")
        ax.set_xlabel("rank of the draw among all chains")
    fig.suptitle(f"Rank plots — {p.what}")
    return fig


def _posterior_names(p: _Plotting) -> list[str]:
    """The table's quantities in the table's units: the parameters (``tau_t`` and ``sigma_t``
    in the data's time unit, as the table and the trace plots), then the derived quantities
    that are not the same parameter in another unit (``*_weeks``)."""
    names = list(p.params)
    names += [
        v
        for v in p.draws.variables
        if v in p.finite and v not in p.draws.param_names and not v.endswith("_weeks")
    ]
    return names


def _mark_interval(ax: Any, title: str, values: np.ndarray) -> None:
    """The median (solid) and the equal-tailed 95% interval (dashed), their numbers in the
    title (no text inside the axes, where it would cross the lines)."""
    med, lo, hi = np.quantile(values, [0.5, 0.025, 0.975])
    ax.axvline(med, color="C3", linestyle="-", linewidth=1.2)
    ax.axvline(lo, color="k", linestyle="--", linewidth=1)
    ax.axvline(hi, color="k", linestyle="--", linewidth=1)
    sub = f"median {med:.4g}, 95% interval ({lo:.4g}, {hi:.4g})"
    ax.set_title(f"{title}\n{sub}", fontsize=10)


def _posterior(p: _Plotting, Figure: Any) -> Any:
    import arviz as az

    names = _posterior_names(p)
    ncols = 3 if len(names) > 4 else len(names)
    nrows = math.ceil(len(names) / ncols)
    fig = Figure(figsize=(4.5 * ncols, 3.2 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    az.plot_posterior(
        p.idata,
        var_names=names,
        ax=axes[: len(names)],
        point_estimate=None,
        hdi_prob="hide",
        textsize=10,
        show=False,
    )
    for ax, name in zip(axes, names, strict=False):
        _mark_interval(ax, p.title(name), np.concatenate(p.draws.variables[name]))
    for ax in axes[len(names) :]:
        ax.set_visible(False)
    fig.suptitle(f"Posterior density (red: median; dashed: equal-tailed 95% interval) — {p.what}")
    return fig


def save_png(fig: Any, path: Path, dpi: int = 100, *, tight: bool = False) -> Path:
    """Write the matplotlib figure ``fig`` to ``path`` as PNG, atomically (UsageError if the
    folder refuses it); ``tight``: cropped to the drawn content plus a small pad. Returns
    ``path``."""
    crop = {"bbox_inches": "tight", "pad_inches": 0.04} if tight else {}
    try:
        with atomic.replacing(path) as tmp:
            fig.savefig(tmp, dpi=dpi, format="png", **crop)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc}") from exc
    log.info("wrote %s", path)
    return path


_FIGURES = (
    (_trace, "trace.png"),
    (_rank, "rank.png"),
    (_posterior, "posterior.png"),
)

#: The files ``--plots`` writes: the only names an existing plot folder may hold.
PLOT_FILES = frozenset(name for _, name in _FIGURES)


def write_plots(
    source: Source,
    options: DiagnoseOptions | None,
    out_dir: Path,
) -> list[Path]:
    """Write trace, rank and posterior plots as PNG files.

    Parameters
    ----------
    source
        A :class:`Report` (its draws are reused), :class:`Draws`, or a run directory (read with
        ``options``).
    options
        Burn-in, thinning, counties when ``source`` is a directory; otherwise ignored.
    out_dir
        Folder for the files (created).

    Returns
    -------
    list of Path
        ``trace.png`` (per parameter: density per chain and the trace), ``rank.png`` (rank
        histograms per chain, flat when the chains agree) and ``posterior.png`` (every parameter
        and derived quantity in reporting units, median and equal-tailed 95% interval marked).
    """
    Figure = _figure_class()
    draws, opts = draws_of(source, options)
    out_dir = Path(out_dir)
    p = _plotting(draws, opts)
    written: list[Path] = []
    try:
        with (
            atomic.replacing_folder(out_dir, owns=PLOT_FILES.__contains__) as tmp,
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")
            for make, filename in _FIGURES:
                save_png(make(p, Figure), tmp / filename)
                written.append(out_dir / filename)
    except atomic.ForeignFilesError as exc:
        raise UsageError(
            f"--plots {out_dir}: the folder holds files --plots does not write "
            f"({', '.join(exc.names[:5])}); give a new or empty folder (nothing written)"
        ) from None
    except OSError as exc:
        raise UsageError(f"cannot write the plots into {out_dir}: {exc}") from exc
    return written
