"""Reference engine: the contract of DESIGN section 2 in numpy float64, row block by row block.

Written for clarity, not speed: it evaluates every pair straight from the formulas (no
tie-group shortcuts, no distinct-time reuse), so it is an independent ground truth for the
OpenCL engine. Memory is bounded by ``block_elems`` float64 values per temporary (default
2e7, i.e. 160 MB), so N = 20,000 stays under about 1 GB.
"""

from __future__ import annotations

import math

import numpy as np

from .times import TimeStructure


class ReferenceBackend:
    """Pair sums B and E for rows ``[row_start, row_stop)`` in float64 numpy.

    Parameters
    ----------
    time, x, y : (N,) float64
        Events sorted by time (time units; coordinate units).
    density : (N,) float64 or None
        Persons per square mile; required for model 2.
    model
        1 (``s_m = sigma_x``) or 2 (``s_m = sigma_x / sqrt(D_m)``).
    area
        Area A of the study region (coordinate units squared); ``rho = 1 / A``.
    rows
        ``(start, stop)`` rows this backend owns; default all.
    block_elems
        Upper bound on the elements of one (rows x sources) temporary.
    times
        The tie structure of ``time``, when already built (built here otherwise).
    """

    #: No OpenCL kernel is compiled.
    kernel_fingerprint = ""

    def __init__(
        self,
        time: np.ndarray,
        x: np.ndarray,
        y: np.ndarray,
        density: np.ndarray | None,
        *,
        model: int,
        area: float,
        rows: tuple[int, int] | None = None,
        block_elems: int = 20_000_000,
        times: TimeStructure | None = None,
    ) -> None:
        self.t = np.asarray(time, dtype=np.float64)
        self.x = np.asarray(x, dtype=np.float64)
        self.y = np.asarray(y, dtype=np.float64)
        n = self.t.size
        if model == 2 and density is None:
            raise ValueError("model 2 needs densities")
        self.density = None if density is None else np.asarray(density, dtype=np.float64)
        self.model = model
        self.rho = 1.0 / float(area)
        self.row_start, self.row_stop = rows if rows is not None else (0, n)
        self.lo = (TimeStructure.from_times(self.t) if times is None else times).lo
        self.block = max(1, int(block_elems) // max(n, 1))
        self.amplitude: np.ndarray | None = None

    path = "background: pair sum; trigger: pair sum (numpy float64, exact)"

    def _blocks(self):
        for r0 in range(self.row_start, self.row_stop, self.block):
            yield r0, min(r0 + self.block, self.row_stop)

    def background(self, tau_t: float) -> np.ndarray:
        """``B_n = rho * sum_{t_m != t_n} phi1(t_n - t_m; tau_t)`` for the rows."""
        out = np.empty(self.row_stop - self.row_start)
        norm = self.rho / (math.sqrt(2.0 * math.pi) * tau_t)
        for r0, r1 in self._blocks():
            dt = self.t[r0:r1, None] - self.t[None, :]
            phi = np.exp(-0.5 * (dt / tau_t) ** 2)
            phi[dt == 0.0] = 0.0  # ties, the event itself included
            out[r0 - self.row_start : r1 - self.row_start] = norm * phi.sum(axis=1)
        return out

    def trigger(self, sigma_x: float, sigma_t: float) -> np.ndarray:
        """``E_n = sum_{t_m < t_n} a_m exp(-dt/sigma_t)/sigma_t * phi2(x_n - x_m; s_m)``, with
        ``a_m`` the :meth:`set_amplitude` (1 when none)."""
        out = np.zeros(self.row_stop - self.row_start)
        for r0, r1 in self._blocks():
            ncol = int(self.lo[r1 - 1])  # lo is non-decreasing: no source beyond it
            if ncol == 0:
                continue
            dt = self.t[r0:r1, None] - self.t[None, :ncol]
            r2 = (self.x[r0:r1, None] - self.x[None, :ncol]) ** 2 + (
                self.y[r0:r1, None] - self.y[None, :ncol]
            ) ** 2
            if self.model == 2:
                s2 = sigma_x**2 / self.density[None, :ncol]
            else:
                s2 = np.full((1, ncol), sigma_x**2)
            with np.errstate(over="ignore"):  # later sources overflow; zeroed below
                term = np.exp(-dt / sigma_t - r2 / (2.0 * s2)) / (2.0 * math.pi * s2 * sigma_t)
            term[dt <= 0.0] = 0.0  # strictly earlier sources only
            if self.amplitude is not None:  # renormalized: phi2(x_n - x_m; s_m) / M_m
                term *= self.amplitude[None, :ncol]
            out[r0 - self.row_start : r1 - self.row_start] = term.sum(axis=1)
        return out

    def set_locations(self, x: np.ndarray, y: np.ndarray) -> None:
        """Replace the locations of all N events."""
        self.x = np.asarray(x, dtype=np.float64)
        self.y = np.asarray(y, dtype=np.float64)

    def set_amplitude(self, amplitude: np.ndarray | None) -> None:
        """Weight each source's trigger terms by ``amplitude`` (shape (N,); None: by 1)."""
        self.amplitude = None if amplitude is None else np.asarray(amplitude, dtype=np.float64)
