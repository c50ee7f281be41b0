"""Convergence diagnostics, posterior tables, exports and plots of a run's chain files.

This is the engine of ``hawkes-diagnose`` (DESIGN sections 4, 5 and 9). It reads every chain
file of a run directory (``RUN_DIR/chains/chain-XX.h5``), finished or still being written (only
committed draws, through :func:`hawkes_cli.storage.read_chain`), drops the burn-in, optionally
thins, and computes per parameter with arviz:

- rank-normalised split R-hat (``az.rhat(..., method="rank")``),
- bulk and tail ESS (``az.ess(..., method="bulk" / "tail")``),
- the Monte Carlo standard error of the mean (``az.mcse(..., method="mean")``),
- posterior median, equal-tailed 95% interval (2.5% and 97.5% quantiles), mean and sd;

plus derived quantities: ``xi0/(xi0+mu0)``, ``tau_t`` and ``sigma_t`` in weeks (when times are in
days) and, per requested county, the effective spatial lengthscale in miles.

Nothing here prints: :func:`diagnose` returns a :class:`Report`, and :func:`format_table`,
:func:`to_json`, :func:`to_csv` render it; :func:`write_netcdf` and :func:`write_plots` write
files. arviz and matplotlib are imported inside the functions that need them, so importing this
module is cheap.

Burn-in and thinning
--------------------
``burn=None`` (the default) drops the draws flagged as warm-up in the chain file (the ``warmup``
field; files without it drop ``iteration < warmup`` from the root attributes). ``burn=B`` drops
every draw whose ``iteration`` is below ``B`` (iterations count from 0 and include warm-up, as in
the config), whatever the warm-up flag says; ``burn=0`` keeps the warm-up draws. ``thin=k`` then
keeps the 1st, (k+1)-th, ... of the remaining draws of each chain.

Chains of unequal length
------------------------
Chains still running differ in length. Medians, intervals, means and sds use every retained draw
of every chain; R-hat, ESS and MCSE need a rectangular (chain, draw) array and use the first
``L`` retained draws of each chain, ``L`` being the shortest chain's count (the *common prefix*),
which the report states. Chains without any retained draw (still in warm-up) are left out and
named.

Non-finite draws
----------------
A NaN or inf draw fails the run (the verdict names the chain, the parameter and the first
iteration); R-hat, ESS and MCSE of that quantity are NaN, its median, interval, mean and sd are
taken over the finite draws, and the plots leave it out.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import re
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import ConfigError, EventsError, StorageError, UsageError

if TYPE_CHECKING:  # pragma: no cover
    import arviz

    from .data import EventData

__all__ = [
    "DAYS_PER_WEEK",
    "ESS_WARN",
    "MILES_PER_DEGREE",
    "RHAT_FAIL",
    "RHAT_WARN",
    "SHORT_CHAIN_FRACTION",
    "STRICT_FAILURE_EXIT_CODE",
    "ChainSummary",
    "County",
    "DiagnoseOptions",
    "Draws",
    "Report",
    "SummaryRow",
    "Verdict",
    "diagnose",
    "exit_code",
    "find_chain_files",
    "format_table",
    "lengthscale_miles",
    "load_draws",
    "to_csv",
    "to_inference_data",
    "to_json",
    "write_netcdf",
    "write_plots",
]

log = logging.getLogger(__name__)

RHAT_WARN = 1.01
"""R-hat above this warns."""
RHAT_FAIL = 1.05
"""R-hat above this fails."""
ESS_WARN = 400.0
"""Bulk or tail ESS below this warns."""
SHORT_CHAIN_FRACTION = 0.5
"""A chain with fewer retained draws than this fraction of the longest chain's is named."""
MIN_DRAWS = 4
"""Fewest draws per chain for R-hat, ESS and MCSE (arviz's minimum)."""
MILES_PER_DEGREE = 69.17
"""Miles per degree, the published conversion (times ``cos(latitude)``)."""
DAYS_PER_WEEK = 7.0
STRICT_FAILURE_EXIT_CODE = 8
"""Exit code of ``hawkes-diagnose --strict`` when a verdict fails (not used by any HawkesError)."""

LEVELS: tuple[str, ...] = ("ok", "warn", "fail")
"""Verdict levels, in increasing severity."""

_CHAIN_FILE = re.compile(r"^chain-(\d+)\.h5$")
_DAY_UNITS = frozenset({"d", "day", "days"})
_WEEK_UNITS = frozenset({"w", "week", "weeks"})
_LONLAT_CRS = frozenset({"lonlat", "latlon", "epsg:4326", "4326", "wgs84", "crs84", "ogc:crs84"})
_CSV_STATS = ("median", "q2.5", "q97.5", "mean", "sd", "rhat", "ess_bulk", "ess_tail", "mcse_mean")
_STAT_FIELDS = (
    "median",
    "q2_5",
    "q97_5",
    "mean",
    "sd",
    "rhat",
    "ess_bulk",
    "ess_tail",
    "mcse_mean",
)


# --------------------------------------------------------------------------- data classes


@dataclass(frozen=True)
class DiagnoseOptions:
    """What ``hawkes-diagnose`` should look at.

    Parameters
    ----------
    burn
        ``None``: drop the draws flagged as warm-up (the run's own warm-up). An integer ``B >= 0``:
        drop every draw with ``iteration < B`` instead (0 keeps everything).
    thin
        Keep every ``thin``-th retained draw of each chain (>= 1).
    counties
        5-digit county FIPS codes whose effective spatial lengthscale (miles) is reported;
        shorter digit strings are zero-padded (``"6037"`` -> ``"06037"``).
    strict
        Whether a failing verdict makes :func:`exit_code` non-zero.
    events
        Events file for the county rows and the time unit; ``None`` takes the config's
        ``data.events`` as recorded in the chain files.

    Raises
    ------
    UsageError
        A negative ``burn``, ``thin < 1``, or a county code that is not 1-5 digits.
    """

    burn: int | None = None
    thin: int = 1
    counties: tuple[str, ...] = ()
    strict: bool = False
    events: Path | None = None

    def __post_init__(self) -> None:
        if self.burn is not None and (isinstance(self.burn, bool) or int(self.burn) < 0):
            raise UsageError(f"--burn must be an integer >= 0, got {self.burn!r}")
        if isinstance(self.thin, bool) or int(self.thin) < 1:
            raise UsageError(f"--thin must be an integer >= 1, got {self.thin!r}")
        codes: list[str] = []
        for raw in self.counties:
            text = str(raw).strip()
            if not (text.isdigit() and 1 <= len(text) <= 5):
                raise UsageError(
                    f"--county {raw!r}: a county is given by its FIPS code, 5 digits "
                    "(e.g. 36061 for New York County, NY)"
                )
            code = text.zfill(5)
            if code not in codes:
                codes.append(code)
        object.__setattr__(self, "counties", tuple(codes))
        if self.burn is not None:
            object.__setattr__(self, "burn", int(self.burn))
        object.__setattr__(self, "thin", int(self.thin))
        if self.events is not None:
            object.__setattr__(self, "events", Path(self.events))


