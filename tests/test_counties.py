"""County table, FIPS repairs and county polygons from real sources (hawkes_cli.counties)."""

from __future__ import annotations

import builtins
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from hawkes_cli import counties as C
from hawkes_cli.errors import EventsError, UsageError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def shipped() -> C.CountyTable:
    return C.load_county_table()


def _need(*modules: str) -> None:
    """Skip unless installed (found, not imported: delphi-utils is installed without its deps)."""
    for m in modules:
        if importlib.util.find_spec(m) is None:
            pytest.skip(f"{m} not installed")


# ------------------------------------------------------------------ the shipped table (no deps)


def test_shipped_table_is_found_and_has_provenance(shipped):
    assert Path(shipped.source) == REPO / "data" / "counties.csv"
    assert len(shipped) == 3231  # 3233 polygons less Rose Island (AS) and Northern Islands (MP)
    assert shipped.provenance["table_sha256"] == C.file_sha256(REPO / "data" / "counties.csv")
    note = (REPO / "data" / "COUNTIES.md").read_text()
    assert "plotly-geo" in note and "delphi-utils" in note and "hawkes-prep counties" in note


def test_shipped_table_matches_the_reference_figures(shipped):
    states = shipped.region_mask("states")
    assert states.sum() == 3142  # 50 states + DC
    land = shipped.aland_m2[states].sum() / C.SQ_METRES_PER_SQ_MILE
    assert land == pytest.approx(3_532_068, abs=1)
    assert np.median(shipped.density[states]) == pytest.approx(44.8, abs=0.05)
    rows = shipped.lookup(np.array(["36061", "02290", "23009"]))
    assert shipped.name[rows].tolist() == ["New York", "Yukon-Koyukuk", "Hancock"]
    assert shipped.state[rows].tolist() == ["NY", "AK", "ME"]
    assert shipped.density[rows[0]] == pytest.approx(71_890, rel=1e-4)
    assert shipped.density[rows[1]] == pytest.approx(0.036, rel=0.01)
    # density is persons per square mile of land, exactly as defined
    expect = shipped.population / (shipped.aland_m2 / 2_589_988.110336)
    np.testing.assert_allclose(shipped.density, expect, rtol=1e-15)
    # Manhattan's centroid lies in Manhattan
    assert -74.05 < shipped.lon[rows[0]] < -73.9 and 40.7 < shipped.lat[rows[0]] < 40.9


def test_regions(shipped):
    assert shipped.region_mask("all").sum() == len(shipped)
    conus = shipped.region_mask("conus")
    assert conus.sum() == 3142 - 29 - 5  # less Alaska's 29 and Hawaii's 5 county equivalents
    assert not set(shipped.fips[conus].astype("<U2").tolist()) & {"02", "15", "72"}
    with pytest.raises(UsageError, match=r"unknown region 'europe'"):
        shipped.region_mask("europe")


def test_lookup_marks_unknown_codes(shipped):
    got = shipped.lookup(np.array(["01001", "99999", "01003", ""]))
    assert got[0] >= 0 and got[2] >= 0 and got[1] == -1 and got[3] == -1
    assert shipped.fips[got[0]] == "01001"


def test_table_round_trip_is_exact(shipped, tmp_path):
    out = tmp_path / "t.csv"
    shipped.write_csv(out)
    back = C.CountyTable.read_csv(out)
    for name in ("fips", "state", "population", "aland_m2", "density", "lon", "lat", "area_deg2"):
        np.testing.assert_array_equal(getattr(back, name), getattr(shipped, name))
    assert back.name.tolist() == shipped.name.tolist()
    assert "Doña Ana" in back.name.tolist()  # UTF-8 names survive
    assert out.read_bytes() == (REPO / "data" / "counties.csv").read_bytes()


