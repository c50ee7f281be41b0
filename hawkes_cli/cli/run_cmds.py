"""``hawkes-run``: the group and its commands on this machine (loglik, devices, validate, chain,
local); the Slurm commands come from :mod:`.cluster_cmds`."""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from ..errors import DeviceError, HawkesError, UsageError
from ..vocab import (
    DEFAULT_BACKGROUND,
    DEFAULT_EDGE,
    EDGE_CENSORED,
    EDGE_NONE,
    EDGE_RENORMALIZED,
    EDGES,
    EXACT_TOLERANCE,
    STOP_CONVERGED,
    tolerance_problem,
)
from . import cluster_cmds
from .options import (
    CONTEXT_SETTINGS,
    PARAM_HELP,
    background_option,
    device_option,
    engine_option,
    json_option,
    model_option,
    param_option,
    precision_option,
    setup_logging,
    tolerance_option,
    verbose_option,
    version_option,
)


@click.group(context_settings=CONTEXT_SETTINGS)
@version_option
@verbose_option
def run(verbose: int) -> None:
    """Evaluate likelihoods and run MCMC chains for spatiotemporal Hawkes models."""
    setup_logging(verbose)


for _command in cluster_cmds.COMMANDS:
    run.add_command(_command)


@run.command("loglik")
@click.argument("events", type=click.Path(path_type=Path))
@model_option(help="1: constant trigger lengthscale; 2: sigma_x / sqrt(density).")
@engine_option
@precision_option("float64")
@click.option(
    "--area",
    type=float,
    default=None,
    help="Study-region area (coordinate units squared); default: the file's 'area'.",
)
@param_option(PARAM_HELP)
@click.option(
    "--window-end",
    type=float,
    default=None,
    help="End T of the observation window (default: last event time).",
)
@device_option
@tolerance_option
@background_option
@click.option(
    "--edge",
    type=click.Choice(EDGES),
    default=DEFAULT_EDGE,
    show_default=True,
    help="none: the paper's likelihood; censored: the compensator counts only each event's "
    "trigger mass inside the study region (the file's rectangle or county polygons); "
    "renormalized: each event's trigger kernel is divided by that mass.",
)
@json_option("Print one JSON object.")
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
    edge: str,
    as_json: bool,
) -> None:
    """Log-likelihood of EVENTS (CSV or HDF5) at the given parameters.

    Under mpiexec/srun the rows are split over the ranks and rank 0 prints. The time reported
    is one full evaluation (both pair passes) after a warm-up evaluation, so program build,
    data upload and first-launch compilation are excluded.
    """
    from ..data import load_events
    from ..engine import make_likelihood
    from ..engine.base import out_of_range
    from ..model import parse_param_items
    from ..parallel import world_comm

    problem = tolerance_problem(tolerance, "--tolerance")
    if problem is not None:
        raise UsageError(problem)
    if engine_name == "reference":
        _refuse_opencl_options(precision, tolerance, background)
    p = parse_param_items(params)
    why = out_of_range(p)
    if why is not None:
        raise UsageError(f"{why.partition(';')[0]}: the log-likelihood would be -inf")
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
        region=_loglik_region(data, edge),
        edge=edge,
    )
    if engine_name == "opencl":  # the first launch JIT-compiles work-group code (PoCL): warm up
        lik.loglik(p)
        lik.clear_cache()
    comm.barrier()
    t0 = time.perf_counter()
    ev = lik.evaluate(p)
    seconds = time.perf_counter() - t0
    _check_loglik(ev.loglik, p, engine_name, device)
    if comm.rank != 0:
        return
    out = {
        "loglik": ev.loglik,
        "seconds": seconds,
        "n": data.n,
        "model": int(model),
        "engine": engine_name,
        "precision": precision if engine_name == "opencl" else "float64",
        "ranks": comm.size,
        "params": p.as_dict(),
        "tolerance": tolerance,
        "error_bound": ev.error_bound,
        "background_bound": ev.background_bound,
        "edge": edge,
        "edge_error": ev.edge_error,
        "path": lik.path,
    }
    _print_loglik(out, as_json)


