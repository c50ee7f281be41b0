"""Derived quantities: units of the parameters, ``xi0/(xi0+mu0)``, weeks, county lengthscales.

Each derived quantity is a :class:`Quantity` built from the per-chain arrays of the parameters;
the conversions (degrees to miles at a county's latitude, days to weeks) live here too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import StorageError, UsageError
from .records import County

if TYPE_CHECKING:  # pragma: no cover
    from ..data import EventData

__all__ = [
    "COORD_UNITS",
    "DAYS_PER_WEEK",
    "MILES",
    "MILES_PER_DEGREE",
    "Quantity",
    "coordinate_factor",
    "county",
    "county_factor",
    "is_days",
    "is_lonlat",
    "length_unit",
    "lengthscale",
    "lengthscale_miles",
    "parameters",
    "time_unit_name",
    "weeks",
    "xi0_fraction",
]

MILES_PER_DEGREE = 69.17
"""Miles per degree, the published conversion (times ``cos(latitude)``)."""
MILES, COORD_UNITS = "miles", "coord units"
"""Units of a county lengthscale: lon/lat data, and data in other coordinates."""
DAYS_PER_WEEK = 7.0

_DAY_UNITS = frozenset({"d", "day", "days"})
_WEEK_UNITS = frozenset({"w", "week", "weeks"})
_LONLAT_CRS = frozenset(
    {"lonlat", "latlon", "epsg:4326", "4326", "wgs84", "crs84", "ogc:crs84"}
    | {"epsg:4269", "4269", "nad83"}  # NAD83 lon/lat: the Census county polygons' system
)

Arrays = tuple[np.ndarray, ...]
"""One array per used chain."""


@dataclass(frozen=True, eq=False)
class Quantity:
    """One reported variable: its per-chain draws and how the table names it.

    Attributes
    ----------
    name
        Identifier (also the variable name in exports).
    arrays
        One float64 array per used chain.
    label, unit
        What the table shows and the unit of the values.
    checked
        Whether verdicts look at it.
    scale_of
        ``(parameter, factor)`` when it is a positive constant multiple of a parameter.
    """

    name: str
    arrays: Arrays
    label: str
    unit: str
    checked: bool = False
    scale_of: tuple[str, float] | None = None


# --------------------------------------------------------------------------- conversions


def lengthscale_miles(
    sigma_x: float | np.ndarray,
    model: int,
    latitude: float,
    density: float | None = None,
) -> float | np.ndarray:
    """Effective spatial trigger lengthscale in miles at a county.

    Parameters
    ----------
    sigma_x
        Trigger spatial lengthscale(s) in degrees.
    model
        1: the lengthscale is ``sigma_x``; 2: ``sigma_x / sqrt(density)``.
    latitude
        The county's latitude in degrees.
    density
        The county's population density (persons per square mile); needed for model 2.

    Returns
    -------
    float or numpy.ndarray
        ``lengthscale * cos(latitude * pi/180) * 69.17`` miles, the published conversion.

    Notes
    -----
    The paper's Table 2 numbers are not reproduced by this conversion: they match
    ``sigma_x * 69.17 * (1 + cos(latitude))/2`` for model 1 and ``sigma_x / D`` (not
    ``sqrt(D)``) in place of ``sigma_x`` for model 2. The model's definition (DESIGN section 2,
    ``s_m = sigma_x / sqrt(D_m)``) and the stated conversion are used here.
    """
    return np.asarray(sigma_x, dtype=float) * county_factor(model, latitude, density)


def county_factor(model: int, latitude: float, density: float | None) -> float:
    """Miles per unit of ``sigma_x`` at a latitude (and density, for model 2)."""
    factor = math.cos(latitude * math.pi / 180.0) * MILES_PER_DEGREE
    if model == 2:
        if density is None or not density > 0:
            raise UsageError(
                f"model 2 needs the county's population density to convert sigma_x to miles, got "
                f"{density!r}"
            )
        factor /= math.sqrt(density)
    return factor


def is_days(unit: str) -> bool:
    """Whether a time unit names days."""
    return unit.strip().lower() in _DAY_UNITS


def time_unit_name(unit: str) -> str:
    """The table's name of a time unit: ``days``, ``weeks``, or the unit as given."""
    u = unit.strip().lower()
    if u in _DAY_UNITS:
        return "days"
    if u in _WEEK_UNITS:
        return "weeks"
    return unit


def is_lonlat(crs: str) -> bool:
    """Whether the events' coordinates are lon/lat degrees (an empty crs is taken to be)."""
    return not crs or crs.lower() in _LONLAT_CRS


def length_unit(crs: str) -> str:
    """The unit of a county's effective lengthscale: :data:`MILES` for lon/lat coordinates
    (the published conversion), else :data:`COORD_UNITS` (no conversion: e.g. the synthetic
    grid)."""
    return MILES if is_lonlat(crs) else COORD_UNITS


