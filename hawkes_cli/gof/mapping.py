"""Maps of the goodness of fit (PNG): county choropleths and the conditional-intensity raster.

Maps of lon/lat data are drawn in an equal-area projection (:data:`MAP_CRS`, the contiguous US
Albers, via pyproj), over the contiguous US (Alaska, Hawaii and the territories are left out of
the picture, not of the numbers); data in other coordinates (the synthetic grid) are drawn as
they are, with their coordinate axes.

Every colour means something the figure says: each colour scale covers the whole range of the
values drawn (nothing saturates, so no colour bar needs extend arrows), and polygons without a
value are grey with a legend entry saying why. The axes span the polygons' bounds plus
:data:`MARGIN`, and the PNG is cropped to what is drawn.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from .figures import figure, save

log = logging.getLogger(__name__)

#: The maps' projection for lon/lat data (NAD83 / Conus Albers, equal area).
MAP_CRS = "EPSG:5070"
#: State codes not drawn on lon/lat maps (Alaska, Hawaii, territories).
OFF_MAP_STATES = frozenset({"02", "15", "60", "64", "66", "68", "69", "70", "72", "74", "78"})
#: Space around the polygons' bounds, relative to the larger side.
MARGIN = 0.01
#: Width of the map's axes, inches.
MAP_WIDTH = 7.0
#: Colour of polygons without a value.
MISSING_COLOUR = "lightgrey"
#: Axis labels of maps in the data's own coordinates.
COORD_AXES = ("x (coordinate units)", "y (coordinate units)")
#: Axis labels of lon/lat data drawn as they are (not projected).
LONLAT_AXES = ("longitude (degrees)", "latitude (degrees)")
#: Pearson residuals within this are drawn on a linear part of the symmetric log scale.
LINEAR_WITHIN = 2.0

#: Colour scales: ``counts`` (log, from 1), ``diverging`` (symmetric log around 0),
#: ``linear``, ``log`` (positive values).
SCALES = ("counts", "diverging", "linear", "log")


def color_norm(values: np.ndarray, scale: str) -> Any:
    """A matplotlib norm covering every finite value of ``values`` (positive ones for the log
    scales) on ``scale`` (one of :data:`SCALES`)."""
    from matplotlib import colors

    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if scale in ("counts", "log"):
        pos = v[v > 0]
        lo = 1.0 if scale == "counts" else (float(pos.min()) if pos.size else 1.0)
        hi = float(pos.max()) if pos.size else 10.0
        return colors.LogNorm(vmin=min(lo, hi), vmax=max(hi, lo * 1.0001))
    if scale == "diverging":
        span = max(float(np.abs(v).max()) if v.size else 1.0, LINEAR_WITHIN)
        return colors.SymLogNorm(LINEAR_WITHIN, vmin=-span, vmax=span, base=10)
    if scale == "linear":
        lo, hi = (float(v.min()), float(v.max())) if v.size else (0.0, 1.0)
        return colors.Normalize(lo, hi if hi > lo else lo + 1e-9 * max(abs(lo), 1.0))
    raise ValueError(f"unknown colour scale {scale!r}; one of {', '.join(SCALES)}")


def _nice_ticks(lo: float, hi: float) -> list[float]:
    """Ticks within ``[lo, hi]`` (positive): evenly spaced round numbers within a decade,
    1-2-5 steps over up to 3.5 decades, powers of ten beyond; the ends added when fewer than
    four."""
    from matplotlib.ticker import MaxNLocator

    decades = math.log10(hi / lo)
    if decades < 1:
        ticks = [float(t) for t in MaxNLocator(nbins=6).tick_values(lo, hi) if lo <= t <= hi]
    else:
        steps = (1,) if decades > 3.5 else (1, 2, 5)
        k0, k1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        ticks = [m * 10.0**k for k in range(k0, k1 + 1) for m in steps if lo <= m * 10.0**k <= hi]
    if len(ticks) < 4:
        ticks = sorted(set(ticks) | {float(f"{lo:.3g}"), float(f"{hi:.3g}")})
        ticks = [t for t in ticks if lo <= t <= hi] or [lo, hi]
    return ticks


def colorbar_ticks(norm: Any, scale: str) -> list[float] | None:
    """Ticks of a log or symmetric-log colour bar (None: matplotlib's own, linear scales)."""
    if scale in ("counts", "log"):
        return _nice_ticks(norm.vmin, norm.vmax)
    if scale == "diverging":  # 1-2-5 steps from 1 (the linear part is within +-2)
        top = math.floor(math.log10(norm.vmax))
        steps = [m * 10.0**k for k in range(top + 1) for m in (1, 2, 5)]
        pos = [t for t in steps if t <= norm.vmax]
        return [-t for t in reversed(pos)] + [0.0] + pos
    return None


def tick_label(value: float) -> str:
    """A colour-bar tick label: 3 significant digits, a typographic minus sign."""
    return f"{value:.3g}".replace("-", "\u2212")


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
    axis_labels
        The x and y axes' labels of a map not projected.
    """

    def __init__(
        self,
        keys: np.ndarray,
        geoms: np.ndarray,
        lonlat: bool,
        crs: str | None,
        *,
        axis_labels: tuple[str, str] = COORD_AXES,
    ) -> None:
        import shapely

        self.keys = np.asarray(keys).astype(str)
        self.axis_labels = axis_labels
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

    @property
    def extent(self) -> tuple[float, float, float, float]:
        """``(x0, x1, y0, y1)`` of the axes: the drawn polygons' bounds plus :data:`MARGIN`."""
        x0, y0, x1, y1 = (float(b) for b in self.bounds)
        pad = MARGIN * max(x1 - x0, y1 - y0)
        return x0 - pad, x1 + pad, y0 - pad, y1 + pad

    def axes(self, title: str) -> tuple[Any, Any]:
        """A figure sized to the map's shape and its axes, limited to :attr:`extent`."""
        x0, x1, y0, y1 = self.extent
        height = MAP_WIDTH * (y1 - y0) / (x1 - x0)
        fig = figure(MAP_WIDTH + 1.6, height + 0.9)
        ax = fig.subplots()
        ax.set_aspect("equal")
        ax.set_xlim(x0, x1)
        ax.set_ylim(y0, y1)
        if self.lonlat:
            ax.set_axis_off()
        else:
            ax.set(xlabel=self.axis_labels[0], ylabel=self.axis_labels[1])
        ax.set_title(title, fontsize=11)
        return fig, ax

    def choropleth_figure(
        self, values: np.ndarray, title: str, *, label: str, cmap: str, scale: str, missing: str
    ) -> tuple[Any, Any, Any]:
        """The figure, its axes and the colour norm of :meth:`choropleth`."""
        from matplotlib import colormaps
        from matplotlib.collections import PolyCollection

        v = np.asarray(values, dtype=np.float64)[self.shown]
        if scale in ("counts", "log"):
            v = np.where(v > 0, v, np.nan)
        norm = color_norm(v, scale)
        fig, ax = self.axes(title)
        many = len(self.rings) > 500
        coll = PolyCollection(
            self.rings,
            array=np.ma.masked_invalid(v[self.ring_owner]),
            cmap=colormaps[cmap].with_extremes(bad=MISSING_COLOUR),
            norm=norm,
            edgecolors="white",
            linewidths=0.05 if many else 0.5,
        )
        ax.add_collection(coll)
        bar = fig.colorbar(coll, ax=ax, shrink=0.8, pad=0.02, label=label)
        ticks = colorbar_ticks(norm, scale)
        if ticks is not None:
            bar.set_ticks(ticks, labels=[tick_label(t) for t in ticks])
        if not np.all(np.isfinite(v)):
            _missing_legend(ax, missing, int(np.count_nonzero(~np.isfinite(v))))
        return fig, ax, norm

    def choropleth(
        self,
        values: np.ndarray,
        path: Path,
        title: str,
        *,
        label: str,
        cmap: str = "viridis",
        scale: str = "linear",
        missing: str = "no value",
    ) -> Path:
        """Colour each polygon by ``values`` ((K,), on ``scale``, one of :data:`SCALES`);
        polygons without a value (NaN, or <= 0 on a log scale) are grey, the legend saying
        ``missing``."""
        fig, _, _ = self.choropleth_figure(
            values, title, label=label, cmap=cmap, scale=scale, missing=missing
        )
        return save(fig, path)

    def raster_figure(
        self, x_edges: np.ndarray, y_edges: np.ndarray, values: np.ndarray, title: str, label: str
    ) -> tuple[Any, Any, Any]:
        """The figure, its axes and the colour norm of :meth:`raster`."""
        from matplotlib.collections import LineCollection

        fig, ax = self.axes(title)
        gx, gy = np.meshgrid(x_edges, y_edges)
        if self.lonlat:
            gx, gy = self.transformer.transform(gx, gy)
        v = np.ma.masked_invalid(np.where(values > 0, values, np.nan))
        pos = v.compressed()
        vmax = float(pos.max()) if pos.size else 1.0
        norm = color_norm(np.clip(pos, vmax * 1e-4, None), "log")
        mesh = ax.pcolormesh(gx, gy, v, norm=norm, cmap="magma", shading="flat", rasterized=True)
        ax.add_collection(LineCollection(self.rings, colors="white", linewidths=0.05, alpha=0.4))
        extend = "min" if pos.size and float(pos.min()) < norm.vmin else "neither"
        bar = fig.colorbar(mesh, ax=ax, shrink=0.8, pad=0.02, extend=extend, label=label)
        ticks = colorbar_ticks(norm, "log")
        bar.set_ticks(ticks, labels=[tick_label(t) for t in ticks])
        return fig, ax, norm

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
        """Draw a (NY, NX) raster in the events' coordinates (NaN pixels left blank, e.g. off
        the polygons), polygon outlines on top; the log colour scale spans four decades below
        the largest value (smaller values take its lowest colour: the colour bar's arrow)."""
        fig, _, _ = self.raster_figure(x_edges, y_edges, values, title, label)
        return save(fig, path)


def _missing_legend(ax: Any, label: str, count: int) -> None:
    """A legend entry for the grey polygons, below the map."""
    from matplotlib.patches import Patch

    patch = Patch(facecolor=MISSING_COLOUR, edgecolor="none", label=f"{label} ({count})")
    ax.legend(handles=[patch], loc="upper left", bbox_to_anchor=(0.0, 0.0), fontsize=8,
              frameon=False)  # fmt: skip


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


#: Kilometres per degree of a great circle on the 6,371 km sphere.
KM_PER_DEGREE = 111.195


class _Equirectangular:
    """``transform(lon, lat) -> (x, y)`` in metres, true to scale along 38 degrees N."""

    LAT0 = 38.0
    M_PER_DEG = 1000.0 * KM_PER_DEGREE

    def transform(self, lon: Any, lat: Any) -> tuple[np.ndarray, np.ndarray]:
        scale = self.M_PER_DEG * np.cos(np.radians(self.LAT0))
        return np.asarray(lon, dtype=float) * scale, np.asarray(lat, dtype=float) * self.M_PER_DEG