@dataclass(frozen=True)
class SummaryRow:
    """Posterior summary and convergence diagnostics of one quantity.

    Attributes
    ----------
    name
        Identifier (also the variable name in exports), e.g. ``"tau_t"``, ``"tau_t_weeks"``,
        ``"xi0_frac"``, ``"lengthscale_36061"``.
    label
        What the table shows, e.g. ``"tau_t"``, ``"xi0/(xi0+mu0)"``, ``"lengthscale 36061"``.
    unit
        Unit of the values (``""`` for dimensionless).
    kind
        ``"parameter"`` or ``"derived"``.
    median, q2_5, q97_5, mean, sd
        From all retained finite draws of all chains (quantiles: numpy's default linear method;
        sd with ``ddof=1``).
    rhat, ess_bulk, ess_tail, mcse_mean
        arviz's rank-normalised split R-hat, bulk ESS, tail ESS and MCSE of the mean, on the
        common prefix of the chains; NaN when they cannot be computed.
    checked
        Whether verdicts look at this row (parameters and ``xi0/(xi0+mu0)``; unit conversions of
        a parameter have its R-hat and ESS and are not checked twice).
    """

    name: str
    label: str
    unit: str
    kind: str
    median: float
    q2_5: float
    q97_5: float
    mean: float
    sd: float
    rhat: float
    ess_bulk: float
    ess_tail: float
    mcse_mean: float
    checked: bool = True

    def as_dict(self) -> dict[str, Any]:
        """The row as a plain dict (floats, NaN kept)."""
        out: dict[str, Any] = {
            "name": self.name,
            "label": self.label,
            "unit": self.unit,
            "kind": self.kind,
        }
        out.update({key: float(getattr(self, key)) for key in _STAT_FIELDS})
        return out


@dataclass(frozen=True)
class Verdict:
    """One finding about the run.

    Attributes
    ----------
    level
        ``"ok"``, ``"warn"`` or ``"fail"``.
    message
        One line for a person: what, where, what to do.
    code
        Machine-readable kind: ``rhat``, ``ess``, ``stuck``, ``nonfinite``, ``short``, ``prefix``,
        ``excluded``, ``one_chain``, ``too_few``, ``time_unit``, ``crs``, ``config``.
    chain
        The chain concerned, if any.
    parameter
        The parameter (row name) concerned, if any.
    """

    level: str
    message: str
    code: str
    chain: int | None = None
    parameter: str | None = None

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"verdict level must be one of {LEVELS}, got {self.level!r}")

    def as_dict(self) -> dict[str, Any]:
        """The verdict as a plain dict."""
        return {
            "level": self.level,
            "code": self.code,
            "chain": self.chain,
            "parameter": self.parameter,
            "message": self.message,
        }


@dataclass(frozen=True)
class ChainSummary:
    """One chain file as diagnosed.

    Attributes
    ----------
    chain_id
        The chain's id (root attribute ``chain_id``).
    path
        The chain file.
    draws_committed
        Committed draws in the file (warm-up included).
    draws_used
        Draws left after burn-in and thinning (0: the chain is not used).
    first_iteration, last_iteration
        Iterations of the first and last draw used (None when none is used).
    acceptance
        Fraction of accepted proposals among the draws after burn-in (before thinning), or None
        without an ``accepted`` field or draws.
    iterations_done, iterations_planned
        Progress of the chain (from its checkpoint, else its last committed draw) and its
        configured total.
    finished
        Whether the chain reached ``iterations_planned``.
    """

    chain_id: int
    path: Path
    draws_committed: int
    draws_used: int
    first_iteration: int | None
    last_iteration: int | None
    acceptance: float | None
    iterations_done: int
    iterations_planned: int
    finished: bool

    @property
    def used(self) -> bool:
        """Whether the chain contributes draws."""
        return self.draws_used > 0

    def as_dict(self) -> dict[str, Any]:
        """The summary as a plain dict (path as text)."""
        return {
            "chain": self.chain_id,
            "path": str(self.path),
            "draws_committed": self.draws_committed,
            "draws_used": self.draws_used,
            "first_iteration": self.first_iteration,
            "last_iteration": self.last_iteration,
            "acceptance": self.acceptance,
            "iterations_done": self.iterations_done,
            "iterations_planned": self.iterations_planned,
            "finished": self.finished,
        }


@dataclass(frozen=True)
class County:
    """A county for which the effective spatial lengthscale is reported.

    Attributes
    ----------
    fips
        5-digit county FIPS code.
    latitude
        Mean ``y`` of the county's events (degrees north when the events are lon/lat).
    density
        Mean population density of the county's events (persons per square mile), or None when
        the events file has none (model 1 does not need it).
    n_events
        Number of the county's events in the events file.
    factor
        Miles per unit of ``sigma_x``: ``cos(latitude) * 69.17`` (model 1), divided by
        ``sqrt(density)`` for model 2.
    """

    fips: str
    latitude: float
    density: float | None
    n_events: int
    factor: float

    def as_dict(self) -> dict[str, Any]:
        """The county as a plain dict."""
        return {
            "fips": self.fips,
            "latitude": self.latitude,
            "density": self.density,
            "n_events": self.n_events,
            "miles_per_sigma_x": self.factor,
        }


@dataclass(frozen=True, eq=False)
class Draws:
    """Retained draws of the used chains (after burn-in and thinning), per chain.

    Attributes
    ----------
    run_dir
        The run directory.
    chain_ids
        Ids of the used chains, ascending.
    param_names
        The model parameters, in file order.
    variables
        Name -> one float64 array per used chain (parameters and derived quantities); chains may
        differ in length.
    labels, units
        Name -> table label and unit, for every variable.
    checked
        Names of the variables that verdicts look at.
    scale_of
        Derived name -> ``(parameter, factor)`` for quantities that are a positive constant
        multiple of a parameter (their R-hat and ESS equal the parameter's).
    iterations
        One int64 array of iteration numbers per used chain.
    stats
        Per-draw sampler fields (``loglik``, ``logprior``, ``accepted``), one array per used
        chain, when the chain files have them.
    model, config_sha256, time_unit
        Model kind, the config hash shared by every chain, and the data's time unit.
    counties
        The counties with a lengthscale variable.
    """

    run_dir: Path
    chain_ids: tuple[int, ...]
    param_names: tuple[str, ...]
    variables: Mapping[str, tuple[np.ndarray, ...]]
    labels: Mapping[str, str]
    units: Mapping[str, str]
    checked: frozenset[str]
    scale_of: Mapping[str, tuple[str, float]]
    iterations: tuple[np.ndarray, ...]
    stats: Mapping[str, tuple[np.ndarray, ...]]
    model: int
    config_sha256: str
    time_unit: str
    counties: tuple[County, ...]

    @property
    def common_draws(self) -> int:
        """Length ``L`` of the common prefix (the shortest used chain's retained draws)."""
        return min(len(it) for it in self.iterations)

    def matrix(self, name: str) -> np.ndarray:
        """The (chain, draw) array of a variable over the common prefix, shape ``(C, L)``."""
        n = self.common_draws
        return np.stack([a[:n] for a in self.variables[name]])


