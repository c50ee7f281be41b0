"""The mission end to end: the synthetic HHS file -> ``hawkes-prep hhs`` -> ``hawkes-run local``
(4 chains, a shipped covid config) -> ``hawkes-diagnose`` (table, Table 2 counties) -> ``--gof``
(maps), each stage timed as a user runs it, with the time at which the posterior converged.

Stages (``--stages``, in this order; each reads what the earlier ones left in ``--work``, so a
long run can be driven in pieces and a stage re-run alone):

``hhs``
    benchmarks/bench_prep.py's synthetic facility file (real HHS schema, ~1.05M rows), once.
``prep``
    ``hawkes-prep hhs hhs.csv --n N --seed 1`` (``--continuous`` with ``--continuous``): wall
    time, peak memory.
``local``
    ``hawkes-run local`` on ``configs/covid-model{1,2}.yaml`` with only these changes: the
    events file, 4 chains of one rank each (this machine's one OpenCL device),
    ``--iterations``/``--warmup``, the run directory and ``commit_every``. Every ``--poll``
    seconds the committed post-warm-up draws are read; R-hat and bulk/tail ESS of all five
    parameters are logged to ``poll.jsonl``; the first time R-hat <= 1.01 and both ESS >= 400
    hold for all five, the wall time since launch (fast start included) is the convergence
    time. The run then goes on for ``--after`` seconds (to show it stays converged), or stops at
    ``--cap`` (SIGTERM: the chains commit and exit; ``local`` resumes them). While warm-up is
    over, ``py-spy`` (when installed) samples chain 0 for ``--profile`` seconds: the split of an
    iteration's wall time by where it goes (trigger kernel, index build, location redraw,
    background pass, host Python, commits).
``diagnose``
    ``hawkes-diagnose RUN --json --county ...`` (Table 1: medians and 95% intervals; Table 2:
    effective lengthscales in miles for the paper's counties) and the plain table.
``gof``
    ``hawkes-diagnose RUN --gof DIR`` (branching, time rescaling, county residuals, maps).
``report``
    JSON and a text summary into ``--out`` (default benchmarks/results/mission-m{model}-{N}).

    python benchmarks/bench_mission.py --n 200000 --model 1             # everything
    python benchmarks/bench_mission.py --n 1000000 --model 1 --work /scratch/m1 --cap 7200
    python benchmarks/bench_mission.py --n 1000000 --stages diagnose gof report --work /scratch/m1

Peak memory is the largest resident set of one process of a stage (GNU time's ``%M``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_converge import ESS_MIN, RHAT_MAX, converged, convergence
from bench_iteration import bench_commit

from hawkes_cli.errors import StorageError
from hawkes_cli.rundir import RunDir
from hawkes_cli.runner.converged import read_record
from hawkes_cli.storage import read_chain
from hawkes_cli.vocab import PARAM_NAMES

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CHAINS = 4
STAGES = ("hhs", "prep", "local", "diagnose", "gof", "report")
#: Table 2 of the paper: Manhattan, Hancock County (Maine), Los Angeles.
COUNTIES = ("36061", "23009", "06037")
#: Where an iteration's seconds go, by the innermost frame of ours (first match wins): the
#: categories of the issue, matched against py-spy's collapsed stacks.
SPLIT = (
    ("commit", ("hawkes_cli/storage/", "atomic.py", "commit (hawkes_cli/runner/loop.py")),
    ("location redraw", ("resample.py", "hawkes_cli/geo/", "hawkes_cli/counties/")),
    ("index build", ("grid.py", "grid_upload.py", "draw_index.py", "ahead.py")),
    ("background pass", ("background",)),
    (
        "trigger kernel",
        ("truncated.py", "opencl.py", "points.py", "device.py", "launch.py", "rowcheck.py"),
    ),
)


# ----------------------------------------------------------------------------------- helpers
def timed(cmd: list[str], log_path: Path, **popen) -> dict:
    """Run ``cmd`` under GNU time; wall seconds, peak RSS (GiB) and exit code."""
    time_file = log_path.with_suffix(".time")
    full = ["/usr/bin/time", "-f", "%e %M", "-o", str(time_file), *cmd]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(full, stdout=log, stderr=subprocess.STDOUT, **popen)
        rc = proc.wait()
    return {"cmd": " ".join(cmd), "rc": rc} | read_time(time_file)


def read_time(path: Path) -> dict:
    try:
        wall, rss_kb = path.read_text().split()[-2:]
        return {"wall_s": float(wall), "peak_gib": int(rss_kb) / 2**20}
    except (OSError, ValueError):
        return {}


def load_stages(work: Path) -> dict:
    path = work / "stages.json"
    return json.loads(path.read_text()) if path.exists() else {}


def save_stage(work: Path, name: str, result: dict) -> None:
    stages = load_stages(work)
    stages[name] = result
    tmp = work / "stages.json.tmp"
    tmp.write_text(json.dumps(stages, indent=1))
    os.replace(tmp, work / "stages.json")
    print(f"[{name}] {json.dumps({k: v for k, v in result.items() if k != 'cmd'})[:300]}")


def hawkes(tool: str) -> str:
    return str(Path(sys.executable).parent / tool)


def post_warmup(rd: RunDir) -> tuple[list[dict[str, np.ndarray]] | None, int]:
    """Every chain's committed post-warm-up draws (None until all have some) and all draws."""
    out, total = [], 0
    for k in range(CHAINS):
        try:
            d = read_chain(rd.chain_path(k)).draws
        except (StorageError, FileNotFoundError, OSError):
            continue
        total += int(d["mu0"].size)
        keep = d["warmup"] == 0
        if keep.any():
            out.append({name: np.asarray(v)[keep] for name, v in d.items()})
    return (out if len(out) == CHAINS else None), total


