"""Command-line interface: ``hawkes-run``, ``hawkes-prep``, ``hawkes-diagnose``.

The only module that prints. User mistakes (:class:`~hawkes_cli.errors.HawkesError`) become one
``error: ...`` line on stderr and the error's exit code, never a traceback.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from . import __version__
from .errors import HawkesError, UsageError

log = logging.getLogger("hawkes_cli")


def _setup_logging(verbose: int) -> None:
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", force=True)


def _world_rank() -> int:
    """This process's MPI rank from the launcher's environment (0 when not under MPI)."""
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return 0


def _run_guarded(group: click.Command) -> Callable[[], None]:
    """Wrap a click group so HawkesError prints one line and exits with its code."""

    def main() -> None:
        try:
            group.main(standalone_mode=False)
        except HawkesError as exc:
            rank = _world_rank()
            where = f" (rank {rank})" if rank else ""
            click.echo(f"error{where}: {exc}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("aborted", err=True)
            sys.exit(130)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)

    return main


_verbose = click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")


# --------------------------------------------------------------------------- hawkes-run
@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hawkes")
@_verbose
def run(verbose: int) -> None:
    """Evaluate likelihoods and run MCMC chains for spatiotemporal Hawkes models."""
    _setup_logging(verbose)


@run.command("loglik")
@click.argument("events", type=click.Path(path_type=Path))
@click.option(
    "--model",
    type=click.Choice(["1", "2"]),
    default="1",
    show_default=True,
    help="1: constant trigger lengthscale; 2: sigma_x / sqrt(density).",
)
@click.option(
    "--engine",
    "engine_name",
    type=click.Choice(["reference", "opencl"]),
    default="opencl",
    show_default=True,
)
@click.option(
    "--precision",
    type=click.Choice(["float32", "float64"]),
    default="float64",
    show_default=True,
    help="Working precision of the OpenCL pair terms.",
)
@click.option(
    "--area",
    type=float,
    default=None,
    help="Study-region area (coordinate units squared); default: the file's 'area'.",
)
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="NAME=VALUE",
    help="Each of mu0, tau_t, xi0, sigma_x, sigma_t (repeat the option).",
)
@click.option(
    "--window-end",
    type=float,
    default=None,
    help="End T of the observation window (default: last event time).",
)
@click.option(
    "--device",
    default=None,
    help="OpenCL device: P:D, 'gpu', 'cpu' or part of its name (see `devices`).",
)
@click.option(
    "--tolerance",
    type=float,
    default=0.0,
    show_default=True,
    help="Relative log-likelihood error allowed from truncating the trigger (OpenCL; "
    "bound checked at every evaluation); 0: exact pair sum.",
)
@click.option(
    "--background",
    type=click.Choice(["auto", "pairs"]),
    default="auto",
    show_default=True,
    help="auto: the background once per distinct time (the day lattice); pairs: force the "
    "plain pair sum over all events (OpenCL).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def loglik_cmd(
    events: Path,
    model: str,
    engine_name: str,
    precision: str,
    area: float | None,
    params: tuple[str, ...],
    window_end: float | None,
    device: str | None,
    tolerance: float,
    background: str,
    as_json: bool,
) -> None:
    """Log-likelihood of EVENTS (CSV or HDF5) at the given parameters.

    Under mpiexec/srun the rows are split over the ranks and rank 0 prints. The time reported
    is one full evaluation (both pair passes) after a warm-up evaluation, so program build,
    data upload and first-launch compilation are excluded.
    """
    from .data import load_events
    from .engine import make_likelihood
    from .model import parse_param_items
    from .parallel import world_comm

    p = parse_param_items(params)
    comm = world_comm()
    data = load_events(events, need_density=(model == "2"))
    area = _resolve_area(area, data.attrs, events)
    lik = make_likelihood(
        data,
        model=int(model),
        area=area,
        engine=engine_name,
        precision=precision,
        comm=comm,
        device=device,
        window_end=window_end,
        tolerance=tolerance,
        background=background,
    )
    if engine_name == "opencl":  # the first launch JIT-compiles work-group code (PoCL): warm up
        lik.loglik(p)
        lik.clear_cache()
    comm.barrier()
    t0 = time.perf_counter()
    ev = lik.evaluate(p)
    seconds = time.perf_counter() - t0
    value = ev.loglik
    path = getattr(lik.backend, "path", "")
    if comm.rank != 0:
        return
    if as_json:
        out = {
            "loglik": value,
            "seconds": seconds,
            "n": data.n,
            "model": int(model),
            "engine": engine_name,
            "precision": precision if engine_name == "opencl" else "float64",
            "ranks": comm.size,
            "params": p.as_dict(),
            "tolerance": tolerance,
            "error_bound": ev.error_bound,
            "path": path,
        }
        click.echo(json.dumps(out))
    else:
        click.echo(f"loglik   {value:.12g}")
        click.echo(f"seconds  {seconds:.6f}")
        click.echo(f"n        {data.n}")
        click.echo(f"path     {path}")
        if tolerance > 0:
            click.echo(f"bound    |error| <= {ev.error_bound:.3g} (tolerance {tolerance:g})")


def _resolve_area(area: float | None, attrs: dict[str, Any], source: Path) -> float:
    if area is None:
        if "area" not in attrs:
            raise UsageError(
                f"no --area given and {source} has no 'area' attribute; pass --area A "
                "(study-region area in coordinate units squared)"
            )
        area = float(attrs["area"])
    if not (math.isfinite(area) and area > 0):
        raise UsageError(f"--area must be finite and > 0, got {area}")
    return area


@run.command("devices")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def devices_cmd(as_json: bool) -> None:
    """List OpenCL platforms and devices (with float64 support)."""
    from .kernels import list_devices

    found = list_devices()
    if as_json:
        click.echo(json.dumps([{**d.__dict__, "ident": d.ident} for d in found], indent=2))
        return
    if not found:
        raise HawkesError("no OpenCL device found; `pip install pocl-binary-distribution`")
    click.echo(f"{'id':<6}{'kind':<6}{'fp64':<6}{'CUs':>5} {'memory':>9}  device (platform)")
    for d in found:
        click.echo(
            f"{d.ident:<6}{d.kind:<6}{'yes' if d.float64 else 'no':<6}{d.compute_units:>5} "
            f"{d.global_mem_mb:>6} MB  {d.name} ({d.platform})"
        )


@run.command("validate")
@click.argument("config_file", type=click.Path(path_type=Path))
def validate_cmd(config_file: Path) -> None:
    """Check CONFIG and its data (events, area, polygons) without running anything."""
    from .config import load_config
    from .data import load_events
    from .runner import make_resampler, resolve_area

    config = load_config(config_file)
    data = load_events(config.data.events, need_density=config.model.kind == 2)
    area = resolve_area(config, data)
    resampler = make_resampler(config, data)
    sc, ch = config.sampler, config.chains
    click.echo(f"config   {config_file} (sha256 {config.sha256[:12]})")
    click.echo(f"events   {config.data.events}: {data.n} events, t in [{data.time[0]:g}, "
               f"{data.time[-1]:g}], area {area:g}")  # fmt: skip
    click.echo(f"model    {config.model.kind}; engine {config.engine.backend} "
               f"{config.engine.precision}")  # fmt: skip
    click.echo(f"sampler  {sc.kind}: {sc.iterations} iterations ({sc.warmup} warm-up), thin "
               f"{sc.thin}, seed {sc.seed}, resample every {sc.resample_every or 'never'}"
               + (f" over {len(resampler[0].keys)} polygons" if resampler else ""))  # fmt: skip
    click.echo(f"chains   {ch.count} x {ch.gpus_per_chain} rank(s); run dir "
               f"{config.output.run_dir}")  # fmt: skip
    click.echo("ok")


@run.command("chain")
@click.argument("config_file", type=click.Path(path_type=Path))
@click.option("--chain", "chain_id", type=int, required=True, help="0-based chain number.")
@click.option("--overwrite", is_flag=True, help="Start afresh instead of resuming.")
def chain_cmd(config_file: Path, chain_id: int, overwrite: bool) -> None:
    """Run (or resume) one chain; under mpiexec/srun its ranks split the likelihood.

    Stops cleanly at an iteration boundary on SIGTERM, SIGINT or SIGUSR1 (exit code 75 when
    stopped before the end), after committing its draws.
    """
    from .config import load_config
    from .errors import Interrupted
    from .parallel import world_comm
    from .runner import StopFlag, run_chain

    stop = StopFlag()
    stop.install()
    config = load_config(config_file)
    comm = world_comm()
    outcome = run_chain(config, chain_id, comm=comm, stop=stop, overwrite=overwrite)
    if comm.rank == 0 and outcome.stopped and not outcome.finished:
        raise Interrupted(
            f"chain {chain_id} stopped at iteration {outcome.iteration}/{outcome.iterations} "
            f"with {outcome.draws_committed} draws committed; run again to resume"
        )


@run.command("local")
@click.argument("config_file", type=click.Path(path_type=Path))
@click.option("--jobs", type=int, default=None, help="Chains at once (default: all).")
@click.option("--overwrite", is_flag=True, help="Discard existing chain files and start afresh.")
def local_cmd(config_file: Path, jobs: int | None, overwrite: bool) -> None:
    """Run all chains of CONFIG on this machine; run again to resume after a stop."""
    from .config import load_config
    from .local import run_local, summarize
    from .rundir import RunDir
    from .vocab import EXIT_STOPPED

    config = load_config(config_file)
    t0 = time.monotonic()
    codes = run_local(config, jobs=jobs, overwrite=overwrite, report=_print_progress)
    summarize(codes)
    run_dir = config.output.run_dir
    stopped = sorted(k for k, rc in codes.items() if rc != 0)
    if stopped:
        click.echo(f"stopped: chains {stopped} can be resumed with: hawkes-run local "
                   f"{config_file}")  # fmt: skip
        sys.exit(EXIT_STOPPED)
    click.echo(f"done in {time.monotonic() - t0:.0f} s: {config.chains.count} chains in "
               f"{RunDir(run_dir).chains_dir}")  # fmt: skip
    click.echo(f"diagnose with: hawkes-diagnose {run_dir}")


def _print_progress(records: list[dict[str, Any]]) -> None:
    parts = []
    for r in records:
        acc = r.get("acceptance")
        rate = r.get("it_per_s")
        parts.append(
            f"  chain {r['chain']:>2} {r.get('status', ''):<8} {r.get('iteration', 0):>7}/"
            f"{r.get('iterations', 0):<7}"
            + (f" {rate:7.1f} it/s" if rate is not None else "")
            + (f"  acc {acc:.2f}" if acc is not None else "")
            + (f"  loglik {r['loglik']:.6g}" if r.get("loglik") is not None else "")
        )
    click.echo(time.strftime("%H:%M:%S") + "\n" + "\n".join(parts))


# --------------------------------------------------------------------------- hawkes-run: Slurm
@run.command("plan")
@click.argument("config_file", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def plan_cmd(config_file: Path, as_json: bool) -> None:
    """Show how CONFIG's chains are placed on Slurm array tasks (nodes), ranks and GPUs."""
    from .config import load_config
    from .slurm import format_plan, make_plan

    plan = make_plan(load_config(config_file))
    click.echo(json.dumps(plan.to_json(), indent=1) if as_json else format_plan(plan))


