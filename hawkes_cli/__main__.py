"""``python -m hawkes_cli {run,prep,diagnose} ...``: the console scripts without a PATH entry
(used under ``mpiexec``)."""

from __future__ import annotations

import sys

from .cli import diagnose_main, prep_main, run_main

_COMMANDS = {"run": run_main, "prep": prep_main, "diagnose": diagnose_main}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in _COMMANDS:
        sys.stderr.write("usage: python -m hawkes_cli {run,prep,diagnose} [ARGS]...\n")
        sys.exit(2)
    name = sys.argv.pop(1)
    sys.argv[0] = f"hawkes-{name}"
    _COMMANDS[name]()


if __name__ == "__main__":
    main()
