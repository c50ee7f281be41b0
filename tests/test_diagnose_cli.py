"""`hawkes-diagnose` end to end on a real local run."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import yaml

from hawkes_cli.config import load_config
from hawkes_cli.data import save_events
from hawkes_cli.model import Params
from hawkes_cli.rundir import RunDir
from hawkes_cli.runner import run_chain
from hawkes_cli.simulate import simulate
from hawkes_cli.storage import read_chain

pytestmark = pytest.mark.opencl


def diagnose(*args: str) -> subprocess.CompletedProcess:
    code = "from hawkes_cli.cli import diagnose_main; diagnose_main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=120)  # fmt: skip


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("diag")
    truth = Params(mu0=0.5, tau_t=40.0, xi0=0.5, sigma_x=0.2, sigma_t=4.0)
    save_events(simulate(truth, model=1, n_background=300, t_end=150.0, seed=2), tmp / "ev.h5")
    cfg = {
        "data": {"events": str(tmp / "ev.h5")},
        "model": {"kind": 1},
        "sampler": {"iterations": 400, "warmup": 100, "seed": 4},
        "chains": {"count": 2},
        "engine": {"backend": "opencl", "precision": "float64"},
        "output": {"run_dir": str(tmp / "run"), "commit_every": 50},
    }
    (tmp / "c.yaml").write_text(yaml.safe_dump(cfg))
    config = load_config(tmp / "c.yaml")
    for k in range(2):
        run_chain(config, k)
    return config.output.run_dir


def test_json_matches_arviz_on_the_chain_files(run_dir):
    import arviz as az

    proc = diagnose(str(run_dir), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    rows = {r["name"]: r for r in out["parameters"]}
    draws = [read_chain(RunDir(run_dir).chain_path(k)).draws for k in range(2)]
    x = np.stack([d["sigma_x"][d["warmup"] == 0] for d in draws])
    assert x.shape == (2, 300)
    assert rows["sigma_x"]["rhat"] == pytest.approx(float(az.rhat(x, method="rank")), rel=1e-9)
    assert rows["sigma_x"]["ess_bulk"] == pytest.approx(float(az.ess(x, method="bulk")), rel=1e-9)
    assert rows["sigma_x"]["median"] == pytest.approx(float(np.median(x)), rel=1e-12)
    # the reference is R's posterior (tests/test_posterior_reference.py); arviz departs from it
    # only at odd lengths and ties at the tail quantiles, so the tail ESS is checked against it
    from hawkes_cli.diagnostics import stats

    assert rows["sigma_x"]["ess_tail"] == pytest.approx(stats.ess_tail(x), rel=1e-9)
    assert rows["sigma_x"]["mcse_mean"] == pytest.approx(stats.mcse_mean(x), rel=1e-9)


def test_table_netcdf_and_plots(run_dir, tmp_path):
    proc = diagnose(str(run_dir), "--burn", "200", "--thin", "2", "--netcdf",
                    str(tmp_path / "post.nc"), "--plots", str(tmp_path / "plots"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "sigma_x" in proc.stdout and "R-hat" in proc.stdout
    assert (tmp_path / "post.nc").stat().st_size > 0
    pngs = sorted(p.name for p in (tmp_path / "plots").glob("*.png"))
    assert pngs == ["posterior.png", "rank.png", "trace.png"]


def test_errors_are_one_line(run_dir, tmp_path):
    # a --burn beyond the run leaves nothing: a clear error, as is a missing run directory
    proc = diagnose(str(run_dir), "--burn", "10000")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error:") and "Traceback" not in proc.stderr
    missing = diagnose(str(tmp_path / "nope"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1


def test_events_that_are_not_the_runs_are_not_read(run_dir, tmp_path):
    """A missing --events file is an error; an events file whose content is not what the chain
    files record is not read: its edge and tie checks would describe other data. Named by the
    user (--events, --county) it is an error; found through the config, a warning."""
    missing = diagnose(str(run_dir), "--events", str(tmp_path / "nothere.h5"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert missing.stderr.startswith("error: --events ") and "no such file" in missing.stderr
    other = tmp_path / "other.h5"
    truth = Params(mu0=0.5, tau_t=40.0, xi0=0.5, sigma_x=0.2, sigma_t=4.0)
    save_events(simulate(truth, model=1, n_background=50, t_end=30.0, seed=9), other)
    named = diagnose(str(run_dir), "--events", str(other))
    assert named.returncode == 2 and named.stderr.count("\n") == 1
    assert "is not the events the chains ran on" in named.stderr
    ok = diagnose(str(run_dir))
    assert ok.returncode == 0 and "edge:" in ok.stdout and "not the events" not in ok.stdout
    # the run's own file replaced by other data (a copy of the run pointing at it)
    config = RunDir(run_dir).load_config()
    events = config.data.events
    saved = events.read_bytes()
    try:
        events.write_bytes(other.read_bytes())
        found = diagnose(str(run_dir))
    finally:
        events.write_bytes(saved)
    assert found.returncode == 0, found.stderr
    assert "WARN  " in found.stdout and "is not the events the chains ran on" in found.stdout
    assert "edge:" not in found.stdout  # nothing computed on the other data


def test_one_draw_per_chain_exports_without_a_library_warning(run_dir, tmp_path):
    # arviz warns "More chains (2) than draws (1)"; the verdicts already say there are too few
    proc = diagnose(str(run_dir), "--burn", "399", "--netcdf", str(tmp_path / "one.nc"))
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr and (tmp_path / "one.nc").is_file()


def test_outputs_and_options_are_checked_before_the_analysis(run_dir, tmp_path):
    """Each mistake: exit 2, one `error:` line, no table on stdout (the analysis, which can
    take minutes with --cut-check, did not run) and nothing written."""
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    cases = [
        (["--netcdf", str(tmp_path / "afile" / "x.nc")], "afile is a file, not a folder"),
        (["--netcdf", str(tmp_path / "adir")], "it is a folder, not a file"),
        (["--plots", str(tmp_path / "afile")], "it is a file, not a folder"),
        (["--gof", str(tmp_path / "afile")], "it is a file, not a folder"),
        (["--gof", str(tmp_path / "g"), "--gof-draws", "0"], "--gof-draws must be >= 1"),
        (["--gof", str(tmp_path / "g"), "--date", "banana"], "neither a number nor an ISO"),
    ]
    for args, says in cases:
        proc = diagnose(str(run_dir), *args)
        assert proc.returncode == 2 and proc.stdout == "", (args, proc.stdout[:200])
        assert proc.stderr.count("\n") == 1 and says in proc.stderr, (args, proc.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile"]
