"""The console scripts as a user runs them: outputs, error lines and exit codes, lazy imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hawkes_cli.data import EventData, load_events, save_events
from hawkes_cli.engine import make_likelihood
from hawkes_cli.model import PARAM_NAMES, Params
from hawkes_cli.simulate import simulate
from tests.conftest import HAVE_OPENCL, clean_env

BIN = Path(sys.executable).parent
P = Params(mu0=0.45, tau_t=21.0, xi0=0.55, sigma_x=0.15, sigma_t=4.0)
PARAM_ARGS = [a for name, v in P.as_dict().items() for a in ("--param", f"{name}={v!r}")]


def script(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"console script {name} not installed next to {sys.executable}")
    return str(path)


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
        cwd=cwd,
    )


def assert_one_error_line(proc: subprocess.CompletedProcess, code: int | None = None) -> str:
    """The CLI's contract for user mistakes; returns the message."""
    assert proc.returncode != 0, proc.stdout
    if code is not None:
        assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{proc.stderr}"
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """A simulated model-1 events file (HDF5 with attrs) and its in-process reference value."""
    root = tmp_path_factory.mktemp("cli")
    data = simulate(P, model=1, n_background=600, t_end=200.0, seed=7)
    path = root / "sim.h5"
    save_events(data, path)
    back = load_events(path)
    area = float(back.attrs["area"])
    assert area == 100.0
    value = make_likelihood(back, model=1, area=area, engine="reference").loglik(P)
    return path, value, back.n


@pytest.fixture(scope="module")
def csv_file(sim, tmp_path_factory):
    path = tmp_path_factory.mktemp("cli-csv") / "sim.csv"
    save_events(load_events(sim[0]), path)
    return path


# --------------------------------------------------------------------------- loglik values
def test_loglik_json_reference(sim):
    path, want, n = sim
    proc = run(script("hawkes-run"), "loglik", path, "--engine", "reference", *PARAM_ARGS, "--json")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    out = json.loads(lines[0])
    assert out["loglik"] == want  # same engine, same data: bit for bit
    assert out["n"] == n
    assert out["seconds"] > 0
    assert out["ranks"] == 1
    assert out["params"] == P.as_dict()


def test_loglik_text_default_engine(sim):
    path, want, n = sim
    proc = run(script("hawkes-run"), "loglik", path, *PARAM_ARGS)
    if proc.returncode == 5 and not HAVE_OPENCL:  # with a device, exit 5 is a broken kernel
        pytest.skip(f"no OpenCL device: {proc.stderr}")
    assert proc.returncode == 0, proc.stderr
    fields = dict(line.split(None, 1) for line in proc.stdout.strip().splitlines())
    assert set(fields) == {"loglik", "seconds", "n", "path"}
    assert "trigger: pair sum (exact)" in fields["path"]
    assert float(fields["loglik"]) == pytest.approx(want, rel=1e-11)  # printed with 12 digits
    assert int(fields["n"]) == n
    assert float(fields["seconds"]) > 0


