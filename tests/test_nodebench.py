"""``hawkes-run devices --check --bench``: a new node's screen, its saved file, the projection
of an MCMC iteration from the measured passes, and the user's mistakes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from hawkes_cli.nodebench import (
    KernelTime,
    NodeBench,
    PassTiming,
    county_events,
    out_problem,
    profiling,
    project,
    render,
    run_bench,
)
from hawkes_cli.nodebench.events import SPAN_DAYS
from tests.conftest import clean_env

REPO = Path(__file__).resolve().parent.parent
HAWKES_RUN = str(Path(sys.executable).parent / "hawkes-run")
#: Events of the CLI run (seconds on 2 CPU cores, the county polygons' region aside).
N = 3_000


def hawkes_run(*args: str, cwd: Path | None = None, timeout: float = 600):
    return subprocess.run(
        [HAWKES_RUN, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(),
        cwd=cwd,
    )


def one_error_line(proc: subprocess.CompletedProcess, code: int) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def timing(label: str, wall: float, kernel: float | None, host: float, n: int = 1000):
    kernels = () if kernel is None else (KernelTime("k", kernel, 1),)
    return PassTiming(label, n, wall, host, kernel, kernels, 0, 0, 0, 1.0, 1.0, -5.0, 0.01)


# --- the screen through the CLI --------------------------------------------------------------


@pytest.fixture(scope="module")
def cli_bench(tmp_path_factory):
    """``devices --check --bench --n 3000`` on this machine's device: (process, saved file)."""
    out = tmp_path_factory.mktemp("node") / "node.txt"
    proc = hawkes_run("devices", "--check", "--bench", "--n", str(N), "--out", str(out))
    return proc, out


def _row(text: str, label: str) -> list[str]:
    """The passes' table row of ``label``: its fields after the label."""
    line = next(x for x in text.splitlines() if x.startswith(label))
    return line[len(label) :].split()


@pytest.mark.opencl
@pytest.mark.slow
def test_cli_bench_writes_its_screen(cli_bench):
    proc, out = cli_bench
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    text = out.read_text()
    assert text == proc.stdout  # the file is the screen
    for section in (
        "hawkes-run devices --check --bench",
        "id    kind  fp64",  # the device table
        "PASS",  # the self-check's verdict
        f"bench: model 1, {N:,} events, float32; host ",
        "  device: 0:",
        "edge: censored (the county polygons)",
        "kernel s",
        "projected per MCMC iteration of configs/covid-model1.yaml",
        "n_expensive x truncated + (n_cheap + jump_prob) x tau_t change",
        "not projected: location redraws",
    ):
        assert section in text, section
    for label in ("exact", "truncated", "tau_t change", "mu0/xi0 change"):
        fields = _row(text, label)
        assert int(fields[0].replace(",", "")) == N
        assert float(fields[1]) > 0  # wall seconds
    kernel = float(_row(text, "truncated")[2])  # profiling events were on
    assert kernel > 0
    assert len(text.splitlines()) < 60  # one screen, the device check included
    assert f"(saved to {out})" in proc.stderr


@pytest.mark.opencl
@pytest.mark.slow
def test_cli_projection_is_the_formula_of_its_own_numbers(cli_bench):
    """The printed projection = 4 x truncated wall + (10 + 0.2) x tau_t change wall (the covid
    configs' n_expensive 4), from the table's own (rounded) numbers; and the formula line prints
    those numbers."""
    _, out = cli_bench
    text = out.read_text()
    truncated = float(_row(text, "truncated")[1])
    tau = float(_row(text, "tau_t change")[1])
    lines = text.splitlines()
    at = next(i for i, x in enumerate(lines) if "seconds = n_expensive x truncated + (n_" in x)
    m = re.fullmatch(r" += 4 x (\S+) \+ \(10 \+ 0\.2\) x (\S+) = (\S+) s", lines[at + 1])
    assert m, lines[at + 1]
    expensive_s, cheap_s, seconds = (float(g) for g in m.groups())
    assert expensive_s == pytest.approx(truncated, abs=6e-5, rel=1e-3)
    assert cheap_s == pytest.approx(tau, abs=6e-5, rel=1e-3)
    assert seconds == pytest.approx(4 * truncated + 10.2 * tau, abs=1e-3, rel=2e-3)