# ------------------------------------------------------------------------------------ stages
def stage_hhs(args) -> dict:
    path = args.work / "hhs.csv"
    if path.exists():
        return {"path": str(path), "reused": True}
    from bench_prep import write_synthetic

    t0 = time.monotonic()
    info = write_synthetic(path)
    return {"path": str(path), "wall_s": time.monotonic() - t0, "rows": info}


def stage_prep(args) -> dict:
    out = args.work / f"cases-{args.n}.h5"
    out.unlink(missing_ok=True)
    cmd = [
        hawkes("hawkes-prep"),
        "hhs",
        str(args.work / "hhs.csv"),
        "--out",
        str(out),
        "--n",
        str(args.n),
        "--seed",
        "1",
        *(["--continuous"] if args.continuous else []),
    ]
    result = timed(cmd, args.work / "prep.log")
    if result["rc"]:
        raise SystemExit(f"prep failed: see {args.work / 'prep.log'}")
    return result | {"events": str(out)}


def mission_config(args) -> Path:
    """The shipped covid config with only the changes a one-machine run needs."""
    cfg = yaml.safe_load((ROOT / "configs" / f"covid-model{args.model}.yaml").read_text())
    cfg["data"]["events"] = str(args.work / f"cases-{args.n}.h5")
    cfg["sampler"].update(iterations=args.iterations, warmup=args.warmup)
    cfg["chains"].update(count=CHAINS, gpus_per_chain=1, chains_per_node=CHAINS)
    cfg["output"].update(run_dir=str(run_dir(args)), commit_every=args.commit_every)
    for item in args.set:
        key, _, value = item.partition("=")
        section, _, name = key.partition(".")
        cfg[section][name] = yaml.safe_load(value)
    path = args.work / f"mission-m{args.model}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def run_dir(args) -> Path:
    return args.work / f"run-m{args.model}"


def chain_pid(run: Path, chain: int) -> int | None:
    """PID of chain ``chain``'s process of run directory ``run`` (``hawkes-run local`` starts
    ``python -m hawkes_cli run -v chain RUN/config.yaml --chain K``)."""
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if f"{run}/config.yaml --chain {chain}" in line and "hawkes_cli" in line:
            return int(line.split()[0])
    return None


def stop_local(proc: subprocess.Popen) -> None:
    """SIGTERM to ``hawkes-run local`` (under GNU time): it passes it on to the chains, which
    commit and exit; GNU time stays to write the peak memory."""
    out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout
    for pid in out.split():
        os.kill(int(pid), signal.SIGTERM)


