"""Fuzz: damaged chain files and checkpoints, and signals to ``hawkes-run local``.

Seeded, generated damage to a tiny run (two chains of the reference engine on ~100 events):
truncation at random offsets, flipped byte ranges, edited or deleted commit-record members,
deleted checkpoints, swapped and foreign files, a flipped committed value, a copied chain file;
and SIGKILL / SIGTERM / SIGHUP / SIGINT of ``hawkes-run local`` at random moments.

Each case runs in a forked child (files) or a subprocess (signals) under a timeout and is
classified as

* ``ok``: the operation succeeded and its result equals the undamaged run's (a resume gives the
  draws of an uninterrupted run, bit for bit; a read gives the committed draws);
* ``clean``: a :class:`~hawkes_cli.errors.HawkesError` with a one-line message, and the chain
  files and checkpoints left byte for byte as they were;
* ``traceback``: any other exception;
* ``wrong``: success with a result that differs from the undamaged run's, or files changed
  behind a refusal;
* ``hang``: the child did not end within the timeout.

Only ``ok`` and ``clean`` pass. ``python tests/test_fuzz_files.py [N]`` prints the counts for N
file cases (default 96) and the signal cases.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from hawkes_cli.config import load_config
from hawkes_cli.data import save_events
from hawkes_cli.errors import HawkesError
from hawkes_cli.model import Params
from hawkes_cli.rundir import RunDir
from hawkes_cli.simulate import DensityGrid, simulate
from hawkes_cli.stop import StopFlag
from hawkes_cli.storage import read_chain, sidecar_path
from tests.conftest import write_config_file

TRUTH = Params(mu0=0.5, tau_t=40.0, xi0=0.5, sigma_x=0.1, sigma_t=4.0)
BOUNDS = (0.0, 20.0, 0.0, 20.0)
#: Seconds a forked file case may take (a tiny resume takes well under one) before it counts
#: as a hang.
CASE_TIMEOUT = float(os.environ.get("HAWKES_FUZZ_TIMEOUT", "20"))
N_FILE_CASES = int(os.environ.get("HAWKES_FUZZ_FILE_CASES", "72"))
#: Seconds a chain may take to commit and exit once its launcher is gone (an orphan would run
#: on for seconds more).
STOP_SECONDS = 2.0
N_SIGNAL_CASES = int(os.environ.get("HAWKES_FUZZ_SIGNAL_CASES", "2"))  # SIGKILL, SIGHUP
DAMAGE = (
    "truncate",
    "flip",
    "record_draws",
    "ckpt_iteration",
    "ckpt_number",
    "ckpt_finished",
    "delete_member",
    "garbage_member",
    "delete_sidecar",
    "swap_files",
    "foreign",
    "flip_value",
    "copy_file",
)


# --------------------------------------------------------------------------- the tiny run


def make_events(folder: Path) -> Path:
    grid = DensityGrid.log_uniform(BOUNDS, 4, 4, 1.0, 100.0, seed=3)
    data = simulate(TRUTH, model=1, n_background=60, t_end=100.0, bounds=BOUNDS, seed=5,
                    grid=grid)  # fmt: skip
    path = folder / "events.h5"
    save_events(data, path)
    return path


def tiny_config(folder: Path, events: Path, name: str, **over) -> Path:
    """Two univariate chains on the reference engine, thin 2, committing every 10 draws."""
    cfg = {
        "data": {"events": str(events)},
        "model": {"kind": 1},
        "sampler": {"kind": "univariate", "iterations": 60, "warmup": 20, "seed": 7,
                    "thin": 2, "initial": {}},
        "chains": {"count": 2},
        "engine": {"backend": "reference"},
        "output": {"run_dir": str(folder / name), "commit_every": 10},
    }  # fmt: skip
    return write_config_file(folder / f"{name}.yaml", cfg, **over)


class StopAfter(StopFlag):
    """A stop flag raised at the boundary after ``n`` iterations (serial chains)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.left = n

    def __bool__(self) -> bool:
        self.left -= 1
        return self.left < 0