@dataclass(frozen=True, eq=False)
class Report:
    """Everything ``hawkes-diagnose`` reports about a run.

    Attributes
    ----------
    run_dir
        The run directory.
    config_sha256
        The config hash shared by all chains.
    model
        Model kind (1 or 2).
    time_unit
        The data's time unit (``"day"`` unless the events file says otherwise).
    options
        The options used.
    burn_description
        How burn-in and thinning were applied, in words.
    chains
        Every chain file found, used or not, by chain id.
    common_draws
        Draws per chain used for R-hat, ESS and MCSE (the common prefix).
    parameters
        One row per model parameter (natural units: time unit, coordinate units).
    derived
        Rows of the derived quantities.
    counties
        The counties of the lengthscale rows.
    verdicts
        Findings, failures first.
    draws
        The retained draws themselves (for exports and plots).
    """

    run_dir: Path
    config_sha256: str
    model: int
    time_unit: str
    options: DiagnoseOptions
    burn_description: str
    chains: tuple[ChainSummary, ...]
    common_draws: int
    parameters: tuple[SummaryRow, ...]
    derived: tuple[SummaryRow, ...]
    counties: tuple[County, ...]
    verdicts: tuple[Verdict, ...]
    draws: Draws = field(repr=False)

    @property
    def rows(self) -> tuple[SummaryRow, ...]:
        """Parameter rows, then derived rows."""
        return self.parameters + self.derived

    @property
    def status(self) -> str:
        """The worst verdict level (``"ok"`` when there are none)."""
        worst = 0
        for v in self.verdicts:
            worst = max(worst, LEVELS.index(v.level))
        return LEVELS[worst]

    @property
    def used_chains(self) -> tuple[ChainSummary, ...]:
        """The chains that contribute draws."""
        return tuple(c for c in self.chains if c.used)

    def row(self, name: str) -> SummaryRow:
        """The row of a parameter or derived quantity by name (``KeyError`` if absent)."""
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(name)


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
    return np.asarray(sigma_x, dtype=float) * _county_factor(model, latitude, density)


def _county_factor(model: int, latitude: float, density: float | None) -> float:
    factor = math.cos(latitude * math.pi / 180.0) * MILES_PER_DEGREE
    if model == 2:
        if density is None or not density > 0:
            raise UsageError(
                f"model 2 needs the county's population density to convert sigma_x to miles, got "
                f"{density!r}"
            )
        factor /= math.sqrt(density)
    return factor


def _is_days(unit: str) -> bool:
    return unit.strip().lower() in _DAY_UNITS


def _time_unit_name(unit: str) -> str:
    u = unit.strip().lower()
    if u in _DAY_UNITS:
        return "days"
    if u in _WEEK_UNITS:
        return "weeks"
    return unit


# --------------------------------------------------------------------------- reading


def find_chain_files(run_dir: Path) -> list[Path]:
    """The chain files of a run, by chain number.

    Parameters
    ----------
    run_dir
        The run directory (its ``chains/`` folder is searched), or the ``chains/`` folder
        itself.

    Returns
    -------
    list of Path
        ``chain-XX.h5`` files, ascending by number.

    Raises
    ------
    UsageError
        ``run_dir`` does not exist or is not a directory, or holds no chain file.
    """
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise UsageError(f"run directory {run_dir} does not exist; give the run_dir of a run")
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir} is not a directory; give the run_dir of a run")
    folder = run_dir / "chains"
    if not folder.is_dir():
        folder = run_dir
    found = []
    for p in folder.iterdir():
        m = _CHAIN_FILE.match(p.name)
        if m and p.is_file():
            found.append((int(m.group(1)), p))
    if not found:
        raise UsageError(
            f"no chain files (chains/chain-XX.h5) in {run_dir}; has hawkes-run started this run "
            "yet? (hawkes-run writes RUN_DIR/chains/chain-00.h5, ...)"
        )
    return [p for _, p in sorted(found)]


@dataclass(frozen=True)
class _Chain:
    """One chain file's committed draws, with the burn-in/thinning selection applied."""

    chain_id: int
    path: Path
    attrs: dict[str, Any]
    n_committed: int
    params: dict[str, np.ndarray]  # after burn-in and thinning
    iterations: np.ndarray
    stats: dict[str, np.ndarray]
    after_burn_params: dict[str, np.ndarray]  # after burn-in, before thinning
    after_burn_iterations: np.ndarray
    acceptance: float | None
    iterations_done: int
    finished: bool


def _select(draws: Mapping[str, np.ndarray], attrs: Mapping[str, Any], burn: int | None):
    """Boolean mask of the rows after burn-in (see the module docstring)."""
    n = next(iter(draws.values())).shape[0] if draws else 0
    iteration = draws.get("iteration")
    if burn is None:
        if "warmup" in draws:
            return np.asarray(draws["warmup"]) == 0
        warmup = int(attrs.get("warmup", 0) or 0)
        if iteration is not None:
            return np.asarray(iteration) >= warmup
        burn_rows = warmup // max(int(attrs.get("thin", 1) or 1), 1)
        return np.arange(n) >= burn_rows
    if iteration is not None:
        return np.asarray(iteration) >= burn
    return np.arange(n) >= burn


def _read_chains(files: Sequence[Path], options: DiagnoseOptions) -> list[_Chain]:
    from .storage import read_chain

    chains: list[_Chain] = []
    for path in files:
        cd = read_chain(path)
        attrs = cd.attrs
        names = tuple(attrs["param_names"])
        draws = cd.draws
        keep = _select(draws, attrs, options.burn)
        after = {name: np.asarray(draws[name], dtype=np.float64)[keep] for name in names}
        n_rows = cd.n_committed
        if "iteration" in draws:
            iters_all = np.asarray(draws["iteration"], dtype=np.int64)
        else:
            iters_all = np.arange(n_rows, dtype=np.int64) * max(int(attrs.get("thin", 1) or 1), 1)
        iters_after = iters_all[keep]
        sl = slice(None, None, options.thin)
        stats = {
            key: np.asarray(draws[key])[keep][sl]
            for key in ("loglik", "logprior", "accepted")
            if key in draws
        }
        acceptance = None
        if "accepted" in draws and iters_after.size:
            acceptance = float(np.mean(np.asarray(draws["accepted"])[keep] != 0))
        planned = int(attrs.get("iterations", 0) or 0)
        checkpoint = cd.checkpoint or {}
        if isinstance(checkpoint.get("iteration"), int):
            done = int(checkpoint["iteration"])
        else:
            done = int(iters_all[-1]) + 1 if n_rows else 0
        finished = bool(checkpoint.get("finished", planned > 0 and done >= planned))
        chains.append(
            _Chain(
                chain_id=int(attrs["chain_id"]),
                path=Path(path),
                attrs=attrs,
                n_committed=n_rows,
                params={name: arr[sl] for name, arr in after.items()},
                iterations=iters_after[sl],
                stats=stats,
                after_burn_params=after,
                after_burn_iterations=iters_after,
                acceptance=acceptance,
                iterations_done=done,
                finished=finished,
            )
        )
        log.debug("%s: %d committed draws, %d used", path, n_rows, len(iters_after[sl]))
    return chains


