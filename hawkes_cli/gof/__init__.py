"""Goodness of fit of a fitted run: branching probabilities, temporal and county residuals,
maps (``hawkes-diagnose RUN_DIR --gof DIR``).

Modules, imports flowing one way: :mod:`.branching` (per-event probability of being
triggered), :mod:`.residuals` (ground compensator, time rescaling, KS), :mod:`.counties`
(observed and expected counts per polygon), :mod:`.figures` (QQ and counts plots),
:mod:`.mapping` (maps), :mod:`.files` (CSV, HDF5, GeoPackage), :mod:`.lengthscales` (per
county), :mod:`.record` (the options and :class:`~.record.GofRun`, the record the steps pass
along), :mod:`.read` (the run, its polygons), :mod:`.steps` and :mod:`.maps` (the steps),
:mod:`.api` (:func:`run_gof`, which runs the steps and writes ``gof.json``).
"""

from __future__ import annotations

from .api import DEFAULT_DRAWS, GofOptions, run_gof

__all__ = ["DEFAULT_DRAWS", "GofOptions", "run_gof"]