@run.command("submit")
@click.argument("config_file", type=click.Path(path_type=Path))
@click.option("--dry-run", is_flag=True, help="Print the batch script; write and submit nothing.")
@click.option(
    "--launcher",
    type=click.Choice(["auto", "srun", "mpiexec"]),
    default="auto",
    show_default=True,
    help="How a node starts its ranks: srun --mpi=pmi2 ($HAWKES_SRUN_MPI), or mpiexec inside "
    "the allocation; auto: srun when available.",
)
def submit_cmd(config_file: Path, dry_run: bool, launcher: str) -> None:
    """Submit CONFIG as a Slurm array job (one task per node) with sbatch.

    Writes the resolved config and RUN_DIR/slurm/job.sbatch, submits only the nodes with
    unfinished chains and records the job id in RUN_DIR/slurm/jobs.json. Submitting again
    resumes every chain from its last commit.
    """
    from .config import load_config
    from .slurm import submit

    config = load_config(config_file)
    result = submit(config, dry_run=dry_run, launcher=launcher)
    if dry_run:
        click.echo(result.script, nl=False)
        return
    run_dir = config.output.run_dir
    if result.job_id is None:
        click.echo(f"all {config.chains.count} chains are finished; nothing submitted")
        return
    click.echo(f"submitted job {result.job_id} (array tasks {result.array}) for {run_dir}")
    click.echo(f"script   {result.script_path}")
    click.echo(f"logs     {run_dir / 'slurm' / 'logs'}")
    click.echo(f"status   hawkes-run status {run_dir}")