def _loglik_region(data: Any, edge: str) -> Any:
    """The study region of ``--edge`` (the file's rectangle or county polygons), or None."""
    if edge == EDGE_NONE:
        return None
    from ..regions import region_for

    return region_for(data)


def _check_loglik(value: float, p: Any, engine_name: str, device: str | None) -> None:
    """Raise :class:`DeviceError` unless ``value`` is a finite log-likelihood (never printed
    as an answer otherwise; every rank raises)."""
    if math.isnan(value):  # never an answer: the device's sums are wrong (every rank raises)
        raise DeviceError(
            f"the log-likelihood is NaN (engine {engine_name}"
            + (f", device {device!r}" if device else "")
            + "): a device that computes NaN cannot be trusted; run `hawkes-run devices "
            "--check`, choose another device with --device, or compare with --engine reference"
        )
    if not math.isfinite(value):  # never printed as an answer
        raise DeviceError(
            f"the log-likelihood is {value} at {p} (engine {engine_name}): no finite answer; "
            "compare with --engine reference and run `hawkes-run devices --check`"
        )


def _print_loglik(out: dict[str, Any], as_json: bool) -> None:
    """``loglik``'s answer: one JSON object, or aligned lines (the bound when truncating)."""
    if as_json:
        click.echo(json.dumps(out))
        return
    click.echo(f"loglik   {out['loglik']:.12g}")
    click.echo(f"seconds  {out['seconds']:.6f}")
    click.echo(f"n        {out['n']}")
    click.echo(f"path     {out['path']}")
    if out["tolerance"] > 0 or out["background_bound"] > 0:
        click.echo(
            f"bound    |error| <= {out['error_bound'] + out['background_bound']:.3g} nats "
            f"(trigger truncation {out['error_bound']:.3g}, tolerance {out['tolerance']:g}; "
            f"background lattice {out['background_bound']:.3g})"
        )
    if out["edge_error"] > 0:
        click.echo(
            f"edge     {out['edge']} edge term within ~{out['edge_error']:.3g} nats (estimate "
            "of the mass raster's error, not a bound)"
        )


def _resolve_area(area: float | None, attrs: dict[str, Any], source: Path) -> float:
    """``--area``, else the events file's ``area`` attribute; finite and positive.

    Raises
    ------
    UsageError
        Neither is given, or the area is not finite and > 0.
    """
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
@click.option(
    "--check",
    is_flag=True,
    help="Run every kernel (both models and precisions, exact and truncated) on small built-in "
    "data on each device and compare with the float64 reference: PASS, FAIL or SKIP (cannot "
    "build kernels here) per device.",
)
@click.option(
    "--bench",
    is_flag=True,
    help="Time the engine on one device (the automatic choice, or --device) at --n events: an "
    "exact and a truncated pass with their kernel and host seconds, the cheap moves, and the "
    "projected seconds per MCMC iteration of the shipped configs; the screen is saved to --out.",
)
@click.option(
    "--device",
    "only",
    default=None,
    help="With --check: only this device; with --bench: the device timed (P:D, gpu, cpu or "
    "part of a name).",
)
@click.option(
    "--n",
    "n_events",
    type=int,
    default=None,
    help="With --bench: events to time (default 1,000,000; e.g. 100000 for a quick look).",
)
@model_option(help="With --bench: the model timed (its shipped config is projected).")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="With --bench: the text file the screen is saved to (default: "
    "hawkes-node-<host>.txt in the current folder).",
)
@json_option()
def devices_cmd(
    check: bool,
    bench: bool,
    only: str | None,
    n_events: int | None,
    model: str,
    out: Path | None,
    as_json: bool,
) -> None:
    """List OpenCL platforms and devices (with float64 support, and whether they can build
    kernels here); --check tests each one, --bench times the engine on one. Also names a GPU
    this machine has that OpenCL does not list, and how to make it visible."""
    from ..kernels import list_devices_checked, select_device, unlisted_gpus

    if bench:
        from ..nodebench import profiling

        _bench_usage(n_events, out, as_json)
        with profiling():  # before any queue opens: kernel seconds come from profiling events
            _devices_bench(check, only, n_events, int(model), out)
        return
    ctx = click.get_current_context()
    flags = {"n_events": "--n", "model": "--model", "out": "--out"}
    given = [f for name, f in flags.items() if ctx.get_parameter_source(name) != SOURCE_DEFAULT]
    if given:
        raise UsageError(f"{', '.join(given)} only go with --bench")
    checked = list_devices_checked()
    found = [d for d, _ in checked]
    hints = unlisted_gpus(found)
    if not found:
        note = "".join(f"; {h.summary()}" for h in hints)
        raise HawkesError(f"no OpenCL device found; `pip install pocl-binary-distribution`{note}")
    if check:
        if only is not None:
            reports = _check_devices([(select_device(only)[0], True)], as_json)
        else:
            reports = _check_devices([(d, False) for d in found], as_json)
        _exit_for_checks(reports, as_json)
        return
    if as_json:
        listing = [
            {**d.__dict__, "ident": d.ident, "status": _device_status(d, problem),
             "problem": problem}
            for d, problem in checked
        ]  # fmt: skip
        click.echo(json.dumps(listing, indent=2))
        _echo_gpu_hints(hints, err=True)
        return
    _echo_device_table(checked, click.echo)
    _echo_gpu_hints(hints, err=False)
    _warn_env_device()


