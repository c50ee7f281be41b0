"""hawkes-diagnose weighs the model's systematic errors against xi0's posterior sd: the trigger
mass outside the study region and the offspring hidden by same-time ties.

References: the rectangle's mass in closed form (normal CDFs, written out here), the tie share
by numerical integration of the exponential delay over a uniform position in the tick.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import ndtr

from hawkes_cli.config import config_from_yaml_text
from hawkes_cli.data import EventData, save_events
from hawkes_cli.diagnostics import DiagnoseOptions, diagnose
from hawkes_cli.diagnostics.systematic import edge_share, tie_share
from hawkes_cli.engine.region import RectangleRegion
from hawkes_cli.model import Params
from hawkes_cli.simulate import simulate

from .test_diagnostics import WARMUP, write_chain

BOX = (0.0, 10.0, 0.0, 10.0)


def test_tie_share_matches_integration():
    """Whole days hide the offspring that fall in their parent's day: with the parent uniform
    in its day, P(delay < 1 - u) averaged over u, by quadrature."""
    for sigma_t in (0.7, 5.0, 97.0):
        want = quad(lambda u, s=sigma_t: -math.expm1(-(1.0 - u) / s), 0.0, 1.0)[0]
        t = np.floor(np.linspace(0.0, 50.0, 400))
        got, delta = tie_share(t, sigma_t)
        assert delta == 1.0
        assert got == pytest.approx(want, rel=1e-12)
    assert tie_share(np.linspace(0.0, 50.0, 400), 5.0) == (0.0, None)
    assert tie_share(np.array([1.0, 2.5, 2.5, 4.0]), 5.0)[1] == 1.5


def test_edge_share_on_a_rectangle():
    """The compensator-weighted share of the mass outside a rectangle, written out by hand."""
    rng = np.random.default_rng(2)
    n = 3000
    t = np.sort(rng.uniform(0, 100, n))
    x, y = rng.uniform(0, 10, n), rng.uniform(0, 10, n)
    events = EventData(t, x, y, np.full(n, 4.0))
    s, sigma_t = 0.6, 8.0
    m = (ndtr((10 - x) / s) - ndtr(-x / s)) * (ndtr((10 - y) / s) - ndtr(-y / s))
    w = -np.expm1(-(t[-1] - t) / sigma_t)
    want = np.sum(w * (1 - m)) / np.sum(w)
    got = edge_share(RectangleRegion(BOX), events, 1, s, sigma_t)
    assert got.share == pytest.approx(want, rel=1e-12)
    assert got.events == n
    two = edge_share(RectangleRegion(BOX), events, 2, 2 * s, sigma_t)  # s / sqrt(4) = s
    assert two.share == pytest.approx(want, rel=1e-12)


def _run(tmp_path, edge: str, *, integer_days: bool, sd: float):
    """A run on simulated rectangle events whose draws put xi0 at 0.5 with sd ``sd``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    p = Params(mu0=0.5, tau_t=30.0, xi0=0.5, sigma_x=0.4, sigma_t=2.0)
    data = simulate(
        p, model=1, n_background=400, t_end=60.0, seed=1, bounds=BOX, integer_days=integer_days
    )
    save_events(data, tmp_path / "events.h5")
    cfg = config_from_yaml_text(
        f"data: {{events: events.h5}}\nmodel: {{kind: 1, edge: {edge}}}\n"
        f"sampler: {{iterations: 100000, warmup: {WARMUP}}}\n",
        base_dir=tmp_path,
        where="test.yaml",
    )
    rng = np.random.default_rng(5)
    base = p.as_dict()
    run_dir = tmp_path / "run"
    for c in range(2):
        values = {k: v * np.exp(0.001 * rng.standard_normal(400)) for k, v in base.items()}
        values["xi0"] = 0.5 * np.exp(sd * rng.standard_normal(400))
        write_chain(run_dir, c, values, (cfg.to_yaml(), cfg.sha256))
    return run_dir


def _lines(report, code):
    return [v for v in report.verdicts if v.code == code]


def test_diagnose_warns_when_the_shift_exceeds_the_sd(tmp_path):
    """Uncorrected, with a narrow posterior: WARNINGs for edges and whole-day ties; the same
    run, corrected (edge: censored), only reports the edge share; a wide posterior (sd above
    the shift) gives ok lines; without --systematic there are none."""
    run = _run(tmp_path, "none", integer_days=True, sd=1e-4)
    report = diagnose(run, DiagnoseOptions(systematic=True))
    (edge,) = _lines(report, "edge")
    (ties,) = _lines(report, "ties")
    assert edge.level == "warn" and "model.edge: censored" in edge.message
    assert ties.level == "warn" and "hawkes-prep hhs --jitter" in ties.message
    share = float(edge.message.split("edge: ")[1].split("%")[0])
    assert 2.0 < share < 20.0  # sigma_x 0.4 in a 10 x 10 box: several percent outside
    assert report.status == "warn"
    assert not _lines(diagnose(run, DiagnoseOptions()), "edge")

    wide = diagnose(
        _run(tmp_path / "w", "none", integer_days=False, sd=0.5), DiagnoseOptions(systematic=True)
    )
    assert [v.level for v in _lines(wide, "edge")] == ["ok"]
    assert not _lines(wide, "ties")  # continuous times: no ties


def test_diagnose_corrected_run_reports_share_only(tmp_path):
    run = _run(tmp_path, "censored", integer_days=False, sd=1e-4)
    report = diagnose(run, DiagnoseOptions(systematic=True))
    (edge,) = _lines(report, "edge")
    assert edge.level == "ok" and "counted by model.edge: censored" in edge.message