@pytest.mark.opencl
def test_bench_in_process_projects_its_own_numbers():
    """run_bench without the edge (no polygons: seconds); the projection is the sum of the
    measured evaluations, and profiling is off again afterwards."""
    from hawkes_cli.engine import profile

    with profiling():
        r = run_bench(2_000, edge=False)
    assert not profile.active() and profile.PROFILE_ENV not in os.environ
    assert r.n == r.exact.n == r.truncated.n == 2_000 and r.edge.startswith("none")
    assert r.truncated.trigger_passes == 1 and r.truncated.background_passes == 1
    assert r.tau_change.trigger_passes == 0 and r.tau_change.background_passes == 1
    assert r.weights_change.trigger_passes == 0 and r.weights_change.background_passes == 0
    assert r.truncated.error_bound <= r.tolerance and r.exact.error_bound == 0
    pr = r.projection
    assert pr.seconds == pytest.approx(4 * r.truncated.wall_s + 10.2 * r.tau_change.wall_s)
    assert pr.host_s == pytest.approx(4 * r.truncated.host_s + 10.2 * r.tau_change.host_s)
    if r.truncated.kernel_s is not None:  # None when this process opened the device earlier
        want = 4 * r.truncated.kernel_s + 10.2 * r.tau_change.kernel_s
        assert pr.kernel_s == pytest.approx(want)
    # same events, same parameters: the two engines agree within the truncation's bound
    assert abs(r.exact.loglik - r.truncated.loglik) <= r.truncated.error_bound + 1e-3


# --- the projection and the report, pure -----------------------------------------------------


def test_project_is_the_stated_formula():
    trunc, tau = timing("truncated", 0.5, 0.11, 0.38), timing("tau_t change", 0.05, 0.0, 0.04)
    pr = project(trunc, tau)
    assert (pr.n_expensive, pr.n_cheap, pr.jump_prob) == (4, 10, 0.2)
    assert pr.seconds == pytest.approx(4 * 0.5 + 10.2 * 0.05)
    assert pr.kernel_s == pytest.approx(4 * 0.11)
    assert pr.host_s == pytest.approx(4 * 0.38 + 10.2 * 0.04)
    assert pr.arithmetic == f"4 x 0.5 + (10 + 0.2) x 0.05 = {pr.seconds:.4g} s"
    pr1 = project(trunc, tau, n_expensive=1, n_cheap=20, jump_prob=0.0)
    assert pr1.seconds == pytest.approx(0.5 + 20 * 0.05)
    assert project(timing("t", 1.0, None, 0.9), tau).kernel_s is None


def test_projection_uses_the_shipped_configs_settings():
    """The defaults project() uses are what configs/covid-model{1,2}.yaml ship."""
    pr = project(timing("t", 1.0, 0.1, 0.9), timing("c", 0.1, 0.0, 0.1))
    for model in (1, 2):
        cfg = yaml.safe_load((REPO / "configs" / f"covid-model{model}.yaml").read_text())
        sampler = cfg["sampler"]
        assert sampler["kind"] == "tiered"
        assert (sampler["n_expensive"], sampler["n_cheap"]) == (pr.n_expensive, pr.n_cheap)
        assert sampler["jump_prob"] == pr.jump_prob
        assert cfg["engine"]["tolerance"] == 0.05 and cfg["engine"]["precision"] == "float32"


