"""``hawkes-prep hhs`` end to end: :func:`prepare_hhs` as a sequence of named stages.

Stages (each a function below, timed by :class:`~hawkes_cli.prep.progress.StageClock`): check
the request, load the county geography, read the file, classify the rows, draw the cases and
their times, locate them, and write the events with their metadata. The package docstring
(:mod:`hawkes_cli.prep`) describes what each step does to the data.
"""

from __future__ import annotations

import importlib.util
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..counties import (
    CENSUS_CRS,
    SQ_METRES_PER_SQ_MILE,
    CountyTable,
    file_sha256,
    load_county_table,
    load_polygons,
    plotly_geo_file,
    project_points,
    read_polygon_layer,
    write_polygons,
)
from ..data import HDF5_SUFFIXES, EventData
from ..errors import EventsError, UsageError
from ..geo import PolygonLayer, PolygonSampler
from . import metadata
from .cases import CaseDraw, draw_cases, origin_day
from .classify import RowPlan, classify_rows
from .columns import ID_COLUMNS, match_columns
from .options import HHSOptions, count_columns_for
from .output import dropped_table, write_cases
from .parse import date_of
from .progress import Progress, StageClock
from .read import FacilityColumns, read_facility_columns, read_header

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrepResult:
    """What :func:`prepare_hhs` did (for the CLI summary and the benchmark).

    Attributes
    ----------
    out : str
        The events file written.
    n_events : int
        Events in it.
    attrs : Mapping[str, Any]
        Its metadata.
    seconds : Mapping[str, float]
        Wall time of each stage, seconds.
    """

    out: str
    n_events: int
    attrs: Mapping[str, Any]
    seconds: Mapping[str, float]


@dataclass(frozen=True)
class _Request:
    """The columns to read: ``count_columns`` summed into the week's count (window shifted
    ``shift`` days, meaning ``description``), and every column ``wanted`` from the file."""

    count_columns: tuple[str, ...]
    shift: int
    description: str
    wanted: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class _Geography:
    """The county table, the polygons (``None`` for centroid locations) and the known codes."""

    table: CountyTable
    sampler: PolygonSampler | None
    layer: PolygonLayer | None
    known: np.ndarray


@dataclass(frozen=True, eq=False)
class _Timeline:
    """The kept cases in time order: ``time`` (days since the origin) and ``row``, shape (N,)."""

    time: np.ndarray
    row: np.ndarray
    origin_day: int
    cases: CaseDraw


@dataclass(frozen=True, eq=False)
class _Placement:
    """Case locations and densities, shape (N,) each, and the study region's size.

    ``area`` is in coordinate units squared (NaN if unknown), ``land_area_sq_mi`` in square
    miles; ``crs_label`` names the coordinates.
    """

    x: np.ndarray
    y: np.ndarray
    density: np.ndarray
    area: float
    land_area_sq_mi: float
    crs_label: str


def prepare_hhs(
    source: Path,
    out: Path,
    options: HHSOptions,
    *,
    counties: Path | None = None,
    polygons: Path | None = None,
    key_field: str = "GEOID",
    polygons_out: Path | None = None,
    progress: Progress | None = None,
) -> PrepResult:
    """Turn the HHS facility file into an events file of cases (package docstring: the steps).

    Parameters
    ----------
    source
        The facility CSV (``.csv`` or ``.csv.gz``).
    out
        Events file to write (``.h5`` keeps the metadata and ``/dropped``; ``.csv`` does not).
    options
        See :class:`~hawkes_cli.prep.options.HHSOptions`.
    counties
        County table (default: the shipped ``data/counties.csv``).
    polygons
        County polygon file (default: plotly-geo's 2016 Census counties).
    key_field
        FIPS field of ``polygons``.
    polygons_out
        Also write the polygons used (in the output's coordinates) to this ``.gpkg``/``.shp``.
    progress
        Called with a line of text at each stage.

    Returns
    -------
    PrepResult
        The events file carries the metadata :mod:`hawkes_cli.prep.metadata` lists.

    Raises
    ------
    EventsError
        Unreadable input, missing columns, damaged rows, no case left, unwritable output.
    UsageError
        Bad options.
    """
    source, out = Path(source), Path(out)
    polygons = None if polygons is None else Path(polygons)
    clock = StageClock(progress)
    request = _check_request(source, out, options)
    geography = _load_geography(options, counties, polygons, key_field, clock)
    raw, sha = _read_source(source, request, options.engine, clock)
    plan = _classify(raw, request, options, geography, clock)
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(options.seed).spawn(4)]
    timeline = _draw_timeline(source, raw, plan, options, streams[:3], clock)
    fips = plan.fips[timeline.row]
    placement = _locate(fips, options, geography, streams[3], clock)
    counties_file = _polygon_file(options, polygons, key_field, polygons_out, geography.layer)
    attrs = _metadata(
        source, sha, raw, options, request, plan, timeline, placement, geography, counties_file
    )
    data = EventData(
        time=timeline.time,
        x=placement.x,
        y=placement.y,
        density=placement.density,
        fips=fips,
        attrs=attrs,
        source=str(out),
    )
    write_cases(data, dropped_table(raw.columns, plan.reason), out)
    clock.lap("write", f"wrote {data.n:,} events to {out}")
    return PrepResult(out=str(out), n_events=data.n, attrs=attrs, seconds=dict(clock.seconds))


