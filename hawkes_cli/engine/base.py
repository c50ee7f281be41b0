"""What every likelihood engine shares: the pair-sum interface and the float64 finish.

An engine (``reference`` or ``opencl``) only computes, for a contiguous block of rows, the two
per-event pair sums of DESIGN section 2 (float64, normalising constants included):

    B_n = rho * sum_{m: t_m != t_n} phi1(t_n - t_m; tau_t)                 (depends on tau_t)
    E_n = sum_{m: t_m < t_n} (1/sigma_t) exp(-(t_n - t_m)/sigma_t) phi2(x_n - x_m; s_m)
                                                                      (depends on sigma_x, sigma_t)

:class:`Likelihood` turns them into the log-likelihood, identically for every engine:
``lambda_n = mu0 * B_n + xi0 * E_n``, the floor, the log, the compensator, and the float64
reduction over rows and ranks. It caches B and E by the parameters they depend on, so a
change of ``mu0`` or ``xi0`` alone costs O(N) and no pair pass.

A backend may omit trigger terms if it bounds what it omits: such a backend subclasses
:class:`BoundedPairBackend`, and :class:`Likelihood` then checks its ``tolerance`` (nats of
log-likelihood, absolute) on every evaluation and checkpoints its cut-off. The cut-off adapts
(tightens) only while :attr:`Likelihood.adapt_cutoff` is true: the fast start and the warm-up
of a chain. After it, the target must not change mid-chain: a bound above the tolerance is
reported (a WARNING and :attr:`Likelihood.bound_exceedances`), not tightened.
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..errors import DeviceError
from ..model import Params
from ..parallel import Comm, SerialComm
from ..vocab import EDGE_CENSORED, EDGE_RENORMALIZED
from . import profile
from .compensator import Compensator
from .edge_mass import EdgeMass
from .row_sums import host_sums
from .times import TimeStructure

if TYPE_CHECKING:
    from .binned import BinnedBackground, LatticePass
    from .device_sums import DeviceRowSums

log = logging.getLogger(__name__)

LAMBDA_FLOOR = 1e-40

#: The range of every parameter that the engines evaluate (natural scale). Beyond it the pair
#: terms' ``1/sigma^2``, ``(d/sigma)^2`` and ``exp(-d/sigma_t)`` leave the float range (in
#: float32, with model 2's densities up to 1e5, already near 1e-19) and the engines would
#: disagree (division by zero, overflow, NaN); a log-likelihood there is reported as ``-inf``
#: with a WARNING, so a sampler rejects such a proposal. Every realistic value (lengthscales
#: in days or coordinate units, weights of order one) lies many decades inside.
PARAM_RANGE: tuple[float, float] = (1e-15, 1e15)


def out_of_range(p: Params) -> str | None:
    """Why ``p`` cannot be evaluated (a parameter outside :data:`PARAM_RANGE`), or ``None``."""
    lo, hi = PARAM_RANGE
    for name, value in p.as_dict().items():
        if not lo <= value <= hi:
            return (
                f"parameter {name}={value!r} is outside the range [{lo:g}, {hi:g}] that the "
                "engines evaluate; log-likelihood taken as -inf"
            )
    return None


_CACHE_SIZE = 2  # current state and one proposal
#: An evaluation whose log-likelihood, even raised by its whole truncation bound, stays this
#: many nats below the pinned (current) state's is one no MH step accepts (probability below
#: e^-1000): its bound above the tolerance neither tightens the cut-off nor counts as an
#: exceedance. (A jump to mu0 ~ 1e-5 once raised kappa from 19 to 366 this way at 1M cases:
#: every later pass about 20 times slower, to certify the value of a rejected proposal.)
HOPELESS_NATS = 1000.0
_LL_MEMORY = 16  # log-likelihoods remembered by parameters, to know the pinned state's
#: Default B entries kept (the pinned one included). A sampler that proposes several new
#: ``tau_t`` per iteration (the tiered kind: one per cheap move) raises
#: :attr:`Likelihood.background_cache_size` so that the current state's B survives them all.
_B_CACHE_SIZE = _CACHE_SIZE


class PairBackend(Protocol):
    """Per-event pair sums for the rows ``[row_start, row_stop)`` of sorted events."""

    row_start: int
    row_stop: int

    @property
    def path(self) -> str:
        """Which computation each part takes (for ``hawkes-run loglik``)."""
        ...

    @property
    def kernel_fingerprint(self) -> str:
        """SHA-256 (hex) of every kernel source and build option compiled ("" without
        OpenCL)."""
        ...

    def background(self, tau_t: float) -> np.ndarray:
        """B for the rows, float64, shape (row_stop - row_start,)."""
        ...

    def trigger(self, sigma_x: float, sigma_t: float) -> np.ndarray:
        """E for the rows, float64, shape (row_stop - row_start,)."""
        ...

    def set_locations(self, x: np.ndarray, y: np.ndarray) -> None:
        """Replace all N locations (cut-posterior resampling); E must be recomputed."""
        ...

    def set_amplitude(self, amplitude: np.ndarray | None) -> None:
        """Weight source m's trigger terms by ``amplitude[m]`` (shape (N,)) from the next
        :meth:`trigger` on; None: by 1 (``model.edge: renormalized``, DESIGN section 2b)."""
        ...


#: ``model.edge: renormalized`` divides each source's kernel by its mass inside the study region,
#: floored here: an event whose kernel lies almost wholly outside (a speck of an island much
#: smaller than the lengthscale) would otherwise weigh without bound. Its amplitude is at most
#: 1000.
MIN_RENORMALIZED_MASS = 1e-3


class BoundedPairBackend(ABC):
    """A pair backend whose trigger may omit terms, with a rigorous per-row bound on what it
    omits (:mod:`hawkes_cli.engine.truncated`); :class:`Likelihood` enforces ``tolerance``.

    Subclasses also implement :class:`PairBackend`; their :meth:`trigger` is the first part of
    :meth:`trigger_bounded`.

    Attributes
    ----------
    tolerance : float
        Bound on ``|ell~ - ell|`` in nats of log-likelihood (absolute) to check on every
        evaluation (> 0).
    """

    tolerance: float

    @abstractmethod
    def trigger_bounded(self, sigma_x: float, sigma_t: float) -> tuple[np.ndarray, np.ndarray]:
        """(E~, omega) for the rows, float64, each shape (row_stop - row_start,): the
        truncated E and ``omega_n >= E_n - E~_n >= 0``."""

    def trigger_stack(self, sigma_x: float, sigma_t: float) -> np.ndarray:
        """:meth:`trigger_bounded` as the rows of one new float64 array, shape (2, rows) (what
        :class:`Likelihood` keeps); a backend whose pass makes it so returns its own."""
        e, omega = self.trigger_bounded(sigma_x, sigma_t)
        return np.vstack([np.asarray(e, np.float64), np.asarray(omega, np.float64)])

    @abstractmethod
    def tighten(self, excess: float) -> bool:
        """Omit less from now on (the realised bound was ``excess`` times the tolerance);
        False if nothing more can be done."""

    #: What the backend's last self-check on its device found wrong (None: nothing); a
    #: :class:`Likelihood` evaluation raises :class:`~hawkes_cli.errors.DeviceError` with it.
    check_failure: str | None = None

    #: Whether the cut-off is settled for this data (by :meth:`calibrate`, a given cut-off or
    #: a restored checkpoint); :class:`Likelihood` calibrates once before its first evaluation
    #: otherwise.
    calibrated: bool = True

    def calibrate(
        self, sigma_x: float, sigma_t: float, base: np.ndarray, xi0: float, comm: Comm
    ) -> float:
        """Choose the cut-off for this data before the first evaluation (collective over
        ``comm``); ``base`` is ``mu0 * B`` of the rows, shape (rows,). The default keeps the
        current one. Returns a number describing the cut-off (e.g. ``kappa``)."""
        self.calibrated = True
        return math.nan

    @abstractmethod
    def cutoff_state(self) -> dict[str, float]:
        """The cut-off as a JSON-able dict (part of a chain's checkpoint), e.g.
        ``{"kappa": 15.3}``."""

    @abstractmethod
    def restore_cutoff(self, state: Mapping[str, Any]) -> None:
        """Continue at a cut-off from :meth:`cutoff_state`."""


@dataclass(frozen=True)
class Evaluation:
    """One full evaluation on this rank's rows.

    Attributes
    ----------
    loglik : float
        The log-likelihood over all rows and ranks (float64).
    B, E : (rows,) float64
        This rank's per-event parts; ``lambda_n = mu0 * B_n + xi0 * E_n``. ``B`` is None where
        the sums ran on the device (:attr:`Likelihood.row_sums`: no ``B`` was built).
    error_bound : float
        Rigorous bound on ``|loglik - exact loglik|`` due to omitted trigger terms (all ranks;
        0 for exact backends); working-precision rounding is not included.
    background_bound : float
        With the background on a time lattice (:mod:`.binned`): a rigorous bound on its part of
        ``|loglik - exact loglik|`` in nats (all ranks), ``sum_n -log1p(-mu0 beta_n /
        lambda_n)``; 0 for the exact background.
    edge_error : float
        With an edge correction: the error of its term in nats (all ranks), from the events'
        mass error scales ``e_n`` (:mod:`.region`; an estimate on the raster path, not a bound);
        0 without one. ``censored``: the compensator's, ``xi0 * sum_n w_n * e_n``
        (``w_n`` the trigger's share of the window after ``t_n``); ``renormalized``: the rates',
        ``sum_n (xi0 E_n / lambda_n) * e_n / M_n`` (each row's sources taken to err as it does,
        relatively: they lie within a few lengthscales of it).
    """

    loglik: float
    B: np.ndarray | None
    E: np.ndarray
    error_bound: float = 0.0
    edge_error: float = 0.0
    background_bound: float = 0.0


class Likelihood:
    """Log-likelihood of one chain, possibly split over the ranks of ``comm``.

    Parameters
    ----------
    backend
        Pair sums for this rank's rows.
    time : (N,) float64
        All event times, sorted ascending (time units).
    window_end
        ``T`` of the compensator; default: the last event time.
    comm
        Communicator of the chain's ranks; every rank must call :meth:`loglik` with the
        same parameters (collective).
    times
        The tie structure of ``time``, when already built (as by
        :func:`~hawkes_cli.engine.build_likelihood`); built here otherwise.
    edge
        The edge correction's trigger masses inside the study region
        (:class:`~hawkes_cli.engine.region.EdgeMass`). None: the paper's likelihood (every
        mass 1).
    edge_kind
        How ``edge`` enters (DESIGN section 2b): ``"censored"`` (its masses are this rank's
        rows'; the compensator's trigger term of event n is weighted by its mass) or
        ``"renormalized"`` (its masses are all N events'; source m's trigger terms are divided
        by its mass, ``backend.set_amplitude``, and the compensator is the paper's).
    lattice
        The background on a time lattice (:class:`~hawkes_cli.engine.binned.
        BinnedBackground` of this rank's rows) instead of the backend's exact one; its error
        bound is reported in :attr:`Evaluation.background_bound`.
    row_sums
        With ``lattice``: the per-row sums on the backend's device (:mod:`.device_sums`).

    A backend that subclasses :class:`BoundedPairBackend` has its tolerance checked by
    :meth:`evaluate` and its cut-off kept by :meth:`truncation_state`.

    Attributes
    ----------
    adapt_cutoff : bool
        Whether :meth:`evaluate` may tighten a bounded backend's cut-off when the realised
        bound exceeds its tolerance (True, the default: the fast start and the warm-up). The
        runner sets it False on every rank at the end of warm-up (and when a chain resumes
        past it), so the target stays the same for the rest of the chain; a bound above the
        tolerance is then counted and logged instead.
    bound_exceedances : int
        Evaluations, while not adapting, whose realised bound exceeded the tolerance (the same
        on every rank: the bound is reduced over ranks).
    worst_bound : float
        The largest realised bound (nats) of an evaluation while not adapting (0 before).
    tightenings : int
        Times the cut-off was tightened.
    """

    def __init__(
        self,
        backend: PairBackend,
        time: np.ndarray,
        *,
        window_end: float | None = None,
        comm: Comm | None = None,
        times: TimeStructure | None = None,
        edge: EdgeMass | None = None,
        edge_kind: str = EDGE_CENSORED,
        lattice: BinnedBackground | None = None,
        row_sums: DeviceRowSums | None = None,
    ) -> None:
        self.backend = backend
        self.edge = edge
        self.renormalized = edge is not None and edge_kind == EDGE_RENORMALIZED
        if self.renormalized and edge.rows != (0, int(np.size(time))):
            raise ValueError("renormalized: the edge masses must be those of all N events")
        self._relative_edge_error: tuple[float, np.ndarray] | None = None
        self._amplitude_at: float | None = None  # the sigma_x of the backend's amplitudes
        self.lattice = lattice
        self.row_sums = row_sums
        self.comm = comm or SerialComm()
        t = np.asarray(time, dtype=np.float64)
        self.window_end = float(t[-1]) if window_end is None else float(window_end)
        if self.window_end < t[-1]:
            raise ValueError(f"window end {self.window_end} is before the last event time {t[-1]}")
        ts = TimeStructure.from_times(t) if times is None else times
        # the compensator depends on the time alone: once per distinct time of these rows
        rows_u, row_time, tcount = np.unique(
            ts.inverse[backend.row_start : backend.row_stop],
            return_inverse=True,
            return_counts=True,
        )
        masses = None if self.edge is None or self.renormalized else self.edge
        self._comp = Compensator(ts.unique[rows_u], tcount, row_time, self.window_end, masses)
        self._work: np.ndarray | None = None  # _local's two buffers
        self._b_cache: OrderedDict[float, np.ndarray] = OrderedDict()
        self._p_cache: OrderedDict[float, LatticePass] = OrderedDict()  # with row_sums
        self._e_cache: OrderedDict[tuple[float, float], np.ndarray] = OrderedDict()
        self._pinned: tuple[float, tuple[float, float]] | None = None
        self._pinned_params: Params | None = None
        self._recent_ll: OrderedDict[Params, float] = OrderedDict()
        self._bounded: BoundedPairBackend | None = (
            backend if isinstance(backend, BoundedPairBackend) else None
        )
        self.background_cache_size = _B_CACHE_SIZE
        """B arrays kept, the pinned one included (>= 2; each is this rank's rows in float64).
        """
        self.trigger_cache_size = _CACHE_SIZE
        """E arrays kept, the pinned one included (>= 2): a sampler making several trigger
        proposals per iteration (``tiered`` with ``n_expensive > 1``) raises it so that the
        state an accepted one moved to survives the next."""
        self.adapt_cutoff = True
        self.bound_exceedances = 0
        self.worst_bound = 0.0
        self._warned_bound = 0.0  # the bound of the last WARNING (one per doubling)
        self.tightenings = 0
        self.background_passes = 0
        self.trigger_passes = 0

    @property
    def kernel_fingerprint(self) -> str:
        """SHA-256 (hex) of every kernel source, build option and precision the backend
        compiled (:func:`hawkes_cli.kernels.kernel_fingerprint`); "" for the reference engine.
        """
        return self.backend.kernel_fingerprint

    @property
    def pair_passes(self) -> int:
        """Pair passes (background or trigger) run so far on this rank."""
        return self.background_passes + self.trigger_passes

    def pin(self, p: Params) -> None:
        """Keep the B and E of ``p`` (the chain's current state) cached while proposals come
        and go, so a run of rejected proposals never forces the current state's pair passes."""
        self._pinned = (p.tau_t, (p.sigma_x, p.sigma_t))
        self._pinned_params = p

    def _cached(self, cache: OrderedDict, key, compute, size: int = _CACHE_SIZE):
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
            return hit
        value = compute()
        if isinstance(value, np.ndarray):
            value.setflags(write=False)
        cache[key] = value
        pinned = () if self._pinned is None else self._pinned
        while len(cache) > size:
            victim = next((k for k in cache if k not in pinned), None)
            if victim is None:
                break
            del cache[victim]
        return value

    @property
    def path(self) -> str:
        """Which computation each part takes (for ``hawkes-run loglik``)."""
        path = self.backend.path
        if self.lattice is not None:
            path = f"{self.lattice.path}; {path.split('; ', 1)[-1]}"
        if self.edge is not None:
            kind = EDGE_RENORMALIZED if self.renormalized else EDGE_CENSORED
            path += f"; edge: {kind}, {self.edge.region.describe}"
        return path

    def _background(self, tau_t: float) -> np.ndarray:
        return self._background_parts(tau_t)[0]

    def _background_parts(self, tau_t: float) -> tuple[np.ndarray, np.ndarray | None]:
        """(B, beta) for the rows; beta (the lattice's bound on |B~ - B|) is None when exact."""
        lattice = self.lattice

        def run() -> np.ndarray:
            self.background_passes += 1
            with profile.stage("background"):
                if lattice is not None:
                    return np.vstack(lattice.background(tau_t)).astype(np.float64)
                return np.asarray(self.backend.background(tau_t), dtype=np.float64)

        value = self._cached(self._b_cache, tau_t, run, max(self.background_cache_size, 2))
        return (value[0], value[1]) if lattice is not None else (value, None)

    def _lattice_pass(self, tau_t: float) -> LatticePass:
        """The time lattice's sums at ``tau_t`` (with :attr:`row_sums`; cached like B)."""

        def run() -> LatticePass:
            self.background_passes += 1
            with profile.stage("background"):
                return self.lattice.lattice_pass(tau_t)

        return self._cached(self._p_cache, tau_t, run, max(self.background_cache_size, 2))

    def _trigger(self, sigma_x: float, sigma_t: float) -> tuple[np.ndarray, np.ndarray | None]:
        """(E, omega) for the rows; omega (the bound on omitted terms) is None when exact."""
        value = self._trigger_pass(sigma_x, sigma_t)
        return (value[0], value[1]) if value.ndim == 2 else (value, None)

    def _trigger_pass(self, sigma_x: float, sigma_t: float) -> np.ndarray:
        """The cached trigger pass: E, shape (rows,), or E and omega stacked, (2, rows)."""
        bounded = self._bounded

        def run() -> np.ndarray:
            self.trigger_passes += 1
            self._amplify(sigma_x)
            if bounded is not None:
                return bounded.trigger_stack(sigma_x, sigma_t)
            return np.asarray(self.backend.trigger(sigma_x, sigma_t), dtype=np.float64)

        return self._cached(self._e_cache, (sigma_x, sigma_t), run, max(self.trigger_cache_size, 2))

    def set_locations(self, x: np.ndarray, y: np.ndarray) -> None:
        """New locations for all events; the trigger cache is dropped (and the remembered
        log-likelihoods, which were of the old locations)."""
        self.backend.set_locations(x, y)
        if self.edge is not None:
            self.edge.set_locations(x, y)
        self._e_cache.clear()
        self._comp.set_locations()
        self._recent_ll.clear()
        self._relative_edge_error = None
        self._amplitude_at = None

    def _amplify(self, sigma_x: float) -> None:
        """``renormalized``: give the backend each source's amplitude ``1 / M_m`` at
        ``sigma_x`` (its kernel over its mass inside the region), unless it has them."""
        if self.renormalized and self._amplitude_at != sigma_x:
            self.backend.set_amplitude(1.0 / self._renormalized_mass(sigma_x)[0])
            self._amplitude_at = sigma_x

    def truncation_state(self) -> dict | None:
        """What a checkpoint needs to continue bit for bit: the truncation's cut-off (None for
        exact backends). Pair sums already cached were all computed at this cut-off, since
        tightening drops them."""
        return None if self._bounded is None else self._bounded.cutoff_state()

    def restore_truncation(self, state: Mapping[str, Any] | None) -> None:
        """Continue from :meth:`truncation_state` (same on every rank); ignored when exact."""
        if self._bounded is not None and state is not None:
            self._bounded.restore_cutoff(state)
            self._e_cache.clear()

    def recalibrate(self, p: Params) -> None:
        """Choose a bounded backend's cut-off afresh at ``p`` (collective; it may come down),
        then evaluate there, tightening if need be (while :attr:`adapt_cutoff`). The fast
        start calls it at its mode: the cut-off it tightened on the way, at parameters far
        from the posterior, would otherwise stay for the whole run (at 1M, corrected, kappa
        19.1 where the mode needs 17.7: a bound of 0.0066 nats against a tolerance of 0.05)."""
        if self._bounded is None or not self.adapt_cutoff or out_of_range(p) is not None:
            return
        self._bounded.calibrated = False
        self._e_cache.clear()
        self.evaluate(p)

    def clear_cache(self) -> None:
        """Forget cached B and E, so the next evaluation runs both pair passes."""
        self._b_cache.clear()
        self._p_cache.clear()
        self._e_cache.clear()

    def _local(self, p: Params) -> tuple[float, np.ndarray, np.ndarray, float, float, float]:
        why = out_of_range(p)
        if why is not None:
            log.warning("%s", why)
            rows = np.full(self.backend.row_stop - self.backend.row_start, np.nan)
            return -math.inf, rows, rows, 0.0, 0.0, 0.0
        if self.row_sums is not None:  # on the device: no B, nothing N-sized crosses
            trigger = self._trigger_pass(p.sigma_x, p.sigma_t)
            B, E = None, trigger[0] if trigger.ndim == 2 else trigger
            rel = self._relative_error(p.sigma_x) if self.renormalized else None
            log_sum, bound, background_bound, edge_sum = self.row_sums.sums(
                self._lattice_pass(p.tau_t), trigger, p.mu0, p.xi0, LAMBDA_FLOOR, rel
            )
        else:
            B, beta = self._background_parts(p.tau_t)
            E, omega = self._trigger(p.sigma_x, p.sigma_t)
            log_sum, bound, background_bound, lam = host_sums(
                B, beta, E, omega, p.mu0, p.xi0, LAMBDA_FLOOR, self._scratch(B.size)
            )
            if self.renormalized:  # each row's sources taken to err as it does, relatively
                edge_sum = float(np.dot(p.xi0 * E / lam, self._relative_error(p.sigma_x)))
        comp = p.mu0 * self._comp.background(p.tau_t)
        trig, edge_error = self._comp.trigger(p.sigma_x, p.sigma_t)
        comp += p.xi0 * trig
        edge_error = edge_sum if self.renormalized else edge_error * p.xi0
        if self._bounded is not None and self._bounded.check_failure:
            bound = math.nan  # every rank learns of it from the reduced bound
        return log_sum - comp, B, E, bound, edge_error, background_bound

    def _scratch(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Two float64 work arrays of shape (n,), kept between evaluations."""
        if self._work is None or self._work.shape[1] != n:
            self._work = np.empty((2, n))
        return self._work[0], self._work[1]

    def _renormalized_mass(self, sigma_x: float) -> tuple[np.ndarray, np.ndarray]:
        """(mass, error scale) of all N events at ``sigma_x`` for ``renormalized``, each
        shape (N,), the mass floored at :data:`MIN_RENORMALIZED_MASS`."""
        with profile.stage("edge mass"):
            mass, error = self.edge.mass(sigma_x)
        return np.maximum(mass, MIN_RENORMALIZED_MASS), error

    def _relative_error(self, sigma_x: float) -> np.ndarray:
        """``e_n / M_n`` of this rank's rows at ``sigma_x`` (renormalized; the last kept)."""
        hit = self._relative_edge_error
        if hit is None or hit[0] != sigma_x:
            mass, error = self._renormalized_mass(sigma_x)
            rows = slice(self.backend.row_start, self.backend.row_stop)
            hit = (sigma_x, error[rows] / mass[rows])
            self._relative_edge_error = hit
        return hit[1]

    def evaluate(self, p: Params) -> Evaluation:
        """Full evaluation (collective over ``comm``): log-likelihood and this rank's parts.

        With a bounded (truncating) backend, the realised error bound is reduced over ranks
        and compared with ``backend.tolerance`` (nats). While :attr:`adapt_cutoff` is true and
        the bound exceeds it, the backend is tightened and the trigger recomputed (every rank
        takes the same decision from the same sums). Otherwise a bound above the tolerance is
        counted in :attr:`bound_exceedances` and logged (see :meth:`_exceeded`). Before the
        first evaluation of a backend whose cut-off is not settled (and while adapting), the
        backend calibrates it from a probe (:meth:`BoundedPairBackend.calibrate`).
        """
        bounded = self._bounded
        if (
            bounded is not None
            and not bounded.calibrated
            and self.adapt_cutoff
            and out_of_range(p) is None
        ):
            # the first evaluation: predict the cut-off from a probe instead of tightening
            # from a guess over several full passes
            base = p.mu0 * self._background(p.tau_t)
            self._amplify(p.sigma_x)
            bounded.calibrate(p.sigma_x, p.sigma_t, base, p.xi0, self.comm)
            self._e_cache.clear()
        while True:
            part, B, E, bound, edge_error, bg_bound = self._local(p)
            ll = self.comm.allreduce_sum(part)
            if self.edge is not None:
                edge_error = self.comm.allreduce_sum(edge_error)
            if self.lattice is not None:
                bg_bound = self.comm.allreduce_sum(bg_bound)
            extra = {"edge_error": edge_error, "background_bound": bg_bound}
            if bounded is None:
                return Evaluation(loglik=ll, B=B, E=E, **extra)
            bound = self.comm.allreduce_sum(bound)
            if math.isnan(bound):
                raise DeviceError(
                    bounded.check_failure
                    or "the truncated engine's pair sums are NaN or failed their self-check "
                    "on another rank's device; set engine.tolerance: 0 (the exact kernels) or "
                    "choose another device (`hawkes-run devices --check` tests each device)"
                )
            tolerance = bounded.tolerance
            if bound > tolerance and self._hopeless(ll, bound):
                log.debug(
                    "truncation bound %.3g nats at %s not certified: its log-likelihood %.6g "
                    "is over %g nats below the current state's",
                    bound,
                    p,
                    ll,
                    HOPELESS_NATS,
                )
                return Evaluation(loglik=ll, B=B, E=E, error_bound=bound, **extra)
            self._remember(p, ll)
            if not self.adapt_cutoff and math.isfinite(ll):
                self.worst_bound = max(self.worst_bound, bound)
                if bound > tolerance:
                    self._exceeded(bound, tolerance)
            if bound <= tolerance or not math.isfinite(ll) or not self.adapt_cutoff:
                return Evaluation(loglik=ll, B=B, E=E, error_bound=bound, **extra)
            excess = bound / tolerance if tolerance > 0 else math.inf
            if not bounded.tighten(excess):
                log.warning(
                    "truncation bound %.3g nats exceeds the tolerance %.3g nats and cannot be "
                    "tightened further",
                    bound,
                    tolerance,
                )
                return Evaluation(loglik=ll, B=B, E=E, error_bound=bound, **extra)
            self.tightenings += 1
            self._e_cache.clear()  # computed at the looser cut-off

    def _remember(self, p: Params, ll: float) -> None:
        """Keep ``ll`` of ``p`` among the last few evaluations (the pinned state's is read from
        them)."""
        self._recent_ll[p] = ll
        self._recent_ll.move_to_end(p)
        while len(self._recent_ll) > _LL_MEMORY:
            self._recent_ll.popitem(last=False)

    def _hopeless(self, ll: float, bound: float) -> bool:
        """Whether ``ll + bound`` is over :data:`HOPELESS_NATS` below the pinned state's
        log-likelihood (as last evaluated at these locations; the same on every rank)."""
        pinned = None if self._pinned_params is None else self._recent_ll.get(self._pinned_params)
        return pinned is not None and math.isfinite(ll) and ll + bound < pinned - HOPELESS_NATS

    def _exceeded(self, bound: float, tolerance: float) -> None:
        """Count a bound above the tolerance while the cut-off is fixed; log a WARNING (rank
        0) the first time and whenever the bound reaches twice the one last logged."""
        self.bound_exceedances += 1
        if bound < 2.0 * self._warned_bound:
            return
        self._warned_bound = bound
        if self.comm.rank == 0:
            log.warning(
                "truncation bound %.3g nats exceeds engine.tolerance %.3g nats after warm-up "
                "(%d evaluation(s) so far): the cut-off is fixed after warm-up, so the "
                "log-likelihood error may exceed the tolerance there; a longer sampler.warmup "
                "lets the cut-off adapt to more of the posterior",
                bound,
                tolerance,
                self.bound_exceedances,
            )

    def loglik(self, p: Params) -> float:
        """The log-likelihood ``ell`` of DESIGN section 2 (collective over ``comm``)."""
        return self.evaluate(p).loglik

    def components(self, p: Params) -> tuple[np.ndarray, np.ndarray]:
        """Per-event ``B`` and ``E`` of ``p`` for all N events, in row order (collective).

        ``lambda_n = mu0 * B_n + xi0 * E_n`` exactly as :meth:`loglik` uses them (a truncating
        backend's ``E`` is its truncated sum, at the cut-off :meth:`evaluate` settled on).
        Each rank's rows are gathered over ``comm``, so every rank returns the whole arrays.

        Returns
        -------
        B, E : (N,) float64
            Background and trigger parts (new arrays; the caches keep theirs).
        """
        ev = self.evaluate(p)
        B = self._background(p.tau_t) if ev.B is None else ev.B
        if self.comm.size == 1:
            return np.array(B, dtype=np.float64), np.array(ev.E, dtype=np.float64)
        parts = self.comm.allgather((np.asarray(B), np.asarray(ev.E)))
        return (
            np.concatenate([b for b, _ in parts]).astype(np.float64),
            np.concatenate([e for _, e in parts]).astype(np.float64),
        )
