"""The censored edge correction: the trigger mass inside the study region, and the likelihood
that counts only it (``model.edge: censored``).

References, each independent of :mod:`hawkes_cli.engine.region`'s segment sums:

- a rectangle's mass in closed form (product of normal-CDF differences) and Owen's T;
- Monte Carlo with quasi-random Gaussian offsets and shapely's point-in-polygon test on the
  union of the real county polygons (not on their triangles);
- the compensator written out by hand from DESIGN section 2 with the masses.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import ndtr, owens_t
from scipy.stats import norm, qmc

from hawkes_cli.engine import make_likelihood
from hawkes_cli.engine.edge_mass import (
    MASS_INTERPOLATION_ERROR,
    EdgeMass,
    mass_lattice,
    mass_stencil,
)
from hawkes_cli.engine.region import BoundaryRegion, RectangleRegion
from hawkes_cli.engine.region_groups import EventGroups
from hawkes_cli.model import Params
from hawkes_cli.simulate import simulate

BOX = (0.0, 10.0, 0.0, 6.0)


def _rectangle_triangles(box):
    x0, x1, y0, y1 = box
    a, b, c, d = (x0, y0), (x1, y0), (x1, y1), (x0, y1)
    return np.array([[a, b, c], [a, c, d]], dtype=np.float64)


def _owen_mass(px, py, poly, s):
    """Mass of N(p, s^2 I) inside a convex polygon (CCW vertices) from Owen's T: each edge
    subtracts T(h/s, b/h) - T(h/s, a/h) (an independent formula for the segment integral)."""
    m = 1.0
    for i in range(len(poly)):
        (ax, ay), (bx, by) = poly[i], poly[(i + 1) % len(poly)]
        ex, ey = bx - ax, by - ay
        length = math.hypot(ex, ey)
        ex, ey = ex / length, ey / length
        ux, uy = ax - px, ay - py
        a = ux * ex + uy * ey
        h = abs(ux * ey - uy * ex)
        m -= owens_t(h / s, (a + length) / h) - owens_t(h / s, a / h)
    return m


def test_rectangle_closed_form_matches_owen():
    """The rectangle's closed form and the segment sum (exact path) agree with Owen's T."""
    rng = np.random.default_rng(3)
    x = rng.uniform(0.0, 10.0, 200)
    y = rng.uniform(0.0, 6.0, 200)
    s = rng.uniform(0.05, 2.0, 200)
    rect = RectangleRegion(BOX).mass(x, y, s)
    region = BoundaryRegion.from_triangles(_rectangle_triangles(BOX))
    exact = region.mass_error(x, y, s, exact=True)[0]
    poly = [(0.0, 0.0), (10.0, 0.0), (10.0, 6.0), (0.0, 6.0)]
    owen = np.array([_owen_mass(*v, poly, si) for *v, si in zip(x, y, s, strict=True)])
    assert np.max(np.abs(rect - owen)) < 1e-12
    assert np.max(np.abs(exact - owen)) < 1e-9
    assert region.area == pytest.approx(60.0)
    assert region.start.shape[0] == 4  # the shared diagonal cancels


def test_raster_path_on_rectangle():
    """The raster path (a blurred coverage raster, log-s interpolation) stays within its
    documented error of the closed form."""
    rng = np.random.default_rng(4)
    x = rng.uniform(0.0, 10.0, 5000)
    y = rng.uniform(0.0, 6.0, 5000)
    region = BoundaryRegion.from_triangles(_rectangle_triangles(BOX))
    for s in (0.3, 0.77):
        got, err = region.mass_error(x, y, s)
        want = RectangleRegion(BOX).mass(x, y, s)
        near = want < 1 - 1e-9
        assert np.mean(np.abs(got - want)[near]) < 6e-4
        assert np.max(np.abs(got - want)) < 3e-3
        assert np.all(err[got < 1] > 0) and np.all(err[got == 1] == 0)


def test_outside_point_reads_its_mass():
    """A point just outside the region gets the (small) mass that reaches inside."""
    region = BoundaryRegion.from_triangles(_rectangle_triangles(BOX))
    x = np.array([-0.1, 10.2, 5.0])
    y = np.array([3.0, 3.0, -0.05])
    s = 0.2
    want = RectangleRegion(BOX).mass(x, y, s)
    got = region.mass_error(x, y, s, exact=True)[0]
    np.testing.assert_allclose(got, want, atol=1e-9)
    np.testing.assert_allclose(want[:2], ndtr(np.array([-0.5, -1.0])), atol=1e-6)


@pytest.fixture(scope="module")
def us_events():
    """Events as the paper places them (a lower-48 county by population, the point uniform
    in it), the region of all county polygons, shapely's union of the counties, the polygons
    and each event's polygon."""
    shapely = pytest.importorskip("shapely")
    from hawkes_cli.counties import load_county_table, load_polygons
    from hawkes_cli.counties.polygons import read_polygon_layer

    polys, _ = load_polygons()
    table = load_county_table()
    keep = table.region_mask("conus")
    rng = np.random.default_rng(11)
    fips = rng.choice(table.fips[keep], size=20_000, p=_share(table.population[keep]))
    codes = polys.codes(fips)
    x, y = polys.sample(codes, rng)
    region = BoundaryRegion.from_triangles(polys.triangles)
    layer = read_polygon_layer(None)
    land = shapely.coverage_union_all(shapely.make_valid(np.asarray(layer.geoms)))
    shapely.prepare(land)
    return x, y, region, land, polys, codes


