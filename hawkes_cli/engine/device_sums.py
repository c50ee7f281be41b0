"""The per-row sums of one evaluation (:mod:`.row_sums`) on the OpenCL device.

:class:`DeviceRowSums` computes them with the kernel ``row_sums`` of ``hawkes.cl`` (float64)
from the background's time lattice (:mod:`.binned`): a move of ``mu0``, ``tau_t`` or ``xi0``
then sends a few lattice arrays up and reads back a few thousand partial sums, instead of
building ``B`` and summing a million rows on the host; ``E`` and ``omega`` go up once per
trigger pass, unless the pass left them on the device (``resident``:
:meth:`~.truncated.TruncatedBackend.resident`). With ``model.edge: renormalized`` a fourth
sum is its edge error, ``sum_n (xi0 E_n / lambda_n) e_n / M_n`` (``e_n / M_n`` up once per
``sigma_x``). Its log is the kernels' own (``log_f64``, within 2 ulp of numpy's): the sums
agree with :func:`~hawkes_cli.engine.row_sums.host_sums` (and numpy's edge error) to float64
rounding, and are the same on every call with the same inputs on the same device (a fixed
number of lanes, each summed in row order, the lanes added by numpy).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from . import profile
from .binned import BinnedBackground, LatticePass
from .launch import RowSumsArgs, kernel

#: Lanes of the device sums (each sums every ``LANES``-th row; the host adds the lanes): wide
#: enough to fill a GPU, few enough that reading them back costs microseconds.
LANES = 16384
#: Trigger results (E, omega) and lattice passes kept on the device: the chain's current state
#: and a proposal's.
KEPT = 2
#: Sums per lane: log lambda, the trigger's bound, the lattice's bound, the edge error's.
SUMS = 4


class DeviceRowSums:
    """The per-row sums of this rank's rows on an OpenCL device, ``B`` from its time lattice.

    Parameters
    ----------
    events : hawkes_cli.engine.device.DeviceEvents
        The backend's events (its device, queue and ``hawkes.cl`` program).
    lattice : BinnedBackground
        This rank's rows' background on a time lattice.
    resident : callable, optional
        ``resident(trigger)``: the device buffers ``(E, omega)`` that still hold a stacked
        trigger pass, or None (then it is uploaded).

    Attributes
    ----------
    rows : int
        This rank's rows.
    lanes : int
        Partial sums per quantity (``min(LANES, rows)``, at least 1).
    """

    def __init__(
        self,
        events: Any,
        lattice: BinnedBackground,
        resident: Callable[[np.ndarray], tuple[Any, Any] | None] | None = None,
    ) -> None:
        self._events = events
        self._resident = resident
        self._lattice = lattice
        self._kernel = kernel(events.program(), "row_sums")
        self.rows = lattice.row_stop - lattice.row_start
        self.lanes = max(1, min(LANES, self.rows))
        self._out = events.output(SUMS * self.lanes * 8)
        self._partial = np.empty(SUMS * self.lanes)
        self._empty = events.upload(np.zeros(1))
        self._levels: OrderedDict[int, tuple[Any, ...]] = OrderedDict()
        self._passes: OrderedDict[int, tuple[LatticePass, Any, Any, Any]] = OrderedDict()
        self._triggers: OrderedDict[int, tuple[np.ndarray, Any, Any]] = OrderedDict()
        self._rel: tuple[np.ndarray, Any] | None = None

    def sums(
        self,
        lp: LatticePass,
        trigger: np.ndarray,
        mu0: float,
        xi0: float,
        floor: float,
        rel: np.ndarray | None = None,
    ) -> tuple[float, float, float, float]:
        """``(log_sum, trigger_bound, background_bound, edge_sum)`` of the rows: the first three
        as :func:`~hawkes_cli.engine.row_sums.host_sums` computes them, ``edge_sum = sum_n (xi0
        E_n / lambda_n) rel_n`` (0 without ``rel``).

        Parameters
        ----------
        lp
            The background's lattice pass at this ``tau_t``
            (:meth:`BinnedBackground.lattice_pass`).
        trigger : (rows,) or (2, rows) float64
            ``E``, or ``E`` and its bound ``omega`` stacked (a truncated trigger): the
            likelihood's cached pass, read-only. Each new one is uploaded once (recognised by
            identity; the last :data:`KEPT` stay on the device).
        mu0, xi0, floor
            Background and trigger amplitudes; the floor of ``lambda``.
        rel : (rows,) float64, optional
            ``renormalized``: each row's relative mass error ``e_n / M_n`` at this
            ``sigma_x`` (uploaded when a new array comes).
        """
        cell, frac, extra, tq = self._level(lp.exponent)
        conv, bu, bv = self._pass(lp)
        e, om = self._trigger(trigger)
        if rel is not None and (self._rel is None or self._rel[0] is not rel):
            self._rel = (rel, self._events.upload(np.ascontiguousarray(rel)))
        buf_rel = self._empty if rel is None else self._rel[1]
        args = RowSumsArgs(
            cell, frac, extra, tq, conv, bu, bv, e, om, buf_rel, self.rows, self.lanes,
            int(lp.exact), int(trigger.ndim == 2), int(rel is not None), lp.shift, lp.norm,
            lp.g1, lp.m0, lp.scale, mu0, xi0, floor, self._out,
        )  # fmt: skip
        self._kernel(self._events.queue, (self.lanes,), None, args)
        self._events.read(self._partial, self._out)
        parts = self._partial.reshape(SUMS, self.lanes).sum(axis=1)
        return float(parts[0]), float(parts[1]), float(parts[2]), float(parts[3])

    def _level(self, exponent: int) -> tuple[Any, ...]:
        """The rows' cells, fractions, ``extra`` and ``tq`` on a lattice, uploaded once."""
        hit = self._levels.pop(exponent, None)
        if hit is None:
            with profile.stage("row sums upload"):
                lv = self._lattice.level(exponent)
                up = self._events.upload
                hit = (
                    up(lv.cell.astype(np.int32)), up(lv.b), up(lv.extra), up(lv.tq),
                )  # fmt: skip
        self._levels[exponent] = hit
        while len(self._levels) > KEPT:
            self._levels.popitem(last=False)
        return hit

    def _pass(self, lp: LatticePass) -> tuple[Any, Any, Any]:
        """A lattice pass's arrays on the device (kept while its record is among the last)."""
        hit = self._passes.pop(id(lp), None)
        if hit is None or hit[0] is not lp:
            up = self._events.upload
            hit = (lp, up(lp.conv), up(lp.u), up(lp.v))
        self._passes[id(lp)] = hit
        while len(self._passes) > KEPT:
            self._passes.popitem(last=False)
        return hit[1], hit[2], hit[3]

    def _trigger(self, trigger: np.ndarray) -> tuple[Any, Any]:
        """``E`` and ``omega`` on the device: where the pass left them, else uploaded once per
        pass (kept by identity)."""
        if self._resident is not None and trigger.ndim == 2:
            found = self._resident(trigger)
            if found is not None:  # not kept here: the pass's buffers are reused
                return found
        hit = self._triggers.pop(id(trigger), None)
        if hit is None or hit[0] is not trigger:
            up = self._events.upload
            if trigger.ndim == 2:
                e, om = up(trigger[0]), up(trigger[1])
            else:
                e, om = up(trigger), self._empty
            hit = (trigger, e, om)
        self._triggers[id(trigger)] = hit
        while len(self._triggers) > KEPT:
            self._triggers.popitem(last=False)
        return hit[1], hit[2]