def _warn_env_device() -> None:
    """A warning on stderr when ``HAWKES_OPENCL_DEVICE`` names none of the devices listed:
    every command that picks a device would stop on it."""
    from ..errors import DeviceError
    from ..kernels import DEVICE_ENV, select_device

    value = os.environ.get(DEVICE_ENV)
    if not value:
        return
    try:
        select_device(None)
    except DeviceError:
        click.echo(
            f"warning: {DEVICE_ENV}={value} matches none of these devices; every command that "
            "picks one stops on it: unset it, or name a device listed here",
            err=True,
        )


def _echo_device_table(checked: list[tuple[Any, str | None]], echo: Any) -> None:
    """The ``devices`` table: one line per device, and why one cannot build kernels."""
    echo(
        f"{'id':<6}{'kind':<6}{'fp64':<6}{'CUs':>5} {'memory':>9}  {'status':<13}device (platform)"
    )
    for d, problem in checked:
        kind = "sim" if d.simulator else d.kind
        echo(
            f"{d.ident:<6}{kind:<6}{'yes' if d.float64 else 'no':<6}{d.compute_units:>5} "
            f"{d.global_mem_mb:>6} MB  {_device_status(d, problem):<13}{d.name} ({d.platform})"
        )
        if problem is not None:
            echo(f"      {_skip_reason(problem)}")


#: Where an option's value came from when the user did not give it.
SOURCE_DEFAULT = ParameterSource.DEFAULT

#: ``devices`` status of a device: it builds kernels; it cannot (skipped by the automatic
#: choice); a simulator (used only when named).
STATUS_OK, STATUS_NO_BUILD, STATUS_SIMULATOR = "ok", "cannot build", "simulator"


def _device_status(d: Any, problem: str | None) -> str:
    if d.simulator:
        return STATUS_SIMULATOR
    return STATUS_OK if problem is None else STATUS_NO_BUILD


def _skip_reason(problem: str) -> str:
    return f"cannot build kernels here: {problem}; skipped by the automatic choice"


def _echo_gpu_hints(hints: Any, err: bool, echo: Any = None) -> None:
    """Each GPU OpenCL does not list, and how to make it visible (after the table); through
    ``echo`` (one line a call) when given, else ``click.echo``."""
    emit = echo or (lambda line: click.echo(line, err=err))
    for h in hints:
        emit("")
        emit(f"note: {h.summary()}")
        for line in h.advice():
            emit(f"  {line}")


