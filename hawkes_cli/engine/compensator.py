"""The compensator's sums over one rank's rows, which depend on one or two parameters each.

The compensator is ``mu0 * sum_n h(t_n) + xi0 * sum_n (1 - exp(-(T - t_n)/sigma_t)) M_n``
(DESIGN section 2; ``M_n`` the trigger mass inside the study region with ``edge: censored``,
else 1). Both sums depend on the time alone, so they run once per distinct time, and with many
distinct times (continuous times) from per-bin moments within 1e-10 nats
(:mod:`~.time_moments`). With ``censored`` the trigger's sum is the whole mass less what the
rows that lose some lose (:meth:`~.edge_mass.EdgeMass.lost_sums`: a quarter of the rows at 1M,
summed on the device where the masses are read there), so a move of ``sigma_x`` or ``sigma_t``
costs a pass over those rows, not over all N.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from scipy.special import ndtr

from . import profile
from .edge_mass import EdgeMass
from .time_moments import TRIGGER_BINS, TimeMoments

#: Sums kept per kind (a chain's current state and its last proposals).
KEPT = 16


def _remember(cache: OrderedDict, key: object, value: object) -> None:
    """Keep ``value`` under ``key`` in ``cache``, dropping the oldest beyond :data:`KEPT`."""
    cache[key] = value
    while len(cache) > KEPT:
        cache.popitem(last=False)


class Compensator:
    """The compensator's per-unit sums over one rank's rows (cached by their parameters).

    Parameters
    ----------
    tu : (U,) float64
        The rows' distinct times (time units), sorted.
    tcount : (U,) int
        Rows at each distinct time.
    row_time : (rows,) int
        Each row's index into ``tu``.
    window_end
        ``T`` (time units), at least ``tu[-1]``.
    edge
        The rows' trigger masses inside the study region (``censored``), or None (every
        row's whole mass: no edge correction, or ``renormalized``).
    """

    def __init__(
        self,
        tu: np.ndarray,
        tcount: np.ndarray,
        row_time: np.ndarray,
        window_end: float,
        edge: EdgeMass | None,
    ) -> None:
        self._tu, self._tcount, self._row_time = tu, tcount, row_time
        self.window_end = window_end
        self.edge = edge
        self._moments = TimeMoments.of(tu, tcount)
        self._fine = TimeMoments.of(tu, tcount, TRIGGER_BINS)
        self._background: OrderedDict[float, float] = OrderedDict()
        self._whole: OrderedDict[float, float] = OrderedDict()
        self._trigger: OrderedDict[tuple[float, float], tuple[float, float]] = OrderedDict()
        self._tail = None if edge is None else tu[row_time] - window_end

    def set_locations(self) -> None:
        """The locations changed: the trigger's sums with edge masses are dropped."""
        self._trigger.clear()

    def background(self, tau_t: float) -> float:
        """``sum_n (Phi((T - t_n)/tau_t) - Phi(-t_n/tau_t))`` over the rows: the background's
        compensator per unit ``mu0``."""
        hit = self._background.get(tau_t)
        if hit is None:
            if self._moments is not None:  # many distinct times: from their moments
                hit = self._moments.background_total(self.window_end, tau_t)
            if hit is None:
                T, t = self.window_end, self._tu
                hit = float(np.dot(ndtr((T - t) / tau_t) - ndtr(-t / tau_t), self._tcount))
            _remember(self._background, tau_t, hit)
        return hit

    def trigger(self, sigma_x: float, sigma_t: float) -> tuple[float, float]:
        """The trigger's compensator per unit ``xi0``, ``sum_n (1 - exp(-(T - t_n)/sigma_t))
        M_n``, and the edge term's error per unit ``xi0`` (0 without edge masses)."""
        key = (sigma_x, sigma_t)
        hit = self._trigger.get(key)
        if hit is None:
            whole = self._whole_mass(sigma_t)
            if self.edge is None:
                hit = (whole, 0.0)
            else:  # censored: less what the rows that lose some lose
                with profile.stage("edge mass"):
                    lost, error = self.edge.lost_sums(sigma_x, sigma_t, self._tail)
                hit = (whole - lost, error)
            _remember(self._trigger, key, hit)
        return hit

    def _whole_mass(self, sigma_t: float) -> float:
        """``sum_n (1 - exp(-(T - t_n)/sigma_t))`` over the rows (from moments within 1e-10
        where they answer)."""
        hit = self._whole.get(sigma_t)
        if hit is None:
            if self._fine is not None:
                hit = self._fine.trigger_total(self.window_end, sigma_t)
            if hit is None:
                share = -np.expm1((self._tu - self.window_end) / sigma_t)
                hit = float(np.dot(share, self._tcount))
            _remember(self._whole, sigma_t, hit)
        return hit