@pytest.mark.opencl
def test_loglik_opencl_float32_json(sim):
    path, want, n = sim
    proc = run(
        script("hawkes-run"), "loglik", path, "--precision", "float32", *PARAM_ARGS, "--json"
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["precision"] == "float32" and out["engine"] == "opencl"
    assert abs(out["loglik"] - want) <= 1e-6 * n + 1e-2
    assert out["loglik"] != want


@pytest.mark.opencl
def test_loglik_forced_pair_sum_background_and_truncation(sim):
    """--background pairs and --tolerance: the path says what ran; values within the bound."""
    path, want, _ = sim
    proc = run(
        script("hawkes-run"), "loglik", path, "--precision", "float64", "--background", "pairs",
        "--tolerance", "0.01", *PARAM_ARGS, "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert "background: pair sum (forced" in out["path"]
    assert "trigger: " in out["path"] and out["tolerance"] == 0.01
    assert abs(out["loglik"] - want) <= out["error_bound"] + 1e-10 * abs(want)
    assert out["error_bound"] <= 0.01  # nats


def test_loglik_nan_is_a_device_error_not_a_number(sim, monkeypatch, capsys):
    """A NaN log-likelihood (what a broken device, e.g. a simulator picked by mistake, gave
    with exit 0) is an error line naming the remedy and a non-zero exit."""
    import dataclasses

    from hawkes_cli.cli import run_main
    from hawkes_cli.engine.base import Likelihood

    real = Likelihood.evaluate

    def nan_evaluate(self, p):
        return dataclasses.replace(real(self, p), loglik=float("nan"))

    monkeypatch.setattr(Likelihood, "evaluate", nan_evaluate)
    argv = ["hawkes-run", "loglik", str(sim[0]), "--engine", "opencl", "--device", "cpu"]
    monkeypatch.setattr(sys, "argv", [*argv, *PARAM_ARGS])
    with pytest.raises(SystemExit) as stop:
        run_main()
    assert stop.value.code != 0
    err = capsys.readouterr().err
    assert err.startswith("error: the log-likelihood is NaN") and "devices --check" in err


def test_loglik_csv_with_area_and_window(sim, csv_file):
    path, _, n = sim
    data = load_events(path)
    T = float(data.time[-1]) + 10.0
    want = make_likelihood(data, model=1, area=250.0, engine="reference", window_end=T).loglik(P)
    proc = run(
        script("hawkes-run"), "loglik", csv_file, "--engine", "reference", "--area", "250",
        "--window-end", repr(T), *PARAM_ARGS, "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["loglik"] == pytest.approx(want, rel=1e-13)
    assert out["n"] == n


def test_python_m_entry_point(sim):
    path, want, _ = sim
    proc = run(
        sys.executable, "-m", "hawkes_cli", "run", "loglik", path, "--engine", "reference",
        *PARAM_ARGS, "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["loglik"] == want
    usage = run(sys.executable, "-m", "hawkes_cli", "nosuch")
    assert usage.returncode == 2
    assert "usage" in usage.stderr


# --------------------------------------------------------------------------- devices
@pytest.mark.opencl
def test_devices_lists_pocl_with_fp64():
    proc = run(script("hawkes-run"), "devices")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].split()[:3] == ["id", "kind", "fp64"]
    pocl = [ln for ln in lines[1:] if "Portable Computing Language" in ln]
    assert pocl, proc.stdout
    assert any(ln.split()[2] == "yes" for ln in pocl)
    listing = json.loads(run(script("hawkes-run"), "devices", "--json").stdout)
    entries = [d for d in listing if d["platform"] == "Portable Computing Language"]
    assert entries and any(d["float64"] is True for d in entries)
    assert all(d["ident"] == f"{d['platform_index']}:{d['device_index']}" for d in listing)
    # a device spec in the environment that names none of them: the listing, and a warning
    proc = subprocess.run([script("hawkes-run"), "devices"], capture_output=True, text=True,
                          timeout=120, env=clean_env(HAWKES_OPENCL_DEVICE="9:x"))  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip().splitlines()[0].split()[0] == "id"
    assert proc.stderr.startswith("warning: HAWKES_OPENCL_DEVICE=9:x matches none of these")
    proc = subprocess.run([script("hawkes-run"), "devices"], capture_output=True, text=True,
                          timeout=120, env=clean_env(HAWKES_OPENCL_DEVICE="cpu"))  # fmt: skip
    assert proc.returncode == 0 and proc.stderr == ""


# --------------------------------------------------------------------------- user mistakes
def _params_without(name):
    return [a for n, v in P.as_dict().items() if n != name for a in ("--param", f"{n}={v!r}")]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        pytest.param(_params_without("sigma_t"), "missing parameter(s) sigma_t", id="missing"),
        pytest.param([*PARAM_ARGS, "--param", "sigma_y=1"], "sigma_y", id="unknown"),
        pytest.param([*_params_without("xi0"), "--param", "xi0=0"], "xi0", id="zero"),
        pytest.param([*_params_without("tau_t"), "--param", "tau_t=-3"], "tau_t", id="negative"),
        pytest.param([*_params_without("mu0"), "--param", "mu0=nan"], "mu0", id="nan"),
        pytest.param([*_params_without("mu0"), "--param", "mu0=abc"], "not a number", id="text"),
        pytest.param([*PARAM_ARGS, "--param", "mu0=1"], "mu0 given twice", id="repeated"),
        pytest.param([*_params_without("mu0"), "--param", "mu0"], "NAME=VALUE", id="no-equals"),
    ],
)
def test_bad_parameters(sim, extra, needle):
    proc = run(script("hawkes-run"), "loglik", sim[0], "--engine", "reference", *extra)
    msg = assert_one_error_line(proc, code=2)
    assert needle in msg
    if "sigma_y" in needle:  # the message lists the valid names
        for name in PARAM_NAMES:
            assert name in msg


@pytest.mark.parametrize(
    "extra", [["--precision", "float32"], ["--device", "banana"], ["--tolerance", "0.5"]]
)
def test_reference_engine_refuses_the_opencl_options(sim, extra):
    proc = run(script("hawkes-run"), "loglik", sim[0], "--engine", "reference", *PARAM_ARGS,
               *extra)  # fmt: skip
    msg = assert_one_error_line(proc, code=2)
    assert f"{extra[0]} set(s) the OpenCL engine" in msg and "--engine opencl" in msg


def test_reference_engine_takes_the_opencl_options_that_say_what_it_does(sim):
    # float64, exact, pair-sum background: what the reference computes anyway
    proc = run(script("hawkes-run"), "loglik", sim[0], "--engine", "reference", *PARAM_ARGS,
               "--precision", "float64", "--tolerance", "0", "--background", "pairs")  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_missing_file(tmp_path):
    proc = run(script("hawkes-run"), "loglik", tmp_path / "nope.h5", "--engine", "reference",
               *PARAM_ARGS)  # fmt: skip
    msg = assert_one_error_line(proc, code=3)
    assert "nope.h5" in msg and "not found" in msg


def test_nan_in_events_file(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("time,x,y\n0.5,1,1\n1.5,2,2\n2.5,nan,3\n3.5,4,4\n")
    proc = run(script("hawkes-run"), "loglik", path, "--engine", "reference", "--area", "10",
               *PARAM_ARGS)  # fmt: skip
    msg = assert_one_error_line(proc, code=3)
    assert "'x'" in msg and "line 4" in msg


def test_model2_without_density(sim):
    proc = run(script("hawkes-run"), "loglik", sim[0], "--model", "2", "--engine", "reference",
               *PARAM_ARGS)  # fmt: skip
    msg = assert_one_error_line(proc, code=3)
    assert "density" in msg


def test_csv_needs_area(csv_file):
    proc = run(script("hawkes-run"), "loglik", csv_file, "--engine", "reference", *PARAM_ARGS)
    msg = assert_one_error_line(proc, code=2)
    assert "--area" in msg


@pytest.mark.parametrize("area", ["0", "-2", "nan"])
def test_bad_area(csv_file, area):
    proc = run(script("hawkes-run"), "loglik", csv_file, "--engine", "reference",
               f"--area={area}", *PARAM_ARGS)  # fmt: skip
    msg = assert_one_error_line(proc, code=2)
    assert "--area" in msg


def test_infinite_area_rejected(csv_file):
    proc = run(script("hawkes-run"), "loglik", csv_file, "--engine", "reference",
               "--area=inf", *PARAM_ARGS)  # fmt: skip
    assert_one_error_line(proc, code=2)


def test_window_end_before_last_event(sim):
    proc = run(script("hawkes-run"), "loglik", sim[0], "--engine", "reference",
               "--window-end", "1.0", *PARAM_ARGS)  # fmt: skip
    msg = assert_one_error_line(proc, code=2)
    assert "window" in msg


def test_window_end_nan(sim):
    proc = run(script("hawkes-run"), "loglik", sim[0], "--engine", "reference",
               "--window-end", "nan", *PARAM_ARGS)  # fmt: skip
    assert_one_error_line(proc)


@pytest.mark.opencl
def test_bad_device(sim):
    proc = run(script("hawkes-run"), "loglik", sim[0], "--device", "no-such-device", *PARAM_ARGS)
    msg = assert_one_error_line(proc, code=5)
    assert "no-such-device" in msg and "available" in msg


def test_diagnose_of_a_run_dir_without_chains(tmp_path):
    proc = run(script("hawkes-diagnose"), tmp_path)
    msg = assert_one_error_line(proc, code=2)
    assert "no chain files" in msg


def test_click_usage_error_has_no_traceback(sim):
    proc = run(script("hawkes-run"), "loglik", sim[0], "--model", "3", *PARAM_ARGS)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "--model" in proc.stderr


@pytest.mark.parametrize("jobs", ["0", "-3"])
def test_local_jobs_below_one_is_refused(tmp_path, jobs):
    (tmp_path / "c.yaml").write_text("data: {events: ev.h5}\n")
    proc = run(script("hawkes-run"), "local", str(tmp_path / "c.yaml"), "--jobs", jobs)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"Invalid value for '--jobs': {jobs} is not in the range x>=1" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_prep_output_paths_are_checked_before_the_work(tmp_path):
    c = "previous_day_admission_"
    hhs = tmp_path / "hhs.csv"
    hhs.write_text(
        f"hospital_pk,collection_week,fips_code,{c}adult_covid_confirmed_7_day_sum,"
        f"{c}pediatric_covid_confirmed_7_day_sum\nA,2021/01/08,01001,5,0\n"
    )
    (tmp_path / "afile").write_text("x")
    base = [script("hawkes-prep"), "hhs", str(hhs), "--n", "0", "--locations", "centroid"]
    cases = [
        (["--out", str(tmp_path / "afile" / "o.h5")], "afile is a file, not a folder"),
        (["--out", str(tmp_path)], "it is a folder, not a file"),
        (["--out", str(tmp_path / "o.h5"), "--polygons-out", str(tmp_path / "afile" / "p.gpkg")],
         "afile is a file, not a folder"),
        (["--out", str(tmp_path / "o.h5"), "--polygons-out", str(tmp_path / "o.h5")],
         "is also the events output"),
    ]  # fmt: skip
    for args, says in cases:
        msg = assert_one_error_line(run(*base, *args), code=2)
        assert says in msg, (args, msg)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "hhs.csv"]


def test_a_missing_polygon_file_is_found_before_the_chains_start(sim, tmp_path):
    # data.counties is read by every chain (the study region) even without redraws
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"data: {{events: {sim[0]}, counties: {tmp_path / 'nothere.gpkg'}}}\n"
        "model: {kind: 1, edge: censored}\nsampler: {iterations: 20, warmup: 5}\n"
        f"engine: {{backend: reference}}\noutput: {{run_dir: {tmp_path / 'run'}}}\n"
    )
    for command in ("validate", "local"):
        msg = assert_one_error_line(run(script("hawkes-run"), command, str(cfg)), code=3)
        assert "nothere.gpkg: county polygon file not found (data.counties)" in msg
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("HAWKES_DRAW_AHEAD", "banana", "HAWKES_DRAW_AHEAD='banana'"),
        ("HAWKES_START_WAIT", "soon", "HAWKES_START_WAIT='soon'"),
        ("HAWKES_PROFILE", "{tmp}/afile/p.jsonl", "HAWKES_PROFILE="),
    ],
)
def test_bad_environment_variables_are_one_error_before_the_chains(sim, tmp_path, name, value,
                                                                     says):  # fmt: skip
    (tmp_path / "afile").write_text("x")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"data: {{events: {sim[0]}}}\nmodel: {{kind: 1}}\nsampler: {{iterations: 20, "
        f"warmup: 5}}\nengine: {{backend: reference}}\noutput: {{run_dir: {tmp_path / 'run'}}}\n"
    )
    proc = subprocess.run(
        [script("hawkes-run"), "local", str(cfg)], capture_output=True, text=True, timeout=120,
        env=clean_env(**{name: value.format(tmp=tmp_path)}),
    )  # fmt: skip
    msg = assert_one_error_line(proc, code=2)
    assert says in msg and "unset it" in msg
    assert not (tmp_path / "run").exists()


