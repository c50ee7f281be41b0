"""benchmarks/bench_pass_shape.py: its kernel edits still apply, and its counts are what the
truncation promises.

Every source inside a row's cut-off paraboloid ``u + v <= kappa_l`` must be summed exactly
(the cell's ``tstart`` uses a lower bound of ``v``), except those the expansion boxes sum by
their moments; so each row's terms in the counting kernel are at least its ideal count.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
spec = importlib.util.spec_from_file_location("bench_pass_shape", BENCH / "bench_pass_shape.py")
bench = importlib.util.module_from_spec(spec)
sys.modules["bench_pass_shape"] = bench
spec.loader.exec_module(bench)


def test_every_edit_applies_and_changes_the_source():
    base = bench.edited_source("base")
    for variant in bench.VARIANTS[1:]:
        assert bench.edited_source(variant) != base, variant


@pytest.mark.opencl
@pytest.mark.parametrize("model", [1, 2])
def test_the_kernel_sums_every_pair_inside_the_cut_off(tmp_path, model):
    """Row by row, on 3,000 events (bench_iteration's, continuous times: no ties)."""
    events = tmp_path / "events.h5"
    bench.write_events(3000, events)
    rows = np.arange(3000)
    _, unboxed = bench.ideal_rows(events, model, rows)
    terms = bench.in_child(events, model, "count-terms", 1, tmp_path / "terms.npy")["count"]
    per_row = np.load(tmp_path / "terms.npy")
    assert per_row.sum() == terms
    assert unboxed.sum() > 1000  # the cut-off leaves pairs to sum
    short = np.flatnonzero(per_row < unboxed)
    assert short.size == 0, (short[:5], per_row[short[:5]], unboxed[short[:5]])
    # the counts of a row are whole numbers of terms, chunks and calls
    calls = bench.in_child(events, model, "count-calls", 1)["count"]
    chunks = bench.in_child(events, model, "count-chunks", 1)["count"]
    assert calls <= chunks <= terms / 8 + 2 * calls