def test_table_errors(tmp_path):
    with pytest.raises(EventsError, match=r"county table not found.*hawkes-prep counties"):
        C.load_county_table(tmp_path / "none.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("fips,name\n01001,x\n")
    with pytest.raises(EventsError, match=r"missing column.*population"):
        C.load_county_table(bad)
    with pytest.raises(EventsError, match=r"density must be finite and > 0"):
        C.CountyTable(
            fips=["01001"], name=["a"], state=["AL"], population=[0], aland_m2=[1.0],
            density=[0.0], lon=[0.0], lat=[0.0], area_deg2=[1.0],
        )  # fmt: skip


# ------------------------------------------------------------------ FIPS repairs


def test_harmonise_fips_pads_remaps_and_classifies():
    raw = np.array(
        ["1001", "01001", "2270", "02063", "02066", "46113", "51515", "51515.0", "", "  ",
         "12AB5", "123456", "09110", "09190", "06037"]
    )  # fmt: skip
    zips = np.array(["", "", "", "", "", "", "", "", "", "", "", "", "6010", "99999", ""])
    res = C.harmonise_fips(raw, zips, ct_zip={"06010": "09003"})
    assert res.fips.tolist() == [
        "01001", "01001", "02158", "02261", "02261", "46102", "51019", "51019", "", "",
        "", "", "09003", "", "06037",
    ]  # fmt: skip
    st = res.status.tolist()
    assert st[8:10] == [C.FIPS_MISSING] * 2
    assert st[10:12] == [C.FIPS_MALFORMED] * 2
    assert st[13] == C.FIPS_CT_UNMAPPED
    assert st.count(C.FIPS_OK) == 10
    assert res.repairs["zero_padded"] == 2  # "1001" and "2270"
    assert res.repairs["remapped"] == {
        "02063->02261": 1, "02066->02261": 1, "02270->02158": 1, "46113->46102": 1,
        "51515->51019": 2,
    }  # fmt: skip
    assert res.repairs["ct_zip"] == 1


def test_shipped_ct_zip_table_maps_to_old_counties():
    table = C.load_ct_zip_table()
    assert len(table) > 250
    assert set(table.values()) <= {f"090{i:02d}" for i in range(1, 16, 2)}
    assert table["06103"] == "09003"  # Hartford
    assert table["06510"] == "09009"  # New Haven


def test_harmonise_uses_the_shipped_ct_table_by_default():
    res = C.harmonise_fips(np.array(["09110"]), np.array(["6103"]))
    assert res.fips.tolist() == ["09003"] and res.status.tolist() == [C.FIPS_OK]


# ------------------------------------------------------------------ missing optional packages


def test_missing_plotly_geo_says_what_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "_plotly_geo" else real(name)
    )
    with pytest.raises(EventsError, match=r"plotly-geo is not installed \(pip install plotly-geo"):
        C.plotly_geo_file()


def test_missing_delphi_utils_says_what_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "delphi_utils" else real(name)
    )
    with pytest.raises(EventsError, match=r"pip install --no-deps delphi-utils==0.3.24"):
        C.read_population()


def test_missing_pyogrio_points_to_the_shipped_table(monkeypatch, tmp_path):
    real_import = builtins.__import__

    def fake(name, *args, **kwargs):
        if name.startswith("pyogrio"):
            raise ImportError("no pyogrio")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake)
    shp = tmp_path / "x.shp"
    shp.write_bytes(b"")
    with pytest.raises(EventsError, match=r"needs pyogrio.*--locations centroid"):
        C.read_polygon_layer(shp)


# ------------------------------------------------------------------ building from the sources


def test_rebuilt_table_equals_the_shipped_one(shipped):
    _need("pyogrio", "_plotly_geo", "delphi_utils")
    built = C.build_county_table()
    for name in ("fips", "state", "population", "aland_m2", "density", "lon", "lat", "area_deg2"):
        np.testing.assert_array_equal(getattr(built, name), getattr(shipped, name))
    assert built.provenance["plotly_geo_version"] == "1.0.0"
    assert built.provenance["delphi_utils_version"] == "0.3.24"
    assert built.provenance["polygons_crs"] == "EPSG:4269"


def test_rebuilt_ct_zip_table_equals_the_shipped_one(tmp_path):
    _need("delphi_utils")
    out = tmp_path / "ct.csv"
    C.write_ct_zip_table(C.build_ct_zip_table(), out)
    assert out.read_bytes() == (REPO / "data" / "ct_zip_county.csv").read_bytes()


