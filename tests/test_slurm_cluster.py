"""Real jobs on the local Slurm cluster (``bash slurm/local-cluster.sh up``; tier ``slurm``).

A run of 4 chains as 2 array tasks x 2 chains x 2 MPI ranks on simulated data must give the
draws of the same config run with ``hawkes-run local``: parameters exactly, log-likelihoods to
1e-12 (the float64 reduction over ranks may add in another order). The same holds when Slurm
requeues the job mid-run (``scontrol requeue``: SIGTERM, commit, restart, resume) and when the
job requeues itself after the time-limit warning (USR1) until its requeue budget is spent and the
run is resubmitted. The run directory's name has spaces and quotes, so these jobs also check
the quoting of the script against the real sbatch.

Slurm delays a requeued job by two minutes (BeginTime); the tests release it at once with
``scontrol update StartTime=now``. Every wait is bounded.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from hawkes_cli import slurm
from hawkes_cli.config import load_config
from hawkes_cli.data import save_events
from hawkes_cli.model import Params
from hawkes_cli.rundir import RunDir
from hawkes_cli.simulate import DensityGrid, simulate
from hawkes_cli.storage import read_chain, read_sidecar
from tests.conftest import clean_env, write_config_file

pytestmark = [pytest.mark.slurm, pytest.mark.opencl, pytest.mark.mpi]

TRUTH = Params(mu0=0.5, tau_t=40.0, xi0=0.5, sigma_x=0.1, sigma_t=4.0)
BOUNDS = (0.0, 20.0, 0.0, 20.0)
ITERATIONS = 3000  # long enough that no chain ends between a signal and its delivery
TIMEOUT = 180  # seconds for any one wait on the cluster
BIN = Path(sys.executable).parent


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hawkes_cli", "run", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=clean_env(),
    )


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("slurm") / "runs with 'quotes' \"and\" spaces"
    path.mkdir()
    return path


@pytest.fixture(scope="module")
def events(root) -> Path:
    grid = DensityGrid.log_uniform(BOUNDS, 8, 8, 1.0, 100.0, seed=3)
    data = simulate(TRUTH, model=1, n_background=400, t_end=200.0, bounds=BOUNDS, seed=5, grid=grid)
    path = root / "events.h5"
    save_events(data, path)
    return path


def write_config(root: Path, events: Path, name: str, **over) -> Path:
    cfg = {
        "data": {"events": str(events)},
        "model": {"kind": 1},
        "sampler": {
            "kind": "univariate",
            "iterations": ITERATIONS,
            "warmup": 100,
            "seed": 7,
            "resample_every": 40,
        },
        "chains": {"count": 4, "gpus_per_chain": 2, "chains_per_node": 2, "gpus_per_node": 4},
        "engine": {"backend": "opencl", "precision": "float64", "tolerance": 0.0},
        "output": {"run_dir": str(root / name), "commit_every": 20},
        "slurm": {"time": "00:10:00", "signal_seconds": 60, "requeue_budget": 3},
    }
    return write_config_file(root / f"{name}.yaml", cfg, **over)


@pytest.fixture(scope="module")
def reference(root, events) -> dict[int, dict[str, np.ndarray]]:
    """The draws of `hawkes-run local` (each chain under mpiexec -n 2)."""
    path = write_config(root, events, "local")
    proc = cli("local", path)
    assert proc.returncode == 0, proc.stderr
    run_dir = load_config(path).output.run_dir
    return {c: read_chain(RunDir(run_dir).chain_path(c)).draws for c in range(4)}


def assert_same_draws(run_dir: Path, reference, chains=range(4)) -> None:
    for c in chains:
        got, want = read_chain(RunDir(run_dir).chain_path(c)).draws, reference[c]
        assert got["iteration"].tolist() == list(range(ITERATIONS)), f"chain {c}"
        for key in want:
            if key == "loglik":
                np.testing.assert_allclose(got[key], want[key], rtol=1e-12, err_msg=f"{c}")
            else:
                np.testing.assert_array_equal(got[key], want[key], err_msg=f"chain {c} {key}")


def submit(path: Path) -> str:
    proc = cli("submit", path)
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"submitted job (\d+)", proc.stdout)
    assert m, proc.stdout
    return m.group(1)


def squeue(job: str) -> list[tuple[str, str, str, str]]:
    """``(array task, raw job id, state, reason)`` of each task of ``job``."""
    out = subprocess.run(
        ["squeue", "--array", "-h", "-j", job, "-o", "%i|%A|%T|%r"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    return [tuple(line.split("|")) for line in out.splitlines() if line.strip()]


def _stepd_alive(raw_job: str) -> bool:
    """A slurmstepd of the job's previous run is still cleaning up (this machine only)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes().startswith(f"slurmstepd: [{raw_job}.".encode()):
                return True
        except OSError:
            continue
    return False


