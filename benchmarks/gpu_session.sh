#!/usr/bin/env bash
# benchmarks/gpu_node.sh on a lent GPU machine (the device tool's nvidia-h200) in one command:
# no network there, a few files back from OUT, and a hard time limit per call.
#
#   bash scripts/gpu_bundle.sh                        # HERE first: the wheels into .gpu/
#   bash benchmarks/gpu_session.sh "$OUT" h200        # THERE, the device call (carry [".gpu"])
#
# 1. installs .gpu/wheels (what the image lacks: pyopencl, shapely, pyogrio, plotly-geo's
#    counties and their needs) with pip --no-index --no-deps into SITE (default /tmp/hawkes-site), puts it and the
#    checkout on PYTHONPATH (hawkes runs from the checkout: nothing is built);
# 2. registers NVIDIA's OpenCL driver (an ICD file naming NVIDIA_OCL, default
#    /usr/local/nvidia/lib64/libnvidia-opencl.so.1, in ICD_DIR, default /etc/OpenCL/vendors,
#    and in $OCL_ICD_VENDORS where that is a folder) if the library is there and no ICD file
#    names it yet; HAWKES_OPENCL_DEVICE defaults to gpu;
# 3. writes OUT/progress.txt: the machine (nvidia-smi -L, clinfo -l), Python, PyOpenCL and the
#    OpenCL devices it sees, then one line per step as it ends ("NAME: exit RC after S s");
# 4. runs gpu_node.sh into SCRATCH (default /tmp/hawkes-gpu-NAME-N) with
#    ARCHIVE=OUT/gpu-NAME.tar.gz, so the archive holds every finished step (and, every SNAPSHOT
#    seconds, default 60, the files of the step running), whenever the call ends. The last line
#    names the steps that failed, and the bench_iteration chains that did (bench_iteration
#    exits 1 when one of its chains failed, after writing what the others measured).
#
# The same command again on the same (still warm) machine resumes: the steps that exited 0
# in SCRATCH are skipped, the others run, and the archive holds them all (FRESH=1: all again).
#
# OUT gets three files: progress.txt, gpu-NAME.tar.gz and session.log (everything printed).
# gpu_node.sh's N, ITERATIONS, SKIP, WORK and STEPS pass through, e.g. a trial on a CPU:
#   N=20000 ITERATIONS=8 HAWKES_OPENCL_DEVICE=cpu bash benchmarks/gpu_session.sh /tmp/out trial
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${1:?usage: bash benchmarks/gpu_session.sh OUT [NAME]}
NAME=${2:-gpu}
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-$ROOT/.gpu/wheels}
SITE=${SITE:-/tmp/hawkes-site}
NVIDIA_OCL=${NVIDIA_OCL:-/usr/local/nvidia/lib64/libnvidia-opencl.so.1}
ICD_DIR=${ICD_DIR:-/etc/OpenCL/vendors}
SNAPSHOT=${SNAPSHOT:-60}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PROGRESS=$OUT/progress.txt
ARCHIVE=$OUT/gpu-$NAME.tar.gz
SCRATCH=${SCRATCH:-/tmp/hawkes-gpu-$NAME-${N:-1000000}}
# gpu_node.sh's steps, in its order
ALL_STEPS="devices-check iteration iteration-noahead pass-shape devices-bench-m1 devices-bench-m2
    gil"
: > "$PROGRESS"
exec > >(tee -a "$OUT/session.log") 2>&1
say() { echo "$*" | tee -a "$PROGRESS"; }
t_start=$SECONDS

say "# gpu_session $NAME, $(date -u +%Y-%m-%dT%H:%M:%SZ), host $(hostname 2>/dev/null || uname -n)"
if [ "${FRESH:-0}" = 1 ] && [[ $SCRATCH == /tmp/hawkes-gpu-* ]]; then
    rm -rf "$SCRATCH"