def _check_same_config(chains: Sequence[_Chain]) -> None:
    groups: dict[str, list[str]] = {}
    for c in chains:
        groups.setdefault(str(c.attrs["config_sha256"]), []).append(c.path.name)
    if len(groups) > 1:
        parts = "; ".join(
            f"config sha256 {sha} in {', '.join(names)}" for sha, names in groups.items()
        )
        raise StorageError(
            f"chain files from different configs cannot be diagnosed together: {parts}. Each run "
            "directory must hold the chains of one config: move the foreign chain files into "
            "their own run directory"
        )
    params = {tuple(c.attrs["param_names"]) for c in chains}
    if len(params) > 1:
        raise StorageError(
            f"chain files store different parameters ({' vs '.join(map(str, params))}); they "
            "cannot be diagnosed together"
        )


def _run_config(chains: Sequence[_Chain], run_dir: Path):
    """The config recorded in the first chain file, or None (with the reason)."""
    from .config import config_from_yaml_text

    first = chains[0]
    text = str(first.attrs.get("config_yaml", ""))
    try:
        config = config_from_yaml_text(
            text, base_dir=run_dir, where=f"{first.path} (attribute config_yaml)"
        )
    except ConfigError as exc:
        return None, str(exc)
    return config, None


def _events_path(options: DiagnoseOptions, config: Any) -> Path | None:
    if options.events is not None:
        return options.events
    if config is not None:
        return Path(config.data.events)
    return None


def _load_events(path: Path, need_density: bool) -> EventData:
    from .data import load_events

    return load_events(path, need_density=need_density)


def _time_unit(
    events_path: Path | None, events: EventData | None, problem: str | None
) -> tuple[str, str | None]:
    """The data's time unit and, when it was assumed, why."""
    if problem is not None:
        return "day", problem
    if events is not None:
        unit = events.attrs.get("time_unit")
        if unit:
            return str(unit), None
        return "day", f"{events_path} has no time_unit attribute"
    if events_path is None:
        return "day", "no events file is known (the chain's config could not be read)"
    if not events_path.exists():
        return "day", f"events file {events_path} not found"
    return "day", f"{events_path} has no time_unit attribute (CSV)"


def _county(
    fips: str, events: EventData, events_path: Path, model: int
) -> tuple[County, str | None]:
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
    note = None
    if not -90.0 <= latitude <= 90.0:
        note = f"county {fips}: mean y {latitude:.6g} is not a latitude in degrees"
    factor = _county_factor(model, latitude, density) if note is None else float("nan")
    return County(fips, latitude, density, n, factor), note


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
    draws, _notes, _chains = _load(Path(run_dir), options or DiagnoseOptions())
    return draws


def _load(run_dir: Path, options: DiagnoseOptions) -> tuple[Draws, list[Verdict], list[_Chain]]:
    files = find_chain_files(run_dir)
    chains = _read_chains(files, options)
    _check_same_config(chains)
    notes: list[Verdict] = []
    used = [c for c in chains if c.iterations.size > 0]
    if not used:
        done = max(c.iterations_done for c in chains)
        if options.burn is None:
            warmup = max(int(c.attrs.get("warmup", 0) or 0) for c in chains)
            raise UsageError(
                f"no draws after warm-up yet in {run_dir}: the chains are at iteration {done} at "
                f"most and the first {warmup} iterations are warm-up; wait, or pass --burn 0 to "
                "look at the warm-up draws"
            )
        raise UsageError(
            f"no draws after burn-in in {run_dir}: --burn {options.burn} drops every draw (the "
            f"chains are at iteration {done} at most); use a smaller --burn"
        )
    for c in chains:
        if c.iterations.size == 0:
            notes.append(
                Verdict(
                    "warn",
                    f"chain {c.chain_id} ({c.path.name}) has no draws after burn-in yet "
                    f"({c.n_committed} committed); it is left out",
                    "excluded",
                    chain=c.chain_id,
                )
            )
    first = used[0]
    model = int(first.attrs.get("model", 1) or 1)
    names = tuple(first.attrs["param_names"])
    config, config_problem = _run_config(chains, run_dir)
    events_path = _events_path(options, config)
    events = None
    events_problem = None
    need_events = bool(options.counties) or (
        events_path is not None
        and events_path.suffix.lower() in (".h5", ".hdf5", ".he5")
        and events_path.exists()
    )
    if need_events:
        if events_path is None:
            raise UsageError(
                f"--county needs the events file, but the config in the chain files cannot be "
                f"read ({config_problem}); pass the events file explicitly"
            )
        try:
            events = _load_events(events_path, need_density=model == 2 and bool(options.counties))
        except EventsError as exc:
            if options.counties:
                raise
            events_problem = f"cannot read {events_path} ({exc})"
    time_unit, assumed = _time_unit(events_path, events, events_problem)
    if assumed:
        notes.append(Verdict("ok", f"time unit assumed to be days: {assumed}", "time_unit"))
    if config_problem and not options.counties:
        log.info("config in the chain files not readable: %s", config_problem)

    variables: dict[str, tuple[np.ndarray, ...]] = {
        n: tuple(c.params[n] for c in used) for n in names
    }
    unit_t = _time_unit_name(time_unit)
    crs = str(events.attrs.get("crs", "")) if events is not None else ""
    unit_x = "degrees" if (not crs or crs.lower() in _LONLAT_CRS) else "coord units"
    units = {"mu0": "", "tau_t": unit_t, "xi0": "", "sigma_x": unit_x, "sigma_t": unit_t}
    units = {n: units.get(n, "") for n in names}
    labels = {n: n for n in names}
    checked = set(names)
    scale_of: dict[str, tuple[str, float]] = {}
    if "xi0" in names and "mu0" in names:
        variables["xi0_frac"] = tuple(
            x / (x + m) for x, m in zip(variables["xi0"], variables["mu0"], strict=True)
        )
        labels["xi0_frac"] = "xi0/(xi0+mu0)"
        units["xi0_frac"] = ""
        checked.add("xi0_frac")
    if _is_days(time_unit):
        for p in ("tau_t", "sigma_t"):
            if p in names:
                name = f"{p}_weeks"
                variables[name] = tuple(a / DAYS_PER_WEEK for a in variables[p])
                labels[name] = p
                units[name] = "weeks"
                scale_of[name] = (p, 1.0 / DAYS_PER_WEEK)
    counties: list[County] = []
    if options.counties:
        if "sigma_x" not in names:
            raise UsageError("--county needs the parameter sigma_x, which these chains lack")
        assert events is not None and events_path is not None
        if crs and crs.lower() not in _LONLAT_CRS:
            notes.append(
                Verdict(
                    "warn",
                    f"{events_path} has crs {crs!r}, not lon/lat degrees; the miles conversion "
                    "assumes degrees and is meaningless here",
                    "crs",
                )
            )
        for fips in options.counties:
            county, problem = _county(fips, events, events_path, model)
            if problem:
                notes.append(Verdict("warn", f"{problem}; its lengthscale is NaN", "crs"))
            counties.append(county)
            name = f"lengthscale_{fips}"
            variables[name] = tuple(a * county.factor for a in variables["sigma_x"])
            labels[name] = f"lengthscale {fips}"
            units[name] = "miles"
            scale_of[name] = ("sigma_x", county.factor)
    stats_keys = [k for k in ("loglik", "logprior", "accepted") if all(k in c.stats for c in used)]
    draws = Draws(
        run_dir=run_dir,
        chain_ids=tuple(c.chain_id for c in used),
        param_names=names,
        variables=variables,
        labels=labels,
        units=units,
        checked=frozenset(checked),
        scale_of=scale_of,
        iterations=tuple(c.iterations for c in used),
        stats={k: tuple(c.stats[k] for c in used) for k in stats_keys},
        model=model,
        config_sha256=str(first.attrs["config_sha256"]),
        time_unit=time_unit,
        counties=tuple(counties),
    )
    return draws, notes, chains