def coordinate_factor(model: int, density: float | None) -> float:
    """Coordinate units per unit of ``sigma_x``: 1 (model 1) or ``1/sqrt(density)`` (model
    2)."""
    if model != 2:
        return 1.0
    if density is None or not density > 0:
        raise UsageError(
            f"model 2 needs the county's population density for its lengthscale, got {density!r}"
        )
    return 1.0 / math.sqrt(density)


# --------------------------------------------------------------------------- counties


def county(
    fips: str, events: EventData, events_path: Path, model: int, unit: str = MILES
) -> tuple[County, str | None]:
    """A county's latitude, density and lengthscale factor from its events.

    Parameters
    ----------
    unit
        :data:`MILES` (the factor converts degrees at the county's latitude) or
        :data:`COORD_UNITS` (no conversion; :func:`length_unit` of the events' crs says
        which).

    Returns
    -------
    tuple
        The :class:`County` and, in miles when its mean ``y`` is not a latitude (its factor
        is NaN then), why.

    Raises
    ------
    UsageError
        The events have no fips column, none of the county, or (model 2) no densities.
    """
    if events.fips is None:
        raise UsageError(
            f"--county {fips}: the events file {events_path} has no fips column, so county "
            "latitudes and densities are unknown"
        )
    mask = events.fips == fips
    n = int(np.count_nonzero(mask))
    if n == 0:
        present = np.unique(events.fips)
        sample = ", ".join(present[:8].tolist()) + (" ..." if present.size > 8 else "")
        raise UsageError(
            f"--county {fips}: no events with fips {fips} in {events_path} "
            f"({present.size} counties present, e.g. {sample}); check the FIPS code"
        )
    latitude = float(np.mean(events.y[mask]))
    density = float(np.mean(events.density[mask])) if events.density is not None else None
    if model == 2 and density is None:
        raise UsageError(
            f"--county {fips}: model 2 needs population densities, but {events_path} has no "
            "density column"
        )
    if unit == COORD_UNITS:
        return County(fips, latitude, density, n, coordinate_factor(model, density)), None
    note = None
    if not -90.0 <= latitude <= 90.0:
        note = f"county {fips}: mean y {latitude:.6g} is not a latitude in degrees"
    factor = county_factor(model, latitude, density) if note is None else float("nan")
    return County(fips, latitude, density, n, factor), note


# --------------------------------------------------------------------------- quantities


def parameters(
    names: Sequence[str], arrays: Mapping[str, Arrays], time_unit: str, crs: str
) -> list[Quantity]:
    """The model parameters in their natural units (time unit, coordinate units), all checked.

    Raises
    ------
    StorageError
        A draw <= 0, which no chain can hold (every parameter is ``exp`` of the sampled
        log): the chain file is damaged or not a hawkes chain. NaN and inf draws are left to
        the ``nonfinite`` verdict, which names their chain and iteration.
    """
    for name in names:
        for i, chain in enumerate(arrays[name]):
            values = np.asarray(chain)
            bad = np.flatnonzero(values <= 0)  # NaN and inf: the "nonfinite" verdict names them
            if bad.size:
                j = int(bad[0])
                raise StorageError(
                    f"{name} = {float(chain[j])!r} at retained draw {j} of chain file "
                    f"#{i + 1} read ({bad.size} such draw(s)): model parameters are finite "
                    "and > 0, so the file is damaged or was not written by hawkes-run; remove it "
                    "or run that chain again"
                )
    unit_t = time_unit_name(time_unit)
    unit_x = "degrees" if is_lonlat(crs) else "coord units"
    units = {"mu0": "", "tau_t": unit_t, "xi0": "", "sigma_x": unit_x, "sigma_t": unit_t}
    return [Quantity(n, arrays[n], n, units.get(n, ""), checked=True) for n in names]


def xi0_fraction(arrays: Mapping[str, Arrays]) -> list[Quantity]:
    """``xi0/(xi0+mu0)`` (checked), when both parameters are there."""
    if "xi0" not in arrays or "mu0" not in arrays:
        return []
    values = tuple(x / (x + m) for x, m in zip(arrays["xi0"], arrays["mu0"], strict=True))
    return [Quantity("xi0_frac", values, "xi0/(xi0+mu0)", "", checked=True)]


def weeks(arrays: Mapping[str, Arrays], time_unit: str) -> list[Quantity]:
    """``tau_t`` and ``sigma_t`` in weeks, when times are in days."""
    if not is_days(time_unit):
        return []
    return [
        Quantity(
            f"{p}_weeks",
            tuple(a / DAYS_PER_WEEK for a in arrays[p]),
            p,
            "weeks",
            scale_of=(p, 1.0 / DAYS_PER_WEEK),
        )
        for p in ("tau_t", "sigma_t")
        if p in arrays
    ]


def lengthscale(where: County, sigma_x: Arrays, unit: str = MILES) -> Quantity:
    """The effective spatial lengthscale at a county, in ``unit`` (that of its factor)."""
    return Quantity(
        f"lengthscale_{where.fips}",
        tuple(a * where.factor for a in sigma_x),
        f"lengthscale {where.fips}",
        unit,
        scale_of=("sigma_x", where.factor),
    )
