"""The two entry points: :func:`load_draws` (retained draws) and :func:`diagnose` (the report).

Each is a few named steps over :mod:`.read`, :mod:`.derived`, :mod:`.stats` and
:mod:`.verdicts`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from ..errors import UsageError
from . import derived, verdicts
from .derived import Arrays, Quantity
from .options import DiagnoseOptions
from .read import (
    STAT_KEYS,
    ChainRead,
    EventsInfo,
    burn_description,
    check_same_config,
    find_chain_files,
    read_chains,
    read_events_info,
    require_draws,
)
from .records import County, Draws, Report, Verdict
from .stats import rows
from .truth import check_truth

__all__ = ["diagnose", "load_draws"]

log = logging.getLogger(__package__)


def load_draws(run_dir: Path, options: DiagnoseOptions | None = None) -> Draws:
    """Read a run's chain files and build the retained draws, derived quantities included.

    Parameters
    ----------
    run_dir
        The run directory.
    options
        Burn-in, thinning, counties (default :class:`DiagnoseOptions`).

    Returns
    -------
    Draws

    Raises
    ------
    UsageError
        No run directory, no chain files, no draws after burn-in, a county not in the events.
    StorageError
        A corrupt chain file, or chains from different configs.
    EventsError
        ``--county`` given but the events file cannot be read.
    """
    draws, _notes, _chains, _info = _load(Path(run_dir), options or DiagnoseOptions())
    return draws


def _county_quantities(
    options: DiagnoseOptions,
    arrays: dict[str, Arrays],
    info: EventsInfo,
    model: int,
) -> tuple[list[County], list[Quantity], list[Verdict]]:
    """The requested counties, their lengthscale quantities and the notes about them."""
    if not options.counties:
        return [], [], []
    if "sigma_x" not in arrays:
        raise UsageError("--county needs the parameter sigma_x, which these chains lack")
    assert info.events is not None and info.path is not None
    unit = derived.length_unit(info.crs)  # miles on lon/lat, else the data's coordinate units
    notes: list[Verdict] = []
    counties: list[County] = []
    quantities: list[Quantity] = []
    for fips in options.counties:
        county, problem = derived.county(fips, info.events, info.path, model, unit=unit)
        if problem:
            notes.append(verdicts.county_problem(problem))
        counties.append(county)
        quantities.append(derived.lengthscale(county, arrays["sigma_x"], unit=unit))
    return counties, quantities, notes


def _assemble(
    run_dir: Path,
    used: Sequence[ChainRead],
    quantities: Sequence[Quantity],
    info: EventsInfo,
    model: int,
    counties: Sequence[County],
) -> Draws:
    """The :class:`Draws` of the used chains and the quantities."""
    first = used[0]
    stats_keys = [k for k in STAT_KEYS if all(k in c.stats for c in used)]
    return Draws(
        run_dir=run_dir,
        chain_ids=tuple(c.chain_id for c in used),
        param_names=tuple(first.meta.param_names),
        variables={q.name: q.arrays for q in quantities},
        labels={q.name: q.label for q in quantities},
        units={q.name: q.unit for q in quantities},
        checked=frozenset(q.name for q in quantities if q.checked),
        scale_of={q.name: q.scale_of for q in quantities if q.scale_of is not None},
        iterations=tuple(c.iterations for c in used),
        stats={k: tuple(c.stats[k] for c in used) for k in stats_keys},
        model=model,
        config_sha256=first.meta.config_sha256,
        time_unit=info.time_unit,
        counties=tuple(counties),
    )


def _load(
    run_dir: Path, options: DiagnoseOptions
) -> tuple[Draws, list[Verdict], list[ChainRead], EventsInfo]:
    """Read, select and derive: the draws, the notes of reading, every chain read, the events."""
    chains = read_chains(find_chain_files(run_dir), options)
    check_same_config(chains)
    used = require_draws(chains, run_dir, options)
    notes = [verdicts.excluded(c) for c in chains if not c.used]
    model = used[0].meta.model
    names = tuple(used[0].meta.param_names)
    info = read_events_info(chains, run_dir, options, model)
    if info.changed:
        notes.append(verdicts.events_changed(info.changed))
    if info.assumed:
        notes.append(verdicts.time_unit_assumed(info.assumed))
    arrays = {n: tuple(c.params[n] for c in used) for n in names}
    quantities = derived.parameters(names, arrays, info.time_unit, info.crs)
    quantities += derived.xi0_fraction(arrays) + derived.weeks(arrays, info.time_unit)
    counties, lengthscales, county_notes = _county_quantities(options, arrays, info, model)
    draws = _assemble(run_dir, used, quantities + lengthscales, info, model, counties)
    return draws, notes + county_notes, chains, info


def _systematic(info: EventsInfo, rows: dict) -> list[Verdict]:
    """The edge and tie verdicts (:mod:`.systematic`); none when the events or the config
    cannot be read (the table says so already) or the run's polygons cannot be found."""
    if info.events is None or info.config is None:
        log.info("systematic errors not weighed: the events or the run's config are not read")
        return []
    from ..errors import HawkesError
    from ..regions import region_of
    from .systematic import systematic_verdicts

    try:
        region = region_of(info.config, info.events)
    except (HawkesError, OSError) as exc:
        log.warning("the study region of the run cannot be built (%s); edge share not shown", exc)
        region = None
    return systematic_verdicts(info.config, info.events, rows, region)


def diagnose(run_dir: Path, options: DiagnoseOptions | None = None) -> Report:
    """Diagnose the chains of a run (finished or still running).

    Parameters
    ----------
    run_dir
        The run directory (``RUN_DIR/chains/chain-XX.h5``).
    options
        Burn-in, thinning, counties, strictness (default :class:`DiagnoseOptions`).

    Returns
    -------
    Report

    Raises
    ------
    UsageError
        No run directory, no chain files, no draws after burn-in, a bad or unknown county.
    StorageError
        A corrupt chain file, or chains from different configs (the message names the files
        and the config hashes).
    EventsError
        ``--county`` given but the events file cannot be read.
    """
    options = options or DiagnoseOptions()
    run_dir = Path(run_dir)
    draws, notes, chains, info = _load(run_dir, options)
    params, derived_rows = rows(draws)
    nonfinite = set(draws.variables) - set(draws.finite_names())
    found = (
        notes
        + verdicts.chain_verdicts(chains, draws)
        + verdicts.row_verdicts(params + derived_rows, draws, nonfinite)
    )
    if options.systematic:
        found += _systematic(info, {r.name: r for r in params})
    used_ids = set(draws.chain_ids)
    report = Report(
        run_dir=run_dir,
        config_sha256=draws.config_sha256,
        model=draws.model,
        time_unit=draws.time_unit,
        options=options,
        burn_description=burn_description(options, chains),
        chains=tuple(c.summary(c.chain_id in used_ids) for c in chains),
        common_draws=draws.common_draws,
        parameters=tuple(params),
        derived=tuple(derived_rows),
        counties=draws.counties,
        verdicts=verdicts.sort_verdicts(found),
        draws=draws,
        truth=check_truth(info.attrs, params),
    )
    log.info(
        "diagnosed %s: %d chains, %d draws each in common, status %s",
        run_dir,
        len(draws.chain_ids),
        draws.common_draws,
        report.status,
    )
    return report
