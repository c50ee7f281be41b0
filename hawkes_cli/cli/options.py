"""What the three console scripts share: options, logging set-up and error mapping.

Every ``click.Choice`` of a domain name is built from :mod:`hawkes_cli.vocab`, and each option
that several commands take (``--json``, ``-v``, ``--param``, ``--model``, ...) is defined here
once. :func:`run_guarded` is the edge where domain errors become one ``error: ...`` line.

This module imports no heavy package: ``--help`` must stay fast and free of pyopencl/h5py.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO, TypeVar

import click

from .. import __version__
from ..errors import HawkesError, hdf5_write_failed
from ..vocab import (
    BACKGROUNDS,
    DEFAULT_BACKGROUND,
    DEFAULT_ENGINE,
    ENGINES,
    EXACT_TOLERANCE,
    LAUNCHERS,
    MIN_TOLERANCE,
    MODELS,
    PARAM_NAMES,
    PRECISIONS,
)

F = TypeVar("F", bound=Callable[..., Any])
Decorator = Callable[[F], F]

#: ``-h`` as well as ``--help``, on every group and command.
CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"]}

#: How a Slurm node starts its MPI ranks (``submit --launcher``, ``node --launcher``).

#: Model kinds as the command line spells them.
MODEL_CHOICE = click.Choice([str(kind) for kind in MODELS])


# --------------------------------------------------------------------------- logging, errors
def setup_logging(verbose: int) -> None:
    """Log at WARNING, INFO (``-v``) or DEBUG (``-vv``) to stderr.

    Parameters
    ----------
    verbose
        How often ``-v`` was given.
    """
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(
        level=level,
        format="%(levelname)s %(name)s: %(message)s",
        handlers=[_StderrNow()],
        force=True,
    )


class _StderrNow(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler writing to whatever ``sys.stderr`` is when a record comes, not the stream it
    was when logging was set up (a caller that swaps stderr for a while, as click's test
    runner does, would leave a closed stream behind)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


def world_rank() -> int:
    """This process's MPI rank from the launcher's environment (0 when not under MPI).

    Returns
    -------
    int
        The first of ``PMI_RANK``, ``OMPI_COMM_WORLD_RANK``, ``SLURM_PROCID`` that is set.
    """
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return 0


def run_guarded(command: click.Command) -> Callable[[], None]:
    """Wrap a click command so user mistakes never show a traceback.

    Parameters
    ----------
    command
        The group or command to run with ``sys.argv``.

    Returns
    -------
    callable
        A console-script entry point: a :class:`~hawkes_cli.errors.HawkesError` prints
        ``error[ (rank R)]: message`` on stderr and exits with the error's code; click usage
        errors exit 2 with click's message; Ctrl-C and aborts exit 130; an ``OSError`` the
        code did not map (a full disk, a permission) is one ``error:`` line naming the file,
        exit 1 (its traceback logged at debug level).
    """

    def main() -> None:
        try:
            command.main(standalone_mode=False)
        except HawkesError as exc:
            rank = world_rank()
            where = f" (rank {rank})" if rank else ""
            click.echo(f"error{where}: {exc}", err=True)
            _exit(exc.exit_code)
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
        except OSError as exc:  # the system refused a file operation: disk, permissions, paths
            logging.getLogger(__name__).debug("file operation failed", exc_info=True)
            what = f": {exc.filename}" if exc.filename else ""
            click.echo(f"error: {exc.strerror or exc}{what}; check the path and the disk", err=True)
            _exit(1)

    return main


def _exit(code: int) -> None:
    """``sys.exit(code)``; after a failed HDF5 write, ``os._exit`` (the library's clean-up at
    exit can crash then: :func:`~hawkes_cli.errors.note_hdf5_write_failure`)."""
    if hdf5_write_failed():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


# --------------------------------------------------------------------------- shared options
version_option: Decorator = click.version_option(__version__, prog_name="hawkes")

verbose_option: Decorator = click.option(
    "-v", "--verbose", count=True, help="More log output (-v info, -vv debug)."
)


def json_option(help: str = "Print JSON.") -> Decorator:
    """``--json`` (parameter ``as_json``): machine-readable output instead of text.

    Parameters
    ----------
    help
        The option's help line (what the JSON holds).
    """
    return click.option("--json", "as_json", is_flag=True, help=help)


def param_option(help: str) -> Decorator:
    """``--param NAME=VALUE`` (parameter ``params``), repeatable: model parameters.

    Parameters
    ----------
    help
        The option's help line (which parameters are needed, defaults).
    """
    return click.option("--param", "params", multiple=True, metavar="NAME=VALUE", help=help)


#: ``--param`` where all five parameters are needed.
PARAM_HELP = f"Each of {', '.join(PARAM_NAMES)} (repeat the option)."


def model_option(help: str | None = None) -> Decorator:
    """``--model`` (parameter ``model``, a string of :data:`~hawkes_cli.vocab.MODELS`).

    Parameters
    ----------
    help
        The option's help line, if any.
    """
    return click.option(
        "--model", type=MODEL_CHOICE, default=str(MODELS[0]), show_default=True, help=help
    )


#: ``--engine`` (parameter ``engine_name``); the help lists the reference engine first, as it
#: always has (vocab lists the default, ``opencl``, first).
engine_option: Decorator = click.option(
    "--engine",
    "engine_name",
    type=click.Choice(ENGINES[::-1]),
    default=DEFAULT_ENGINE,
    show_default=True,
)


def precision_option(default: str) -> Decorator:
    """``--precision``: working precision of the OpenCL pair terms.

    Parameters
    ----------
    default
        One of :data:`~hawkes_cli.vocab.PRECISIONS`.
    """
    return click.option(
        "--precision",
        type=click.Choice(PRECISIONS),
        default=default,
        show_default=True,
        help="Working precision of the OpenCL pair terms.",
    )


device_option: Decorator = click.option(
    "--device",
    default=None,
    help="OpenCL device: P:D, 'gpu', 'cpu' or part of its name (see `devices`).",
)

#: ``--tolerance``; the default is the exact pair sum (a checking tool's default).
tolerance_option: Decorator = click.option(
    "--tolerance",
    type=float,
    default=EXACT_TOLERANCE,
    show_default=True,
    help="Log-likelihood error allowed from truncating the trigger, in nats (absolute; OpenCL; "
    f"bound checked at every evaluation); 0: exact pair sum, else >= {MIN_TOLERANCE:g}.",
)

background_option: Decorator = click.option(
    "--background",
    type=click.Choice(BACKGROUNDS),
    default=DEFAULT_BACKGROUND,
    show_default=True,
    help="auto: the background once per distinct time (the day lattice), or on a fine time "
    "lattice by FFT above 2,048 distinct times; lattice: always on the lattice (bounded; exact for "
    "whole days); pairs: force the plain pair sum over all events (OpenCL).",
)


def launcher_option(default: str | None, help: str) -> Decorator:
    """``--launcher``: how a Slurm node starts its ranks (one of :data:`LAUNCHERS`).

    Parameters
    ----------
    default
        Default launcher; ``None`` defers to the environment (shown without a default).
    help
        The option's help line.
    """
    return click.option(
        "--launcher",
        type=click.Choice(LAUNCHERS),
        default=default,
        show_default=default is not None,
        help=help,
    )
