"""Fast OpenCL engine: exact day-lattice background and an error-bounded truncated trigger.

Background
----------
``B_n`` depends on ``t_n`` alone, so :class:`~hawkes_cli.engine.opencl.OpenCLBackend` already
evaluates it once per *distinct* time over (distinct time, count) pairs: O(U^2 + N) with U
distinct times, and the tie rule (skip every ``t_m == t_n``) is exactly "skip the own distinct
time". On a day lattice U is the number of days; with continuous times U = N and it *is* the
pair sum, so no switch is needed: both are the same arithmetic on the same terms.

Truncated trigger and its bound
-------------------------------
Write the trigger of row n as ``E_n = c * sum_{m < lo_n} a_nm`` with
``c = 1 / (2 pi sigma_x^2 sigma_t)`` and, with ``w_m = D_m`` (model 2) or 1 (model 1) and
``s_m = sigma_x / sqrt(w_m)``::

    a_nm = w_m * exp(-(t_n - t_m) / sigma_t) * exp(-|x_n - x_m|^2 / (2 s_m^2)).

Levels and cut-offs. Sources are sorted into a uniform grid per *level* (model 1: one level;
model 2: level ``l_m = ceil(log2(sqrt(D_max / D_m)))``, so the densities of a level lie within
a factor 4, between ``floor_l`` and ``ceil_l``). Each level has its own cut-off exponent
``kappa_l = kappa + log(ceil_l / max ceil)`` (at least 1; model 1: ``kappa``): a source's
omitted term is at most its weight times ``exp(-kappa_l)``, so every level omits about the same
per source, and the sparse levels, whose wide kernels hold the most sources, are cut earlier.
The level's radius is ``R_l = sqrt(2 kappa_l) sigma_x / sqrt(floor_l) <= h_l`` (cell size).

Row blocks (``truncated_blocks``, model 1, and ``truncated_blocks2``, model 2, in
``kernels/truncated.cl``): up to 16 rows of one cell within 8 ``sigma_t`` share the enumeration
of cells and their searches, level by level. Rows of dense levels (tiny cells, one or two
rows each) are grouped by the cells of a coarser level (``grid.grouping_level``), and each
block skips the levels with no source within its reach (``grid.block_levels``; such sources
are all in the far part below). With ``d`` the distance from a row to a cell's (or
sub-cell's) rectangle and ``floor_c >= floor_l`` the smallest density of the cell's sources,
every source of the cell has ``a_nm <= w_m exp(-(t_n - t_m) / sigma_t) exp(-d^2 floor_c / (2
sigma_x^2))``. A row sums exactly the sources of cells nearer than ``R_l`` that are newer than
the block's ``min_j (t_j - sigma_t (kappa_l - v_j))``, ``v_j = d_j^2 floor_c / (2 sigma_x^2)``
(the paraboloid ``u + v <= kappa_l`` of the ideal cut-off, widened to the block); the older
ones of those cells are bounded by sub-cell (4 x 4 sub-cells in the rows' own cell, 4 strips
in the others; per-cell prefix sums of ``w_m exp(t_m / sigma_t)``), cells between ``R_l`` and
``1.5 R_l`` by their own distance (``ring_n``), and everything farther by ``far_n = sum_{m <
lo_n} exp(-2.25 kappa_l(m)) w_m exp(-(t_n - t_m) / sigma_t)`` (O(N): a scan on the device,
:class:`~.pass_bound.DeviceBound`, or numpy, :class:`~.pass_bound.PassBound`). When the time
span exceeds 600 ``sigma_t``, prefix sums are plain weights and the ring and far parts are
bounded together with ``exp(-kappa_l(m))``.

Expansion boxes. A dense cluster of one density under a wide kernel (a sparse-density city:
at 200k, model 2, most of the kernel's time went to one city's pairs within ``kappa_l
sigma_t``) is summed by moments instead: the sources of level l that share a box of side
``BOX_SIDE`` (2) kernel lengthscales ``sigma_x / sqrt(ceil_l)`` with at least ``EXPAND_MIN``
(256) sources of one density form level ``L + l`` (``grid.build_index``), whose cells are
those boxes. For a row block, a box's sources older than its rows (up to the last of the
prefixes kept every 8 sources) enter through ``HERMITE_ORDER^2`` (23 x 23) Hermite moments
about the box's centre (``cell_moments``; time enters as ``exp(t_m / sigma_t)`` weights, so
*all* older sources are summed and nothing is cut in time), the newer ones pair by pair. The
series' truncation is bounded by Cramer's inequality for Hermite polynomials; E is lowered
by that bound and twice it goes into ``tail_n``, so ``E~_n <= E_n`` still holds (see
``kernels/truncated.cl``). Only with exponential prefixes (the span below 600 ``sigma_t``);
otherwise the boxes are ordinary cells.

Amplitudes (``model.edge: renormalized``, :meth:`TruncatedBackend.set_amplitude`): source m's
terms times ``a_m = 1 / M_m``. Every bound above is a sum of ``w_m`` times a factor <= 1, so
with ``w_m a_m`` in the float64 weights (prefix sums, moments, far sums) and ``a_m`` in the
pair terms (``truncated_scaled``, ``truncated_scaled2``) all of it holds as it stands.

The grid index, the row blocks and each block's levels are built for ``sigma_x`` and
``sigma_t`` rounded up to powers of ``2^(1/16)`` (``grid.lattice_up``): cells and reaches a
little larger than needed are valid, and an MCMC chain's proposals, which move the
lengthscales by a few per cent, then mostly reuse them instead of paying the host work
(sorting, blocking) at every trigger pass. The terms, the prefix sums and the bound use the
exact ``sigma_x`` and ``sigma_t``; the result is still a function of the parameters alone.
:mod:`.draw_index` owns these stages for the current location draw (and the worker that
builds the next draw's, :mod:`.ahead`); :mod:`.block_pass` runs the pass (the prefix sums and
the row-block kernel) and :mod:`.pass_bound` bounds what it omits beyond the kernel's reach;
this module puts them together and owns the cut-off.

So the omitted part of ``E_n`` is ``0 <= omega_n <= c (tail_n + ring_n + far_n)`` (times
``1 + 1e-8`` for rounding of the bound itself). The truncated rate ``lam~_n = lambda_n -
xi0 omega_n`` is never above the true one, and::

    |ell - ell~| <= sum_n log(1 + xi0 omega_n / max(lam~_n, 1e-40))         (the realised bound)

which :class:`~hawkes_cli.engine.base.Likelihood` computes for every evaluation (O(N)) and
reduces over ranks. ``tolerance`` is in nats (absolute). Before the first evaluation
:meth:`TruncatedBackend.calibrate` predicts ``kappa`` for this data and model from a probe of
one in 40 row blocks (:mod:`hawkes_cli.engine.calibration`); while the likelihood adapts
(fast start and warm-up), a realised bound above the tolerance makes
:meth:`TruncatedBackend.tighten` raise ``kappa`` and ``E`` is recomputed (collectively); after
warm-up the cut-off is fixed and such a bound is reported.
``kappa`` only grows, and it is part of a chain's checkpoint
(:meth:`~hawkes_cli.engine.base.Likelihood.truncation_state`). When the cut-offs exceed the
data (every ``kappa_l sigma_t`` >= time span and every level's cells >= the extent), the exact
kernel runs and the bound is 0 ("pair sum"): huge lengthscales cost no more than the exact
engine. The working-precision rounding (float32) is separate from this bound, as for the
exact engine.

The host side in numpy (grid index, row blocks, ``S_n``, balancing costs) is
:mod:`hawkes_cli.engine.grid`, its copy on the device :mod:`hawkes_cli.engine.grid_upload`;
:mod:`.block_pass` launches the kernels (arguments: :mod:`hawkes_cli.engine.launch`) on the
events of a :class:`~hawkes_cli.engine.device.DeviceEvents` (shared with the exact backend this
module holds for B).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..parallel import Comm, SerialComm
from ..vocab import DEFAULT_BACKGROUND, DEFAULT_TOLERANCE
from .ahead import IndexInputs
from .base import LAMBDA_FLOOR, BoundedPairBackend
from .block_pass import BlockPass, PassPoint
from .calibration import ProbePoint, RowRatios, calibrate
from .choice import SwitchedTrigger, TriggerChoice
from .device import DeviceEvents
from .draw_index import DrawIndex
from .grid import (
    EXP_SPAN,
    KAPPA_MAX,
    initial_kappa,
    lattice_up,
    level_bands,
    level_kappas,
    source_levels,
)
from .grid_upload import DeviceBlocks, DeviceIndex
from .opencl import OpenCLBackend
from .pass_bound import DeviceBound, PassBound
from .rowcheck import RowCheck

log = logging.getLogger(__name__)

__all__ = ["TruncatedBackend"]

_TIGHTEN_MARGIN = 0.25  # kappa added beyond the bound's exp(-kappa) prediction
#: The calibration's probe (:meth:`TruncatedBackend.probe`) evaluates at least this many row
#: blocks (all if fewer) ...
PROBE_BLOCKS = 512
#: ... and at least one block in this many.
PROBE_SHARE = 40


class TruncatedBackend(SwitchedTrigger, BoundedPairBackend):
    """Pair sums B (exact, per distinct time) and E (truncated, error-bounded) on OpenCL.

    Built on the same :class:`~hawkes_cli.engine.device.DeviceEvents` as the exact backend it
    holds (:attr:`exact`, which computes B, and E when the cut-offs exceed the data).

    Parameters
    ----------
    events, model, area, rows, work_group, background
        As for :class:`~hawkes_cli.engine.opencl.OpenCLBackend`.
    tolerance
        Bound on ``|ell - ell~|`` in nats enforced by the likelihood (> 0).
    kappa
        Cut-off exponent to use as it is; default: calibrated before the first evaluation
        (:meth:`calibrate`, starting from :func:`~hawkes_cli.engine.grid.initial_kappa`).

    Attributes
    ----------
    path : str
        Which computation the last trigger pass took, e.g. ``"background: lattice (1095 days
        for 200000 events); trigger: truncation (kappa 15.8)"``.
    kappa : float
        The current cut-off exponent (dimensionless; only grows, see :meth:`tighten`).
    choice : TriggerChoice or None
        What ``engine.trigger: auto`` chose (:class:`~.choice.SwitchedTrigger`); None: none.
    """

    def __init__(
        self,
        events: DeviceEvents,
        *,
        model: int,
        area: float,
        rows: tuple[int, int] | None = None,
        work_group: int | None = None,
        tolerance: float = DEFAULT_TOLERANCE,
        kappa: float | None = None,
        background: str = DEFAULT_BACKGROUND,
    ) -> None:
        if not (math.isfinite(tolerance) and tolerance > 0):
            raise ValueError(f"tolerance must be finite and > 0, got {tolerance!r}")
        self.exact = OpenCLBackend(
            events, model=model, area=area, rows=rows, work_group=work_group, background=background
        )
        self.events = events
        self.model = model
        self.precision = events.precision
        self.tolerance = float(tolerance)
        # calibrate() replaces this first guess at the first evaluation unless a kappa is given
        self.calibrated = kappa is not None
        self.row_start, self.row_stop = self.exact.row_start, self.exact.row_stop
        self._amplitude: np.ndarray | None = None
        self._amplitude_version = 0
        self._t = events.time
        self.n = n = events.n
        self._w = np.ones(n) if model == 1 else events.density
        self._lo = events.times.lo
        self._span = float(self._t[-1] - self._t[0]) if n else 0.0
        # levels: fixed by the densities (model 2), independent of sigma_x and kappa
        self._level, self._r_unit = source_levels(events.density if model == 2 else None, n)
        self.nlevels = int(self._level.max()) + 1 if n else 1
        if self.nlevels > 40:
            raise ValueError("densities span more than 2^80; model 2 needs D_max / D_min < 2^80")
        self._floor, self._ceil = level_bands(
            events.density if model == 2 else None, self._level, self.nlevels
        )
        self.kappa = float(self.first_guess() if kappa is None else kappa)
        events.keep_float64_copies()
        weights = events.upload(self._w)  # the sources' weights in float64, time order
        levels = events.upload(self._level.astype(np.int32))  # (presence grid, far sums)
        self._draw = DrawIndex(
            events,
            IndexInputs(self._level, self.nlevels, self._r_unit, self._w, self._ceil, self._t,
                        self._span, (self.row_start, self.row_stop)),
            weight_buffer=weights, level_buffer=levels, floor=self._floor,
        )  # fmt: skip
        # the pass and its bound: the stages after the index and the blocks
        self.block_pass = BlockPass(events, self.exact, model, self.nlevels)
        rows = (self.row_start, self.row_stop)
        self._bound = PassBound(self._t, self._w, self._lo, self._level, self._ceil, rows)
        self._device_bound = DeviceBound(
            events, weights, levels, self._ceil, rows, self.exact.launch_size
        )
        self.trigger_path = "none yet"
        self._row_check = RowCheck(self.exact, model)
        self.check_failure: str | None = None
        self.choice = None

    # ------------------------------------------------------------------ bounded interface
    @property
    def level_kappa(self) -> np.ndarray:
        """Cut-off exponent of each grid level at the current ``kappa``, shape (levels,)
        (:func:`~hawkes_cli.engine.grid.level_kappas`; model 1: ``[kappa]``)."""
        return level_kappas(self.kappa, self._ceil)

    def cutoff_state(self) -> dict[str, Any]:
        """The cut-off to checkpoint: ``{"kappa": float}``, and ``"trigger"`` (the
        :meth:`TriggerChoice.to_json <hawkes_cli.engine.choice.TriggerChoice.to_json>`) once
        a trigger was chosen."""
        state: dict[str, Any] = {"kappa": float(self.kappa)}
        if self.choice is not None:
            state["trigger"] = self.choice.to_json()
        return state

    def restore_cutoff(self, state: Mapping[str, Any]) -> None:
        """Continue at the cut-off of :meth:`cutoff_state` (no calibration any more), with
        its trigger choice if it has one (ValueError: not a choice); else truncated."""
        self.kappa = float(state["kappa"])
        self.calibrated = True
        if state.get("trigger") is not None:
            self.use_choice(TriggerChoice.from_json(state["trigger"]))

    @property
    def self_checks(self) -> int:
        """Self-checks of truncated passes run so far (:class:`~.rowcheck.RowCheck`)."""
        return self._row_check.count

    def first_guess(self) -> float:
        """:func:`~hawkes_cli.engine.grid.initial_kappa` for these events, the tolerance and
        the densest level."""
        return initial_kappa(self.tolerance, self.n, float(self._ceil.max()))

    # ------------------------------------------------------------------ setup
    @property
    def queue(self) -> Any:
        """The command queue every pass enqueues on."""
        return self.events.queue

    @property
    def kernel_fingerprint(self) -> str:
        """SHA-256 of every kernel source and build option compiled (both programs)."""
        return self.events.kernel_fingerprint

    @property
    def path(self) -> str:
        """Which computation each part took (for ``hawkes-run loglik``)."""
        return f"background: {self.exact.background_path}; trigger: {self.trigger_path}"

    def set_locations(self, x: np.ndarray, y: np.ndarray) -> None:
        """Replace all N locations; spatial indices and row blocks are rebuilt on the next
        pass."""
        self.events.set_locations(x, y)
        self._draw.reset()

    def set_amplitude(self, amplitude: np.ndarray | None) -> None:
        """Weight source m's trigger terms by ``amplitude[m]`` (shape (N,); None: by 1) from
        the next pass on: its pair terms and, through its weight ``w_m a_m``, its prefix sums,
        moments and far sums, so the bound still holds (``model.edge: renormalized``)."""
        self.exact.set_amplitude(amplitude)  # the exact passes and the self-check's rows
        self._amplitude = self.events.amplitude
        self._amplitude_version += 1

    def _source_weights(self, di: DeviceIndex) -> tuple[Any, Any]:
        """``(sa, swd)`` of ``di`` for the current amplitudes
        (:meth:`~.grid_upload.DeviceIndex.source_weights`)."""
        return di.source_weights(self.events, self._amplitude, self._amplitude_version, self._w)

    def prepare_locations(self, x: np.ndarray, y: np.ndarray, ready: Callable[[], Any]) -> None:
        """The next locations will be ``x``, ``y`` (``ready()`` returns once the arrays hold
        them): the next pass starts building their grid index and row blocks on the worker
        thread (:mod:`.ahead`) at its own lattice point; :meth:`set_locations` with these very
        arrays takes them."""
        self._draw.prepare(x, y, ready)

    def _level_kappas(self, di: DeviceIndex, kappa: float) -> Any:
        """Device buffer of the cut-off exponent of each of ``di``'s grid levels at ``kappa``
        (kept in ``di`` for the last ``kappa``)."""
        if di.kl is None or di.kl[0] != kappa:
            di.kl = (kappa, self.events.upload(level_kappas(kappa, self._ceil)[di.index.band]))
        return di.kl[1]

    # ------------------------------------------------------------------ passes
    def background(self, tau_t: float) -> np.ndarray:
        """B for this backend's rows, float64, shape (rows,) (exact, per distinct time)."""
        return self.exact.background(tau_t)

    def trigger(self, sigma_x: float, sigma_t: float) -> np.ndarray:
        """Truncated E for this backend's rows, float64, shape (rows,)."""
        return self.trigger_bounded(sigma_x, sigma_t)[0]

    def exact_cutoffs(self, sigma_x: float, sigma_t: float) -> bool:
        """Whether the cut-offs at the current ``kappa`` omit nothing (the exact kernel runs)."""
        if float(self.level_kappa.min()) * sigma_t < self._span:
            return False
        return self._draw.index(sigma_x, self.kappa).index.covers_all

    def trigger_bounded(self, sigma_x: float, sigma_t: float) -> tuple[np.ndarray, np.ndarray]:
        """Truncated trigger and a rigorous bound on what it omits, for this backend's rows.

        Returns
        -------
        E : (rows,) float64
            ``E~_n`` (<= the exact ``E_n`` up to working-precision rounding).
        omega : (rows,) float64
            ``omega_n >= E_n - E~_n`` (module docstring), 0 on the exact path.
        """
        stack = self.trigger_stack(sigma_x, sigma_t)
        return stack[0], stack[1]

    def trigger_stack(self, sigma_x: float, sigma_t: float) -> np.ndarray:
        """:meth:`trigger_bounded`'s ``E~`` and ``omega`` as the rows of one new array, shape
        (2, rows), float64: a truncated pass's own (kept on the device for the row sums,
        :meth:`resident`)."""
        if not self.truncates:
            self.trigger_path = "pair sum (exact; chosen by engine.trigger: auto)"
            return self._exact_stack(sigma_x, sigma_t)
        return self._truncated(sigma_x, sigma_t)

    def resident(self, stack: np.ndarray) -> tuple[Any, Any] | None:
        """Device buffers ``(E~, omega)`` still holding ``stack`` (a :meth:`trigger_stack`
        array, by identity), or None (:meth:`.pass_bound.DeviceBound.resident`)."""
        return self._device_bound.resident(stack)

    def _exact_stack(self, sigma_x: float, sigma_t: float) -> np.ndarray:
        """The exact trigger and a zero bound, stacked (2, rows)."""
        stack = np.zeros((2, self.row_stop - self.row_start))
        stack[0] = self.exact.trigger(sigma_x, sigma_t)
        return stack

    def _truncated(self, sigma_x: float, sigma_t: float) -> np.ndarray:
        """The truncated pass of :meth:`trigger_stack` (its exact path when the cut-offs
        exceed the data)."""
        nrows = self.row_stop - self.row_start
        kappa = self.kappa
        if self.exact_cutoffs(sigma_x, sigma_t):
            self.trigger_path = f"pair sum (cut-offs beyond the data at kappa {kappa:.3g})"
            return self._exact_stack(sigma_x, sigma_t)
        self.trigger_path = f"truncation (kappa {kappa:.3g})"
        if nrows == 0:
            return np.empty((2, 0))
        di = self._draw.index(sigma_x, kappa)
        blocks = self._draw.blocks(di, sigma_x, sigma_t, kappa)
        # the next draw's index, at this lattice point (the first pass after a redraw is at
        # the chain's current state), on the worker while the device runs
        self._draw.start_ahead(sigma_x, sigma_t, kappa)
        kl = self._level_kappas(di, kappa)
        stack = self._bounded_pass(di, blocks, kl, kappa, sigma_x, sigma_t, full=True)
        # a new cut-off, grid index or set of row blocks: check it on this device
        key = (lattice_up(sigma_x), lattice_up(kappa), lattice_up(sigma_t), kappa)
        failure = self._row_check.after_pass(key, stack[0], stack[1], sigma_x, sigma_t)
        if failure is not None:
            self.check_failure = failure
        return stack

    def _bounded_pass(
        self,
        di: DeviceIndex,
        blocks: DeviceBlocks,
        kl: Any,
        kappa: float,
        sigma_x: float,
        sigma_t: float,
        *,
        full: bool = False,
    ) -> np.ndarray:
        """Run the row-block kernel on ``blocks`` of the index ``di`` at the cut-off ``kappa``
        (per-level exponents in the device buffer ``kl``; ``blocks`` made for an index of at
        least this cut-off) and bound what it omits: on the device for a ``full`` pass (every
        row in a block) with exponential prefixes and no amplitudes
        (:class:`~.pass_bound.DeviceBound`), else on the host (:class:`~.pass_bound.PassBound`).

        Returns (E~, omega) for this backend's rows stacked, shape (2, rows), float64; rows
        in no block hold stale values.
        """
        exp_mode = self._span / sigma_t <= EXP_SPAN
        scaled = self._amplitude is not None
        at = PassPoint(
            sigma_x, sigma_t, kl, (self._draw.x0, self._draw.y0), exp_mode,
            self._source_weights(di), scaled, self._amplitude_version,
        )  # fmt: skip
        norm = 1.0 / (2.0 * math.pi * sigma_x * sigma_x * sigma_t)
        escale = 2.0**-self.events.shift * norm
        out = self.block_pass
        if full and exp_mode and not scaled:
            self._device_bound.prepare(sigma_t, kappa)  # enqueued before the pass: no wait
            out.launch(di, blocks, at)
            return self._device_bound.finish(out, norm, escale, sigma_t, kappa)
        out.launch(di, blocks, at)
        # the bound's far sums on the host while the device runs the pass
        self._bound.prepare(sigma_t, kappa, exp_mode, self._amplitude, self._amplitude_version)
        out.collect()
        stack = np.empty((2, out.e.size))
        np.multiply(out.e, escale, out=stack[0])
        stack[1] = self._bound.omega(
            out.tail, out.ring, norm, sigma_t, kappa, exp_mode,
            self._amplitude, self._amplitude_version,
        )  # fmt: skip
        return stack

    # ------------------------------------------------------------------ the cut-off
    def calibrate(
        self,
        sigma_x: float,
        sigma_t: float,
        base: np.ndarray,
        xi0: float,
        comm: Comm | None = None,
    ) -> float:
        """Choose the starting ``kappa`` for this data and model from a probe (collective;
        :func:`~hawkes_cli.engine.calibration.calibrate`).

        Parameters
        ----------
        sigma_x, sigma_t
            Lengthscales of the first evaluation.
        base : (rows,) float64
            ``mu0 * B_n`` of this backend's rows at the first evaluation.
        xi0
            Trigger weight of the first evaluation.
        comm
            The chain's communicator (every rank calls this with its own rows).

        Returns
        -------
        float
            The new ``kappa``.
        """
        at = ProbePoint(sigma_x, sigma_t, base, xi0, comm or SerialComm())
        self.kappa = calibrate(self, at)
        self.calibrated = True
        return self.kappa

    def probe(
        self, kappas: np.ndarray, index_kappa: float, at: ProbePoint
    ) -> tuple[list[float], RowRatios]:
        """The realised bound (nats, summed over ranks; collective) at each cut-off of
        ``kappas`` in turn, on the grid index of ``index_kappa``.

        Each rank estimates its share from every stride-th row block of the index (at least
        :data:`PROBE_BLOCKS` blocks, at least one in :data:`PROBE_SHARE`) scaled by the
        stride to all of its rows. Also returns this rank's ``(stride, xi0 omega_n /
        lambda~_n of the sampled rows)`` at the last cut-off.
        """
        di = self._draw.index(at.sigma_x, index_kappa)
        rows = self._draw.rows(di, at.sigma_t)
        share = rows.shape[0] // PROBE_SHARE
        stride = max(1, rows.shape[0] // max(PROBE_BLOCKS, share))
        sample = np.ascontiguousarray(rows[::stride])
        mine = sample[sample >= 0] - self.row_start
        scale = rows.shape[0] / sample.shape[0] if mine.size else 0.0
        if mine.size:
            blocks = self._draw.upload_blocks(sample, at.sigma_x, float(kappas.max()))
        out, ratio = [], np.empty(0)
        for kappa in kappas.tolist():
            local = 0.0
            if mine.size:
                kl = self.events.upload(level_kappas(kappa, self._ceil)[di.index.band])
                e, omega = self._bounded_pass(di, blocks, kl, kappa, at.sigma_x, at.sigma_t)
                lam = np.maximum(at.base[mine] + at.xi0 * e[mine], LAMBDA_FLOOR)
                ratio = at.xi0 * omega[mine] / lam
                local = scale * float(np.sum(np.log1p(ratio)))
            out.append(at.comm.allreduce_sum(local))
        return out, (scale, ratio)

    def tighten(self, excess: float) -> bool:
        """Raise ``kappa`` after a realised bound ``excess`` times over the tolerance (> 1).

        Returns False when ``kappa`` cannot usefully grow any more.
        """
        if self.kappa >= KAPPA_MAX:
            return False
        # half the exp(-kappa) prediction: the bound often falls faster than exp(-kappa) (the
        # cells grow with kappa), and kappa never comes down again
        step = 0.5 * math.log(max(excess, 1.0)) + _TIGHTEN_MARGIN
        self.kappa = min(self.kappa + step, KAPPA_MAX)
        log.info("truncation: realised bound %.3g x tolerance; kappa -> %.4g", excess, self.kappa)
        return True
