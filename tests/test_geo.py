"""Uniform sampling inside county polygons (hawkes_cli.geo, the cut posterior's location draw)."""

from __future__ import annotations

import importlib.util
import logging
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import shapely
from scipy import stats

from hawkes_cli.errors import EventsError, UsageError
from hawkes_cli.geo import PolygonSampler
from hawkes_cli.simulate import DensityGrid

N_UNIFORM = 200_000
P_MIN = 1e-3


def star(n: int = 5, r_out: float = 3.0, r_in: float = 1.0, centre=(0.0, 0.0)) -> shapely.Polygon:
    """A non-convex n-pointed star."""
    ang = np.pi / 2 + np.arange(2 * n) * np.pi / n
    r = np.where(np.arange(2 * n) % 2 == 0, r_out, r_in)
    return shapely.Polygon(np.c_[centre[0] + r * np.cos(ang), centre[1] + r * np.sin(ang)])


L_SHAPE = shapely.Polygon([(0, 0), (4, 0), (4, 1), (1, 1), (1, 3), (0, 3)])
HOLE = shapely.box(0.0, 0.0, 4.0, 3.0).difference(shapely.box(0.5, 0.75, 2.5, 2.25))
MULTI = shapely.MultiPolygon([shapely.box(0, 0, 1, 1), shapely.box(2, 0, 3.5, 2)])  # areas 1, 3
# A county-like polygon: a wiggly ring of many vertices at US lon/lat.
_T = np.linspace(0, 2 * np.pi, 701)[:-1]
WIGGLY = shapely.Polygon(
    np.c_[-97.3 + (0.4 + 0.15 * np.sin(9 * _T)) * np.cos(_T), 38.2 + 0.3 * np.sin(_T)]
)
SHAPES = {
    "box": shapely.box(-1.0, 2.0, 3.0, 2.5),
    "L": L_SHAPE,
    "star": star(),
    "hole": HOLE,
    "multi": MULTI,
    "wiggly": WIGGLY,
}


def sample_one(poly, n: int, seed: int = 0) -> tuple[PolygonSampler, np.ndarray, np.ndarray]:
    sampler = PolygonSampler.from_polygons(["k"], [poly])
    x, y = sampler.sample(np.zeros(n, dtype=np.int64), np.random.default_rng(seed))
    return sampler, x, y


def chi2_pvalue(poly, x: np.ndarray, y: np.ndarray, cells: int = 12) -> float:
    """Chi-square p-value of points against the uniform law on ``poly`` over a cells x cells grid.

    Expected counts are proportional to each cell's intersection area with the polygon; a point in
    a cell that misses the polygon fails the test outright.
    """
    x0, y0, x1, y1 = poly.bounds
    xe, ye = np.linspace(x0, x1, cells + 1), np.linspace(y0, y1, cells + 1)
    obs, _, _ = np.histogram2d(x, y, bins=[xe, ye])
    boxes = shapely.box(xe[:-1, None], ye[None, :-1], xe[1:, None], ye[None, 1:])
    exp_area = shapely.area(shapely.intersection(boxes, poly))
    assert obs.sum() == x.size, "points outside the bounding box"
    assert obs[exp_area <= 1e-12 * poly.area].sum() == 0, "points in cells that miss the polygon"
    expected = exp_area / exp_area.sum() * x.size
    keep = expected >= 5
    f_exp = expected[keep] * obs[keep].sum() / expected[keep].sum()
    return float(stats.chisquare(obs[keep], f_exp).pvalue)


# ---------------------------------------------------------------------------- containment