def _share(population):
    p = np.asarray(population, dtype=np.float64)
    return p / p.sum()


def _monte_carlo(land, x, y, s, k=2**14, seed=0):
    """Share of N((x, y), s^2 I) inside ``land``: scrambled Sobol offsets through the normal
    quantile, point-in-polygon by shapely; standard error about 0.5/sqrt(k) at worst."""
    import shapely

    z = norm.ppf(qmc.Sobol(2, scramble=True, seed=seed).random(k))
    out = np.empty(x.size)
    for i in range(x.size):
        out[i] = shapely.contains_xy(land, x[i] + s * z[:, 0], y[i] + s * z[:, 1]).mean()
    return out


@pytest.mark.parametrize("path", ["raster", "exact", "grouped"])
def test_us_mass_against_monte_carlo(us_events, path):
    """Per-event trigger mass inside the US land at the 1M posterior's sigma_x (0.046
    degrees): mean absolute error <= 0.002 over events within 3 lengthscales of the
    boundary, against Monte Carlo on shapely's union of the county polygons.

    Tolerance: 80 events x 2^14 scrambled Sobol offsets; the Monte Carlo error of one event
    is at most 0.5/128 = 0.004 (random sampling; QMC does better) so the mean absolute error
    of the reference alone is below ~0.003 even in the worst case and ~0.001 typically; the
    raster path's own error is ~3e-4 (see the module), the exact path's 1e-9. ``grouped``:
    the same rasters planned per county (:mod:`hawkes_cli.engine.region_groups`, a chain's
    path when locations are redrawn in their counties).
    """
    import shapely

    x, y, region, land, polys, codes = us_events
    s = 0.046
    d = shapely.distance(shapely.boundary(land), shapely.points(x[:4000], y[:4000]))
    near = np.flatnonzero(d < 3 * s)[:80]
    assert near.size == 80
    if path == "grouped":
        groups = EventGroups.of_polygons(polys.triangles, polys.tri_owner, codes)
        edge = EdgeMass(region, x, y, rows=(0, x.size), groups=groups)
        assert edge._grouped is not None  # the per-county path, not the per-event one
        got = edge.mass(s)[0][near]
    else:
        got = region.mass_error(x, y, s, exact=path == "exact")[0][near]
    want = _monte_carlo(land, x[near], y[near], s)
    assert np.mean(np.abs(got - want)) <= 0.002
    assert np.mean(got) < 0.95  # these events do lose mass


def test_us_share_outside_matches_the_issue(us_events):
    """The mean share of trigger mass outside the land at sigma_x = 0.046 is about 2.3%
    (measured independently by Monte Carlo with 20,000 events x 64 offsets, se 0.0006)."""
    x, y, region, *_ = us_events
    m = region.mass(x, y, 0.046)
    assert 1.0 - m.mean() == pytest.approx(0.023, abs=0.003)
    assert np.mean(m < 0.9) == pytest.approx(0.067, abs=0.01)


