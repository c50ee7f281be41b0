"""The truncated path's bound stage: what a row-block pass omits, ``omega_n``.

The row-block kernel (:mod:`.block_pass`) bounds the older sources of the cells it visits
(``tail_n``) and the cells between one and :data:`~.draw_index.REACH` cut-off radii
(``ring_n``); every source beyond is bounded here on the host, over all levels together, by
``far_n = sum_{m < lo_n} exp(-factor kappa_l(m)) w_m exp(-(t_n - t_m) / sigma_t)`` (O(N),
:func:`~.grid.temporal_sums`). Then ``omega_n = norm (tail_n + ring_n + far_n)`` times
``1 + 1e-8`` for the rounding of the bound's own arithmetic, ``norm = 1 / (2 pi sigma_x^2
sigma_t)`` (:mod:`.truncated`'s docstring has the whole argument).

:class:`PassBound` computes it with numpy from the pass's outputs read back;
:class:`DeviceBound` computes the same on the device (the far sums as a scan, ``omega`` next
to the pass's outputs), so that a pass reads back ``e`` and ``omega`` once, writes ``E~`` back
into a slot beside ``omega``, and the row sums (:mod:`.device_sums`) find both there: neither
the far sums nor ``omega`` are made on the host, and nothing is uploaded again for the sums.
It covers the full passes with exponential prefixes and no amplitudes (the chains' passes); the
rest (the calibration's probe, ``renormalized``, spans beyond ``EXP_SPAN sigma_t``) stays with
:class:`PassBound`. The two agree to float64 rounding (``tests/test_pass_bound.py``), far below
the ``1e-8`` of :data:`SAFETY`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from . import profile
from .draw_index import REACH
from .grid import level_kappas, temporal_sums
from .launch import FarChunksArgs, FarOffsetsArgs, FarPrefixArgs, PassBoundArgs, kernel

__all__ = ["FAR_CHUNK", "RESIDENT", "SAFETY", "DeviceBound", "PassBound"]

#: Rounding of the bound's own arithmetic (prefix sums, exp).
SAFETY = 1.0 + 1e-8
#: Far sums kept (one per ``(sigma_t, kappa, factor, amplitudes)``).
_FAR_KEPT = 2
#: Sources per work-item of the device's far sums (``far_chunks``): it alone fixes the order of
#: the float64 additions, so the sums are the same on every launch on a device.
FAR_CHUNK = 256
#: Pass results :class:`DeviceBound` keeps on the device for the row sums (the chain's state
#: and the proposals around it; one evicted is uploaded again by the row sums).
RESIDENT = 4


class PassBound:
    """``omega_n`` of one backend's rows (module docstring).

    Parameters
    ----------
    time : (N,) float64
        Sorted event times.
    weight : (N,) float64
        Each source's weight ``w_m`` (its density for model 2, ones for model 1).
    lo : (N,) int
        First index of each event's tie group.
    level : (N,) int
        Density level of each source.
    ceil : (L,) float64
        Largest density of each level.
    rows : (int, int)
        The backend's rows ``[row_start, row_stop)``.
    """

    def __init__(
        self,
        time: np.ndarray,
        weight: np.ndarray,
        lo: np.ndarray,
        level: np.ndarray,
        ceil: np.ndarray,
        rows: tuple[int, int],
    ) -> None:
        self._t, self._w, self._lo, self._level, self._ceil = time, weight, lo, level, ceil
        self.rows = rows
        self._cache: OrderedDict[tuple[float, float, float, int], np.ndarray] = OrderedDict()

    def far(
        self,
        sigma_t: float,
        factor: float,
        kappa: float,
        amplitude: np.ndarray | None = None,
        version: int = 0,
    ) -> np.ndarray:
        """``sum_{m < lo_n} exp(-factor kappa_l(m)) w_m exp(-(t_n - t_m) / sigma_t)`` for the
        rows at the cut-off ``kappa``, shape (rows,), float64 (with ``amplitude`` (N,),
        version ``version``: weights ``w_m a_m``); cached by all of these."""
        key = (sigma_t, kappa, factor, version)
        hit = self._cache.get(key)
        if hit is None:
            w = self._w * np.exp(-factor * level_kappas(kappa, self._ceil))[self._level]
            if amplitude is not None:
                w = w * amplitude
            with profile.stage("far sums"):
                s = temporal_sums(self._t, w, self._lo, sigma_t)
            hit = s[self.rows[0] : self.rows[1]]
            self._cache[key] = hit
            while len(self._cache) > _FAR_KEPT:
                self._cache.popitem(last=False)
        return hit

    def prepare(
        self,
        sigma_t: float,
        kappa: float,
        exp_mode: bool,
        amplitude: np.ndarray | None = None,
        version: int = 0,
    ) -> np.ndarray:
        """The far sums :meth:`omega` reads with these arguments (beyond
        :data:`~.draw_index.REACH` cut-off radii with exponential prefixes, from one radius
        without), computed once and kept: the host's O(N) share of the bound, called while the
        device runs the pass."""
        factor = REACH**2 if exp_mode else 1.0
        return self.far(sigma_t, factor, kappa, amplitude, version)

    def omega(
        self,
        tail: np.ndarray,
        ring: np.ndarray,
        norm: float,
        sigma_t: float,
        kappa: float,
        exp_mode: bool,
        amplitude: np.ndarray | None = None,
        version: int = 0,
    ) -> np.ndarray:
        """``omega_n`` from the kernel's ``tail`` and ``ring`` (each (rows,), in units of
        ``norm = 1 / (2 pi sigma_x^2 sigma_t)``), shape (rows,), float64. With exponential
        prefixes the far part starts at :data:`~.draw_index.REACH` cut-off radii (the ring is
        summed); without, the ring and the far part are bounded together from one radius
        (``ring`` unread)."""
        rest = self.prepare(sigma_t, kappa, exp_mode, amplitude, version)
        if exp_mode:  # tail + ring + beyond the reach; else tail, ring and beyond together
            rest = ring + rest
        return norm * (tail + rest) * SAFETY


class DeviceBound:
    """``omega_n`` of a full pass made on the device, with ``E~_n`` kept beside it there for
    the row sums (module docstring).

    Parameters
    ----------
    events : hawkes_cli.engine.device.DeviceEvents
        The events on the device (float64 times ``buf_td``, tie groups ``buf_lo``).
    weight, level
        Device buffers of each source's weight ``w_m`` (float64) and density level (int32),
        in time order.
    ceil : (L,) float64
        Largest density of each level.
    rows : (int, int)
        The backend's rows ``[row_start, row_stop)``.
    launch_size : callable
        ``(global, local)`` sizes of a launch over a number of items at the backend's
        work-group size (:meth:`~.opencl.OpenCLBackend.launch_size`).
    """

    def __init__(
        self,
        events: Any,
        weight: Any,
        level: Any,
        ceil: np.ndarray,
        rows: tuple[int, int],
        launch_size: Callable[[int], tuple[int, tuple[int] | None]],
    ) -> None:
        self._events, self._w, self._level, self._ceil, self.rows = (
            events, weight, level, ceil, rows
        )  # fmt: skip
        self._launch_size = launch_size
        prog = events.program(truncated=True)
        self._k_chunks = kernel(prog, "far_chunks")
        self._k_offsets = kernel(prog, "far_offsets")
        self._k_prefix = kernel(prog, "far_prefix")
        self._k_bound = kernel(prog, "pass_bound")
        self._nchunks = -(-events.n // FAR_CHUNK)
        self._g = events.output(8 * events.n, read=True)
        self._tot = events.output(8 * (self._nchunks + 1), read=True)
        self._cum: OrderedDict[tuple[float, float, float], Any] = OrderedDict()
        # each slot: [the host copy of its pass (None: free), E~ buffer, omega buffer]
        self._slots: list[list[Any]] = []
        self._next = 0

    def prepare(self, sigma_t: float, kappa: float) -> Any:
        """Enqueue the far sums' prefixes ``cum`` (n + 1 float64) at ``sigma_t`` and the
        cut-off ``kappa`` (beyond :data:`~.draw_index.REACH` radii: the exponential prefixes'
        far part), unless kept; returns their buffer."""
        factor = REACH**2
        key = (sigma_t, kappa, factor)
        hit = self._cum.get(key)
        if hit is None:
            ev, n = self._events, self._events.n
            hit = ev.output(8 * (n + 1), read=True)
            lfac = ev.upload(np.exp(-factor * level_kappas(kappa, self._ceil)))
            t0, inv = float(ev.time[0]), 1.0 / sigma_t
            size = self._size(self._nchunks)
            self._k_chunks(
                ev.queue, *size,
                FarChunksArgs(ev.buf_td, self._w, self._level, lfac, n, FAR_CHUNK, t0, inv,
                              self._g, self._tot),
            )  # fmt: skip
            self._k_offsets(ev.queue, *self._size(1), FarOffsetsArgs(self._tot, self._nchunks))
            self._k_prefix(ev.queue, *size, FarPrefixArgs(self._g, self._tot, n, FAR_CHUNK, hit))
            self._cum[key] = hit
            while len(self._cum) > _FAR_KEPT:
                self._cum.popitem(last=False)
        return hit

    def finish(
        self, out: Any, norm: float, escale: float, sigma_t: float, kappa: float
    ) -> np.ndarray:
        """``E~`` and ``omega`` of the pass ``out`` (a :class:`~.block_pass.BlockPass` just
        launched) stacked, shape (2, rows), float64: a new array (its device copy kept for
        :meth:`resident`).

        ``E~ = e escale`` (the multiply of :class:`PassBound`'s path, bit for bit) and
        ``omega = norm (tail + ring + far) SAFETY`` are made on the device from ``out``'s
        buffers into the slot and read back: one ``(2, rows)`` read, nothing uploaded."""
        ev = self._events
        nrows = self.rows[1] - self.rows[0]
        cum = self.prepare(sigma_t, kappa)
        slot = self._slot()
        args = PassBoundArgs(
            out.buffers[0], out.buffers[1], out.buffers[2], cum, ev.buf_lo, ev.buf_td,
            self.rows[0], nrows, 1, float(ev.time[0]), 1.0 / sigma_t, escale, norm, SAFETY,
            slot[1], slot[2],
        )  # fmt: skip
        self._k_bound(ev.queue, *self._size(nrows), args)
        stack = np.empty((2, nrows))
        ev.read(stack[0], slot[1])
        ev.read(stack[1], slot[2])
        slot[0] = stack
        return stack

    def resident(self, stack: np.ndarray) -> tuple[Any, Any] | None:
        """The device buffers (E~, omega) holding ``stack`` (an array :meth:`finish`
        returned, recognised by identity) while they still do; else None."""
        for slot in self._slots:
            if slot[0] is stack:
                return slot[1], slot[2]
        return None

    def _size(self, items: int) -> tuple[tuple[int], tuple[int] | None]:
        """(global, local) sizes of a one-work-item-per-item launch."""
        g, local = self._launch_size(items)
        return (g,), local

    def _slot(self) -> list[Any]:
        """The next of :data:`RESIDENT` slots, round robin (its old pass forgotten)."""
        if len(self._slots) < RESIDENT:
            nbytes = 8 * (self.rows[1] - self.rows[0])
            out = self._events.output  # read by the row sums too
            self._slots.append([None, out(nbytes, read=True), out(nbytes, read=True)])
            return self._slots[-1]
        slot = self._slots[self._next]
        self._next = (self._next + 1) % RESIDENT
        slot[0] = None
        return slot