def test_boxes_points_inside_their_box():
    rng = np.random.default_rng(3)
    lo = rng.uniform(-100, 100, (50, 2))
    size = rng.uniform(1e-3, 5, (50, 2))
    boxes = np.c_[lo[:, 0], lo[:, 0] + size[:, 0], lo[:, 1], lo[:, 1] + size[:, 1]]
    keys = [f"b{i:02d}" for i in range(50)]
    sampler = PolygonSampler.from_boxes(keys, boxes)
    codes = rng.integers(0, 50, 100_000)
    x, y = sampler.sample(codes, rng)
    b = boxes[codes]
    assert np.all((x >= b[:, 0]) & (x <= b[:, 1]) & (y >= b[:, 2]) & (y <= b[:, 3]))
    assert set(np.unique(codes)) == set(range(50))
    np.testing.assert_allclose(sampler.area(), size[:, 0] * size[:, 1], rtol=1e-12)


@pytest.mark.parametrize("name", ["L", "star", "wiggly"])
def test_nonconvex_points_inside(name):
    poly = SHAPES[name]
    _, x, y = sample_one(poly, 50_000, seed=1)
    assert np.all(shapely.intersects_xy(poly, x, y))
    # the convex hull is strictly larger, so a hull sampler would put points outside
    assert poly.convex_hull.area > 1.2 * poly.area


def test_hole_gets_no_points():
    hole = shapely.box(0.5, 0.75, 2.5, 2.25)
    _, x, y = sample_one(HOLE, N_UNIFORM, seed=2)
    assert np.all(shapely.intersects_xy(HOLE, x, y))
    assert not np.any(shapely.contains_xy(hole, x, y))


def test_multipolygon_parts_in_proportion_to_area():
    sampler, x, y = sample_one(MULTI, 100_000, seed=4)
    part_a, part_b = MULTI.geoms
    in_a = shapely.intersects_xy(part_a, x, y)
    in_b = shapely.intersects_xy(part_b, x, y)
    assert np.all(in_a ^ in_b)
    # part a has area 1 of 4
    assert stats.binomtest(int(in_a.sum()), x.size, 0.25).pvalue > P_MIN
    assert sampler.area()[0] == pytest.approx(4.0, rel=1e-12)


# ---------------------------------------------------------------------------- uniformity


@pytest.mark.parametrize("name", ["box", "L", "star", "hole", "multi", "wiggly"])
def test_uniform_chi_square(name):
    poly = SHAPES[name]
    _, x, y = sample_one(poly, N_UNIFORM, seed=11)
    assert chi2_pvalue(poly, x, y) > P_MIN


def test_chi_square_detects_non_uniform_draws():
    """The same test rejects two plausible bugs, so passing it means something."""
    poly = SHAPES["star"]
    sampler = PolygonSampler.from_polygons(["k"], [poly])
    rng = np.random.default_rng(5)
    tri = sampler.triangles
    assert np.ptp(sampler.tri_area) > 0.1 * sampler.tri_area.max()  # unequal triangles
    # Bug 1: triangles picked uniformly instead of by area.
    t = rng.integers(0, len(tri), N_UNIFORM)
    u, v = rng.random(N_UNIFORM), rng.random(N_UNIFORM)
    flip = u + v > 1
    u, v = np.where(flip, 1 - u, u), np.where(flip, 1 - v, v)
    p = tri[t, 0] + u[:, None] * (tri[t, 1] - tri[t, 0]) + v[:, None] * (tri[t, 2] - tri[t, 0])
    assert chi2_pvalue(poly, p[:, 0], p[:, 1]) < P_MIN
    # Bug 2: triangles by area but v ~ U(0, 1 - u) (crowds vertex A) instead of reflection.
    cum = np.cumsum(sampler.tri_area) / sampler.tri_area.sum()
    t = np.minimum(np.searchsorted(cum, rng.random(N_UNIFORM)), len(tri) - 1)
    u = rng.random(N_UNIFORM)
    v = rng.random(N_UNIFORM) * (1 - u)
    p = tri[t, 0] + u[:, None] * (tri[t, 1] - tri[t, 0]) + v[:, None] * (tri[t, 2] - tri[t, 0])
    assert chi2_pvalue(poly, p[:, 0], p[:, 1]) < P_MIN


