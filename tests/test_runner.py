"""Chains end to end: storage, pair passes, SIGKILL and SIGTERM resume, MPI ranks, local runs,
the tiered sampler with the fast start (``initial: auto``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from hawkes_cli import atomic
from hawkes_cli.config import load_config
from hawkes_cli.data import save_events
from hawkes_cli.errors import StorageError, UsageError
from hawkes_cli.model import PARAM_NAMES, Params
from hawkes_cli.rundir import RunDir
from hawkes_cli.runner import run_chain
from hawkes_cli.simulate import DensityGrid, simulate
from hawkes_cli.start import StartResult
from hawkes_cli.stop import StopFlag
from hawkes_cli.storage import DRAW_FIELDS, read_chain, read_sidecar, sidecar_path
from hawkes_cli.storage.record import record_digest as _record_digest
from tests.conftest import write_config_file

pytestmark = pytest.mark.opencl

TRUTH = Params(mu0=0.5, tau_t=40.0, xi0=0.5, sigma_x=0.1, sigma_t=4.0)
BOUNDS = (0.0, 20.0, 0.0, 20.0)


@pytest.fixture(scope="module")
def events(tmp_path_factory) -> Path:
    grid = DensityGrid.log_uniform(BOUNDS, 8, 8, 1.0, 100.0, seed=3)
    data = simulate(TRUTH, model=1, n_background=400, t_end=200.0, bounds=BOUNDS, seed=5,
                    grid=grid)  # fmt: skip
    path = tmp_path_factory.mktemp("ev") / "events.h5"
    save_events(data, path)
    return path


def write_config(tmp_path: Path, events: Path, name: str = "run", **over) -> Path:
    """A chain config; ``section__key=value`` overrides. The default is the univariate sampler
    from given starting values (``initial: {}``, the data-scaled defaults jittered): the tests
    that count its passes predate the fast start; :data:`TIERED` selects the default kind."""
    cfg = {
        "data": {"events": str(events)},
        "model": {"kind": 1},
        "sampler": {"kind": "univariate", "iterations": 300, "warmup": 100, "seed": 7,
                    "resample_every": 40, "initial": {}},
        "chains": {"count": 2},
        "engine": {"backend": "opencl", "precision": "float64", "tolerance": 0.0},
        "output": {"run_dir": str(tmp_path / name), "commit_every": 20},
    }  # fmt: skip
    return write_config_file(tmp_path / f"{name}.yaml", cfg, **over)


#: The default sampler and start (tiered, ``initial: auto``), with the mode search on a
#: subsample of 300 of the ~800 events (so the subsample likelihood takes part too).
TIERED = {"sampler__kind": "tiered", "sampler__initial": "auto", "sampler__n_cheap": 4,
          "sampler__start_subsample": 300}  # fmt: skip


def draws(run_dir: Path, chain: int = 0) -> dict[str, np.ndarray]:
    return read_chain(RunDir(run_dir).chain_path(chain)).draws


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "hawkes_cli", "run", *args]


def test_chain_file_holds_every_draw(tmp_path, events):
    cfg = load_config(write_config(tmp_path, events, sampler__thin=3))
    out = run_chain(cfg, 1)
    assert out.finished and not out.stopped
    d = draws(cfg.output.run_dir, 1)
    assert d["iteration"].tolist() == list(range(0, 300, 3))
    assert (d["warmup"] == (d["iteration"] < 100)).all()
    assert out.draws_committed == 100
    for name in PARAM_NAMES:
        assert np.all(d[name] > 0) and np.all(np.isfinite(d[name]))
    assert np.all(np.isfinite(d["loglik"]))
    side = read_sidecar(RunDir(cfg.output.run_dir).chain_path(1))
    assert side["checkpoint"]["finished"] and side["draws"] == 100


def test_mu0_xi0_updates_run_no_pair_pass(tmp_path, events):
    cfg = load_config(write_config(tmp_path, events, sampler__resample_every=0))
    out = run_chain(cfg, 0)
    d = draws(cfg.output.run_dir)
    coord = d["coordinate"]
    # each tau_t (1), sigma_x (3) or sigma_t (4) proposal costs exactly one pass; mu0 (0) and
    # xi0 (2) cost none; plus the two passes of the initial evaluation
    assert out.pair_passes == 2 + int(np.isin(coord, [1, 3, 4]).sum())
    assert np.isin(coord, [0, 2]).sum() > 50
    # the chain file records each iteration's passes; the initial evaluation is in no row
    np.testing.assert_array_equal(d["pair_passes"], np.isin(coord, [1, 3, 4]))
    assert out.start_passes == 2
    np.testing.assert_array_equal(d["n_proposals"], 1)
    np.testing.assert_array_equal(d["n_accepted"], d["accepted"])
    np.testing.assert_array_equal(d["jump"], -1)


def test_resampling_costs_one_trigger_pass_each(tmp_path, events):
    cfg = load_config(write_config(tmp_path, events, sampler__resample_every=40))
    out = run_chain(cfg, 0)
    d = draws(cfg.output.run_dir)
    resamples = len(range(40, 300, 40))
    assert out.pair_passes == 2 + int(np.isin(d["coordinate"], [1, 3, 4]).sum()) + resamples
    redrawn = (d["iteration"] % 40 == 0) & (d["iteration"] > 0)
    passes = np.isin(d["coordinate"], [1, 3, 4]).astype(int) + redrawn
    np.testing.assert_array_equal(d["pair_passes"], passes)


@pytest.mark.parametrize("n_expensive", [1, 3])
def test_tiered_pair_passes_are_recorded_and_sum_to_the_counted_ones(tmp_path, events, n_expensive):
    """The default sampler and start: every row's pair_passes is that iteration's delta of the
    likelihood's pass counter, so the column sums to the counted passes less those before the
    first iteration (the fast start's and the first evaluation). With the current state's B and
    E always cached, an iteration costs exactly: each expensive move's trigger and background
    pass (it shifts tau_t along the regression too), one background pass per cheap move and
    per mode jump, plus the redraw's trigger pass every resample_every iterations. With
    several expensive moves, the state an accepted one reached keeps its E (no pass again)."""
    over = TIERED | {"sampler__n_expensive": n_expensive}
    cfg = load_config(write_config(tmp_path, events, "tiered", **over))
    out = run_chain(cfg, 0)
    assert out.finished
    d = draws(cfg.output.run_dir)
    assert int(d["pair_passes"].sum()) == out.pair_passes - out.start_passes
    assert out.start_passes > 2  # the fast start's curvature on the full data, then x0
    jumped = d["jump"] >= 0
    np.testing.assert_array_equal(d["n_proposals"], n_expensive + 4 + jumped)
    assert 0 < jumped.sum() < 300 and set(np.unique(d["jump"])) <= {-1, 0, 1}
    redrawn = (d["iteration"] % 40 == 0) & (d["iteration"] > 0)
    np.testing.assert_array_equal(d["pair_passes"], d["n_proposals"] + n_expensive + redrawn)
    assert np.all(d["n_accepted"] >= d["accepted"]) and np.all(d["n_accepted"] <= d["n_proposals"])
    np.testing.assert_array_equal(d["coordinate"], -2)
    # the start is recorded with every commit; the chain starts near its mode
    start = StartResult.from_json(read_sidecar(RunDir(cfg.output.run_dir).chain_path(0))[
        "checkpoint"]["start"])  # fmt: skip
    assert start.n_sub_evals > 0 and start.n_full_evals > 0 and start.hessian == "full"
    assert np.all(np.abs(np.log(d["sigma_x"][0]) - start.theta[3]) < 10 * np.sqrt(
        start.cov_matrix[3, 3]))  # fmt: skip


def test_fast_start_of_a_run_that_redraws_locations_searches_on_a_draw(tmp_path, events):
    """With ``resample_every > 0`` the chains never see the file's points again, so the fast
    start searches on one seeded draw of the locations (:func:`start.subsample.start_locations`, the
    same for every chain): the start's log posterior is that of its mode at that draw, not at
    the file's points (at 1M cases the file's hospital points put the mode thousands of nats
    away from where the chains go)."""
    from hawkes_cli.data import load_events, resolve_area
    from hawkes_cli.engine import build_likelihood
    from hawkes_cli.posterior import LogPosterior
    from hawkes_cli.resample import make_resampler
    from hawkes_cli.start.subsample import start_locations

    cfg = load_config(
        write_config(tmp_path, events, "drawn", **TIERED, sampler__iterations=3, sampler__warmup=1)
    )
    run_chain(cfg, 0)
    start = StartResult.from_json(
        read_sidecar(RunDir(cfg.output.run_dir).chain_path(0))["checkpoint"]["start"]
    )
    data = load_events(cfg.data.events)
    lik = build_likelihood(
        data,
        cfg.engine,
        model=cfg.model.kind,
        area=resolve_area(cfg, data),
        window_end=cfg.data.window_end,
    )
    posterior = LogPosterior.from_mapping(lik, cfg.priors)
    at_file = posterior(start.theta)
    lik.set_locations(*start_locations(*make_resampler(cfg, data), cfg.sampler.seed))
    at_draw = posterior(start.theta)
    assert start.log_post == pytest.approx(at_draw, rel=1e-12, abs=1e-9)
    assert abs(at_draw - at_file) > 1.0  # the two are told apart
    # the draw is the run's, not a chain's: another seed draws other points
    x0, _ = start_locations(*make_resampler(cfg, data), cfg.sampler.seed)
    x1, _ = start_locations(*make_resampler(cfg, data), cfg.sampler.seed + 1)
    assert not np.array_equal(x0, x1) and not np.array_equal(x0, data.x)


def _wait_for_draws(path: Path, at_least: int, proc: subprocess.Popen, timeout=120) -> int:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        side = read_sidecar(path)  # (a new file's empty record has no checkpoint)
        if side and side["checkpoint"] is not None and side["draws"] >= at_least:
            return side["draws"]
        assert proc.poll() is None, "chain ended before it could be interrupted"
        time.sleep(0.05)
    raise AssertionError("no commit in time")


def test_sigkill_then_resume_is_bit_for_bit(tmp_path, events):
    ref_cfg = load_config(write_config(tmp_path, events, "ref"))
    run_chain(ref_cfg, 0)
    want = draws(ref_cfg.output.run_dir)

    path = write_config(tmp_path, events, "killed")
    cfg = load_config(path)
    target = RunDir(cfg.output.run_dir).chain_path(0)
    for at_least in (40, 160):  # two kills, the second after a resume
        proc = subprocess.Popen(cli("chain", str(path), "--chain", "0"))
        _wait_for_draws(target, at_least, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert read_sidecar(target)["draws"] < 300
    out = run_chain(cfg, 0)
    assert out.finished
    got = draws(cfg.output.run_dir)
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


@pytest.mark.parametrize("n_expensive", [1, 3])
def test_sigkilled_tiered_chain_with_auto_start_resumes_bit_for_bit(tmp_path, events, n_expensive):
    """The default sampler and start, killed twice (first right after the fast start's commit
    at iteration 0, when no draw is committed yet, then after a resume): every column equals
    the chain never stopped, the cost record (pair_passes) included, and the resumed process
    does not search again; also with three expensive moves per iteration."""
    tiered = TIERED | {"sampler__n_expensive": n_expensive}
    ref_cfg = load_config(write_config(tmp_path, events, "tref-auto", **tiered))
    run_chain(ref_cfg, 0)
    want = draws(ref_cfg.output.run_dir)
    want_start = read_sidecar(RunDir(ref_cfg.output.run_dir).chain_path(0))["checkpoint"]["start"]
    want_start.pop("seconds")  # wall time, the one member that differs from run to run

    path = write_config(tmp_path, events, "tkill-auto", **tiered)
    cfg = load_config(path)
    target = RunDir(cfg.output.run_dir).chain_path(0)
    for at_least in (0, 120):
        proc = subprocess.Popen(cli("chain", str(path), "--chain", "0"))
        _wait_for_draws(target, at_least, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        side = read_sidecar(target)
        assert side["draws"] < 300
        assert {k: v for k, v in side["checkpoint"]["start"].items() if k != "seconds"} == (
            want_start
        )
    out = run_chain(cfg, 0)
    assert out.finished
    got = draws(cfg.output.run_dir)
    assert got.keys() == want.keys() and "pair_passes" in got
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    # the resume recomputed the current state's B and E only (no search)
    assert out.start_passes == 2


def test_resuming_a_chain_file_of_the_older_field_list_is_refused(tmp_path, events):
    """A chain file from before the per-iteration cost fields: a clear StorageError that says
    what to do (its draws are left alone); --overwrite starts afresh."""
    cfg = load_config(write_config(tmp_path, events, "old", sampler__iterations=30,
                                   sampler__warmup=10))  # fmt: skip
    run_chain(cfg, 0, stop=StopAfter(5))
    target = RunDir(cfg.output.run_dir).chain_path(0)
    old = [list(f) for f in DRAW_FIELDS[:7]]
    with h5py.File(target, "r+") as f:  # as the earlier version wrote it
        f.attrs["fields"] = json.dumps(old)
        for name, _ in DRAW_FIELDS[7:]:
            del f["draws"][name]
    side = json.loads(sidecar_path(target).read_text())  # its commit record had no integrity
    for key in ("record_sha256", "draws_sha256", "last_iteration"):
        del side[key]
    sidecar_path(target).write_text(json.dumps({**side, "schema": 1}))
    before = target.read_bytes()
    with pytest.raises(StorageError) as info:
        run_chain(cfg, 0)
    message = str(info.value)
    assert str(target) in message and "missing: pair_passes, n_proposals, n_accepted" in message
    assert "Start a new run_dir, or pass --overwrite" in message
    assert target.read_bytes() == before
    assert read_chain(target).n_committed == 5  # still readable with its own fields
    assert run_chain(cfg, 0, overwrite=True).finished


def test_sigterm_stops_at_boundary_and_resumes(tmp_path, events):
    long = {"sampler__kind": "block", "sampler__iterations": 3000}  # still running at SIGTERM
    ref_cfg = load_config(write_config(tmp_path, events, "ref2", **long))
    run_chain(ref_cfg, 0)
    path = write_config(tmp_path, events, "term", **long)
    cfg = load_config(path)
    target = RunDir(cfg.output.run_dir).chain_path(0)
    proc = subprocess.Popen(cli("chain", str(path), "--chain", "0"), stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    _wait_for_draws(target, 20, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 75, err
    assert "run again to resume" in err and "Traceback" not in err
    side = read_sidecar(target)
    assert not side["checkpoint"]["finished"]
    assert side["draws"] == side["checkpoint"]["iteration"]  # thin 1: committed up to the stop
    subprocess.run(cli("chain", str(path), "--chain", "0"), check=True, timeout=120)
    want, got = draws(ref_cfg.output.run_dir), draws(cfg.output.run_dir)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


class StopAfter(StopFlag):
    """A stop flag that is raised at the boundary after ``n`` iterations (serial chains read
    it once per iteration)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.left = n

    def __bool__(self) -> bool:
        self.left -= 1
        return self.left < 0


