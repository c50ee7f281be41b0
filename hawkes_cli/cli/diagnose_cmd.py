"""``hawkes-diagnose``: convergence checks and posterior tables of a run directory."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import UsageError
from .options import CONTEXT_SETTINGS, json_option, setup_logging, verbose_option, version_option

if TYPE_CHECKING:
    from ..diagnostics import Report


@click.command(context_settings=CONTEXT_SETTINGS)
@version_option
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--burn",
    type=int,
    default=None,
    help="Drop draws of iterations < BURN (default: the run's warm-up draws).",
)
@click.option(
    "--thin", type=int, default=1, show_default=True, help="Keep every THIN-th draw after burn-in."
)
@click.option(
    "--county",
    "counties",
    multiple=True,
    metavar="FIPS",
    help=(
        "Effective spatial lengthscale for this county (repeatable): miles for lon/lat data, "
        "else the data's coordinate units."
    ),
)
@click.option(
    "--events",
    type=click.Path(path_type=Path),
    default=None,
    help="Events file for --county and time units (default: the config's).",
)
@click.option("--strict", is_flag=True, help="Exit non-zero when any check fails.")
@click.option(
    "--systematic/--no-systematic",
    default=True,
    show_default=True,
    help="Weigh the trigger mass outside the study region and the offspring hidden by same-time "
    "ties against xi0's posterior sd (reads the events and the run's polygons: seconds).",
)
@json_option("Print JSON instead of the table.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV instead of the table.")
@click.option(
    "--netcdf",
    type=click.Path(path_type=Path),
    default=None,
    help="Also write an arviz InferenceData (netCDF) to this file.",
)
@click.option(
    "--plots",
    type=click.Path(path_type=Path),
    default=None,
    help="Also write trace, rank and posterior PNG plots into this folder.",
)
@click.option(
    "--gof",
    "gof_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Also write goodness-of-fit files into this folder: branching probabilities, "
    "time-rescaling KS test, county residuals, maps.",
)
@click.option(
    "--gof-draws",
    type=int,
    default=20,
    show_default=True,
    help="Posterior draws (evenly spaced) for the branching probabilities; one pair pass each.",
)
@click.option(
    "--gof-counties",
    type=click.Path(path_type=Path),
    default=None,
    help="Polygon file (GEOID key) for county residuals (default: data.counties, else the Census "
    "counties for lon/lat data).",
)
@click.option(
    "--gof-seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the tie-breaking and kernel Monte Carlo draws.",
)
@click.option(
    "--date",
    default=None,
    help="Conditional-intensity map at this time (data units) or ISO date (with --gof).",
)
@click.option(
    "--cut-check",
    is_flag=True,
    help="Also check that the chains sample the cut posterior: independent location draws "
    "(the run's own sampler), the conditional mode and curvature of the log parameters on the "
    "first ones (100-250 evaluations, 20-60 pair passes per draw, on the run's engine and "
    "device) and a linear mode on all (11 evaluations, 5 pair passes), the cut sd against the "
    "chains' sd.",
)
@click.option(
    "--cut-draws",
    type=int,
    default=None,
    help="Location draws of --cut-check (default 200: 5-6% relative error on the between-draw sd).",
)
@click.option(
    "--cut-newton-draws",
    type=int,
    default=None,
    help="Of the --cut-check location draws, how many get Newton's mode and curvature (default "
    "20; the within-draw sd, and the check of the linear modes); equal to --cut-draws: all.",
)
@click.option(
    "--cut-is-draws",
    type=int,
    default=None,
    help="Of the --cut-check location draws, how many are also importance-sampled, to "
    "correct the Gaussian reference where a conditional posterior is skewed (default 0: "
    "none; 1,600 evaluations and 100 trigger passes each; 2 at 200,000 cases and more).",
)
@verbose_option
def diagnose(
    run_dir: Path,
    burn: int | None,
    thin: int,
    counties: tuple[str, ...],
    events: Path | None,
    strict: bool,
    systematic: bool,
    as_json: bool,
    as_csv: bool,
    netcdf: Path | None,
    plots: Path | None,
    gof_dir: Path | None,
    gof_draws: int,
    gof_counties: Path | None,
    gof_seed: int,
    date: str | None,
    cut_check: bool,
    cut_draws: int | None,
    cut_newton_draws: int | None,
    cut_is_draws: int | None,
    verbose: int,
) -> None:
    """R-hat, bulk/tail ESS, MCSE and posterior tables of the chains in RUN_DIR.

    Reads only committed draws, so it works on running chains too. Verdicts: R-hat above 1.01
    warns and above 1.05 fails; ESS below 400 warns; stuck chains, NaN/inf draws and chains much
    shorter than the others are named; so are edge and tie errors above xi0's posterior sd.
    With --cut-check, the chains' sds are weighed against the cut posterior's (README).
    """
    from .. import diagnostics as dg

    setup_logging(verbose)
    if as_json and as_csv:
        raise UsageError("choose one of --json and --csv")
    if date is not None and gof_dir is None:
        raise UsageError("--date needs --gof DIR")
    _check_outputs(run_dir, (events, gof_counties), netcdf=netcdf, plots=plots, gof=gof_dir)
    gof_options = None
    if gof_dir is not None:
        from ..gof import GofOptions

        gof_options = GofOptions(
            burn=burn, thin=thin, draws=gof_draws, date=date, counties=gof_counties, seed=gof_seed
        ).checked()  # before the analysis, which can take minutes
    given = {"strict": strict, "events": events, "systematic": systematic}
    given["cut_draws"] = _cut_draws(cut_check, cut_draws, as_csv)
    for name, value in (("--cut-is-draws", cut_is_draws), ("--cut-newton-draws", cut_newton_draws)):
        if value is not None and not cut_check:
            raise UsageError(f"{name} needs --cut-check")
    given["cut_is_draws"] = cut_is_draws
    if cut_check and cut_newton_draws is None:  # the default, so the options check it early
        from ..diagnostics.cut import DEFAULT_CUT_NEWTON_DRAWS

        cut_newton_draws = DEFAULT_CUT_NEWTON_DRAWS
    given["cut_newton_draws"] = cut_newton_draws
    opts = dg.DiagnoseOptions(burn=burn, thin=thin, counties=tuple(counties), **given)
    report = dg.diagnose(run_dir, opts)
    _print_report(report, as_json=as_json, as_csv=as_csv)
    if netcdf is not None:
        click.echo(f"wrote {dg.write_netcdf(report, netcdf)}", err=True)
    if plots is not None:
        for path in dg.write_plots(report, opts, plots):
            click.echo(f"wrote {path}", err=True)
    if gof_dir is not None and gof_options is not None:
        from ..gof import run_gof

        gof = run_gof(run_dir, gof_dir, gof_options)
        click.echo(
            f"goodness of fit: KS D = {gof['ks_statistic']:.4g}, p = {gof['ks_pvalue']:.3g} "
            f"({gof['n_events']} events, compensator {gof['compensator']:.6g})",
            err=True,
        )
        for name in gof["files"]:
            click.echo(f"wrote {Path(gof_dir) / name}", err=True)
    code = dg.exit_code(report)
    if code:
        sys.exit(code)


def _cut_draws(cut_check: bool, cut_draws: int | None, as_csv: bool) -> int | None:
    """The location draws of ``--cut-check`` (None: no check), or a ``UsageError``."""
    from ..diagnostics.cut import DEFAULT_CUT_DRAWS

    if cut_draws is not None and not cut_check:
        raise UsageError("--cut-draws needs --cut-check")
    if cut_check and as_csv:
        raise UsageError("--cut-check prints a table or JSON (--json), not CSV")
    if not cut_check:
        return None
    return DEFAULT_CUT_DRAWS if cut_draws is None else cut_draws


def _print_report(report: Report, *, as_json: bool, as_csv: bool) -> None:
    """The report on stdout (table, JSON or CSV), with the cut-posterior check when its options
    ask for one (:mod:`hawkes_cli.cutcheck`, run here: it evaluates the likelihood)."""
    from .. import diagnostics as dg
    from ..diagnostics.cut_text import format_cut
    from ..diagnostics.truth import format_truth

    cut = None
    if report.options.cut_draws is not None:
        from ..cutcheck import run_cut_check

        cut = run_cut_check(report.run_dir, report.options, draws=report.draws)
    if as_json:
        out = dg.to_json(report)
        if cut is not None:
            out["cut_check"] = cut.as_dict()
        click.echo(json.dumps(out, indent=1))
    elif as_csv:
        click.echo(dg.to_csv(report), nl=False)
    else:
        click.echo(dg.format_table(report))
        if report.truth is not None:
            click.echo("\n" + format_truth(report.truth))
        if cut is not None:
            click.echo("\n" + format_cut(cut))


def _check_outputs(run_dir: Path, given: tuple[Path | None, ...], **outputs: Path | None) -> None:
    """Refuse, before any work, output paths that are the run's own files or an input (the
    run's events and polygons, ``--events``, ``--gof-counties``), or the same path twice."""
    from ..errors import HawkesError
    from ..rundir import RunDir, refuse_output

    inputs = [p for p in given if p is not None]
    try:
        data = RunDir(run_dir).load_config().data
        inputs += [p for p in (data.events, data.counties) if p is not None]
    except HawkesError:
        pass  # not a run directory: diagnose says so
    chosen = {name: path for name, path in outputs.items() if path is not None}
    for name, path in chosen.items():
        refuse_output(path, f"--{name}", inputs, folder=name != "netcdf")
    real = [Path(p).expanduser().absolute() for p in chosen.values()]
    for a in real:
        for b in real:
            if a != b and a.is_relative_to(b):
                raise UsageError(f"{a} is inside {b}: give the outputs separate paths")
    if len(set(real)) < len(real):
        raise UsageError("two outputs share one path: give each its own")