def test_internal_node_command_is_hidden_but_callable():
    listing = run(script("hawkes-run"), "--help")
    assert listing.returncode == 0, listing.stderr
    commands = {line.split()[0] for line in listing.stdout.split("Commands:")[1].splitlines()
                if line.strip()}  # fmt: skip
    assert "node" not in commands
    assert {"chain", "local", "loglik", "plan", "submit", "status", "cancel"} <= commands
    node = run(script("hawkes-run"), "node", "--help")
    assert node.returncode == 0, node.stderr
    assert "--node" in node.stdout and "--ranks" in node.stdout


def test_choices_come_from_vocab():
    from hawkes_cli import cli, vocab

    options = {p.name: p for p in cli.run.commands["loglik"].params}
    assert set(options["engine_name"].type.choices) == set(vocab.ENGINES)
    assert tuple(options["precision"].type.choices) == vocab.PRECISIONS
    assert tuple(options["background"].type.choices) == vocab.BACKGROUNDS
    assert tuple(options["model"].type.choices) == tuple(map(str, vocab.MODELS))


# --------------------------------------------------------------------------- hawkes-prep
def test_prep_simulate_writes_true_params(tmp_path):
    out = tmp_path / "prep.h5"
    proc = run(
        script("hawkes-prep"), "simulate", "--out", out, "--param", "xi0=0.3",
        "--param", "sigma_t=2.5", "--n-background", "300", "--t-end", "100",
        "--bounds", "0", "4", "1", "6", "--seed", "5",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = load_events(out)
    assert data.attrs["true_params"] == {
        "mu0": 0.5, "tau_t": 30.0, "xi0": 0.3, "sigma_x": 0.2, "sigma_t": 2.5,
    }  # fmt: skip
    assert data.attrs["area"] == pytest.approx(4.0 * 5.0)
    assert data.attrs["seed"] == 5
    assert f"wrote {data.n} events" in proc.stdout
    assert data.n >= 300
    assert np.all((data.x >= 0) & (data.x <= 4) & (data.y >= 1) & (data.y <= 6))
    assert np.all((data.time >= 0) & (data.time < 100))
    # the written file is a valid input of hawkes-run, which finds the area in the attrs
    proc = run(script("hawkes-run"), "loglik", out, "--engine", "reference", *PARAM_ARGS,
               "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    want = make_likelihood(data, model=1, area=20.0, engine="reference").loglik(P)
    assert json.loads(proc.stdout)["loglik"] == want


def test_prep_simulate_model2_has_density(tmp_path):
    out = tmp_path / "m2.h5"
    proc = run(script("hawkes-prep"), "simulate", "--out", out, "--model", "2",
               "--n-background", "200", "--integer-days", "--seed", "1")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = load_events(out, need_density=True)
    assert data.density is not None and np.all(data.density > 0)
    assert data.attrs["model"] == 2
    assert np.all(data.time == np.floor(data.time))


def test_prep_simulate_bad_param(tmp_path):
    proc = run(script("hawkes-prep"), "simulate", "--out", tmp_path / "x.h5",
               "--param", "xi0=-1")  # fmt: skip
    assert_one_error_line(proc, code=2)
    assert not (tmp_path / "x.h5").exists()
    # positive but beyond what the engines evaluate: a file no run could fit
    proc = run(script("hawkes-prep"), "simulate", "--out", tmp_path / "x.h5",
               "--param", "sigma_x=1e-300")  # fmt: skip
    msg = assert_one_error_line(proc, code=2)
    assert "sigma_x=1e-300 is outside the range [1e-15, 1e+15]" in msg
    assert not (tmp_path / "x.h5").exists()


# --------------------------------------------------------------------------- lazy imports
LAZY = """
import sys
from hawkes_cli import cli
for group, args in ((cli.run, ["--help"]), (cli.run, ["loglik", "--help"]),
                    (cli.prep, ["--help"]), (cli.run, ["devices", "--help"])):
    code = group.main(args, prog_name="hawkes", standalone_mode=False)
    assert code in (0, None), code
print("HEAVY", sorted(m for m in ("pyopencl", "mpi4py") if m in sys.modules))
"""


def test_help_imports_no_opencl_or_mpi():
    proc = run(sys.executable, "-c", LAZY)
    assert proc.returncode == 0, proc.stderr
    assert "Usage:" in proc.stdout
    assert "HEAVY []" in proc.stdout, proc.stdout


SERIAL_REFERENCE = """
import json, sys
from hawkes_cli import cli
args = ["loglik", sys.argv[1], "--engine", "reference", "--json", *sys.argv[2:]]
cli.run.main(args, prog_name="hawkes-run", standalone_mode=False)
print("HEAVY", sorted(m for m in ("pyopencl", "mpi4py") if m in sys.modules))
"""


def test_serial_reference_run_imports_no_opencl_or_mpi(sim):
    """Serial use never initialises MPI; the reference engine needs no OpenCL driver."""
    path, want, _ = sim
    proc = run(sys.executable, "-c", SERIAL_REFERENCE, path, *PARAM_ARGS)
    assert proc.returncode == 0, proc.stderr
    first, last = proc.stdout.strip().splitlines()
    assert json.loads(first)["loglik"] == want
    assert last == "HEAVY []"


def test_hdf5_roundtrip_used_by_cli_is_exact(sim):
    """The CLI reads what save_events wrote: same arrays as the simulation."""
    path, _, n = sim
    again = simulate(P, model=1, n_background=600, t_end=200.0, seed=7)
    back = load_events(path)
    assert isinstance(back, EventData) and back.n == again.n == n
    np.testing.assert_array_equal(back.time, again.time)
    np.testing.assert_array_equal(back.x, again.x)
    np.testing.assert_array_equal(back.y, again.y)


@pytest.mark.opencl
def test_loglik_tolerance_reports_path_and_bound(sim):
    exact = json.loads(run(script("hawkes-run"), "loglik", sim[0], "--precision", "float64",
                           "--json", *PARAM_ARGS).stdout)  # fmt: skip
    proc = run(script("hawkes-run"), "loglik", sim[0], "--precision", "float64", "--tolerance",
               "0.01", "--json", *PARAM_ARGS)  # fmt: skip
    fast = json.loads(proc.stdout)
    assert "trigger: pair sum (exact)" in exact["path"] and exact["error_bound"] == 0.0
    assert "trigger:" in fast["path"] and fast["tolerance"] == 0.01
    assert abs(fast["loglik"] - exact["loglik"]) <= fast["error_bound"] + 1e-9 * abs(
        exact["loglik"]
    )
    assert fast["error_bound"] <= 0.01  # nats, absolute


def test_an_unmapped_os_error_is_one_line_naming_the_file(capsys, monkeypatch):
    """The edge's safety net: an OSError no module turned into a HawkesError (a full disk, a
    permission) is one ``error:`` line with the file's name and exit 1, no traceback."""
    import click

    from hawkes_cli.cli.options import run_guarded

    @click.command()
    def failing() -> None:
        raise PermissionError(13, "Permission denied", "/data/chains/chain-00.h5")

    monkeypatch.setattr(sys, "argv", ["hawkes-run"])
    with pytest.raises(SystemExit) as exc:
        run_guarded(failing)()
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "error: Permission denied: /data/chains/chain-00.h5; check the path and the disk"
    ]