def test_censored_likelihood_by_hand():
    """The censored likelihood differs from the paper's by xi0 * sum_n (1 - exp(-(T -
    t_n)/sigma_t)) * (1 - M_n) exactly, on both models, with M_n the cubic in log s through
    the four mass-lattice points around the event's lengthscale s (model 1: sigma_x; model 2:
    sigma_x / sqrt(D_n), each event its own four points; closed-form rectangle masses by
    hand); the masses at the lengthscales themselves differ from that by less than the
    reported edge error."""
    p = Params(mu0=0.4, tau_t=30.0, xi0=0.6, sigma_x=0.8, sigma_t=6.0)
    from hawkes_cli.simulate import DensityGrid

    grid = DensityGrid(values=np.array([[1.0, 4.0], [9.0, 2.0]]), bounds=BOX)
    data = simulate(p, model=2, n_background=300, t_end=60.0, bounds=BOX, seed=5, grid=grid)
    region = RectangleRegion(BOX)
    lo, hi, w = mass_lattice(p.sigma_x)
    assert lo <= p.sigma_x < hi and hi / lo == pytest.approx(2.0 ** (1 / 16))

    def by_hand(sigma_x: float, model: int) -> np.ndarray:
        s = sigma_x if model == 1 else sigma_x / np.sqrt(data.density)
        m = ndtr((10 - data.x) / s) - ndtr(-data.x / s)
        return m * (ndtr((6 - data.y) / s) - ndtr(-data.y / s))

    def rectangle(s: float, i: int) -> float:
        m = ndtr((10 - data.x[i]) / s) - ndtr(-data.x[i] / s)
        return m * (ndtr((6 - data.y[i]) / s) - ndtr(-data.y[i] / s))

    def interpolated(model: int) -> np.ndarray:
        """Each event's mass by the cubic around its own lengthscale, event by event."""
        s = p.sigma_x if model == 1 else p.sigma_x / np.sqrt(data.density)
        s = np.broadcast_to(s, data.x.shape)
        out = np.empty(data.n)
        for i in range(data.n):
            points, weights = mass_stencil(float(s[i]))
            assert len(points) == 4
            out[i] = sum(wk * rectangle(sk, i) for sk, wk in zip(points, weights, strict=True))
        return out

    T = data.time[-1]
    share = -np.expm1(-(T - data.time) / p.sigma_t)
    for model in (1, 2):
        kw = {"model": model, "area": 60.0, "engine": "reference"}
        plain = make_likelihood(data, **kw).evaluate(p)
        cens = make_likelihood(data, region=region, **kw).evaluate(p)
        assert mass_stencil(p.sigma_x)[0][1] == lo and 0 < w < 1
        m = interpolated(model)
        lost = p.xi0 * np.sum(share * (1 - m))
        assert cens.loglik - plain.loglik == pytest.approx(lost, rel=1e-10)
        assert lost > 1.0
        at_sigma = p.xi0 * np.sum(share * (1 - by_hand(p.sigma_x, model)))
        assert 0 < abs(at_sigma - lost) <= cens.edge_error


