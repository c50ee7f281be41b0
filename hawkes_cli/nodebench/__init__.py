"""A new node's first look (``hawkes-run devices --bench``): the engine's seconds at a million
events on one device, and what an MCMC iteration of the shipped configs would take there.

:func:`~.measure.run_bench` times the passes (:mod:`.measure`) on events it generates
(:mod:`.events`); :func:`~.report.project` turns them into seconds per iteration of the shipped
tiered sampler, ``n_expensive x truncated pass + (n_cheap + jump_prob) x tau_t change``, and
:func:`~.report.render` writes the report as text (:mod:`.report`). Nothing here prints.
"""

from __future__ import annotations

from .events import county_events
from .measure import DEFAULT_EVENTS, MIN_EVENTS, out_problem, profiling, run_bench
from .report import EXACT_CPU_MAX, KernelTime, NodeBench, PassTiming, Projection, project, render

__all__ = [
    "DEFAULT_EVENTS",
    "EXACT_CPU_MAX",
    "MIN_EVENTS",
    "KernelTime",
    "NodeBench",
    "PassTiming",
    "Projection",
    "county_events",
    "out_problem",
    "profiling",
    "project",
    "render",
    "run_bench",
]