def test_several_polygons_each_uniform():
    keys = list(SHAPES)
    sampler = PolygonSampler.from_polygons(keys, list(SHAPES.values()))
    rng = np.random.default_rng(8)
    codes = rng.integers(0, len(keys), 6 * 40_000)
    x, y = sampler.sample(codes, rng)
    for k, name in enumerate(keys):
        sel = codes == k
        assert np.all(shapely.intersects_xy(SHAPES[name], x[sel], y[sel])), name
        assert chi2_pvalue(SHAPES[name], x[sel], y[sel], cells=6) > P_MIN, name


# ---------------------------------------------------------------------------- structure


@pytest.mark.parametrize("name", list(SHAPES))
def test_triangle_areas_sum_to_polygon_area(name):
    poly = SHAPES[name]
    sampler = PolygonSampler.from_polygons(["k"], [poly])
    assert sampler.triangles.shape[1:] == (3, 2)
    assert np.all(sampler.tri_area > 0)
    assert sampler.tri_area.sum() == pytest.approx(poly.area, rel=1e-12)
    assert sampler.area()[0] == pytest.approx(poly.area, rel=1e-12)
    assert sampler.cum_area[-1] == 1.0
    assert np.all(np.diff(sampler.cum_area) >= 0)
    # the triangles tile the polygon: their union is the polygon
    union = shapely.union_all(
        shapely.polygons(np.concatenate([sampler.triangles, sampler.triangles[:, :1]], 1))
    )
    assert union.symmetric_difference(poly).area <= 1e-9 * poly.area


def test_triangles_grouped_by_owner_with_offsets():
    keys = list(SHAPES)
    sampler = PolygonSampler.from_polygons(keys, list(SHAPES.values()))
    assert sampler.keys == tuple(keys)
    assert np.all(np.diff(sampler.tri_owner) >= 0)
    assert sampler.offsets[0] == 0 and sampler.offsets[-1] == len(sampler.triangles)
    for k, name in enumerate(keys):
        lo, hi = sampler.offsets[k], sampler.offsets[k + 1]
        assert np.all(sampler.tri_owner[lo:hi] == k)
        assert sampler.cum_area[hi - 1] == 1.0
        assert sampler.area()[k] == pytest.approx(SHAPES[name].area, rel=1e-12)
    cent = sampler.centroids()
    want = shapely.get_coordinates(shapely.centroid(np.array(list(SHAPES.values()))))
    np.testing.assert_allclose(cent, want, rtol=1e-9, atol=1e-9)
    assert not sampler.triangles.flags.writeable


def test_from_grid_matches_density_grid_cells():
    grid = DensityGrid.log_uniform(bounds=(-3.0, 4.0, 1.0, 6.0), nx=7, ny=5, seed=2)
    sampler = PolygonSampler.from_grid(grid)
    fips = grid.fips_codes()
    assert sampler.keys == tuple(fips)
    np.testing.assert_array_equal(sampler.codes(fips), np.arange(35))
    np.testing.assert_allclose(sampler.area(), np.full(35, 1.0), rtol=1e-12)
    rng = np.random.default_rng(6)
    event_fips = fips[rng.integers(0, 35, 70_000)]
    x, y = sampler.sample(sampler.codes(event_fips), rng)
    density, got = grid.lookup(x, y)
    np.testing.assert_array_equal(got, event_fips)
    np.testing.assert_array_equal(density, grid.values.ravel()[sampler.codes(event_fips)])


# ---------------------------------------------------------------------------- codes


def test_codes_maps_keys_and_rejects_unknown():
    keys = ["01001", "01003", "56045", "11001"]
    sampler = PolygonSampler.from_boxes(keys, np.tile([0.0, 1.0, 0.0, 1.0], (4, 1)))
    np.testing.assert_array_equal(
        sampler.codes(np.array(["56045", "01001", "11001", "01001"])), [2, 0, 3, 0]
    )
    assert sampler.codes(np.array([], dtype=str)).shape == (0,)
    assert sampler.codes(np.array(["01003"], dtype=object))[0] == 1
    bad = np.array(["01001", "99001", "99002", "99003", "99004", "99005", "99006", "99006"])
    with pytest.raises(EventsError) as info:
        sampler.codes(bad)
    msg = str(info.value)
    assert "7 event(s)" in msg and "6 unknown" in msg and "(6 in all)" in msg
    assert "'99001'" in msg and "'99005'" in msg and "'99006'" not in msg  # at most 5 listed
    with pytest.raises(EventsError, match="zero-padded"):
        sampler.codes(np.array(["1001"]))


