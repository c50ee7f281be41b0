"""``hawkes-prep``: event files from a simulation, the county table, the HHS hospital file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..errors import UsageError
from ..vocab import (
    COUNTS,
    CSV_READERS,
    GEOGRAPHIES,
    LAND_UNITS,
    LOCATIONS,
    REGION_NAMES,
    SIMULATE_EDGES,
)
from .options import (
    CONTEXT_SETTINGS,
    model_option,
    param_option,
    setup_logging,
    verbose_option,
    version_option,
)

#: True parameters of ``simulate`` that ``--param`` does not set.
_SIMULATE_PARAMS = {"mu0": "0.5", "tau_t": "30", "xi0": "0.5", "sigma_x": "0.2", "sigma_t": "5"}


@click.group(context_settings=CONTEXT_SETTINGS)
@version_option
@verbose_option
def prep(verbose: int) -> None:
    """Prepare event files: county table, HHS hospital file -> cases, simulated events."""
    setup_logging(verbose)


@prep.command("simulate")
@click.option(
    "--out",
    "out",
    type=click.Path(path_type=Path),
    required=True,
    help="Events file to write (.h5 keeps the metadata; .csv does not).",
)
@model_option()
@param_option(
    "True parameters; defaults: "
    + " ".join(f"{name}={value}" for name, value in _SIMULATE_PARAMS.items())
    + "."
)
@click.option(
    "--n-background",
    type=int,
    default=1000,
    show_default=True,
    help="Number of background events (exactly this many).",
)
@click.option(
    "--t-end", type=float, default=365.0, show_default=True, help="End of the time window (days)."
)
@click.option(
    "--bounds",
    type=float,
    nargs=4,
    default=(0.0, 10.0, 0.0, 10.0),
    show_default=True,
    metavar="X0 X1 Y0 Y1",
    help="Rectangle of the study region.",
)
@click.option(
    "--grid",
    type=int,
    nargs=2,
    default=None,
    metavar="NX NY",
    help="Grid of square synthetic counties with densities (needed for model 2).",
)
@click.option(
    "--density-range",
    type=float,
    nargs=2,
    default=(0.04, 70000.0),
    show_default=True,
    metavar="LOW HIGH",
    help="Log-uniform range of the grid's densities.",
)
@click.option("--integer-days", is_flag=True, help="Floor times to whole days (ties).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--geography",
    type=click.Choice(GEOGRAPHIES),
    default="rectangle",
    show_default=True,
    help="rectangle: --bounds (and --grid); us: the lower 48 states + DC in lon/lat degrees, "
    "background cases in counties by population, uniform in the county polygon, sigma_x in "
    "degrees (reads the Census polygons, ~10 s).",
)
@click.option(
    "--uniform-background",
    is_flag=True,
    help="With --geography us: background cases uniform on the land (counties by area), as the "
    "model's background is, instead of by population.",
)
@click.option(
    "--edge",
    type=click.Choice(SIMULATE_EDGES),
    default="censored",
    show_default=True,
    help="A child displaced outside the region (rectangle or land): censored drops it "
    "(unobserved, no children); renormalized redraws its displacement until it lands inside.",
)
def simulate_cmd(
    out: Path,
    model: str,
    params: tuple[str, ...],
    n_background: int,
    t_end: float,
    bounds: tuple[float, float, float, float],
    grid: tuple[int, int] | None,
    density_range: tuple[float, float],
    integer_days: bool,
    seed: int,
    geography: str,
    uniform_background: bool,
    edge: str,
) -> None:
    """Simulate events from the model (branching representation) into an events file."""
    from ..data import save_events
    from ..engine.base import out_of_range
    from ..model import parse_param_items
    from ..rundir import refuse_output
    from ..simulate import CountyMap, DensityGrid, simulate

    refuse_output(out, "the events", folder=False)

    given = {item.partition("=")[0].strip() for item in params}
    items = [*params, *(f"{k}={v}" for k, v in _SIMULATE_PARAMS.items() if k not in given)]
    p = parse_param_items(items)
    why = out_of_range(p)
    if why is not None:  # a file of such parameters is one no engine could fit
        raise UsageError(f"{why.partition(';')[0]}; choose a value inside it")
    region: dict[str, Any] = {}
    if geography == "us":
        ctx = click.get_current_context()
        named = [
            f"--{name.replace('_', '-')}"
            for name in ("bounds", "grid", "density_range")
            if ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT
        ]
        if named:
            raise UsageError(
                f"{', '.join(named)} {'describes' if len(named) == 1 else 'describe'} the "
                "rectangle; with --geography us the region is "
                "the lower 48 states + DC and densities come from the county table: leave "
                f"{'it' if len(named) == 1 else 'them'} out"
            )
        click.echo("reading and triangulating the county polygons (~10 s)", err=True)
        region["counties"] = CountyMap.conus(uniform=uniform_background)
    else:
        if uniform_background:
            raise UsageError("--uniform-background is for --geography us; leave it out")
        if model == "2" and grid is None:
            grid = (10, 10)
        region["bounds"] = tuple(bounds)
        if grid is not None:
            region["grid"] = DensityGrid.log_uniform(
                tuple(bounds), grid[0], grid[1], density_range[0], density_range[1], seed
            )
    data = simulate(
        p,
        model=int(model),
        n_background=n_background,
        t_end=t_end,
        seed=seed,
        integer_days=integer_days,
        edge=edge,
        **region,
    )
    save_events(data, out)
    a = data.attrs
    click.echo(f"wrote {data.n} events to {out} (area {a.get('area')})")
    if geography == "us" or edge != "censored":
        click.echo(
            f"  {a['n_background']} background, {a['n_offspring']} offspring; children "
            f"dropped: {a['n_discarded_time']} late, {a['n_discarded_space']} outside; "
            f"{a['n_redrawn']} redrawn ({a['n_redraws']} draws)"
        )


def _prep_progress(quiet: bool) -> Callable[[str], None] | None:
    return None if quiet else (lambda msg: click.echo(msg, err=True))


@prep.command("counties")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="County table to write (default: the shipped data/counties.csv).",
)
@click.option(
    "--polygons",
    type=click.Path(path_type=Path),
    default=None,
    help="County shapefile/GeoPackage in lon/lat (default: plotly-geo's 2016 Census counties).",
)
@click.option("--key-field", default="GEOID", show_default=True, help="Field with the FIPS code.")
@click.option("--name-field", default="NAME", show_default=True, help="Field with the name.")
@click.option("--land-field", default="ALAND", show_default=True, help="Field with land area.")
@click.option(
    "--land-units",
    type=click.Choice(LAND_UNITS),
    default="m2",
    show_default=True,
    help="Units of --land-field (ALAND: m2; CENSUSAREA: sqmi).",
)
@click.option("--encoding", default=None, help="Attribute encoding if the file does not say.")
@click.option("--crs", default=None, help="Reference system if the file declares none.")
@click.option(
    "--population",
    type=click.Path(path_type=Path),
    default=None,
    help="CSV with columns fips,pop (default: delphi-utils' 2019 Census estimates).",
)
@click.option(
    "--zip-crosswalk",
    type=click.Path(path_type=Path),
    default=None,
    help="CSV fips,zip,weight for Connecticut ZIP -> county (default: delphi-utils' 2019).",
)
@click.option(
    "--no-ct-zip", is_flag=True, help="Do not (re)write ct_zip_county.csv beside the table."
)
def counties_cmd(
    out: Path | None,
    polygons: Path | None,
    key_field: str,
    name_field: str,
    land_field: str,
    land_units: str,
    encoding: str | None,
    crs: str | None,
    population: Path | None,
    zip_crosswalk: Path | None,
    no_ct_zip: bool,
) -> None:
    """(Re)build the county table: FIPS, name, state, land area, population, density, centroid.

    Polygons come from plotly-geo (pyogrio reads them), population from delphi-utils (read as
    a file); density is persons per square mile of land. Also writes ct_zip_county.csv
    (Connecticut ZIP -> county, used to map the 2022 planning regions) beside the table.
    """
    import numpy as np

    from ..counties import (
        CT_ZIP_NAME,
        SQ_METRES_PER_SQ_MILE,
        build_county_table,
        build_ct_zip_table,
        default_table_path,
        write_ct_zip_table,
    )
    from ..rundir import refuse_output

    out = out or default_table_path()
    refuse_output(out, "the county table", [p for p in (polygons, population) if p], folder=False)
    table = build_county_table(
        polygons,
        population,
        key_field=key_field,
        name_field=name_field,
        land_field=land_field,
        land_units=land_units,
        crs=crs,
        encoding=encoding,
    )
    table.write_csv(out)
    states = table.region_mask("states")
    click.echo(f"wrote {len(table)} counties to {out}")
    click.echo(
        f"  50 states + DC: {int(states.sum())} counties, "
        f"{table.aland_m2[states].sum() / SQ_METRES_PER_SQ_MILE:,.0f} sq mi of land, "
        f"median density {float(np.median(table.density[states])):.1f} persons/sq mi"
    )
    if not no_ct_zip:
        target = Path(out).with_name(CT_ZIP_NAME)
        rows = build_ct_zip_table(zip_crosswalk)
        write_ct_zip_table(rows, target)
        click.echo(f"wrote {len(rows)} Connecticut ZIP codes to {target}")


def _parse_suppressed(value: str) -> float | None:
    if value.strip().lower() == "drop":
        return None
    try:
        return float(value)
    except ValueError:
        raise UsageError(f"--suppressed must be a number >= 0 or 'drop', not {value!r}") from None


_DATE = click.DateTime(formats=["%Y-%m-%d", "%Y/%m/%d"])


@prep.command("hhs")
@click.argument("facility", type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    required=True,
    help="Events file to write (.h5 keeps metadata and dropped rows; .csv does not).",
)
@click.option(
    "--n",
    "n",
    type=int,
    default=1_000_000,
    show_default=True,
    help="Cases to keep, drawn without replacement (0: all).",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--count",
    type=click.Choice(COUNTS),
    default="admissions",
    show_default=True,
    help="admissions: new confirmed admissions (adult + pediatric); census: patient-days of "
    "hospitalised confirmed patients (counts long stays again: the paper's double counting).",
)
@click.option(
    "--column",
    "columns",
    multiple=True,
    metavar="NAME",
    help="Sum these count columns instead of --count (repeat; either spelling).",
)
@click.option(
    "--suppressed",
    default="1.5",
    show_default=True,
    help="Value for -999999 (a true 1-3), e.g. 1.5 (Delphi) or 2 (covidestim), or 'drop'. "
    "Fractional counts are rounded at random without bias (1.5 -> 1 or 2, each with p=1/2).",
)
@click.option("--start", type=_DATE, default=None, help="First case day kept (YYYY-MM-DD).")
@click.option("--end", type=_DATE, default=None, help="Last case day kept (YYYY-MM-DD).")
@click.option(
    "--origin",
    type=_DATE,
    default=None,
    help="Day 0 of the time axis (default: --start, else the first day of the data).",
)
@click.option(
    "--region",
    type=click.Choice(REGION_NAMES),
    default="states",
    show_default=True,
    help="Study region: 50 states + DC, contiguous 48 + DC, or every polygon (with territories).",
)
@click.option(
    "--crs",
    default=None,
    help="Projected reference system for x/y, e.g. EPSG:5070 (needs pyproj); default lon/lat.",
)
@click.option(
    "--continuous",
    "--jitter",
    "jitter",
    is_flag=True,
    help="Continuous times: add a uniform fraction of a day to each case's day, so the time is "
    "uniform in its week (no same-day ties hide offspring; the background is then summed on a "
    "fine time lattice).",
)
@click.option(
    "--locations",
    type=click.Choice(LOCATIONS),
    default="polygon",
    show_default=True,
    help="Initial location: uniform in the county polygon, or its centroid (no pyogrio needed).",
)
@click.option(
    "--counties",
    type=click.Path(path_type=Path),
    default=None,
    help="County table (default: the shipped data/counties.csv).",
)
@click.option(
    "--polygons",
    type=click.Path(path_type=Path),
    default=None,
    help="County polygon file (default: plotly-geo's 2016 Census counties).",
)
@click.option("--key-field", default="GEOID", show_default=True, help="FIPS field of --polygons.")
@click.option(
    "--polygons-out",
    type=click.Path(path_type=Path),
    default=None,
    help="Also write the polygons used, in the output's coordinates (.gpkg), for hawkes-run.",
)
@click.option(
    "--engine",
    type=click.Choice(CSV_READERS),
    default="auto",
    show_default=True,
    help="CSV reader (pyarrow is ~5x faster).",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
def hhs_cmd(
    facility: Path,
    out: Path,
    n: int,
    seed: int,
    count: str,
    columns: tuple[str, ...],
    suppressed: str,
    start: Any,
    end: Any,
    origin: Any,
    region: str,
    crs: str | None,
    jitter: bool,
    locations: str,
    counties: Path | None,
    polygons: Path | None,
    key_field: str,
    polygons_out: Path | None,
    engine: str,
    quiet: bool,
) -> None:
    """Turn the HHS facility file FACILITY (CSV) into an events file of cases.

    Each hospital-week's count becomes cases on uniformly random days of its week (shifted a
    day earlier for previous-day admissions), down-sampled without replacement to --n, joined
    to the county (FIPS repairs included) with its population density, and placed uniformly
    inside the county polygon. Every dropped row is counted by reason in the metadata.
    """
    from ..prep import HHSOptions, prepare_hhs

    _check_hhs_outputs(out, polygons_out, [p for p in (facility, counties, polygons) if p])
    options = HHSOptions(
        n=n,
        seed=seed,
        count=count,
        columns=tuple(columns),
        suppressed=_parse_suppressed(suppressed),
        start=start.date() if start else None,
        end=end.date() if end else None,
        origin=origin.date() if origin else None,
        region=region,
        crs=crs,
        jitter=jitter,
        locations=locations,
        engine=engine,
    )
    result = prepare_hhs(
        facility,
        out,
        options,
        counties=counties,
        polygons=polygons,
        key_field=key_field,
        polygons_out=polygons_out,
        progress=_prep_progress(quiet),
    )
    a = result.attrs
    click.echo(f"wrote {result.n_events:,} cases to {result.out}")
    click.echo(f"  rows     {a['rows_read']:,} read, {a['rows_kept']:,} kept, "
               f"{a['rows_dropped']:,} dropped")  # fmt: skip
    for key, rows in a["dropped"].items():
        if rows:
            click.echo(f"    {key:<26} {rows:>10,}")
    click.echo(f"  cases    {a['cases_expanded']:,} expanded, {a['cases_in_window']:,} in the "
               f"window, {a['cases_kept']:,} kept")  # fmt: skip
    click.echo(f"  time     days since {a['origin_date']} ({a['first_date']} .. {a['last_date']})")
    area = a.get("area")
    click.echo(f"  space    {a['crs']}, region {a['region']}"
               + (f", area {area:.6g}" if area else ""))  # fmt: skip
    if a.get("counties"):
        click.echo(f"  polygons {a['counties']} (data.counties for hawkes-run)")
    click.echo(f"  took     {sum(result.seconds.values()):.1f} s")


def _check_hhs_outputs(out: Path, polygons_out: Path | None, inputs: list[Path]) -> None:
    """Refuse, before any work, outputs that are inputs, run files, the same path twice, or
    where a file cannot be (:func:`~hawkes_cli.rundir.refuse_output`)."""
    from ..rundir import refuse_output

    refuse_output(out, "the cases", inputs, folder=False)
    if polygons_out is not None:
        if Path(polygons_out).expanduser().absolute() == Path(out).expanduser().absolute():
            raise UsageError(
                f"--polygons-out {polygons_out} is also the events output: give each its own path"
            )
        refuse_output(polygons_out, "--polygons-out", inputs, folder=False)
