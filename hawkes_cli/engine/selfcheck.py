"""Can this OpenCL device be trusted? Every kernel against the float64 reference, per device.

``hawkes-run devices --check`` runs :func:`check_device` on each device: it builds both
programs in both precisions, evaluates B and E of both models with the exact kernels and the
truncated ones (row blocks, ring cells, expansion boxes: :func:`check_events` is made so that
all of them are used), each also with per-source amplitudes (``model.edge: renormalized``'s
scaled kernels, :func:`check_amplitude`), and compares every row with the numpy float64 reference
(:class:`~hawkes_cli.engine.reference.ReferenceBackend`). A user on a new cluster learns in a
minute whether its GPU computes what the CPU does; the truncated engine also checks a sample
of rows on its device whenever its cut-off or grid changes
(:class:`~hawkes_cli.engine.rowcheck.RowCheck`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import HawkesError
from ..model import Params
from ..vocab import PRECISIONS
from .base import LAMBDA_FLOOR
from .times import TimeStructure

log = logging.getLogger(__name__)

#: Parameters of the check: lengthscales at which the built-in data's city spans several
#: expansion boxes, the rest spreads over ring and far cells, and 8 sigma_t row blocks cut the
#: 60 days into several blocks per cell.
CHECK_PARAMS = Params(mu0=0.4, tau_t=20.0, xi0=0.6, sigma_x=0.05, sigma_t=10.0)
#: Cut-off exponent of the truncated cases (small, so that much is bounded, not summed).
CHECK_KAPPA = 12.0
#: Events of the built-in data (an interpreter such as Oclgrind takes about a minute).
CHECK_EVENTS = 1500
#: Study area of the built-in data (square degrees; only B's constant depends on it).
CHECK_AREA = 1150.0
#: Allowed relative difference of a row from the float64 reference: rounding of the working
#: precision (float32 terms ~6e-8 each, rows accumulated in float64; measured <= 1e-6).
CHECK_ROUNDING = {"float32": 1e-4, "float64": 1e-9}
#: Absolute allowance: differences below the intensity floor (a float32 row of terms far
#: below 2^-186 underflows to 0) cannot change a log-likelihood.
_TINY = LAMBDA_FLOOR


def check_events(n: int = CHECK_EVENTS, seed: int = 11):
    """The check's built-in events, sorted by time: ``(t, x, y, density)``, each (n,) float64.

    Two thirds in one city (sd 0.05 degrees, one density: its boxes hold far more than the
    expansion threshold), the rest spread over 5 degrees with densities 0.04 to 70,000 (many
    density levels, ring and far cells), on whole days over 60 days (ties, several row blocks).
    """
    rng = np.random.default_rng(seed)
    k = 2 * n // 3
    t = np.sort(np.floor(rng.uniform(0, 60.0, n)))
    city = rng.permutation(n) < k
    x = np.where(city, -90 + rng.normal(0, 0.05, n), rng.uniform(-92.5, -87.5, n))
    y = np.where(city, 40 + rng.normal(0, 0.05, n), rng.uniform(37.5, 42.5, n))
    d = np.where(city, 0.5, np.exp(rng.uniform(np.log(0.04), np.log(70000.0), n)))
    return t, x, y, d


def check_amplitude(n: int) -> np.ndarray:
    """Per-source amplitudes of the check (the scaled kernels of ``model.edge:
    renormalized``): any values in [1, 3), shape (n,), float64."""
    return 2.0 + np.sin(np.arange(n, dtype=np.float64))


@dataclass(frozen=True)
class CaseResult:
    """One (model, precision, engine) case on one device.

    Attributes
    ----------
    name : str
        E.g. ``"model 2 float32 truncated"``.
    ok : bool
    worst : float
        Largest violation found, relative to the row's exact value (0 when within).
    detail : str
        What was compared, or what went wrong.
    """

    name: str
    ok: bool
    worst: float
    detail: str


@dataclass(frozen=True)
class DeviceReport:
    """Everything :func:`check_device` found on one device."""

    ident: str
    name: str
    platform: str
    kind: str
    seconds: float
    cases: tuple[CaseResult, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """Whether every case passed (and there was at least one)."""
        return bool(self.cases) and all(c.ok for c in self.cases)


def relative_excess(got: np.ndarray, want: np.ndarray, rounding: float) -> float:
    """Largest ``|got - want| - rounding |want|`` relative to ``|want|`` (0 if none); inf for
    non-finite values."""
    if not (np.all(np.isfinite(got)) and np.all(np.isfinite(want))):
        return float("inf")
    excess = np.abs(got - want) - rounding * np.abs(want) - _TINY
    return float(max(0.0, np.max(excess / np.maximum(np.abs(want), _TINY), initial=0.0)))


def truncated_excess(e: np.ndarray, omega: np.ndarray, e0: np.ndarray, rounding: float) -> float:
    """Largest violation of ``e0 - omega - r e0 <= e <= e0 (1 + r)`` relative to ``e0``."""
    if not (np.all(np.isfinite(e)) and np.all(np.isfinite(omega)) and np.all(omega >= 0)):
        return float("inf")
    below = e0 - omega - rounding * e0 - e - _TINY
    above = e - e0 * (1.0 + rounding) - _TINY
    worst = np.maximum(below, above) / np.maximum(e0, _TINY)
    return float(max(0.0, np.max(worst, initial=0.0)))


def check_device(spec: str, n: int = CHECK_EVENTS) -> DeviceReport:
    """Run every case on the device ``spec`` (``"P:D"`` or any form of
    :func:`hawkes_cli.kernels.select_device`) against the float64 reference.

    Cases: models 1 and 2, float32 and float64, the exact kernels (B and E of every row within
    :data:`CHECK_ROUNDING` of the reference) and the truncated ones at :data:`CHECK_KAPPA`
    (``E~`` within its bound ``omega`` of the reference, and the engine's own sample
    self-check passing); E of each also with the amplitudes of :func:`check_amplitude`. A
    case that cannot build or run fails with the reason.

    Raises
    ------
    hawkes_cli.errors.DeviceError
        ``spec`` matches no device.
    """
    from .device import Device, DeviceEvents
    from .reference import ReferenceBackend

    start = time.perf_counter()
    device = Device.select(spec)
    info = device.info
    t, x, y, d = check_events(n)
    amplitude = check_amplitude(t.size)
    times = TimeStructure.from_times(t)
    p = CHECK_PARAMS
    cases: list[CaseResult] = []
    for model in (1, 2):
        density = d if model == 2 else None
        ref = ReferenceBackend(t, x, y, density, model=model, area=CHECK_AREA, times=times)
        e0, b0 = ref.trigger(p.sigma_x, p.sigma_t), ref.background(p.tau_t)
        ref.set_amplitude(amplitude)
        refs = (e0, b0, ref.trigger(p.sigma_x, p.sigma_t))
        for precision in PRECISIONS:
            r = CHECK_ROUNDING[precision]
            for engine in ("exact", "truncated"):
                name = f"model {model} {precision} {engine}"
                try:
                    events = DeviceEvents(
                        device, t, x, y, density, precision=precision, times=times
                    )
                    worst, detail = _case(events, engine, model, r, amplitude, refs)
                except HawkesError as exc:
                    cases.append(CaseResult(name, False, float("inf"), str(exc)))
                    continue
                except Exception as exc:  # a driver's own failure is this device's verdict
                    log.debug("check of %s on %s failed", name, info.ident, exc_info=True)
                    cases.append(
                        CaseResult(name, False, float("inf"), f"{type(exc).__name__}: {exc}")
                    )
                    continue
                cases.append(CaseResult(name, worst == 0.0, worst, detail))
    return DeviceReport(
        ident=info.ident,
        name=info.name,
        platform=info.platform,
        kind="simulator" if info.simulator else info.kind,
        seconds=time.perf_counter() - start,
        cases=tuple(cases),
    )


def _case(
    events: Any,
    engine: str,
    model: int,
    rounding: float,
    amplitude: np.ndarray,
    refs: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> tuple[float, str]:
    """One case of :func:`check_device` on ``events`` (a ``DeviceEvents``): ``(worst,
    detail)``; ``refs`` are the reference's E, B and E with ``amplitude``."""
    from .opencl import OpenCLBackend
    from .truncated import TruncatedBackend

    p, (e0, b0, e0_scaled) = CHECK_PARAMS, refs
    common = {"model": model, "area": CHECK_AREA}
    if engine == "exact":
        be = OpenCLBackend(events, **common)
        e = be.trigger(p.sigma_x, p.sigma_t)
        be.set_amplitude(amplitude)
        worst = max(
            relative_excess(e, e0, rounding),
            relative_excess(be.background(p.tau_t), b0, rounding),
            relative_excess(be.trigger(p.sigma_x, p.sigma_t), e0_scaled, rounding),
        )
        return worst, "B and E of every row, E also with amplitudes"
    tr = TruncatedBackend(events, kappa=CHECK_KAPPA, **common)
    e, omega = tr.trigger_bounded(p.sigma_x, p.sigma_t)
    tr.set_amplitude(amplitude)
    scaled, scaled_omega = tr.trigger_bounded(p.sigma_x, p.sigma_t)
    if tr.check_failure:
        return float("inf"), tr.check_failure
    worst = max(
        truncated_excess(e, omega, e0, rounding),
        truncated_excess(scaled, scaled_omega, e0_scaled, rounding),
    )
    return worst, f"E~ within its bound, also with amplitudes ({tr.trigger_path})"
