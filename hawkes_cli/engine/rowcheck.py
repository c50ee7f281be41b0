"""The truncated engine's check of its own device: a sample of rows against the exact kernel.

A device that computes the truncated kernels wrongly cannot be caught by their bound (the same
code computes it). :class:`RowCheck` compares :data:`SELF_CHECK_ROWS` random rows of a truncated
pass with the exact pair sum of those rows on the same device
(:meth:`~hawkes_cli.engine.opencl.OpenCLBackend.trigger_at`), once per new cut-off, grid index
or set of row blocks (:meth:`RowCheck.after_pass`). Its random numbers are its own: it never
touches a chain's.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Hashable

import numpy as np

from .base import LAMBDA_FLOOR
from .opencl import OpenCLBackend

log = logging.getLogger(__name__)

#: Rows of each self-check: 64 x N pairs on the device.
SELF_CHECK_ROWS = 64
#: Working-precision rounding allowed between the truncated and the exact kernel, relative to
#: the exact row: both round every term (float32 ~6e-8 per term, rows accumulated in float64
#: every 512 terms; measured at most 1e-6 in float32 and 1e-13 in float64), so a hundred
#: times that is no false alarm, and a wrong kernel (a missing cell, wrong moments, garbage
#: lanes) is off by far more.
SELF_CHECK_ROUNDING = {"float32": 1e-4, "float64": 1e-9}
_SEED = 0x5E1F  # the check's own stream: it never touches a chain's random numbers
_KEYS = 8  # passes remembered as checked


class RowCheck:
    """Self-checks of the truncated passes of one backend's rows.

    Parameters
    ----------
    exact
        The exact backend on the same device and rows.
    model
        1 or 2 (named in the failure).

    Attributes
    ----------
    count : int
        Checks run so far (each draws its rows from its own seed ``(0x5E1F, count)``).
    """

    def __init__(self, exact: OpenCLBackend, model: int) -> None:
        self.exact = exact
        self.model = model
        self.count = 0
        self._checked: OrderedDict[Hashable, None] = OrderedDict()

    def after_pass(
        self, key: Hashable, e: np.ndarray, omega: np.ndarray, sigma_x: float, sigma_t: float
    ) -> str | None:
        """:meth:`check` a pass the first time its ``key`` (cut-off, grid index, row blocks)
        comes (the last few keys are remembered); None when it was checked before."""
        if key in self._checked:
            self._checked.move_to_end(key)
            return None
        failure = self.check(e, omega, sigma_x, sigma_t)
        self._checked[key] = None
        while len(self._checked) > _KEYS:
            self._checked.popitem(last=False)
        return failure

    def check(self, e: np.ndarray, omega: np.ndarray, sigma_x: float, sigma_t: float) -> str | None:
        """Compare a random sample of the rows of a truncated pass with the exact pair sum on
        the same device.

        :data:`SELF_CHECK_ROWS` rows: each must satisfy ``E - omega - r E <= E~ <= E (1 + r)``
        with ``r`` the working precision's :data:`SELF_CHECK_ROUNDING`, and be finite.

        Parameters
        ----------
        e, omega : (rows,) float64
            ``E~`` and its bound from the truncated pass at these lengthscales.
        sigma_x, sigma_t
            The lengthscales of that pass.

        Returns
        -------
        str or None
            What failed (logged as an error), or None.
        """
        ex = self.exact
        nrows = ex.row_stop - ex.row_start
        rng = np.random.default_rng([_SEED, self.count])
        self.count += 1
        pick = np.sort(rng.choice(nrows, size=min(SELF_CHECK_ROWS, nrows), replace=False))
        exact = ex.trigger_at(pick + ex.row_start, sigma_x, sigma_t)
        got, bound = e[pick], omega[pick]
        r = SELF_CHECK_ROUNDING[ex.precision]
        below = exact - bound - r * exact - got  # > 0: more omitted than the bound allows
        above = got - exact * (1.0 + r)  # > 0: more than the whole sum
        finite = np.isfinite(got) & np.isfinite(bound) & np.isfinite(exact)
        bad = ~finite | (below > LAMBDA_FLOOR) | (above > LAMBDA_FLOOR)
        if not bad.any():
            log.debug("self-check: %d rows within their bounds", pick.size)
            return None
        k = int(np.argmax(bad))
        info = ex.device_info
        failure = (
            f"OpenCL device {info.ident} {info.name!r} ({info.platform}) computes the truncated "
            f"trigger wrongly: {int(bad.sum())} of {pick.size} sampled rows disagree with the "
            f"exact pair sum on the same device beyond their bound (row "
            f"{int(pick[k]) + ex.row_start}: truncated {got[k]:.6g}, exact {exact[k]:.6g}, "
            f"bound {bound[k]:.3g}; {ex.precision}, model {self.model}). Its numbers cannot be "
            "trusted: set engine.tolerance: 0 (the exact kernels) or choose another device "
            "(engine.device; `hawkes-run devices --check` tests each device)"
        )
        log.error("%s", failure)
        return failure
