"""``hawkes-run loglik`` under ``mpiexec -n G``: rows split over ranks, one JSON line from rank 0,
the same log-likelihood as the serial in-process reference engine (float64 reduction)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hawkes_cli.data import load_events, save_events
from hawkes_cli.engine import make_likelihood
from hawkes_cli.model import Params
from hawkes_cli.simulate import DensityGrid, simulate

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


def _env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "PMI_", "PMIX_", "OMPI_", "MPI_LOCAL", "HAWKES_"))
    }
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def mpirun_loglik(path: Path, ranks: int, model: int, engine: str) -> subprocess.CompletedProcess:
    cmd = [str(MPIEXEC), "-n", str(ranks), sys.executable, "-m", "hawkes_cli", "run", "loglik"]
    cmd += [str(path), "--model", str(model), "--engine", engine, "--precision", "float64"]
    for name, value in EVAL.as_dict().items():
        cmd += ["--param", f"{name}={value!r}"]
    cmd.append("--json")
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env=_env(), cwd=path.parent
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
    assert out["loglik"] == pytest.approx(want, rel=1e-12, abs=0)


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
from hawkes_cli.runner import StopFlag, build_chain

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
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=_env(),
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