def release_requeued(job: str) -> None:
    """Start a requeued job now instead of after Slurm's two-minute BeginTime delay.

    Only once the previous run's step daemons are gone: Slurm's delay exists so that a new
    step does not meet the old one's clean-up (which would remove the new step's socket).
    """
    for _, raw, state, reason in squeue(job):
        if state == "PENDING" and reason == "BeginTime" and not _stepd_alive(raw):
            subprocess.run(
                ["scontrol", "update", f"jobid={raw}", "StartTime=now"],
                capture_output=True,
                timeout=30,
            )


def wait_for(what: str, predicate, *, job: str | None = None, timeout: float = TIMEOUT):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        value = predicate()
        if value:
            return value
        if job is not None:
            release_requeued(job)
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def draws(run_dir: Path, c: int) -> int:
    return int((read_sidecar(RunDir(run_dir).chain_path(c)) or {}).get("draws", 0))


def done(run_dir: Path, chains=range(4)) -> bool:
    finished = all(
        ((read_sidecar(RunDir(run_dir).chain_path(c)) or {}).get("checkpoint") or {}).get(
            "finished"
        )
        for c in chains
    )
    return finished and not slurm.active_jobs(run_dir)


def node_events(run_dir: Path, node: int) -> list[dict]:
    return RunDir(run_dir).read_node_state(node)["events"]


def logs(run_dir: Path) -> str:
    return "\n".join(p.read_text() for p in sorted((run_dir / "slurm" / "logs").iterdir()))


# --------------------------------------------------------------------------- tests