# ---------------------------------------------------------------------------- reproducibility


def test_same_seed_same_points_and_fixed_rng_use():
    sampler = PolygonSampler.from_polygons(["a", "b"], [SHAPES["star"], SHAPES["hole"]])
    codes = np.random.default_rng(0).integers(0, 2, 10_001)
    x1, y1 = sampler.sample(codes, np.random.default_rng(42))
    x2, y2 = sampler.sample(codes, np.random.default_rng(42))
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(y1, y2)
    x3, _ = sampler.sample(codes, np.random.default_rng(43))
    assert not np.array_equal(x1, x3)
    # exactly rng.random((N, 3)) is consumed ...
    rng, ref = np.random.default_rng(42), np.random.default_rng(42)
    sampler.sample(codes, rng)
    ref.random((codes.size, 3))
    assert rng.bit_generator.state == ref.bit_generator.state
    # ... so a draw split in two (e.g. across a restart) gives the same points
    rng = np.random.default_rng(42)
    xa, ya = sampler.sample(codes[:4000], rng)
    xb, yb = sampler.sample(codes[4000:], rng)
    np.testing.assert_array_equal(np.r_[xa, xb], x1)
    np.testing.assert_array_equal(np.r_[ya, yb], y1)
    # and nothing is drawn for no events
    rng = np.random.default_rng(1)
    x0, y0 = sampler.sample(np.zeros(0, dtype=np.int64), rng)
    assert x0.shape == y0.shape == (0,)
    assert rng.bit_generator.state == np.random.default_rng(1).bit_generator.state


def test_code_order_gives_the_same_points():
    """``order`` (a chain's redraws) only changes how the triangle search runs: over 80,000
    triangles (beyond the size where queries are sorted first) the points are the same, and an
    order of the wrong shape is ignored."""
    grid = DensityGrid.log_uniform(bounds=(0.0, 200.0, 0.0, 200.0), nx=200, ny=200, seed=3)
    sampler = PolygonSampler.from_grid(grid)
    assert sampler.triangles.shape[0] > 65_536
    codes = np.random.default_rng(4).integers(0, 40_000, 50_000)
    plain = sampler.sample(codes, np.random.default_rng(8))
    ordered = sampler.sample(codes, np.random.default_rng(8), sampler.code_order(codes))
    wrong = sampler.sample(codes, np.random.default_rng(8), np.arange(3))
    for got in (ordered, wrong):
        np.testing.assert_array_equal(got[0], plain[0])
        np.testing.assert_array_equal(got[1], plain[1])
    np.testing.assert_array_equal(np.diff(codes[sampler.code_order(codes)]) >= 0, True)


