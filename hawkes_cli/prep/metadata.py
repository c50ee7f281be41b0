"""The metadata of a prepared events file, one group of attributes at a time.

:func:`~hawkes_cli.prep.prepare_hhs` merges the groups in this order; each function here is
pure: it only arranges values the pipeline computed. The keys (HDF5 attributes of ``/events``):

- time (:func:`time_attrs`): ``time_unit`` (``day``), ``origin_date``, ``first_date``,
  ``last_date``;
- space (:func:`space_attrs`): ``crs`` (``lonlat`` or the EPSG code) and ``crs_definition``,
  ``area`` (study region, coordinate units squared) and ``land_area_sq_mi``, ``region``,
  ``counties`` (polygon file for ``hawkes-run``);
- source (:func:`source_attrs`): ``source_file``, ``source_sha256``, ``source_bytes``,
  ``reader``, ``columns`` (the header's spelling of every column read), ``count_kind``,
  ``count_description``, ``window_shift_days``, ``suppressed``, ``options``, ``seed``;
- counts (:func:`count_attrs`): ``rows_read``, ``rows_kept``, ``rows_dropped``, ``rows_zero``,
  ``rows_imputed``, ``values_imputed``, ``dropped`` (reason -> rows), ``dropped_reasons``
  (reason -> sentence), ``fips_repairs``, ``cases_expanded``, ``cases_in_window``,
  ``cases_outside_window``, ``cases_kept``;
- provenance (:func:`provenance_attrs`): ``county_table``, ``county_table_sha256``,
  ``provenance``, ``hawkes_version``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..counties import CENSUS_CRS, CountyTable
from .cases import CaseDraw
from .classify import REASONS, RowPlan
from .options import HHSOptions
from .parse import date_of
from .read import FacilityColumns

Attrs = dict[str, Any]


def time_attrs(origin_day: int, days: np.ndarray) -> Attrs:
    """Time axis: unit, origin, and the first and last case dates (``days``: shape (N,))."""
    return {
        "time_unit": "day",
        "origin_date": date_of(origin_day).isoformat(),
        "first_date": date_of(int(days.min())).isoformat(),
        "last_date": date_of(int(days.max())).isoformat(),
    }


def space_attrs(
    options: HHSOptions,
    crs_label: str,
    area: float,
    land_area_sq_mi: float,
    counties_file: str | None,
) -> Attrs:
    """Coordinates: reference system, study-region area (coordinate units squared; ``None`` if
    unknown) and land area (square miles), region, and the polygon file for ``hawkes-run``."""
    return {
        "crs": "lonlat" if options.crs is None else options.crs,
        "crs_definition": (
            f"{crs_label}: x = longitude, y = latitude, degrees"
            if options.crs is None
            else f"{options.crs} (projected from {CENSUS_CRS})"
        ),
        "area": area if math.isfinite(area) else None,
        "land_area_sq_mi": land_area_sq_mi,
        "region": options.region,
        "counties": counties_file,
    }


def source_attrs(
    source: Path,
    sha: str,
    raw: FacilityColumns,
    options: HHSOptions,
    description: str,
    shift: int,
) -> Attrs:
    """The input file, how it was read, and the options (count, suppression, seed)."""
    return {
        "source_file": str(source.resolve()),
        "source_sha256": sha,
        "source_bytes": source.stat().st_size,
        "reader": raw.engine,
        "columns": dict(raw.names),
        "count_kind": "custom" if options.columns else options.count,
        "count_description": description,
        "window_shift_days": shift,
        "suppressed": "drop" if options.suppressed is None else options.suppressed,
        "options": options.as_dict(),
        "seed": options.seed,
    }


def count_attrs(raw: FacilityColumns, plan: RowPlan, cases: CaseDraw) -> Attrs:
    """Rows read, kept, dropped (per reason), imputed and repaired; cases expanded and kept."""
    kept = plan.reason == 0
    return {
        "rows_read": raw.n_rows,
        "rows_kept": plan.n_kept,
        "rows_dropped": raw.n_rows - plan.n_kept,
        "rows_zero": int(np.count_nonzero(kept & (plan.total == 0))),
        "rows_imputed": int(np.count_nonzero(kept & (plan.imputed > 0))),
        "values_imputed": int(plan.imputed[kept].sum()),
        "dropped": plan.dropped_counts(),
        "dropped_reasons": {r.key: r.label for r in REASONS},
        "fips_repairs": plan.repairs,
        **cases.counts,
    }


def provenance_attrs(
    source: Path, sha: str, raw: FacilityColumns, cases: CaseDraw, seed: int, table: CountyTable
) -> Attrs:
    """The county table used, a one-line provenance, and the package version."""
    return {
        "county_table": table.source,
        "county_table_sha256": dict(table.provenance).get("table_sha256"),
        "provenance": (
            f"hawkes-prep hhs {__version__}: {source.name} (sha256 {sha[:16]}), "
            f"{raw.n_rows} rows -> {cases.counts['cases_kept']} cases, seed {seed}"
        ),
        "hawkes_version": __version__,
    }