@pytest.mark.parametrize("model", [1, 2])
def test_the_lost_mass_between_lattice_points_is_the_exact_one(model):
    """Between two mass-lattice points the interpolated lost mass follows the exact one (closed
    form, a rectangle) in value, slope and curvature in log sigma_x, event by event within
    MASS_INTERPOLATION_ERROR. A chord between the two points (the linear interpolation used
    before; model 2's until 2026-12-03) lies above every boundary event's lost mass: summed
    over events it misses the lost mass's curvature and its slope by up to half a step's
    change, which at 1M moved the posterior of sigma_x by 0.3 sd (model 2: up to 0.48 sd;
    benchmarks/results/edge-interpolation*.txt); the test shows that failure on the same
    events. Model 2: each event's lengthscale sigma_x / sqrt(D), D spread over two octaves,
    so the events sit everywhere between their own lattice points."""
    rng = np.random.default_rng(8)
    n = 20_000
    x, y = rng.uniform(0.0, 10.0, n), rng.uniform(0.0, 6.0, n)
    scale = 1.0 if model == 1 else 1.0 / np.sqrt(rng.uniform(0.5, 2.0, n))
    region = RectangleRegion(BOX)
    density = None if model == 1 else scale**-2.0
    edge = EdgeMass(region, x, y, rows=(0, n), density=density)
    lo, hi, _ = mass_lattice(0.3)
    step = math.log(hi / lo)
    us = math.log(lo) + step * np.linspace(0.1, 0.9, 9)
    h = step / 16  # the stencils stay inside the step (the interpolants have kinks at its ends)

    def lost(f, u: float) -> float:
        return float(np.sum(1.0 - f(math.exp(u))))

    def exact(s: float) -> np.ndarray:
        return region.mass(x, y, s * scale)

    def chord(s: float) -> np.ndarray:
        a, b, w = mass_lattice(s)
        return (1 - w) * exact(a) + w * exact(b)

    def derivatives(f, u: float) -> np.ndarray:
        a, b, c = (lost(f, u + d) for d in (-h, 0.0, h))
        return np.array([b, (c - a) / (2 * h), (c - 2 * b + a) / h**2])

    for u in us:
        got, err = edge.mass(math.exp(u))
        want = exact(math.exp(u))
        assert np.max(np.abs(got - want)) <= MASS_INTERPOLATION_ERROR
        assert np.all(err[want < 1.0] >= MASS_INTERPOLATION_ERROR)
        d_exact = derivatives(exact, u)
        d_cubic = derivatives(lambda s: edge.mass(s)[0], u)
        d_chord = derivatives(chord, u)
        assert d_exact[2] > 0.3 * d_exact[0]  # lost mass grows like s: convex in log s
        # the cubic's errors: value and slope ~1e-5 of theirs, curvature ~3e-4 (O(step^2))
        np.testing.assert_allclose(d_cubic, d_exact, rtol=1e-3)
        assert abs(d_chord[2] - d_exact[2]) > 0.5 * d_exact[2]  # the chord has no curvature
    # the chord's slope error at the step's ends: half the step's change of the slope
    end = derivatives(chord, us[0])[1] - derivatives(exact, us[0])[1]
    assert end > 0.3 * step * derivatives(exact, us[0])[2]


def test_model2_cubics_follow_each_events_own_lattice_points_in_any_order():
    """Model 2's masses (the cubics cached per set of lattice points) are each event's own
    Lagrange cubic through its four lattice points (``mass_stencil`` of its lengthscale, closed
    rectangle masses there, by hand), to 1e-12, as sigma_x moves back and forth across a lattice
    point. Two densities put the events' offsets above their snapped lattice points at 0.3 and
    0.6 steps, so that the stencil has four points near a step's ends and five between, and the
    same four points serve sigma_x late in one step (every event's lengthscale a step up) and
    early in the next (none): one cached set read from two positions. ``deficit`` gives what
    ``mass`` gives."""
    rng = np.random.default_rng(12)
    n = 4000
    x, y = rng.uniform(0.0, 10.0, n), rng.uniform(0.0, 6.0, n)
    offsets = np.where(np.arange(n) % 2 == 0, 0.3, 0.6)
    scale = 2.0 ** ((offsets - 5.0) / 16.0)  # 1 / sqrt(D): 5 - offset steps below 1
    region = RectangleRegion(BOX)
    edge = EdgeMass(region, x, y, rows=(0, n), density=scale**-2.0)
    k = round(16 * math.log2(0.1))  # a lattice position (sigma_x 0.1)

    def by_hand(sigma_x: float) -> np.ndarray:
        out = np.empty(n)
        for i in range(n):
            points, weights = mass_stencil(sigma_x * scale[i])
            lost = sum(
                w * (1.0 - region.mass(x[i : i + 1], y[i : i + 1], p)[0])
                for p, w in zip(points, weights, strict=True)
            )
            out[i] = 1.0 - lost
        return out

    positions = [k + 0.8, k + 1.2, k + 0.5, k + 1.2, k + 0.8, k + 0.1]
    for pos in positions:
        sigma_x = 2.0 ** (pos / 16.0)
        points = edge.stencil(sigma_x)[0]
        assert len(points) == (5 if pos - math.floor(pos) == 0.5 else 4)
        m, _ = edge.mass(sigma_x)
        np.testing.assert_allclose(m, by_hand(sigma_x), rtol=0, atol=1e-12)
        rows, lost, _ = edge.deficit(sigma_x)
        np.testing.assert_array_equal(lost, 1.0 - m[rows])
        assert 0.05 < rows.size / n < 0.9  # near the rectangle's sides
    # late in one step and early in the next: the same four lattice points
    assert edge.stencil(2.0 ** ((k + 0.8) / 16))[0] == edge.stencil(2.0 ** ((k + 1.2) / 16))[0]