def chain_files(run_dir: Path) -> dict[str, bytes]:
    """The bytes of every chain file and checkpoint of a run directory."""
    folder = Path(run_dir) / "chains"
    if not folder.is_dir():
        return {}
    return {
        p.name: p.read_bytes()
        for p in sorted(folder.iterdir())
        if p.is_file() and (p.suffix == ".h5" or p.name.endswith(".ckpt.json"))
    }


def all_draws(run_dir: Path, count: int = 2) -> list[dict[str, np.ndarray]]:
    return [read_chain(RunDir(run_dir).chain_path(k)).draws for k in range(count)]


def same_draws(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(np.array_equal(x[k], y[k], equal_nan=True) for k in x)
        for x, y in zip(a, b, strict=True)
    )


class Fixture:
    """Templates of the tiny run: finished, stopped midway, and another config's finished run."""

    def __init__(self, folder: Path) -> None:
        from hawkes_cli.runner import run_chain

        self.folder = folder
        events = make_events(folder)
        self.config_path = tiny_config(folder, events, "work")
        self.config = load_config(self.config_path)
        self.run_dir = Path(self.config.output.run_dir)
        for k in range(2):
            run_chain(self.config, k)
        self.golden = all_draws(self.run_dir)
        self.templates = {"finished": folder / "t-finished", "mid": folder / "t-mid"}
        shutil.copytree(self.run_dir, self.templates["finished"])
        shutil.rmtree(self.run_dir)
        for k in range(2):
            run_chain(self.config, k, stop=StopAfter(25 + 6 * k))
        shutil.copytree(self.run_dir, self.templates["mid"])
        self.mid = [read_chain(RunDir(self.run_dir).chain_path(k)).draws for k in range(2)]
        other = load_config(tiny_config(folder, events, "other", sampler__seed=8))
        for k in range(2):
            run_chain(other, k)
        self.other_dir = Path(other.output.run_dir)
        shutil.rmtree(self.run_dir)

    def reset(self, state: str) -> None:
        if self.run_dir.exists():
            shutil.rmtree(self.run_dir)
        shutil.copytree(self.templates[state], self.run_dir)


# --------------------------------------------------------------------------- damage


def _edit_record(path: Path, edit, resign: bool = False) -> None:
    """Edit the commit record; ``resign``: make its checksum fit (a record that is
    self-consistent but wrong, as a bug or a swap could leave, reaching the deeper checks)."""
    from hawkes_cli.storage.record import record_digest

    side = sidecar_path(path)
    record = json.loads(side.read_text())
    edit(record)
    if resign and isinstance(record, dict):
        record["record_sha256"] = record_digest(record)
    side.write_text(json.dumps(record))