def test_million_events_over_3000_boxes():
    """Vectorised: a per-event or per-polygon Python loop would make this test very slow."""
    k = 3000
    rng = np.random.default_rng(9)
    x0 = rng.uniform(-120, -70, k)
    y0 = rng.uniform(25, 49, k)
    boxes = np.c_[x0, x0 + 0.5, y0, y0 + 0.3]
    sampler = PolygonSampler.from_boxes([f"{i:05d}" for i in range(k)], boxes)
    codes = rng.integers(0, k, 1_000_000)
    x, y = sampler.sample(codes, rng)
    assert x.shape == y.shape == (1_000_000,) and x.dtype == np.float64
    b = boxes[codes]
    assert np.all((x >= b[:, 0]) & (x <= b[:, 1]) & (y >= b[:, 2]) & (y <= b[:, 3]))


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("geom", "match"),
    [
        (lambda: shapely.Polygon(), "empty"),
        (lambda: shapely.Polygon([(0, 0), (1, 1), (2, 2)]), "zero area"),
        (lambda: shapely.Point(0, 0), "not \\(Multi\\)Polygons"),
        (lambda: None, "missing"),
        (lambda: shapely.Polygon([(0, 0), (np.nan, 0), (1, 1)]), "non-finite"),
    ],
)
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_bad_polygon_names_its_key(geom, match):
    geom = geom()
    with pytest.raises(EventsError, match=match) as info:
        PolygonSampler.from_polygons(["ok", "06037"], [shapely.box(0, 0, 1, 1), geom])
    assert "'06037'" in str(info.value)
    assert "'ok'" not in str(info.value)


def test_bad_arguments():
    with pytest.raises(UsageError):
        PolygonSampler.from_polygons(["a", "b"], [shapely.box(0, 0, 1, 1)])
    with pytest.raises(EventsError, match="duplicate"):
        PolygonSampler.from_polygons(["a", "a"], [shapely.box(0, 0, 1, 1)] * 2)
    with pytest.raises(EventsError, match="at least one"):
        PolygonSampler.from_polygons([], [])
    with pytest.raises(EventsError, match="'b'"):
        PolygonSampler.from_boxes(["a", "b"], np.array([[0, 1, 0, 1], [1, 1, 0, 1]]))
    with pytest.raises(UsageError):
        PolygonSampler.from_boxes(["a"], np.array([[0, 1, 0]]))
    sampler = PolygonSampler.from_boxes(["a"], np.array([[0.0, 1.0, 0.0, 1.0]]))
    rng = np.random.default_rng(0)
    with pytest.raises(UsageError):
        sampler.sample(np.array([0, 1]), rng)
    with pytest.raises(UsageError):
        sampler.sample(np.array([-1]), rng)
    with pytest.raises(UsageError):
        sampler.sample(np.array([0.0]), rng)


def test_invalid_polygon_is_repaired_with_warning(caplog):
    bowtie = shapely.Polygon([(0, 0), (2, 2), (2, 0), (0, 2)])
    assert not bowtie.is_valid
    with caplog.at_level(logging.WARNING, logger="hawkes_cli.geo"):
        sampler = PolygonSampler.from_polygons(["bow"], [bowtie])
    assert "bow" in caplog.text
    assert sampler.area()[0] == pytest.approx(2.0, rel=1e-12)
    x, y = sampler.sample(np.zeros(20_000, dtype=np.int64), np.random.default_rng(0))
    assert np.all(shapely.intersects_xy(shapely.make_valid(bowtie), x, y))


# ---------------------------------------------------------------------------- files


def test_from_file_missing_file(tmp_path):
    with pytest.raises(EventsError, match="not found"):
        PolygonSampler.from_file(tmp_path / "nope.shp")


def test_from_file_without_pyogrio(tmp_path, monkeypatch):
    path = tmp_path / "counties.gpkg"
    path.write_bytes(b"")
    monkeypatch.setitem(sys.modules, "pyogrio", None)
    with pytest.raises(EventsError, match="pip install pyogrio"):
        PolygonSampler.from_file(path)


@pytest.fixture
def fake_pyogrio(monkeypatch):
    """A stand-in for pyogrio's read_info and raw.read holding three polygons."""
    geoms = [shapely.box(0, 0, 1, 1), HOLE, MULTI]
    state = {"crs": None, "keys": np.array(["01001", "01003", "01005"], dtype=object)}

    def read_info(path, layer=None, encoding=None):
        return {"fields": np.array(["STATEFP", "GEOID", "NAME"]), "crs": state["crs"]}

    def read(path, layer=None, encoding=None, columns=None):
        assert columns == ["GEOID"]
        meta = {"crs": state["crs"], "fields": np.array(columns)}
        return meta, None, shapely.to_wkb(np.array(geoms)), (state["keys"],)

    mod = types.ModuleType("pyogrio")
    raw = types.ModuleType("pyogrio.raw")
    mod.read_info, raw.read, mod.raw = read_info, read, raw
    monkeypatch.setitem(sys.modules, "pyogrio", mod)
    monkeypatch.setitem(sys.modules, "pyogrio.raw", raw)
    return geoms, state