@pytest.mark.parametrize("kind", ["univariate", "tiered"])
def test_truncated_chain_resumes_bit_for_bit_at_its_cutoff(tmp_path, events, kind):
    """With truncation the checkpoint carries the cut-off: a chain stopped and resumed gives
    the uninterrupted draws (and pass counts), and a resumed chain continues at the
    checkpoint's kappa (not at the tolerance's starting value). The tiered kind starts with
    the fast start, whose full evaluations already tighten the cut-off here (the mode has a
    short tau_t, where the background is spiky)."""
    trunc = {"engine__tolerance": 1e-2, "engine__trigger": "truncated",
             **(TIERED if kind == "tiered" else {})}  # fmt: skip
    ref = load_config(write_config(tmp_path, events, "tref", **trunc))
    run_chain(ref, 0)
    cfg = load_config(write_config(tmp_path, events, "tstop", **trunc))
    out = run_chain(cfg, 0, stop=StopAfter(150))
    assert out.stopped
    target = RunDir(cfg.output.run_dir).chain_path(0)
    side = read_sidecar(target)
    assert side["checkpoint"]["truncation"]["kappa"] > 1.0  # calibrated, then kept
    out = run_chain(cfg, 0)
    assert out.finished
    want, got = draws(ref.output.run_dir), draws(cfg.output.run_dir)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)

    # a checkpoint at a larger cut-off (as after tightenings) is continued at that cut-off:
    # larger than the whole uninterrupted chain needed, so it is never tightened further
    needed = read_sidecar(RunDir(ref.output.run_dir).chain_path(0))["checkpoint"]["truncation"]
    larger = needed["kappa"] + 4.0
    cfg = load_config(write_config(tmp_path, events, "tkappa", **trunc))
    run_chain(cfg, 0, stop=StopAfter(150))
    side = json.loads(sidecar_path(target := RunDir(cfg.output.run_dir).chain_path(0)).read_text())
    side["checkpoint"]["truncation"]["kappa"] = larger
    side["record_sha256"] = _record_digest(side)  # an edit hawkes accepts: checksum made to fit
    sidecar_path(target).write_text(json.dumps(side))
    run_chain(cfg, 0)
    assert read_sidecar(target)["checkpoint"]["truncation"]["kappa"] == larger


