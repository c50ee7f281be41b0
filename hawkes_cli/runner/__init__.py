"""One chain: set-up, start or resume, the iteration loop, commits and progress.

The pieces it ties together, each with one job:

* :class:`~hawkes_cli.posterior.LogPosterior` - priors + likelihood on the log scale, the
  sampler's ``log_density``; its :class:`~hawkes_cli.posterior.Density` parts are what the
  chain file records;
* :class:`~hawkes_cli.distributed.DistributedLikelihood` - rank 0's handle on the chain's
  collective work (likelihood, pinned pair sums, location draws, stop agreement), replayed by
  the other ranks in :func:`~hawkes_cli.distributed.serve`;
* :mod:`hawkes_cli.sampler` - the MH kernel (pure ``init``/``step`` over a state);
* :mod:`hawkes_cli.start` - a fresh chain's first state (the run's shared fast start of
  ``sampler.initial: auto``, then the chain's own over-dispersed draw);
* :class:`~hawkes_cli.resample.LocationStream` - the cut-posterior location draws;
* :class:`~hawkes_cli.storage.ChainWriter` and :class:`~hawkes_cli.rundir.RunDir` - draws,
  atomic commits with a typed :class:`~hawkes_cli.rundir.Checkpoint`, progress.

All ranks of a chain run :func:`run_chain` together: rank 0 drives the sampler and writes the
chain file; the other ranks replay its collective calls. A stop request
(:class:`hawkes_cli.stop.StopFlag`) is read at every iteration boundary and between the fast
start's evaluations.

Modules, imports flowing one way (each uses only those above it):

- :mod:`.setup`: :func:`build_chain` (events, area, likelihood, location stream, random
  streams) and :func:`default_initial`;
- :mod:`.resume`: checking a checkpoint before the chain file is touched, and restoring it;
- :mod:`.progress`: the progress record; :mod:`.loop`: the iterations and their commits,
  :class:`ChainOutcome`;
- :mod:`.chain`: :func:`run_chain` (every rank) and rank 0's drive: open the chain file, start
  or resume, run the loop.

The current state's density is held once: the sampler state's ``log_target`` and, beside it,
the :class:`~hawkes_cli.posterior.Density` of the same point (its log-likelihood and log-prior,
``log_target`` equal to the state's).
"""

from __future__ import annotations

from .chain import run_chain
from .loop import ChainOutcome
from .setup import build_chain, default_initial

__all__ = ["ChainOutcome", "build_chain", "default_initial", "run_chain"]