def _check_devices(
    found: list[tuple[Any, bool]], as_json: bool, echo: Any = click.echo
) -> list[dict[str, Any]]:
    """``devices --check``: :func:`hawkes_cli.engine.selfcheck.check_device` on each device,
    ``(device, named with --device)``; returns one report per device (``status`` pass, fail
    or skip) after printing them (``echo``; JSON after the last one).

    A device that cannot build kernels here is a SKIP (the automatic choice passes it over)
    unless it was named, then a FAIL.
    """
    from ..engine.selfcheck import check_device
    from ..kernels import device_problem

    reports = []
    for d, named in found:
        if not as_json:
            slow = " (a simulator: about a minute)" if d.simulator else ""
            echo(f"{d.ident} {d.name} ({d.platform}){slow}")
        problem = device_problem(d.ident)
        if problem is not None or not d.float64:
            skip = problem is not None and not named
            if problem is not None:
                why = f"cannot build kernels here: {problem}" + (
                    " (skipped by the automatic choice)" if skip else ""
                )
            else:
                why = "no float64 support (cl_khr_fp64), which every kernel needs"
            status = "skip" if skip else "fail"
            if not as_json:
                echo(f"  {status.upper()}  {why}")
            reports.append({"ident": d.ident, "name": d.name, "platform": d.platform,
                            "kind": d.kind, "status": status, "ok": False, "cases": [],
                            "problem": why})  # fmt: skip
            continue
        rep = check_device(d.ident)
        reports.append(
            {"ident": rep.ident, "name": rep.name, "platform": rep.platform, "kind": rep.kind,
             "status": "pass" if rep.ok else "fail", "ok": rep.ok, "seconds": rep.seconds,
             "cases": [c.__dict__ for c in rep.cases]}
        )  # fmt: skip
        if as_json:
            continue
        for c in rep.cases:
            worst = "" if c.ok else f" (worst {c.worst:.3g} of the exact value)"
            echo(f"  {'ok  ' if c.ok else 'FAIL'}  {c.name:<27} {c.detail}{worst}")
        verdict = "PASS" if rep.ok else "FAIL: do not use this device (see above)"
        echo(f"  {verdict}  ({len(rep.cases)} checks, {rep.seconds:.1f} s)")
    if as_json:
        click.echo(json.dumps(reports, indent=2))
    return reports


def _exit_for_checks(reports: list[dict[str, Any]], as_json: bool) -> None:
    """Exit 1 when any device failed its check, or none passed."""
    statuses = [r["status"] for r in reports]
    if "fail" in statuses or "pass" not in statuses:
        if not as_json and "fail" not in statuses:
            click.echo("no device passed: none here can build kernels", err=True)
        raise SystemExit(1)


def _bench_usage(n_events: int | None, out: Path | None, as_json: bool) -> None:
    """Raise :class:`UsageError` for ``--bench`` options that cannot work, before any
    timing."""
    from ..nodebench import MIN_EVENTS, out_problem

    if as_json:
        raise UsageError("--bench prints a screen and saves it as text (--out); --json goes with "
                         "the device list and --check alone")  # fmt: skip
    if n_events is not None and n_events < MIN_EVENTS:
        raise UsageError(f"--n must be at least {MIN_EVENTS:,} events, got {n_events}")
    problem = out_problem(out or _default_bench_out())
    if problem is not None:
        raise UsageError(problem)


def _default_bench_out() -> Path:
    """``hawkes-node-<host>.txt`` in the current folder."""
    import socket

    return Path(f"hawkes-node-{socket.gethostname().split('.')[0] or 'host'}.txt")