def damage(fx: Fixture, kind: str, rng: np.random.Generator) -> str:
    """Apply one damage of ``kind`` to the run directory; returns a description."""
    rd = RunDir(fx.run_dir)
    k = int(rng.integers(2))
    path = rd.chain_path(k)
    resign = bool(rng.integers(2))
    edit_record = functools.partial(_edit_record, resign=resign)
    if kind == "truncate":
        size = path.stat().st_size
        at = int(rng.choice([size // 2, 4096, int(rng.integers(0, size))]))
        os.truncate(path, min(at, size - 1))
        return f"chain {k} truncated to {min(at, size - 1)} of {size} bytes"
    if kind == "flip":
        raw = bytearray(path.read_bytes())
        n = int(rng.integers(16, 65))
        at = int(rng.integers(0, len(raw) - n))
        raw[at : at + n] = bytes(b ^ int(rng.integers(1, 256)) for b in raw[at : at + n])
        path.write_bytes(bytes(raw))
        return f"chain {k}: {n} bytes flipped at {at}"
    if kind == "record_draws":
        delta = int(rng.choice([-1, -7, 3, 40, -1000]))
        edit_record(path, lambda r: r.__setitem__("draws", r["draws"] + delta))
        return f"chain {k}: record draws {delta:+d}" + " (re-signed)" * resign
    if kind == "ckpt_iteration":
        delta = int(rng.choice([-7, -2, 4, 100, -1000]))
        edit_record(
            path,
            lambda r: r["checkpoint"].__setitem__(
                "iteration", r["checkpoint"]["iteration"] + delta
            ),
        )
        return f"chain {k}: checkpoint iteration {delta:+d}" + " (re-signed)" * resign
    if kind == "ckpt_number":
        key = str(rng.choice(["loglik", "logprior"]))
        value = rng.choice([float("nan"), float("inf"), "x", 1.5])
        edit_record(path, lambda r: r["checkpoint"].__setitem__(key, value))
        return f"chain {k}: checkpoint {key} = {value!r}" + " (re-signed)" * resign
    if kind == "ckpt_finished":
        edit_record(path, lambda r: r["checkpoint"].__setitem__("finished", True))
        return f"chain {k}: checkpoint finished = true" + " (re-signed)" * resign
    if kind == "delete_member":
        record = json.loads(sidecar_path(path).read_text())
        keys = [("record", key) for key in record] + [
            ("checkpoint", key) for key in record.get("checkpoint") or {}
        ]
        where, key = keys[int(rng.integers(len(keys)))]
        edit_record(path, lambda r: (r if where == "record" else r["checkpoint"]).pop(key))
        return f"chain {k}: {where} member {key!r} deleted" + " (re-signed)" * resign
    if kind == "garbage_member":
        key, value = [
            ("rng", {"bit_generator": "PCG64", "state": 5}),
            ("rng", {"x": 1}),
            ("sampler", {}),
            ("sampler", {"theta": "abc"}),
            ("checkpoint", None),
            ("checkpoint", []),
        ][int(rng.integers(6))]
        if key == "checkpoint":
            edit_record(path, lambda r: r.__setitem__("checkpoint", value))
        else:
            edit_record(path, lambda r: r["checkpoint"].__setitem__(key, value))
        return f"chain {k}: {key} = {value!r}" + " (re-signed)" * resign
    if kind == "delete_sidecar":
        sidecar_path(path).unlink()
        return f"chain {k}: checkpoint deleted"
    if kind == "swap_files":
        both = bool(rng.integers(2))
        a, b = rd.chain_path(0), rd.chain_path(1)
        pairs = [(a, b)] + ([(sidecar_path(a), sidecar_path(b))] if both else [])
        for x, y in pairs:
            tmp = x.with_name("swap.tmp")
            x.rename(tmp)
            y.rename(x)
            tmp.rename(y)
        return "chain files swapped" + (" with their checkpoints" if both else "")
    if kind == "foreign":
        other = RunDir(fx.other_dir).chain_path(k)
        shutil.copyfile(other, path)
        if rng.integers(2):
            shutil.copyfile(sidecar_path(other), sidecar_path(path))
            return f"chain {k}: file and checkpoint of another config"
        return f"chain {k}: file of another config"
    if kind == "flip_value":
        import h5py

        n = json.loads(sidecar_path(path).read_text())["draws"]
        name = str(rng.choice(["sigma_x", "mu0", "loglik", "iteration"]))
        row = int(rng.integers(n))
        with h5py.File(path, "r+") as f:
            ds = f["draws"][name]
            ds[row] = ds[row] + 1
        return f"chain {k}: /draws/{name}[{row}] changed"
    if kind == "copy_file":
        shutil.copyfile(path, rd.chain_path(2))
        shutil.copyfile(sidecar_path(path), sidecar_path(rd.chain_path(2)))
        return f"chain {k} copied to chain 2"
    raise ValueError(kind)


# --------------------------------------------------------------------------- operations


def op_read(fx: Fixture, state: str) -> str:
    """What hawkes-diagnose reads: every chain file's committed draws."""
    from hawkes_cli.diagnostics.options import DiagnoseOptions
    from hawkes_cli.diagnostics.read import check_same_config, find_chain_files, read_chains

    files = find_chain_files(fx.run_dir)
    chains = read_chains(files, DiagnoseOptions())
    check_same_config(chains)
    want = fx.golden if state == "finished" else fx.mid
    ordered = sorted(chains, key=lambda c: c.chain_id)  # by the chain each file holds
    got = [read_chain(c.path).draws for c in ordered]
    return "ok" if same_draws(got, want) else "wrong"


def op_resume(fx: Fixture, state: str) -> str:
    """What hawkes-run local does: run every unfinished chain to its end."""
    from hawkes_cli.runner import run_chain

    rd = RunDir(fx.run_dir)
    for k in range(2):
        if not rd.is_finished(k):
            run_chain(fx.config, k)
    return "ok" if same_draws(all_draws(fx.run_dir), fx.golden) else "wrong"


def _child(conn, fx: Fixture, state: str, op: str) -> None:
    import logging

    logging.disable(logging.CRITICAL)
    try:
        result = (op_read if op == "read" else op_resume)(fx, state)
        conn.send((result, ""))
    except HawkesError as exc:
        one_line = "\n" not in str(exc).strip()
        conn.send(("clean" if one_line else "traceback", str(exc)))
    except BaseException as exc:
        conn.send(("traceback", "".join(traceback.format_exception(exc))[-2000:]))


def run_file_case(fx: Fixture, seed: int) -> tuple[str, str]:
    """One seeded case: (classification, description)."""
    rng = np.random.default_rng(seed)
    kind = DAMAGE[seed % len(DAMAGE)]
    state = str(rng.choice(["finished", "mid"]))
    op = str(rng.choice(["read", "resume"]))
    fx.reset(state)
    pristine = chain_files(fx.run_dir)
    what = damage(fx, kind, rng)
    before = chain_files(fx.run_dir)
    touched = {n for n in pristine.keys() | before.keys() if pristine.get(n) != before.get(n)}
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, fx, state, op))
    proc.start()
    child.close()
    result, detail = "hang", ""
    if parent.poll(CASE_TIMEOUT):
        try:
            result, detail = parent.recv()
        except EOFError:
            result, detail = "traceback", f"child died (exit {proc.exitcode})"
    proc.join(2.0)
    if proc.is_alive():
        proc.kill()
        proc.join()
    if proc.exitcode not in (0, None) and result not in ("hang", "traceback"):
        result, detail = "traceback", f"child exit {proc.exitcode}: {detail}"
    after = chain_files(fx.run_dir)
    if result == "clean" and any(after.get(n) != before.get(n) for n in touched):
        result, detail = "wrong", f"files changed behind a refusal: {detail}"
    return result, f"seed {seed} [{state} {op}] {what}: {result} {detail.splitlines()[:1]}"


# --------------------------------------------------------------------------- signals


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "hawkes_cli", "run", *args]


