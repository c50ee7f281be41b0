"""hawkes-diagnose's R-hat, ESS, MCSE and summaries against R's ``posterior`` (the reference
implementation of rank-normalised R-hat and ESS), to 1e-6 relative in every case.

The draws are ``tests/golden/posterior_draws.csv.gz`` (53 seeded cases: iid, AR(1) up to 0.99,
antithetic, random-walk Metropolis with ties at the 5%/95% quantiles, rounded draws, odd and
even lengths, 1..8 chains, one chain, 1..9 draws, constant chains, chains stuck apart, a tiny
scale, inf and NaN);
R's values are ``tests/golden/posterior_reference.json``, computed by posterior 1.4.0 (R 4.2.2).
No R is needed here. To regenerate both files:

    python tests/golden/posterior_draws.py               # the draws (seeded)
    nice Rscript tests/golden/posterior_reference.R      # R's values
                                                         # (apt-get install r-cran-posterior)

Tolerance: 1e-6 relative is the issue's requirement. The port follows R's arithmetic step by
step, so the differences that remain are rounding (R's long-double sums, its qnorm and FFT):
observed below 1e-14 relative. Where R gives NA we give NaN. One exception: chains stuck at
different values, whose within-chain variance is 0 in exact arithmetic; there R-hat is an O(1)
number over rounding noise on both sides (R: 1.1e15, here 1.3e16), so both are checked to be
huge (> 1e10), not equal.

Where arviz 0.22 departs from R (so the old comparisons with arviz were replaced by these): the
tail ESS when draws tie at the quantile, the folded R-hat's centre for odd lengths, and Geyer's
truncation for odd split lengths; :func:`test_arviz_departs_where_documented` shows each.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from hawkes_cli.diagnostics import stats

GOLDEN = Path(__file__).resolve().parent / "golden"
REL = 1e-6
HUGE_RHAT = 1e10


def _load_draws() -> dict[str, np.ndarray]:
    spec = importlib.util.spec_from_file_location("posterior_draws", GOLDEN / "posterior_draws.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.read_draws(GOLDEN / "posterior_draws.csv.gz")


DRAWS = _load_draws()
REFERENCE = json.loads((GOLDEN / "posterior_reference.json").read_text(encoding="utf-8"))
CASES = sorted(REFERENCE["cases"])


def _agree(got: float, want: float | None) -> bool:
    if want is None:
        return math.isnan(got)
    return not math.isnan(got) and abs(got - want) <= REL * abs(want)


def test_the_reference_covers_the_stored_draws():
    assert REFERENCE["posterior_version"] == "1.4.0"
    assert set(DRAWS) == set(REFERENCE["cases"]) and len(CASES) == 53
    for name, case in REFERENCE["cases"].items():
        assert DRAWS[name].shape == (case["chains"], case["draws"])
    # what the cases are there for: ties at a tail quantile, odd lengths, NA cases
    metropolis = DRAWS["metropolis_full_precision_4x280"]
    q05 = stats.quantile7(metropolis, 0.05)
    assert np.count_nonzero(metropolis == q05) > 1
    assert sum(REFERENCE["cases"][c]["draws"] % 2 == 1 for c in CASES) >= 10
    assert REFERENCE["cases"]["constant_4x100"]["rhat"] is None


@pytest.mark.parametrize("case", CASES)
def test_statistics_equal_r_posterior(case):
    """rhat, ess_bulk, ess_tail, ess_mean, mcse_mean of stats equal R's to 1e-6 relative."""
    x, want = DRAWS[case], dict(REFERENCE["cases"][case])
    if want["rhat"] is not None and want["rhat"] > HUGE_RHAT:
        # chains stuck apart: the within-chain variance is 0 in exact arithmetic, and R's and
        # our R-hat are an O(1) variance over rounding noise; both must be huge, not equal
        assert stats.rhat(x) > HUGE_RHAT
        want["rhat"] = stats.rhat(x)
    got = {
        "rhat": stats.rhat(x),
        "ess_bulk": stats.ess_bulk(x),
        "ess_tail": stats.ess_tail(x),
        "ess_mean": stats.ess_mean(x),
        "mcse_mean": stats.mcse_mean(x),
    }
    bad = {k: (v, want[k]) for k, v in got.items() if not _agree(v, want[k])}
    assert not bad, bad


