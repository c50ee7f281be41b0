"""OpenCL engine: the pair sums of ``kernels/hawkes.cl`` on one device (PoCL CPU or a GPU).

Built on a :class:`~hawkes_cli.engine.device.DeviceEvents` (events uploaded once, program
built once per process and precision); each pass enqueues one kernel over this rank's rows and
reads back one float64 per row. Normalising constants are applied here in float64.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from ..vocab import BACKGROUNDS, DEFAULT_BACKGROUND
from .device import DeviceEvents, launch_size
from .launch import BackgroundArgs, BackgroundPairsArgs, Kernel, TriggerArgs, kernel

log = logging.getLogger(__name__)

LOG2E = 1.0 / math.log(2.0)
#: Most distinct times whose background a float32 backend sums in float64 on the host.
HOST_BACKGROUND = 2048
#: Fewest events per distinct time for which a float32 backend sums the background of times
#: off the whole-day grid on the host (the U x U terms; whole days always go to the host).
HOST_REPEATS = 8
#: Rows of the U x U terms evaluated at once by :func:`distinct_time_sums` (a block of
#: 128 x 2048 float64 is 2 MiB: it stays in cache through the exponent and the product).
HOST_BLOCK = 128


def on_day_grid(tu: np.ndarray) -> bool:
    """Whether the sorted distinct times ``tu`` are whole days apart and span at most
    :data:`HOST_BACKGROUND` days (the convolution of :func:`distinct_time_sums`)."""
    k = tu - tu[0] if tu.size else tu
    span = float(k[-1]) if k.size else 0.0
    return span <= HOST_BACKGROUND and bool(np.all(k == np.round(k)))


def host_background(n_events: int, tu: np.ndarray) -> bool:
    """Whether a float32 backend sums the background over the distinct times ``tu`` in
    float64 on the host (:func:`distinct_time_sums`) rather than on the device.

    Only where float32 would round alike in every row: at most :data:`HOST_BACKGROUND`
    distinct times, and either on the whole-day grid (every row repeats the same gaps, and
    one convolution costs next to nothing) or at least :data:`HOST_REPEATS` events per
    distinct time (each distinct time's rounding shared by that many events; the U^2 terms
    then cost at most 1/64 of the N^2 trigger pairs). Every time distinct (U = N) off the
    grid has no repeated gaps and goes to the device like any larger N: summing its U^2
    terms on the host cost 5x the whole iteration at 1,977 events.
    """
    nu = int(tu.size)
    if nu > HOST_BACKGROUND:
        return False
    return on_day_grid(tu) or n_events >= HOST_REPEATS * nu


def distinct_time_sums(
    tu: np.ndarray, counts: np.ndarray, tau_t: float, u0: int, u1: int
) -> np.ndarray:
    """``sum_{v != u} c_v exp(-(tu_u - tu_v)^2 / (2 tau_t^2))`` for the distinct times
    ``u0 .. u1`` of ``tu`` (sorted, with counts ``c``), float64, shape (u1 - u0,).

    Whole days spanning at most :data:`HOST_BACKGROUND` days: one direct convolution of the
    counts on the day grid with the kernel at every gap (own gap 0 left out, so the own time
    is skipped exactly); otherwise the U x U terms, :data:`HOST_BLOCK` rows at a time in
    place (a third of the time of the whole matrix at once). Deterministic: the same
    operations in the same order on every call.
    """
    c = counts.astype(np.float64)
    if on_day_grid(tu):
        k = tu - tu[0]
        n = int(k[-1]) if k.size else 0
        dense = np.zeros(n + 1)
        dense[k.astype(np.int64)] = c
        gap = np.arange(-n, n + 1, dtype=np.float64)
        g = np.exp(-0.5 * (gap / tau_t) ** 2)
        g[n] = 0.0  # the own distinct time: the tie rule
        full = np.convolve(dense, g)  # full[i + n] = sum_j dense[j] g(i - j)
        return full[k[u0:u1].astype(np.int64) + n]
    out = np.empty(u1 - u0)
    scale = -0.5 / (tau_t * tau_t)
    work = np.empty((min(HOST_BLOCK, max(u1 - u0, 0)), tu.size))
    for i in range(u0, u1, HOST_BLOCK):
        j = min(i + HOST_BLOCK, u1)
        blk = work[: j - i]
        np.subtract(tu[i:j, None], tu[None, :], out=blk)
        own = blk == 0.0  # the own distinct time: the tie rule
        np.square(blk, out=blk)
        blk *= scale
        np.exp(blk, out=blk)
        blk[own] = 0.0
        out[i - u0 : j - u0] = blk @ c
    return out


class OpenCLBackend:
    """Exact pair sums B and E for rows ``[row_start, row_stop)`` on an OpenCL device.

    Parameters
    ----------
    events
        The events on the device, at the working precision of the pair terms (rows are
        accumulated in float64 either way); ``events.density`` is required for model 2.
    model
        1 or 2.
    area
        Study-region area (coordinate units squared); ``rho = 1 / area``.
    rows
        ``(start, stop)`` rows this backend owns; default all.
    work_group
        Work-group size; default 64 on GPUs, implementation's choice elsewhere.
    background
        ``"auto"`` (default) or ``"pairs"``: see :data:`hawkes_cli.vocab.BACKGROUNDS`. Both are
        the same sum; ``auto`` groups the sources by distinct time.
    """

    def __init__(
        self,
        events: DeviceEvents,
        *,
        model: int,
        area: float,
        rows: tuple[int, int] | None = None,
        work_group: int | None = None,
        background: str = DEFAULT_BACKGROUND,
    ) -> None:
        if model == 2 and events.density is None:
            raise ValueError("model 2 needs densities")
        if background not in BACKGROUNDS:
            raise ValueError(f"background must be one of {BACKGROUNDS}, got {background!r}")
        self.events = events
        self.model = model
        self.n_events = n = events.n
        self.precision = events.precision
        self.rho = 1.0 / float(area)
        self.row_start, self.row_stop = rows if rows is not None else (0, n)
        info = events.device.info
        if work_group is None and info.kind == "gpu":
            work_group = 64
        self.work_group = work_group
        log.info(
            "OpenCL device %s %r (%s), %s, rows %d..%d",
            info.ident,
            info.name,
            info.kind,
            self.precision,
            self.row_start,
            self.row_stop,
        )
        prog = events.program()

        # Background over distinct times: this rank's rows map to distinct-time rows u0..u1.
        ts = events.times
        self._inverse = ts.inverse[self.row_start : self.row_stop]
        self._u0 = int(self._inverse[0]) if self._inverse.size else 0
        self._u1 = int(self._inverse[-1]) + 1 if self._inverse.size else 0
        self._nu = int(ts.unique.size)
        self.background_mode = background
        # few distinct times in float32: the exponents repeat with every row, and so would
        # their roundings (about 2e-7 of B alike, 0.05 nats of log-likelihood differences
        # in tau_t at 10^6 events): sum them in float64 on the host (host_background)
        self._host_background = (
            events.precision == "float32"
            and background != "pairs"
            and host_background(n, ts.unique)
        )
        if background == "pairs":  # every row over every event, ties skipped by index
            self._buf_hi = events.upload((ts.lo + ts.counts[ts.inverse]).astype(np.int32))
            self._k_pairs = kernel(prog, "background_pairs")

        nrows = self.row_stop - self.row_start
        self._e_host = np.empty(nrows, dtype=np.float64)
        self._b_host = np.empty(self._u1 - self._u0, dtype=np.float64)
        self._buf_e = events.output(self._e_host.nbytes)
        self._buf_b = events.output(self._b_host.nbytes)
        # one kernel object per backend (kernel objects hold their arguments)
        self._k_trigger = kernel(prog, f"trigger_model{model}")
        self._k_scaled = kernel(prog, f"trigger_scaled{model}")
        self._k_sample = kernel(prog, f"trigger_sample{model}")
        self._k_scaled_sample = kernel(prog, f"trigger_scaled_sample{model}")
        self._k_background = kernel(prog, "background")

    @property
    def device_info(self):
        """The device (:class:`hawkes_cli.kernels.DeviceInfo`)."""
        return self.events.device.info

    @property
    def queue(self):
        """The command queue every pass enqueues on."""
        return self.events.queue

    @property
    def kernel_fingerprint(self) -> str:
        """SHA-256 of every kernel source and build option compiled for these events."""
        return self.events.kernel_fingerprint

    @property
    def background_path(self) -> str:
        """Which computation the background takes (for ``hawkes-run loglik``)."""
        if self.background_mode == "pairs":
            return f"pair sum (forced; {self._nu} distinct times)"
        if self._nu < self.n_events:
            host = ", float64 on the host" if self._host_background else ""
            return f"lattice ({self._nu} distinct times for {self.n_events} events{host})"
        return f"pair sum ({self._nu} distinct times)"

    @property
    def path(self) -> str:
        """Which computation each part takes (for ``hawkes-run loglik``)."""
        return f"background: {self.background_path}; trigger: pair sum (exact)"

    def set_locations(self, x: np.ndarray, y: np.ndarray) -> None:
        """Upload new locations for all N events (:meth:`DeviceEvents.set_locations`)."""
        self.events.set_locations(x, y)

    def set_amplitude(self, amplitude: np.ndarray | None) -> None:
        """Weight each source's trigger terms by ``amplitude`` (shape (N,); None: by 1), from
        the next :meth:`trigger` on (:meth:`DeviceEvents.set_amplitude`)."""
        self.events.set_amplitude(amplitude)

    def launch_size(self, rows: int) -> tuple[int, tuple[int] | None]:
        """(global, local) size of a launch over ``rows`` rows at this backend's work-group."""
        return launch_size(rows, self.work_group)

    def trigger(self, sigma_x: float, sigma_t: float) -> np.ndarray:
        """E for this backend's rows, float64, shape (rows,)."""
        nrows = self.row_stop - self.row_start
        if nrows == 0:
            return self._e_host.copy()
        scaled = self.events.buf_a is not None
        self._launch_trigger(self._k_scaled if scaled else self._k_trigger, nrows, sigma_x, sigma_t)
        return self._e_host * self._trigger_norm(sigma_x, sigma_t)

    def trigger_at(self, rows: np.ndarray, sigma_x: float, sigma_t: float) -> np.ndarray:
        """E of the events ``rows`` (indices into all N, any order), float64, shape
        (len(rows),): the same sums as :meth:`trigger`, for a sample of rows (the truncated
        engine's self-check, :class:`~hawkes_cli.engine.rowcheck.RowCheck`)."""
        rows = np.ascontiguousarray(rows, dtype=np.int32)
        if rows.size == 0:
            return np.empty(0)
        out = np.empty(rows.size)
        buf = self.events.output(out.nbytes)
        scaled = self.events.buf_a is not None
        self._launch_trigger(
            self._k_scaled_sample if scaled else self._k_sample, rows.size, sigma_x, sigma_t,
            sample=self.events.upload(rows), out=buf,
        )  # fmt: skip
        self.events.read(out, buf)
        return out * self._trigger_norm(sigma_x, sigma_t)

    def _trigger_norm(self, sigma_x: float, sigma_t: float) -> float:
        return 2.0**-self.events.shift / (2.0 * math.pi * sigma_x * sigma_x * sigma_t)

    def _launch_trigger(
        self,
        trigger: Kernel,
        nrows: int,
        sigma_x: float,
        sigma_t: float,
        *,
        sample: Any = None,
        out: Any = None,
    ) -> None:
        """Enqueue ``trigger_model*`` or ``trigger_scaled*`` (this backend's rows into
        ``_e_host``) or ``trigger_sample*``, ``trigger_scaled_sample*`` (the rows in ``sample``
        into ``out``, read by the caller)."""
        ev = self.events
        kt, ktl = ev.coefficient(LOG2E / sigma_t)
        kx, kxr = ev.coefficient(LOG2E / (2.0 * sigma_x * sigma_x), relative=True)
        gsize, lsize = self.launch_size(nrows)
        args = TriggerArgs(
            t=ev.buf_t,
            x=ev.buf_x,
            y=ev.buf_y,
            xl=ev.buf_xl,
            yl=ev.buf_yl,
            w=ev.buf_w,
            a=ev.buf_w if ev.buf_a is None else ev.buf_a,  # unread but by trigger_scaled*
            lo=ev.buf_lo,
            sample=ev.buf_lo if sample is None else sample,  # unread by trigger_model*
            row0=self.row_start,
            nrows=nrows,
            kt=kt,
            kx=kx,
            ktl=ktl,
            kxr=kxr,
            shift=ev.real(ev.shift),
            out=self._buf_e if out is None else out,
        )
        trigger(self.queue, (gsize,), lsize, args)
        if out is None:
            self.events.read(self._e_host, self._buf_e)

    def background(self, tau_t: float) -> np.ndarray:
        """B for this backend's rows, float64, shape (rows,)."""
        if self.background_mode == "pairs":
            return self._background_pairs(tau_t)
        nrows = self._u1 - self._u0
        if nrows == 0:
            return np.empty(0)
        ev = self.events
        if self._host_background:
            b = distinct_time_sums(ev.times.unique, ev.times.counts, tau_t, self._u0, self._u1)
            return (self.rho / (math.sqrt(2.0 * math.pi) * tau_t)) * b[self._inverse - self._u0]
        kb, kbl = ev.coefficient(LOG2E / (2.0 * tau_t * tau_t))
        gsize, lsize = self.launch_size(nrows)
        args = BackgroundArgs(
            tu=ev.buf_tu,
            c=ev.buf_c,
            nu=self._nu,
            row0=self._u0,
            nrows=nrows,
            kb=kb,
            kbl=kbl,
            shift=ev.real(ev.shift),
            out=self._buf_b,
        )
        self._k_background(self.queue, (gsize,), lsize, args)
        self.events.read(self._b_host, self._buf_b)
        norm = 2.0**-ev.shift * self.rho / (math.sqrt(2.0 * math.pi) * tau_t)
        return norm * self._b_host[self._inverse - self._u0]

    def _background_pairs(self, tau_t: float) -> np.ndarray:
        """B as the plain pair sum over all events (``background="pairs"``)."""
        nrows = self.row_stop - self.row_start
        out = np.empty(nrows, dtype=np.float64)
        if nrows == 0:
            return out
        ev = self.events
        buf = ev.output(out.nbytes)
        gsize, lsize = self.launch_size(nrows)
        kb, kbl = ev.coefficient(LOG2E / (2.0 * tau_t * tau_t))
        args = BackgroundPairsArgs(
            t=ev.buf_t,
            n=self.n_events,
            lo=ev.buf_lo,
            hi=self._buf_hi,
            row0=self.row_start,
            nrows=nrows,
            kb=kb,
            kbl=kbl,
            shift=ev.real(ev.shift),
            out=buf,
        )
        self._k_pairs(self.queue, (gsize,), lsize, args)
        self.events.read(out, buf)
        return out * (2.0**-ev.shift * self.rho / (math.sqrt(2.0 * math.pi) * tau_t))
