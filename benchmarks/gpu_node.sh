#!/usr/bin/env bash
# Issue 40's measurements on a GPU node, in one call, each result written as soon as it exists
# (so a time limit still leaves the finished ones):
#
#   1. hawkes-run devices --check                      -> OUT/devices-check.txt
#   (each step's own output also goes to OUT/<step>.log)
#   2. bench_iteration.py, both models, locations redrawn every iteration (as shipped) and
#      fixed, the shipped configs' 4 expensive moves (N_EXPENSIVE=1: the old setting), with
#      the next draw's index built ahead on the worker thread (the default) and without it
#      (HAWKES_DRAW_AHEAD=0: does the worker overlap a main thread that spins in the driver's
#      waits?)                            -> OUT/iteration-<name>{,-noahead}.{txt,json}
#   3. bench_pass_shape.py: seconds and exact work counts of one truncated pass per model
#                                                      -> OUT/pass-shape-<name>.{txt,json}
#   4. hawkes-run devices --check --bench, each model (a new node's one screen)
#                                                      -> OUT/devices-bench-m{1,2}.txt
#   5. bench_gil.py: the node host's own build of a draw's index and row blocks on the worker
#      thread and how long it keeps a waiting main thread from Python (the host factor of the
#      GPU projection in docs/speed.md)                  -> OUT/gil-<name>.{txt,json}
#
#   bash benchmarks/gpu_node.sh OUT [NAME]             # NAME: results name, default "gpu"
#   N=20000 ITERATIONS=8 bash benchmarks/gpu_node.sh /tmp/out test    # a quick trial on a CPU
#
# ARCHIVE=FILE.tar.gz: after each step, OUT's files so far packed into FILE (written beside it,
# then renamed, so FILE is always whole): what a machine that returns only a few files, or is
# stopped at a time limit, hands back (benchmarks/gpu_session.sh). STEPS="NAME ...": only the
# steps of those names (devices-check iteration iteration-noahead pass-shape devices-bench-m1
# devices-bench-m2 gil), to split the list over calls; the others print "NAME: skipped".
#
# The device is HAWKES_OPENCL_DEVICE's (default here: gpu). Run it inside a GPU job
# (`srun --gpus=1 --time=00:30:00 bash benchmarks/gpu_node.sh OUT`); commit OUT's files under
# benchmarks/results/ with the CPU's from the same commit. Not part of CI.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bash benchmarks/gpu_node.sh OUT [NAME]}
NAME=${2:-gpu}
N=${N:-1000000}
ITERATIONS=${ITERATIONS:-12}
SKIP=${SKIP:-4}
WORK=${WORK:-/tmp/hawkes-bench-iteration}
export HAWKES_OPENCL_DEVICE=${HAWKES_OPENCL_DEVICE:-gpu}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$WORK"
PY=${PYTHON:-python3}
ARCHIVE=${ARCHIVE:-}
STEPS=${STEPS:-}
archive() {  # OUT's files into ARCHIVE, where set (tmp + mv: never a half-written archive)
    [ -n "$ARCHIVE" ] || return 0
    local base
    base=$(basename "$ARCHIVE")
    tar -czf "$ARCHIVE.tmp" --exclude="$base" --exclude="$base.tmp" -C "$OUT" . \
        && mv -f "$ARCHIVE.tmp" "$ARCHIVE"
}
run() {  # run NAME COMMAND...: its output into OUT/NAME.log, a line when it ends
    local name=$1
    shift
    if [ -n "$STEPS" ] && [[ " $STEPS " != *" $name "* ]]; then
        echo "$name: skipped"
        return 0
    fi
    local t0=$SECONDS
    "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    [ "$name" = devices-check ] && mv "$OUT/devices-check.log" "$OUT/devices-check.txt"
    archive
    echo "$name: exit $rc after $((SECONDS - t0)) s"
}
run devices-check "$PY" -m hawkes_cli run devices --check
for ahead in 1 0; do
    suffix=$([ "$ahead" = 0 ] && echo "-noahead" || echo "")
    HAWKES_DRAW_AHEAD=$ahead run "iteration$suffix" "$PY" benchmarks/bench_iteration.py \
        --n "$N" --iterations "$ITERATIONS" --skip "$SKIP" --work "$WORK" \
        --name "$NAME$suffix" --out-dir "$OUT" --timeout 600 \
        ${N_EXPENSIVE:+--n-expensive "$N_EXPENSIVE"}
done
run pass-shape "$PY" benchmarks/bench_pass_shape.py --n "$N" --work "$WORK" --name "$NAME" \
    --out-dir "$OUT"
for model in 1 2; do
    run "devices-bench-m$model" "$PY" -m hawkes_cli run devices --check --bench --n "$N" \
        --model "$model" --out "$OUT/devices-bench-m$model.txt"
done
run gil "$PY" benchmarks/bench_gil.py --n "$N" --work "$WORK" --name "$NAME" --out-dir "$OUT" \
    --note "host of $(hostname), beside nothing else of this script"
ls -l "$OUT"
archive