def test_edge_mass_follows_locations_and_rows():
    """EdgeMass serves its rows only, and new locations replace the cached masses."""
    region = RectangleRegion(BOX)
    x = np.array([0.1, 5.0, 9.9, 5.0])
    y = np.array([3.0, 3.0, 3.0, 0.1])
    edge = EdgeMass(region, x, y, rows=(1, 4))
    assert mass_lattice(0.5)[2] == 0.0  # 0.5 is a lattice point: no interpolation
    m, _ = edge.mass(0.5)
    np.testing.assert_allclose(m, region.mass(x[1:], y[1:], 0.5))
    edge.set_locations(x[::-1], y[::-1])
    np.testing.assert_allclose(edge.mass(0.5)[0], region.mass(x[::-1][1:], y[::-1][1:], 0.5))
    dens = np.array([1.0, 4.0, 16.0, 1.0])
    edge2 = EdgeMass(region, x, y, rows=(0, 4), density=dens)
    np.testing.assert_allclose(edge2.mass(1.0)[0], region.mass(x, y, 1.0 / np.sqrt(dens)))


def test_gof_compensator_counts_the_mass_inside():
    """--gof's ground compensator Lambda(T) with the events' masses is the censored
    likelihood's compensator (sum log lambda - loglik), to rounding."""
    from hawkes_cli.gof.residuals import ground_compensator

    p = Params(mu0=0.4, tau_t=30.0, xi0=0.6, sigma_x=0.8, sigma_t=6.0)
    data = simulate(p, model=1, n_background=300, t_end=60.0, bounds=BOX, seed=7)
    region = RectangleRegion(BOX)
    lik = make_likelihood(data, model=1, area=60.0, engine="reference", region=region)
    ev = lik.evaluate(p)
    comp = np.sum(np.log(p.mu0 * ev.B + p.xi0 * ev.E)) - ev.loglik
    mass = EdgeMass(region, data.x, data.y, rows=(0, data.n)).mass(p.sigma_x)[0]
    got = ground_compensator(np.array([data.time[-1]]), data.time, p, mass=mass)[0]
    assert got == pytest.approx(comp, rel=1e-9)
    plain = ground_compensator(np.array([data.time[-1]]), data.time, p)[0]
    assert plain - got == pytest.approx(
        p.xi0 * np.sum(-np.expm1(-(data.time[-1] - data.time) / p.sigma_t) * (1 - mass)),
        rel=1e-9,
    )


def test_grouped_masses_follow_redraws_and_file_locations(us_events):
    """Planned per county, the masses of events redrawn in their counties are the per-event
    path's to the rasters' resolution (mean 1e-4, each within 4e-3), draw after draw; an event
    outside its county's box (a file's own location) takes the per-event path, to 1e-6."""
    x, y, region, _, polys, codes = us_events
    groups = EventGroups.of_polygons(polys.triangles, polys.tri_owner, codes)
    assert np.all(groups.inside(x, y))
    grouped = EdgeMass(region, x, y, rows=(0, x.size), groups=groups)
    plain = EdgeMass(region, x, y, rows=(0, x.size))
    rng = np.random.default_rng(5)
    for _ in range(2):
        x2, y2 = polys.sample(codes, rng)
        grouped.set_locations(x2, y2)
        plain.set_locations(x2, y2)
        a, b = grouped.mass(0.05)[0], plain.mass(0.05)[0]
        assert np.mean(np.abs(a - b)) < 1e-4 and np.max(np.abs(a - b)) < 4e-3
        assert np.mean(a < 1) > 0.2  # many events near the coast or a border
    moved = x2.copy()
    moved[:3] = [-124.9, -80.0, -100.0]  # outside their counties' boxes
    grouped.set_locations(moved, y2)
    plain.set_locations(moved, y2)
    np.testing.assert_allclose(grouped.mass(0.05)[0][:3], plain.mass(0.05)[0][:3], atol=1e-6)


