"""The records of a diagnosis: rows, verdicts, chains, counties, retained draws, the report.

Plain frozen dataclasses with ``as_dict`` views; no reading, statistics or rendering here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .options import DiagnoseOptions

if TYPE_CHECKING:
    from .truth import TruthCheck

__all__ = [
    "LEVELS",
    "STAT_FIELDS",
    "ChainSummary",
    "County",
    "Draws",
    "Report",
    "SummaryRow",
    "Verdict",
]

LEVELS: tuple[str, ...] = ("ok", "warn", "fail")
"""Verdict levels, in increasing severity."""

STAT_FIELDS: tuple[str, ...] = (
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
"""The numeric attributes of a :class:`SummaryRow`, in table order."""


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
        The rank-normalised split R-hat, bulk ESS, tail ESS and MCSE of the mean of R's
        ``posterior`` package (:mod:`~hawkes_cli.diagnostics.stats`), on the common prefix of
        the chains; NaN when they cannot be computed.
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
        out.update({key: float(getattr(self, key)) for key in STAT_FIELDS})
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
        Machine-readable kind: ``rhat``, ``ess``, ``stuck``, ``nonfinite``, ``bound``, ``short``,
        ``prefix``, ``excluded``, ``one_chain``, ``too_few``, ``time_unit``, ``crs``, ``config``,
        ``edge``, ``ties`` (:mod:`.systematic`).
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

    def finite_names(self) -> list[str]:
        """The variables without a NaN or inf draw in any chain, in variable order."""
        return [
            name
            for name, arrays in self.variables.items()
            if all(np.all(np.isfinite(a)) for a in arrays)
        ]


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
    truth
        For simulated events: the parameters they were drawn with against the posterior.
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
    truth: TruthCheck | None = None

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
