# ruff: noqa: F811  (the events fixture is imported from test_runner, as pytest needs)
"""A run keeps its draws when only keys that change no draw change (``RUN_ONLY_KEYS``:
``output.commit_every``, ``sampler.iterations``, ``sampler.stop_when``, ``slurm``): a stopped
chain resumes under the new config, bit for bit the chain a run of either config makes; more
iterations extend finished chains; any other change is still refused without ``--overwrite``."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
import yaml

from hawkes_cli.config import RUN_ONLY_KEYS, draws_digest, load_config, same_draws
from hawkes_cli.diagnostics import DiagnoseOptions
from hawkes_cli.diagnostics.read import read_chain_file
from hawkes_cli.errors import ConfigError, OtherRunError, StorageError
from hawkes_cli.rundir import RunDir
from hawkes_cli.runner import run_chain
from hawkes_cli.storage import read_chain, read_sidecar, sidecar_path
from hawkes_cli.storage.record import record_digest
from tests.test_runner import StopAfter, cli, draws, events, write_config  # noqa: F401

pytestmark = pytest.mark.opencl

RUN_ONLY = {
    "output__commit_every": 7,
    "sampler__stop_when": "converged",
    "slurm__time": "48:00:00",
    "slurm__partition": "long",
}


def test_the_digest_leaves_out_exactly_the_run_only_keys():
    text = yaml.safe_dump(
        {
            "sampler": {"seed": 1, "stop_when": "iterations"},
            "output": {"commit_every": 5},
            "slurm": {"time": "1:00:00"},
        }
    )
    other = text.replace("commit_every: 5", "commit_every: 9").replace("1:00:00", "2:00:00")
    assert same_draws(text, other) and draws_digest(text) == draws_digest(other)
    assert not same_draws(text, text.replace("seed: 1", "seed: 2"))
    assert same_draws("# sha256: abc\n" + text, text)  # header ignored
    assert set(RUN_ONLY_KEYS) == {
        "output.commit_every",
        "sampler.iterations",
        "sampler.stop_when",
        "slurm",
    }


def test_a_stopped_chain_resumes_under_changed_run_only_keys(tmp_path, events):
    over = {"sampler__iterations": 60, "sampler__warmup": 20}
    ref = load_config(write_config(tmp_path, events, "ref", **over))
    run_chain(ref, 0)
    first = load_config(write_config(tmp_path, events, "run", **over))
    assert run_chain(first, 0, stop=StopAfter(30)).stopped
    run_dir = RunDir(first.output.run_dir)
    before = read_chain(run_dir.chain_path(0)).attrs["config_sha256"]
    changed = load_config(write_config(tmp_path, events, "run", **over, **RUN_ONLY))
    assert changed.sha256 != first.sha256 and changed.draws_sha256 == first.draws_sha256
    assert run_chain(changed, 0).finished
    # the draws are the uninterrupted run's; the file keeps the config it was created with,
    # config.yaml holds the new one, and the finished chain reads as finished
    want, got = draws(ref.output.run_dir), draws(run_dir.root)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    assert read_chain(run_dir.chain_path(0)).attrs["config_sha256"] == before
    assert run_dir.load_config().output.commit_every == 7
    assert run_dir.is_finished(0)


@pytest.mark.parametrize("key", ["sampler__seed", "sampler__warmup", "chains__count"])
def test_any_other_change_is_still_refused(tmp_path, events, key):
    base = {"sampler__iterations": 40, "sampler__warmup": 10}
    first = load_config(write_config(tmp_path, events, "run", **base))
    assert run_chain(first, 0, stop=StopAfter(15)).stopped
    value = {"sampler__seed": 8, "sampler__warmup": 12, "chains__count": 3}[key]
    other = load_config(write_config(tmp_path, events, "run", **{**base, key: value}))
    with pytest.raises(OtherRunError, match="different config"):
        run_chain(other, 0)


def test_a_run_only_change_waits_for_running_chains(tmp_path, events, monkeypatch):
    """``config.yaml`` is not changed under a chain that is writing (its lock is held)."""
    over = {"sampler__iterations": 40, "sampler__warmup": 10}
    first = load_config(write_config(tmp_path, events, "run", **over))
    assert run_chain(first, 0, stop=StopAfter(15)).stopped
    run_dir = RunDir(first.output.run_dir)
    monkeypatch.setattr("hawkes_cli.rundir.writer_holder", lambda path: "pid 1 on here")
    changed = load_config(write_config(tmp_path, events, "run", **over, **RUN_ONLY))
    with pytest.raises(StorageError, match=r"cannot change its config: chain 0 .* is running"):
        run_dir.write_config(changed)
    assert run_dir.load_config().sha256 == first.sha256


def test_local_resumes_with_a_new_commit_every(tmp_path, events):
    """The command a user runs: ``hawkes-run local`` on the edited config, no --overwrite."""
    over = {"sampler__iterations": 40, "sampler__warmup": 10}
    path = write_config(tmp_path, events, "run", **over)
    first = load_config(path)
    assert run_chain(first, 0, stop=StopAfter(15)).stopped
    edited = write_config(tmp_path, events, "run", **over, output__commit_every=3)
    proc = subprocess.run(cli("local", str(edited)), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "changed: output.commit_every: 20 -> 3 (no draw depends" in proc.stderr  # told once
    assert proc.stderr.count("changed: output.commit_every") == 1
    run_dir = RunDir(first.output.run_dir)
    assert all(run_dir.is_finished(k) for k in range(2))
    assert run_dir.load_config().output.commit_every == 3
    # then more draws for both finished chains: raise the iterations and run again
    more = write_config(tmp_path, events, "run", **{**over, "sampler__iterations": 50})
    proc = subprocess.run(cli("local", str(more)), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "sampler.iterations: 40 -> 50" in proc.stderr
    assert all(run_dir.is_finished(k) for k in range(2))
    assert [len(draws(run_dir.root, k)["iteration"]) for k in range(2)] == [50, 50]


@pytest.mark.parametrize("legacy", [False, True], ids=["record", "record-without-iterations"])
def test_more_iterations_extend_finished_chains(tmp_path, events, legacy):
    """40 iterations run to the end, then the config asks 60: the chain is no longer finished,
    resumes, and its 60 draws are those of a 60-iteration run. ``legacy``: a commit record of
    an earlier version, whose checkpoint does not record its iterations (the file's count)."""
    ref = load_config(
        write_config(tmp_path, events, "ref", sampler__iterations=60, sampler__warmup=20)
    )
    run_chain(ref, 0)
    first = load_config(
        write_config(tmp_path, events, "run", sampler__iterations=40, sampler__warmup=20)
    )
    assert run_chain(first, 0).finished
    run_dir = RunDir(first.output.run_dir)
    side_path = sidecar_path(run_dir.chain_path(0))
    if legacy:
        side = json.loads(side_path.read_text())
        del side["checkpoint"]["iterations"]
        side["record_sha256"] = record_digest(side)
        side_path.write_text(json.dumps(side))
    assert run_dir.is_finished(0)
    longer = load_config(
        write_config(tmp_path, events, "run", sampler__iterations=60, sampler__warmup=20)
    )
    run_dir.write_config(longer)
    assert not run_dir.is_finished(0)
    assert run_chain(longer, 0).finished
    want, got = draws(ref.output.run_dir), draws(run_dir.root)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    assert read_sidecar(run_dir.chain_path(0))["checkpoint"]["iterations"] == 60
    assert read_chain(run_dir.chain_path(0)).attrs["iterations"] == 40  # the file's own
    assert run_dir.is_finished(0)
    read = read_chain_file(run_dir.chain_path(0), DiagnoseOptions())
    assert (read.iterations_planned, read.iterations_done, read.finished) == (60, 60, True)


def test_fewer_iterations_than_a_chain_ran_are_refused(tmp_path, events):
    over = {"sampler__iterations": 40, "sampler__warmup": 10}
    first = load_config(write_config(tmp_path, events, "run", **over))
    assert run_chain(first, 0, stop=StopAfter(30)).stopped
    run_dir = RunDir(first.output.run_dir)
    before = {p: p.read_bytes() for p in run_dir.chains_dir.iterdir() if p.suffix != ".lock"}
    fewer = load_config(
        write_config(tmp_path, events, "run", **{**over, "sampler__iterations": 25})
    )
    with pytest.raises(ConfigError, match=r"chain 0 of .* has run 30 iterations, more than "
                       r"sampler.iterations \(25\); set it to 30 or more"):  # fmt: skip
        run_chain(fewer, 0)
    assert run_dir.load_config().sha256 == first.sha256
    after = {p: p.read_bytes() for p in run_dir.chains_dir.iterdir() if p.suffix != ".lock"}
    assert {p: b for p, b in after.items() if p.suffix != ".json" or "ckpt" in p.name} == {
        p: b for p, b in before.items() if p.suffix != ".json" or "ckpt" in p.name
    }


def test_a_default_warmup_that_follows_the_iterations_keeps_them_in_the_identity(tmp_path):
    """``warmup`` left out resolves to ``iterations // 10``: more iterations then change the
    warm-up, hence the draws, and the run's identity."""
    from hawkes_cli.config import config_from_mapping

    def config(iterations: int, **sampler):
        mapping = {"data": {"events": "x.h5"}, "sampler": {"iterations": iterations, **sampler}}
        return config_from_mapping(mapping, where="test", base_dir=tmp_path)

    assert config(500).draws_sha256 != config(600).draws_sha256
    assert config(500, warmup=50).draws_sha256 == config(600, warmup=50).draws_sha256


def test_when_a_finished_chain_is_done():
    """A chain that ran its iterations is done until they are raised; one that ended because
    the run converged is done while the config stops there, not after
    ``stop_when: iterations``."""
    from hawkes_cli.rundir import Checkpoint

    def ckpt(iteration: int, converged: bool) -> Checkpoint:
        return Checkpoint(iteration, {}, {}, 0.0, 0.0, True, converged=converged, iterations=40)

    ran, converged = ckpt(40, False), ckpt(25, True)
    assert ran.done(40) and ran.done(30) and not ran.done(60)
    assert ran.done(40, "iterations") and not ran.done(60, "iterations")
    assert converged.done(40, "converged") and converged.done(60, "converged")
    assert not converged.done(40, "iterations") and converged.done(25, "iterations")


def test_chains_started_before_and_after_a_change_are_one_run(tmp_path, events, monkeypatch):
    """Chain 0 runs under the first config, chain 1 starts only after ``commit_every`` and
    ``slurm.time`` changed (its file records the new config): the fast start is shared,
    ``hawkes-diagnose`` reads both as one run, and a convergence record found under the first
    config still holds."""
    import hawkes_cli.start.chain as start_chain
    from hawkes_cli.diagnostics import load_draws
    from hawkes_cli.runner.converged import found
    from tests.test_runner import TIERED

    over = {**TIERED, "sampler__iterations": 40, "sampler__warmup": 10}
    first = load_config(write_config(tmp_path, events, "run", **over))
    run_chain(first, 0)
    run_dir = RunDir(first.output.run_dir)
    record = {"config_sha256": first.draws_sha256, "chain": 0, "draws": [40, 0],
              "common_draws": 30, "largest_rhat": 1.0, "smallest_ess": 500.0,
              "at": "now"}  # fmt: skip
    run_dir.converged_path.write_text(json.dumps(record))

    def no_search(*args, **kwargs):
        raise AssertionError("chain 1 searched again instead of sharing chain 0's start")

    monkeypatch.setattr(start_chain, "_search", no_search)
    changed = load_config(write_config(tmp_path, events, "run", **over, **RUN_ONLY))
    run_chain(changed, 1)
    shas = {read_chain(run_dir.chain_path(k)).attrs["config_sha256"] for k in range(2)}
    assert shas == {first.sha256, changed.sha256}
    assert load_draws(run_dir.root).chain_ids == (0, 1)
    assert found(run_dir, changed) is not None


def test_fewer_iterations_on_a_run_without_its_config_file_are_refused(tmp_path, events):
    """Chain files moved to a directory without ``config.yaml``: the resume itself refuses a
    config of fewer iterations than the chain ran (it would leave a checkpoint beyond them)."""
    over = {"sampler__iterations": 40, "sampler__warmup": 10}
    first = load_config(write_config(tmp_path, events, "run", **over))
    assert run_chain(first, 0, stop=StopAfter(30)).stopped
    run_dir = RunDir(first.output.run_dir)
    run_dir.config_path.unlink()
    before = run_dir.chain_path(0).read_bytes()
    fewer = load_config(
        write_config(tmp_path, events, "run", **{**over, "sampler__iterations": 25})
    )
    with pytest.raises(ConfigError, match=r"chain 0 has run 30 iterations, more than "
                       r"sampler.iterations \(25\); set it to 30 or more"):  # fmt: skip
        run_chain(fewer, 0)
    assert run_dir.chain_path(0).read_bytes() == before


def test_status_of_an_extended_run_shows_unfinished_chains_stopped(tmp_path, events):
    from hawkes_cli.slurm.jobs import run_status

    over = {"sampler__iterations": 40, "sampler__warmup": 10}
    first = load_config(write_config(tmp_path, events, "run", **over))
    for k in range(2):
        run_chain(first, k)
    longer = load_config(
        write_config(tmp_path, events, "run", **{**over, "sampler__iterations": 60})
    )
    run_chain(longer, 0)
    rows = {r.chain: r for r in run_status(RunDir(first.output.run_dir).root, query_slurm=False)}
    assert (rows[0].finished, rows[0].phase) == (True, "finished")
    assert (rows[1].finished, rows[1].phase, rows[1].iterations) == (False, "stopped", 60)


def test_a_moved_default_warmup_is_refused_with_the_way_to_extend(tmp_path, events):
    base = {"sampler__iterations": 400}
    first = load_config(write_config(tmp_path, events, "run", **base, sampler__warmup=None))
    RunDir(first.output.run_dir).write_config(first)
    more = load_config(write_config(tmp_path, events, "run", sampler__iterations=500,
                                    sampler__warmup=None))  # fmt: skip
    with pytest.raises(OtherRunError, match=r"to extend the run, keep its warm-up: set "
                       r"sampler.warmup: 40"):  # fmt: skip
        RunDir(first.output.run_dir).write_config(more)
