"""The records of ``--gof``: its options, and :class:`GofRun`, the one record its steps pass
along (each step returns a copy with its results added)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import UsageError
from ..model import Params
from ..vocab import PARAM_NAMES

if TYPE_CHECKING:  # pragma: no cover
    from ..config import Config
    from ..data import EventData
    from ..geo import PolygonLayer
    from .branching import BranchingAccumulator
    from .counties import CountyCounts, Locator
    from .lengthscales import Lengthscales

#: Draws used for the branching probabilities by default.
DEFAULT_DRAWS = 20
#: Days per week (the weekly shares, for data in days).
DAYS_PER_WEEK = 7.0


@dataclass(frozen=True)
class GofOptions:
    """What ``--gof`` computes.

    Attributes
    ----------
    burn, thin
        As for ``hawkes-diagnose`` (default burn: the run's warm-up).
    draws
        Posterior draws for the branching probabilities (>= 1; fewer if fewer are retained).
    date
        Time (the data's units) of the conditional-intensity map, or an ISO date when the
        events file records ``origin_date``; None: no intensity map.
    counties
        Polygon file (GEOID key) for the county residuals; default: the config's
        ``data.counties``, else the Census counties for lon/lat data.
    samples
        Kernel points per source for the expected county counts.
    seed
        Seed of the tie-breaking uniforms and the kernel points.
    maps
        Whether to draw the maps.
    """

    burn: int | None = None
    thin: int = 1
    draws: int = DEFAULT_DRAWS
    date: str | None = None
    counties: Path | None = None
    samples: int = 4
    seed: int = 0
    maps: bool = True

    def checked(self) -> GofOptions:
        """These options, or a :class:`~hawkes_cli.errors.UsageError` naming a bad one."""
        if self.draws < 1:
            raise UsageError(f"--gof-draws must be >= 1, got {self.draws}")
        if self.samples < 1:
            raise UsageError(f"--gof-samples must be >= 1, got {self.samples}")
        if self.date is not None:
            parse_date(self.date)
        return self

    def stream(self, which: int) -> np.random.Generator:
        """Random stream ``which`` of :attr:`seed`: 0 breaks ties of lattice times, 1 draws
        the kernel points of the county counts."""
        children = np.random.SeedSequence(self.seed).spawn(2)
        return np.random.default_rng(children[which])


@dataclass(frozen=True, eq=False)
class Posterior:
    """The retained draws ``--gof`` uses.

    Attributes
    ----------
    picked
        Draws evenly spaced over the pooled retained ones (the branching probabilities).
    mean
        The posterior mean of every retained draw (the plug-in fit of the residuals).
    pooled
        Parameter name -> (D,) float64, every retained draw of every chain.
    """

    picked: tuple[Params, ...]
    mean: Params
    pooled: Mapping[str, np.ndarray]

    @property
    def retained(self) -> int:
        """Retained draws D, all chains together."""
        return int(self.pooled[PARAM_NAMES[0]].size)


@dataclass(frozen=True, eq=False)
class Polygons:
    """The polygons of the county outputs, in the events' coordinates.

    Attributes
    ----------
    layer
        Keys (FIPS codes) and geometries.
    locator
        Point location in them.
    event_polygon : (N,) int64
        Each event's polygon index, ``-1`` where none holds it.
    areas : (K,) float64
        Polygon areas, coordinate units squared.
    """

    layer: PolygonLayer
    locator: Locator
    event_polygon: np.ndarray
    areas: np.ndarray


@dataclass(frozen=True, eq=False)
class GofRun:
    """What the steps of ``--gof`` share: the run's inputs, then each step's results.

    Attributes
    ----------
    opts, out_dir
        The options and the (fresh) output folder.
    config, data, area, posterior
        The run's resolved config, its events, the study area (coordinate units squared)
        and the retained draws.
    polygons
        The county polygons, or None when none describe the events.
    branching
        The branching probabilities over :attr:`Posterior.picked` (per event, week, county).
    counts
        Observed and expected counts per polygon at the posterior mean.
    lengthscales
        Effective lengthscale per polygon (miles for lon/lat data, else coordinate units).
    summary
        What ``gof.json`` holds so far, in its order.
    written
        The files written so far, in order.
    """

    opts: GofOptions
    out_dir: Path
    config: Config
    data: EventData
    area: float
    posterior: Posterior
    polygons: Polygons | None = None
    branching: BranchingAccumulator | None = None
    counts: CountyCounts | None = None
    lengthscales: Lengthscales | None = None
    summary: Mapping[str, Any] = field(default_factory=dict)
    written: tuple[Path, ...] = ()

    @property
    def model(self) -> int:
        """The model kind (1 or 2)."""
        return int(self.config.model.kind)

    @property
    def crs(self) -> str:
        """The events' reference system label (``""`` when unset)."""
        return str(self.data.attrs.get("crs", ""))

    @property
    def time_unit(self) -> str:
        """The events' time unit (default ``day``)."""
        return str(self.data.attrs.get("time_unit", "day"))

    @property
    def per_week(self) -> float:
        """Time units per week of the weekly shares (1 unless times are days)."""
        from ..diagnostics.derived import is_days

        return DAYS_PER_WEEK if is_days(self.time_unit) else 1.0

    def wrote(self, *paths: Path, **summary: Any) -> GofRun:
        """This record with ``paths`` written and ``summary`` added to :attr:`summary`."""
        return replace(self, written=self.written + paths, summary={**self.summary, **summary})


def parse_date(text: str) -> float | dt.date:
    """``--date`` as a time in the data's units (a number) or a calendar date (``YYYY-MM-DD``).

    Raises
    ------
    UsageError
        It is neither.
    """
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"--date {text!r} is neither a number nor an ISO date (YYYY-MM-DD)"
        ) from None
