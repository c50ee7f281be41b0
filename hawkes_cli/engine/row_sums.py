"""The per-row sums of one evaluation: ``sum_n log lambda_n`` and the two bounds' sums.

Every evaluation of :class:`~hawkes_cli.engine.base.Likelihood` ends in three sums over this
rank's rows, with ``lambda_n = max(mu0 B_n + xi0 E_n, floor)``::

    sum_n log lambda_n,  sum_n log1p(xi0 omega_n / lambda_n),
    sum_n -log1p(-min(mu0 beta_n / lambda_n, 1))

(the log-likelihood's first term, the truncated trigger's bound, the time lattice's bound;
``omega`` and ``beta`` as :class:`~hawkes_cli.engine.base.Evaluation` says).
:func:`host_sums` computes them with numpy from ``B`` and ``E`` in host memory;
:class:`~hawkes_cli.engine.device_sums.DeviceRowSums` computes the same on the OpenCL device.
"""

from __future__ import annotations

import numpy as np


def host_sums(
    B: np.ndarray,
    beta: np.ndarray | None,
    E: np.ndarray,
    omega: np.ndarray | None,
    mu0: float,
    xi0: float,
    floor: float,
    work: tuple[np.ndarray, np.ndarray],
) -> tuple[float, float, float, np.ndarray]:
    """The three sums with numpy, in two kept buffers ``work`` (each shape (rows,)).

    Returns
    -------
    log_sum, trigger_bound, background_bound : float
        As the module says (a bound 0 where ``omega`` or ``beta`` is None).
    lam : (rows,) float64
        ``lambda_n`` (``work[0]``, valid until the next call).
    """
    # a fresh million-row array per step costs more in page faults than its arithmetic
    lam, tmp = work
    np.multiply(B, mu0, out=lam)
    lam += np.multiply(E, xi0, out=tmp)
    np.maximum(lam, floor, out=lam)
    log_sum = float(np.sum(np.log(lam, out=tmp)))
    # |log max(lam, f) - log max(lam~, f)| <= log1p(xi0 omega / max(lam~, f)), lam >= lam~
    bound = 0.0
    if omega is not None:
        np.multiply(omega, xi0, out=tmp)
        tmp /= lam
        bound = float(np.sum(np.log1p(tmp, out=tmp)))
    # lam - lam~ = mu0 (B - B~), |B - B~| <= beta: |log lam - log lam~| <= -log1p(-r)
    background_bound = 0.0
    if beta is not None:
        r = np.multiply(beta, mu0, out=tmp)
        r /= lam
        np.minimum(r, 1.0, out=r)
        if np.any(r > 0):
            background_bound = float(np.sum(-np.log1p(np.negative(r, out=r), out=r)))
    return log_sum, bound, background_bound, lam