def _check_request(source: Path, out: Path, options: HHSOptions) -> _Request:
    """Check the output name and the options against the file's header before any work.

    Raises
    ------
    UsageError
        Bad output suffix, count columns the file lacks, ``--engine pyarrow`` without pyarrow.
    EventsError
        Missing output folder; unreadable input or missing identifier columns.
    """
    if not out.name.lower().endswith((".csv", ".csv.gz", *HDF5_SUFFIXES)):
        raise UsageError(f"{out}: the events file must end in .h5, .hdf5, .csv or .csv.gz")
    if not out.parent.is_dir():
        what = "is a file, not a folder" if out.parent.exists() else "does not exist"
        raise EventsError(f"{out}: folder {out.parent} {what}")
    names, shift, description = count_columns_for(options)
    wanted = list(dict.fromkeys([*ID_COLUMNS, *names]))
    header_index = match_columns(source, read_header(source), wanted)  # fail fast
    if "zip" not in header_index:
        log.warning("%s has no 'zip' column: Connecticut planning regions cannot be mapped", source)
        wanted.remove("zip")
    if options.engine == "pyarrow" and importlib.util.find_spec("pyarrow") is None:
        raise UsageError("--engine pyarrow needs pyarrow (pip install pyarrow)")
    return _Request(tuple(names), shift, description, tuple(wanted))


def _load_geography(
    options: HHSOptions,
    counties: Path | None,
    polygons: Path | None,
    key_field: str,
    clock: StageClock,
) -> _Geography:
    """The county table and, for polygon locations, the triangulated county polygons."""
    table = load_county_table(counties)
    if options.locations != "polygon":
        if polygons is not None:
            raise UsageError("--polygons has no use with --locations centroid")
        return _Geography(table=table, sampler=None, layer=None, known=table.fips)
    clock.say("reading and triangulating county polygons")
    sampler, layer = load_polygons(polygons, key_field=key_field, to_crs=options.crs)
    clock.lap("polygons", f"{len(sampler.keys)} county polygons ready")
    return _Geography(table=table, sampler=sampler, layer=layer, known=np.array(sampler.keys))


def _read_source(
    source: Path, request: _Request, engine: str, clock: StageClock
) -> tuple[FacilityColumns, str]:
    """The wanted columns of the facility file, and the file's sha256 (hex)."""
    clock.say(f"reading {source}")
    raw = read_facility_columns(source, request.wanted, engine=engine, progress=clock.say)
    sha = file_sha256(source)
    clock.lap("read", f"read {raw.n_rows:,} rows with {raw.engine} (sha256 {sha[:12]})")
    return raw, sha


def _classify(
    raw: FacilityColumns,
    request: _Request,
    options: HHSOptions,
    geography: _Geography,
    clock: StageClock,
) -> RowPlan:
    """Keep or drop every row (:func:`~hawkes_cli.prep.classify.classify_rows`)."""
    plan = classify_rows(
        raw.columns,
        request.count_columns,
        request.shift,
        options,
        geography.known,
        geography.table.fips,
    )
    clock.lap("classify", f"kept {plan.n_kept:,} rows, dropped " + _dropped_text(plan))
    return plan


def _dropped_text(plan: RowPlan) -> str:
    counts = plan.dropped_counts()
    return ", ".join(f"{k} {v:,}" for k, v in counts.items() if v) or "none"


