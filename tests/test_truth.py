"""The simulated truth beside the posterior (hawkes-diagnose on simulated events)."""

from __future__ import annotations

import numpy as np
from click.testing import CliRunner

from hawkes_cli.cli.diagnose_cmd import diagnose as diagnose_cmd
from hawkes_cli.data import save_events
from hawkes_cli.diagnostics import diagnose
from hawkes_cli.diagnostics.records import SummaryRow
from hawkes_cli.diagnostics.truth import GENERATING, check_truth, format_truth
from hawkes_cli.model import Params
from hawkes_cli.simulate import simulate

from .test_diagnostics import PARAMS, make_config, write_chain


def row(name: str, median: float, lo: float, hi: float, unit: str = "") -> SummaryRow:
    nan = float("nan")
    return SummaryRow(
        name, name, unit, "parameter", median, lo, hi, median, nan, nan, nan, nan, nan
    )


def test_generating_parameters_are_compared_and_the_others_explained():
    rows = [
        row("mu0", 1.2, 0.5, 1.7),
        row("tau_t", 300.0, 6.0, 480.0, "days"),
        row("xi0", 0.50, 0.48, 0.53),
        row("sigma_x", 0.19, 0.185, 0.195, "coord units"),
        row("sigma_t", 5.0, 4.5, 5.1, "days"),
    ]
    truth = {"mu0": 0.5, "tau_t": 30.0, "xi0": 0.5, "sigma_x": 0.2, "sigma_t": 5.0}
    check = check_truth({"true_params": truth, "integer_days": False}, rows)
    assert check is not None
    assert [r.name for r in check.rows] == list(GENERATING)
    assert [r.covered for r in check.rows] == [True, False, True]  # 0.2 > 0.195
    assert check.outside == ("sigma_x",)
    assert check.unrecoverable == ("mu0", "tau_t")
    text = format_truth(check)
    assert "sigma_x    coord units       0.2     0.19  [0.185, 0.195]  truth OUTSIDE" in text
    assert "mu0, tau_t: not compared" in text
    assert "once in 20" in text and "floored" not in text
    assert "floored to whole days" in format_truth(
        check_truth({"true_params": truth, "integer_days": True}, rows)
    )


def test_real_data_have_no_truth():
    assert check_truth({}, [row("xi0", 1, 0, 2)]) is None
    assert check_truth({"true_params": {}}, [row("xi0", 1, 0, 2)]) is None


def test_diagnose_shows_the_truth_of_simulated_events(tmp_path):
    """End to end: simulated events on disk and chains whose draws sit at the truth, except
    sigma_x at twice it: the table shows the truth inside the interval, and sigma_x outside."""
    truth = {"mu0": 0.5, "tau_t": 30.0, "xi0": 0.5, "sigma_x": 0.2, "sigma_t": 5.0}
    events = simulate(Params(**truth), model=1, n_background=50, t_end=100.0, seed=3)
    save_events(events, tmp_path / "events.h5")
    config = make_config(tmp_path)
    rng = np.random.default_rng(5)
    centre = dict(truth, sigma_x=0.4)
    for c in range(2):
        values = {p: centre[p] * np.exp(0.05 * rng.standard_normal(400)) for p in PARAMS}
        write_chain(tmp_path, c, values, config)
    report = diagnose(tmp_path)
    assert report.truth is not None
    got = {r.name: r.covered for r in report.truth.rows}
    assert got == {"xi0": True, "sigma_x": False, "sigma_t": True}
    result = CliRunner().invoke(diagnose_cmd, [str(tmp_path)])
    assert "simulated truth" in result.output, result.output
    assert "truth OUTSIDE" in result.output and "mu0, tau_t: not compared" in result.output