fi
mkdir -p "$SCRATCH"
DONE=$SCRATCH/steps-done.txt
if [ -z "${STEPS:-}" ] && [ -s "$DONE" ]; then  # a call before this one finished some
    STEPS=""
    for step in $ALL_STEPS; do grep -qx "$step" "$DONE" || STEPS="$STEPS $step"; done
    STEPS=${STEPS# }
    say "resuming $SCRATCH: done $(tr '\n' ' ' < "$DONE"); to run: ${STEPS:-nothing}"
    [ -n "$STEPS" ] || STEPS=none
fi
export STEPS=${STEPS:-}

# 1. the carried wheels (once per machine: a call before this one may have installed them)
if compgen -G "$WHEELS/*.whl" > /dev/null \
    && [ "$(cat "$SITE/.hawkes-wheels" 2> /dev/null)" = "$(ls "$WHEELS")" ]; then
    say "wheels: installed in $SITE already"
elif compgen -G "$WHEELS/*.whl" > /dev/null; then
    t0=$SECONDS
    if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --disable-pip-version-check --target "$SITE" "$WHEELS"/*.whl; then
        say "wheels: $(find "$WHEELS" -name '*.whl' | wc -l) from $WHEELS into $SITE" \
            "($((SECONDS - t0)) s)"
        ls "$WHEELS" > "$SITE/.hawkes-wheels"
    else  # no pip: a wheel is a zip of what site-packages holds
        mkdir -p "$SITE"
        for w in "$WHEELS"/*.whl; do "$PY" -m zipfile -e "$w" "$SITE"; done
        say "wheels: pip failed; unzipped $(find "$WHEELS" -name '*.whl' | wc -l) into $SITE"
    fi
else
    say "wheels: none in $WHEELS (run scripts/gpu_bundle.sh here and carry .gpu)"
fi
export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

# 2. NVIDIA's OpenCL driver, where its library is there but not registered
if [ -e "$NVIDIA_OCL" ]; then
    dirs=$ICD_DIR
    [ -d "${OCL_ICD_VENDORS:-}" ] && [ "$OCL_ICD_VENDORS" != "$ICD_DIR" ] \
        && dirs="$dirs $OCL_ICD_VENDORS"
    for d in $dirs; do
        if grep -qsF "$NVIDIA_OCL" "$d"/*.icd; then
            say "icd: $d already names $NVIDIA_OCL"
        elif mkdir -p "$d" && echo "$NVIDIA_OCL" > "$d/nvidia.icd"; then
            say "icd: wrote $d/nvidia.icd ($NVIDIA_OCL)"
        else
            say "icd: could not write $d/nvidia.icd"
        fi
    done
else
    say "icd: no $NVIDIA_OCL, nothing registered"
fi
say "icd files: $(cat "$ICD_DIR"/*.icd 2>/dev/null | tr '\n' ' ')" \
    "OCL_ICD_VENDORS=${OCL_ICD_VENDORS:-} OCL_ICD_FILENAMES=${OCL_ICD_FILENAMES:-}"
export HAWKES_OPENCL_DEVICE=${HAWKES_OPENCL_DEVICE:-gpu}
# the commit: the caller's, else the one gpu_bundle.sh recorded (a copied .git may be stale)
if [ -z "${HAWKES_BENCH_COMMIT:-}" ]; then
    HAWKES_BENCH_COMMIT=$(cat .gpu/commit 2>/dev/null \
        || git rev-parse --short HEAD 2>/dev/null || echo unknown)
fi
export HAWKES_BENCH_COMMIT

# 3. the machine, before any step
{
    echo "commit $HAWKES_BENCH_COMMIT; HAWKES_OPENCL_DEVICE=$HAWKES_OPENCL_DEVICE;" \
        "N=${N:-1000000} ITERATIONS=${ITERATIONS:-12} STEPS=${STEPS:-all}"
    echo "## nvidia-smi -L"
    if command -v nvidia-smi > /dev/null; then nvidia-smi -L 2>&1; else echo "(none)"; fi
    echo "## clinfo -l"
    if command -v clinfo > /dev/null; then clinfo -l 2>&1; else echo "(none)"; fi
    echo "## $PY: $(command -v "$PY")"
    "$PY" - << 'EOF' 2>&1
import platform
import sys

print("python", sys.version.split()[0], platform.machine(), sys.executable)
for name in ("numpy", "scipy", "h5py", "pyopencl", "shapely", "arviz", "hawkes_cli"):
    try:
        module = __import__(name)
        print(f"{name} {getattr(module, '__version__', '?')} {module.__file__}")
    except Exception as exc:
        print(f"{name}: cannot import ({type(exc).__name__}: {exc})")
try:
    import pyopencl as cl

    for p in cl.get_platforms():
        for d in p.get_devices():
            print(f"opencl: {p.name} | {d.name} | {cl.device_type.to_string(d.type)}")
except Exception as exc:
    print(f"opencl: no platforms ({type(exc).__name__}: {exc})")
EOF
    echo "## setup took $((SECONDS - t_start)) s"
} >> "$PROGRESS" 2>&1
cp "$PROGRESS" "$SCRATCH/session.txt"

# 4. the steps; the archive after each, and a snapshot of the running one now and then
MARK=$(mktemp /tmp/hawkes-gpu-mark.XXXXXX)
snapshot() {  # SCRATCH into ARCHIVE, unless gpu_node.sh wrote a newer one meanwhile
    local tmp
    touch "$MARK"
    tmp=$(mktemp "$ARCHIVE.XXXXXX") || return 0
    if tar -czf "$tmp" -C "$SCRATCH" . 2> /dev/null && ! [ "$ARCHIVE" -nt "$MARK" ]; then
        chmod 644 "$tmp" && mv -f "$tmp" "$ARCHIVE"
    else
        rm -f "$tmp"
    fi
}
snapshot
(while sleep "$SNAPSHOT"; do snapshot; done) &
snapper=$!
ARCHIVE=$ARCHIVE PYTHON=$PY bash benchmarks/gpu_node.sh "$SCRATCH" "$NAME" \
    | while IFS= read -r line; do
        echo "$line" | tee -a "$PROGRESS"
        [[ $line == *": exit 0 after "* ]] && echo "${line%%:*}" >> "$DONE"
    done
rc=${PIPESTATUS[0]}
kill "$snapper" 2> /dev/null
wait "$snapper" 2> /dev/null
cp "$PROGRESS" "$SCRATCH/session.txt"
snapshot
rm -f "$ARCHIVE".?????? "$MARK"
failed=$(grep -E '^[a-z0-9-]+: exit [1-9]' "$PROGRESS" | cut -d: -f1 | tr '\n' ' ')
chains=$(grep -H 'failed or no iterations' "$SCRATCH"/iteration-*.txt 2> /dev/null \
    | sed -E 's|.*/iteration-(.*)\.txt:([a-z0-9-]+).*|\1:\2|' | tr '\n' ' ')
failed="$failed$chains"
say "# gpu_session: gpu_node.sh exit $rc, steps/chains failed: ${failed:-none};" \
    "$((SECONDS - t_start)) s in all; $(du -h "$ARCHIVE" | cut -f1) in $ARCHIVE" \
    "(results in $SCRATCH)"
[ "$rc" = 0 ] && [ -z "$failed" ]
