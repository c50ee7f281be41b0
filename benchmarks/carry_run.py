"""Carry a long ``bench_mission.py`` run from one session's machine to the next.

A 1M-event MCMC run takes longer than one working session on 2 cores, and a session's machine
does not outlive it. What a run needs to resume is small (the config, each chain's HDF5 draws
and checkpoint, the shared fast start, the mission's clock: a few hundred KiB), while the events
file (37 MB) and the synthetic HHS file (800 MB) are remade bit for bit from their seeds. So:

``save WORK NAME -- MISSION_ARGS...``
    after the run has stopped cleanly (no chain holds a writer lock), copy those files from the
    mission work folder ``WORK`` into ``benchmarks/carried/NAME/`` (tracked), with a manifest that
    records the ``bench_mission.py`` arguments and the events' content sha256.
``restore NAME``
    remake the HHS file and the events into the manifest's work folder (``bench_mission.py
    --stages hhs prep`` with the saved arguments), refuse unless the events' content sha256 is
    the saved one (the chains would refuse them anyway: each chain file records it), and put the
    run's files back. Then ``bench_mission.py`` with the same arguments and ``--stages local``
    (a larger ``--cap``: the clock counts the earlier launches) resumes every chain from its
    last commit, as after any stop.

    python benchmarks/carry_run.py save /work/m1nexp1 m1-1000000-nexp1 -- --n 1000000 \\
        --model 1 --continuous --work /work/m1nexp1 --iterations 3000 --warmup 60 \\
        --commit-every 10 --set sampler.n_expensive=1 --set sampler.stop_when=converged
    python benchmarks/carry_run.py restore m1-1000000-nexp1
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
RUNS = HERE / "carried"
from bench_iteration import bench_commit  # noqa: E402

from hawkes_cli.data.files import load_events  # noqa: E402
from hawkes_cli.storage import writer_holder  # noqa: E402

#: What a resume needs, relative to the mission work folder (``run-m*`` is the run directory).
KEEP = (
    "stages.json",
    "poll-m*.jsonl",
    "mission-m*.yaml",
    "run-m*/config.yaml",
    "run-m*/chains/chain-*.h5",
    "run-m*/chains/chain-*.ckpt.json",
    "run-m*/chains/start.json",
    "run-m*/chains/converged.json",
)


def digest(path: Path) -> str:
    """The events' content sha256, as each chain file records it (``EventData.digest``: the
    file's bytes differ between remakes, e.g. in the source path it notes)."""
    return load_events(path).digest()


def mission_value(args: list[str], flag: str) -> str:
    """The value after ``flag`` in the ``bench_mission.py`` arguments."""
    try:
        return args[args.index(flag) + 1]
    except (ValueError, IndexError):
        raise SystemExit(f"the mission arguments need {flag}") from None


def save(work: Path, name: str, mission: list[str]) -> Path:
    """Copy the run's resume files from ``work`` into ``benchmarks/carried/name``."""
    if Path(mission_value(mission, "--work")).resolve() != work.resolve():
        raise SystemExit(f"--work in the mission arguments is not {work}")
    live = [
        f"{p.name} ({who})"
        for p in work.glob("run-m*/chains/chain-*.h5")
        if (who := writer_holder(p)) is not None
    ]
    if live:
        raise SystemExit(f"chains are being written: {', '.join(live)}; stop the run first")
    dest = RUNS / name
    if dest.exists():
        shutil.rmtree(dest)
    files = sorted({p for pattern in KEEP for p in work.glob(pattern) if p.is_file()})
    for p in files:
        target = dest / p.relative_to(work)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(p, target)
    n = mission_value(mission, "--n")
    events = work / f"cases-{n}.h5"
    manifest = {
        "saved": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "work": str(work),
        "mission_args": mission,
        "events": events.name,
        "events_digest": digest(events),
        "files": [str(p.relative_to(work)) for p in files],
        "commit": bench_commit(),
    }
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    print(f"saved {len(files)} files ({size / 1024:.0f} KiB) into {dest}")
    return dest


def restore(name: str) -> Path:
    """Remake the events into the manifest's work folder and put the run's files back."""
    src = RUNS / name
    manifest = json.loads((src / "manifest.json").read_text())
    work = Path(manifest["work"])
    mission = list(manifest["mission_args"])
    events = work / manifest["events"]
    if not events.exists() or digest(events) != manifest["events_digest"]:
        cmd = [sys.executable, str(HERE / "bench_mission.py"), *mission]
        cmd += ["--stages", "hhs", "prep"]
        print("remaking the events:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        got = digest(events)
        if got != manifest["events_digest"]:
            raise SystemExit(
                f"{events} remade with content sha256 {got}, the run's is "
                f"{manifest['events_digest']}: the chains would refuse it (the prep or its input "
                "changed since the save)"
            )
    for rel in manifest["files"]:
        target = work / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel == "stages.json" and target.exists():  # the remake just wrote its own stages
            merged = json.loads((src / rel).read_text()) | json.loads(target.read_text())
            target.write_text(json.dumps(merged, indent=1))
            continue
        shutil.copy2(src / rel, target)
    print(f"restored {len(manifest['files'])} files into {work}; resume with:")
    print("  python benchmarks/bench_mission.py " + " ".join(mission) + " --stages local --cap S")
    return work


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save")
    s.add_argument("work", type=Path)
    s.add_argument("name")
    s.add_argument("mission", nargs=argparse.REMAINDER, help="-- then bench_mission.py's args")
    r = sub.add_parser("restore")
    r.add_argument("name")
    args = ap.parse_args()
    if args.cmd == "save":
        mission = args.mission[1:] if args.mission[:1] == ["--"] else args.mission
        save(args.work, args.name, mission)
    else:
        restore(args.name)


if __name__ == "__main__":
    main()
