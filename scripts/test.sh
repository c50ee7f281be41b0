#!/usr/bin/env bash
# The whole test suite from a fresh machine: set-up, lint, then every pytest tier that can run
# here (opencl on PoCL, mpi with the mpich wheel; gpu skips without an accelerator).
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -m "not slow"`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
ruff check .
ruff format --check .
set +e
python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then  # pytest: no test selected by the given filter
    echo "no tests selected"
    rc=0
fi
exit "$rc"
