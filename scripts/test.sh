#!/usr/bin/env bash
# The whole test suite from a fresh machine: set-up, lint, then every pytest tier that can run
# here (opencl on PoCL, mpi with the mpich wheel, slurm on a local single-node cluster; gpu
# skips without an accelerator).
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -m "not slow"`).
# The slurm tier needs root on Debian/Ubuntu: slurm/local-cluster.sh installs and starts
# slurmctld/slurmd/munge (and leaves them running; `bash slurm/local-cluster.sh down` stops
# them). Elsewhere, or with HAWKES_SLURM=0, its tests skip; under CI=true a cluster that
# does not come up is an error.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
ruff check .
ruff format --check .
if [ "${HAWKES_SLURM:-1}" != 0 ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    if ! bash slurm/local-cluster.sh up; then
        if [ "${CI:-}" = true ]; then
            echo "the local Slurm cluster did not come up (see /var/log/hawkes-slurm)" >&2
            exit 1
        fi
        echo "warning: the local Slurm cluster did not come up; the slurm tier skips" >&2
    fi
fi
set +e
python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then  # pytest: no test selected by the given filter
    echo "no tests selected"
    rc=0
fi
exit "$rc"
