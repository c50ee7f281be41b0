"""The goodness-of-fit pictures (PNG, matplotlib's Agg backend): the time-rescaling QQ plot, the
daily counts, and maps of county values and of the conditional intensity.

Maps of lon/lat data are drawn in an equal-area projection (:data:`MAP_CRS`, the contiguous US
Albers, via pyproj), over the contiguous US (Alaska, Hawaii and the territories are left out of
the picture, not of the numbers); data in other coordinates are drawn as they are.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from ..diagnostics.plots import save_png

log = logging.getLogger(__name__)

#: The maps' projection for lon/lat data (NAD83 / Conus Albers, equal area).
MAP_CRS = "EPSG:5070"
#: State codes not drawn on lon/lat maps (Alaska, Hawaii, territories).
OFF_MAP_STATES = frozenset({"02", "15", "60", "64", "66", "68", "69", "70", "72", "74", "78"})


def _figure(width: float = 8.0, height: float = 5.0) -> Any:
    import matplotlib

    if "matplotlib.pyplot" not in __import__("sys").modules:
        matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def save(fig: Any, path: Path) -> Path:
    """Write ``fig`` as PNG atomically, at the maps' resolution (110 dpi)."""
    return save_png(fig, path, dpi=110)


def qq_plot(tau: np.ndarray, path: Path, title: str) -> Path:
    """Uniform QQ plot of ``1 - exp(-gap)`` of the sorted rescaled times, with the 95% KS band."""
    gaps = np.diff(np.concatenate([[0.0], np.sort(tau)]))
    z = np.sort(-np.expm1(-gaps))
    n = z.size
    q = (np.arange(1, n + 1) - 0.5) / n
    if n > 20_000:  # plot a thinned set of quantiles; the band and test use all
        pick = np.linspace(0, n - 1, 20_000).astype(np.int64)
        q, z = q[pick], z[pick]
    band = 1.36 / np.sqrt(n)
    fig = _figure(5.5, 5.5)
    ax = fig.subplots()
    ax.plot(q, z, ".", ms=2, color="C0", label="rescaled gaps")
    ax.plot([0, 1], [0, 1], "k-", lw=1)
    ax.plot([0, 1], [band, 1 + band], "r--", lw=0.8, label="95% KS band")
    ax.plot([0, 1], [-band, 1 - band], "r--", lw=0.8)
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="uniform quantile", ylabel="1 - exp(-gap)")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="upper left", fontsize=8)
    return save(fig, path)


def counts_plot(
    times: np.ndarray, observed: np.ndarray, expected: np.ndarray, path: Path, unit: str
) -> Path:
    """Observed against expected counts per cell (day), with a 95% Poisson band."""
    from scipy import stats

    fig = _figure(9.0, 4.5)
    ax = fig.subplots()
    lo = stats.poisson.ppf(0.025, expected)
    hi = stats.poisson.ppf(0.975, expected)
    ax.fill_between(times, lo, hi, step="post", color="C1", alpha=0.25, label="95% Poisson band")
    ax.step(times, expected, where="post", color="C1", lw=1, label="expected")
    ax.step(times, observed, where="post", color="C0", lw=0.8, label="observed")
    ax.set(xlabel=f"time ({unit})", ylabel="events per cell")
    ax.set_title("Observed vs expected counts (ground process)", fontsize=10)
    ax.legend(fontsize=8)
    return save(fig, path)


