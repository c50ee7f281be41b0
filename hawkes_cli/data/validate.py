"""Checks of parsed event columns with user-facing messages, shared by the CSV and HDF5
readers: every problem is an :class:`~hawkes_cli.errors.EventsError` naming the file, the column
and the first bad row (through a :data:`Locator`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EventsError
from ..vocab import DATA_LIMIT
from .events import EventData
from .formats import FIPS_DTYPE, REQUIRED_COLUMNS

log = logging.getLogger(__name__)

Locator = Callable[[int], str]


def parse_numbers(path: Path, column: str, values: list[str], where: Locator) -> np.ndarray:
    """Text values -> float64 array; the first non-number is an :class:`EventsError`."""
    try:
        return np.array(values, dtype=np.float64)
    except ValueError:
        pass
    for i, text in enumerate(values):
        try:
            float(text)
        except ValueError:
            shown = repr(text) if text.strip() else "an empty value"
            raise EventsError(
                f"{path}: column {column!r}, {where(i)}: {shown} is not a number; "
                f"fix or remove that row"
            ) from None
    raise AssertionError("unreachable: numpy refused a column that float() accepts")


def _check_finite(path: Path, column: str, arr: np.ndarray, where: Locator) -> None:
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        i = int(bad[0])
        raise EventsError(
            f"{path}: column {column!r}, {where(i)}: value {arr[i]} is NaN or infinite "
            f"({bad.size} such row(s)); fix or remove those rows"
        )


def _check_magnitude(path: Path, column: str, arr: np.ndarray, where: Locator) -> None:
    bad = np.flatnonzero(np.abs(arr) > DATA_LIMIT)
    if bad.size:
        i = int(bad[0])
        raise EventsError(
            f"{path}: column {column!r}, {where(i)}: value {arr[i]:g} is beyond +-{DATA_LIMIT:g} "
            f"({bad.size} such row(s)), where the engines' float32 pair terms overflow; use "
            "days, degrees or metres (or rescale the column)"
        )


def normalise_fips(path: Path, texts: list[str], where: Locator) -> np.ndarray:
    """FIPS texts -> ``<U5`` zero-padded codes; anything but 1-5 digits is an error."""
    out = np.empty(len(texts), dtype=FIPS_DTYPE)
    for i, raw in enumerate(texts):
        text = raw.strip()
        if not (1 <= len(text) <= 5 and text.isascii() and text.isdigit()):
            shown = repr(raw) if text else "an empty value"
            raise EventsError(
                f"{path}: column 'fips', {where(i)}: {shown} is not a county FIPS code "
                f"(expected 1-5 digits, e.g. 01001 or 1001); fix that row or drop the fips "
                f"column"
            )
        out[i] = text.zfill(5)
    return out


def parse_events(
    path: Path,
    raw: Mapping[str, Any],
    numbers: Callable[[Path, str, Any, Locator], np.ndarray],
    fips: Callable[[Path, Any, Locator], np.ndarray],
    attrs: dict[str, Any],
    where: Locator,
    need_density: bool,
) -> EventData:
    """The events of one file's raw columns (name -> values as the format stores them), parsed
    by the format's ``numbers`` and ``fips`` readers: the required columns, the density when
    it can be read (its problem kept, an error only where it is needed), the FIPS codes."""
    columns = {c: numbers(path, c, raw[c], where) for c in REQUIRED_COLUMNS}
    density_problem = None
    if "density" in raw:
        try:
            columns["density"] = numbers(path, "density", raw["density"], where)
        except EventsError as exc:
            density_problem = exc.message
    codes = fips(path, raw["fips"], where) if "fips" in raw else None
    return build_events(path, columns, codes, density_problem, attrs, where, need_density)


def build_events(
    path: Path,
    columns: Mapping[str, np.ndarray],
    fips: np.ndarray | None,
    density_problem: str | None,
    attrs: dict[str, Any],
    where: Locator,
    need_density: bool,
) -> EventData:
    """Validate parsed columns (all of length N), sort by time, build the :class:`EventData`."""
    time, x, y = columns["time"], columns["x"], columns["y"]
    for name in REQUIRED_COLUMNS:
        _check_finite(path, name, columns[name], where)
        _check_magnitude(path, name, columns[name], where)
    negative = np.flatnonzero(time < 0)
    if negative.size:
        i = int(negative[0])
        raise EventsError(
            f"{path}: column 'time', {where(i)}: time {time[i]} is negative "
            f"({negative.size} such row(s)); times are counted from the window start 0, so "
            f"shift them (subtract the earliest time) or remove those rows"
        )
    density = columns.get("density")
    if density is not None and density_problem is None:
        ok = np.isfinite(density) & (density >= 1.0 / DATA_LIMIT) & (density <= DATA_LIMIT)
        bad = np.flatnonzero(~ok)
        if bad.size:
            i = int(bad[0])
            density_problem = (
                f"{path}: column 'density', {where(i)}: value {density[i]} is not a positive "
                f"finite density ({bad.size} such row(s)); densities are persons per square "
                f"mile, between {1.0 / DATA_LIMIT:g} and {DATA_LIMIT:g}"
            )
    if density_problem is not None:
        if need_density:
            raise EventsError(density_problem)
        log.warning("%s; density not loaded (only model 2 needs it)", density_problem)
        density = None

    order = np.argsort(time, kind="stable")
    moved = int(np.count_nonzero(order != np.arange(order.size)))
    if moved:
        log.warning(
            "%s: %d of %d rows were not in time order; sorted them by time (stable, no row "
            "dropped)",
            path,
            moved,
            order.size,
        )
        attrs["reordered"] = moved
        time, x, y = time[order], x[order], y[order]
        density = None if density is None else density[order]
        fips = None if fips is None else fips[order]
    return EventData(time=time, x=x, y=y, density=density, fips=fips, attrs=attrs, source=str(path))


def check_count(path: Path, n: int) -> None:
    """Refuse a file of fewer than 2 events."""
    if n < 2:
        raise EventsError(
            f"{path}: has {n} event(s); at least 2 are needed to fit the model — check that "
            f"the right file was given"
        )


def missing_columns(path: Path, found: list[str], need_density: bool, what: str) -> None:
    """Refuse a file lacking a required column (``what``: ``"column"`` or ``"dataset"``)."""
    required = list(REQUIRED_COLUMNS) + (["density"] if need_density else [])
    missing = [c for c in required if c not in found]
    if missing:
        hint = " (model 2 needs the county population density)" if "density" in missing else ""
        raise EventsError(
            f"{path}: missing required {what}(s) {', '.join(repr(m) for m in missing)}{hint}; "
            f"found {', '.join(repr(f) for f in found) or 'none'}; the events file needs "
            f"{', '.join(required)}"
        )