def test_deficit_is_the_mass_lost_by_the_rows_that_lose_some(us_events):
    """``EdgeMass.deficit`` lists exactly the rows whose interpolated mass is below 1 or whose
    error scale is not 0, with ``1 - mass`` and the error :meth:`mass` gives them, between two
    lattice points and on one, and follows new locations (per county and per event)."""
    x, y, region, _, polys, codes = us_events
    groups = EventGroups.of_polygons(polys.triangles, polys.tri_owner, codes)
    rng = np.random.default_rng(8)
    for edge in (
        EdgeMass(region, x, y, rows=(0, x.size), groups=groups),
        EdgeMass(region, x, y, rows=(3, x.size)),
    ):
        for _ in range(2):
            for s in (0.05, 2.0 ** (-69 / 16)):  # between two lattice points, then on one
                m, e = edge.mass(s)
                rows, lost, err = edge.deficit(s)
                want = np.flatnonzero((m < 1.0) | (e > 0.0))
                np.testing.assert_array_equal(rows, want)
                np.testing.assert_array_equal(lost, 1.0 - m[rows])
                np.testing.assert_array_equal(err, e[rows])
                assert 0.1 < rows.size / m.size < 0.5  # near a coast or a border
            x2, y2 = polys.sample(codes, rng)
            edge.set_locations(x2, y2)


def test_squares_are_those_a_countys_triangles_touch():
    """``EventGroups.squares`` by hand: a triangle whose box spans x 0.5..2.5 and y -0.5..0.2
    touches the unit squares a = 0, 1, 2 by b = -1, 0; another county's triangle is not
    counted."""
    from hawkes_cli.engine.region_groups import square_key

    tri = np.array(
        [[[0.5, -0.5], [2.5, -0.5], [0.5, 0.2]], [[10.2, 10.2], [10.4, 10.2], [10.2, 10.4]]]
    )
    groups = EventGroups.of_polygons(tri, np.array([0, 1]), np.array([0, 0, 1]))
    want = sorted(int(square_key(a, b)) for a in (0, 1, 2) for b in (-1, 0))
    assert groups.squares(np.array([0]), 1.0).tolist() == want
    assert groups.squares(np.array([1]), 1.0).tolist() == [int(square_key(10, 10))]
    assert groups.squares(np.array([0]), 4.0).tolist() == [
        int(square_key(0, -1)),
        int(square_key(0, 0)),
    ]


#: The lengthscale (degrees) of the wide-county test: its tiles are narrower than many counties.
S_WIDE = 0.02


def test_counties_wider_than_a_tile_read_the_square_they_are_drawn_in(us_events):
    """A county wider than a tile (at sigma_x 0.02, tiles of 1.3 degrees: coastal counties
    such as San Diego's and Monterey's, and inland ones) is planned as the squares its
    triangles touch, and each of its cases reads the square it was drawn in: the squares hold
    every draw, their masses are the per-event path's to the rasters' resolution, and a
    square's raster depends on its box alone (the same object for every county that touches
    it, draw after draw). A case in no square of its county (a file's own location inside the
    county's box but not in its polygon) takes the per-event path."""
    from hawkes_cli.engine.region_groups import GroupedMass, square_key

    _, _, region, _, polys, codes = us_events
    groups = EventGroups.of_polygons(polys.triangles, polys.tri_owner, codes)
    grouped = GroupedMass(region, groups)
    level, _ = grouped.levels(S_WIDE)
    plan = grouped.plan(level)
    assert plan.per_event.size == 0 and len(plan.wide) == 1
    wide = plan.wide[0]
    assert wide.rows.size > 100 and np.sum(wide.tile >= 0) >= 2
    rng = np.random.default_rng(21)
    for _ in range(2):
        x2, y2 = polys.sample(codes, rng)
        rows, tile, missing = plan.assign(x2, y2)
        assert missing.size == 0 and np.array_equal(np.sort(rows), np.sort(wide.rows))
        for r, k in zip(rows[:50].tolist(), tile[:50].tolist(), strict=True):
            want = square_key(np.floor(x2[r] / wide.side), np.floor(y2[r] / wide.side))
            assert want in wide.keys
            if k >= 0:  # the square's raster box holds the point
                box = plan.tiles[k].box
                assert box[0] <= x2[r] <= box[1] and box[2] <= y2[r] <= box[3]
        got = grouped.mass_error(x2, y2, S_WIDE)[0][wide.rows]
        plain = region.mass_error(x2[wide.rows], y2[wide.rows], np.full(wide.rows.size, S_WIDE))[0]
        assert np.mean(got < 1) > 0.05  # coasts and borders among them
        assert np.mean(np.abs(got - plain)) < 1e-4 and np.max(np.abs(got - plain)) < 4e-3
    squares = [t for t in plan.tiles if t.tag[-1] == "square"]
    assert len(squares) == np.sum(wide.tile >= 0)
    t = squares[0]
    assert region.raster(t.level, t.tag, t.box, t.box) is region.raster(
        t.level, t.tag, t.box, t.box
    )
    # inside its county's box, in no square of the level's wide counties: the per-event path
    r = int(wide.rows[0])
    b = groups.boxes[groups.group[r]]
    cand = np.stack(np.meshgrid(np.linspace(b[0], b[1], 40), np.linspace(b[2], b[3], 40)), -1)
    keys = square_key(np.floor(cand[..., 0] / wide.side), np.floor(cand[..., 1] / wide.side))
    outside = cand[~np.isin(keys, wide.keys)]
    assert outside.size  # a box corner far from the county's land
    x3, y3 = x2.copy(), y2.copy()
    x3[r], y3[r] = outside[0]
    _, _, missing = plan.assign(x3, y3)
    assert missing.tolist() == [r]
    got = grouped.mass_error(x3, y3, S_WIDE)[0][r]
    want = region.mass_error(x3[[r]], y3[[r]], np.array([S_WIDE]))[0][0]
    assert got == pytest.approx(want, abs=1e-12)


