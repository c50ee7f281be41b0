"""The convergence check of running chains (``sampler.stop_when: converged``) without a device:
chain files written with known draws (the helpers of ``tests/test_diagnostics.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import hawkes_cli.data
import hawkes_cli.data.files
import hawkes_cli.data.hdf5_file
from hawkes_cli.config import config_from_yaml_text
from hawkes_cli.data import EventData, save_events
from hawkes_cli.diagnostics import diagnose
from hawkes_cli.rundir import RunDir
from hawkes_cli.runner.converged import forget, run_converged
from tests.test_diagnostics import WARMUP, iid_values, write_chain


def _run(tmp_path: Path, draws: int, checkpoint: dict | None = None):
    """A run of 2 iid chains of ``draws`` post-warm-up draws over events in weeks (lon/lat);
    ``checkpoint``: more of each chain's last checkpoint."""
    events = EventData(
        time=np.arange(50.0),
        x=np.linspace(-80.0, -79.0, 50),
        y=np.full(50, 40.0),
        attrs={"time_unit": "week", "crs": "EPSG:4326"},
    )
    save_events(events, tmp_path / "events.h5")
    cfg = config_from_yaml_text(
        "data: {events: events.h5}\nmodel: {kind: 1}\nchains: {count: 2}\n"
        f"sampler: {{iterations: 100000, warmup: {WARMUP}, seed: 1, stop_when: converged}}\n"
        "output: {run_dir: run}\n",
        base_dir=tmp_path,
        where="test.yaml",
    )
    rng = np.random.default_rng(4)
    for k in range(2):
        values = iid_values(rng, WARMUP + draws)
        write_chain(
            Path(cfg.output.run_dir), k, values, (cfg.to_yaml(), cfg.sha256), checkpoint=checkpoint
        )
    return cfg, RunDir(cfg.output.run_dir)


def _no_event_arrays(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the convergence check read the event arrays")

    for module, name in [
        (hawkes_cli.data, "load_events"),
        (hawkes_cli.data.files, "load_events"),
        (hawkes_cli.data.hdf5_file, "load_hdf5"),
    ]:
        monkeypatch.setattr(module, name, refuse)


@pytest.mark.parametrize("draws", [60, 700])
def test_a_check_reads_no_event_arrays_and_gives_the_same_verdict(tmp_path, monkeypatch, draws):
    """Each check after a commit reads the events file's metadata only (its time unit), not
    its arrays (0.3-0.6 s at 1M events), with the same verdict and summary line as when the
    events were loaded whole."""
    cfg, rd = _run(tmp_path, draws)
    before = run_converged(rd, cfg, 0)
    forget(rd)
    _no_event_arrays(monkeypatch)
    after = run_converged(rd, cfg, 0)
    assert after.converged == before.converged == (draws == 700)
    assert after.summary == before.summary
    # the smallest ESS, for the progress line's projection: the one the summary shows
    assert after.smallest_ess == before.smallest_ess
    if draws == 60:
        assert f"ESS {after.smallest_ess:.0f} (" in after.summary and after.smallest_ess < 400
    else:
        assert after.smallest_ess == after.record.smallest_ess >= 400
    if draws == 700:
        keep = ("draws", "common_draws", "largest_rhat", "smallest_ess")
        assert [getattr(after.record, k) for k in keep] == [getattr(before.record, k) for k in keep]
    # the unit and crs still come from the file: tau_t in weeks, no weeks rows, no note
    report = diagnose(rd.root)
    assert report.time_unit == "week" and report.row("tau_t").unit == "weeks"
    assert "tau_t_weeks" not in [r.name for r in report.derived]
    assert not [v for v in report.verdicts if v.code == "time_unit"]


def test_findings_more_draws_cannot_change_do_not_hold_the_chains_back(tmp_path, caplog):
    """A truncation bound above the tolerance after warm-up (the cut-off is fixed by then)
    stays a WARNING in the diagnosis, but a run whose R-hat and ESS pass converges: waiting
    for it would run the chains to sampler.iterations. Too few draws still hold them back."""
    bound = {"bound_exceedances": 3, "worst_bound": 0.08}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    cfg, rd = _run(tmp_path / "a", 700, bound)
    report = diagnose(rd.root)
    assert report.status == "warn"
    assert [v.code for v in report.verdicts if v.level != "ok"] == ["bound", "bound"]
    with caplog.at_level("WARNING", logger="hawkes_cli.runner.converged"):
        check = run_converged(rd, cfg, 0)
    assert check.converged and check.record.smallest_ess >= 400
    # the chain's log says what the diagnosis still warns about
    assert "converged, but the diagnosis still says" in caplog.text
    assert "truncation bound above engine.tolerance" in caplog.text
    cfg, rd = _run(tmp_path / "b", 60, bound)
    assert not run_converged(rd, cfg, 0).converged
