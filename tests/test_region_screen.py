"""The distance screen that lets events far from the boundary skip the mass computation.

References: the distance from a point to the boundary by brute force (every segment, the
point-to-segment formula), and the region's exact path run on every event without the screen.
"""

from __future__ import annotations

import numpy as np
import pytest

from hawkes_cli.engine.region import CUTOFF, BoundaryRegion
from hawkes_cli.engine.region_screen import DistanceScreen


def _polygon():
    """An irregular region: a jagged ring (a 'coast' of 400 short segments) around a square
    hole (a 'lake'), a shapely polygon."""
    import shapely

    angle = np.linspace(0.0, 2 * np.pi, 400, endpoint=False)
    radius = 4.0 + 0.6 * np.sin(7 * angle) + 0.2 * np.cos(23 * angle)
    shell = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    hole = [(-0.8, -0.8), (-0.8, 0.8), (0.8, 0.8), (0.8, -0.8)]
    return shapely.Polygon(shell, [hole])


def _region() -> BoundaryRegion:
    """:func:`_polygon` as a region (its triangles)."""
    from hawkes_cli.geo.polygons import triangulate

    triangles, _ = triangulate(np.array([_polygon()], dtype=object))
    return BoundaryRegion.from_triangles(triangles)


def _distance(region: BoundaryRegion, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Distance from each point to the nearest boundary segment, by brute force."""
    p, q = region.start, region.end
    d = q - p
    rx = x[:, None] - p[None, :, 0]
    ry = y[:, None] - p[None, :, 1]
    t = np.clip((rx * d[:, 0] + ry * d[:, 1]) / np.sum(d * d, axis=1), 0.0, 1.0)
    return np.min(np.hypot(rx - t * d[:, 0], ry - t * d[:, 1]), axis=1)


@pytest.fixture(scope="module")
def region():
    return _region()


@pytest.mark.parametrize("box", [(-5.0, 5.0, -5.0, 5.0), (-1.0, 3.0, -2.0, 2.5)])
def test_bound_never_exceeds_the_distance(region, box):
    """Every cell's bound is at most the true distance of points in it, also where the raster
    covers only part of the region (the second box cuts the coast and the lake: the bound is
    then capped by the distance to the raster's edge). 20,000 points, some on the boundary."""
    rng = np.random.default_rng(5)
    x = rng.uniform(box[0] - 0.5, box[1] + 0.5, 20_000)
    y = rng.uniform(box[2] - 0.5, box[3] + 0.5, 20_000)
    k = rng.integers(0, region.start.shape[0], 2_000)
    t = rng.uniform(0, 1, 2_000)[:, None]
    on = region.start[k] + t * (region.end[k] - region.start[k])
    x, y = np.concatenate([x, on[:, 0]]), np.concatenate([y, on[:, 1]])
    screen = DistanceScreen.build(region.start, region.end, box, cells=256)
    true = _distance(region, x, y)
    at, inside = screen._cell(x, y)
    bound = screen.bound.ravel()[at]
    assert np.all(bound[inside] <= true[inside])
    assert not np.any(screen.far(x, y, 0.0)[~inside])  # off the raster: never screened out
    # and it screens: points more than 10 cells from both the boundary and the raster's edge
    # are found farther than half that distance (the bound is within ~4 cells of it)
    clear = np.minimum(true, np.minimum.reduce([x - box[0], box[1] - x, y - box[2], box[3] - y]))
    ok = inside & (clear > 10 * screen.h)
    assert np.all(screen.far(x, y, 0.5 * clear)[ok])


def test_mass_with_the_screen_equals_the_exact_path(region):
    """Masses through the screen (both paths) against the exact path run on every event: the
    screened-out events have mass 1 to 1e-12, the others are unchanged."""
    rng = np.random.default_rng(6)
    x = rng.uniform(-4.5, 4.5, 3_000)
    y = rng.uniform(-4.5, 4.5, 3_000)
    s = rng.uniform(0.01, 0.15, 3_000)
    full = region.exact_mass(x, y, s)
    m, err = region.mass_error(x, y, s, exact=True)
    np.testing.assert_allclose(m, full, rtol=0, atol=1e-12)
    far = region.screen(x, y).far(x, y, CUTOFF * s)
    assert 0.2 < far.mean() < 0.95  # the screen took part
    assert np.all(err[far] == 0.0)
    import shapely

    raster, _ = region.mass_error(x, y, s)  # inside the region: off it, far counts as inside
    on_land = shapely.contains_xy(_polygon(), x, y)
    assert np.max(np.abs(raster - full)[on_land]) < 5e-3
    empty = np.empty(0)
    assert all(a.shape == (0,) for a in _region().mass_error(empty, empty, empty))


def test_screen_rebuilt_for_points_beyond_it(region):
    """A screen built for a few points near the centre is replaced when most of the points
    asked about later lie off it."""
    fresh = _region()
    small = fresh.screen(np.array([-0.1, 0.1]), np.array([-0.1, 0.1]))
    x = np.linspace(-4.0, 4.0, 50)
    big = fresh.screen(x, x)
    assert big is not small and big.holds((-4.0, 4.0, -4.0, 4.0))
    assert fresh.screen(x[:10], x[:10]) is big


def test_share_off_the_screen_is_exact_where_it_decides_a_rebuild(region):
    """``kept_screen`` rebuilds when more than a tenth of the points lie off the raster; its
    cheap count of points beyond the box's sides (an upper bound) answers only where it is at
    most a tenth, so the decision is the exact share's (``covers``, cell by cell) for shares
    on both sides of a tenth and for points on the raster's very edges."""
    from hawkes_cli.engine.region_screen import _off_share

    screen = DistanceScreen.build(region.start, region.end, (-2.0, 2.0, -2.0, 2.0))
    nx = screen.bound.shape[1]
    far_x = screen.box[0] + nx * screen.h  # the first x off the raster's last column
    rng = np.random.default_rng(3)
    for off in (0.0, 0.05, 0.085, 0.101, 0.3):  # 0.085: the bound above a tenth, the share not
        n = 2000
        x, y = rng.uniform(-1.9, 1.9, n), rng.uniform(-1.9, 1.9, n)
        k = int(off * n)
        x[:k] = rng.uniform(far_x, far_x + 1.0, k)  # off the raster
        x[k : k + 20] = screen.box[0]  # on its first column's edge: on
        y[k + 20 : k + 40] = np.nextafter(screen.box[2], -np.inf)  # just below: off
        exact = float(np.mean(~screen.covers(x, y)))
        got = _off_share(screen, x, y)
        assert (got > 0.1) == (exact > 0.1), (off, got, exact)
        assert got >= exact
        if got > 0.1:
            assert got == exact
