"""Effective spatial lengthscale per county: ``lengthscales.csv``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .files import write_csv


def county_density(layer: Any, data: Any, event_poly: np.ndarray) -> np.ndarray:
    """Population density per polygon (persons per square mile): the county table's, else the
    mean density of the polygon's events; (K,) float64, NaN where neither is known."""
    from ..counties import load_county_table

    k = len(layer.keys)
    table = load_county_table()
    row = table.lookup(np.asarray(layer.keys).astype("<U5"))
    density = np.where(row >= 0, table.density[np.maximum(row, 0)], np.nan)
    if data is not None and data.density is not None:
        ok = event_poly >= 0
        sums = np.bincount(event_poly[ok], weights=data.density[ok], minlength=k)
        n = np.bincount(event_poly[ok], minlength=k)
        with np.errstate(invalid="ignore", divide="ignore"):
            density = np.where(np.isnan(density), sums / n, density)
    return density


def write_lengthscales(
    out_dir: Path, layer: Any, model: int, sigma_x: np.ndarray, data: Any, event_poly: np.ndarray
) -> tuple[np.ndarray, Path]:
    """Effective lengthscale in miles per polygon (posterior mean and 95% interval over every
    retained draw): latitude of the polygon's centroid, density from the county table (else
    the mean density of its events); ``lengthscales.csv``.

    Returns
    -------
    mean : (K,) float64
        Posterior mean lengthscale per polygon, miles (NaN where the density is unknown).
    path
        The CSV written.
    """
    import shapely

    from ..diagnostics.derived import county_factor

    lat = shapely.get_y(shapely.centroid(np.asarray(layer.geoms, dtype=object)))
    k = len(layer.keys)
    density = county_density(layer, data, event_poly) if model == 2 else np.full(k, np.nan)
    factor = np.array(
        [
            county_factor(model, float(lat[i]), float(density[i]))
            if model == 1 or density[i] > 0
            else np.nan
            for i in range(k)
        ]
    )
    q = np.quantile(sigma_x, [0.025, 0.975])
    mean = float(np.mean(sigma_x)) * factor
    path = write_csv(
        out_dir / "lengthscales.csv",
        ["fips", "latitude", "density", "miles_mean", "miles_q025", "miles_q975"],
        [np.asarray(layer.keys), lat, density, mean, q[0] * factor, q[1] * factor],
        ["", "%.5f", "%.6g", "%.5g", "%.5g", "%.5g"],
    )
    return mean, path