class _Screen:
    """Lines echoed to the terminal and kept for the saved file."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def echo(self, line: str = "") -> None:
        click.echo(line)
        self.lines.append(line)

    def save(self, path: Path) -> None:
        from ..atomic import room_hint, write_text

        try:
            write_text(path, "\n".join(self.lines) + "\n")
        except OSError as exc:
            raise HawkesError(f"{path}: cannot write the bench's screen: "
                              f"{exc.strerror or exc}{room_hint(exc)}") from None  # fmt: skip


def _devices_bench(
    check: bool, only: str | None, n_events: int | None, model: int, out: Path | None
) -> None:
    """``devices [--check] --bench``: the device table, the checks, then
    :func:`hawkes_cli.nodebench.run_bench` on the chosen device, on one screen saved to
    ``out``. Exit 1 when a device failed its check (the bench skips a chosen device that did).
    """
    import time as _time

    from .. import __version__
    from ..kernels import list_devices_checked, select_device, unlisted_gpus
    from ..nodebench import DEFAULT_EVENTS, render, run_bench

    out = out or _default_bench_out()
    screen = _Screen()
    stamp = _time.strftime("%Y-%m-%d %H:%M UTC", _time.gmtime())
    screen.echo(f"hawkes-run devices{' --check' if check else ''} --bench (hawkes {__version__}, "
                f"{stamp})")  # fmt: skip
    reports: list[dict[str, Any]] = []
    try:
        checked = list_devices_checked()
        found = [d for d, _ in checked]
        hints = unlisted_gpus(found)
        if not found:
            note = "".join(f"; {h.summary()}" for h in hints)
            raise HawkesError(f"no OpenCL device found; `pip install pocl-binary-distribution`"
                              f"{note}")  # fmt: skip
        _echo_device_table(checked, screen.echo)
        _echo_gpu_hints(hints, err=False, echo=screen.echo)
        if check:
            screen.echo("")
            named = only is not None
            targets = [(select_device(only)[0], True)] if named else [(d, False) for d in found]
            reports = _check_devices(targets, False, screen.echo)
        chosen = select_device(only)[0]  # GPUs given and none listed: exit 9, after the table
        verdict = {r["ident"]: r["status"] for r in reports}.get(chosen.ident)
        screen.echo("")
        if verdict not in (None, "pass"):
            screen.echo(f"bench: not run: {chosen.ident} {chosen.name} did not pass its check")
        else:
            n = DEFAULT_EVENTS if n_events is None else n_events
            report = run_bench(n, model=model, device=only,
                               note=lambda s: click.echo(f"  ... {s}", err=True))  # fmt: skip
            for line in render(report):
                screen.echo(line)
    except HawkesError as exc:
        screen.lines.append(f"error: {exc}")
        screen.save(out)
        raise
    screen.save(out)
    click.echo(f"(saved to {out})", err=True)
    if reports:
        _exit_for_checks(reports, as_json=False)


def _refuse_opencl_options(precision: str, tolerance: float, background: str) -> None:
    """``--engine reference`` sums every pair in numpy float64: refuse OpenCL engine options
    given on the command line that ask for something else (float32, a truncation tolerance,
    the lattice background, a device) rather than ignore them."""
    ctx = click.get_current_context()
    asked = {
        "precision": precision != "float64",
        "device": True,
        "tolerance": tolerance != EXACT_TOLERANCE,
        "background": background not in (DEFAULT_BACKGROUND, "pairs"),
    }
    given = [
        f"--{name}"
        for name, differs in asked.items()
        if differs and ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
    ]
    if given:
        raise UsageError(
            f"{', '.join(given)} set(s) the OpenCL engine, but --engine reference sums every "
            "pair in numpy float64; leave it out, or choose --engine opencl"
        )


@run.command("validate")
@click.argument("config_file", type=click.Path(path_type=Path))
def validate_cmd(config_file: Path) -> None:
    """Check CONFIG and its data (events, area, polygons) without running anything."""
    from ..config import load_config
    from ..data import check_window_end, load_events, resolve_area
    from ..geo import require_polygon_file
    from ..resample import make_resampler

    config = load_config(config_file)
    data = load_events(config.data.events, need_density=config.model.kind == 2)
    check_window_end(data, config.data.window_end, what=f"{config_file}: data.window_end")
    if config.data.counties is not None:  # read by the chains even without redraws (edges)
        require_polygon_file(config.data.counties, "data.counties")
    area = resolve_area(config, data)
    resampler = make_resampler(config, data)
    sc, ch = config.sampler, config.chains
    click.echo(f"config   {config_file} (sha256 {config.sha256[:12]})")
    click.echo(f"events   {config.data.events}: {data.n} events, t in [{data.time[0]:g}, "
               f"{data.time[-1]:g}], area {area:g}")  # fmt: skip
    edge = {
        EDGE_NONE: "",
        EDGE_CENSORED: f", edge {EDGE_CENSORED} (trigger mass inside the study region only)",
        EDGE_RENORMALIZED: f", edge {EDGE_RENORMALIZED} (each trigger kernel over its mass "
        "inside the study region)",
    }[config.model.edge]
    click.echo(f"model    {config.model.kind}{edge}; engine {config.engine.backend} "
               f"{config.engine.precision}")  # fmt: skip
    click.echo(f"sampler  {sc.kind}: {sc.iterations} iterations ({sc.warmup} warm-up), thin "
               f"{sc.thin}, seed {sc.seed}, resample every {sc.resample_every or 'never'}"
               + (f" over {len(resampler[0].keys)} polygons" if resampler else "")
               + ("; chains end when the run converges" if sc.stop_when == STOP_CONVERGED
                  else ""))  # fmt: skip
    click.echo(f"chains   {ch.count} x {ch.gpus_per_chain} rank(s); run dir "
               f"{config.output.run_dir}")  # fmt: skip
    click.echo("ok")


@run.command("chain")
@click.argument("config_file", type=click.Path(path_type=Path))
@click.option("--chain", "chain_id", type=int, required=True, help="0-based chain number.")
@click.option("--overwrite", is_flag=True, help="Start afresh instead of resuming.")
def chain_cmd(config_file: Path, chain_id: int, overwrite: bool) -> None:
    """Run (or resume) one chain; under mpiexec/srun its ranks split the likelihood.

    Stops cleanly at an iteration boundary on SIGTERM, SIGINT, SIGHUP or SIGUSR1 (exit code 75
    when stopped before the end), after committing its draws.
    """
    from ..stop import StopFlag

    stop = StopFlag()
    stop.install()  # first: every thread started from here on holds the stop signals
    from ..config import load_config
    from ..errors import Interrupted
    from ..parallel import world_comm
    from ..runner import run_chain

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
@click.option(
    "--jobs", type=click.IntRange(min=1), default=None, help="Chains at once (default: all)."
)
@click.option("--overwrite", is_flag=True, help="Discard existing chain files and start afresh.")
def local_cmd(config_file: Path, jobs: int | None, overwrite: bool) -> None:
    """Run all chains of CONFIG on this machine; run again to resume after a stop.

    On a terminal one line per chain is redrawn in place (phase, iterations, rate, elapsed,
    ETA, acceptance); otherwise a time-stamped line per chain at each phase change and every
    30 seconds.
    """
    from ..config import load_config
    from ..local import run_local, summarize
    from ..rundir import RunDir
    from ..vocab import EXIT_STOPPED
    from .progress_view import ProgressDisplay

    config = load_config(config_file)
    t0 = time.monotonic()
    display = ProgressDisplay(sys.stdout, terminal=sys.stdout.isatty())
    codes = run_local(config, jobs=jobs, overwrite=overwrite, display=display)
    summarize(codes)
    run_dir = config.output.run_dir
    stopped = sorted(k for k, rc in codes.items() if rc != 0)
    if stopped:
        click.echo(f"stopped: chains {stopped} can be resumed with: hawkes-run local "
                   f"{shlex.quote(str(config_file))}")  # fmt: skip
        sys.exit(EXIT_STOPPED)
    click.echo(f"done in {time.monotonic() - t0:.0f} s: {config.chains.count} chains in "
               f"{RunDir(run_dir).chains_dir}")  # fmt: skip
    if config.sampler.stop_when == STOP_CONVERGED:
        click.echo(cluster_cmds.convergence_line(config))
    click.echo(f"diagnose with: hawkes-diagnose {shlex.quote(str(run_dir))}")