def test_user_population_file_and_missing_counties(tmp_path, caplog):
    _need("pyogrio", "_plotly_geo")
    pop = tmp_path / "pop.csv"
    pop.write_text("fips,pop\n1001,1000\n01003,2000\n")
    table = C.build_county_table(population=pop)
    assert table.fips.tolist() == ["01001", "01003"]
    assert table.density[0] == pytest.approx(1000 / (1_539_609_015 / C.SQ_METRES_PER_SQ_MILE))
    assert "have no (or zero) population" in caplog.text
    bad = tmp_path / "bad.csv"
    bad.write_text("county,people\n01001,3\n")
    with pytest.raises(EventsError, match=r"needs columns 'fips' and 'pop'"):
        C.build_county_table(population=bad)


def test_census_2010_file_in_square_miles():
    _need("pyogrio", "_plotly_geo", "delphi_utils")
    path = C.plotly_geo_file("gz_2010_us_050_00_500k")
    with pytest.raises(EventsError, match=r"no field.*'GEOID'.*CENSUSAREA"):
        C.build_county_table(path, encoding="latin-1", crs=C.CENSUS_CRS)


@pytest.fixture(scope="module")
def small_gpkg(tmp_path_factory):
    """Six real counties from plotly-geo written to a GeoPackage (fast to triangulate)."""
    _need("pyogrio", "_plotly_geo")
    layer = C.read_polygon_layer()
    keep = np.isin(layer.keys, ["01001", "36061", "09003", "46102", "72001", "15003"])
    sub = C.PolygonLayer(layer.keys[keep], layer.geoms[keep], {}, layer.crs, layer.path)
    out = tmp_path_factory.mktemp("poly") / "six.gpkg"
    C.write_polygons(sub, out)
    return out, sub


def test_polygon_file_round_trip(small_gpkg):
    path, sub = small_gpkg
    sampler, layer = C.load_polygons(path)
    assert layer is None and sampler.crs and "4269" in sampler.crs
    assert sorted(sampler.keys) == sorted(sub.keys.tolist())
    import shapely

    order = [sub.keys.tolist().index(k) for k in sampler.keys]
    np.testing.assert_allclose(sampler.area(), shapely.area(sub.geoms[order]), rtol=1e-9)


def test_projected_polygons_have_true_areas(small_gpkg, tmp_path):
    _need("pyproj")
    path, _ = small_gpkg
    sampler, layer = C.load_polygons(path, to_crs="EPSG:5070")  # CONUS Albers equal-area
    assert sampler.crs == "EPSG:5070"
    table = C.load_county_table()
    k = list(sampler.keys).index("01001")
    # polygon (land + water) area in m^2 against Census ALAND + AWATER for Autauga (AL)
    assert sampler.area()[k] == pytest.approx(1_539_609_015 + 25_749_942, rel=0.01)
    assert table.aland_m2[table.lookup(np.array(["01001"]))[0]] == 1_539_609_015
    out = tmp_path / "proj.gpkg"
    C.write_polygons(layer, out)
    again, _ = C.load_polygons(out)
    np.testing.assert_allclose(np.sort(again.area()), np.sort(sampler.area()), rtol=1e-9)
    with pytest.raises(UsageError, match=r"not a projected reference system"):
        C.load_polygons(path, to_crs="EPSG:4326")


def test_cli_counties_rebuilds_the_shipped_files(tmp_path):
    _need("pyogrio", "_plotly_geo", "delphi_utils")
    from click.testing import CliRunner

    from hawkes_cli.cli import prep

    out = tmp_path / "counties.csv"
    res = CliRunner().invoke(prep, ["counties", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "wrote 3231 counties" in res.output
    assert "3142 counties, 3,532,069 sq mi of land, median density 44.8" in res.output
    assert out.read_bytes() == (REPO / "data" / "counties.csv").read_bytes()
    assert (tmp_path / "ct_zip_county.csv").read_bytes() == (
        REPO / "data" / "ct_zip_county.csv"
    ).read_bytes()
