"""How ``hawkes-run local`` shows progress: records in, lines out (no terminal needed), and the
chain's progress writer (phases, throttling, rate)."""

from __future__ import annotations

import io
import json
import math

import pytest

from hawkes_cli.chain_progress import Progress
from hawkes_cli.cli.progress_view import (
    LogCadence,
    ProgressDisplay,
    chain_line,
    converge_seconds,
    eta_seconds,
    format_duration,
    format_rate,
    redraw,
)
from hawkes_cli.rundir import RunDir
from hawkes_cli.runner.progress import PROGRESS_SECONDS, ProgressWriter, projected_iteration


def rec(**over) -> Progress:
    base = dict(chain=0, status="running", iteration=1200, iterations=2500, warmup=750)
    return Progress(**(base | over))


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "-"), (-1.0, "-"), (0.0, "0:00"), (59.6, "1:00"), (125.0, "2:05"), (3723.0, "1:02:03")],
)
def test_durations(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("rate", "text"),
    [(None, "-"), (0.0, "-"), (12.34, "12.3 it/s"), (1.0, "1.0 it/s"), (0.25, "4.0 s/it")],
)
def test_rates(rate, text):
    assert format_rate(rate) == text


def test_a_sampling_line_with_its_eta_by_hand():
    # 1300 iterations left at 10 it/s: 130 s = 2:10; 123 s elapsed = 2:03
    r = rec(phase="sampling", it_per_s=10.0, elapsed=123.0, acceptance=0.314)
    assert eta_seconds(r) == pytest.approx(130.0)
    assert chain_line(r) == (
        "chain  0  sampling    1200/2500  10.0 it/s  elapsed 2:03  ETA 2:10  acc 0.31"
    )
    slow = rec(phase="warm-up", iteration=500, it_per_s=0.5, elapsed=3600.0, acceptance=0.2)
    # 2000 left at 2 s each: 4000 s = 1:06:40
    assert chain_line(slow) == (
        "chain  0  warm-up      500/2500  2.0 s/it  elapsed 1:00:00  ETA 1:06:40  acc 0.20"
    )


def test_a_chain_that_ends_when_converged_shows_its_last_check():
    note = "ends when converged, ETA to the cap; not yet at 350 draws/chain: R-hat 1.021 (sigma_x)"
    r = rec(phase="sampling", it_per_s=10.0, elapsed=123.0, acceptance=0.314, note=note)
    assert chain_line(r) == (
        f"chain  0  sampling    1200/2500  10.0 it/s  elapsed 2:03  ETA 2:10  acc 0.31  {note}"
    )
    done = rec(status="finished", phase="finished", iteration=1300, elapsed=263.0, note=note)
    assert chain_line(done) == "chain  0  finished    1300/2500  elapsed 4:23"


def test_the_fast_start_line_shows_its_search_or_its_wait():
    r = rec(phase="fast start", iteration=0, evaluations=312, best_log_post=-5123.44, elapsed=41)
    assert chain_line(r) == (
        "chain  0  fast start  312 evals, best log posterior -5123.44  elapsed 0:41"
    )
    assert eta_seconds(r) is None
    w = rec(chain=3, phase="fast start", note="waiting for the fast start of chain 0", elapsed=2)
    assert (
        chain_line(w) == "chain  3  fast start  waiting for the fast start of chain 0  elapsed 0:02"
    )


def test_ended_and_not_yet_started_chains_have_no_eta():
    done = rec(status="finished", phase="finished", iteration=2500, it_per_s=9.5, elapsed=263.0)
    assert chain_line(done) == "chain  0  finished    2500/2500  9.5 it/s  elapsed 4:23"
    failed = rec(status="failed", phase="failed", it_per_s=9.5, note="exit 1: error: boom")
    assert chain_line(failed).endswith("1200/2500  9.5 it/s  exit 1: error: boom")
    assert chain_line(rec(phase="starting", elapsed=3.0)) == "chain  0  starting    elapsed 0:03"


def test_records_written_before_phases_still_read_and_show():
    """A progress.json of an earlier version (no phase, warmup, elapsed): its status, or for a
    running chain the phase its iteration is in when the warm-up length is known."""
    old = {"chain": 1, "status": "running", "iteration": 10, "iterations": 100, "it_per_s": 2.0,
           "acceptance": 0.5, "loglik": -1.0, "draws_committed": 0, "host": "h", "pid": 1,
           "updated": "2024-01-01T00:00:00Z", "future_key": 7}  # fmt: skip
    p = Progress.from_json(json.loads(json.dumps(old)))
    assert p.phase is None and p.extra == {"future_key": 7}
    assert p.current_phase() == "running"
    assert chain_line(p) == "chain  1  running      10/100  2.0 it/s  ETA 0:45  acc 0.50"
    assert Progress.from_json(old | {"warmup": 50}).current_phase() == "warm-up"
    assert Progress.from_json(old | {"warmup": 5}).current_phase() == "sampling"
    assert Progress.from_json(old | {"status": "finished"}).current_phase() == "finished"
    assert Progress.from_json(p.to_json()) == p  # round trip, the unknown key kept