@pytest.mark.parametrize("case", CASES)
def test_convergence_and_summary_equal_r_posterior(case):
    """What a report row holds: :func:`stats.convergence` (by policy NaN R-hat for one chain
    and all NaN for an infinite draw) and :func:`stats.summary` of the finite draws (R's
    type-7 quantiles, mean, sd)."""
    x, want = DRAWS[case], REFERENCE["cases"][case]
    rhat, ess_b, ess_t, mcse = stats.convergence(x)
    if want["rhat"] is not None and want["rhat"] > HUGE_RHAT:  # see the test above
        assert rhat > HUGE_RHAT
        want = {**want, "rhat": rhat}
    if np.isinf(x).any():
        assert want["rhat"] is not None  # R ranks an infinite draw ...
        assert all(math.isnan(v) for v in (rhat, ess_b, ess_t, mcse))  # ... the report does not
        want = dict.fromkeys(want)
    assert _agree(rhat, want["rhat"] if x.shape[0] >= 2 else None)
    assert _agree(ess_b, want["ess_bulk"]) and _agree(ess_t, want["ess_tail"])
    assert _agree(mcse, want["mcse_mean"])
    median, lo, hi, mean, sd = stats.summary(DRAWS[case].ravel())
    want = REFERENCE["cases"][case]
    for name, value in (("median", median), ("q2_5", lo), ("q97_5", hi), ("mean", mean)):
        assert value == pytest.approx(want[name], rel=REL, abs=1e-300) or (
            want[name] is None and math.isnan(value)
        ), name
    assert _agree(sd, want["sd"])


def test_arviz_departs_where_documented():
    """arviz 0.22 differs from R beyond 1e-6 in the three documented places, which is why the
    reference is R: ties at the tail quantile (a Metropolis chain), the folded R-hat and the
    Geyer truncation at odd lengths. If a new arviz agrees, this test says so."""
    import warnings

    az = pytest.importorskip("arviz")
    departs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in CASES:
            x, want = DRAWS[case], REFERENCE["cases"][case]
            if want["rhat"] is None or want["ess_tail"] is None:
                continue
            for name, value in (
                ("ess_tail", float(az.ess(x, method="tail"))),
                ("rhat", float(az.rhat(x, method="rank"))),
                ("ess_bulk", float(az.ess(x, method="bulk"))),
            ):
                if not _agree(value, want[name]):
                    departs.append((case, name))
    assert ("metropolis_full_precision_4x189_odd", "ess_tail") in departs  # tie at the q05
    assert ("metropolis_full_precision_4x280", "ess_tail") in departs
    length = {case: REFERENCE["cases"][case]["draws"] for case in CASES}
    assert any(name == "rhat" and length[case] % 2 for case, name in departs)  # fold centre
    # Geyer's truncation: an odd split length (draws // 2)
    assert any(name == "ess_bulk" and (length[case] // 2) % 2 for case, name in departs)


@pytest.mark.parametrize("case", CASES)
def test_quantile7_is_r_quantile(case):
    """:func:`stats.quantile7` (the tail ESS's quantile) equals R's ``quantile`` (type 7) at
    2.5%, 50% and 97.5% of the finite draws; at a tied value it returns that value exactly."""
    x, want = DRAWS[case], REFERENCE["cases"][case]
    finite = x[np.isfinite(x)]
    if finite.size == 0:
        return
    for prob, key in ((0.025, "q2_5"), (0.5, "median"), (0.975, "q97_5")):
        got = stats.quantile7(finite, prob)
        assert got == pytest.approx(want[key], rel=1e-12, abs=1e-300), key
    q = stats.quantile7(DRAWS["metropolis_full_precision_4x280"], 0.05)
    assert q in DRAWS["metropolis_full_precision_4x280"]