# --------------------------------------------------------------------------- statistics


def _arviz() -> Any:
    import arviz

    return arviz


def _convergence(matrix: np.ndarray) -> tuple[float, float, float, float]:
    """arviz's rank R-hat, bulk ESS, tail ESS and MCSE of the mean of a (chain, draw) array.

    NaN where arviz cannot compute them (fewer than 4 draws, non-finite draws, R-hat of one
    chain), without arviz's warnings.
    """
    nan = float("nan")
    if matrix.shape[1] < MIN_DRAWS or not np.all(np.isfinite(matrix)):
        return nan, nan, nan, nan
    az = _arviz()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rhat = float(az.rhat(matrix, method="rank")) if matrix.shape[0] >= 2 else nan
        ess_bulk = float(az.ess(matrix, method="bulk"))
        ess_tail = float(az.ess(matrix, method="tail"))
        mcse = float(az.mcse(matrix, method="mean"))
    return rhat, ess_bulk, ess_tail, mcse


def _summary(pooled: np.ndarray) -> tuple[float, float, float, float, float]:
    """Median, 2.5% and 97.5% quantiles, mean and sd (``ddof=1``) of the finite draws."""
    pooled = pooled[np.isfinite(pooled)]
    if pooled.size == 0:
        nan = float("nan")
        return nan, nan, nan, nan, nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        median, lo, hi = np.quantile(pooled, [0.5, 0.025, 0.975])
        mean = float(np.mean(pooled))
        sd = float(np.std(pooled, ddof=1)) if pooled.size > 1 else float("nan")
    return float(median), float(lo), float(hi), mean, sd


def _rows(draws: Draws) -> tuple[list[SummaryRow], list[SummaryRow]]:
    conv: dict[str, tuple[float, float, float, float]] = {}
    for name in draws.variables:
        if name not in draws.scale_of:
            conv[name] = _convergence(draws.matrix(name))
    params: list[SummaryRow] = []
    derived: list[SummaryRow] = []
    for name, arrays in draws.variables.items():
        if name in draws.scale_of:
            base, factor = draws.scale_of[name]
            rhat, ess_b, ess_t, mcse = conv[base]
            mcse *= abs(factor)
        else:
            rhat, ess_b, ess_t, mcse = conv[name]
        median, lo, hi, mean, sd = _summary(np.concatenate(arrays))
        row = SummaryRow(
            name=name,
            label=draws.labels[name],
            unit=draws.units[name],
            kind="parameter" if name in draws.param_names else "derived",
            median=median,
            q2_5=lo,
            q97_5=hi,
            mean=mean,
            sd=sd,
            rhat=rhat,
            ess_bulk=ess_b,
            ess_tail=ess_t,
            mcse_mean=mcse,
            checked=name in draws.checked,
        )
        (params if row.kind == "parameter" else derived).append(row)
    return params, derived


# --------------------------------------------------------------------------- verdicts


def _chain_verdicts(chains: Sequence[_Chain], draws: Draws) -> list[Verdict]:
    out: list[Verdict] = []
    used = [c for c in chains if c.iterations.size > 0]
    for c in used:
        for name in draws.param_names:
            values = c.after_burn_params[name]  # before thinning: no NaN hides between kept draws
            bad = ~np.isfinite(values)
            if bad.any():
                k = int(np.count_nonzero(bad))
                it = int(c.after_burn_iterations[np.flatnonzero(bad)[0]])
                kinds = "/".join(
                    s for s, m in (("NaN", np.isnan(values)), ("inf", np.isinf(values))) if m.any()
                )
                out.append(
                    Verdict(
                        "fail",
                        f"chain {c.chain_id}: {k} {kinds} draw(s) of {name} (first at iteration "
                        f"{it}); the likelihood or sampler broke down: check the chain's log",
                        "nonfinite",
                        chain=c.chain_id,
                        parameter=name,
                    )
                )
        after = c.after_burn_params
        n_after = len(next(iter(after.values())))
        if n_after >= 2 and all(
            np.all(np.isfinite(a)) and np.all(a == a[0]) for a in after.values()
        ):
            out.append(
                Verdict(
                    "fail",
                    f"chain {c.chain_id} is stuck: no accepted proposal in its {n_after} draws "
                    f"after burn-in (iterations {int(c.after_burn_iterations[0])}.."
                    f"{int(c.after_burn_iterations[-1])}); check its initial values and proposal "
                    "scale",
                    "stuck",
                    chain=c.chain_id,
                )
            )
    lengths = {c.chain_id: int(c.iterations.size) for c in used}
    longest = max(lengths.values())
    short = [cid for cid, n in lengths.items() if n < SHORT_CHAIN_FRACTION * longest]
    for cid in short:
        out.append(
            Verdict(
                "warn",
                f"chain {cid} is much shorter than the others: {lengths[cid]} draws after "
                f"burn-in, the longest has {longest}; R-hat and ESS use only the first "
                f"{draws.common_draws} draws of every chain",
                "short",
                chain=cid,
            )
        )
    if len(set(lengths.values())) > 1:
        total = sum(lengths.values())
        out.append(
            Verdict(
                "ok",
                f"chains differ in length ({min(lengths.values())}..{longest} draws after "
                f"burn-in): R-hat, ESS and MCSE use the common prefix of {draws.common_draws} "
                f"draws per chain; medians and intervals use all {total} draws",
                "prefix",
            )
        )
    if len(used) == 1:
        out.append(
            Verdict(
                "warn",
                f"only one chain ({used[0].path.name}) has draws: R-hat needs at least two "
                "chains, so between-chain convergence is not checked",
                "one_chain",
            )
        )
    return out


