"""Systematic errors of the model next to the posterior's width: the trigger mass outside the
study region and the offspring hidden by same-time ties, at the posterior median.

At a million events the posterior sd of ``xi0`` is ~0.1%; two simplifications of the paper's
likelihood can each move ``xi0`` by more:

- **Edges.** The compensator counts each event's whole Gaussian trigger mass, but offspring
  that would land outside the study region are never observed. With a share ``L`` of the
  trigger mass outside (weighted by each event's remaining window, as in the compensator),
  the paper's likelihood (``model.edge: none``) fits ``xi0`` about ``L * xi0`` too low (to
  first order: it expects ``xi0 * N`` offspring and sees ``(1 - L) xi0 N``).
  ``model.edge: censored`` counts only the mass inside.
- **Ties.** An event cannot trigger another at the same time. On a lattice of times of
  spacing ``delta`` (whole days), offspring within the same tick are hidden: a share
  ``H = 1 - (sigma_t / delta) (1 - exp(-delta / sigma_t))`` of them (uniform within the tick);
  ``xi0`` comes out about ``H * xi0`` low. Continuous times (``hawkes-prep hhs --jitter``) have
  no ties.

Each becomes a verdict: WARNING when its implied shift of ``xi0`` exceeds ``xi0``'s posterior
sd and the run does not correct it; otherwise an ``ok`` line with the figures.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..data import EventData
from ..engine.region import BoundaryRegion
from ..vocab import EDGE_CENSORED, EDGE_NONE, EDGE_RENORMALIZED
from .records import SummaryRow, Verdict

log = logging.getLogger(__name__)

__all__ = ["EdgeShare", "edge_share", "systematic_verdicts", "tie_share"]

#: Events whose trigger mass is computed for the edge share (a seeded random subsample): the
#: share's Monte Carlo error is then ~0.1 / sqrt(20000) < 1e-3 of the mass.
EDGE_SAMPLE = 20_000


@dataclass(frozen=True)
class EdgeShare:
    """The share of trigger mass outside the study region.

    Attributes
    ----------
    share : float
        Compensator-weighted mean of ``1 - M_n`` (0..1).
    events : int
        Events it was computed on (a random subsample of at most :data:`EDGE_SAMPLE`).
    region : str
        What the region is.
    """

    share: float
    events: int
    region: str


def edge_share(
    region: Any, events: EventData, model: int, sigma_x: float, sigma_t: float, seed: int = 0
) -> EdgeShare:
    """The share of the trigger mass outside ``region`` at ``sigma_x``, ``sigma_t``.

    Parameters
    ----------
    region
        A :class:`~hawkes_cli.engine.region.RectangleRegion` or ``BoundaryRegion``.
    events
        The run's events (locations as in the file).
    model
        1 or 2 (model 2: lengthscale ``sigma_x / sqrt(density)``).
    sigma_x, sigma_t
        The posterior medians (coordinate units; time units).
    """
    rng = np.random.default_rng(seed)
    n = events.n
    rows = np.sort(rng.choice(n, size=min(n, EDGE_SAMPLE), replace=False))
    s: np.ndarray | float = sigma_x
    if model == 2 and events.density is not None:
        s = sigma_x / np.sqrt(events.density[rows])
    x, y = events.x[rows], events.y[rows]
    if isinstance(region, BoundaryRegion):  # the segment sums: no raster for a subsample
        mass = region.mass_error(x, y, s, exact=True)[0]
    else:
        mass = region.mass(x, y, s)
    window = float(events.time[-1])
    weight = -np.expm1(-(window - events.time[rows]) / sigma_t)
    total = float(np.sum(weight))
    share = float(np.sum(weight * (1.0 - mass)) / total) if total > 0 else 0.0
    return EdgeShare(share=share, events=int(rows.size), region=region.describe)


def tie_share(time: np.ndarray, sigma_t: float) -> tuple[float, float | None]:
    """(share of offspring hidden by ties, the lattice spacing) at ``sigma_t``.

    Times without ties give ``(0, None)``. With ties, the spacing is the smallest gap between
    distinct times (a lattice such as whole days).
    """
    unique = np.unique(np.asarray(time, dtype=np.float64))
    if unique.size == len(time) or unique.size < 2:
        return 0.0, None
    delta = float(np.min(np.diff(unique)))
    ratio = delta / sigma_t
    return float(1.0 - (-math.expm1(-ratio)) / ratio), delta


def systematic_verdicts(
    config: Any, events: EventData, rows: dict[str, SummaryRow], region: Any
) -> list[Verdict]:
    """The edge and tie verdicts of a run (empty when the run lacks the parameters).

    Parameters
    ----------
    config
        The run's config (its ``model.edge``).
    events
        The run's events.
    rows
        Summary rows by parameter name (``xi0``, ``sigma_x``, ``sigma_t`` are used).
    region
        The run's study region (:func:`hawkes_cli.regions.region_of`), or None when unknown.
    """
    if not {"xi0", "sigma_x", "sigma_t"} <= set(rows):
        return []
    xi0, sd = rows["xi0"].median, rows["xi0"].sd
    sigma_x, sigma_t = rows["sigma_x"].median, rows["sigma_t"].median
    out: list[Verdict] = []
    if region is not None:
        found = edge_share(region, events, config.model.kind, sigma_x, sigma_t)
        out.append(_edge_verdict(found, config.model.edge, xi0, sd, sigma_x))
    hidden, delta = tie_share(events.time, sigma_t)
    if delta is not None:
        out.append(_tie_verdict(hidden, delta, xi0, sd, sigma_t))
    return out


def _sds(shift: float, sd: float) -> str:
    return f"{shift / sd:.1f} posterior sds" if sd > 0 else "more than its posterior sd"


def _edge_verdict(found: EdgeShare, edge: str, xi0: float, sd: float, sigma_x: float) -> Verdict:
    what = (
        f"edge: {100 * found.share:.2f}% of the trigger mass falls outside the study region "
        f"({found.region}) at the posterior median (sigma_x {sigma_x:.4g}; {found.events:,} "
        "events)"
    )
    shift = found.share * xi0
    if edge in (EDGE_CENSORED, EDGE_RENORMALIZED):
        return Verdict("ok", f"{what}; counted by model.edge: {edge}", "edge")
    if edge == EDGE_NONE and shift > sd:
        return Verdict(
            "warn",
            f"{what}; uncorrected (model.edge: {EDGE_NONE}) it pulls xi0 down by about "
            f"{shift:.3g} ({100 * found.share:.2f}%), {_sds(shift, sd)}: set model.edge: "
            f"{EDGE_CENSORED}",
            "edge",
            parameter="xi0",
        )
    return Verdict("ok", f"{what}; below xi0's posterior sd ({sd:.3g})", "edge")


def _tie_verdict(hidden: float, delta: float, xi0: float, sd: float, sigma_t: float) -> Verdict:
    what = (
        f"ties: times on a lattice of {delta:.4g} time units hide {100 * hidden:.2f}% of "
        f"offspring (an event cannot trigger another at its own time; sigma_t {sigma_t:.4g})"
    )
    shift = hidden * xi0
    if shift > sd:
        return Verdict(
            "warn",
            f"{what}; this pulls xi0 down by about {shift:.3g}, {_sds(shift, sd)}: prepare "
            "continuous times (hawkes-prep hhs --jitter)",
            "ties",
            parameter="xi0",
        )
    return Verdict("ok", f"{what}; below xi0's posterior sd ({sd:.3g})", "ties")