def test_squares_over_the_raster_budget_leave_the_counties_tiles(us_events, monkeypatch):
    """Where the squares would take a level over ``MAX_FIELD_CELLS``, only the wide counties'
    cases go back to the per-event path: the other counties keep their tiles."""
    from hawkes_cli.engine import region_groups
    from hawkes_cli.engine.raster import FIELD_KAPPA
    from hawkes_cli.engine.region_groups import GroupedMass

    _, _, region, _, polys, codes = us_events
    groups = EventGroups.of_polygons(polys.triangles, polys.tri_owner, codes)
    level, _ = GroupedMass(region, groups).levels(S_WIDE)
    full = GroupedMass(region, groups).plan(level)
    counties = [t for t in full.tiles if t.tag[-1] != "square"]
    h = 2.0 ** (int(level[0]) / region_groups.LATTICE_STEPS) / FIELD_KAPPA
    monkeypatch.setattr(region_groups, "MAX_FIELD_CELLS", region_groups._cells(counties, h) + 1)
    plan = GroupedMass(region, groups).plan(level)
    assert [t.tag for t in plan.tiles] == [t.tag for t in counties] and plan.wide == ()
    assert np.array_equal(np.sort(plan.per_event), np.sort(full.wide[0].rows))


def test_model2_grouped_masses_are_the_per_event_paths(us_events):
    """Model 2 (a lengthscale per county, sigma_x / sqrt(D)), planned per county: at a lattice
    point each county reads the raster level of its lengthscale snapped down to the lattice,
    and the masses are the per-event path's (which reads the same level per event) to the
    rasters' resolution, draw after draw and at two lattice points. Densities that differ
    inside a county fall back to the per-event path."""
    x, y, region, _, polys, codes = us_events
    groups = EventGroups.of_polygons(polys.triangles, polys.tri_owner, codes)
    rng = np.random.default_rng(8)
    county_d = np.exp(rng.uniform(np.log(5.0), np.log(500.0), groups.boxes.shape[0]))
    density = county_d[groups.group]
    grouped = EdgeMass(region, x, y, rows=(0, x.size), density=density, groups=groups)
    assert grouped._grouped is not None and grouped._grouped.factors is not None
    plain = EdgeMass(region, x, y, rows=(0, x.size), density=density)
    for _ in range(2):
        x2, y2 = polys.sample(codes, rng)
        grouped.set_locations(x2, y2)
        plain.set_locations(x2, y2)
        for s in (0.5, 0.5 * 2 ** (1 / 16)):
            a, b = grouped.mass(s)[0], plain.mass(s)[0]
            assert np.mean(np.abs(a - b)) < 1e-4 and np.max(np.abs(a - b)) < 4e-3
            assert np.mean(a < 1) > 0.2
    level, frac = grouped._grouped.levels(0.5)
    assert np.unique(level).size > 20 and not np.any(frac)  # many levels, one read each
    assert np.mean(grouped._offset > 0) > 0.9  # the lengthscales themselves between two
    mixed = density.copy()
    mixed[0] *= 2.0  # one event's density differs from its county's others
    assert EdgeMass(region, x, y, rows=(0, x.size), density=mixed, groups=groups)._grouped is None
