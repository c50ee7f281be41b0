"""OpenCL engine: the pair sums of ``kernels/hawkes.cl`` on one device (PoCL CPU or a GPU).

The program is built once per process and precision (:func:`hawkes_cli.kernels.build_program`);
event arrays are uploaded once; each pass enqueues one kernel over this rank's rows and reads
back one float64 per row. Normalising constants are applied here in float64.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from .. import kernels
from .base import BACKGROUNDS, TimeStructure

log = logging.getLogger(__name__)

LOG2E = 1.0 / math.log(2.0)
_VEC = 8  # sources per vector step; arrays are padded to a multiple of this


def _padded(values: np.ndarray, dtype: np.dtype, fill: float) -> np.ndarray:
    n = values.size
    out = np.full(((n + _VEC - 1) // _VEC) * _VEC + _VEC, fill, dtype=dtype)
    out[:n] = values
    return out


class OpenCLBackend:
    """Pair sums B and E for rows ``[row_start, row_stop)`` on an OpenCL device.

    Parameters
    ----------
    time, x, y : (N,) float64
        Events sorted by time.
    density : (N,) float64 or None
        Persons per square mile; required for model 2.
    model
        1 or 2.
    area
        Study-region area (coordinate units squared); ``rho = 1 / area``.
    precision
        ``"float32"`` or ``"float64"``: the working precision of the pair terms (rows are
        accumulated in float64 either way).
    rows
        ``(start, stop)`` rows this backend owns; default all.
    device
        Device spec for :func:`hawkes_cli.kernels.select_device` (None: automatic).
    local_rank
        Rank on the node; picks among several matching devices.
    work_group
        Work-group size; default 64 on GPUs, implementation's choice elsewhere.
    background
        ``"auto"`` (default) or ``"pairs"``: see :data:`BACKGROUNDS`. Both are the same sum;
        ``auto`` groups the sources by distinct time.
    """

    def __init__(
        self,
        time: np.ndarray,
        x: np.ndarray,
        y: np.ndarray,
        density: np.ndarray | None,
        *,
        model: int,
        area: float,
        precision: str = "float32",
        rows: tuple[int, int] | None = None,
        device: str | None = None,
        local_rank: int = 0,
        work_group: int | None = None,
        background: str = "auto",
    ) -> None:
        import pyopencl as cl

        if precision not in kernels.PRECISIONS:
            raise ValueError(f"precision must be one of {kernels.PRECISIONS}, got {precision!r}")
        if model == 2 and density is None:
            raise ValueError("model 2 needs densities")
        t = np.asarray(time, dtype=np.float64)
        n = t.size
        if n >= 2**24:
            raise ValueError(f"at most {2**24 - 1} events per chain, got {n}")
        self.model = model
        self.n_events = n
        self.precision = precision
        self.rho = 1.0 / float(area)
        self.row_start, self.row_stop = rows if rows is not None else (0, n)
        self.device_info, dev = kernels.select_device(device, local_rank)
        kernels.require_float64(self.device_info)
        self.ctx = kernels.device_context(dev)
        self.queue = cl.CommandQueue(self.ctx)
        prog = kernels.build_program(self.ctx, precision)
        self._real = np.float64 if precision == "float64" else np.float32
        # Exponent shift (log2 units) keeping small terms above float32's underflow; hawkes.cl.
        self._shift = 0.0 if precision == "float64" else 60.0
        if work_group is None and self.device_info.kind == "gpu":
            work_group = 64
        self.work_group = work_group
        log.info(
            "OpenCL device %s %r (%s), %s, rows %d..%d",
            self.device_info.ident,
            self.device_info.name,
            self.device_info.kind,
            precision,
            self.row_start,
            self.row_stop,
        )

        ts = TimeStructure.from_times(t)
        self._cl = cl
        real = self._real
        self._buf_t = self._upload(_padded(t, real, t[-1]))
        self._buf_lo = self._upload(ts.lo.astype(np.int32))
        dens = np.ones(n) if density is None else np.asarray(density, dtype=np.float64)
        self._buf_w = self._upload(_padded(dens, real, 0.0))
        self._buf_x = self._buf_y = self._buf_xl = self._buf_yl = None
        self.set_locations(x, y)

        # Background over distinct times: this rank's rows map to distinct-time rows u0..u1.
        self._inverse = ts.inverse[self.row_start : self.row_stop]
        self._u0 = int(self._inverse[0]) if self._inverse.size else 0
        self._u1 = int(self._inverse[-1]) + 1 if self._inverse.size else 0
        self._nu = int(ts.unique.size)
        self._buf_tu = self._upload(_padded(ts.unique, real, ts.unique[-1]))
        self._buf_c = self._upload(_padded(ts.counts.astype(np.float64), real, 0.0))
        if background not in BACKGROUNDS:
            raise ValueError(f"background must be one of {BACKGROUNDS}, got {background!r}")
        self.background_mode = background
        if background == "pairs":  # every row over every event, ties skipped by index
            self._buf_hi = self._upload((ts.lo + ts.counts[ts.inverse]).astype(np.int32))
            self._k_pairs = cl.Kernel(prog, "background_pairs")

        nrows = self.row_stop - self.row_start
        self._e_host = np.empty(nrows, dtype=np.float64)
        self._b_host = np.empty(self._u1 - self._u0, dtype=np.float64)
        self._buf_e = cl.Buffer(self.ctx, cl.mem_flags.WRITE_ONLY, max(8, self._e_host.nbytes))
        self._buf_b = cl.Buffer(self.ctx, cl.mem_flags.WRITE_ONLY, max(8, self._b_host.nbytes))
        # one kernel object per backend (kernel objects hold their arguments)
        self._k_trigger = cl.Kernel(prog, f"trigger_model{model}")
        self._k_background = cl.Kernel(prog, "background")

    @property
    def background_path(self) -> str:
        """Which computation the background takes (for ``hawkes-run loglik``)."""
        if self.background_mode == "pairs":
            return f"pair sum (forced; {self._nu} distinct times)"
        if self._nu < self.n_events:
            return f"lattice ({self._nu} distinct times for {self.n_events} events)"
        return f"pair sum ({self._nu} distinct times)"

    @property
    def path(self) -> str:
        """Which computation each part takes (for ``hawkes-run loglik``)."""
        return f"background: {self.background_path}; trigger: pair sum (exact)"

    def _upload(self, host: np.ndarray):
        mf = self._cl.mem_flags
        return self._cl.Buffer(self.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=host)

    def set_locations(self, x: np.ndarray, y: np.ndarray) -> None:
        """Upload new locations for all N events (two-part in float32, see hawkes.cl)."""
        x = np.asarray(x, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        real = self._real
        xh, yh = x.astype(real), y.astype(real)
        self._buf_x = self._upload(_padded(xh, real, 0.0))
        self._buf_y = self._upload(_padded(yh, real, 0.0))
        if real is np.float32:
            self._buf_xl = self._upload(_padded((x - xh).astype(real), real, 0.0))
            self._buf_yl = self._upload(_padded((y - yh).astype(real), real, 0.0))
        else:  # unused by the float64 build
            self._buf_xl, self._buf_yl = self._buf_x, self._buf_y

    def _global_size(self, rows: int) -> tuple[int, tuple[int] | None]:
        wg = self.work_group
        if wg is None:
            return max(rows, 1), None
        return max(-(-rows // wg) * wg, wg), (wg,)

    def trigger(self, sigma_x: float, sigma_t: float) -> np.ndarray:
        """E for this backend's rows, float64, shape (rows,)."""
        nrows = self.row_stop - self.row_start
        if nrows == 0:
            return self._e_host.copy()
        real = self._real
        kt = real(LOG2E / sigma_t)
        kx = real(LOG2E / (2.0 * sigma_x * sigma_x))
        gsize, lsize = self._global_size(nrows)
        self._k_trigger(
            self.queue,
            (gsize,),
            lsize,
            self._buf_t,
            self._buf_x,
            self._buf_y,
            self._buf_xl,
            self._buf_yl,
            self._buf_w,
            self._buf_lo,
            np.int32(self.row_start),
            np.int32(nrows),
            kt,
            kx,
            real(self._shift),
            self._buf_e,
        )
        self._cl.enqueue_copy(self.queue, self._e_host, self._buf_e)
        norm = 2.0**-self._shift / (2.0 * math.pi * sigma_x * sigma_x * sigma_t)
        return self._e_host * norm

    def background(self, tau_t: float) -> np.ndarray:
        """B for this backend's rows, float64, shape (rows,)."""
        if self.background_mode == "pairs":
            return self._background_pairs(tau_t)
        nrows = self._u1 - self._u0
        if nrows == 0:
            return np.empty(0)
        kb = self._real(LOG2E / (2.0 * tau_t * tau_t))
        gsize, lsize = self._global_size(nrows)
        self._k_background(
            self.queue,
            (gsize,),
            lsize,
            self._buf_tu,
            self._buf_c,
            np.int32(self._nu),
            np.int32(self._u0),
            np.int32(nrows),
            kb,
            self._real(self._shift),
            self._buf_b,
        )
        self._cl.enqueue_copy(self.queue, self._b_host, self._buf_b)
        norm = 2.0**-self._shift * self.rho / (math.sqrt(2.0 * math.pi) * tau_t)
        return norm * self._b_host[self._inverse - self._u0]

    def _background_pairs(self, tau_t: float) -> np.ndarray:
        """B as the plain pair sum over all events (``background="pairs"``)."""
        nrows = self.row_stop - self.row_start
        out = np.empty(nrows, dtype=np.float64)
        if nrows == 0:
            return out
        buf = self._cl.Buffer(self.ctx, self._cl.mem_flags.WRITE_ONLY, out.nbytes)
        gsize, lsize = self._global_size(nrows)
        self._k_pairs(
            self.queue,
            (gsize,),
            lsize,
            self._buf_t,
            np.int32(self.n_events),
            self._buf_lo,
            self._buf_hi,
            np.int32(self.row_start),
            np.int32(nrows),
            self._real(LOG2E / (2.0 * tau_t * tau_t)),
            self._real(self._shift),
            buf,
        )
        self._cl.enqueue_copy(self.queue, out, buf)
        return out * (2.0**-self._shift * self.rho / (math.sqrt(2.0 * math.pi) * tau_t))