def _report(n: int, exact_n: int) -> NodeBench:
    trunc, tau = timing("truncated", 0.5, 0.11, 0.38, n), timing("tau_t change", 0.05, 0, 0.04, n)
    return NodeBench(
        host="node7",
        cores=64,
        load=0.5,
        device="0:0 Some GPU (Vendor)",
        kind="gpu",
        n=n,
        model=1,
        precision="float32",
        tolerance=0.05,
        edge="censored (the county polygons)",
        data_s=1.0,
        region_s=2.0,
        warmup_s=3.0,
        truncated=trunc,
        exact=replace(timing("exact", 2.0, 1.9, 0.05, exact_n)),
        tau_change=tau,
        weights_change=timing("mu0/xi0 change", 0.01, 0, 0.01, n),
        projection=project(trunc, tau),
    )


def test_render_labels_a_projected_exact_pass():
    text = "\n".join(render(_report(1_000_000, 100_000)))
    assert "exact at 1,000,000 events: 200 s projected" in text  # 2 s x (10)^2
    assert "(subsample)" in _row(text, "exact")
    assert "truncated is 400x faster than exact (projected)" in text
    same = "\n".join(render(_report(1_000_000, 1_000_000)))
    assert "projected (wall" not in same and "exact - truncated log-likelihood" in same
    assert "truncated is 4x faster than exact\n" in same + "\n"


def test_render_without_profiling_says_n_a():
    r = _report(10_000, 10_000)
    bare = replace(r.truncated, kernel_s=None, kernels=(), bytes_up=None, bytes_down=None)
    text = "\n".join(render(replace(r, truncated=bare, projection=project(bare, r.tau_change))))
    assert "n/a" in _row(text, "truncated")
    assert "of which host" in text


# --- the events ------------------------------------------------------------------------------


def test_county_events_are_sorted_us_events():
    data = county_events(5_000, model=2, seed=3)
    assert data.n == 5_000 and np.all(np.diff(data.time) >= 0)
    assert data.time[0] >= 0 and data.time[-1] < SPAN_DAYS
    assert np.mean(data.time != np.floor(data.time)) > 0.99  # continuous times
    assert np.all((data.x > -180) & (data.x < -60)) and np.all((data.y > 15) & (data.y < 75))
    assert data.density is not None and data.density.min() > 0
    assert data.attrs["crs"] == "lonlat" and data.attrs["area"] > 500
    assert county_events(100, model=1).density is None
    again = county_events(5_000, model=2, seed=3)
    assert np.array_equal(again.x, data.x)


# --- a user's mistakes: one error line, no timing --------------------------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--bench", "--n", "0"), "--n must be at least 1,000"),
        (("--bench", "--out", "{tmp}/missing/node.txt"), "does not exist"),
        (("--bench", "--out", "{tmp}"), "is a folder"),
        (("--bench", "--json"), "--json"),
        (("--n", "5000"), "only go with --bench"),
        (("--check", "--out", "{tmp}/x.txt"), "only go with --bench"),
    ],
)
def test_bench_mistakes_are_one_error_line(tmp_path, args, words):
    proc = hawkes_run("devices", *(a.format(tmp=tmp_path) for a in args), timeout=60)
    assert words in one_error_line(proc, 2)
    assert not list(tmp_path.iterdir())  # nothing written


def test_out_problem_probes_the_folder(tmp_path):
    assert out_problem(tmp_path / "node.txt") is None
    assert not list(tmp_path.iterdir())  # the probe leaves nothing
    (tmp_path / "file").write_text("x")
    assert "does not exist" in out_problem(tmp_path / "file" / "node.txt")


@pytest.mark.opencl
def test_gpus_given_but_not_listed_stop_after_the_table(tmp_path):
    """Slurm gave a GPU that OpenCL does not list: exit 9 with one error line, and the saved
    screen holds the table and that line (what the user needs to fix it)."""
    out = tmp_path / "node.txt"
    proc = subprocess.run(
        [HAWKES_RUN, "devices", "--bench", "--n", "1000", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(CUDA_VISIBLE_DEVICES="0"),
    )
    line = one_error_line(proc, 9)
    assert "CUDA_VISIBLE_DEVICES=0" in line
    text = out.read_text()
    assert "id    kind  fp64" in text and text.rstrip().endswith(line)
