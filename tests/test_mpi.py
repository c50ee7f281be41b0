"""``hawkes-run loglik`` under ``mpiexec -n G``: rows split over ranks, one JSON line from rank 0,
the same log-likelihood as the serial in-process reference engine (float64 reduction)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hawkes_cli.data import load_events, save_events
from hawkes_cli.engine import make_likelihood
from hawkes_cli.model import Params
from hawkes_cli.simulate import DensityGrid, simulate
from tests.conftest import clean_env

pytestmark = pytest.mark.mpi

BIN = Path(sys.executable).parent
MPIEXEC = BIN / "mpiexec"
TRUE = Params(mu0=0.5, tau_t=30.0, xi0=0.5, sigma_x=0.2, sigma_t=5.0)
# evaluated away from the truth, so nothing is special about the point
EVAL = Params(mu0=0.45, tau_t=21.0, xi0=0.55, sigma_x=0.15, sigma_t=4.0)
BOUNDS = (0.0, 10.0, 0.0, 10.0)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Three simulated events files: model 1 continuous, model 1 on days, model 2 with a grid."""
    if not MPIEXEC.exists():
        pytest.skip(f"no mpiexec next to {sys.executable} (pip install mpich mpi4py)")
    root = tmp_path_factory.mktemp("mpi-events")
    grid = DensityGrid.log_uniform(BOUNDS, 6, 5, 1.0, 400.0, seed=3)
    specs = {
        "m1": dict(model=1, n_background=1200, t_end=300.0, seed=1),
        "m1days": dict(model=1, n_background=1200, t_end=300.0, seed=2, integer_days=True),
        "m2": dict(model=2, n_background=1200, t_end=300.0, seed=4, grid=grid),
    }
    out = {}
    for name, kw in specs.items():
        data = simulate(TRUE, bounds=BOUNDS, **kw)
        assert 2000 <= data.n <= 4000, (name, data.n)
        path = root / f"{name}.h5"
        save_events(data, path)
        out[name] = path
    return out


_SERIAL: dict[tuple[str, int], tuple[float, int]] = {}


def serial_reference(path: Path, model: int) -> tuple[float, int]:
    """(loglik, n) from the in-process serial reference engine, read back from the file."""
    key = (str(path), model)
    if key not in _SERIAL:
        data = load_events(path, need_density=model == 2)
        lik = make_likelihood(data, model=model, area=float(data.attrs["area"]), engine="reference")
        _SERIAL[key] = (lik.loglik(EVAL), data.n)
    return _SERIAL[key]


def mpirun_loglik(
    path: Path, ranks: int, model: int, engine: str, *extra: str
) -> subprocess.CompletedProcess:
    cmd = [str(MPIEXEC), "-n", str(ranks), sys.executable, "-m", "hawkes_cli", "run", "loglik"]
    cmd += [str(path), "--model", str(model), "--engine", engine, "--precision", "float64"]
    cmd += extra
    for name, value in EVAL.as_dict().items():
        cmd += ["--param", f"{name}={value!r}"]
    cmd.append("--json")
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env=clean_env(), cwd=path.parent
    )


CASES = [
    ("m1", 1, "reference", 1),
    ("m1", 1, "reference", 2),
    ("m1", 1, "reference", 3),
    ("m1days", 1, "reference", 3),
    ("m2", 2, "reference", 2),
    ("m2", 2, "reference", 3),
    pytest.param("m1", 1, "opencl", 1, marks=pytest.mark.opencl),
    pytest.param("m1", 1, "opencl", 2, marks=pytest.mark.opencl),
    pytest.param("m1", 1, "opencl", 3, marks=pytest.mark.opencl),
    pytest.param("m1days", 1, "opencl", 2, marks=pytest.mark.opencl),
    pytest.param("m2", 2, "opencl", 2, marks=pytest.mark.opencl),
    pytest.param("m2", 2, "opencl", 3, marks=pytest.mark.opencl),
]


@pytest.mark.parametrize(("name", "model", "engine", "ranks"), CASES)
def test_loglik_over_ranks_matches_serial_reference(files, name, model, engine, ranks):
    path = files[name]
    want, n = serial_reference(path, model)
    proc = mpirun_loglik(path, ranks, model, engine)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one JSON line from rank 0, got:\n{proc.stdout}"
    out = json.loads(lines[0])
    assert {"loglik", "seconds", "n"} <= set(out)
    assert out["n"] == n
    assert isinstance(out["seconds"], float) and 0 < out["seconds"] < 60
    assert out["ranks"] == ranks  # really one MPI world, not G serial copies
    assert out["model"] == model and out["engine"] == engine
    assert out["params"] == EVAL.as_dict()
    # the OpenCL engine sums the background of continuous times (over LATTICE_FROM distinct
    # ones) on a time lattice: within its reported rigorous bound of the reference
    bound = out["background_bound"]
    assert bound < 1e-3 and (bound == 0 or engine == "opencl")
    assert abs(out["loglik"] - want) <= bound + 1e-12 * abs(want)