def test_from_file_reads_polygons(tmp_path, fake_pyogrio, caplog):
    geoms, state = fake_pyogrio
    path = tmp_path / "counties.shp"
    path.write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger="hawkes_cli.geo"):
        sampler = PolygonSampler.from_file(path)
    assert "no reference system" in caplog.text
    assert sampler.keys == ("01001", "01003", "01005")
    assert sampler.crs is None
    np.testing.assert_allclose(sampler.area(), [g.area for g in geoms], rtol=1e-12)
    assert PolygonSampler.from_file(path, crs="EPSG:4269").crs == "EPSG:4269"
    state["crs"] = "EPSG:4269"
    assert PolygonSampler.from_file(path, crs="epsg:4269").crs == "EPSG:4269"
    with pytest.raises(UsageError, match="EPSG:4326"):
        PolygonSampler.from_file(path, crs="EPSG:4326")
    with pytest.raises(EventsError, match="STATEFP, GEOID, NAME"):
        PolygonSampler.from_file(path, key_field="FIPS")
    state["keys"] = np.array(["01001", "01001", "01005"], dtype=object)
    with pytest.raises(EventsError, match=r"counties\.shp: duplicate polygon keys: '01001'"):
        PolygonSampler.from_file(path)
    state["keys"] = np.array(["01001", None, "01005"], dtype=object)
    with pytest.raises(EventsError, match="blank 'GEOID'"):
        PolygonSampler.from_file(path)


def test_from_file_real_geopackage(tmp_path):
    """Round trip through a real OGR file (skipped where pyogrio is not installed)."""
    raw = pytest.importorskip("pyogrio.raw")

    geoms = np.array([shapely.box(0, 0, 1, 1), HOLE, MULTI])
    path = tmp_path / "c.gpkg"
    multi = [g if g.geom_type == "MultiPolygon" else shapely.MultiPolygon([g]) for g in geoms]
    raw.write(
        path,
        shapely.to_wkb(np.array(multi)),
        (np.array(["a1", "a2", "a3"], dtype=object),),
        ["GEOID"],
        geometry_type="MultiPolygon",
        crs="EPSG:4269",
    )
    sampler = PolygonSampler.from_file(path, crs="EPSG:4269")
    assert sampler.keys == ("a1", "a2", "a3")
    np.testing.assert_allclose(sampler.area(), shapely.area(geoms), rtol=1e-12)


@pytest.mark.slow
def test_census_counties_from_plotly_geo():
    """The real county file (skipped unless pyogrio and plotly-geo are installed)."""
    raw = pytest.importorskip("pyogrio.raw")
    spec = importlib.util.find_spec("_plotly_geo")
    if spec is None:
        pytest.skip("plotly-geo not installed")
    shp = Path(spec.submodule_search_locations[0]) / "package_data/cb_2016_us_county_500k.shp"
    sampler = PolygonSampler.from_file(shp, crs="EPSG:4269", encoding="utf-8")
    assert len(sampler) == 3233
    rng = np.random.default_rng(0)
    fips = np.array(["36061", "02290", "06037", "72127"])
    codes = sampler.codes(fips[rng.integers(0, 4, 40_000)])
    x, y = sampler.sample(codes, rng)
    _, _, wkb, (geoid,) = raw.read(shp, columns=["GEOID"])
    assert sampler.keys == tuple(geoid)
    polys = shapely.from_wkb(wkb)
    assert np.all(shapely.intersects_xy(polys[codes], x, y))
    np.testing.assert_allclose(sampler.area(), shapely.area(polys), rtol=1e-12)
