"""A NaN or infinite log-likelihood is never printed with exit 0, and events whose values would
overflow the engines' float32 pair terms are refused when read, naming the row."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hawkes_cli.data import load_events
from hawkes_cli.errors import EventsError
from hawkes_cli.vocab import DATA_LIMIT

PARAMS = ("--param", "mu0=1", "--param", "tau_t=10", "--param", "xi0=0.5", "--param",
          "sigma_x=1", "--param", "sigma_t=2")  # fmt: skip


def loglik(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hawkes_cli", "run", "loglik", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(("column", "value"), [("x", "1e308"), ("y", "-2e15"), ("time", "1e300")])
def test_values_beyond_the_data_limit_are_refused_with_their_row(tmp_path, column, value):
    rows = {"time": ["0", "1", "2"], "x": ["1", "2", "3"], "y": ["1", "2", "3"]}
    rows[column][1] = value
    path = tmp_path / "ev.csv"
    path.write_text(
        "time,x,y\n" + "".join(f"{a},{b},{c}\n" for a, b, c in zip(*rows.values(), strict=True))
    )
    with pytest.raises(EventsError, match=rf"column '{column}', line 3: .*beyond"):
        load_events(path)
    proc = loglik(str(path), "--area", "10", *PARAMS)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert "loglik" not in proc.stdout


def test_a_density_beyond_the_limit_is_refused_for_model_2(tmp_path):
    path = tmp_path / "ev.csv"
    path.write_text("time,x,y,density\n0,1,1,5\n1,2,2,1e308\n2,3,1,5\n")
    with pytest.raises(EventsError, match="line 3: value 1e\\+308 is not a positive finite"):
        load_events(path, need_density=True)
    path.write_text(f"time,x,y,density\n0,1,1,5\n1,2,2,{DATA_LIMIT}\n2,3,1,{1 / DATA_LIMIT}\n")
    assert load_events(path, need_density=True).n == 3  # the limits themselves are data


@pytest.mark.opencl
def test_an_infinite_log_likelihood_is_an_error_not_an_answer(tmp_path):
    path = tmp_path / "ev.csv"
    path.write_text("time,x,y\n0,1,1\n1,2,2\n2,3,1\n")
    ok = loglik(str(path), "--area", "10", *PARAMS)
    assert ok.returncode == 0 and ok.stdout.startswith("loglik ")
    bad = [a.replace("mu0=1", "mu0=1e308") for a in PARAMS]
    proc = loglik(str(path), "--area", "10", "--engine", "reference", *bad)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "mu0=1e+308 is outside the range" in proc.stderr and "would be -inf" in proc.stderr
    assert "loglik" not in proc.stdout
