"""Command-line interface: ``hawkes-run``, ``hawkes-prep``, ``hawkes-diagnose``.

The only package that prints. User mistakes (:class:`~hawkes_cli.errors.HawkesError`) become
one ``error: ...`` line on stderr and the error's exit code, never a traceback
(:func:`.options.run_guarded`).

Modules: :mod:`.options` (shared options, logging, error mapping), :mod:`.run_cmds`
(``hawkes-run`` on this machine), :mod:`.cluster_cmds` (``hawkes-run`` on Slurm),
:mod:`.prep_cmds` (``hawkes-prep``), :mod:`.diagnose_cmd` (``hawkes-diagnose``). Heavy packages
are imported inside the commands, so ``--help`` stays fast.
"""

from __future__ import annotations

from .diagnose_cmd import diagnose
from .options import run_guarded
from .prep_cmds import prep
from .run_cmds import run

__all__ = ["diagnose", "diagnose_main", "prep", "prep_main", "run", "run_main"]

#: Console-script entry points (pyproject ``[project.scripts]``, ``python -m hawkes_cli``).
run_main = run_guarded(run)
prep_main = run_guarded(prep)
diagnose_main = run_guarded(diagnose)