def test_index_built_ahead_on_a_worker_gives_the_same_chain(tmp_path, events, monkeypatch):
    """``resample_every: 1`` with the truncated trigger: the next draw's grid index and row
    blocks are built on a worker thread while the device runs the current iteration
    (:mod:`hawkes_cli.engine.ahead`). The draws are those of a chain that builds them on the
    main thread, bit for bit, also when stopped and resumed; and most indexes did come from
    the worker (else this would compare the main-thread path with itself)."""
    from hawkes_cli.engine import ahead
    from hawkes_cli.vocab import DRAW_AHEAD_ENV

    threads: list[str] = []  # the thread of each grid index built (ahead.py is its one home)
    real = ahead.build_index

    def counted(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(ahead, "build_index", counted)
    over = {
        "engine__tolerance": 1e-2,
        "engine__trigger": "truncated",
        **TIERED,
        "sampler__resample_every": 1,
        "sampler__iterations": 60,
        "sampler__warmup": 20,
    }
    monkeypatch.setenv(DRAW_AHEAD_ENV, "0")
    ref = load_config(write_config(tmp_path, events, "main", **over))
    run_chain(ref, 0)
    assert threads and not any(t.startswith("hawkes-ahead") for t in threads)
    monkeypatch.delenv(DRAW_AHEAD_ENV)
    threads.clear()
    cfg = load_config(write_config(tmp_path, events, "ahead", **over))
    run_chain(cfg, 0)
    on_worker = sum(t.startswith("hawkes-ahead") for t in threads)
    assert on_worker >= 30, threads  # one per redraw, less the lattice moves of the warm-up
    stop = load_config(write_config(tmp_path, events, "stop", **over))
    assert run_chain(stop, 0, stop=StopAfter(30)).stopped
    assert run_chain(stop, 0).finished
    want = draws(ref.output.run_dir)
    for run in (cfg, stop):
        got = draws(run.output.run_dir)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def test_the_draw_ahead_switch_takes_0_or_1_and_nothing_else(monkeypatch):
    from hawkes_cli.engine import ahead
    from hawkes_cli.vocab import DRAW_AHEAD_ENV

    for value, on in (("0", False), ("1", True), (" 1 ", True), ("", True)):
        monkeypatch.setenv(DRAW_AHEAD_ENV, value)
        assert ahead.enabled() is on, value
    monkeypatch.delenv(DRAW_AHEAD_ENV)
    assert ahead.enabled()
    monkeypatch.setenv(DRAW_AHEAD_ENV, "banana")
    with pytest.raises(UsageError, match=r"HAWKES_DRAW_AHEAD='banana': expected 0 .* or 1"):
        ahead.enabled()


@pytest.mark.mpi
@pytest.mark.parametrize(("tolerance", "every"), [(0.0, 40), (1e-2, 40), (1e-2, 1)])
def test_mpi_ranks_give_the_serial_chain(tmp_path, events, tolerance, every):
    """Exact, and with the truncated trigger (collective tightening, work-balanced rows);
    with redraws every iteration, each rank also builds its next draw's index ahead on its own
    worker thread (:mod:`hawkes_cli.engine.ahead`).

    Truncated row blocks are formed within a rank's rows, so what is summed exactly (not what
    is bounded) depends on the split: the log-likelihoods agree within twice the tolerance
    (nats; each is within it of the exact value), not to rounding; the accept decisions, hence
    the draws, coincide."""
    engine = {"engine__tolerance": tolerance, "engine__trigger": "truncated",
              "sampler__resample_every": every}  # fmt: skip
    ser = load_config(write_config(tmp_path, events, "serial", **engine))
    run_chain(ser, 0)
    path = write_config(tmp_path, events, "mpi", chains__gpus_per_chain=2, **engine)
    mpiexec = str(Path(sys.executable).with_name("mpiexec"))
    subprocess.run([mpiexec, "-n", "2", *cli("chain", str(path), "--chain", "0")], check=True,
                   timeout=180)  # fmt: skip
    a, b = draws(ser.output.run_dir), draws(load_config(path).output.run_dir)
    for name in (*PARAM_NAMES, "iteration", "accepted"):
        np.testing.assert_array_equal(b[name], a[name], err_msg=name)
    np.testing.assert_allclose(b["loglik"], a["loglik"], rtol=1e-12, atol=2 * tolerance)


def test_local_runs_all_chains_then_resumes_nothing(tmp_path, events):
    path = write_config(tmp_path, events, "local", sampler__iterations=120, sampler__warmup=40)
    proc = subprocess.run(cli("local", str(path)), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "hawkes-diagnose" in proc.stdout
    run_dir = load_config(path).output.run_dir
    for k in range(2):
        assert read_sidecar(RunDir(run_dir).chain_path(k))["checkpoint"]["finished"]
        prog = json.loads((run_dir / "chains" / f"chain-{k:02d}.progress.json").read_text())
        assert prog["status"] == "finished" and prog["iteration"] == 120
    before = [os.stat(RunDir(run_dir).chain_path(k)).st_mtime_ns for k in range(2)]
    again = subprocess.run(cli("local", str(path)), capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert [os.stat(RunDir(run_dir).chain_path(k)).st_mtime_ns for k in range(2)] == before
    # chains differ (own seeds) and the config is in the run dir
    assert not np.array_equal(draws(run_dir, 0)["sigma_x"], draws(run_dir, 1)["sigma_x"])
    assert (run_dir / "config.yaml").read_text().startswith("# sha256: ")


def test_other_config_in_same_run_dir_is_refused(tmp_path, events):
    path = write_config(tmp_path, events, "same", sampler__iterations=60, sampler__warmup=10)
    assert subprocess.run(cli("local", str(path)), capture_output=True).returncode == 0
    path2 = write_config(
        tmp_path, events, "same", sampler__iterations=60, sampler__warmup=10, sampler__seed=8
    )
    proc = subprocess.run(cli("local", str(path2)), capture_output=True, text=True)
    assert proc.returncode != 0
    assert "different config" in proc.stderr and "Traceback" not in proc.stderr
    assert "sampler.seed: 7 -> 8)" in proc.stderr  # what differs, and only that


@pytest.mark.mpi
def test_local_with_two_ranks_per_chain_runs_under_mpiexec(tmp_path, events):
    common = {"sampler__iterations": 80, "sampler__warmup": 20, "chains__count": 1}
    ser = load_config(write_config(tmp_path, events, "ser1", **common))
    run_chain(ser, 0)
    path = write_config(tmp_path, events, "loc2", chains__gpus_per_chain=2, **common)
    proc = subprocess.run(cli("local", str(path)), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    run_dir = load_config(path).output.run_dir
    log = (run_dir / "logs" / "chain-00.log").read_text()
    assert "rank 0/2" in log and "rank 1/2" in log  # both ranks of the chain took rows
    a, b = draws(ser.output.run_dir), draws(run_dir)
    for name in (*PARAM_NAMES, "accepted"):
        np.testing.assert_array_equal(b[name], a[name], err_msg=name)


def test_sigusr1_stops_a_chain_on_pocl(tmp_path, events):
    # PoCL claims SIGUSR1 when it lists devices; Slurm's warning signal must still stop us
    path = write_config(tmp_path, events, "usr1", sampler__iterations=5000)
    target = RunDir(load_config(path).output.run_dir).chain_path(0)
    proc = subprocess.Popen(cli("chain", str(path), "--chain", "0"), stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    _wait_for_draws(target, 20, proc)
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 75, err
    assert not read_sidecar(target)["checkpoint"]["finished"]


def test_stop_flag_stops_when_the_launcher_is_gone(monkeypatch):
    """The fallback to PR_SET_PDEATHSIG: a chain of `local` whose parent is no longer the
    launcher (reparented after the launcher died) stops at the next boundary."""
    from hawkes_cli.vocab import LAUNCHER_PID_ENV

    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP,
                                              signal.SIGUSR1)}  # fmt: skip
    monkeypatch.setenv(LAUNCHER_PID_ENV, str(os.getppid()))
    stop = StopFlag()
    try:
        stop.install()
        assert not stop and signal.getsignal(signal.SIGHUP) == stop.set
        monkeypatch.setattr(os, "getppid", lambda: 1)
        assert stop and stop.signum == signal.SIGHUP
    finally:
        stop.uninstall()
        for s, handler in saved.items():
            signal.signal(s, handler)


def test_stop_signals_are_held_until_the_flag_is_read():
    """A flag installed first (as ``hawkes-run chain`` does, before numpy starts its threads)
    holds the stop signals in every thread, so no handler runs mid-work (LLVM's deleted PoCL's
    temporary build files: the chain failed instead of stopping), and takes a pending one when
    read."""
    script = (
        "import os, signal, time\n"
        "from hawkes_cli.stop import StopFlag\n"
        "stop = StopFlag(); stop.install()\n"
        "import numpy\n"  # threads started now hold the signals too
        "os.kill(os.getpid(), signal.SIGTERM); time.sleep(0.2)\n"
        "assert stop.signum is None and signal.SIGTERM in signal.sigpending()\n"
        "assert stop.requested() and stop.signum == signal.SIGTERM\n"
        "assert signal.SIGTERM not in signal.sigpending()\n"
        "print('held')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout == "held\n", proc.stderr


def test_the_fast_start_reports_its_progress(tmp_path, events, monkeypatch):
    """The chain's progress record follows its phases: the fast start (each search evaluation
    counted, the best log posterior seen), then warm-up from iteration 0, sampling from the end
    of warm-up, finished."""
    from hawkes_cli.runner import progress

    monkeypatch.setattr(progress, "PROGRESS_SECONDS", 0.0)  # every evaluation is written
    over = TIERED | {"sampler__iterations": 30, "sampler__warmup": 10}
    cfg = load_config(write_config(tmp_path, events, "phases", **over))
    seen: list[dict] = []
    run_chain(cfg, 0, on_progress=seen.append)
    phases = [r["phase"] for r in seen]
    assert [p for i, p in enumerate(phases) if i == 0 or p != phases[i - 1]] == [
        "fast start", "warm-up", "sampling", "finished"]  # fmt: skip
    searching = [r for r in seen if r["phase"] == "fast start"]
    counts = [r["evaluations"] for r in searching]
    assert counts == list(range(len(counts)))  # 0 at the search's start, then one per call
    start = StartResult.from_json(
        read_sidecar(RunDir(cfg.output.run_dir).chain_path(0))["checkpoint"]["start"]
    )
    assert counts[-1] == start.n_sub_evals + start.n_full_evals + start.n_cheap_evals
    assert searching[-1]["best_log_post"] >= start.log_post  # the mode is among those seen
    first = {p: next(r for r in seen if r["phase"] == p) for p in ("warm-up", "sampling")}
    assert first["warm-up"]["iteration"] == 0 and first["sampling"]["iteration"] == 10
    last = RunDir(cfg.output.run_dir).read_progress(0)
    assert (last.status, last.phase, last.iteration, last.warmup) == ("finished", "finished", 30,
                                                                      10)  # fmt: skip


def _interrupt_local(path: Path, rd: RunDir, when) -> str:
    """Start ``hawkes-run local PATH`` (output piped), send SIGINT once a chain's progress
    record satisfies ``when``; check the stopping line came once and before the chains' stopped
    lines, exit 75, and a stop within 20 s. Returns stdout."""
    from hawkes_cli.local import STOPPING_LINE

    count = load_config(path).chains.count
    proc = subprocess.Popen(cli("local", str(path)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    t0 = time.monotonic()
    while not any(when(rd.read_progress(k)) for k in range(count)):
        assert proc.poll() is None and time.monotonic() - t0 < 120, "the phase never came"
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    t1 = time.monotonic()
    out, err = proc.communicate(timeout=120)
    took = time.monotonic() - t1
    assert proc.returncode == 75, err
    assert took < 20, f"took {took:.1f} s to stop"
    assert out.count(STOPPING_LINE) == 1 and "Traceback" not in err
    assert out.index(STOPPING_LINE) < out.index("chain  0  stopped")
    return out


def test_ctrl_c_during_the_fast_start_stops_local_at_once_and_resumes(tmp_path, events):
    """SIGINT to ``hawkes-run local`` while a chain searches (the other waits for it): one
    stopping line at once, both chains stop during the fast start (nothing committed, their
    records say stopped), exit 75; run again, the chains finish as if never stopped."""
    # the search on all ~800 events (no subsample) lasts seconds: a signal lands within it
    over = TIERED | {"sampler__iterations": 40, "sampler__warmup": 10,
                     "sampler__start_subsample": 100_000}  # fmt: skip
    ref = load_config(write_config(tmp_path, events, "ccref", **over))
    run_chain(ref, 0)
    path = write_config(tmp_path, events, "ctrlc", **over)
    rd = RunDir(load_config(path).output.run_dir)
    out = _interrupt_local(path, rd, lambda r: r.phase == "fast start" and not r.note)
    assert "stopped: chains [0, 1] can be resumed" in out
    for k in range(2):
        assert rd.read_progress(k).phase == "stopped"
        assert (read_sidecar(rd.chain_path(k)) or {}).get("checkpoint") is None
    again = subprocess.run(cli("local", str(path)), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    want, got = draws(ref.output.run_dir), draws(rd.root)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def test_local_on_a_terminal_redraws_one_line_per_chain_in_place(tmp_path, events):
    """stdout a terminal: every refresh moves the cursor up over the chains' lines and rewrites
    them (no new line per refresh); the last frame shows both chains finished."""
    import pty

    path = write_config(tmp_path, events, "tty", sampler__iterations=150, sampler__warmup=50)
    master, slave = pty.openpty()
    proc = subprocess.Popen(cli("local", str(path)), stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other end is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    text = b"".join(chunks).decode().replace("\r\n", "\n")
    ups = text.count("\x1b[2A")
    assert ups >= 1
    assert text.count("\n") == 2 * (ups + 1) + 2  # the block's frames, then done + diagnose
    last = text.rsplit("\x1b[2A", 1)[1]
    assert "chain  0  finished" in last and "chain  1  finished" in last


def test_ctrl_c_while_waiting_for_another_chains_fast_start_stops_at_once(tmp_path, events):
    """A chain that waits for the run's fast start (here: the start lock held by this test, as
    by a hung chain) shows whose start it waits for, and SIGINT stops it at once."""
    import fcntl

    path = write_config(tmp_path, events, "waiting", **TIERED, chains__count=1)
    rd = RunDir(load_config(path).output.run_dir)
    rd.chains_dir.mkdir(parents=True)
    with open(rd.chains_dir / "start.lock", "w") as lock:
        lock.write("chain 7, pid 1 on elsewhere, since then")
        lock.flush()
        fcntl.flock(lock, fcntl.LOCK_EX)
        out = _interrupt_local(path, rd, lambda r: bool(r.note))
    record = rd.read_progress(0)
    assert record.note == "waiting for the fast start of chain 7" and record.phase == "stopped"
    assert "chain  0  stopped" in out


def test_stop_when_converged_ends_every_chain_at_the_first_passing_commit(tmp_path, events):
    """``sampler.stop_when: converged``: the chains end, finished, once the run's committed
    draws pass ``hawkes-diagnose``; checked here with arviz (an independent implementation
    of the same rank-normalised split R-hat and ESS) on the draws the record counted."""
    import arviz as az

    from hawkes_cli.diagnostics import diagnose
    from hawkes_cli.runner.converged import read_record

    cap, every = 4000, 50
    path = write_config(tmp_path, events, "conv", **TIERED, sampler__iterations=cap,
                        sampler__warmup=50, sampler__resample_every=0,
                        sampler__stop_when="converged", output__commit_every=every)  # fmt: skip
    proc = subprocess.run(cli("local", str(path)), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    cfg = load_config(path)
    rd = RunDir(cfg.output.run_dir)
    record = read_record(rd)
    assert record is not None and record.config_sha256 == cfg.draws_sha256
    assert f"converged at {record.common_draws} post-warm-up draws per chain" in proc.stdout
    warm = cfg.sampler.warmup
    for k in range(2):
        ckpt = rd.checkpoint(k)
        assert ckpt.finished and ckpt.converged and ckpt.iteration < cap
        n = draws(cfg.output.run_dir, k)["sigma_x"].size
        # the chain ended soon after the record: before its next commit at the latest
        assert record.draws[k] <= n <= record.draws[k] + every
        prog = json.loads(rd.progress_path(k).read_text())
        assert prog["status"] == "finished" and "converged" in prog["note"]
    common = min(record.draws) - warm
    assert common == record.common_draws
    for name in PARAM_NAMES:
        m = np.stack([draws(cfg.output.run_dir, k)[name][warm : warm + common] for k in range(2)])
        assert float(az.rhat(m)) <= 1.01 and record.largest_rhat <= 1.01
        assert min(float(az.ess(m, method="bulk")), float(az.ess(m, method="tail"))) >= 400
    assert record.smallest_ess >= 400
    assert diagnose(cfg.output.run_dir).status == "ok"
    # finished chains are not run again
    before = [os.stat(rd.chain_path(k)).st_mtime_ns for k in range(2)]
    again = subprocess.run(cli("local", str(path)), capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert [os.stat(rd.chain_path(k)).st_mtime_ns for k in range(2)] == before
    status = subprocess.run(cli("status", str(rd.root)), capture_output=True, text=True)
    assert status.returncode == 0, status.stderr
    assert "2/2 chains finished" in status.stdout
    assert f"converged at {record.common_draws} post-warm-up draws per chain" in status.stdout


def test_a_chain_ends_once_another_found_the_run_converged(tmp_path, events):
    """The record another chain wrote ends this one, as finished, as soon as it looks after
    warm-up; a record of replaced chain files (more draws than they hold) is ignored."""
    from hawkes_cli.runner.converged import RunConverged

    path = write_config(tmp_path, events, "rec", sampler__iterations=300, sampler__warmup=40,
                        sampler__stop_when="converged")  # fmt: skip
    cfg = load_config(path)
    rd = RunDir(cfg.output.run_dir)
    rd.chains_dir.mkdir(parents=True)
    stale = RunConverged(cfg.draws_sha256, 1, (10_000, 0), 9_960, 1.0, 500.0, "then")
    atomic.write_json(rd.converged_path, stale.to_json())
    out = run_chain(cfg, 0)  # alone, it cannot converge (R-hat needs chain 1): runs them all
    assert out.finished and not out.converged and out.iteration == 300
    assert not rd.checkpoint(0).converged
    record = RunConverged(cfg.draws_sha256, 0, (300, 0), 260, 1.0, 500.0, "now")
    atomic.write_json(rd.converged_path, record.to_json())
    out = run_chain(cfg, 1)
    # it looks for the record from its first iteration after warm-up (40), then commits
    assert out.finished and out.converged and out.iteration == 41
    ckpt = rd.checkpoint(1)
    assert ckpt.finished and ckpt.converged and ckpt.iteration == 41
    assert draws(cfg.output.run_dir, 1)["sigma_x"].size == 41
    assert RunDir(cfg.output.run_dir).is_finished(1)


def test_a_converged_checkpoint_is_finished_before_its_iterations():
    from hawkes_cli.rundir import Checkpoint

    base = dict(iteration=60, sampler={}, rng={}, loglik=0.0, logprior=0.0)
    Checkpoint(**base, finished=True, converged=True).check_commit(60, 59, 300, 1)
    with pytest.raises(StorageError, match="'finished' is true at iteration 60/300"):
        Checkpoint(**base, finished=True).check_commit(60, 59, 300, 1)
    with pytest.raises(StorageError, match="'finished' is false at iteration 60/300 of a chain"):
        Checkpoint(**base, finished=False, converged=True).check_commit(60, 59, 300, 1)
    older = Checkpoint(**base, finished=False).to_json()
    del older["converged"]  # written before the member existed
    assert Checkpoint.from_json(older).converged is False
    with pytest.raises(StorageError, match="'converged' must be true or false"):
        Checkpoint.from_json({**older, "converged": "yes"})


def test_local_says_when_the_run_did_not_converge_within_its_iterations(tmp_path, events):
    path = write_config(tmp_path, events, "short", sampler__iterations=120, sampler__warmup=40,
                        sampler__stop_when="converged")  # fmt: skip
    proc = subprocess.run(cli("local", str(path)), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "not converged within sampler.iterations (120)" in proc.stdout
    rd = RunDir(load_config(path).output.run_dir)
    for k in range(2):
        ckpt = rd.checkpoint(k)
        assert ckpt.finished and not ckpt.converged and ckpt.iteration == 120


def test_a_convergence_check_that_cannot_read_the_run_does_not_end_the_chain(tmp_path, events):
    from hawkes_cli.runner.converged import read_record, run_converged

    cfg = load_config(write_config(tmp_path, events, "bad", sampler__stop_when="converged"))
    rd = RunDir(cfg.output.run_dir)
    rd.chains_dir.mkdir(parents=True)
    check = run_converged(rd, cfg, 0)  # no chain files at all
    assert not check.converged and "cannot be diagnosed yet" in check.summary
    rd.chain_path(1).write_bytes(b"not an HDF5 file")  # another chain's file, unreadable
    assert not run_converged(rd, cfg, 0).converged
    rd.converged_path.write_text("{not json")  # a damaged record is no record
    assert read_record(rd) is None and not run_converged(rd, cfg, 0).converged


def test_failed_chains_pass_on_their_common_exit_code():
    from hawkes_cli.errors import HawkesError
    from hawkes_cli.local import summarize

    summarize({0: 0, 1: 75})  # finished and stopped: no failure
    for codes, want in (({0: 3, 1: 3}, 3), ({0: 5, 1: 0}, 5), ({0: 3, 1: 4}, 1), ({0: -9}, 1)):
        with pytest.raises(HawkesError) as info:
            summarize(codes)
        assert info.value.exit_code == want, codes
        assert "fix the cause and run again to resume" in str(info.value)
