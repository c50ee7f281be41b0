"""``hawkes-run`` on a Slurm cluster: plan, submit, status, cancel, and the hidden ``node``.

The commands are not bound to a group here; :mod:`.run_cmds` adds :data:`COMMANDS` to
``hawkes-run``. ``node`` is internal (only the batch script calls it) and hidden from ``--help``.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import click

from .options import json_option, launcher_option


@click.command("plan")
@click.argument("config_file", type=click.Path(path_type=Path))
@json_option("Print the plan as JSON.")
def plan_cmd(config_file: Path, as_json: bool) -> None:
    """Show how CONFIG's chains are placed on Slurm array tasks (nodes), ranks and GPUs."""
    from ..config import load_config
    from ..slurm import format_plan, make_plan

    plan = make_plan(load_config(config_file))
    click.echo(json.dumps(plan.to_json(), indent=1) if as_json else format_plan(plan))


@click.command("submit")
@click.argument("config_file", type=click.Path(path_type=Path))
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the batch script and check the config against the run's; write and submit nothing.",
)
@launcher_option(
    "auto",
    help="How a node starts its ranks: srun --mpi=pmi2 ($HAWKES_SRUN_MPI), or mpiexec inside "
    "the allocation; auto: srun when available.",
)
def submit_cmd(config_file: Path, dry_run: bool, launcher: str) -> None:
    """Submit CONFIG as a Slurm array job (one task per node) with sbatch.

    Writes the resolved config and RUN_DIR/slurm/job.sbatch, submits only the nodes with
    unfinished chains and records the job id in RUN_DIR/slurm/jobs.json. Submitting again
    resumes every chain from its last commit.
    """
    from ..config import load_config
    from ..slurm import submit

    config = load_config(config_file)
    result = submit(config, dry_run=dry_run, launcher=launcher)
    if dry_run:
        click.echo(result.script, nl=False)
        click.echo(_change_line(config, result.change), err=True)
        return
    run_dir = config.output.run_dir
    if result.job_id is None:
        click.echo(f"all {config.chains.count} chains are finished; nothing submitted")
        return
    click.echo(f"submitted job {result.job_id} (array tasks {result.array}) for {run_dir}")
    click.echo(f"script   {result.script_path}")
    click.echo(f"logs     {run_dir / 'slurm' / 'logs'}")
    click.echo(f"status   hawkes-run status {shlex.quote(str(run_dir))}")


def _change_line(config, change: tuple[str, ...] | None) -> str:
    """What a dry run's submission would do to the run's ``config.yaml`` (one line)."""
    from ..rundir import RunDir

    path = RunDir.of(config).config_path
    if change is None:
        return f"dry run: would start a new run in {config.output.run_dir}"
    if not change:
        return f"dry run: {path} stays as it is"
    return f"dry run: would change {path} (no draw depends on these keys): " + "; ".join(change)


@click.command("status")
@click.argument("run_dir", type=click.Path(path_type=Path))
@json_option()
def status_cmd(run_dir: Path, as_json: bool) -> None:
    """Per chain of RUN_DIR: iterations, draws committed, requeues, last commit, Slurm job and
    state, and the chain's phase."""
    import dataclasses

    from ..rundir import RunDir
    from ..slurm import run_status
    from ..vocab import STOP_CONVERGED

    rows = run_status(run_dir)
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(r) for r in rows], indent=1))
        _refuse_damaged(rows)
        return
    click.echo(
        f"{'chain':>5} {'node':>4} {'iterations':>15} {'draws':>8} {'requeues':>8}  "
        f"{'last commit':<29} {'job':<12} {'job state':<12} phase"
    )
    for r in rows:
        it = f"{r.iteration}/{r.iterations}"
        state = r.state or ("-" if r.job is None else "unknown")
        click.echo(
            f"{r.chain:>5} {r.node:>4} {it:>15} {r.draws:>8} {r.requeues:>8}  "
            f"{r.last_commit or '-':<29} {r.job or '-':<12} {state:<12} "
            + ("damaged" if r.problem else r.phase)
        )
    done = sum(r.finished for r in rows)
    click.echo(f"{done}/{len(rows)} chains finished")
    config = RunDir(run_dir).load_config()
    if config.sampler.stop_when == STOP_CONVERGED:
        click.echo(convergence_line(config, ended=done == len(rows)))
    _refuse_damaged(rows)


def _refuse_damaged(rows: list[Any]) -> None:
    """After the table: a :class:`~hawkes_cli.errors.StorageError` (exit 7) naming the first
    chain whose file does not hold what its checkpoint says."""
    from ..errors import StorageError

    damaged = [r for r in rows if r.problem]
    if damaged:
        raise StorageError(
            f"chain {damaged[0].chain}: {damaged[0].problem}"
            + (f" (and {len(damaged) - 1} more chain file(s))" if len(damaged) > 1 else "")
        )


def convergence_line(config: Any, *, ended: bool = True) -> str:
    """What ``stop_when: converged`` found, in one line (``local``'s summary, ``status``);
    ``ended``: whether every chain has ended (else the run may still converge)."""
    from ..rundir import RunDir
    from ..runner.converged import found

    rd = RunDir.of(config)
    record = found(rd, config)
    if record is None:
        if not ended:
            return "not converged yet: each chain checks at its commits after warm-up"
        return (
            f"not converged within sampler.iterations ({config.sampler.iterations}): "
            "hawkes-diagnose says what is missing"
        )
    return (
        f"converged at {record.common_draws} post-warm-up draws per chain (largest R-hat "
        f"{record.largest_rhat:.4f}, smallest ESS {record.smallest_ess:.0f}; "
        f"{rd.converged_path})"
    )


@click.command("cancel")
@click.argument("run_dir", type=click.Path(path_type=Path))
def cancel_cmd(run_dir: Path) -> None:
    """Cancel the pending and running Slurm jobs of RUN_DIR (chains keep their commits)."""
    from ..slurm import cancel

    jobs = cancel(run_dir)
    click.echo(f"cancelled {', '.join(jobs)}" if jobs else "no pending or running job")


@click.command("node", hidden=True)
@click.argument("config_file", type=click.Path(path_type=Path))
@click.option("--node", "node_index", type=int, required=True, help="Array task (node) index.")
@click.option(
    "--ranks",
    is_flag=True,
    help="Be one MPI rank of the node (the launcher starts these).",
)
@launcher_option(None, help="How to start the ranks (default: $HAWKES_LAUNCHER, else auto).")
@click.pass_context
def node_cmd(
    ctx: click.Context, config_file: Path, node_index: int, ranks: bool, launcher: str | None
) -> None:
    """Internal: run array task NODE of a submitted run (the batch script calls this).

    Without --ranks: starts the node's MPI ranks, forwards Slurm's warning signal (USR1) and
    requeues the job when chains stopped early. With --ranks: one rank; its chain stops at an
    iteration boundary on SIGUSR1/SIGTERM/SIGINT after committing.
    """
    from ..stop import StopFlag

    if ranks:
        stop = StopFlag()
        stop.install()  # first: every thread started from here on holds the stop signals
        from ..slurm import run_node_ranks

        code = run_node_ranks(config_file, node_index, stop=stop)
    else:
        from ..slurm import launch_node

        verbose = (ctx.parent.params.get("verbose", 0) if ctx.parent else 0) or 1
        code = launch_node(config_file, node_index, launcher=launcher, verbose=verbose)
    if code:
        sys.exit(code)


#: The Slurm commands of ``hawkes-run``.
COMMANDS: tuple[click.Command, ...] = (plan_cmd, submit_cmd, status_cmd, cancel_cmd, node_cmd)