def _rings(geoms: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Exterior rings of every polygon part and the geometry each belongs to."""
    import shapely

    parts, owner = shapely.get_parts(geoms, return_index=True)
    rings = shapely.get_exterior_ring(parts)
    coords, ring_of = shapely.get_coordinates(rings, return_index=True)
    splits = np.flatnonzero(np.diff(ring_of)) + 1
    return np.split(coords, splits), owner[np.unique(ring_of)]


class MapBase:
    """Polygons prepared for drawing (projected when lon/lat).

    Parameters
    ----------
    keys : (K,) str
        Polygon keys (FIPS codes).
    geoms : (K,) shapely geometries
        In the events' coordinates.
    lonlat
        Whether the coordinates are lon/lat degrees (then projected to :data:`MAP_CRS` and
        limited to the contiguous US).
    crs
        The polygons' reference system when lon/lat (default NAD83, EPSG:4269).
    """

    def __init__(self, keys: np.ndarray, geoms: np.ndarray, lonlat: bool, crs: str | None) -> None:
        import shapely

        self.keys = np.asarray(keys).astype(str)
        self.lonlat = lonlat
        self.shown = np.ones(self.keys.size, dtype=bool)
        geoms = np.asarray(geoms, dtype=object)
        if lonlat:
            self.shown = ~np.isin(np.char.ljust(self.keys, 2).astype("<U2"), list(OFF_MAP_STATES))
            self.transformer = _transformer(crs or "EPSG:4269")

            def fn(xy: np.ndarray) -> np.ndarray:
                px, py = self.transformer.transform(xy[:, 0], xy[:, 1])
                return np.column_stack([px, py])

            geoms = shapely.transform(geoms[self.shown], fn)
        else:
            geoms = geoms[self.shown]
        self.rings, self.ring_owner = _rings(geoms)
        self.bounds = shapely.total_bounds(geoms)

    def _axes(self, fig: Any, title: str) -> Any:
        ax = fig.subplots()
        ax.set_aspect("equal")
        ax.set_axis_off()
        ax.set_title(title, fontsize=10)
        x0, y0, x1, y1 = self.bounds
        ax.set_xlim(x0, x1)
        ax.set_ylim(y0, y1)
        return ax

    def choropleth(
        self,
        values: np.ndarray,
        path: Path,
        title: str,
        *,
        label: str,
        cmap: str = "viridis",
        log_scale: bool = False,
        centre: float | None = None,
    ) -> Path:
        """Colour each polygon by ``values`` ((K,), NaN grey)."""
        from matplotlib import colors
        from matplotlib.collections import PolyCollection

        v = np.asarray(values, dtype=np.float64)[self.shown][self.ring_owner]
        fig = _figure(10.0, 6.2)
        ax = self._axes(fig, title)
        finite = v[np.isfinite(v)]
        if log_scale:
            pos = finite[finite > 0]
            lo, hi = (pos.min(), pos.max()) if pos.size else (1.0, 10.0)
            norm: Any = colors.LogNorm(vmin=lo, vmax=max(hi, lo * 1.0001))
            v = np.where(v > 0, v, np.nan)
        elif centre is not None:
            span = float(np.nanpercentile(np.abs(finite - centre), 98)) if finite.size else 1.0
            norm = colors.TwoSlopeNorm(vcenter=centre, vmin=centre - span, vmax=centre + span)
        else:
            norm = colors.Normalize(*(np.nanpercentile(finite, [1, 99]) if finite.size else (0, 1)))
        from matplotlib import colormaps

        cmap = colormaps[cmap].with_extremes(bad="lightgrey")
        coll = PolyCollection(
            self.rings,
            array=np.ma.masked_invalid(v),
            cmap=cmap,
            norm=norm,
            edgecolors="none",
            linewidths=0,
        )
        ax.add_collection(coll)
        fig.colorbar(coll, ax=ax, shrink=0.7, label=label)
        return save(fig, path)

    def raster(
        self,
        x_edges: np.ndarray,
        y_edges: np.ndarray,
        values: np.ndarray,
        path: Path,
        title: str,
        *,
        label: str,
    ) -> Path:
        """Draw a (NY, NX) raster in the events' coordinates, polygon outlines on top."""
        from matplotlib import colors
        from matplotlib.collections import LineCollection

        fig = _figure(10.0, 6.2)
        ax = self._axes(fig, title)
        gx, gy = np.meshgrid(x_edges, y_edges)
        if self.lonlat:
            gx, gy = self.transformer.transform(gx, gy)
        v = np.ma.masked_invalid(np.where(values > 0, values, np.nan))
        pos = v.compressed()
        vmax = float(pos.max()) if pos.size else 1.0
        norm = colors.LogNorm(
            vmin=max(vmax * 1e-4, float(pos.min()) if pos.size else 1e-4), vmax=vmax
        )
        mesh = ax.pcolormesh(gx, gy, v, norm=norm, cmap="magma", shading="flat")
        ax.add_collection(LineCollection(self.rings, colors="white", linewidths=0.05, alpha=0.5))
        fig.colorbar(mesh, ax=ax, shrink=0.7, label=label)
        return save(fig, path)


def _transformer(src: str) -> Any:
    """lon/lat -> :data:`MAP_CRS` metres; without pyproj (a core install), a plain
    equirectangular projection at 38 degrees N, in metres, with a WARNING."""
    try:
        import pyproj
    except ImportError:
        log.warning(
            "pyproj is not installed: maps are drawn in a plain lon/lat projection "
            "(pip install 'hawkes[prep]' for the equal-area maps)"
        )
        return _Equirectangular()
    return pyproj.Transformer.from_crs(src, MAP_CRS, always_xy=True)


class _Equirectangular:
    """``transform(lon, lat) -> (x, y)`` in metres, true to scale along 38 degrees N."""

    LAT0 = 38.0
    M_PER_DEG = 111_195.0  # a degree of a great circle on the 6,371 km sphere

    def transform(self, lon: Any, lat: Any) -> tuple[np.ndarray, np.ndarray]:
        scale = self.M_PER_DEG * np.cos(np.radians(self.LAT0))
        return np.asarray(lon, dtype=float) * scale, np.asarray(lat, dtype=float) * self.M_PER_DEG
