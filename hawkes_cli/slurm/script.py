"""The batch script: ``slurm/job.sbatch.tmpl`` filled in for a plan, every value quoted.

Quoting: every value that reaches the script goes through :func:`shlex.quote` in shell code and
through :func:`sbatch_quote` in ``#SBATCH`` lines (sbatch reads those itself: double quotes and
backslash escapes, no single quotes); line breaks are refused, so no value can end a line and
inject another.

Rendering is a pure function of the config, the plan and the template: nothing is written and
no Slurm command runs here.
"""

from __future__ import annotations

import re
import shlex
import string
import sys
from importlib import resources
from pathlib import Path

from ..config import Config
from ..errors import ConfigError, HawkesError
from ..rundir import RunDir
from .launch import check_launcher
from .plan import Plan

TEMPLATE_NAME = "job.sbatch.tmpl"


def template_path() -> Path:
    """The batch-script template: packaged (``hawkes_cli/_slurm``) or the checkout's ``slurm/``.

    Raises
    ------
    HawkesError
        If neither exists.
    """
    packaged = resources.files("hawkes_cli").joinpath("_slurm", TEMPLATE_NAME)
    if packaged.is_file():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parents[2] / "slurm" / TEMPLATE_NAME
    if checkout.is_file():
        return checkout
    raise HawkesError(
        f"batch-script template {TEMPLATE_NAME} not found in {packaged} nor {checkout}; "
        "reinstall the package (pip install .)"
    )


def _single_line(what: str, value: str) -> str:
    if any(c in value for c in "\n\r\0"):
        raise ConfigError(
            f"{what} {value!r} contains a line break or NUL, which cannot go into a batch "
            "script; rename it"
        )
    return value


def sbatch_quote(value: str) -> str:
    """Quote ``value`` for an ``#SBATCH`` line as sbatch itself parses it.

    sbatch splits those lines at unquoted white space, treats ``"`` as quotes, ``\\`` as an
    escape and an unquoted ``#`` as a comment (single quotes are literal), so anything beyond
    plain characters is put in double quotes with ``"`` and ``\\`` escaped.

    Raises
    ------
    ConfigError
        If ``value`` holds a line break or NUL.
    """
    _single_line("value", value)
    if value and re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _sbatch_output(run_dir: Path) -> str:
    logs = str(RunDir(run_dir).slurm_logs_dir)
    return logs.replace("%", "%%") + "/%A_%a.out"


def _directives(plan: Plan, run_dir: Path) -> str:
    """The ``#SBATCH`` lines of the plan's resources, values quoted for sbatch."""
    options = plan.resources.options(output=_sbatch_output(run_dir))
    return "\n".join(
        f"#SBATCH --{name}" + ("" if value is None else f"={sbatch_quote(value)}")
        for name, value in options
    )


def _summary(plan: Plan) -> str:
    r = plan.resources
    return (
        f"{plan.chains} chain(s) x {plan.gpus_per_chain} GPU(s) on {len(plan.nodes)} node(s) "
        f"(--array={r.array}), {plan.chains_per_node} chain(s) per node"
    )


def render_script(
    config: Config,
    plan: Plan,
    *,
    config_path: Path,
    python: str | None = None,
    launcher: str = "auto",
    template: Path | None = None,
) -> str:
    """The batch script of ``plan`` from the template in ``slurm/``.

    Parameters
    ----------
    config
        The run's configuration.
    plan
        Its placement (:func:`~hawkes_cli.slurm.plan.make_plan`).
    config_path
        The resolved config the job reads (``RUN_DIR/config.yaml``).
    python
        Interpreter the job runs (default: this one, :data:`sys.executable`).
    launcher
        How the node starts its ranks: ``auto`` (srun inside Slurm, else mpiexec), ``srun`` or
        ``mpiexec``.
    template
        Template file (default :func:`template_path`).

    Returns
    -------
    str
        The script; every value is quoted (see the module docstring).
    """
    check_launcher(launcher)
    python = python or sys.executable
    _single_line("run directory", str(config.output.run_dir))
    directives = _directives(plan, config.output.run_dir)
    text = (template or template_path()).read_text(encoding="utf-8")
    return string.Template(text).substitute(
        plan_summary=_summary(plan),
        signal_seconds=str(config.slurm.signal_seconds),
        requeue_budget=str(config.slurm.requeue_budget),
        directives=directives,
        launcher=shlex.quote(launcher),
        python=shlex.quote(_single_line("interpreter path", python)),
        config=shlex.quote(_single_line("config path", str(config_path))),
    )
