"""benchmarks/project_node.py: the node projection's arithmetic, by hand."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "project_node.py"
spec = importlib.util.spec_from_file_location("project_node", PATH)
project_node = importlib.util.module_from_spec(spec)
sys.modules["project_node"] = project_node  # dataclasses look their module up
spec.loader.exec_module(project_node)


def _result(split: dict | None) -> dict:
    ess = {p: {"bulk": 0.8, "tail": 0.9} for p in project_node.PARAMS}
    ess["sigma_x"] = {"bulk": 0.5, "tail": 0.4}
    return {
        "meta": {"machine": "x86_64 2 cores", "chains": 4, "warmup": 60},
        "seconds_per_iteration_per_chain": 24.0,
        "split": split,
        "ess_per_iteration": ess,
    }


def test_node_row_by_hand():
    # 4 chains on 2 cores, 24 s/it each: a chain iteration is 24/4 = 6 s of the whole machine,
    # 95% of it kernel (5.7 s), and 5% of 24 s at half a core each = 0.6 s of one core.
    m = project_node.measured_from(_result({"trigger kernel": 0.95}))
    assert m.ess_per_draw == pytest.approx(0.4)  # the worst of bulk and tail
    assert m.kernel_machine_s == pytest.approx(5.7)
    assert m.host_s == pytest.approx(0.6)
    row = project_node.node_row(m, speedup=10.0, gpus_per_chain=2)
    assert row.chains == 4
    assert row.s_per_it == pytest.approx(0.6 + 5.7 / 20)  # 0.885 s
    assert row.kernel_fraction == pytest.approx(0.285 / 0.885)
    assert row.post_warmup_per_chain == pytest.approx(400 / (4 * 0.4))  # 250
    assert row.converge_s == pytest.approx((60 + 250) * 0.885)
    assert row.paper_run_h == pytest.approx(20_000 * 0.885 / 3600)
    assert row.paper_node_hours == pytest.approx(20_000 * 0.885 / 3600 * 30 / 4)


def test_a_run_without_a_split_needs_one_from_another_run():
    with pytest.raises(SystemExit, match="split-from"):
        project_node.measured_from(_result(None))
    m = project_node.measured_from(_result(None), {"trigger kernel": 0.5})
    assert m.kernel_share == 0.5
