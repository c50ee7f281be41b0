"""Goodness of fit of a fitted run: branching probabilities, temporal and county residuals,
maps (``hawkes-diagnose RUN_DIR --gof DIR``).

Modules, imports flowing one way: :mod:`.branching` (per-event probability of being
triggered), :mod:`.residuals` (ground compensator, time rescaling, KS), :mod:`.counties`
(observed and expected counts per polygon), :mod:`.figures` (PNG plots and maps), :mod:`.api`
(:func:`run_gof`, which reads the run and writes the files).
"""

from __future__ import annotations

from .api import DEFAULT_DRAWS, GofOptions, run_gof

__all__ = ["DEFAULT_DRAWS", "GofOptions", "run_gof"]