def _draw_timeline(
    source: Path,
    raw: FacilityColumns,
    plan: RowPlan,
    options: HHSOptions,
    streams: list[np.random.Generator],
    clock: StageClock,
) -> _Timeline:
    """Draw the cases (:func:`~hawkes_cli.prep.cases.draw_cases`) and sort them in time.

    ``streams``: rounding, window overlap, down-sampling + days (+ jitter).

    Raises
    ------
    EventsError
        No case is left.
    """
    cases = draw_cases(plan, options.n, streams)
    if cases.row.size == 0:
        dropped = plan.dropped_counts()
        raise EventsError(
            f"{source}: no case is left ({raw.n_rows:,} rows read; dropped: "
            + (", ".join(f"{k} {v}" for k, v in dropped.items() if v) or "none")
            + "); check the date window, the region and the count columns"
        )
    origin = origin_day(options, plan)
    first = int(cases.day.min())
    if first < origin:  # --origin alone can be later than the first case's day
        raise UsageError(
            f"--origin {date_of(origin)} is after the first case's day {date_of(first)} (a "
            "row's cases are spread over the days of its collection window): times would be "
            f"negative; choose --origin {date_of(first)} or earlier, or also pass --start "
            f"{date_of(origin)} to drop the cases before it"
        )
    t = (cases.day - origin).astype(np.float64)
    if options.jitter:
        t += streams[2].random(t.size)
    order = np.argsort(t, kind="stable")
    clock.lap("expand", f"{cases.counts['cases_in_window']:,} cases expanded, "
              f"{cases.counts['cases_kept']:,} kept")  # fmt: skip
    return _Timeline(time=t[order], row=cases.row[order], origin_day=origin, cases=cases)


def _locate(
    fips: np.ndarray,
    options: HHSOptions,
    geography: _Geography,
    rng: np.random.Generator,
    clock: StageClock,
) -> _Placement:
    """Each case's location (inside its county polygon, or the county centroid) and density."""
    table = geography.table
    region = table.region_mask(options.region)
    sampler = geography.sampler
    if sampler is not None:
        x, y = sampler.sample(sampler.codes(fips), rng)
        in_region = np.isin(np.array(sampler.keys), table.fips[region])
        area = float(sampler.area()[in_region].sum())
        crs_label = sampler.crs
    else:
        x, y, area = _centroids(fips, table, region, options.crs)
        crs_label = CENSUS_CRS
    clock.lap("locate", f"located {fips.size:,} cases ({options.locations})")
    return _Placement(
        x=x,
        y=y,
        density=table.density[table.lookup(fips)],
        area=area,
        land_area_sq_mi=float(table.aland_m2[region].sum() / SQ_METRES_PER_SQ_MILE),
        crs_label=crs_label,
    )


def _centroids(
    fips: np.ndarray, table: CountyTable, region: np.ndarray, crs: str | None
) -> tuple[np.ndarray, np.ndarray, float]:
    """County centroids of the cases (lon/lat, or projected to ``crs``) and the region's area
    (degrees squared; NaN when projected: no polygons, so no area)."""
    idx = table.lookup(fips)
    x, y = table.lon[idx].copy(), table.lat[idx].copy()
    area = float(table.area_deg2[region].sum())
    if crs is not None:
        x, y = project_points(x, y, crs)
        area = math.nan
        log.warning("centroid locations in %s: no polygons, so no area; set data.area", crs)
    return x, y, area


def _polygon_file(
    options: HHSOptions,
    polygons: Path | None,
    key_field: str,
    polygons_out: Path | None,
    layer: PolygonLayer | None,
) -> str | None:
    """Write ``polygons_out`` if asked; the polygon file ``hawkes-run`` should use, if any."""
    if polygons_out is not None:
        if layer is None:
            layer = read_polygon_layer(polygons, key_field=key_field)
        write_polygons(layer, polygons_out)
        return str(Path(polygons_out).resolve())
    if options.locations == "polygon" and options.crs is None:
        return str(plotly_geo_file()) if polygons is None else str(polygons.resolve())
    if options.locations == "polygon":
        log.warning("x/y are in %s: pass --polygons-out FILE.gpkg to keep the projected "
                    "polygons for hawkes-run's location resampling", options.crs)  # fmt: skip
    return None


def _metadata(
    source: Path,
    sha: str,
    raw: FacilityColumns,
    options: HHSOptions,
    request: _Request,
    plan: RowPlan,
    timeline: _Timeline,
    placement: _Placement,
    geography: _Geography,
    counties_file: str | None,
) -> dict[str, Any]:
    """The events' attributes (:mod:`~hawkes_cli.prep.metadata` lists them), group by group."""
    cases = timeline.cases
    return {
        **metadata.time_attrs(timeline.origin_day, cases.day),
        **metadata.space_attrs(
            options, placement.crs_label, placement.area, placement.land_area_sq_mi, counties_file
        ),
        **metadata.source_attrs(source, sha, raw, options, request.description, request.shift),
        **metadata.count_attrs(raw, plan, cases),
        **metadata.provenance_attrs(source, sha, raw, cases, options.seed, geography.table),
    }