@pytest.mark.parametrize(
    ("engine", "ranks", "extra"),
    [
        ("reference", 3, ()),
        pytest.param("opencl", 2, (), marks=pytest.mark.opencl),
        pytest.param(
            "opencl",
            3,
            ("--tolerance", "0.05"),
            marks=pytest.mark.opencl,
        ),
    ],
)
def test_renormalized_loglik_over_ranks_matches_serial(files, engine, ranks, extra):
    """``model.edge: renormalized`` weights every source by its own mass, so every rank needs
    all N masses, not only its rows': the split sum is the serial reference's (the truncated
    trigger: within its reported bound)."""
    from hawkes_cli.regions import region_for

    data = load_events(files["m2"], need_density=True)
    want = make_likelihood(
        data, model=2, area=float(data.attrs["area"]), engine="reference",
        region=region_for(data), edge="renormalized",
    ).loglik(EVAL)  # fmt: skip
    assert abs(want - serial_reference(files["m2"], 2)[0]) > 1.0  # the masses matter here
    proc = mpirun_loglik(files["m2"], ranks, 2, engine, "--edge", "renormalized", *extra)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["ranks"] == ranks and out["edge"] == "renormalized"
    bound = out["background_bound"] + out.get("error_bound", 0.0)
    if extra:
        assert "trigger: truncation" in out["path"]
    assert abs(out["loglik"] - want) <= bound + 1e-11 * abs(want)


def test_files_have_ties_only_on_days(files):
    import numpy as np

    days = load_events(files["m1days"])
    cont = load_events(files["m1"])
    assert np.all(days.time == np.floor(days.time))
    assert np.unique(days.time).size < days.n // 4  # heavy ties across rank boundaries
    assert np.unique(cont.time).size == cont.n
    assert load_events(files["m2"], need_density=True).density is not None


_PROXY_SCRIPT = """
import json, sys
from hawkes_cli.config import load_config
from hawkes_cli.distributed import DistributedLikelihood, serve
from hawkes_cli.parallel import world_comm
from hawkes_cli.posterior import LogPosterior, to_theta
from hawkes_cli.runner import build_chain
from hawkes_cli.stop import StopFlag

config = load_config(sys.argv[1])
comm = world_comm()
setup = build_chain(config, 0, comm, StopFlag())
if comm.rank != 0:
    serve(setup.rank)
    sys.exit(0)
with DistributedLikelihood(setup.rank) as lik:
    post = LogPosterior.from_mapping(lik, config.priors)
    base = to_theta(json.loads(sys.argv[2]))
    out = [post.evaluate(base)]
    post.pin(base)
    for k in range(5):  # one move of each coordinate
        theta = base.copy()
        theta[k] += 0.1
        out.append(post.evaluate(theta))
    lik.redraw_locations()
    out.append(post.evaluate(base))
    saved = setup.rank.location_state
    lik.redraw_locations()
    out.append(post.evaluate(base))
    lik.restore(saved, None)  # the first draw again
    out.append(post.evaluate(base))
    stop = lik.boundary_stop()
print(json.dumps({"ranks": comm.size, "stop": stop, "passes": setup.rank.pair_passes,
                  "values": [[d.log_target, d.loglik, d.logprior] for d in out]}))
"""