@run.command("status")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status_cmd(run_dir: Path, as_json: bool) -> None:
    """Per chain of RUN_DIR: iterations, draws committed, requeues, last commit, Slurm state."""
    import dataclasses

    from .slurm import run_status

    rows = run_status(run_dir)
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(r) for r in rows], indent=1))
        return
    click.echo(
        f"{'chain':>5} {'node':>4} {'iterations':>15} {'draws':>8} {'requeues':>8}  "
        f"{'last commit':<29} {'job':<12} state"
    )
    for r in rows:
        it = f"{r.iteration}/{r.iterations}"
        state = r.state or ("-" if r.job is None else "unknown")
        if r.finished:
            state += " (finished)"
        click.echo(
            f"{r.chain:>5} {r.node:>4} {it:>15} {r.draws:>8} {r.requeues:>8}  "
            f"{r.last_commit or '-':<29} {r.job or '-':<12} {state}"
        )
    done = sum(r.finished for r in rows)
    click.echo(f"{done}/{len(rows)} chains finished")


@run.command("cancel")
@click.argument("run_dir", type=click.Path(path_type=Path))
def cancel_cmd(run_dir: Path) -> None:
    """Cancel the pending and running Slurm jobs of RUN_DIR (chains keep their commits)."""
    from .slurm import cancel

    jobs = cancel(run_dir)
    click.echo(f"cancelled {', '.join(jobs)}" if jobs else "no pending or running job")


