#!/usr/bin/env bash
# A 1,000,000-case smoke run (not part of CI): the synthetic HHS facility file of
# benchmarks/bench_prep.py (real schema, ~1.05M rows) -> `hawkes-prep hhs --n 1000000` -> one
# covid-model1-style chain (configs/covid-model1.yaml with 1 chain, this machine's OpenCL device,
# the default sampler and fast start) for ITERATIONS iterations. It reports seconds per iteration
# in and after warm-up, pair passes per iteration, peak memory and where the fast start put the
# chain, from the chain file and /usr/bin/time.
#
#   bash scripts/smoke_1m.sh                 # 300 iterations, 150 warm-up, work in /tmp/hawkes-1m
#   ITERATIONS=100 WARMUP=60 WORK=/scratch/1m bash scripts/smoke_1m.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
WORK=${WORK:-/tmp/hawkes-1m}
ITERATIONS=${ITERATIONS:-300}
WARMUP=${WARMUP:-150}
mkdir -p "$WORK"
if [ ! -f "$WORK/hhs.csv" ]; then
    python - "$WORK/hhs.csv" <<'EOF'
import sys
from pathlib import Path
sys.path.insert(0, "benchmarks")
from bench_prep import write_synthetic
print(write_synthetic(Path(sys.argv[1])))
EOF
fi
if [ ! -f "$WORK/cases.h5" ]; then
    /usr/bin/time -v hawkes-prep hhs "$WORK/hhs.csv" --out "$WORK/cases.h5" --n 1000000 \
        --seed 1 2> "$WORK/prep.time"
    grep -E "Elapsed|Maximum resident" "$WORK/prep.time"
fi
python - "$WORK" "$ITERATIONS" "$WARMUP" <<'EOF'
import sys
from pathlib import Path
import yaml
work, iterations, warmup = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
cfg = yaml.safe_load(Path("configs/covid-model1.yaml").read_text())
cfg["data"]["events"] = str(work / "cases.h5")
cfg["sampler"].update(iterations=iterations, warmup=warmup)
cfg["chains"].update(count=1, gpus_per_chain=1, chains_per_node=1)
cfg["output"].update(run_dir=str(work / "run"), commit_every=10)
(work / "smoke.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
EOF
/usr/bin/time -v hawkes-run -v chain "$WORK/smoke.yaml" --chain 0 --overwrite \
    2> >(tee "$WORK/chain.log" >&2)
python - "$WORK" "$WARMUP" <<'EOF'
import json, re, sys
from pathlib import Path
import numpy as np
from hawkes_cli.rundir import RunDir
from hawkes_cli.storage import read_chain
from hawkes_cli.vocab import PARAM_NAMES
work, warmup = Path(sys.argv[1]), int(sys.argv[2])
log = (work / "chain.log").read_text()
chain = read_chain(RunDir(work / "run").chain_path(0))
d = chain.draws
peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", log)
print(f"peak memory: {int(peak.group(1)) / 2**20:.2f} GiB" if peak else "peak memory: ?")
for line in log.splitlines():
    if "start" in line and ("fast" in line or "found" in line):
        print(line.strip())
progress = json.loads(RunDir(work / "run").progress_path(0).read_text())
print("progress:", {k: progress[k] for k in ("iteration", "it_per_s", "acceptance", "loglik")})
# progress lines: "chain 0: i/N  r it/s ..." with r the mean rate since the loop began
pts = [(int(m.group(1)), int(m.group(1)) / float(m.group(2)))
       for m in re.finditer(r"chain 0: (\d+)/\d+\s+([0-9.]+) it/s", log) if float(m.group(2)) > 0]
if pts:
    before = [p for p in pts if p[0] <= warmup]
    after = [p for p in pts if p[0] > warmup]
    if before:
        print(f"warm-up: {before[-1][1] / before[-1][0]:.2f} s/iteration (to iteration {before[-1][0]})")
    if before and after and after[-1][0] > before[-1][0]:
        rate = (after[-1][1] - before[-1][1]) / (after[-1][0] - before[-1][0])
        print(f"after warm-up: {rate:.2f} s/iteration")
if "pair_passes" in d:
    w = d["warmup"] == 1
    for label, m in (("warm-up", w), ("after warm-up", ~w)):
        if m.any():
            print(f"{label}: {m.sum()} iterations, {d['pair_passes'][m].mean():.2f} pair passes/it")
print("first draw:", {p: float(d[p][0]) for p in PARAM_NAMES}, "loglik", float(d["loglik"][0]))
print("last draw: ", {p: float(d[p][-1]) for p in PARAM_NAMES}, "loglik", float(d["loglik"][-1]))
EOF
