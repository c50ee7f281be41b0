"""A chain's collective work over the ranks of its communicator: rank 0 drives, the others replay.

Every rank of a chain holds a :class:`ChainRank`: its rows of the likelihood, the cut-posterior
location stream (identical on every rank) and its own stop flag. Each of its methods is
collective or must stay in step on every rank (a likelihood evaluation reduces over ranks; the
pinned pair sums and the location draws must match).

Each rank's :class:`ChainSetup` (the run's config, the events, the chain's sampler stream and
this :class:`ChainRank`) is what :func:`hawkes_cli.runner.build_chain` made for it.

Rank 0 calls them through :class:`DistributedLikelihood`, which first broadcasts the call
(method name and arguments) and then runs it locally; the other ranks sit in :func:`serve`,
which receives each call and runs it on their own :class:`ChainRank`, until
:meth:`DistributedLikelihood.close`. The ranks therefore run the same collective operations in
the same order, whatever rank 0's sampler does. With one rank nothing is broadcast.

Fast start: the mode search of ``sampler.initial: auto`` evaluates a second likelihood on a
subsample of the events (:meth:`ChainRank.subsample_loglik`), split over the same ranks, built
on every rank at its first evaluation and freed by :meth:`ChainRank.end_subsample`.

Stopping: :meth:`ChainRank.boundary_stop` is a float64 allreduce of every rank's own stop flag
(never rank 0's flag broadcast), so a signal that reaches any rank stops all ranks at the same
iteration boundary.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .engine import Likelihood, profile
from .engine.choice import TriggerChoice, choose_trigger
from .model import Params
from .parallel import Comm
from .resample import LocationStream

if TYPE_CHECKING:
    import numpy as np

    from .config import Config
    from .data import EventData

log = logging.getLogger(__name__)

__all__ = ["CALLS", "ChainRank", "ChainSetup", "DistributedLikelihood", "serve"]

#: The :class:`ChainRank` methods rank 0 may call through the proxy (the replay protocol).
CALLS: frozenset[str] = frozenset(
    {
        "loglik",
        "pin",
        "recalibrate",
        "redraw_locations",
        "use_search_locations",
        "use_file_locations",
        "restore",
        "boundary_stop",
        "subsample_loglik",
        "end_subsample",
        "fix_cutoff",
        "choose_trigger",
    }
)
_CLOSE = "close"


class SupportsBool(Protocol):
    """A stop flag: true once a stop was requested (read once per iteration boundary)."""

    def __bool__(self) -> bool: ...


class ChainRank:
    """This rank's share of a chain's collective work.

    Parameters
    ----------
    likelihood
        The likelihood of this rank's rows (collective over ``comm``).
    comm
        The chain's communicator.
    locations
        The cut-posterior location stream, or None when locations are never redrawn.
    stop
        This rank's stop flag (set by its signal handlers).
    subsample
        Builds this rank's share of the fast start's subsample likelihood (collective over
        ``comm``, the same subsample on every rank); None when the chain has none.
    search_locations
        The fast start's one location draw (the same on every rank), for a run that redraws
        locations: the search then sees events where the chain's draws put them, not at the
        file's points; None when locations are never redrawn.
    file_locations
        The events file's ``(x, y)``, restored after the search.
    ahead
        Starts building what the next location draw needs while this iteration runs
        (:meth:`~hawkes_cli.engine.truncated.TruncatedBackend.prepare_locations`, given the
        next draw's pending points; :mod:`hawkes_cli.engine.ahead`); None: nothing ahead.
    """

    def __init__(
        self,
        likelihood: Likelihood,
        comm: Comm,
        *,
        locations: LocationStream | None = None,
        stop: SupportsBool | None = None,
        subsample: Callable[[], Likelihood] | None = None,
        search_locations: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None,
        file_locations: tuple[np.ndarray, np.ndarray] | None = None,
        ahead: Callable[[np.ndarray, np.ndarray, Callable[[], Any]], None] | None = None,
    ) -> None:
        self.likelihood = likelihood
        self._ahead = ahead
        self.comm = comm
        self.locations = locations
        self.stop = stop
        self._make_subsample = subsample
        self._search_locations = search_locations
        self._file_locations = file_locations
        self._subsample: Likelihood | None = None
        self.subsample_pair_passes = 0
        """Pair passes the subsample likelihood ran on this rank (kept after it is freed)."""

    # --- collective (through the proxy on rank 0, through serve elsewhere) ----------------
    def loglik(self, p: Params) -> float:
        """The log-likelihood at ``p`` (an allreduce over ranks)."""
        return self.likelihood.loglik(p)

    def pin(self, p: Params) -> None:
        """Keep the pair sums of ``p`` (the chain's current state) cached."""
        self.likelihood.pin(p)

    def redraw_locations(self) -> None:
        """Cut posterior: every event uniformly inside its polygon (same on every rank)."""
        if self.locations is None:
            raise RuntimeError("locations are redrawn only with sampler.resample_every > 0")
        with profile.stage("location draw"):
            x, y = self.locations.draw()
        with profile.stage("set locations"):
            self.likelihood.set_locations(x, y)
        if self._ahead is not None:  # the next draw, on the device, while this one is used
            with profile.stage("location draw"):
                pending = self.locations.draw_ahead()
            if pending is not None:
                self._ahead(pending.x, pending.y, pending.wait)

    def use_search_locations(self) -> bool:
        """Put the events at the fast start's location draw (when the chain has one; every
        rank); returns whether it did."""
        if self._search_locations is None:
            return False
        self.likelihood.set_locations(*self._search_locations())
        return True

    def use_file_locations(self) -> None:
        """Put the events back at the events file's points (every rank)."""
        if self._file_locations is None:
            raise RuntimeError("this chain rank was built without the file's locations")
        self.likelihood.set_locations(*self._file_locations)

    def restore(
        self, location_state: Mapping[str, Any] | None, truncation: Mapping[str, Any] | None
    ) -> None:
        """Continue from a checkpoint: the truncation's cut-off, then the last location draw
        (from the stream state before it), or the file's locations when there was none."""
        self.likelihood.restore_truncation(truncation)
        if location_state is not None:
            if self.locations is None:
                raise RuntimeError("the checkpoint has a location state but resampling is off")
            self.locations.rewind(location_state)
            self.redraw_locations()

    def boundary_stop(self) -> bool:
        """Whether to stop at this iteration boundary: true on every rank as soon as any rank's
        stop flag is set (reads this rank's flag once)."""
        flag = bool(self.stop) if self.stop is not None else False
        if self.comm.size == 1:
            return flag
        return self.comm.allreduce_sum(1.0 if flag else 0.0) > 0.0

    def subsample_loglik(self, p: Params) -> float:
        """The log-likelihood of the fast start's subsample at ``p`` (unscaled; an allreduce
        over ranks). The subsample likelihood is built at the first call."""
        if self._subsample is None:
            if self._make_subsample is None:
                raise RuntimeError("this chain has no subsample likelihood")
            self._subsample = self._make_subsample()
        before = self._subsample.pair_passes
        try:
            return self._subsample.loglik(p)
        finally:
            self.subsample_pair_passes += self._subsample.pair_passes - before

    def end_subsample(self) -> None:
        """Free the subsample likelihood (its device buffers); a later call rebuilds it."""
        self._subsample = None

    def fix_cutoff(self, exceedances: int = 0, worst_bound: float = 0.0) -> None:
        """End of warm-up (or a resume past it): the truncation cut-off no longer adapts
        (:attr:`~hawkes_cli.engine.Likelihood.adapt_cutoff` False on every rank); the counts
        of bounds above the tolerance continue from ``exceedances`` and ``worst_bound`` (a
        checkpoint's)."""
        lik = self.likelihood
        lik.adapt_cutoff = False
        lik.bound_exceedances = int(exceedances)
        lik.worst_bound = float(worst_bound)

    def recalibrate(self, p: Params) -> None:
        """Choose the truncation cut-off afresh at ``p`` (:meth:`~hawkes_cli.engine.
        Likelihood.recalibrate`; collective)."""
        self.likelihood.recalibrate(p)

    def choose_trigger(self, p: Params) -> TriggerChoice | None:
        """``engine.trigger: auto`` at the chain's start: time one exact and one truncated
        pass at ``p`` on every rank and keep the faster
        (:func:`~hawkes_cli.engine.choice.choose_trigger`; the same choice on every rank, kept
        in :meth:`truncation_state`). None when there is nothing to choose."""
        return choose_trigger(self.likelihood, p)

    # --- local reads (no communication; rank 0 records them) ------------------------------
    @property
    def location_state(self) -> dict[str, Any] | None:
        """The location stream's state before its last draw (None if none), for checkpoints."""
        return None if self.locations is None else self.locations.last_state

    def truncation_state(self) -> dict | None:
        """The truncated trigger's cut-off for checkpoints, with the trigger chosen at the
        chain's start when one was (None for exact engines)."""
        return self.likelihood.truncation_state()

    @property
    def pair_passes(self) -> int:
        """Pair passes (background + trigger) this rank's chain likelihood ran so far (the
        subsample's apart: :attr:`subsample_pair_passes`)."""
        return self.likelihood.pair_passes

    @property
    def trigger_passes(self) -> int:
        """Trigger passes of this rank's chain likelihood so far (in :attr:`pair_passes`)."""
        return self.likelihood.trigger_passes

    @property
    def adapt_cutoff(self) -> bool:
        """Whether the truncation cut-off may still tighten (before :meth:`fix_cutoff`)."""
        return self.likelihood.adapt_cutoff

    @property
    def bound_exceedances(self) -> int:
        """Evaluations after warm-up whose truncation bound exceeded the tolerance (the same
        on every rank)."""
        return self.likelihood.bound_exceedances

    @property
    def worst_bound(self) -> float:
        """The largest truncation bound (nats) of an evaluation after warm-up (0 before)."""
        return self.likelihood.worst_bound

    @property
    def tightenings(self) -> int:
        """Times the truncated trigger's cut-off was tightened so far (the same on every rank:
        each tightening is a collective decision)."""
        return self.likelihood.tightenings


@dataclass(frozen=True)
class ChainSetup:
    """What one rank of a chain is built from (:func:`hawkes_cli.runner.build_chain`).

    Attributes
    ----------
    config
        The run's configuration.
    chain_id
        0-based chain number.
    data
        The events (sorted by time).
    area
        Study-region area (coordinate units squared).
    initial
        Natural-scale starting values by name: the config's ``sampler.initial`` over
        :func:`~hawkes_cli.runner.default_initial` (before the chain's random jitter), or with
        ``initial: auto`` the defaults, where the mode search starts.
    rank
        This rank's share of the collective work (likelihood rows, location stream, stop
        flag).
    rng
        The sampler's random stream (rank 0 uses it; restored from checkpoints).
    """

    config: Config
    chain_id: int
    data: EventData
    area: float
    initial: Mapping[str, float]
    rank: ChainRank
    rng: np.random.Generator


class DistributedLikelihood:
    """Rank 0's handle on a :class:`ChainRank`: each call is broadcast, then run here.

    Parameters
    ----------
    local
        Rank 0's own :class:`ChainRank`; its ``comm`` carries the broadcasts.

    Notes
    -----
    Use as a context manager (or call :meth:`close`) so that the other ranks leave
    :func:`serve`. With a one-rank communicator it is a plain pass-through.
    """

    def __init__(self, local: ChainRank) -> None:
        if local.comm.rank != 0:
            raise ValueError(
                f"the distributed likelihood is driven from rank 0; rank {local.comm.rank} "
                "must call serve()"
            )
        self.local = local
        self.comm = local.comm
        self.closed = False

    def _call(self, name: str, *args: Any) -> Any:
        if self.closed:
            raise RuntimeError(f"{name}() on a closed distributed likelihood")
        if self.comm.size > 1:
            self.comm.bcast((name, args))
        return getattr(self.local, name)(*args)

    def loglik(self, p: Params) -> float:
        """See :meth:`ChainRank.loglik` (collective)."""
        return self._call("loglik", p)

    def pin(self, p: Params) -> None:
        """See :meth:`ChainRank.pin`."""
        self._call("pin", p)

    def redraw_locations(self) -> None:
        """See :meth:`ChainRank.redraw_locations`."""
        self._call("redraw_locations")

    def use_search_locations(self) -> bool:
        """See :meth:`ChainRank.use_search_locations`."""
        return self._call("use_search_locations")

    def use_file_locations(self) -> None:
        """See :meth:`ChainRank.use_file_locations`."""
        self._call("use_file_locations")

    def restore(
        self, location_state: Mapping[str, Any] | None, truncation: Mapping[str, Any] | None
    ) -> None:
        """See :meth:`ChainRank.restore`."""
        self._call("restore", location_state, truncation)

    def boundary_stop(self) -> bool:
        """See :meth:`ChainRank.boundary_stop` (collective; each rank reads its own flag)."""
        return self._call("boundary_stop")

    def subsample_loglik(self, p: Params) -> float:
        """See :meth:`ChainRank.subsample_loglik` (collective)."""
        return self._call("subsample_loglik", p)

    def end_subsample(self) -> None:
        """See :meth:`ChainRank.end_subsample`."""
        self._call("end_subsample")

    def fix_cutoff(self, exceedances: int = 0, worst_bound: float = 0.0) -> None:
        """See :meth:`ChainRank.fix_cutoff` (every rank)."""
        self._call("fix_cutoff", exceedances, worst_bound)

    def recalibrate(self, p: Params) -> None:
        """See :meth:`ChainRank.recalibrate` (collective)."""
        self._call("recalibrate", p)

    def choose_trigger(self, p: Params) -> TriggerChoice | None:
        """See :meth:`ChainRank.choose_trigger` (collective)."""
        return self._call("choose_trigger", p)

    def close(self) -> None:
        """Release the other ranks from :func:`serve` (once; later calls do nothing)."""
        if not self.closed and self.comm.size > 1:
            self.comm.bcast((_CLOSE, ()))
        self.closed = True

    def __enter__(self) -> DistributedLikelihood:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(local: ChainRank) -> None:
    """Replay rank 0's calls on this rank's :class:`ChainRank` until it closes (ranks > 0).

    Raises
    ------
    RuntimeError
        A call outside :data:`CALLS` (a protocol error).
    """
    comm = local.comm
    if comm.rank == 0:
        raise ValueError("rank 0 drives the chain; serve() is for the other ranks")
    while True:
        name, args = comm.bcast(None)
        if name == _CLOSE:
            return
        if name not in CALLS:  # pragma: no cover - protocol error
            raise RuntimeError(f"unknown collective call {name!r} from rank 0")
        getattr(local, name)(*args)