@run.command("node")
@click.argument("config_file", type=click.Path(path_type=Path))
@click.option("--node", "node_index", type=int, required=True, help="Array task (node) index.")
@click.option(
    "--ranks",
    is_flag=True,
    help="Be one MPI rank of the node (the launcher starts these).",
)
@click.option(
    "--launcher",
    type=click.Choice(["auto", "srun", "mpiexec"]),
    default=None,
    help="How to start the ranks (default: $HAWKES_LAUNCHER, else auto).",
)
@click.pass_context
def node_cmd(
    ctx: click.Context, config_file: Path, node_index: int, ranks: bool, launcher: str | None
) -> None:
    """Internal: run array task NODE of a submitted run (the batch script calls this).

    Without --ranks: starts the node's MPI ranks, forwards Slurm's warning signal (USR1) and
    requeues the job when chains stopped early. With --ranks: one rank; its chain stops at an
    iteration boundary on SIGUSR1/SIGTERM/SIGINT after committing.
    """
    from .node import launch_node, run_node_ranks
    from .runner import StopFlag

    if ranks:
        stop = StopFlag()
        stop.install()
        code = run_node_ranks(config_file, node_index, stop=stop)
    else:
        verbose = (ctx.parent.params.get("verbose", 0) if ctx.parent else 0) or 1
        code = launch_node(config_file, node_index, launcher=launcher, verbose=verbose)
    if code:
        sys.exit(code)


# --------------------------------------------------------------------------- hawkes-prep
@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hawkes")
@_verbose
def prep(verbose: int) -> None:
    """Prepare event files: county table, HHS hospital file -> cases, simulated events."""
    _setup_logging(verbose)


