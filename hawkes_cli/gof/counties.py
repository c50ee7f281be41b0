"""County residuals: observed against expected counts per county, and lengthscales per county.

Expected count of county ``c`` over the window ``[0, T]`` (DESIGN section 2, the model's R^2
approximation)::

    Lambda_c = mu0 * C_bg * rho * |c|  +  xi0 * sum_m w_m * P(x_m + s_m Z in c)
    C_bg = sum_m [Phi((T - t_m)/tau_t) - Phi(-t_m/tau_t)],   w_m = 1 - exp(-(T - t_m)/sigma_t)

with ``|c|`` the polygon's area in coordinate units squared and Z standard bivariate normal. The
background part is exact. The trigger part is a Monte Carlo integral over each source's own
kernel: ``samples`` points ``x_m + s_m Z`` per source are located in the polygons, each carrying
``xi0 w_m / samples``. Sampling the kernel rather than the polygon keeps the variance small
when kernels are much narrower than counties (model 2's ``s_m`` in a city is metres) and makes
the sum exact: the county counts plus the mass falling in no polygon (``outside``) equal the
likelihood's compensator ``Lambda(T)`` to rounding.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

from ..model import Params

log = logging.getLogger(__name__)

#: Kernel points drawn per source for the trigger part.
DEFAULT_SAMPLES = 4
_CHUNK = 2_000_000  # points located per call


@dataclass(frozen=True)
class CountyCounts:
    """Observed and expected counts per polygon.

    Attributes
    ----------
    keys : (K,) str
        Polygon keys (FIPS codes).
    observed : (K,) int64
        Events located in each polygon.
    expected : (K,) float64
        Expected events (module docstring); ``expected_background`` + ``expected_trigger``.
    expected_background, expected_trigger : (K,) float64
        The two parts.
    outside_observed : int
        Events in no polygon.
    outside_expected : float
        Expected events in no polygon: the compensator less ``expected.sum()``.
    compensator : float
        ``Lambda(T)``, the likelihood's compensator.
    """

    keys: np.ndarray
    observed: np.ndarray
    expected: np.ndarray
    expected_background: np.ndarray
    expected_trigger: np.ndarray
    outside_observed: int
    outside_expected: float
    compensator: float

    @property
    def pearson(self) -> np.ndarray:
        """``(observed - expected) / sqrt(expected)`` (NaN where nothing is expected)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(
                self.expected > 0,
                (self.observed - self.expected) / np.sqrt(self.expected),
                np.nan,
            )