def _row_verdicts(rows: Sequence[SummaryRow], draws: Draws, nonfinite: set[str]) -> list[Verdict]:
    out: list[Verdict] = []
    checked = [r for r in rows if r.checked]
    rhat_flag = ess_flag = False
    n_chains = len(draws.chain_ids)
    for r in checked:
        if r.name in nonfinite:
            continue  # already failed, naming the chain
        if draws.common_draws < MIN_DRAWS:
            continue  # one verdict below
        if math.isnan(r.rhat) and n_chains >= 2:
            rhat_flag = True
            out.append(
                Verdict(
                    "fail",
                    f"R-hat of {r.label} cannot be computed",
                    "rhat",
                    parameter=r.name,
                )
            )
        elif r.rhat > RHAT_FAIL:
            rhat_flag = True
            out.append(
                Verdict(
                    "fail",
                    f"R-hat of {r.label} is {r.rhat:.3f} > {RHAT_FAIL}: the chains disagree; run "
                    "longer or check for a stuck or diverging chain",
                    "rhat",
                    parameter=r.name,
                )
            )
        elif r.rhat > RHAT_WARN:
            rhat_flag = True
            out.append(
                Verdict(
                    "warn",
                    f"R-hat of {r.label} is {r.rhat:.3f} > {RHAT_WARN}: not yet converged; run "
                    "longer",
                    "rhat",
                    parameter=r.name,
                )
            )
        low = [
            (kind, value)
            for kind, value in (("bulk", r.ess_bulk), ("tail", r.ess_tail))
            if not value >= ESS_WARN
        ]
        if low:
            ess_flag = True
            what = ", ".join(f"{kind} ESS {value:.0f}" for kind, value in low)
            out.append(
                Verdict(
                    "warn",
                    f"{r.label}: {what} < {ESS_WARN:.0f}; its intervals are unreliable: run "
                    "longer or more chains",
                    "ess",
                    parameter=r.name,
                )
            )
    if draws.common_draws < MIN_DRAWS:
        out.append(
            Verdict(
                "fail",
                f"only {draws.common_draws} draw(s) per chain in the common prefix; R-hat and ESS "
                f"need at least {MIN_DRAWS}: wait for more draws or lower --burn/--thin",
                "too_few",
            )
        )
        return out
    usable = [r for r in checked if r.name not in nonfinite]
    if usable and not rhat_flag and n_chains >= 2:
        worst = max(usable, key=lambda r: r.rhat)
        out.append(
            Verdict(
                "ok",
                f"R-hat <= {RHAT_WARN} for every parameter (largest {worst.rhat:.4f}, "
                f"{worst.label})",
                "rhat",
            )
        )
    if usable and not ess_flag:
        worst = min(usable, key=lambda r: min(r.ess_bulk, r.ess_tail))
        kind = "bulk" if worst.ess_bulk <= worst.ess_tail else "tail"
        out.append(
            Verdict(
                "ok",
                f"bulk and tail ESS >= {ESS_WARN:.0f} for every parameter (smallest "
                f"{min(worst.ess_bulk, worst.ess_tail):.0f}, {worst.label} {kind})",
                "ess",
            )
        )
    return out


def _sort_verdicts(verdicts: Sequence[Verdict]) -> tuple[Verdict, ...]:
    order = {"fail": 0, "warn": 1, "ok": 2}
    return tuple(sorted(verdicts, key=lambda v: order[v.level]))  # stable within a level


# --------------------------------------------------------------------------- diagnose


def _burn_description(options: DiagnoseOptions, chains: Sequence[_Chain]) -> str:
    if options.burn is None:
        warmup = max(int(c.attrs.get("warmup", 0) or 0) for c in chains)
        text = f"warm-up dropped (the run's first {warmup} iterations)"
    elif options.burn == 0:
        text = "no burn-in (warm-up draws kept)"
    else:
        text = f"burn-in: iterations < {options.burn} dropped"
    if options.thin > 1:
        text += f"; thinned: every {options.thin}th remaining draw kept"
    return text


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
    draws, notes, chains = _load(run_dir, options)
    params, derived = _rows(draws)
    nonfinite = {
        name
        for name in draws.variables
        if not all(np.all(np.isfinite(a)) for a in draws.variables[name])
    }
    verdicts = (
        notes + _chain_verdicts(chains, draws) + _row_verdicts(params + derived, draws, nonfinite)
    )
    used_ids = set(draws.chain_ids)
    summaries = tuple(
        ChainSummary(
            chain_id=c.chain_id,
            path=c.path,
            draws_committed=c.n_committed,
            draws_used=int(c.iterations.size) if c.chain_id in used_ids else 0,
            first_iteration=int(c.iterations[0]) if c.iterations.size else None,
            last_iteration=int(c.iterations[-1]) if c.iterations.size else None,
            acceptance=c.acceptance,
            iterations_done=c.iterations_done,
            iterations_planned=int(c.attrs.get("iterations", 0) or 0),
            finished=c.finished,
        )
        for c in chains
    )
    report = Report(
        run_dir=run_dir,
        config_sha256=draws.config_sha256,
        model=draws.model,
        time_unit=draws.time_unit,
        options=options,
        burn_description=_burn_description(options, chains),
        chains=summaries,
        common_draws=draws.common_draws,
        parameters=tuple(params),
        derived=tuple(derived),
        counties=draws.counties,
        verdicts=_sort_verdicts(verdicts),
        draws=draws,
    )
    log.info(
        "diagnosed %s: %d chains, %d draws each in common, status %s",
        run_dir,
        len(draws.chain_ids),
        draws.common_draws,
        report.status,
    )
    return report


def exit_code(report: Report) -> int:
    """0, or :data:`STRICT_FAILURE_EXIT_CODE` when ``options.strict`` and a verdict fails."""
    if report.options.strict and report.status == "fail":
        return STRICT_FAILURE_EXIT_CODE
    return 0


# --------------------------------------------------------------------------- rendering


def _num(x: float, spec: str = ".4g") -> str:
    if x is None:
        return "-"
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return format(x, spec)


