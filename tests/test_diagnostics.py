"""Tests of hawkes_cli.diagnostics: hawkes-diagnose's numbers, verdicts and outputs.

Chain files are written with the real :class:`~hawkes_cli.storage.ChainWriter` holding known
draws; every statistic is compared with arviz run independently on the same arrays. The
reference of R-hat, ESS and MCSE is R's ``posterior`` (``tests/test_posterior_reference.py``);
arviz 0.22 agrees with it to 1e-12 on these arrays (even lengths and split lengths, no ties at
the tail quantiles), so it stays here as a second, independent implementation.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import arviz as az
import numpy as np
import pytest

from hawkes_cli.config import config_from_yaml_text
from hawkes_cli.data import EventData, save_events
from hawkes_cli.diagnostics import (
    DAYS_PER_WEEK,
    MILES_PER_DEGREE,
    STRICT_FAILURE_EXIT_CODE,
    DiagnoseOptions,
    diagnose,
    exit_code,
    find_chain_files,
    format_table,
    lengthscale_miles,
    load_draws,
    to_csv,
    to_inference_data,
    to_json,
    write_netcdf,
    write_plots,
)
from hawkes_cli.diagnostics.derived import COORD_UNITS
from hawkes_cli.errors import EventsError, StorageError, UsageError
from hawkes_cli.storage import DRAW_FIELDS, ChainMeta, ChainWriter
from hawkes_cli.storage import writer as storage
from hawkes_cli.vocab import PARAM_NAMES

PARAMS = PARAM_NAMES
BASE = {"mu0": 0.002, "tau_t": 170.0, "xi0": 1.0, "sigma_x": 0.08, "sigma_t": 19.6}
FIELDS = DRAW_FIELDS
WARMUP = 50


def make_config(tmp_path: Path, *, events: str = "events.h5", model: int = 1, seed: int = 1):
    """A real resolved config (text, sha256) as hawkes-run records it in chain files."""
    cfg = config_from_yaml_text(
        f"data: {{events: {events}}}\nmodel: {{kind: {model}}}\n"
        f"sampler: {{iterations: 100000, warmup: {WARMUP}, seed: {seed}}}\n",
        base_dir=tmp_path,
        where="test.yaml",
    )
    return cfg.to_yaml(), cfg.sha256


def iid_values(rng: np.random.Generator, n: int, shift: float = 0.0) -> dict[str, np.ndarray]:
    """Positive draws ``BASE * exp(0.05 * (z + shift))``, z iid standard normal."""
    return {p: BASE[p] * np.exp(0.05 * (rng.standard_normal(n) + shift)) for p in PARAMS}


def write_chain(
    run_dir: Path,
    chain_id: int,
    values: dict[str, np.ndarray],
    config: tuple[str, str],
    *,
    warmup: int = WARMUP,
    thin: int = 1,
    model: int = 1,
    accepted: np.ndarray | None = None,
    fields: tuple[tuple[str, str], ...] = FIELDS,
    checkpoint: dict | None = None,
) -> Path:
    """Write a finished chain file with the given draws (rows include warm-up) and per-draw
    ``fields`` (a subset of :data:`FIELDS`, e.g. an older file's); ``checkpoint``: more of
    its last commit's checkpoint (e.g. ``bound_exceedances``)."""
    n = len(values[PARAMS[0]])
    path = run_dir / "chains" / f"chain-{chain_id:02d}.h5"
    meta = ChainMeta(
        chain_id=chain_id,
        seed=1,
        model=model,
        n_events=100,
        iterations=n * thin,
        warmup=warmup,
        thin=thin,
        config_yaml=config[0],
        config_sha256=config[1],
        kernel_sha256="",
        param_names=PARAMS,
        fields=fields,
    )
    acc = np.ones(n, dtype=int) if accepted is None else accepted
    keep = set(PARAMS) | {name for name, _ in fields}
    writer, _ = ChainWriter.open(path, meta)
    with writer:
        for i in range(n):
            row = _row(values, i, i * thin, warmup, int(acc[i]))
            writer.append({k: v for k, v in row.items() if k in keep})
        writer.commit({"iteration": n * thin, "finished": True, **(checkpoint or {})})
    return path


def _row(values, i: int, iteration: int, warmup: int, accepted: int = 1) -> dict:
    row = {p: float(values[p][i]) for p in PARAMS}
    row.update(
        iteration=iteration,
        loglik=-float(i),
        logprior=-1.0,
        accepted=accepted,
        warmup=int(iteration < warmup),
        coordinate=i % 5,
        scale=0.1,
        pair_passes=1,
        n_proposals=1,
        n_accepted=accepted,
        jump=-1,
    )
    return row


def make_run(tmp_path: Path, chains: list[dict[str, np.ndarray]], **kw) -> Path:
    run_dir = tmp_path / "run"
    config = kw.pop("config", None) or make_config(tmp_path)
    for c, values in enumerate(chains):
        write_chain(run_dir, c, values, config, **kw)
    return run_dir


def post_warmup_matrix(chains: list[dict[str, np.ndarray]], name: str, n: int | None = None):
    """(chain, draw) array of a parameter after dropping the first WARMUP rows."""
    arrays = [c[name][WARMUP:] for c in chains]
    n = min(len(a) for a in arrays) if n is None else n
    return np.stack([a[:n] for a in arrays])


def az_stats(matrix: np.ndarray) -> dict[str, float]:
    return {
        "rhat": float(az.rhat(matrix, method="rank")),
        "ess_bulk": float(az.ess(matrix, method="bulk")),
        "ess_tail": float(az.ess(matrix, method="tail")),
        "mcse_mean": float(az.mcse(matrix, method="mean")),
    }


def levels(report, code: str) -> list[tuple[str, int | None, str | None]]:
    return [(v.level, v.chain, v.parameter) for v in report.verdicts if v.code == code]


# --------------------------------------------------------------------------- values


def test_values_equal_arviz_on_the_same_draws(tmp_path):
    rng = np.random.default_rng(1)
    chains = [iid_values(rng, WARMUP + 600) for _ in range(4)]
    report = diagnose(make_run(tmp_path, chains), DiagnoseOptions(strict=True))

    assert [c.draws_used for c in report.chains] == [600] * 4
    assert report.common_draws == 600
    for name in PARAMS:
        m = post_warmup_matrix(chains, name)
        row = report.row(name)
        expected = az_stats(m)
        for key, value in expected.items():
            assert getattr(row, key) == pytest.approx(value, rel=1e-12), (name, key)
        pooled = m.ravel()
        med, lo, hi = np.quantile(pooled, [0.5, 0.025, 0.975])
        assert (row.median, row.q2_5, row.q97_5) == pytest.approx((med, lo, hi), rel=1e-12)
        assert row.mean == pytest.approx(pooled.mean(), rel=1e-12)
        assert row.sd == pytest.approx(pooled.std(ddof=1), rel=1e-12)
        assert row.kind == "parameter"

    # derived: the ratio computed from scratch, and the weeks rows equal arviz on tau_t / 7
    ratio = post_warmup_matrix(chains, "xi0") / (
        post_warmup_matrix(chains, "xi0") + post_warmup_matrix(chains, "mu0")
    )
    row = report.row("xi0_frac")
    assert row.label == "xi0/(xi0+mu0)"
    for key, value in az_stats(ratio).items():
        assert getattr(row, key) == pytest.approx(value, rel=1e-12), key
    assert row.median == pytest.approx(np.median(ratio), rel=1e-12)
    for p in ("tau_t", "sigma_t"):
        weeks = post_warmup_matrix(chains, p) / DAYS_PER_WEEK
        row = report.row(f"{p}_weeks")
        assert row.unit == "weeks" and row.label == p and not row.checked
        for key, value in az_stats(weeks).items():
            assert getattr(row, key) == pytest.approx(value, rel=1e-9), (p, key)
        assert row.median == pytest.approx(np.median(weeks), rel=1e-12)
    assert report.row("tau_t").unit == "days"

    # iid chains: everything passes; strict exits 0
    assert report.status == "ok", report.verdicts
    assert exit_code(report) == 0
    assert {v.code for v in report.verdicts} >= {"rhat", "ess"}


def test_chain_files_of_the_older_field_list_are_diagnosed(tmp_path):
    """Files written before the per-iteration cost fields (pair_passes, n_proposals,
    n_accepted, jump) are read with their own field list, with the same numbers."""
    rng = np.random.default_rng(1)
    chains = [iid_values(rng, WARMUP + 400) for _ in range(2)]
    old = diagnose(make_run(tmp_path / "old", chains, fields=FIELDS[:7]))
    new = diagnose(make_run(tmp_path / "new", chains))
    assert old.status == new.status == "ok"
    for name in PARAMS:
        assert old.row(name) == new.row(name)


def test_time_unit_weeks_has_no_week_rows(tmp_path):
    events = EventData(
        time=np.arange(4.0), x=np.zeros(4), y=np.full(4, 40.0), attrs={"time_unit": "week"}
    )
    save_events(events, tmp_path / "events.h5")
    rng = np.random.default_rng(2)
    report = diagnose(make_run(tmp_path, [iid_values(rng, 100) for _ in range(2)]))
    assert report.time_unit == "week"
    assert report.row("tau_t").unit == "weeks"
    assert "tau_t_weeks" not in [r.name for r in report.derived]
    assert not [v for v in report.verdicts if v.code == "time_unit"]


def test_missing_events_file_assumes_days_and_says_so(tmp_path):
    rng = np.random.default_rng(3)
    report = diagnose(make_run(tmp_path, [iid_values(rng, 100) for _ in range(2)]))
    assert report.time_unit == "day"
    (note,) = [v for v in report.verdicts if v.code == "time_unit"]
    assert note.level == "ok" and "events.h5" in note.message and "not found" in note.message


# --------------------------------------------------------------------------- burn-in, thinning


def counting_chain(n: int, offset: float) -> dict[str, np.ndarray]:
    """Draw i has every parameter equal to offset + i (so the values name the rows)."""
    return {p: offset + np.arange(n, dtype=float) for p in PARAMS}


def test_burn_in_and_thinning_select_the_right_iterations(tmp_path):
    n = 200
    run_dir = make_run(tmp_path, [counting_chain(n, 1000.0), counting_chain(n, 5000.0)])

    d = load_draws(run_dir)  # default: drop the rows flagged warm-up (iterations 0..49)
    assert [it.tolist() for it in d.iterations] == [list(range(WARMUP, n))] * 2
    assert d.variables["mu0"][1].tolist() == (5000.0 + np.arange(WARMUP, n)).tolist()

    d = load_draws(run_dir, DiagnoseOptions(burn=20, thin=3))  # explicit burn keeps some warm-up
    expected = list(range(20, n, 3))
    assert [it.tolist() for it in d.iterations] == [expected] * 2
    assert d.variables["sigma_x"][0].tolist() == [1000.0 + i for i in expected]

    d = load_draws(run_dir, DiagnoseOptions(burn=0))
    assert d.common_draws == n

    report = diagnose(run_dir, DiagnoseOptions(thin=7))
    used = list(range(WARMUP, n, 7))
    for c in report.chains:
        assert c.draws_committed == n
        assert c.draws_used == len(used)
        assert (c.first_iteration, c.last_iteration) == (used[0], used[-1])
        assert c.finished
    pooled = np.concatenate([1000.0 + np.array(used), 5000.0 + np.array(used)])
    assert report.row("mu0").median == pytest.approx(np.median(pooled))
    assert "every 7th" in report.burn_description


def test_burn_counts_iterations_when_the_sampler_thinned(tmp_path):
    # sampler thin 4: rows are iterations 0, 4, 8, ...; warm-up = iterations < 50 (13 rows)
    run_dir = make_run(tmp_path, [counting_chain(100, 0.0), counting_chain(100, 1.0)], thin=4)
    d = load_draws(run_dir)
    assert d.iterations[0].tolist() == list(range(52, 400, 4))
    d = load_draws(run_dir, DiagnoseOptions(burn=100))
    assert d.iterations[0][0] == 100 and d.common_draws == 75


def test_no_draws_after_burn_in_is_an_error(tmp_path):
    run_dir = make_run(tmp_path, [counting_chain(80, 0.0)])
    with pytest.raises(UsageError, match=r"no draws after burn-in.*--burn 500"):
        diagnose(run_dir, DiagnoseOptions(burn=500))
    warm = make_run(tmp_path / "w", [counting_chain(30, 0.0)])  # all 30 rows are warm-up
    with pytest.raises(UsageError, match=r"no draws after warm-up yet.*--burn 0"):
        diagnose(warm)


# --------------------------------------------------------------------------- running chains


def test_running_chain_only_committed_draws_count(tmp_path, monkeypatch):
    rng = np.random.default_rng(4)
    config = make_config(tmp_path)
    run_dir = tmp_path / "run"
    for c in range(2):
        write_chain(run_dir, c, iid_values(rng, 300), config)
    # chain 2 is "running": 150 committed rows, 40 rows in the file from a commit whose sidecar
    # never landed, 25 more pending in memory; the writer stays open while we diagnose
    values = iid_values(rng, 300)
    meta = ChainMeta(
        chain_id=2,
        seed=1,
        model=1,
        n_events=100,
        iterations=300,
        warmup=WARMUP,
        thin=1,
        config_yaml=config[0],
        config_sha256=config[1],
        kernel_sha256="",
        param_names=PARAMS,
        fields=FIELDS,
    )
    writer, _ = ChainWriter.open(run_dir / "chains" / "chain-02.h5", meta)
    try:
        for i in range(150):
            writer.append(_row(values, i, i, WARMUP))
        writer.commit({"iteration": 150})
        for i in range(150, 190):
            writer.append(_row(values, i, i, WARMUP))

        def broken(path, obj, **kwargs):
            raise OSError("disk full")

        monkeypatch.setattr(storage.atomic, "write_json", broken)
        with pytest.raises(StorageError):
            writer.commit({"iteration": 190})  # rows written to HDF5, sidecar not replaced
        monkeypatch.undo()
        for i in range(190, 215):
            writer.append(_row(values, i, i, WARMUP))
        # a chain still in warm-up: nothing after burn-in yet
        meta3 = ChainMeta(**{**meta.__dict__, "chain_id": 3})
        w3, _ = ChainWriter.open(run_dir / "chains" / "chain-03.h5", meta3)
        with w3:
            for i in range(20):
                w3.append(_row(values, i, i, WARMUP))
            w3.commit({"iteration": 20})

        report = diagnose(run_dir)
    finally:
        writer.close()

    by_id = {c.chain_id: c for c in report.chains}
    assert by_id[2].draws_committed == 150
    assert by_id[2].draws_used == 100
    assert by_id[2].last_iteration == 149
    assert not by_id[2].finished and by_id[2].iterations_done == 150
    assert by_id[3].draws_used == 0 and not by_id[3].used
    assert report.draws.chain_ids == (0, 1, 2)
    assert report.common_draws == 100
    assert ("warn", 3, None) in levels(report, "excluded")
    # R-hat on the common prefix of 100 draws, medians on all 250 + 250 + 100
    m = np.stack([c[:100] for c in report.draws.variables["mu0"]])
    assert report.row("mu0").rhat == pytest.approx(float(az.rhat(m, method="rank")), rel=1e-12)
    pooled = np.concatenate(report.draws.variables["mu0"])
    assert pooled.size == 600
    assert report.row("mu0").median == pytest.approx(np.median(pooled), rel=1e-12)
    assert ("warn", 2, None) in levels(report, "short")
    assert levels(report, "prefix") == [("ok", None, None)]
    text = format_table(report)
    assert "at 150/300" in text and "not used" in text


# --------------------------------------------------------------------------- verdicts


def test_shifted_chain_fails_rhat_and_strict_exit_code(tmp_path):
    rng = np.random.default_rng(7)
    chains = [iid_values(rng, WARMUP + 1000) for _ in range(4)]
    chains[3]["sigma_x"] = chains[3]["sigma_x"] * np.exp(0.05 * 1.0)  # +1 sd on the log scale
    chains[2]["tau_t"] = chains[2]["tau_t"] * np.exp(0.05 * 0.4)  # +0.4 sd
    run_dir = make_run(tmp_path, chains)
    fail_rhat = float(az.rhat(np.log(post_warmup_matrix(chains, "sigma_x")), method="rank"))
    warn_rhat = float(az.rhat(np.log(post_warmup_matrix(chains, "tau_t")), method="rank"))
    assert fail_rhat > 1.05 and 1.01 < warn_rhat <= 1.05  # the constructed cases are as meant

    report = diagnose(run_dir, DiagnoseOptions(strict=True))
    rhat = levels(report, "rhat")
    assert ("fail", None, "sigma_x") in rhat
    assert ("warn", None, "tau_t") in rhat
    assert not [v for v in rhat if v[2] in ("mu0", "xi0", "sigma_t")]
    assert report.status == "fail"
    assert exit_code(report) == STRICT_FAILURE_EXIT_CODE != 0
    assert exit_code(diagnose(run_dir, DiagnoseOptions(strict=False))) == 0
    assert report.verdicts[0].level == "fail"  # failures first


def test_low_ess_warns(tmp_path):
    rng = np.random.default_rng(8)
    chains = [iid_values(rng, WARMUP + 500) for _ in range(4)]
    for c in chains:  # AR(1) with phi 0.9 on xi0's log: ESS about 2000 * 0.1/1.9 ~ 100
        z = np.zeros(WARMUP + 500)
        e = rng.standard_normal(z.size)
        for i in range(1, z.size):
            z[i] = 0.9 * z[i - 1] + e[i]
        c["xi0"] = np.exp(0.05 * z)
    report = diagnose(make_run(tmp_path, chains))
    ess = levels(report, "ess")
    assert ("warn", None, "xi0") in ess
    assert all(p == "xi0" or p == "xi0_frac" for _, _, p in ess)
    assert report.row("xi0").ess_bulk < 400
    assert report.status in ("warn", "fail")


def test_stuck_chain_fails_naming_it(tmp_path):
    rng = np.random.default_rng(9)
    chains = [iid_values(rng, WARMUP + 300) for _ in range(3)]
    stuck = iid_values(rng, WARMUP + 300)
    for p in PARAMS:
        stuck[p][WARMUP - 5 :] = stuck[p][WARMUP - 5]
    accepted = np.ones(WARMUP + 300, dtype=int)
    accepted[WARMUP - 4 :] = 0
    config = make_config(tmp_path)
    run_dir = make_run(tmp_path, chains, config=config)
    write_chain(run_dir, 3, stuck, config, accepted=accepted)
    report = diagnose(run_dir, DiagnoseOptions(strict=True))
    (v,) = [v for v in report.verdicts if v.code == "stuck"]
    assert v.level == "fail" and v.chain == 3 and "chain 3 is stuck" in v.message
    assert report.chains[3].acceptance == 0.0
    assert report.chains[0].acceptance == 1.0
    assert exit_code(report) != 0
    # with burn 0 the moving warm-up draws count: not stuck any more
    assert not levels(diagnose(run_dir, DiagnoseOptions(burn=0)), "stuck")


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_draws_fail_naming_chain_and_parameter(tmp_path, bad):
    rng = np.random.default_rng(10)
    chains = [iid_values(rng, WARMUP + 200) for _ in range(3)]
    chains[1]["sigma_t"][WARMUP + 17] = bad
    report = diagnose(make_run(tmp_path, chains), DiagnoseOptions(strict=True))
    nonfinite = [v for v in report.verdicts if v.code == "nonfinite"]
    assert [(v.level, v.chain, v.parameter) for v in nonfinite] == [("fail", 1, "sigma_t")]
    assert f"iteration {WARMUP + 17}" in nonfinite[0].message
    assert ("NaN" if np.isnan(bad) else "inf") in nonfinite[0].message
    assert math.isnan(report.row("sigma_t").rhat)
    assert exit_code(report) != 0
    assert json.loads(json.dumps(to_json(report), allow_nan=False))  # strict JSON despite NaN
    # the bad draw is thinned out of the analysis (odd offset, thin 2) but still named
    thinned = diagnose(report.run_dir, DiagnoseOptions(thin=2))
    assert levels(thinned, "nonfinite") == [("fail", 1, "sigma_t")]
    assert np.isfinite(thinned.row("sigma_t").rhat)


def test_short_chain_is_named_and_prefix_used(tmp_path):
    rng = np.random.default_rng(11)
    chains = [iid_values(rng, WARMUP + n) for n in (800, 800, 700, 300)]
    report = diagnose(make_run(tmp_path, chains))
    assert levels(report, "short") == [("warn", 3, None)]
    assert report.common_draws == 300
    m = post_warmup_matrix(chains, "sigma_x", 300)
    for key, value in az_stats(m).items():
        assert getattr(report.row("sigma_x"), key) == pytest.approx(value, rel=1e-12)
    pooled = np.concatenate([c["sigma_x"][WARMUP:] for c in chains])
    assert report.row("sigma_x").median == pytest.approx(np.median(pooled), rel=1e-12)
    (prefix,) = [v for v in report.verdicts if v.code == "prefix"]
    assert "300" in prefix.message and "2600" in prefix.message


def test_one_chain_warns_that_rhat_needs_two(tmp_path):
    rng = np.random.default_rng(12)
    report = diagnose(make_run(tmp_path, [iid_values(rng, WARMUP + 500)]))
    assert levels(report, "one_chain") == [("warn", None, None)]
    assert math.isnan(report.row("mu0").rhat)
    assert report.row("mu0").ess_bulk > 400
    assert not [v for v in report.verdicts if v.code == "rhat" and v.level == "fail"]


def test_chains_stuck_apart_read_plainly(tmp_path):
    """Chains that never move, each at its own values: R-hat is astronomically large (R's
    posterior gives ~1e15 too) and the tail ESS is undefined; the messages say so without
    sixteen-digit numbers or "nan"."""
    rng = np.random.default_rng(15)
    chains = [{p: np.full(WARMUP + 60, v) for p, v in iid_values(rng, 1).items()} for _ in range(3)]
    report = diagnose(make_run(tmp_path, chains))
    assert report.row("mu0").rhat > 1e10
    assert math.isnan(report.row("mu0").ess_tail)
    rhat = next(v.message for v in report.verdicts if v.code == "rhat" and v.parameter == "mu0")
    ess = next(v.message for v in report.verdicts if v.code == "ess" and v.parameter == "mu0")
    assert re.search(r"R-hat of mu0 is \d\.\d\de\+\d\d > 1\.05", rhat), rhat
    assert "tail ESS not computable" in ess and re.search(r"bulk ESS \d+ < 400", ess), ess
    assert "nan" not in ess


def test_too_few_draws_fail(tmp_path):
    rng = np.random.default_rng(13)
    report = diagnose(make_run(tmp_path, [iid_values(rng, WARMUP + 3) for _ in range(2)]))
    assert levels(report, "too_few") == [("fail", None, None)]


# --------------------------------------------------------------------------- refusals


def test_chains_from_different_configs_are_refused(tmp_path):
    rng = np.random.default_rng(14)
    a = make_config(tmp_path, seed=1)
    b = make_config(tmp_path, seed=2)
    run_dir = tmp_path / "run"
    write_chain(run_dir, 0, iid_values(rng, 100), a)
    write_chain(run_dir, 1, iid_values(rng, 100), b)
    write_chain(run_dir, 2, iid_values(rng, 100), a)
    with pytest.raises(StorageError) as info:
        diagnose(run_dir)
    msg = str(info.value)
    assert a[1] in msg and b[1] in msg
    assert "chain-00.h5, chain-02.h5" in msg and "chain-01.h5" in msg


def test_missing_run_dir_and_empty_run_dir(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        diagnose(tmp_path / "nope")
    (tmp_path / "empty" / "chains").mkdir(parents=True)
    (tmp_path / "empty" / "chains" / "chain-00.h5.tmp").write_text("debris")
    with pytest.raises(UsageError, match="no chain files"):
        diagnose(tmp_path / "empty")


def test_options_are_validated():
    with pytest.raises(UsageError, match="--thin"):
        DiagnoseOptions(thin=0)
    with pytest.raises(UsageError, match="--burn"):
        DiagnoseOptions(burn=-1)
    with pytest.raises(UsageError, match="FIPS"):
        DiagnoseOptions(counties=("NY",))
    assert DiagnoseOptions(counties=("6037", "06037", "36061")).counties == ("06037", "36061")


def test_find_chain_files_orders_by_number(tmp_path):
    rng = np.random.default_rng(15)
    config = make_config(tmp_path)
    for c in (10, 2, 0):
        write_chain(tmp_path / "run", c, iid_values(rng, 60), config)
    names = [p.name for p in find_chain_files(tmp_path / "run")]
    assert names == ["chain-00.h5", "chain-02.h5", "chain-10.h5"]
    assert find_chain_files(tmp_path / "run" / "chains")[0].name == "chain-00.h5"


# --------------------------------------------------------------------------- counties


def write_events(tmp_path: Path, crs: str = "lonlat") -> Path:
    fips = np.array(["36061", "36061", "23009", "06037", "06037", "06037"])
    y = np.array([40.70, 40.86, 44.56, 34.0, 34.2, 34.4])
    density = np.array([74211.61, 74211.61, 34.96, 2467.79, 2467.79, 2467.79])
    events = EventData(
        time=np.arange(6.0),
        x=np.full(6, -74.0),
        y=y,
        density=density,
        fips=fips,
        attrs={"time_unit": "day", "crs": crs},
    )
    path = tmp_path / "events.h5"
    save_events(events, path)
    return path


@pytest.mark.parametrize("model", [1, 2])
def test_county_lengthscale_in_miles(tmp_path, model):
    write_events(tmp_path)
    rng = np.random.default_rng(16)
    chains = [iid_values(rng, WARMUP + 300) for _ in range(3)]
    config = make_config(tmp_path, model=model)
    run_dir = make_run(tmp_path, chains, config=config, model=model)
    report = diagnose(run_dir, DiagnoseOptions(counties=("36061", "6037")))
    assert report.model == model
    sigma = post_warmup_matrix(chains, "sigma_x")
    for fips, lat, dens in (("36061", 40.78, 74211.61), ("06037", 34.2, 2467.79)):
        factor = math.cos(lat * math.pi / 180) * MILES_PER_DEGREE
        if model == 2:
            factor /= math.sqrt(dens)
        row = report.row(f"lengthscale_{fips}")
        assert row.unit == "miles" and row.kind == "derived"
        assert row.median == pytest.approx(np.median(sigma * factor), rel=1e-12)
        assert row.q97_5 == pytest.approx(np.quantile(sigma * factor, 0.975), rel=1e-12)
        for key, value in az_stats(sigma * factor).items():
            assert getattr(row, key) == pytest.approx(value, rel=1e-9), (fips, key)
    county = {c.fips: c for c in report.counties}["36061"]
    assert county.latitude == pytest.approx(40.78) and county.n_events == 2
    assert county.density == pytest.approx(74211.61)
    assert "36061" in format_table(report)

    with pytest.raises(UsageError, match="no events with fips 99999"):
        diagnose(run_dir, DiagnoseOptions(counties=("99999",)))


def test_county_needs_a_readable_events_file(tmp_path):
    rng = np.random.default_rng(17)
    run_dir = make_run(tmp_path, [iid_values(rng, 100) for _ in range(2)])
    with pytest.raises(EventsError, match="not found"):
        diagnose(run_dir, DiagnoseOptions(counties=("36061",)))
    # an explicit events file overrides the config's
    other = tmp_path / "elsewhere"
    other.mkdir()
    path = write_events(other, crs="EPSG:5070")
    report = diagnose(run_dir, DiagnoseOptions(counties=("36061",), events=path))
    # projected coordinates: the lengthscale stays in the data's units, no miles to warn about
    assert levels(report, "crs") == []
    assert report.row("lengthscale_36061").unit == COORD_UNITS


def test_lengthscale_conversion_published_formula():
    # Manhattan, model 1: 0.0798 degrees at latitude 40.78
    expected = 0.0798 * math.cos(40.78 * math.pi / 180) * 69.17
    assert lengthscale_miles(0.0798, 1, 40.78) == pytest.approx(expected, rel=1e-12)
    assert lengthscale_miles(1.479, 2, 44.56, 34.96) == pytest.approx(
        1.479 / math.sqrt(34.96) * math.cos(44.56 * math.pi / 180) * 69.17, rel=1e-12
    )
    with pytest.raises(UsageError, match="density"):
        lengthscale_miles(1.0, 2, 40.0, None)


# --------------------------------------------------------------------------- outputs


@pytest.fixture
def small_report(tmp_path):
    write_events(tmp_path)
    rng = np.random.default_rng(18)
    chains = [iid_values(rng, WARMUP + 200) for _ in range(3)]
    run_dir = make_run(tmp_path, chains)
    return diagnose(run_dir, DiagnoseOptions(counties=("23009",))), chains


def test_json_and_csv_hold_the_numbers(small_report):
    report, _ = small_report
    data = json.loads(json.dumps(to_json(report)))
    assert data["config_sha256"] == report.config_sha256
    assert data["status"] == report.status
    assert [c["draws_used"] for c in data["chains"]] == [200, 200, 200]
    by_name = {r["name"]: r for r in data["parameters"] + data["derived"]}
    assert set(by_name) == {r.name for r in report.rows}
    for r in report.rows:
        for key in ("median", "q2_5", "q97_5", "mean", "sd", "rhat", "ess_bulk", "ess_tail"):
            assert by_name[r.name][key] == getattr(r, key)
    assert data["counties"][0]["fips"] == "23009"
    assert {v["level"] for v in data["verdicts"]} <= {"ok", "warn", "fail"}

    rows = list(csv.DictReader(io.StringIO(to_csv(report))))
    assert [r["name"] for r in rows] == [r.name for r in report.rows]
    for r, line in zip(report.rows, rows, strict=True):
        assert float(line["median"]) == r.median
        assert float(line["q2.5"]) == r.q2_5 and float(line["q97.5"]) == r.q97_5
        assert float(line["rhat"]) == r.rhat
        assert float(line["ess_tail"]) == r.ess_tail
        assert line["unit"] == r.unit


def test_format_table_is_aligned_and_ends_with_verdicts(small_report):
    report, _ = small_report
    text = format_table(report)
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("quantity"))
    end = lines[head].index("MCSE mean") + len("MCSE mean")
    for line in lines[head + 1 : head + 1 + len(report.rows)]:
        if line.strip() != "derived:":
            assert len(line) == end, line  # right-aligned last column
    for r in report.rows:
        assert any(line.startswith(r.label) for line in lines[head:]), r.label
    assert "xi0/(xi0+mu0)" in text and "weeks" in text and "miles" in text
    assert report.config_sha256[:16] in text
    verdict_at = lines.index(f"verdict: {report.status.upper()}")
    assert len(lines) - verdict_at - 1 == len(report.verdicts)


def test_netcdf_round_trip(small_report, tmp_path):
    report, chains = small_report
    path = write_netcdf(report, tmp_path / "out.nc")
    idata = az.from_netcdf(path)
    assert list(idata.posterior.chain.values) == [0, 1, 2]
    assert idata.posterior.sizes["draw"] == 200
    for name in PARAMS:
        np.testing.assert_array_equal(
            idata.posterior[name].values, post_warmup_matrix(chains, name)
        )
    assert idata.posterior["tau_t"].attrs["units"] == "days"
    assert "lengthscale_23009" in idata.posterior
    assert idata.posterior.attrs["config_sha256"] == report.config_sha256
    np.testing.assert_array_equal(idata.sample_stats["iteration"].values[0], np.arange(50, 250))
    assert idata.sample_stats["lp"].shape == (3, 200)
    # what ArviZ users expect: the warm-up apart, the data, an acceptance rate
    for name in PARAMS:
        want = np.stack([c[name][:WARMUP] for c in chains])
        np.testing.assert_array_equal(idata.warmup_posterior[name].values, want)
    np.testing.assert_array_equal(
        idata.warmup_sample_stats["iteration"].values[2], np.arange(WARMUP)
    )
    assert "tau_t_weeks" not in idata.warmup_sample_stats
    assert "tau_t_weeks" not in idata.posterior  # a unit copy, not a quantity of its own
    assert idata.posterior["xi0_frac"].attrs["kind"] == "derived"
    assert idata.posterior["xi0"].attrs["kind"] == "parameter"
    # what an ArviZ user runs first: a summary of the posterior group and a trace plot
    summary = az.summary(idata)
    assert {*PARAMS, "xi0_frac", "lengthscale_23009"} == set(summary.index)
    want = np.mean(post_warmup_matrix(chains, "xi0"))  # az.summary rounds to 3 decimals
    assert summary.loc["xi0", "mean"] == pytest.approx(want, abs=1e-3)
    import matplotlib

    matplotlib.use("Agg")
    axes = az.plot_trace(idata, var_names=list(PARAMS))
    assert axes.shape == (len(PARAMS), 2)
    matplotlib.pyplot.close("all")
    if "acceptance_rate" in idata.sample_stats:  # chain files with n_accepted, n_proposals
        rate = idata.sample_stats["acceptance_rate"].values
        assert np.all((rate >= 0) & (rate <= 1))
    assert set(idata.observed_data.data_vars) >= {"time", "x", "y"}  # the run's events
    assert idata.observed_data["time"].dims == ("event",)
    # the same draws from a run directory (no Report)
    again = to_inference_data(report.run_dir, DiagnoseOptions(thin=2))
    np.testing.assert_array_equal(
        again.posterior["mu0"].values, post_warmup_matrix(chains, "mu0")[:, ::2]
    )


def test_plots_are_written_as_png(small_report, tmp_path):
    report, _ = small_report
    paths = write_plots(report, None, tmp_path / "plots")
    assert [p.name for p in paths] == ["trace.png", "rank.png", "posterior.png"]
    for p in paths:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, p


def test_posterior_plot_in_the_tables_units_with_marks_clear_of_text(small_report):
    """posterior.png shows tau_t and sigma_t in days, as the table and the trace plots do
    (not the weeks rows), and marks the median and the 95% interval with lines only: no
    label inside the axes crosses them."""
    from hawkes_cli.diagnostics.plots import _figure_class, _plotting, _posterior

    report, _ = small_report
    p = _plotting(report.draws, report.options)
    fig = _posterior(p, _figure_class())
    axes = [ax for ax in fig.axes if ax.get_visible()]
    titles = [ax.get_title().splitlines()[0] for ax in axes]
    assert "tau_t (days)" in titles and "sigma_t (days)" in titles
    assert not [t for t in titles if "weeks" in t]
    for ax in axes:
        assert len(ax.texts) == 0, ax.get_title()  # numbers are in the title
    tau = axes[titles.index("tau_t (days)")]
    med, lo, hi = np.quantile(np.concatenate(report.draws.variables["tau_t"]), [0.5, 0.025, 0.975])
    marks = sorted(line.get_xdata()[0] for line in tau.lines if len(set(line.get_xdata())) == 1)
    assert marks == pytest.approx([lo, med, hi])
    assert f"median {med:.4g}" in tau.get_title()


def test_county_lengthscale_in_coordinate_units_off_lon_lat(tmp_path):
    """Synthetic coordinates: sigma_x (model 1) or sigma_x / sqrt(density) (model 2) in
    coordinate units, no miles and no note about latitudes."""
    from types import SimpleNamespace

    from hawkes_cli.diagnostics import derived
    from hawkes_cli.diagnostics.render import _county_lines

    assert derived.length_unit("synthetic") == derived.COORD_UNITS == "coord units"
    assert derived.length_unit("EPSG:4269") == derived.length_unit("") == derived.MILES
    events = EventData(time=np.arange(3.0), x=np.zeros(3), y=np.array([300.0, 301.0, 302.0]),
                       density=np.array([4.0, 4.0, 4.0]), fips=np.array(["00039"] * 3),
                       attrs={"crs": "synthetic"})  # fmt: skip
    for model, factor in ((1, 1.0), (2, 0.5)):
        county, note = derived.county("00039", events, tmp_path, model, unit=derived.COORD_UNITS)
        assert note is None and county.factor == factor
        q = derived.lengthscale(county, (np.array([0.2, 0.4]),), unit=derived.COORD_UNITS)
        assert q.unit == "coord units" and q.arrays[0].tolist() == [0.2 * factor, 0.4 * factor]
    _, note = derived.county("00039", events, tmp_path, 1)  # miles: y is not a latitude
    assert "not a latitude" in note
    row = SimpleNamespace(name="lengthscale_00039", unit=q.unit)
    lines = _county_lines(SimpleNamespace(counties=[county], rows=[row]))
    assert lines[1].endswith("coord units per sigma_x") and "miles" not in "".join(lines)


def test_import_is_cheap():
    code = (
        "import sys, hawkes_cli.diagnostics; "
        "print(sorted(m for m in ('arviz', 'matplotlib', 'h5py', 'xarray') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_plots_survive_stuck_and_nonfinite_chains(tmp_path):
    rng = np.random.default_rng(19)
    chains = [iid_values(rng, WARMUP + 100) for _ in range(2)]
    for p in PARAMS:
        chains[1][p][:] = chains[1][p][0]  # stuck from the start
    chains[0]["mu0"][WARMUP + 3] = np.nan
    report = diagnose(make_run(tmp_path, chains))
    assert {v.code for v in report.verdicts if v.level == "fail"} >= {"stuck", "nonfinite"}
    paths = write_plots(report.run_dir, DiagnoseOptions(), tmp_path / "plots")
    assert all(p.stat().st_size > 10_000 for p in paths)
    one = diagnose(make_run(tmp_path / "one", [iid_values(rng, WARMUP + 100)]))
    assert len(write_plots(one, None, tmp_path / "one-plots")) == 3


def test_unreadable_config_in_chain_files_still_diagnoses(tmp_path):
    rng = np.random.default_rng(20)
    config = ("model: {kind: 1}\n", "a" * 64)  # not a complete config (no data.events)
    report = diagnose(make_run(tmp_path, [iid_values(rng, 120) for _ in range(2)], config=config))
    (note,) = [v for v in report.verdicts if v.code == "time_unit"]
    assert "config" in note.message
    assert report.row("tau_t_weeks").median == pytest.approx(report.row("tau_t").median / 7)
    with pytest.raises(UsageError, match="events file"):
        diagnose(report.run_dir, DiagnoseOptions(counties=("36061",)))


def test_rhat_of_chains_each_constant_is_infinite_not_an_error():
    """A chain that has not moved yet (every proposal rejected, as at the start of sampling at
    1M) makes each split chain constant: the within-chain variance is 0. R's posterior divides
    and gets Inf; a self-ending chain's convergence check once died here with
    ZeroDivisionError. Chains all alike stay NaN (posterior's should_return_NA)."""
    from hawkes_cli.diagnostics.stats import convergence, rhat

    stuck = np.repeat(np.array([[0.1], [0.2], [0.3], [0.4]]), 10, axis=1)  # (chains, draws)
    assert rhat(stuck) == math.inf
    assert convergence(stuck)[0] == math.inf  # R-hat first: not converged, no exception
    assert math.isnan(rhat(np.full((4, 10), 0.5)))