def test_redraw_rewrites_the_block_in_place():
    assert redraw(["a", "b"], 0) == "\r\x1b[2Ka\n\r\x1b[2Kb\n"
    assert redraw(["a", "b"], 2) == "\x1b[2A\r\x1b[2Ka\n\r\x1b[2Kb\n"
    assert redraw(["a"], 2) == "\x1b[2A\r\x1b[2Ka\n\x1b[J"  # a shorter block clears the rest


def test_terminal_display_redraws_one_line_per_chain():
    out = io.StringIO()
    display = ProgressDisplay(out, terminal=True, width=lambda: 40)
    records = [rec(chain=k, phase="sampling", it_per_s=10.0, elapsed=1.0) for k in range(3)]
    for _ in range(5):
        display.update(records)
    text = out.getvalue()
    assert text.count("\n") == 15 and text.count("\x1b[3A") == 4  # 5 frames of 3 lines, 4 ups
    assert all(len(line) < 40 for line in text.replace("\r\x1b[2K", "\n").split("\n"))
    display.notice("stopping")
    assert out.getvalue()[len(text) :].startswith("\x1b[3A\r\x1b[Jstopping\n")


def test_plain_display_prints_at_phase_changes_and_every_so_often():
    out, now = io.StringIO(), [0.0]
    display = ProgressDisplay(out, terminal=False, every=30.0, clock=lambda: now[0],
                              stamp=lambda: f"t={now[0]:g}")  # fmt: skip

    def show(t, phases):
        """(stamp, chain, phase) of the lines printed at time ``t``."""
        now[0] = t
        start = len(out.getvalue())
        display.update([rec(chain=k, phase=ph, elapsed=t) for k, ph in enumerate(phases)])
        lines = out.getvalue()[start:].splitlines()
        return [(ln.split()[0], int(ln.split()[2]), ln.split("  ")[2]) for ln in lines]

    assert show(0, ["fast start", "fast start"]) == [("t=0", 0, "fast start"),
                                                     ("t=0", 1, "fast start")]  # fmt: skip
    assert show(1, ["fast start", "fast start"]) == []
    assert show(2, ["warm-up", "fast start"]) == [("t=2", 0, "warm-up")]  # a phase change
    assert show(31, ["warm-up", "fast start"]) == [("t=31", 1, "fast start")]  # 31 s since
    assert show(32, ["warm-up", "warm-up"]) == [("t=32", 0, "warm-up"), ("t=32", 1, "warm-up")]
    assert "\x1b" not in out.getvalue()
    assert LogCadence(5.0).due([rec()], 0.0) == [rec()]


def test_progress_writer_phases_throttle_and_rate(tmp_path):
    (tmp_path / "chains").mkdir()
    now = [100.0]
    seen: list[dict] = []
    writer = ProgressWriter(0, 10, 4, tmp_path, seen.append, clock=lambda: now[0])
    read = lambda: RunDir(tmp_path).read_progress(0)  # noqa: E731
    writer.searching(0, None)  # a new phase: written at once
    assert read().phase == "fast start" and read().evaluations == 0
    now[0] += PROGRESS_SECONDS / 2
    writer.searching(7, -12.5)  # within the interval: not written
    assert read().evaluations == 0
    now[0] += PROGRESS_SECONDS
    writer.searching(9, -11.0)
    assert (read().evaluations, read().best_log_post) == (9, -11.0)
    writer.waiting("chain 2, pid 9 on h, since x", 1.0)  # same phase, within the interval
    assert read().note is None
    now[0] += PROGRESS_SECONDS
    writer.waiting("chain 2, pid 9 on h, since x", 3.0)
    assert read().note == "waiting for the fast start of chain 2"
    now[0] = 110.0
    writer.begin(0, -3.0, 0)  # the loop: warm-up, written at once, search fields cleared
    r = read()
    assert (r.phase, r.status, r.iteration, r.evaluations, r.it_per_s) == ("warm-up", "running", 0,
                                                                           None, 0.0)  # fmt: skip
    assert r.elapsed == pytest.approx(10.0)  # since the writer was made
    for i in range(4):  # the 4th step ends warm-up: sampling is written at once
        now[0] += 0.5
        writer.step(i % 2 == 0, -2.0, 0)
    r = read()
    assert (r.phase, r.iteration, r.acceptance) == ("sampling", 4, 0.5)
    assert r.it_per_s == pytest.approx(4 / 2.0)  # 4 iterations in 2 s
    writer.end("stopped", -1.0, 4)
    r = read()
    assert (r.status, r.phase, r.draws_committed, r.loglik) == ("stopped", "stopped", 4, -1.0)
    assert [s["phase"] for s in seen] == ["fast start"] * 3 + ["warm-up", "sampling", "stopped"]