def _ess(x: float) -> str:
    return _num(x, ".0f")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 2) -> list[str]:
    """Aligned text columns: the first ``left`` columns left-aligned, the rest right-aligned."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        parts = [
            str(c).ljust(w) if i < left else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    return [line(header), *[line(r) for r in rows]]


def format_table(report: Report) -> str:
    """A readable terminal report: header, posterior table, chains, verdicts.

    Parameters
    ----------
    report
        From :func:`diagnose`.

    Returns
    -------
    str
        Lines joined by newlines, ending with a newline.
    """
    used = report.used_chains
    lines = [
        f"run        {report.run_dir}",
        f"config     sha256 {report.config_sha256[:16]}  model {report.model}  "
        f"time unit {report.time_unit}",
        f"chains     {len(used)} used of {len(report.chains)}; {report.common_draws} draws per "
        f"chain in common, {sum(c.draws_used for c in used)} in all",
        f"burn-in    {report.burn_description}",
        "",
    ]
    header = [
        "quantity",
        "unit",
        "median",
        "2.5%",
        "97.5%",
        "mean",
        "sd",
        "R-hat",
        "ESS bulk",
        "ESS tail",
        "MCSE mean",
    ]
    body: list[list[str]] = []
    for i, r in enumerate(report.rows):
        if i == len(report.parameters) and report.derived:
            body.append(["derived:", "", "", "", "", "", "", "", "", "", ""])
        body.append(
            [
                r.label,
                r.unit,
                _num(r.median),
                _num(r.q2_5),
                _num(r.q97_5),
                _num(r.mean),
                _num(r.sd, ".3g"),
                _num(r.rhat, ".3f"),
                _ess(r.ess_bulk),
                _ess(r.ess_tail),
                _num(r.mcse_mean, ".2g"),
            ]
        )
    lines += _table(header, body)
    lines.append("(median and 95% interval from all retained draws; R-hat rank-normalised split)")
    if report.counties:
        lines.append("")
        lines += _table(
            ["county", "latitude", "density /mi^2", "events", "miles per sigma_x"],
            [
                [
                    c.fips,
                    _num(c.latitude, ".4f"),
                    _num(c.density, ".6g") if c.density is not None else "-",
                    str(c.n_events),
                    _num(c.factor, ".5g"),
                ]
                for c in report.counties
            ],
            left=1,
        )
    lines.append("")
    chain_rows = []
    for c in report.chains:
        iters = f"{c.first_iteration}..{c.last_iteration}" if c.first_iteration is not None else "-"
        acc = f"{c.acceptance:.3f}" if c.acceptance is not None else "-"
        status = "finished" if c.finished else f"at {c.iterations_done}/{c.iterations_planned}"
        if not c.used:
            status += ", not used"
        chain_rows.append(
            [
                str(c.chain_id),
                c.path.name,
                str(c.draws_committed),
                str(c.draws_used),
                iters,
                acc,
                status,
            ]
        )
    lines += _table(
        ["chain", "file", "committed", "used", "iterations used", "acceptance", "status"],
        chain_rows,
        left=2,
    )
    lines.append("")
    lines.append(f"verdict: {report.status.upper()}")
    for v in report.verdicts:
        lines.append(f"  {v.level.upper():<4}  {v.message}")
    return "\n".join(lines) + "\n"


def _clean(x: Any) -> Any:
    """JSON-safe value: non-finite floats become None."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def to_json(report: Report) -> dict[str, Any]:
    """The report as a JSON-serialisable dict (non-finite numbers become ``null``).

    Keys: ``run_dir``, ``config_sha256``, ``model``, ``time_unit``, ``status``, ``options``,
    ``burn``, ``common_draws``, ``chains``, ``parameters``, ``derived``, ``counties``,
    ``verdicts``, ``thresholds``.
    """
    from . import __version__

    o = report.options
    out = {
        "hawkes_version": __version__,
        "run_dir": str(report.run_dir),
        "config_sha256": report.config_sha256,
        "model": report.model,
        "time_unit": report.time_unit,
        "status": report.status,
        "options": {
            "burn": o.burn,
            "thin": o.thin,
            "counties": list(o.counties),
            "strict": o.strict,
            "events": None if o.events is None else str(o.events),
        },
        "burn": report.burn_description,
        "common_draws": report.common_draws,
        "chains": [c.as_dict() for c in report.chains],
        "parameters": [r.as_dict() for r in report.parameters],
        "derived": [r.as_dict() for r in report.derived],
        "counties": [c.as_dict() for c in report.counties],
        "verdicts": [v.as_dict() for v in report.verdicts],
        "thresholds": {"rhat_warn": RHAT_WARN, "rhat_fail": RHAT_FAIL, "ess_warn": ESS_WARN},
    }
    return _clean(out)


def to_csv(report: Report) -> str:
    """One CSV row per parameter and derived quantity (full float precision, ``nan`` kept).

    Columns: ``name, label, kind, unit, median, q2.5, q97.5, mean, sd, rhat, ess_bulk,
    ess_tail, mcse_mean``.
    """
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["name", "label", "kind", "unit", *_CSV_STATS])
    for r in report.rows:
        writer.writerow(
            [r.name, r.label, r.kind, r.unit] + [repr(float(getattr(r, k))) for k in _STAT_FIELDS]
        )
    return buf.getvalue()


# --------------------------------------------------------------------------- arviz export


def _draws_of(
    source: Report | Draws | Path | str, options: DiagnoseOptions | None
) -> tuple[Draws, DiagnoseOptions]:
    if isinstance(source, Report):
        return source.draws, source.options
    if isinstance(source, Draws):
        return source, options or DiagnoseOptions()
    opts = options or DiagnoseOptions()
    return load_draws(Path(source), opts), opts


def to_inference_data(
    source: Report | Draws | Path | str, options: DiagnoseOptions | None = None
) -> arviz.InferenceData:
    """The retained draws as an arviz ``InferenceData``.

    Parameters
    ----------
    source
        A run directory (read with ``options``), or a :class:`Report` / :class:`Draws`.
    options
        Burn-in, thinning, counties when ``source`` is a directory.

    Returns
    -------
    arviz.InferenceData
        ``posterior``: every parameter and derived quantity, dims ``(chain, draw)``, the chain
        coordinate holding the chain ids; chains are cut to the common prefix (arviz needs equal
        lengths). ``sample_stats``: ``lp`` (log posterior), ``loglik``, ``logprior``,
        ``accepted`` and ``iteration`` where the chain files have them. Variables carry ``units``
        and ``label`` attributes; the groups carry the run's ``config_sha256``, ``model``,
        ``time_unit``, ``burn`` and ``thin``.
    """
    az = _arviz()
    draws, opts = _draws_of(source, options)
    n = draws.common_draws
    posterior = {name: draws.matrix(name) for name in draws.variables}
    stats: dict[str, np.ndarray] = {
        "iteration": np.stack([it[:n] for it in draws.iterations]).astype(np.int64)
    }
    for key, arrays in draws.stats.items():
        stats[key] = np.stack([a[:n] for a in arrays])
    if "accepted" in stats:
        stats["accepted"] = stats["accepted"] != 0
    if "loglik" in stats and "logprior" in stats:
        stats["lp"] = stats["loglik"] + stats["logprior"]
    attrs = {
        "run_dir": str(draws.run_dir),
        "config_sha256": draws.config_sha256,
        "model": int(draws.model),
        "time_unit": draws.time_unit,
        "burn": -1 if opts.burn is None else int(opts.burn),
        "burn_is_warmup": int(opts.burn is None),
        "thin": int(opts.thin),
        "created_by": "hawkes-diagnose",
    }
    idata = az.from_dict(
        posterior=posterior,
        sample_stats=stats,
        coords={"chain": list(draws.chain_ids), "draw": np.arange(n)},
        attrs=attrs,
    )
    for group in (idata.posterior, idata.sample_stats):
        group.attrs.update(attrs)
    for name in draws.variables:
        idata.posterior[name].attrs["units"] = draws.units[name]
        idata.posterior[name].attrs["label"] = draws.labels[name]
    return idata