def _pids_alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        try:  # a zombie is dead
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                continue
        except OSError:
            pass
        alive.append(pid)
    return alive


def _chain_pids(run_dir: Path) -> list[int]:
    pids = []
    for k in range(1):
        lock = RunDir(run_dir).chain_path(k).with_suffix(".lock")
        try:
            words = lock.read_text().split()
        except OSError:
            continue
        if len(words) >= 2 and words[0] == "pid" and words[1].isdigit():
            pids.append(int(words[1]))
    return pids


class SignalFixture:
    """A longer local run (one chain of a few seconds) and its uninterrupted draws."""

    def __init__(self, folder: Path) -> None:
        from hawkes_cli.runner import run_chain

        events = make_events(folder)
        over = {"sampler__iterations": 8000, "sampler__warmup": 500, "output__commit_every": 200,
                "chains__count": 1}  # fmt: skip
        ref = load_config(tiny_config(folder, events, "sig-ref", **over))
        run_chain(ref, 0)
        self.golden = all_draws(Path(ref.output.run_dir), 1)
        self.config_path = tiny_config(folder, events, "sig", **over)
        self.run_dir = Path(load_config(self.config_path).output.run_dir)


def run_signal_case(sx: SignalFixture, seed: int) -> tuple[str, str]:
    """Signal ``local`` at a random moment; then no chain may outlive it, and a second
    ``local`` must finish with the draws of an uninterrupted run."""
    rng = np.random.default_rng(1000 + seed)
    sig = [signal.SIGKILL, signal.SIGHUP, signal.SIGTERM, signal.SIGINT][seed % 4]
    delay = float(rng.uniform(0.0, 1.0))
    if sx.run_dir.exists():
        shutil.rmtree(sx.run_dir)
    proc = subprocess.Popen(cli("local", str(sx.config_path)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 30
    while not (pids := _chain_pids(sx.run_dir)) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(delay)
    proc.send_signal(sig)
    what = f"seed {seed}: {sig.name} after {delay:.1f} s"
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return "hang", f"{what}: local did not end"
    if "Traceback" in err:
        return "traceback", f"{what}: {err[-500:]}"
    deadline = time.monotonic() + STOP_SECONDS
    while _pids_alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    orphans = _pids_alive(pids)
    if orphans:
        for pid in orphans:
            os.kill(pid, signal.SIGKILL)
        return "hang", f"{what}: chain processes {orphans} outlived local"
    again = subprocess.run(cli("local", str(sx.config_path)), capture_output=True, text=True,
                           timeout=120)  # fmt: skip
    if again.returncode != 0:
        kind = "traceback" if "Traceback" in again.stderr else "clean"
        return kind, f"{what}: resume failed: {again.stderr.strip()[-300:]}"
    ok = same_draws(all_draws(sx.run_dir, 1), sx.golden)
    return ("ok" if ok else "wrong"), what


# --------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def fx(tmp_path_factory) -> Fixture:
    return Fixture(tmp_path_factory.mktemp("fuzz"))


def test_fixture_templates_are_what_they_say(fx):
    """The mid-run template really stopped midway, and the golden run finished."""
    assert all(d["iteration"].size == 30 for d in fx.golden)  # 60 iterations, thin 2
    assert [d["iteration"].size for d in fx.mid] == [13, 16]  # stopped at 25 and 31
    np.testing.assert_array_equal(fx.mid[0]["sigma_x"], fx.golden[0]["sigma_x"][:13])


def test_fuzz_chain_files_and_checkpoints(fx):
    results = [run_file_case(fx, seed) for seed in range(N_FILE_CASES)]
    counts = Counter(r for r, _ in results)
    bad = [line for r, line in results if r not in ("ok", "clean")]
    assert not bad, f"{dict(counts)}\n" + "\n".join(bad)


def _one_error(proc: subprocess.CompletedProcess) -> str:
    """The one ``error:`` line of a failed command (and no traceback)."""
    assert proc.returncode not in (0, None), proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def diagnose(*args: str) -> subprocess.CompletedProcess:
    code = "from hawkes_cli.cli import diagnose_main; diagnose_main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=60)  # fmt: skip


@pytest.mark.parametrize("how", ["half", "4k", "flip"])
def test_damaged_chain_file_is_one_error_in_every_command(fx, how):
    """local, chain and hawkes-diagnose end at once with one error line (they used to hang);
    status shows its table, the damaged chain as such, and the same one line (it showed the
    checkpoint's word alone)."""
    fx.reset("mid")
    path = RunDir(fx.run_dir).chain_path(0)
    size = path.stat().st_size
    if how == "flip":
        raw = bytearray(path.read_bytes())
        raw[200:232] = bytes(b ^ 0x5A for b in raw[200:232])
        path.write_bytes(bytes(raw))
    else:
        os.truncate(path, size // 2 if how == "half" else 4096)
    before = chain_files(fx.run_dir)
    run = functools.partial(subprocess.run, capture_output=True, text=True, timeout=60)
    for proc in (
        run(cli("local", str(fx.config_path))),
        run(cli("chain", str(fx.config_path), "--chain", "0")),
        diagnose(str(fx.run_dir)),
        (status := run(cli("status", str(fx.run_dir)))),
    ):
        assert "chain-00.h5" in _one_error(proc)
    assert status.returncode == 7 and "damaged" in status.stdout.splitlines()[1]
    assert chain_files(fx.run_dir) == before


def test_local_prints_the_failed_chains_error_line(fx):
    """A chain that fails in its own process: local names its error, not only its exit code."""
    import fcntl

    fx.reset("mid")
    lock = RunDir(fx.run_dir).chain_path(1).with_suffix(".lock")
    with open(lock, "a+") as fh:  # another writer holds chain 1
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        proc = subprocess.run(cli("local", str(fx.config_path)), capture_output=True, text=True,
                              timeout=120)  # fmt: skip
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "chain 1 failed (exit 7): error: chain file" in proc.stderr, proc.stderr
    assert "being written by another process" in proc.stderr


def test_status_reads_a_run_of_hawkes_run_chain(fx, tmp_path):
    """`hawkes-run chain` alone writes the run directory's config, so status can read it."""
    if fx.run_dir.exists():
        shutil.rmtree(fx.run_dir)
    assert subprocess.run(cli("chain", str(fx.config_path), "--chain", "0"),
                          capture_output=True, timeout=120).returncode == 0  # fmt: skip
    assert (fx.run_dir / "config.yaml").is_file()
    for _ in range(2):  # then as an earlier version left it: the config only in the chain file
        proc = subprocess.run(cli("status", str(fx.run_dir), "--json"), capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        rows = json.loads(proc.stdout)
        assert len(rows) == 2 and "finished" in json.dumps(rows[0])
        (fx.run_dir / "config.yaml").unlink(missing_ok=True)


def test_copied_chain_file_is_refused_by_diagnose(fx):
    fx.reset("finished")
    rd = RunDir(fx.run_dir)
    shutil.copyfile(rd.chain_path(1), rd.chain_path(2))
    shutil.copyfile(sidecar_path(rd.chain_path(1)), sidecar_path(rd.chain_path(2)))
    line = _one_error(diagnose(str(fx.run_dir)))
    assert "chain-02.h5" in line and "chain-01.h5" in line and "counted twice" in line


def test_finished_rank_ignores_stop_signals(fx, monkeypatch):
    """Once its chain is done a node rank ignores SIGUSR1/SIGTERM/SIGINT: a warning landing
    while it waits for the node's other chains must not kill it (srun would then kill them)."""
    from hawkes_cli.slurm import ranks

    fx.reset("finished")
    monkeypatch.setattr(ranks, "load_config", lambda _path: fx.config)
    stop = StopFlag()
    saved = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)}
    try:
        assert ranks.run_node_ranks(fx.config_path, 0, stop=stop) == 0
        assert all(signal.getsignal(s) == signal.SIG_IGN for s in saved)
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


@pytest.mark.slow
def test_fuzz_signals_to_local(tmp_path):
    sx = SignalFixture(tmp_path)
    results = [run_signal_case(sx, seed) for seed in range(N_SIGNAL_CASES)]
    bad = [line for r, line in results if r != "ok"]
    assert not bad, "\n".join(bad)


if __name__ == "__main__":  # counts for the report
    import tempfile

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 96
    n_sig = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "f").mkdir()
        fixture = Fixture(Path(tmp) / "f")
        t0 = time.monotonic()
        out = [run_file_case(fixture, s) for s in range(n)]
        print(f"files: {n} cases in {time.monotonic() - t0:.0f} s:",
              dict(Counter(r for r, _ in out)))  # fmt: skip
        for r, line in out:
            if r not in ("ok", "clean") or "-v" in sys.argv:
                print("  ", line)
        sig_dir = Path(tmp) / "s"
        sig_dir.mkdir()
        sfx = SignalFixture(sig_dir)
        t0 = time.monotonic()
        sout = [run_signal_case(sfx, s) for s in range(n_sig)]
        print(f"signals: {n_sig} cases in {time.monotonic() - t0:.0f} s:",
              dict(Counter(r for r, _ in sout)))  # fmt: skip
        for r, line in sout:
            print("  ", r, line)