def start_profile(args, pid: int) -> subprocess.Popen | None:
    spy = shutil.which("py-spy") or hawkes("py-spy")
    if not Path(spy).exists():
        print("[local] py-spy not installed: no per-iteration split")
        return None
    out = args.work / f"profile-m{args.model}.txt"
    out.unlink(missing_ok=True)  # never report an earlier run's split
    cmd = [
        spy,
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(round(args.profile)),  # whole seconds: py-spy refuses "180.0"
        "--rate",
        "20",
        "--format",
        "raw",
        "--output",
        str(out),
        "--nonblocking",
        "--idle",  # the chain waits on the OpenCL kernel in native code, GIL released
    ]
    print(f"[local] profiling chain pid {pid} for {args.profile} s")
    with open(out.with_suffix(".log"), "w") as log_file:
        return subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)


def stage_local(args) -> dict:
    config = mission_config(args)
    rd = RunDir(run_dir(args))
    cmd = [hawkes("hawkes-run"), "local", str(config)]
    if args.fresh:
        cmd.append("--overwrite")
    time_file = args.work / f"local-m{args.model}.time"
    poll_log = args.work / f"poll-m{args.model}.jsonl"
    if args.fresh:
        poll_log.unlink(missing_ok=True)
    earlier = earlier_seconds(read_polls(poll_log))  # a resumed run: its launches so far
    t0 = time.monotonic() - earlier
    launched = datetime.now(timezone.utc).isoformat(timespec="seconds")
    with open(args.work / f"local-m{args.model}.log", "w") as log:
        proc = subprocess.Popen(
            ["/usr/bin/time", "-f", "%e %M", "-o", str(time_file), *cmd],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    first = None
    spy = None
    while proc.poll() is None:
        time.sleep(args.poll)
        elapsed = time.monotonic() - t0
        chains, total = post_warmup(rd)
        stats = convergence(chains) if chains else None
        n = stats["_draws_per_chain"]["n"] if stats else 0
        row = {
            "t": round(elapsed, 1),
            "draws_total": total,
            "post_warmup_per_chain": n,
            "load": os.getloadavg()[0],
        }
        if stats:
            row["stats"] = {p: stats[p] for p in PARAM_NAMES}
        with open(poll_log, "a") as f:
            f.write(json.dumps(row) + "\n")
        if spy is None and args.profile and n >= 5:
            pid = chain_pid(run_dir(args), 0)
            spy = (start_profile(args, pid) if pid else None) or False
        if first is None and converged(stats):
            first = {"seconds": elapsed, "draws_per_chain": n, "draws_total": total}
            print(f"[local] converged after {elapsed:.0f} s ({n} post-warm-up draws/chain)")
        worst = (
            (
                max(stats[p]["rhat"] for p in PARAM_NAMES),
                min(min(stats[p]["ess_bulk"], stats[p]["ess_tail"]) for p in PARAM_NAMES),
            )
            if stats
            else None
        )
        print(
            f"[local] {elapsed:7.0f} s  draws {total:6d}  post-warm-up/chain {n:5d}  "
            f"max R-hat / min ESS {worst}",
            flush=True,
        )
        if (first and elapsed - first["seconds"] >= args.after) or elapsed >= args.cap:
            stop_local(proc)
            break
    try:
        proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if spy:
        spy.wait(timeout=60)
    stopped = time.monotonic() - t0
    with open(poll_log, "a") as f:  # where a later launch (a resume) takes the clock up
        f.write(json.dumps({"t": round(stopped, 1), "stopped": True}) + "\n")
    return {
        "cmd": " ".join(cmd),
        "config": str(config),
        "launched": launched,
        "earlier_launches_s": earlier,
        "converged": first,
        "stopped_at_s": stopped,
        "cap_s": args.cap,
        "rc": proc.returncode,
    } | read_time(time_file)


def stage_diagnose(args) -> dict:
    rd = str(run_dir(args))
    county = [a for c in COUNTIES for a in ("--county", c)]
    t = timed([hawkes("hawkes-diagnose"), rd, *county], args.work / f"diagnose-m{args.model}.txt")
    j = timed(
        [hawkes("hawkes-diagnose"), rd, "--json", *county],
        args.work / f"diagnose-m{args.model}.json",
    )
    return {"table": t, "json": j}


def stage_gof(args) -> dict:
    out = args.work / f"gof-m{args.model}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [hawkes("hawkes-diagnose"), str(run_dir(args)), "--gof", str(out)]
    result = timed(cmd, args.work / f"gof-m{args.model}.log")
    gof = out / "gof.json"
    return result | {"dir": str(out), "gof": json.loads(gof.read_text()) if gof.exists() else None}


# ------------------------------------------------------------------------------------ report
def read_polls(path: Path) -> list[dict]:
    """The poll log's rows, ``t`` made seconds since the run's *first* launch.

    A resumed run appends to the log of its earlier launches. Since this script writes a
    ``stopped`` row when ``local`` ends and starts a resumed clock there, ``t`` only grows; a log
    whose clock went back (written before that) is joined the same way: each launch's times are
    moved on by the last time of the launches before it.
    """
    if not path.exists():
        return []
    rows, offset, last = [], 0.0, 0.0
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row["t"] + offset < last:  # the clock went back: a launch before the stop rows
            offset = last
        row["t"] += offset
        last = row["t"]
        rows.append(row)
    return rows


def earlier_seconds(polls: list[dict]) -> float:
    """Wall seconds of the launches a resumed run already had: the last ``stopped`` time."""
    return next((r["t"] for r in reversed(polls) if r.get("stopped")), 0.0)


def profile_split(path: Path) -> dict | None:
    """Shares of chain 0's sampled wall time by :data:`SPLIT` category (py-spy raw stacks)."""
    if not path.exists():
        return None
    counts: Counter = Counter()
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = stack.split(";")
        ours = [f for f in frames if "hawkes_cli" in f]
        label = "host Python (sampler, posterior, other)"
        if not ours:
            label = "outside hawkes_cli (start-up, idle)"
        else:
            for name, keys in SPLIT:
                if any(k in f for f in ours[-3:] for k in keys):
                    label = name
                    break
            if any("hawkes_cli/start/" in f for f in ours):
                label = "fast start"
        counts[label] += int(n)
    total = sum(counts.values())
    return {k: v / total for k, v in counts.most_common()} | {"_samples": total}


def chain_summary(rd: RunDir) -> dict:
    """Per chain: iterations, post-warm-up draws, pair passes/iteration, acceptance."""
    rows = []
    for k in range(CHAINS):
        try:
            chain = read_chain(rd.chain_path(k))
        except (StorageError, FileNotFoundError, OSError):
            continue
        d = chain.draws
        post = d["warmup"] == 0
        state = (chain.checkpoint or {}).get("sampler", {})
        moves = state.get("proposals", [0])[0] if state.get("kind") == "tiered" else 0
        rows.append(
            {
                "chain": k,
                "draws": int(d["mu0"].size),
                "post_warmup": int(post.sum()),
                "pair_passes_per_it": float(np.mean(d["pair_passes"]))
                if "pair_passes" in d
                else None,
                # tiered: an iteration counts as accepted when any of its expensive moves was
                "accept_expensive": float(np.mean(d["accepted"][post])) if post.any() else None,
                # tiered: accepted / proposed expensive moves, the whole chain (warm-up too)
                "accept_per_move": state["accepts"][0] / moves if moves else None,
            }
        )
    return {"chains": rows}


def ess_per_iteration(poll_rows: list[dict]) -> dict | None:
    """Post-warm-up bulk and tail ESS per iteration (all chains) of each parameter, last poll."""
    last = next((r for r in reversed(poll_rows) if "stats" in r), None)
    if last is None:
        return None
    n = CHAINS * last["post_warmup_per_chain"]
    return {
        p: {
            "bulk": last["stats"][p]["ess_bulk"] / n,
            "tail": last["stats"][p]["ess_tail"] / n,
            "rhat": last["stats"][p]["rhat"],
        }
        for p in PARAM_NAMES
    } | {"_iterations": n}


def first_times(polls: list[dict]) -> dict:
    """Seconds from launch of the first poll at which min ESS (bulk and tail) >= ESS_MIN,
    max R-hat <= RHAT_MAX, and both held for all five parameters (None: not within the run)."""
    out: dict = {"ess": None, "rhat": None, "both": None, "draws_per_chain": None}
    for row in polls:
        st = row.get("stats")
        if not st:
            continue
        ess_ok = all(min(st[p]["ess_bulk"], st[p]["ess_tail"]) >= ESS_MIN for p in PARAM_NAMES)
        rhat_ok = all(st[p]["rhat"] <= RHAT_MAX for p in PARAM_NAMES)
        for key, ok in (("ess", ess_ok), ("rhat", rhat_ok), ("both", ess_ok and rhat_ok)):
            if ok and out[key] is None:
                out[key] = row["t"]
                if key == "both":
                    out["draws_per_chain"] = row["post_warmup_per_chain"]
    return out


def report(args) -> dict:
    stages = load_stages(args.work)
    polls = [r for r in read_polls(args.work / f"poll-m{args.model}.jsonl") if "draws_total" in r]
    stages = {
        name: stages[key]
        for name in ("hhs", "prep", "local", "diagnose", "gof")
        if (key := name if name in ("hhs", "prep") else f"{name}-m{args.model}") in stages
    }
    local = stages.get("local", {})
    # seconds per iteration over the run (4 chains sharing the machine): from the poll log
    rate = None
    if len(polls) >= 2:
        a, b = polls[len(polls) // 4], polls[-1]
        if b["draws_total"] > a["draws_total"]:
            rate = (b["t"] - a["t"]) / ((b["draws_total"] - a["draws_total"]) / CHAINS)
    out = {
        "meta": {
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()} {os.cpu_count()} cores",
            "n": args.n,
            "model": args.model,
            "chains": CHAINS,
            "warmup": args.warmup,
            "set": args.set,
            "continuous": args.continuous,
            "targets": {"rhat_max": RHAT_MAX, "ess_min": ESS_MIN},
            "commit": bench_commit(),
        },
        "stages": stages,
        "seconds_per_iteration_per_chain": rate,
        "ess_per_iteration": ess_per_iteration(polls),
        "first_times_s": first_times(polls),
        "split": profile_split(args.work / f"profile-m{args.model}.txt"),
        "run": chain_summary(RunDir(run_dir(args))),
        "polls": polls[:: max(1, len(polls) // 200)],
        "self_stop": self_stop(RunDir(run_dir(args)), local),
    }
    if local.get("converged") is None and rate and out["ess_per_iteration"]:
        worst = min(
            min(v["bulk"], v["tail"])
            for k, v in out["ess_per_iteration"].items()
            if not k.startswith("_")
        )
        per_chain = ESS_MIN / max(worst, 1e-9) / CHAINS
        out["projection"] = {
            "label": "PROJECTION of the ESS target alone (R-hat cannot be projected) from "
            "measured rates, not a measured convergence",
            "post_warmup_iterations_per_chain_needed": per_chain,
            "seconds_from_launch": (args.warmup + per_chain) * rate
            + (polls[0]["t"] if polls else 0.0),
        }
    return out


def self_stop(rd: RunDir, local: dict) -> dict | None:
    """The run's ``chains/converged.json`` (``sampler.stop_when: converged``), with the
    second on the run's clock when a chain found it; None without one."""
    record = read_record(rd)
    if record is None:
        return None
    out = record.to_json()
    if local.get("launched"):
        found = datetime.fromisoformat(record.at) - datetime.fromisoformat(local["launched"])
        out["found_at_s"] = found.total_seconds() + float(local.get("earlier_launches_s") or 0)
    return out


def text(r: dict) -> str:
    s, m = r["stages"], r["meta"]
    lines = [
        f"# bench_mission N={m['n']} model {m['model']}, {m['chains']} chains, warm-up "
        f"{m['warmup']}, {m['machine']}, commit {m['commit']}, {m['date']}"
        + (", continuous times" if m.get("continuous") else "")
        + "".join(f", {item}" for item in m.get("set", []))
    ]
    for name in ("hhs", "prep", "local", "diagnose", "gof"):
        st = s.get(name)
        if not st:
            continue
        if name == "diagnose":
            st = st.get("table", {})
        earlier = st.get("earlier_launches_s") if name == "local" else None
        lines.append(
            f"{name:<9} wall {st.get('wall_s', float('nan')):9.1f} s   peak "
            f"{st.get('peak_gib', float('nan')):6.2f} GiB"
            + (f"   (a resumed run: + {earlier:.1f} s of earlier launches)" if earlier else "")
        )
    # from the polls, on the run's clock (earlier launches of a resumed run included)
    ft = r.get("first_times_s") or {}
    lines.append(
        f"converged (R-hat <= {RHAT_MAX}, bulk and tail ESS >= {ESS_MIN:.0f}, all five): "
        + (
            f"{ft['both']:.0f} s after the first launch, "
            f"{ft['draws_per_chain']} post-warm-up draws/chain"
            if ft.get("both") is not None
            else "NOT within the run"
        )
    )
    when = {
        k: "not within the run" if ft.get(k) is None else f"{ft[k]:.0f} s" for k in ("ess", "rhat")
    }
    stop = s.get("local", {}).get("stopped_at_s", float("nan"))
    lines.append(
        f"  first poll with min ESS >= {ESS_MIN:.0f}: {when.get('ess')}; with max R-hat <= "
        f"{RHAT_MAX}: {when.get('rhat')} (the run stopped at {stop:.0f} s)"
    )
    if r.get("self_stop"):
        c = r["self_stop"]
        lines.append(
            f"chains ended themselves (sampler.stop_when: converged): chain {c['chain']} found "
            f"the run converged at {c.get('found_at_s', float('nan')):.0f} s, "
            f"{c['common_draws']} post-warm-up draws/chain, largest R-hat "
            f"{c['largest_rhat']:.4f}, smallest ESS {c['smallest_ess']:.0f}; local ended at "
            f"{stop:.0f} s"
        )
    if r.get("projection"):
        p = r["projection"]
        lines.append(
            f"{p['label']}: {p['seconds_from_launch']:.0f} s from launch "
            f"({p['post_warmup_iterations_per_chain_needed']:.0f} post-warm-up it/chain)"
        )
    if r["seconds_per_iteration_per_chain"]:
        lines.append(
            f"seconds per iteration per chain (4 chains at once): "
            f"{r['seconds_per_iteration_per_chain']:.2f}"
        )
    if r["ess_per_iteration"]:
        e = r["ess_per_iteration"]
        lines.append(f"post-warm-up ESS per iteration (bulk/tail, R-hat) over {e['_iterations']}:")
        lines += [
            f"  {p:<8} {e[p]['bulk']:.3f} / {e[p]['tail']:.3f}   R-hat {e[p]['rhat']:.3f}"
            for p in PARAM_NAMES
        ]
    if r["split"]:
        lines.append(f"where chain 0's seconds went (py-spy, {r['split']['_samples']} samples):")
        lines += [f"  {k:<42} {v:6.1%}" for k, v in r["split"].items() if not k.startswith("_")]
    for c in r["run"]["chains"]:
        lines.append(
            f"  chain {c['chain']}: {c['draws']} draws ({c['post_warmup']} after warm-up), "
            f"{c['pair_passes_per_it']:.2f} pair passes/it, iterations with an expensive move "
            "accepted "
            + ("-" if c["accept_expensive"] is None else f"{c['accept_expensive']:.3f}")
            + ", per expensive move "
            + ("-" if c.get("accept_per_move") is None else f"{c['accept_per_move']:.3f}")
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000, help="cases (hawkes-prep hhs --n)")
    ap.add_argument("--model", type=int, choices=(1, 2), default=1)
    ap.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES))
    ap.add_argument("--work", type=Path, default=Path("/tmp/hawkes-mission"))
    ap.add_argument("--iterations", type=int, default=20_000, help="cap per chain")
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument(
        "--cap",
        type=float,
        default=3 * 3600.0,
        help="wall seconds for local, on the run's clock (a resumed run's earlier launches count)",
    )
    ap.add_argument("--after", type=float, default=0.0, help="seconds to go on after convergence")
    ap.add_argument("--poll", type=float, default=60.0)
    ap.add_argument("--profile", type=float, default=180.0, help="py-spy seconds (0: none)")
    ap.add_argument("--commit-every", type=int, default=25)
    ap.add_argument("--fresh", action="store_true", help="local: --overwrite (start afresh)")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="a further config change (YAML value; repeatable), e.g. sampler.n_expensive=3",
    )
    ap.add_argument(
        "--continuous",
        action="store_true",
        help="prep: hawkes-prep hhs --continuous (a time inside the day, so inside the week)",
    )
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    for name in args.stages:
        if name == "report":
            continue
        key = name if name in ("hhs", "prep") else f"{name}-m{args.model}"
        save_stage(args.work, key, globals()[f"stage_{name}"](args))
    if "report" in args.stages:
        r = report(args)
        out = args.out or HERE / "results" / f"mission-m{args.model}-{args.n}"
        out.with_suffix(".json").write_text(json.dumps(r, indent=1))
        out.with_suffix(".txt").write_text(text(r) + "\n")
        print(text(r))


if __name__ == "__main__":
    main()