def write_netcdf(
    source: Report | Draws | Path | str,
    path: Path,
    options: DiagnoseOptions | None = None,
) -> Path:
    """Write :func:`to_inference_data` to a netCDF file (``arviz.from_netcdf`` reads it back).

    Parameters
    ----------
    source
        A :class:`Report`, :class:`Draws` or a run directory (read with ``options``).
    path
        Target file (``.nc``); overwritten if it exists. Its folder must exist.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    UsageError
        The file cannot be written.
    """
    path = Path(path)
    idata = to_inference_data(source, options)
    if not path.parent.is_dir():
        raise UsageError(f"cannot write {path}: folder {path.parent} does not exist")
    try:
        idata.to_netcdf(str(path))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot write the netCDF file {path}: {exc}") from exc
    log.info("wrote %s", path)
    return path


# --------------------------------------------------------------------------- plots


def _matplotlib() -> Any:
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure


def _title(draws: Draws, name: str) -> str:
    unit = draws.units[name]
    return f"{draws.labels[name]} ({unit})" if unit else draws.labels[name]


def write_plots(
    source: Report | Draws | Path | str,
    options: DiagnoseOptions | None,
    out_dir: Path,
) -> list[Path]:
    """Write trace, rank and posterior plots as PNG files.

    Parameters
    ----------
    source
        A :class:`Report` (its draws are reused), :class:`Draws`, or a run directory (read with
        ``options``).
    options
        Burn-in, thinning, counties when ``source`` is a directory; otherwise ignored.
    out_dir
        Folder for the files (created).

    Returns
    -------
    list of Path
        ``trace.png`` (per parameter: density per chain and the trace), ``rank.png`` (rank
        histograms per chain, flat when the chains agree) and ``posterior.png`` (every parameter
        and derived quantity in reporting units, median and equal-tailed 95% interval marked).
    """
    az = _arviz()
    Figure = _matplotlib()
    draws, opts = _draws_of(source, options)
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the plot folder {out_dir}: {exc}") from exc
    idata = to_inference_data(draws, opts)
    n_chains, n = len(draws.chain_ids), draws.common_draws
    finite = {
        name
        for name, arrays in draws.variables.items()
        if all(np.isfinite(a).all() for a in arrays)
    }
    left_out = [name for name in draws.variables if name not in finite]
    params = [p for p in draws.param_names if p in finite]
    what = (
        f"{draws.run_dir.name}: model {draws.model}, {n_chains} chain(s) x {n} draws after burn-in"
    )
    if left_out:
        what += f"\n(not plotted, NaN/inf draws: {', '.join(draws.labels[v] for v in left_out)})"
        log.warning("plots leave out %s: NaN or inf draws", ", ".join(left_out))
    if not params:
        raise UsageError("nothing to plot: every parameter has NaN or inf draws")
    written: list[Path] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")

        fig = Figure(figsize=(12, 2.6 * len(params)), layout="constrained")
        axes = fig.subplots(len(params), 2, squeeze=False)
        az.plot_trace(
            idata,
            var_names=params,
            axes=axes,
            compact=True,
            chain_prop="color",
            legend=n_chains <= 10,
            show=False,
        )
        for i, name in enumerate(params):
            axes[i, 0].set_title(f"{_title(draws, name)}: density per chain")
            axes[i, 0].set_xlabel(_title(draws, name))
            axes[i, 1].set_title(f"{_title(draws, name)}: trace")
            axes[i, 1].set_xlabel("draw (after burn-in)")
            axes[i, 1].set_ylabel(draws.units[name] or "value")
        fig.suptitle(f"Trace plots — {what}")
        written.append(_save(fig, out_dir / "trace.png"))

        fig = Figure(figsize=(12, 2.6 * len(params)), layout="constrained")
        axes = fig.subplots(len(params), 1, squeeze=False)[:, 0]
        az.plot_rank(
            idata, var_names=params, ax=axes, kind="bars" if n_chains <= 8 else "vlines", show=False
        )
        for ax, name in zip(axes, params, strict=True):
            ax.set_title(f"{_title(draws, name)}: rank plot (uniform when the chains agree)")
            ax.set_xlabel("rank of the draw among all chains")
        fig.suptitle(f"Rank plots — {what}")
        written.append(_save(fig, out_dir / "rank.png"))

        # Table 1 in pictures: the parameters in reporting units, then the derived quantities
        names = [f"{p}_weeks" if f"{p}_weeks" in finite else p for p in params]
        names += [
            v
            for v in draws.variables
            if v in finite and v not in draws.param_names and not v.endswith("_weeks")
        ]
        ncols = 3 if len(names) > 4 else len(names)
        nrows = math.ceil(len(names) / ncols)
        fig = Figure(figsize=(4.5 * ncols, 3.2 * nrows), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
        az.plot_posterior(
            idata,
            var_names=names,
            ax=axes[: len(names)],
            point_estimate="median",
            hdi_prob="hide",
            round_to=4,
            textsize=10,
            show=False,
        )
        for ax, name in zip(axes, names, strict=False):
            med, lo, hi = np.quantile(np.concatenate(draws.variables[name]), [0.5, 0.025, 0.975])
            ax.axvline(lo, color="k", linestyle="--", linewidth=1)
            ax.axvline(hi, color="k", linestyle="--", linewidth=1)
            sub = f"median {med:.4g}, 95% interval ({lo:.4g}, {hi:.4g})"
            ax.set_title(f"{_title(draws, name)}\n{sub}", fontsize=10)
        for ax in axes[len(names) :]:
            ax.set_visible(False)
        fig.suptitle(f"Posterior (dashed: equal-tailed 95% interval) — {what}")
        written.append(_save(fig, out_dir / "posterior.png"))
    return written


def _save(fig: Any, path: Path) -> Path:
    try:
        fig.savefig(path, dpi=100)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc}") from exc
    log.info("wrote %s", path)
    return path
