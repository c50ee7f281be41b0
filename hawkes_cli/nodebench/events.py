"""The bench's events: ``n`` on the US counties, generated in seconds at a million."""

from __future__ import annotations

import numpy as np

from ..data import EventData

#: Days the events span (three waves, as the 2020-2022 data).
SPAN_DAYS = 3 * 365


def county_events(n: int, *, model: int = 1, seed: int = 0) -> EventData:
    """``n`` events on the US counties (50 states + DC of the shipped county table), sorted.

    Each event's county is drawn with probability proportional to its population, its location
    Gaussian about the county's centroid with sd ``sqrt(area) / 4`` (degrees), its time 70 % in
    three national waves (days 150, 480, 800; sd 35 days; shifted per state by up to +-30 days)
    and 30 % uniform over three years, then a uniform fraction of its day added (continuous
    times, as ``hawkes-prep hhs --continuous``). Model 2 gets the county's density (persons per
    square mile). Attributes: ``crs`` lonlat, ``area`` the counties' area (degrees^2).
    """
    from ..counties.table import load_county_table, region_states

    table = load_county_table()
    keep = np.isin(table.fips.astype("<U2"), sorted(region_states("states") or ()))
    pop = table.population[keep].astype(np.float64)
    lon, lat = table.lon[keep], table.lat[keep]
    sd = np.sqrt(table.area_deg2[keep]) / 4.0
    states, state_of = np.unique(table.state[keep], return_inverse=True)
    rng = np.random.default_rng(seed)
    shift = rng.uniform(-30.0, 30.0, states.size)[state_of]
    county = rng.choice(pop.size, n, p=pop / pop.sum())
    x = lon[county] + rng.normal(0.0, sd[county])
    y = lat[county] + rng.normal(0.0, sd[county])
    centre = rng.choice([150.0, 480.0, 800.0], n) + shift[county]
    wave = rng.random(n) < 0.7
    t = np.where(wave, rng.normal(centre, 35.0), rng.uniform(0.0, SPAN_DAYS, n))
    t = np.floor(np.clip(t, 0.0, SPAN_DAYS - 1)) + rng.random(n)
    order = np.argsort(t, kind="stable")
    density = table.density[keep][county][order] if model == 2 else None
    area = float(np.sum(table.area_deg2[keep]))
    return EventData(
        t[order],
        x[order],
        y[order],
        density,
        source=f"nodebench-counties-{n}",
        attrs={"crs": "lonlat", "area": area},
    )


def subsample(data: EventData, n: int, seed: int = 1) -> EventData:
    """``n`` of the events, drawn at random (kept in time order)."""
    rows = np.sort(np.random.default_rng(seed).choice(data.n, n, replace=False))
    density = None if data.density is None else data.density[rows]
    return EventData(data.time[rows], data.x[rows], data.y[rows], density, attrs=dict(data.attrs))