@prep.command("simulate")
@click.option(
    "--out",
    "out",
    type=click.Path(path_type=Path),
    required=True,
    help="Events file to write (.h5 keeps the metadata; .csv does not).",
)
@click.option("--model", type=click.Choice(["1", "2"]), default="1", show_default=True)
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="NAME=VALUE",
    help="True parameters; defaults: mu0=0.5 tau_t=30 xi0=0.5 sigma_x=0.2 sigma_t=5.",
)
@click.option(
    "--n-background",
    type=int,
    default=1000,
    show_default=True,
    help="Expected number of background events.",
)
@click.option(
    "--t-end", type=float, default=365.0, show_default=True, help="End of the time window (days)."
)
@click.option(
    "--bounds",
    type=float,
    nargs=4,
    default=(0.0, 10.0, 0.0, 10.0),
    show_default=True,
    metavar="X0 X1 Y0 Y1",
    help="Rectangle of the study region.",
)
@click.option(
    "--grid",
    type=int,
    nargs=2,
    default=None,
    metavar="NX NY",
    help="Grid of square synthetic counties with densities (needed for model 2).",
)
@click.option(
    "--density-range",
    type=float,
    nargs=2,
    default=(0.04, 70000.0),
    show_default=True,
    metavar="LOW HIGH",
    help="Log-uniform range of the grid's densities.",
)
@click.option("--integer-days", is_flag=True, help="Floor times to whole days (ties).")
@click.option("--seed", type=int, default=0, show_default=True)
def simulate_cmd(
    out: Path,
    model: str,
    params: tuple[str, ...],
    n_background: int,
    t_end: float,
    bounds: tuple[float, float, float, float],
    grid: tuple[int, int] | None,
    density_range: tuple[float, float],
    integer_days: bool,
    seed: int,
) -> None:
    """Simulate events from the model (branching representation) into an events file."""
    from .data import save_events
    from .model import parse_param_items
    from .simulate import DensityGrid, simulate

    defaults = {"mu0": "0.5", "tau_t": "30", "xi0": "0.5", "sigma_x": "0.2", "sigma_t": "5"}
    given = {item.partition("=")[0].strip() for item in params}
    items = [*params, *(f"{k}={v}" for k, v in defaults.items() if k not in given)]
    p = parse_param_items(items)
    if model == "2" and grid is None:
        grid = (10, 10)
    density_grid = None
    if grid is not None:
        density_grid = DensityGrid.log_uniform(
            tuple(bounds), grid[0], grid[1], density_range[0], density_range[1], seed
        )
    data = simulate(
        p,
        model=int(model),
        n_background=n_background,
        t_end=t_end,
        bounds=tuple(bounds),
        seed=seed,
        grid=density_grid,
        integer_days=integer_days,
    )
    save_events(data, out)
    click.echo(f"wrote {data.n} events to {out} (area {data.attrs.get('area')})")


def _prep_progress(quiet: bool) -> Callable[[str], None] | None:
    return None if quiet else (lambda msg: click.echo(msg, err=True))


@prep.command("counties")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="County table to write (default: the shipped data/counties.csv).",
)
@click.option(
    "--polygons",
    type=click.Path(path_type=Path),
    default=None,
    help="County shapefile/GeoPackage in lon/lat (default: plotly-geo's 2016 Census counties).",
)
@click.option("--key-field", default="GEOID", show_default=True, help="Field with the FIPS code.")
@click.option("--name-field", default="NAME", show_default=True, help="Field with the name.")
@click.option("--land-field", default="ALAND", show_default=True, help="Field with land area.")
@click.option(
    "--land-units",
    type=click.Choice(["m2", "sqmi"]),
    default="m2",
    show_default=True,
    help="Units of --land-field (ALAND: m2; CENSUSAREA: sqmi).",
)
@click.option("--encoding", default=None, help="Attribute encoding if the file does not say.")
@click.option("--crs", default=None, help="Reference system if the file declares none.")
@click.option(
    "--population",
    type=click.Path(path_type=Path),
    default=None,
    help="CSV with columns fips,pop (default: delphi-utils' 2019 Census estimates).",
)
@click.option(
    "--zip-crosswalk",
    type=click.Path(path_type=Path),
    default=None,
    help="CSV fips,zip,weight for Connecticut ZIP -> county (default: delphi-utils' 2019).",
)
@click.option(
    "--no-ct-zip", is_flag=True, help="Do not (re)write ct_zip_county.csv beside the table."
)
def counties_cmd(
    out: Path | None,
    polygons: Path | None,
    key_field: str,
    name_field: str,
    land_field: str,
    land_units: str,
    encoding: str | None,
    crs: str | None,
    population: Path | None,
    zip_crosswalk: Path | None,
    no_ct_zip: bool,
) -> None:
    """(Re)build the county table: FIPS, name, state, land area, population, density, centroid.

    Polygons come from plotly-geo (pyogrio reads them), population from delphi-utils (read as
    a file); density is persons per square mile of land. Also writes ct_zip_county.csv
    (Connecticut ZIP -> county, used to map the 2022 planning regions) beside the table.
    """
    import numpy as np

    from .counties import (
        CT_ZIP_NAME,
        SQ_METRES_PER_SQ_MILE,
        build_county_table,
        build_ct_zip_table,
        default_table_path,
        write_ct_zip_table,
    )

    out = out or default_table_path()
    table = build_county_table(
        polygons,
        population,
        key_field=key_field,
        name_field=name_field,
        land_field=land_field,
        land_units=land_units,
        crs=crs,
        encoding=encoding,
    )
    table.write_csv(out)
    states = table.region_mask("states")
    click.echo(f"wrote {len(table)} counties to {out}")
    click.echo(
        f"  50 states + DC: {int(states.sum())} counties, "
        f"{table.aland_m2[states].sum() / SQ_METRES_PER_SQ_MILE:,.0f} sq mi of land, "
        f"median density {float(np.median(table.density[states])):.1f} persons/sq mi"
    )
    if not no_ct_zip:
        target = Path(out).with_name(CT_ZIP_NAME)
        rows = build_ct_zip_table(zip_crosswalk)
        write_ct_zip_table(rows, target)
        click.echo(f"wrote {len(rows)} Connecticut ZIP codes to {target}")