def test_chain_posterior_over_two_ranks_gives_the_serial_values(files, tmp_path):
    """The log posterior through the broadcasting proxy (rank 1 replaying rank 0's calls:
    evaluations, pin, location redraws, restore, the stop agreement) equals the serial one."""
    import numpy as np
    import yaml

    config = tmp_path / "proxy.yaml"
    config.write_text(yaml.safe_dump({
        "data": {"events": str(files["m2"])},
        "model": {"kind": 2},
        "priors": {"xi0": {"gamma": [2.0, 3.0]}},
        "sampler": {"seed": 5, "resample_every": 10},
        "chains": {"count": 1, "gpus_per_chain": 2},
        "engine": {"backend": "reference"},
        "output": {"run_dir": str(tmp_path / "run")},
    }))  # fmt: skip
    script = tmp_path / "proxy.py"
    script.write_text(_PROXY_SCRIPT)
    args = [sys.executable, str(script), str(config), json.dumps(EVAL.as_dict())]
    runs = {}
    for ranks in (1, 2):
        cmd = [str(MPIEXEC), "-n", "2", *args] if ranks == 2 else args
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=clean_env(),
                              cwd=tmp_path)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        assert len(lines) == 1, proc.stdout  # rank 0 only
        runs[ranks] = json.loads(lines[0])
        assert runs[ranks]["ranks"] == ranks and runs[ranks]["stop"] is False
    serial, mpi = np.array(runs[1]["values"]), np.array(runs[2]["values"])
    assert np.all(np.isfinite(serial))
    np.testing.assert_allclose(mpi, serial, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(mpi[:, 2], serial[:, 2])  # the priors are rank 0's alone
    assert serial[-1].tolist() == serial[-3].tolist()  # restore repeats the first redraw
    assert mpi[-1].tolist() == mpi[-3].tolist()
    assert serial[6, 1] != serial[0, 1]  # the redraw moved the events
    # pins hold the current state: 2 + tau_t + sigma_x + sigma_t + 3 redraws (trigger only)
    assert runs[1]["passes"] == runs[2]["passes"] == 2 + 3 + 3


@pytest.mark.opencl
def test_tiered_chain_with_auto_start_over_two_ranks_gives_the_serial_chain(tmp_path):
    """The default sampler and start (``tiered``, ``initial: auto``) over ``mpiexec -n 2``:
    every evaluation of the mode search (on a subsample, and on the full data) and of the
    chain is collective, so the draws are the serial chain's.

    Tolerances: every accept decision, move count and pass count, and the start's evaluation
    counts, are compared exactly (as tests/test_runner.py compares the accept decisions and
    draws of an explicitly started chain). The parameters and log-likelihoods agree to
    rounding, not bit for bit: two ranks add their rows' partial sums in another order than
    one rank does (tests/test_runner.py allows 1e-12 relative on the log-likelihood for that),
    and with the fast start this rounding also reaches the start itself (the finite-difference
    curvature and Newton step at the mode, hence the over-dispersed start and the tiered
    sampler's covariance), from which every later state is a sum. Measured: 7e-13 relative at
    most over these 200 iterations; allowed: 1e-9, still far below any statistical difference
    (posterior sds are ~1e-2 relative) and far above rounding's growth over a short chain.
    """
    import numpy as np
    import yaml

    from hawkes_cli.config import load_config
    from hawkes_cli.rundir import RunDir
    from hawkes_cli.runner import run_chain
    from hawkes_cli.storage import read_chain
    from hawkes_cli.vocab import PARAM_NAMES

    if not MPIEXEC.exists():
        pytest.skip(f"no mpiexec next to {sys.executable} (pip install mpich mpi4py)")
    bounds = (0.0, 20.0, 0.0, 20.0)
    grid = DensityGrid.log_uniform(bounds, 8, 8, 1.0, 100.0, seed=3)
    truth = Params(mu0=0.5, tau_t=40.0, xi0=0.5, sigma_x=0.1, sigma_t=4.0)
    data = simulate(truth, model=1, n_background=400, t_end=200.0, bounds=bounds, seed=5,
                    grid=grid)  # fmt: skip
    events = tmp_path / "events.h5"
    save_events(data, events)
    assert data.n > 400  # the mode search runs on a subsample of 400 events

    def config(name: str, ranks: int) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({
            "data": {"events": str(events)},
            "model": {"kind": 1},
            "sampler": {"iterations": 200, "warmup": 100, "seed": 7, "resample_every": 40,
                        "n_cheap": 4, "start_subsample": 400},
            "chains": {"count": 1, "gpus_per_chain": ranks},
            "engine": {"backend": "opencl", "precision": "float64", "tolerance": 0.0},
            "output": {"run_dir": str(tmp_path / name), "commit_every": 50},
        }))  # fmt: skip
        return path

    serial = load_config(config("serial", 1))
    assert (serial.sampler.kind, serial.sampler.initial) == ("tiered", "auto")  # the defaults
    run_chain(serial, 0)
    path = config("mpi", 2)
    cmd = [str(MPIEXEC), "-n", "2", sys.executable, "-m", "hawkes_cli", "run", "-v", "chain"]
    proc = subprocess.run([*cmd, str(path), "--chain", "0"], capture_output=True, text=True,
                          timeout=300, env=clean_env(), cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "rank 1/2" in proc.stderr  # the second rank took rows, of both likelihoods:
    assert len(re.findall(r"rank 1/2: rows \d+\.\.\d+ of 400\b", proc.stderr)) == 1
    assert "on a subsample of 400 events" in proc.stderr

    def chain(cfg) -> tuple[dict, dict]:
        c = read_chain(RunDir(cfg.output.run_dir).chain_path(0))
        return c.draws, c.checkpoint["start"]

    (a, start_a), (b, start_b) = chain(serial), chain(load_config(path))
    for key in ("n_sub_evals", "n_full_evals", "hessian", "n_clipped"):
        assert start_b[key] == start_a[key], key
    for name in ("iteration", "accepted", "n_proposals", "n_accepted", "jump", "pair_passes"):
        np.testing.assert_array_equal(b[name], a[name], err_msg=name)
    for name in (*PARAM_NAMES, "loglik", "logprior"):
        np.testing.assert_allclose(b[name], a[name], rtol=1e-9, err_msg=name)
