#!/usr/bin/env bash
# The main job on an embedded default, from a fresh machine: simulate about 4,000 events of
# model 2 over a grid of synthetic counties, check the likelihood engines agree on them, then run
# 4 MCMC chains locally (configs/demo.yaml) and diagnose them; the diagnosis shows the simulated
# truth beside each interval. Run it again to resume an interrupted run (finished chains are
# left alone).
# Times are continuous, as the model assumes: floored to whole days (--integer-days, like the
# HHS data), offspring on their parent's day could not be triggered and xi0 and sigma_t would
# read off their simulated values. mu0 and tau_t do not enter the simulation (its background is
# a constant rate); the values below only set the log-likelihood check. Offspring that land
# outside the rectangle are dropped, so the config fits with model.edge: censored (the
# compensator counts only each event's trigger mass inside the rectangle).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
params=(--param mu0=0.5 --param tau_t=30 --param xi0=0.5 --param sigma_x=0.2 --param sigma_t=5)
if [ ! -f demo/events.h5 ] || ! grep -q edge-censored demo/.made-by 2>/dev/null; then
    mkdir -p demo
    rm -rf runs/demo  # chains of earlier demo data (or an older chain-file layout) start afresh
    hawkes-prep simulate --out demo/events.h5 --model 2 --grid 10 10 --n-background 2000 \
        --t-end 365 --seed 1 "${params[@]}"
    echo "hawkes-prep simulate, continuous-times, fitted with edge-censored" > demo/.made-by
fi
hawkes-run devices
for engine in "reference float64" "opencl float64" "opencl float32"; do
    set -- $engine
    echo "== log-likelihood at the simulated parameters: engine $1, $2"
    hawkes-run loglik demo/events.h5 --model 2 --engine "$1" --precision "$2" "${params[@]}"
done
hawkes-run validate configs/demo.yaml
hawkes-run local configs/demo.yaml
echo "== diagnostics"
hawkes-diagnose runs/demo
