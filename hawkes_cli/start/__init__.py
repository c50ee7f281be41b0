"""How a chain starts: the fast start of ``sampler.initial: auto``, shared by a run's chains.

Modules, imports flowing one way (each uses only those above it):

- :mod:`.result`: :class:`StartResult` (the mode, its covariance, the modes found) and its
  exact JSON, carried by the shared start file and by every checkpoint of a chain that took it;
- :mod:`.search`: Nelder-Mead on a counted, capped log posterior, and the cheap-coordinate
  polish; :mod:`.curvature`: the finite-difference Hessian and the regularised covariance;
- :mod:`.find`: :func:`find_start` (search, merge, polish, curvature; pure over callables: no
  engine, file or MPI) and :func:`overdispersed_starts`;
- :mod:`.subsample`: what the search runs on (a seeded subsample of the events, one seeded
  location draw);
- :mod:`.shared`: one fast start per run directory (``chains/start.json`` under a lock);
- :mod:`.chain`: a fresh chain's first state (the shared fast start on the chain's collective
  likelihood, then its own over-dispersed draw; or the initial values jittered).

This package exposes the pure part; the runner imports :mod:`.chain` and :mod:`.subsample`.
"""

from __future__ import annotations

from .find import SearchSettings, find_start, overdispersed_starts
from .result import Mode, StartResult

__all__ = ["Mode", "SearchSettings", "StartResult", "find_start", "overdispersed_starts"]
