"""The compensator's edge sums on the OpenCL device: what the rows lose outside the region.

With ``edge: censored`` the compensator's trigger part is the whole mass less ``sum_n s_n (1 -
M_n)``, ``s_n = 1 - exp(-(T - t_n) / sigma_t)``, with ``M_n`` each row's cubic between the
masses at the lattice points around its lengthscale (:mod:`.edge_mass`). Where the masses are
read on the device (:meth:`.DeviceGroupedMass.masses_on_device`) they stay there, and
:class:`DeviceEdgeLost` computes that sum and its error scale's, ``sum_n s_n e_n``, with the
kernel ``edge_lost`` (``kernels/hawkes.cl``, float64): a move of ``sigma_x`` or ``sigma_t``
sends two numbers and reads back a few thousand partial sums, instead of bringing each lattice
point's masses back, building each row's cubic and summing over a million rows on the host.
The rows the host computes (per-event rows, a few) it adds itself. The kernel's cubic is the
host's (:class:`~.edge_mass._LostCubics`) by Lagrange weights instead of power coefficients:
the sums agree with the host's to float64 rounding (``tests/test_device_stages.py``), and are
the same on every call with the same inputs on the same device (a fixed number of lanes, each
summed in row order, the lanes added by numpy).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .device import DeviceEvents
from .launch import EdgeLostArgs, kernel
from .region import FIELD_ERROR
from .region_groups_device import DeviceMasses

#: Lanes of the sums (each sums every ``LANES``-th row; the host adds the lanes): as
#: :data:`~.device_sums.LANES`.
LANES = 16384


class DeviceEdgeLost:
    """``sum_n s_n (1 - M_n)`` and ``sum_n s_n e_n`` over masses left on the device.

    Parameters
    ----------
    events
        The events on the device (its queue and ``hawkes.cl`` program).
    offset : (rows,) float64 or None
        Model 2's rows' offsets of their lengthscales above their snaps, in lattice steps
        (:func:`~.edge_mass._snap`), uploaded once; None: model 1.
    interpolation_error
        The cubic's error bound per event (:data:`~.edge_mass.MASS_INTERPOLATION_ERROR`).
    """

    def __init__(
        self, events: DeviceEvents, offset: np.ndarray | None, interpolation_error: float
    ) -> None:
        self._events = events
        self._kernel = kernel(events.program(), "edge_lost")
        self._offset = events.upload(np.zeros(1) if offset is None else offset)
        self._has_offset = offset is not None
        self._interpolation_error = interpolation_error
        self._tail: tuple[np.ndarray | None, Any] = (None, None)
        self._out: tuple[int, Any] = (0, None)

    def sums(
        self, got: DeviceMasses, shift: float, sigma_t: float, tail: np.ndarray
    ) -> tuple[float, float]:
        """``(sum s (1 - M), sum s e)`` over the device's rows of ``got`` (those of
        ``got.host_rows`` count 0 here).

        Parameters
        ----------
        got
            The masses at the stencil's lattice points, on the device.
        shift
            Each row's position above the stencil's first point less one, less its offset
            (:meth:`~.edge_mass._LostCubics.mass`'s ``shift``), lattice steps.
        sigma_t
            The trigger's time scale (time units).
        tail : (rows,) float64
            Each row's time less the window's end (time units, <= 0): uploaded when a new
            array comes (recognised by identity).
        """
        k = got.rows.size
        if k == 0:
            return 0.0, 0.0
        if self._tail[0] is not tail:
            self._tail = (tail, self._events.upload(np.ascontiguousarray(tail, np.float64)))
        lanes = min(LANES, k)
        if self._out[0] < lanes:
            self._out = (lanes, self._events.output(2 * 8 * lanes))
        args = EdgeLostArgs(
            k, lanes, got.points, got.pick, got.mass, self._offset, int(self._has_offset),
            shift, self._tail[1], sigma_t, FIELD_ERROR, self._interpolation_error,
            self._out[1],
        )  # fmt: skip
        self._kernel(self._events.queue, (lanes,), None, args)
        partial = np.empty(2 * lanes)
        self._events.read(partial, self._out[1])
        parts = partial.reshape(2, lanes).sum(axis=1)
        return float(parts[0]), float(parts[1])
