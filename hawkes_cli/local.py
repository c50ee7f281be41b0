"""Run all chains of a config on this machine: one process per chain (``mpiexec`` per chain
when ``gpus_per_chain > 1``), progress from the chains' progress files, resume when run again.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .config import Config
from .errors import HawkesError, ParallelError, StorageError
from .runner import chain_path, progress_path

log = logging.getLogger(__name__)

EXIT_STOPPED = 75  # a chain stopped on request after committing (errors.Interrupted)


def prepare_run_dir(config: Config, *, overwrite: bool = False) -> Path:
    """Create ``run_dir`` and write the resolved config; refuse a different existing config.

    Returns the path of ``RUN_DIR/config.yaml``, which chain processes read.
    """
    run_dir = config.output.run_dir
    (run_dir / "chains").mkdir(parents=True, exist_ok=True)
    (run_dir / "logs").mkdir(exist_ok=True)
    target = run_dir / "config.yaml"
    text = f"# sha256: {config.sha256}\n" + config.to_yaml()
    if target.exists() and not overwrite:
        from .config import load_config

        old = load_config(target)
        if old.sha256 != config.sha256:
            raise StorageError(
                f"{run_dir} holds a run of a different config ({target}); choose another "
                "output.run_dir, or pass --overwrite to start that run afresh"
            )
        return target
    tmp = target.with_name(".config.yaml.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, target)
    return target


def chain_finished(config: Config, chain_id: int) -> bool:
    """True when the chain's committed checkpoint says it is complete."""
    from .storage import read_sidecar

    side = read_sidecar(chain_path(config.output.run_dir, chain_id))
    return bool(side and side.get("checkpoint", {}).get("finished"))


def _mpiexec() -> str:
    here = Path(sys.executable).with_name("mpiexec")
    found = str(here) if here.exists() else shutil.which("mpiexec")
    if not found:
        raise ParallelError(
            "gpus_per_chain > 1 needs mpiexec on PATH (pip install mpich mpi4py, or load the "
            "site's MPI module)"
        )
    return found


@dataclass
class _Child:
    chain_id: int
    proc: subprocess.Popen
    log_file: Path


def chain_command(config_path: Path, chain_id: int, ranks: int, overwrite: bool) -> list[str]:
    """The command line of one chain process (under mpiexec when ``ranks > 1``)."""
    # -v: the chain's log (RUN_DIR/logs) gets its device, rows and progress lines
    cmd = [sys.executable, "-m", "hawkes_cli", "run", "-v", "chain", str(config_path)]
    cmd += ["--chain", str(chain_id)]
    if overwrite:
        cmd.append("--overwrite")
    if ranks > 1:
        cmd = [_mpiexec(), "-n", str(ranks), *cmd]
    return cmd


def run_local(
    config: Config,
    *,
    jobs: int | None = None,
    overwrite: bool = False,
    report: Callable[[list[dict]], None] | None = None,
    report_every: float = 5.0,
) -> dict[int, int]:
    """Run every unfinished chain as a local process; return exit codes by chain.

    Parameters
    ----------
    config
        The run's configuration.
    jobs
        Chains at once (default: all). Each gets ``cores / jobs`` PoCL compute units.
    overwrite
        Start every chain afresh.
    report
        Called every ``report_every`` seconds with the chains' progress records.
    """
    config_path = prepare_run_dir(config, overwrite=overwrite)
    pending = [k for k in range(config.chains.count) if overwrite or not chain_finished(config, k)]
    done = {k: 0 for k in range(config.chains.count) if k not in pending}
    if not pending:
        log.info("all %d chains are finished", config.chains.count)
        return done
    ranks = config.chains.gpus_per_chain
    jobs = max(1, min(jobs or len(pending), len(pending)))
    cores = os.cpu_count() or 1
    env = dict(os.environ)
    env.setdefault("POCL_CPU_MAX_CU_NUM", str(max(1, cores // (jobs * ranks))))
    queue = list(pending)
    running: list[_Child] = []
    stopping = False

    def forward(signum, _frame):  # stop children: they commit and exit
        nonlocal stopping
        stopping = True
        for child in running:
            if child.proc.poll() is None:
                child.proc.send_signal(signal.SIGTERM)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    last_report = 0.0
    try:
        while queue or running:
            while queue and len(running) < jobs and not stopping:
                k = queue.pop(0)
                log_file = config.output.run_dir / "logs" / f"chain-{k:02d}.log"
                with open(log_file, "ab") as fh:
                    proc = subprocess.Popen(
                        chain_command(config_path, k, ranks, overwrite),
                        stdout=fh,
                        stderr=subprocess.STDOUT,
                        env=env,
                        start_new_session=True,  # our signal forwarding decides, not the tty
                    )
                running.append(_Child(k, proc, log_file))
            time.sleep(0.2)
            for child in list(running):
                rc = child.proc.poll()
                if rc is not None:
                    running.remove(child)
                    done[child.chain_id] = rc
                    if rc not in (0, EXIT_STOPPED):
                        log.error(
                            "chain %d failed (exit %d); see %s", child.chain_id, rc, child.log_file
                        )
            now = time.monotonic()
            if report and (now - last_report >= report_every or not (queue or running)):
                last_report = now
                report(read_progress(config))
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    if stopping:
        for k in queue:
            done[k] = EXIT_STOPPED
    return done


def read_progress(config: Config) -> list[dict]:
    """The latest progress record of every chain (status 'pending' where none yet)."""
    out = []
    for k in range(config.chains.count):
        path = progress_path(config.output.run_dir, k)
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            out.append({"chain": k, "status": "pending", "iteration": 0,
                        "iterations": config.sampler.iterations})  # fmt: skip
    return out


def summarize(codes: dict[int, int]) -> None:
    """Raise if any chain failed (stopped chains are not failures)."""
    failed = sorted(k for k, rc in codes.items() if rc not in (0, EXIT_STOPPED))
    if failed:
        raise HawkesError(
            f"{len(failed)} chain(s) failed: {', '.join(map(str, failed))}; see the logs in "
            "RUN_DIR/logs and run again to resume"
        )