def _parse_suppressed(value: str) -> float | None:
    if value.strip().lower() == "drop":
        return None
    try:
        return float(value)
    except ValueError:
        raise UsageError(f"--suppressed must be a number >= 0 or 'drop', not {value!r}") from None


_DATE = click.DateTime(formats=["%Y-%m-%d", "%Y/%m/%d"])


@prep.command("hhs")
@click.argument("facility", type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    required=True,
    help="Events file to write (.h5 keeps metadata and dropped rows; .csv does not).",
)
@click.option(
    "--n",
    "n",
    type=int,
    default=1_000_000,
    show_default=True,
    help="Cases to keep, drawn without replacement (0: all).",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--count",
    type=click.Choice(["admissions", "census"]),
    default="admissions",
    show_default=True,
    help="admissions: new confirmed admissions (adult + pediatric); census: patient-days of "
    "hospitalised confirmed patients (counts long stays again: the paper's double counting).",
)
@click.option(
    "--column",
    "columns",
    multiple=True,
    metavar="NAME",
    help="Sum these count columns instead of --count (repeat; either spelling).",
)
@click.option(
    "--suppressed",
    default="1.5",
    show_default=True,
    help="Value for -999999 (a true 1-3), e.g. 1.5 (Delphi) or 2 (covidestim), or 'drop'. "
    "Fractional counts are rounded at random without bias (1.5 -> 1 or 2, each with p=1/2).",
)
@click.option("--start", type=_DATE, default=None, help="First case day kept (YYYY-MM-DD).")
@click.option("--end", type=_DATE, default=None, help="Last case day kept (YYYY-MM-DD).")
@click.option(
    "--origin",
    type=_DATE,
    default=None,
    help="Day 0 of the time axis (default: --start, else the first day of the data).",
)
@click.option(
    "--region",
    type=click.Choice(["states", "conus", "all"]),
    default="states",
    show_default=True,
    help="Study region: 50 states + DC, contiguous 48 + DC, or every polygon (with territories).",
)
@click.option(
    "--crs",
    default=None,
    help="Projected reference system for x/y, e.g. EPSG:5070 (needs pyproj); default lon/lat.",
)
@click.option("--jitter", is_flag=True, help="Add a uniform fraction of a day to each time.")
@click.option(
    "--locations",
    type=click.Choice(["polygon", "centroid"]),
    default="polygon",
    show_default=True,
    help="Initial location: uniform in the county polygon, or its centroid (no pyogrio needed).",
)
@click.option(
    "--counties",
    type=click.Path(path_type=Path),
    default=None,
    help="County table (default: the shipped data/counties.csv).",
)
@click.option(
    "--polygons",
    type=click.Path(path_type=Path),
    default=None,
    help="County polygon file (default: plotly-geo's 2016 Census counties).",
)
@click.option("--key-field", default="GEOID", show_default=True, help="FIPS field of --polygons.")
@click.option(
    "--polygons-out",
    type=click.Path(path_type=Path),
    default=None,
    help="Also write the polygons used, in the output's coordinates (.gpkg), for hawkes-run.",
)
@click.option(
    "--engine",
    type=click.Choice(["auto", "pyarrow", "csv"]),
    default="auto",
    show_default=True,
    help="CSV reader (pyarrow is ~5x faster).",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
def hhs_cmd(
    facility: Path,
    out: Path,
    n: int,
    seed: int,
    count: str,
    columns: tuple[str, ...],
    suppressed: str,
    start: Any,
    end: Any,
    origin: Any,
    region: str,
    crs: str | None,
    jitter: bool,
    locations: str,
    counties: Path | None,
    polygons: Path | None,
    key_field: str,
    polygons_out: Path | None,
    engine: str,
    quiet: bool,
) -> None:
    """Turn the HHS facility file FACILITY (CSV) into an events file of cases.

    Each hospital-week's count becomes cases on uniformly random days of its week (shifted a
    day earlier for previous-day admissions), down-sampled without replacement to --n, joined
    to the county (FIPS repairs included) with its population density, and placed uniformly
    inside the county polygon. Every dropped row is counted by reason in the metadata.
    """
    from .prep import HHSOptions, prepare_hhs

    options = HHSOptions(
        n=n,
        seed=seed,
        count=count,
        columns=tuple(columns),
        suppressed=_parse_suppressed(suppressed),
        start=start.date() if start else None,
        end=end.date() if end else None,
        origin=origin.date() if origin else None,
        region=region,
        crs=crs,
        jitter=jitter,
        locations=locations,
        engine=engine,
    )
    result = prepare_hhs(
        facility,
        out,
        options,
        counties=counties,
        polygons=polygons,
        key_field=key_field,
        polygons_out=polygons_out,
        progress=_prep_progress(quiet),
    )
    a = result.attrs
    click.echo(f"wrote {result.n_events:,} cases to {result.out}")
    click.echo(f"  rows     {a['rows_read']:,} read, {a['rows_kept']:,} kept, "
               f"{a['rows_dropped']:,} dropped")  # fmt: skip
    for key, rows in a["dropped"].items():
        if rows:
            click.echo(f"    {key:<26} {rows:>10,}")
    click.echo(f"  cases    {a['cases_expanded']:,} expanded, {a['cases_in_window']:,} in the "
               f"window, {a['cases_kept']:,} kept")  # fmt: skip
    click.echo(f"  time     days since {a['origin_date']} ({a['first_date']} .. {a['last_date']})")
    area = a.get("area")
    click.echo(f"  space    {a['crs']}, region {a['region']}"
               + (f", area {area:.6g}" if area else ""))  # fmt: skip
    if a.get("counties"):
        click.echo(f"  polygons {a['counties']} (data.counties for hawkes-run)")
    click.echo(f"  took     {sum(result.seconds.values()):.1f} s")


# --------------------------------------------------------------------------- hawkes-diagnose
@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hawkes")
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
    help="Effective spatial lengthscale in miles for this county (repeatable).",
)
@click.option(
    "--events",
    type=click.Path(path_type=Path),
    default=None,
    help="Events file for --county and time units (default: the config's).",
)
@click.option("--strict", is_flag=True, help="Exit non-zero when any check fails.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the table.")
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
@_verbose
def diagnose(
    run_dir: Path,
    burn: int | None,
    thin: int,
    counties: tuple[str, ...],
    events: Path | None,
    strict: bool,
    as_json: bool,
    as_csv: bool,
    netcdf: Path | None,
    plots: Path | None,
    verbose: int,
) -> None:
    """R-hat, bulk/tail ESS, MCSE and posterior tables of the chains in RUN_DIR.

    Reads only committed draws, so it works on running chains too. Verdicts: R-hat above 1.01
    warns and above 1.05 fails; ESS below 400 warns; stuck chains, NaN/inf draws and chains much
    shorter than the others are named.
    """
    from . import diagnostics as dg

    _setup_logging(verbose)
    if as_json and as_csv:
        raise UsageError("choose one of --json and --csv")
    opts = dg.DiagnoseOptions(
        burn=burn, thin=thin, counties=tuple(counties), strict=strict, events=events
    )
    report = dg.diagnose(run_dir, opts)
    if as_json:
        click.echo(json.dumps(dg.to_json(report), indent=1))
    elif as_csv:
        click.echo(dg.to_csv(report), nl=False)
    else:
        click.echo(dg.format_table(report))
    if netcdf is not None:
        click.echo(f"wrote {dg.write_netcdf(report, netcdf)}", err=True)
    if plots is not None:
        for path in dg.write_plots(report, opts, plots):
            click.echo(f"wrote {path}", err=True)
    code = dg.exit_code(report)
    if code:
        sys.exit(code)


run_main = _run_guarded(run)
prep_main = _run_guarded(prep)
diagnose_main = _run_guarded(diagnose)