def test_quoted_values_reach_slurm_verbatim(root, events):
    """A job of a nasty run directory: sbatch, the log file and the job's argv get every value
    as written (the job fails at once: that run directory has no config.yaml)."""
    nasty = root / 'it\'s a "run" $(touch pwned) ; # 50%'
    path = write_config(
        root,
        events,
        "q",
        output__run_dir=str(nasty),
        slurm__account="lab; rm -rf /",
        slurm__extra={"comment": "say \"hi\" # not a comment 'q'"},
    )
    cfg = load_config(path)
    script = root / "nasty.sbatch"
    script.write_text(
        slurm.render_script(cfg, slurm.make_plan(cfg), config_path=nasty / "config.yaml")
    )
    (nasty / "slurm" / "logs").mkdir(parents=True)
    proc = subprocess.run(
        ["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=60, cwd=root
    )
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip().split(";")[0]
    wait_for(
        "the job to end",
        lambda: not any(s in ("PENDING", "RUNNING", "COMPLETING") for _, _, s, _ in squeue(job)),
    )
    show = subprocess.run(
        ["scontrol", "show", "job", job], capture_output=True, text=True, timeout=30
    ).stdout
    assert "Account=lab; rm -rf / " in show
    assert "Comment=say \"hi\" # not a comment 'q'" in show
    assert "Requeue=1" in show and "NumTasks=4" in show
    out = sorted((nasty / "slurm" / "logs").iterdir())
    assert [p.name for p in out] == [f"{job}_0.out", f"{job}_1.out"]
    assert f"error: {nasty}/config.yaml: config file not found" in out[0].read_text()
    assert not (root / "pwned").exists() and not (nasty / "pwned").exists()


def test_array_job_gives_the_local_draws(root, events, reference):
    path = write_config(root, events, "array")
    run_dir = load_config(path).output.run_dir
    job = submit(path)
    assert (run_dir / "config.yaml").is_file() and (run_dir / "slurm" / "job.sbatch").is_file()
    wait_for("the run to finish", lambda: done(run_dir), job=job)
    assert_same_draws(run_dir, reference)
    text = logs(run_dir)
    # each node: 4 ranks on the shared PoCL CPU device, each with its own gres GPU id
    assert text.count("share the CPU device") == 2
    for node in (0, 1):
        ids = re.findall(rf"node {node}: rank \d .*\(CUDA_VISIBLE_DEVICES id (\d)\)", text)
        assert len(ids) == 4 and len(set(ids)) == 4, ids
        assert [e["event"] for e in node_events(run_dir, node)] == ["start", "finished"]
    status = cli("status", run_dir)
    assert status.returncode == 0, status.stderr
    rows = [line.split() for line in status.stdout.splitlines()[1:5]]
    for c, row in enumerate(rows):
        assert row[:5] == [
            str(c),
            str(c // 2),
            f"{ITERATIONS}/{ITERATIONS}",
            str(ITERATIONS),
            "0",
        ], row
        assert row[6] == f"{job}_{c // 2}" and row[7] == "COMPLETED", row
        assert row[8:] == ["finished"], row  # the chain's own phase, last
    assert "4/4 chains finished" in status.stdout
    again = cli("submit", path)
    assert again.returncode == 0 and "nothing submitted" in again.stdout, again.stderr
    assert len(RunDir(run_dir).read_jobs()) == 1


def test_requeue_mid_run_loses_and_repeats_no_draw(root, events, reference):
    path = write_config(root, events, "requeue")
    run_dir = load_config(path).output.run_dir
    job = submit(path)
    wait_for("some draws", lambda: max(draws(run_dir, c) for c in range(4)) >= 40)
    subprocess.run(["scontrol", "requeue", job], check=True, timeout=30)
    wait_for("the job to stop", lambda: all(s != "RUNNING" for _, _, s, _ in squeue(job)))
    at_requeue = [draws(run_dir, c) for c in range(4)]
    assert any(0 < n < ITERATIONS for n in at_requeue), at_requeue
    wait_for("the requeued run to finish", lambda: done(run_dir), job=job)
    assert_same_draws(run_dir, reference)
    text = logs(run_dir)
    assert "DUE TO JOB REQUEUE" in text and "stopped at iteration" in text
    restarted = [
        n for n in (0, 1) if any(int(e.get("restart", 0)) > 0 for e in node_events(run_dir, n))
    ]
    assert restarted, "no node restarted"
    rows = json.loads(cli("status", run_dir, "--json").stdout)
    assert all(r["finished"] and r["draws"] == ITERATIONS for r in rows)
    assert all(r["requeues"] == 1 for r in rows if r["node"] in restarted)


def test_warning_signal_requeues_until_budget_then_resubmit(root, events, reference):
    path = write_config(root, events, "warn", chains__count=2, slurm__requeue_budget=1)
    run_dir = load_config(path).output.run_dir
    job = submit(path)
    task = f"{job}_0"

    def usr1_after(n: int) -> None:
        wait_for(f"{n} draws", lambda: draws(run_dir, 0) >= n, job=job)
        subprocess.run(["scancel", "--batch", "--signal=USR1", task], check=True, timeout=30)

    usr1_after(20)  # the time-limit warning: stop, commit, requeue itself (restart 0 < 1)
    wait_for(
        "the self-requeue", lambda: any(e["event"] == "requeue" for e in node_events(run_dir, 0))
    )
    first = draws(run_dir, 0)
    assert 20 <= first < ITERATIONS
    usr1_after(first + 20)  # after the restart: the budget (1) is spent now
    wait_for(
        "the job to end",
        lambda: (
            any(e["event"] == "budget-spent" for e in node_events(run_dir, 0))
            and not slurm.active_jobs(run_dir)
        ),
    )
    assert [e["event"] for e in node_events(run_dir, 0)] == [
        "start",
        "requeue",
        "start",
        "budget-spent",
    ]
    for c in (0, 1):
        side = read_sidecar(RunDir(run_dir).chain_path(c))
        assert not side["checkpoint"]["finished"]
        assert side["draws"] == side["checkpoint"]["iteration"]  # committed up to the stop
    job2 = submit(path)  # resubmit: continue both chains from their last commit
    assert job2 != job
    wait_for("the resubmitted run to finish", lambda: done(run_dir, (0, 1)), job=job2)
    assert_same_draws(run_dir, reference, chains=(0, 1))
    rows = json.loads(cli("status", run_dir, "--json").stdout)
    assert [(r["requeues"], r["job"], r["finished"]) for r in rows] == [
        (1, f"{job2}_0", True),
        (1, f"{job2}_0", True),
    ]


def test_cancel_stops_the_run_at_a_commit(root, events):
    path = write_config(root, events, "cancel", sampler__iterations=100_000)
    run_dir = load_config(path).output.run_dir
    job = submit(path)
    wait_for("some draws", lambda: min(draws(run_dir, c) for c in range(4)) > 0)
    again = cli("submit", path)
    assert again.returncode == 1 and f"has job(s) {job} pending or running" in again.stderr
    proc = cli("cancel", run_dir)
    assert proc.returncode == 0 and proc.stdout.strip() == f"cancelled {job}", proc.stderr
    wait_for("the jobs to end", lambda: not slurm.active_jobs(run_dir))
    for c in range(4):  # SIGTERM: every chain stopped at an iteration boundary and committed
        side = read_sidecar(RunDir(run_dir).chain_path(c))
        assert 0 < side["draws"] == side["checkpoint"]["iteration"] < 100_000
    rows = json.loads(cli("status", run_dir, "--json").stdout)
    assert {r["state"] for r in rows} == {"CANCELLED"}
    assert cli("cancel", run_dir).stdout.strip() == "no pending or running job"
