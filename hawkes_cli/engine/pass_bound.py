"""The truncated path's bound stage: what a row-block pass omits, ``omega_n``.

The row-block kernel (:mod:`.block_pass`) bounds the older sources of the cells it visits
(``tail_n``) and the cells between one and :data:`~.draw_index.REACH` cut-off radii
(``ring_n``); every source beyond is bounded here on the host, over all levels together, by
``far_n = sum_{m < lo_n} exp(-factor kappa_l(m)) w_m exp(-(t_n - t_m) / sigma_t)`` (O(N),
:func:`~.grid.temporal_sums`). Then ``omega_n = norm (tail_n + ring_n + far_n)`` times
``1 + 1e-8`` for the rounding of the bound's own arithmetic, ``norm = 1 / (2 pi sigma_x^2
sigma_t)`` (:mod:`.truncated`'s docstring has the whole argument).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from . import profile
from .draw_index import REACH
from .grid import level_kappas, temporal_sums

__all__ = ["SAFETY", "PassBound"]

#: Rounding of the bound's own arithmetic (prefix sums, exp).
SAFETY = 1.0 + 1e-8
#: Far sums kept (one per ``(sigma_t, kappa, factor, amplitudes)``).
_FAR_KEPT = 2


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