class Locator:
    """Which polygon holds each point (shapely STRtree; first polygon on shared borders).

    Parameters
    ----------
    geoms : (K,) shapely geometries
        Polygons, in the points' coordinates.
    """

    def __init__(self, geoms: np.ndarray) -> None:
        import shapely

        self.geoms = np.asarray(geoms, dtype=object)
        shapely.prepare(self.geoms)
        self.tree = shapely.STRtree(self.geoms)

    def locate(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Polygon index of each point, ``-1`` where none holds it; shape (N,), int64."""
        import shapely

        out = np.full(x.size, -1, dtype=np.int64)
        for i in range(0, x.size, _CHUNK):
            pts = shapely.points(x[i : i + _CHUNK], y[i : i + _CHUNK])
            hit_pt, hit_poly = self.tree.query(pts, predicate="intersects")
            order = np.lexsort((hit_poly, hit_pt))[::-1]  # first polygon wins (written last)
            out[i + hit_pt[order]] = hit_poly[order]
        return out

    def locate_near(self, x: np.ndarray, y: np.ndarray, hint: np.ndarray) -> np.ndarray:
        """As :meth:`locate`, trying each point's ``hint`` polygon first (``-1``: none); much
        faster when most points lie in their hint (kernel points near their source)."""
        import shapely

        out = np.full(x.size, -1, dtype=np.int64)
        order = np.argsort(hint, kind="stable")
        hs = hint[order]
        bounds = np.searchsorted(hs, np.arange(len(self.geoms) + 1))
        for k in np.unique(hs[hs >= 0]):
            idx = order[bounds[k] : bounds[k + 1]]
            inside = shapely.contains_xy(self.geoms[k], x[idx], y[idx])
            out[idx[inside]] = k
        miss = np.flatnonzero(out < 0)
        if miss.size:
            out[miss] = self.locate(x[miss], y[miss])
        return out


def kernel_scale(sigma_x: float, density: np.ndarray | None, model: int, n: int) -> np.ndarray:
    """Each source's spatial sd ``s_m`` (coordinate units), shape (N,)."""
    if model == 2:
        assert density is not None
        return sigma_x / np.sqrt(np.asarray(density, dtype=np.float64))
    return np.full(n, float(sigma_x))


def background_total(time: np.ndarray, p: Params, window_end: float) -> float:
    """``C_bg = sum_m [Phi((T - t_m)/tau_t) - Phi(-t_m/tau_t)]`` (the background's time mass
    before ``mu0``)."""
    t = np.asarray(time, dtype=np.float64)
    return float(np.sum(ndtr((window_end - t) / p.tau_t) - ndtr(-t / p.tau_t)))


def county_counts(
    time: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    density: np.ndarray | None,
    p: Params,
    *,
    model: int,
    area: float,
    keys: np.ndarray,
    polygon_area: np.ndarray,
    locator: Locator,
    rng: np.random.Generator,
    window_end: float | None = None,
    samples: int = DEFAULT_SAMPLES,
    event_polygon: np.ndarray | None = None,
    mass: np.ndarray | None = None,
) -> CountyCounts:
    """Observed and expected counts per polygon (module docstring).

    Parameters
    ----------
    time, x, y : (N,) float64
        Events, sorted by time.
    density : (N,) float64 or None
        Persons per square mile (model 2).
    p
        Parameters (e.g. the posterior mean).
    model, area
        Model kind; study-region area ``A = 1/rho`` (coordinate units squared).
    keys, polygon_area : (K,)
        Polygon keys and areas (coordinate units squared).
    locator
        Point location in the same polygons.
    rng
        Draws the kernel points (``2 * samples * N`` normals, in blocks of sources).
    window_end
        ``T`` (default: the last event time).
    samples
        Kernel points per source (>= 1).
    event_polygon : (N,) int64, optional
        Polygon of each event when already located.
    mass : (N,) float64, optional
        Each event's trigger mass inside the study region (``model.edge: censored``): the
        compensator counts only it; None: the paper's (all 1).
    """
    t = np.asarray(time, dtype=np.float64)
    T = float(t[-1]) if window_end is None else float(window_end)
    k = len(keys)
    poly = locator.locate(x, y) if event_polygon is None else event_polygon
    observed = np.bincount(poly[poly >= 0], minlength=k).astype(np.int64)
    bg = p.mu0 * background_total(t, p, T) * np.asarray(polygon_area, dtype=np.float64) / area
    weight = p.xi0 * -np.expm1(-(T - t) / p.sigma_t)
    scale = kernel_scale(p.sigma_x, density, model, t.size)
    trig = np.zeros(k)
    per = max(1, _CHUNK // samples)
    for i in range(0, t.size, per):
        sl = slice(i, i + per)
        m = scale[sl].size
        z = rng.standard_normal((2, m, samples))
        px = (x[sl, None] + scale[sl, None] * z[0]).ravel()
        py = (y[sl, None] + scale[sl, None] * z[1]).ravel()
        where = locator.locate_near(px, py, np.repeat(poly[sl], samples))
        w = np.repeat(weight[sl] / samples, samples)
        ok = where >= 0
        trig += np.bincount(where[ok], weights=w[ok], minlength=k)
    inside = weight if mass is None else weight * mass
    compensator = p.mu0 * background_total(t, p, T) + float(inside.sum())
    expected = bg + trig
    return CountyCounts(
        keys=np.asarray(keys),
        observed=observed,
        expected=expected,
        expected_background=bg,
        expected_trigger=trig,
        outside_observed=int(np.count_nonzero(poly < 0)),
        outside_expected=compensator - float(expected.sum()),
        compensator=compensator,
    )
