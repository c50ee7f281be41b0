#!/usr/bin/env bash
# The main job on an embedded default, from a fresh machine: simulate a model-2 data set with a
# grid of synthetic counties, then evaluate its log-likelihood with the float64 reference and the
# OpenCL engine (float64 and float32) at the true parameters.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
out=${DEMO_DIR:-demo}
mkdir -p "$out"
params=(--param mu0=0.5 --param tau_t=30 --param xi0=0.5 --param sigma_x=0.2 --param sigma_t=5)
hawkes-prep simulate --out "$out/events.h5" --model 2 --grid 10 10 --n-background 2000 \
    --t-end 365 --seed 1 "${params[@]}"
hawkes-run devices
for engine in "reference float64" "opencl float64" "opencl float32"; do
    set -- $engine
    echo "== engine $1, $2"
    hawkes-run loglik "$out/events.h5" --model 2 --engine "$1" --precision "$2" "${params[@]}"
done
echo "events in $out/events.h5; try: hawkes-run loglik --help"