def test_the_rate_and_eta_are_the_current_phase_s_not_an_average_with_warm_up(tmp_path):
    """4 warm-up iterations at 0.5 s each, then sampling at 0.1 s each: after 6 sampling
    iterations the rate is 6 / 0.6 s = 10 it/s (not 10 / 2.6 s, the loop's average), and the
    ETA of the 90 iterations left is 9 s."""
    (tmp_path / "chains").mkdir()
    now = [0.0]
    writer = ProgressWriter(0, 100, 4, tmp_path, clock=lambda: now[0])
    writer.begin(0, -3.0, 0)
    for _ in range(4):
        now[0] += 0.5
        writer.step(True, -2.0, 0)
    r = writer.record()
    assert r.phase == "sampling" and r.it_per_s == pytest.approx(4 / 2.0)  # none sampled yet
    for _ in range(6):
        now[0] += 0.1
        writer.step(True, -2.0, 0)
    r = writer.record()
    assert (r.phase, r.iteration) == ("sampling", 10)
    assert r.it_per_s == pytest.approx(10.0)
    assert eta_seconds(r) == pytest.approx(9.0)
    # during warm-up, the warm-up's own rate; a chain resumed after warm-up: sampling's alone
    resumed = ProgressWriter(0, 100, 4, tmp_path, clock=lambda: now[0])
    resumed.begin(50, -3.0, 0)
    now[0] += 2.0
    for _ in range(5):
        resumed.step(True, -2.0, 0)
    assert resumed.record().it_per_s == pytest.approx(5 / 2.0)


def test_the_end_is_projected_from_the_ess_of_the_last_check(tmp_path):
    """ESS grows in proportion to the draws after warm-up: at iteration 1200 of a 750-iteration
    warm-up (450 after it), an ESS of 200 reaches 400 at 750 + 2 * 450 = 1650, 450 iterations
    on: 45 s at 10 it/s."""
    assert projected_iteration(1200, 750, 200.0) == 1650
    assert projected_iteration(1200, 750, 300.0) == 750 + 600  # 450 * 4 / 3
    assert projected_iteration(1201, 750, 300.0) == 750 + 602  # ceil(451 * 4 / 3 = 601.3)
    for ess in (None, 0.0, math.nan, 400.0, 512.0):  # nothing to project, or ESS not short
        assert projected_iteration(1200, 750, ess) is None
    assert projected_iteration(750, 750, 100.0) is None  # no draws after warm-up yet
    note = "ends when converged, ETA to the cap; not yet at 450 draws/chain: ESS 200 (tau_t)"
    r = rec(phase="sampling", it_per_s=10.0, elapsed=123.0, acceptance=0.314, note=note,
            converge_at=1650)  # fmt: skip
    assert converge_seconds(r) == pytest.approx(45.0)
    assert chain_line(r) == (
        "chain  0  sampling    1200/2500  10.0 it/s  elapsed 2:03  ETA 2:10  "
        f"converged in ~0:45 (projected from ESS)  acc 0.31  {note}"
    )
    beyond = rec(phase="sampling", it_per_s=10.0, converge_at=2500)  # the cap comes first
    assert converge_seconds(beyond) is None and "projected" not in chain_line(beyond)
    done = rec(status="finished", phase="finished", it_per_s=10.0, converge_at=1650)
    assert converge_seconds(done) is None
    # the writer keeps the projection of its last check, and forgets it with a note without one
    (tmp_path / "chains").mkdir()
    now = [0.0]
    writer = ProgressWriter(0, 2500, 750, tmp_path, clock=lambda: now[0])
    writer.begin(1200, -3.0, 0)
    writer.show_note(note, ess=200.0)
    assert writer.record().converge_at == 1650
    writer.end("stopped")
    assert RunDir(tmp_path).read_progress(0).converge_at == 1650  # through the JSON record
    writer.show_note("ends when converged; converged (found by another chain)")
    assert writer.record().converge_at is None


def test_a_record_of_the_launch_second_is_told_apart_by_its_file(tmp_path):
    """Records keep whole seconds: a failed run's record written in the second a new launch
    happens is the old one when its file is older than the launch, the new one when newer."""
    import calendar
    import os
    import time

    from hawkes_cli.local import _written_before

    second = calendar.timegm(time.strptime("2026-01-01T10:00:00Z", "%Y-%m-%dT%H:%M:%SZ"))
    rec = Progress(0, "failed", 3, 40, updated="2026-01-01T10:00:00Z")
    path = tmp_path / "chain-00.progress.json"
    path.write_text("{}")
    launch = second + 0.5
    os.utime(path, (second + 0.2, second + 0.2))
    assert _written_before(rec, launch, path)  # written before the launch: the old run's
    os.utime(path, (second + 0.8, second + 0.8))
    assert not _written_before(rec, launch, path)  # after it: the new chain's own
    assert not _written_before(rec, launch)  # no file: the second alone (as before)
    assert _written_before(rec, second + 1.5)  # an earlier second
    assert _written_before(Progress(0, "pending", 0, 40), launch)  # no time: none written
