"""hawkes-prep hhs: the HHS facility file turned into cases (hawkes_cli.prep).

Every test writes a small file in the real 128-column format (either spelling of the header)
with hand-chosen rows and compares the result with counts worked out by hand.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import importlib.util
import json
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest

from hawkes_cli import prep as P
from hawkes_cli.counties import load_county_table
from hawkes_cli.data import load_events
from hawkes_cli.errors import EventsError, UsageError

ADULT = "previous_day_admission_adult_covid_confirmed_7_day_sum"
PED = "previous_day_admission_pediatric_covid_confirmed_7_day_sum"
CENSUS_ADULT = "total_adult_patients_hospitalized_confirmed_covid_7_day_sum"
D = dt.date


def have(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


READERS = ["csv", pytest.param("pyarrow", marks=pytest.mark.skipif(
    not have("pyarrow"), reason="pyarrow not installed"))]  # fmt: skip
POLYGONS = pytest.mark.skipif(
    not have("pyogrio", "_plotly_geo"), reason="needs pyogrio and plotly-geo"
)


def write_hhs(path: Path, rows: list[dict[str, str]], *, spelling: str = "bulk") -> Path:
    """A facility file with the full 128-column header and plausible filler values.

    ``rows`` give the interesting values (by normalised column name); every other column gets
    a filler: numbers, blanks, a quoted name with a comma, a ``POINT (lon lat)`` address.
    """
    header = list(P.HHS_COLUMNS)
    if spelling == "api":
        header = [P.api_spelling(c) for c in header]
    keys = [P.normalise_column(c) for c in header]
    filler = {
        "state": "AL", "ccn": "010001", "hospital_name": "ST. MARY'S MEDICAL CENTER, INC.",
        "address": '1 "MAIN" ST', "city": "DOTHAN", "zip": "36301",
        "hospital_subtype": "Short Term", "is_metro_micro": "true",
        "geocoded_hospital_address": "POINT (-85.36 31.21)", "hhs_ids": "[a, b]",
        "is_corrected": "", ADULT: "0", PED: "0",
    }  # fmt: skip
    with open(path, "w", newline="", encoding="utf-8") as handle:
        w = csv.writer(handle)
        w.writerow(header)
        for i, row in enumerate(rows):
            values = []
            for k in keys:
                if k in row:
                    values.append(row[k])
                elif k in filler:
                    values.append(filler[k])
                else:
                    values.append(("12.5", "-999999", "", "7", "860")[(i + len(values)) % 5])
            w.writerow(values)
    return path


def row(pk: str, week: str, fips: str, adult: str = "0", ped: str = "0", **more: str) -> dict:
    return {"hospital_pk": pk, "collection_week": week, "fips_code": fips, ADULT: adult,
            PED: ped, **more}  # fmt: skip


# Tricky rows, each with what must happen to it: ("keep", cases) or (reason, 0).
# Weeks are Fridays; admissions' case window is the week shifted one day earlier.
TRICKY: list[tuple[dict, str, int]] = [
    (row("A", "2021/01/08", "1001", "5", "0"), "keep", 5),  # unpadded FIPS
    (row("A", "2021-01-15", "01001", "-999999", ""), "keep", 2),  # suppressed (+ blank ped)
    (row("B", "2021-01-08T00:00:00.000", "36061", "10", "2"), "keep", 12),  # API date format
    (row("B", "2021/01/08", "36061", "99", "0"), "duplicate", 0),  # same week, other format
    (row("C", "2021/13/01", "01001", "3"), "bad_date", 0),
    (row("C", "", "01001", "3"), "bad_date", 0),
    (row("C2", "08/01/2021", "01001", "3"), "bad_date", 0),
    (row("D", "2021/01/08", "", "4"), "missing_fips", 0),
    (row("D2", "2021/01/08", "1O01", "4"), "malformed_fips", 0),
    (row("E", "2021/01/08", "2270", "3"), "keep", 3),  # -> 02158 Kusilvak
    (row("F", "2021/01/08", "46113", "4"), "keep", 4),  # -> 46102 Oglala Lakota
    (row("G", "2021/01/08", "09110", "2", zip="6010"), "keep", 2),  # CT region -> 09003
    (row("G2", "2021/01/08", "09190", "2", zip="99999"), "ct_planning_region", 0),
    (row("H", "2021/01/08", "72001", "7"), "outside_region", 0),  # Puerto Rico
    (row("I", "2021/01/08", "64002", "3"), "territory_not_in_polygons", 0),  # Micronesia
    (row("J", "2021/01/08", "01999", "3"), "unknown_fips", 0),
    (row("K", "2021/01/08", "01001", "", ""), "not_reported", 0),
    (row("L", "2021/01/08", "01001", "abc", "1"), "non_numeric", 0),
    (row("M", "2021/01/08", "01001", "-5", "1"), "negative", 0),
    (row("N", "2021/01/08", "01003", "0", "0"), "keep", 0),
    (row("O", "2021/01/08", "01003", "2", ""), "keep", 2),  # blank pediatric adds 0
    (row("P", "2021/01/08", "02063", "1"), "keep", 1),  # -> 02261 Valdez-Cordova
    (row("Q", "2021/01/08", "51515", "1", "1"), "keep", 2),  # -> 51019 Bedford
]
TRICKY_FIPS = {"A": "01001", "B": "36061", "E": "02158", "F": "46102", "G": "09003",
               "O": "01003", "P": "02261", "Q": "51019"}  # fmt: skip


def opts(**kw) -> P.HHSOptions:
    base = {"n": 0, "seed": 7, "suppressed": 2.0, "locations": "centroid", "engine": "csv"}
    return P.HHSOptions(**{**base, **kw})


def run(tmp_path: Path, rows: list[dict], *, name: str = "cases.h5", spelling: str = "bulk",
        **kw) -> tuple[P.PrepResult, object]:  # fmt: skip
    src = write_hhs(tmp_path / f"facility-{spelling}.csv", rows, spelling=spelling)
    extra = {k: kw.pop(k) for k in ("polygons", "polygons_out") if k in kw}
    result = P.prepare_hhs(src, tmp_path / name, opts(**kw), **extra)
    return result, load_events(tmp_path / name, need_density=True)


# ------------------------------------------------------------------ the schema


def test_header_has_128_columns_in_both_spellings():
    assert len(P.HHS_COLUMNS) == 128 == len(set(P.HHS_COLUMNS))
    bulk = [c for c in P.HHS_COLUMNS if "-" in c or "+" in c or "ED" in c]
    assert "previous_day_admission_adult_covid_confirmed_80+_7_day_sum" in bulk
    assert "previous_day_covid_ED_visits_7_day_sum" in bulk
    assert P.api_spelling("previous_day_admission_adult_covid_confirmed_18-19_7_day_sum") == (
        "previous_day_admission_adult_covid_confirmed_18_19_7_day_sum"
    )
    assert P.api_spelling("previous_day_total_ED_visits_7_day_sum") == (
        "previous_day_total_ed_visits_7_day_sum"
    )
    assert P.normalise_column("\ufeffHospital PK ") == "hospital_pk"


@pytest.mark.parametrize(
    "text, day",
    [("2021/01/08", D(2021, 1, 8)), ("2021-01-08", D(2021, 1, 8)),
     ("2021-01-08T00:00:00.000", D(2021, 1, 8)), (" 2021-1-8 ", D(2021, 1, 8)),
     ("2021/02/30", None), ("2021-01-08T12:00:00.000", None), ("08/01/2021", None),
     ("", None), ("2021/01-08", None)],
)  # fmt: skip
def test_date_formats(text, day):
    assert P.parse_date(text) == day


def test_parse_counts():
    vals, st = P.parse_counts(np.array(["3", "", " 4.5 ", "-999999", "-999999.0", "x", "-2",
                                        "nan", "0"]))  # fmt: skip
    assert st.tolist() == [0, 1, 0, 2, 2, 3, 4, 3, 0]
    assert vals.tolist() == [3, 0, 4.5, 0, 0, 0, 0, 0, 0]


# ------------------------------------------------------------------ counts by hand


@pytest.mark.parametrize("engine", READERS)
def test_tricky_rows_hand_counted(tmp_path, engine):
    rows = [r for r, _, _ in TRICKY]
    result, ev = run(tmp_path, rows, engine=engine)
    a = result.attrs
    expect_drop = Counter(what for _, what, _ in TRICKY if what != "keep")
    assert {k: v for k, v in a["dropped"].items() if v} == dict(expect_drop)
    assert a["rows_read"] == len(TRICKY)
    assert a["rows_kept"] == sum(what == "keep" for _, what, _ in TRICKY) == 10
    assert a["rows_dropped"] == sum(expect_drop.values())
    assert a["rows_zero"] == 1 and a["rows_imputed"] == 1 and a["values_imputed"] == 1
    total = sum(n for _, what, n in TRICKY if what == "keep")
    assert a["cases_expanded"] == a["cases_in_window"] == a["cases_kept"] == ev.n == total == 33
    per_pk: Counter = Counter()
    for r, what, n in TRICKY:
        if what == "keep" and n:
            per_pk[TRICKY_FIPS[r["hospital_pk"]]] += n
    assert Counter(ev.fips.tolist()) == per_pk
    assert a["fips_repairs"] == {
        "zero_padded": 2, "ct_zip": 1,
        "remapped": {"02270->02158": 1, "46113->46102": 1, "02063->02261": 1, "51515->51019": 1},
    }  # fmt: skip
    assert a["reader"] == engine


def test_density_and_centroid_come_from_the_county_table(tmp_path):
    _, ev = run(tmp_path, [r for r, _, _ in TRICKY])
    table = load_county_table()
    idx = table.lookup(ev.fips)
    np.testing.assert_array_equal(ev.density, table.density[idx])
    np.testing.assert_array_equal(ev.x, table.lon[idx])
    np.testing.assert_array_equal(ev.y, table.lat[idx])
    assert ev.density[ev.fips == "36061"][0] == pytest.approx(71_890, rel=1e-4)


def test_dropped_rows_are_listed_by_record(tmp_path):
    result, _ = run(tmp_path, [r for r, _, _ in TRICKY])
    dropped = P.read_dropped(Path(result.out))
    expect = [(i + 1, what) for i, (_, what, _) in enumerate(TRICKY) if what != "keep"]
    assert list(zip(dropped["record"].tolist(), dropped["reason"].tolist(), strict=True)) == expect
    i = dropped["reason"].tolist().index("malformed_fips")
    assert dropped["fips_code"][i] == "1O01" and dropped["hospital_pk"][i] == "D2"
    assert dropped["collection_week"][dropped["reason"] == "bad_date"].tolist() == [
        "2021/13/01", "", "08/01/2021"]  # fmt: skip


def test_metadata(tmp_path):
    result, ev = run(tmp_path, [r for r, _, _ in TRICKY], seed=11)
    src = tmp_path / "facility-bulk.csv"
    a = ev.attrs
    assert a["source_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert a["source_bytes"] == src.stat().st_size
    assert a["seed"] == 11 and a["options"]["seed"] == 11 and a["options"]["suppressed"] == 2.0
    assert a["time_unit"] == "day" and a["crs"] == "lonlat"
    assert a["count_kind"] == "admissions" and "counted once" in a["count_description"]
    assert a["columns"][P.normalise_column(ADULT)] == ADULT
    assert a["window_shift_days"] == -1
    assert set(a["dropped"]) == {r.key for r in P.REASONS}
    assert a["rows_read"] == 23 and a["cases_kept"] == 33
    assert a["origin_date"] == "2021-01-07"  # first day of the earliest window (Jan 8 - 1)
    table = load_county_table()
    assert a["area"] == pytest.approx(table.area_deg2[table.region_mask("states")].sum())
    assert a["land_area_sq_mi"] == pytest.approx(3_532_068, abs=1)
    assert a["county_table_sha256"] == table.provenance["table_sha256"]
    with h5py.File(result.out) as f:
        assert json.loads(f["dropped"].attrs["reasons"])[0][0] == "bad_date"


# ------------------------------------------------------------------ spellings and engines


def test_both_spellings_and_engines_give_the_same_events(tmp_path):
    rows = [r for r, _, _ in TRICKY]
    runs = [(s, e) for s in ("bulk", "api") for e in ("csv", "pyarrow") if e == "csv" or
            have("pyarrow")]  # fmt: skip
    outs = []
    for spelling, engine in runs:
        _, ev = run(tmp_path, rows, spelling=spelling, engine=engine, name=f"{spelling}{engine}.h5",
                    suppressed=1.5, n=20, locations="centroid")  # fmt: skip
        outs.append(ev)
        with open(tmp_path / f"facility-{spelling}.csv") as handle:
            head = handle.readline()
        assert ("18-19" in head) == (spelling == "bulk")
    for ev in outs[1:]:
        for name in ("time", "x", "y", "density", "fips"):
            np.testing.assert_array_equal(getattr(ev, name), getattr(outs[0], name))


def test_gzip_input(tmp_path):
    import gzip

    src = write_hhs(tmp_path / "f.csv", [row("A", "2021/01/08", "01001", "5")])
    gz = tmp_path / "f.csv.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    res = P.prepare_hhs(gz, tmp_path / "o.h5", opts())
    assert res.n_events == 5


# ------------------------------------------------------------------ day windows


def _days(ev) -> list[dt.date]:
    origin = D.fromisoformat(ev.attrs["origin_date"])
    return [origin + dt.timedelta(days=int(t)) for t in ev.time]


def test_admissions_fall_in_the_week_shifted_a_day_earlier(tmp_path):
    _, ev = run(tmp_path, [row("A", "2021/01/08", "01001", "600", "100")])
    days = Counter(_days(ev))
    assert ev.n == 700
    assert sorted(days) == [D(2021, 1, 7) + dt.timedelta(days=k) for k in range(7)]
    assert min(days.values()) > 60  # ~100 a day, uniform
    assert np.all(ev.time == np.floor(ev.time))  # whole days: ties are intended


def test_census_days_are_the_collection_week(tmp_path):
    r = row("A", "2021/01/08", "01001", **{CENSUS_ADULT: "700"})
    res, ev = run(tmp_path, [r], count="census")
    assert sorted(set(_days(ev))) == [D(2021, 1, 8) + dt.timedelta(days=k) for k in range(7)]
    assert res.attrs["window_shift_days"] == 0 and "double counting" in res.attrs[
        "count_description"]  # fmt: skip


def test_date_window_keeps_binomial_share_of_partial_weeks(tmp_path):
    rows = [row("A", "2021/01/08", "01001", "700"), row("B", "2020/12/04", "01001", "50"),
            row("C", "2021/01/22", "01001", "50")]  # fmt: skip
    res, ev = run(tmp_path, rows, start=D(2021, 1, 10), end=D(2021, 1, 20))
    a = res.attrs
    assert a["dropped"]["outside_window"] == 2  # weeks entirely before / after
    days = _days(ev)
    assert min(days) >= D(2021, 1, 10) and max(days) <= D(2021, 1, 13)
    assert 700 * 4 / 7 - 5 * 13 < ev.n < 700 * 4 / 7 + 5 * 13  # Binomial(700, 4/7)
    assert a["cases_expanded"] == 700 and a["cases_outside_window"] == 700 - ev.n
    assert a["origin_date"] == "2021-01-10" and ev.time.min() >= 0


def test_origin_and_jitter(tmp_path):
    _, ev = run(tmp_path, [row("A", "2021/01/08", "01001", "300")], origin=D(2021, 1, 1),
                jitter=True)  # fmt: skip
    assert ev.attrs["origin_date"] == "2021-01-01"
    assert ev.time.min() >= 6.0 and ev.time.max() < 13.0
    assert np.any(ev.time != np.floor(ev.time))
    with pytest.raises(UsageError, match=r"after --start"):
        opts(origin=D(2021, 2, 1), start=D(2021, 1, 1))


def test_an_origin_after_the_first_case_is_refused_and_nothing_written(tmp_path):
    # the week of 2021-01-08 holds admissions of Jan 7-13: --origin 2021-01-08 alone would
    # put Jan 7's cases at t = -1
    rows = [row("A", "2021/01/08", "01001", "300")]
    with pytest.raises(
        UsageError,
        match=r"--origin 2021-01-08 is after the first case's day "
        r"2021-01-07.*--origin 2021-01-07 or earlier.*--start 2021-01-08",
    ):
        run(tmp_path, rows, origin=D(2021, 1, 8))  # fmt: skip
    assert not (tmp_path / "cases.h5").exists()
    _, ev = run(tmp_path, rows, origin=D(2021, 1, 8), start=D(2021, 1, 8))  # as it says
    assert ev.time.min() >= 0


def test_suppressed_imputation_is_unbiased_and_can_drop(tmp_path):
    rows = [row(f"H{i}", "2021/01/08", "01001", "-999999", "0") for i in range(2000)]
    res, ev = run(tmp_path, rows, suppressed=1.5)
    assert res.attrs["values_imputed"] == 2000
    assert 3000 - 5 * 22.4 < ev.n < 3000 + 5 * 22.4  # 2000 x (1 or 2), sd = sqrt(2000)/2
    res, ev = run(tmp_path, [*rows[:10], row("Z", "2021/01/08", "01001", "3")],
                  suppressed=None, name="drop.h5")  # fmt: skip
    assert res.attrs["dropped"]["suppressed"] == 10 and ev.n == 3


# ------------------------------------------------------------------ down-sampling


def test_downsampling_is_without_replacement():
    rounding, overlap, sampling = (np.random.default_rng(s) for s in (1, 2, 3))
    m = 500
    plan = P.RowPlan(reason=np.zeros(m, np.int8), fips=np.full(m, "01001"),
                     total=np.ones(m), lo=np.zeros(m, np.int64), hi=np.full(m, 6, np.int64),
                     imputed=np.zeros(m, np.int8))  # fmt: skip
    every = P.draw_cases(plan, m, (rounding, overlap, sampling))
    assert sorted(every.row.tolist()) == list(range(m))  # each single case exactly once
    some = P.draw_cases(plan, 300, (rounding, overlap, sampling))
    assert len(set(some.row.tolist())) == 300
    assert some.counts == {"cases_expanded": m, "cases_in_window": m,
                           "cases_outside_window": 0, "cases_kept": 300}  # fmt: skip


def test_downsampling_to_n(tmp_path):
    rows = [row(f"H{i}", "2021/01/08", f"01{2 * i + 1:03d}", "3") for i in range(30)]
    res, ev = run(tmp_path, rows, n=50)
    assert ev.n == 50 and res.attrs["cases_in_window"] == 90
    assert max(Counter(ev.fips.tolist()).values()) <= 3  # never more than a county's cases
    res, ev = run(tmp_path, rows, n=500, name="all.h5")
    assert ev.n == 90  # fewer cases than asked: all of them


def test_same_seed_same_output_other_seed_differs(tmp_path):
    rows = [row(f"H{i}", "2021/01/08", f"01{2 * i + 1:03d}", "-999999", "5") for i in range(30)]
    _, a = run(tmp_path, rows, n=100, seed=5, suppressed=1.5, name="a.h5")
    _, b = run(tmp_path, rows, n=100, seed=5, suppressed=1.5, name="b.h5")
    _, c = run(tmp_path, rows, n=100, seed=6, suppressed=1.5, name="c.h5")
    for name in ("time", "x", "y", "density", "fips"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert not (np.array_equal(a.time, c.time) and np.array_equal(a.fips, c.fips))


# ------------------------------------------------------------------ errors and atomicity


def test_error_messages(tmp_path):
    with pytest.raises(EventsError, match=r"file not found"):
        P.prepare_hhs(tmp_path / "none.csv", tmp_path / "o.h5", opts())
    other = tmp_path / "other.csv"
    other.write_text("hospital_pk,collection_week,state\n1,2021/01/08,AL\n")
    with pytest.raises(EventsError, match=r"missing column\(s\) 'fips_code'.*HHS"):
        P.prepare_hhs(other, tmp_path / "o.h5", opts())
    src = write_hhs(tmp_path / "f.csv", [row("A", "2021/01/08", "01001", "5")])
    with pytest.raises(UsageError, match=r"no count column 'previous_day_admision.*closest"):
        P.prepare_hhs(src, tmp_path / "o.h5", opts(columns=("previous_day_admision_adult_covid"
                                                            "_confirmed_7_day_sum",)))  # fmt: skip
    with pytest.raises(UsageError, match=r"mix previous_day"):
        P.prepare_hhs(src, tmp_path / "o.h5", opts(columns=(ADULT, CENSUS_ADULT)))
    with pytest.raises(UsageError, match=r"--column fips_code identifies a row, it is not a"):
        P.prepare_hhs(src, tmp_path / "o.h5", opts(columns=(ADULT, "fips_code")))
    (tmp_path / "afile").write_text("x")
    with pytest.raises(EventsError, match=r"folder .*afile is a file, not a folder"):
        P.prepare_hhs(src, tmp_path / "afile" / "o.h5", opts())
    with pytest.raises(EventsError, match=r"no case is left.*outside_window 1"):
        P.prepare_hhs(src, tmp_path / "o.h5", opts(start=D(2022, 1, 1)))
    with pytest.raises(UsageError, match=r"must end in .h5"):
        P.prepare_hhs(src, tmp_path / "o.txt", opts())
    with pytest.raises(UsageError, match=r"--n must be >= 0"):
        opts(n=-1)
    assert not (tmp_path / "o.h5").exists()


@pytest.mark.parametrize("engine", READERS)
def test_damaged_row_is_an_error_and_nothing_is_written(tmp_path, engine):
    src = write_hhs(tmp_path / "f.csv", [row("A", "2021/01/08", "01001", "5")] * 3)
    lines = src.read_text().splitlines(keepends=True)
    lines[2] = lines[2].rsplit(",", 3)[0] + "\n"  # line 3 loses three fields
    src.write_text("".join(lines))
    out = tmp_path / "o.h5"
    out.write_bytes(b"old")
    with pytest.raises(EventsError, match=r"1 row\(s\) do not have the header's 128 fields"):
        P.prepare_hhs(src, out, opts(engine=engine))
    assert out.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.csv", "o.h5"]


@pytest.mark.parametrize("where", ["events", "dropped"])
def test_failure_while_writing_leaves_no_file(tmp_path, monkeypatch, where):
    src = write_hhs(tmp_path / "f.csv", [row("A", "2021/01/08", "01001", "5")] * 2)
    real = h5py.Group.create_dataset

    def boom(self, name, *a, **k):
        if name == ("x" if where == "events" else "record"):
            raise OSError(28, "No space left on device")
        return real(self, name, *a, **k)

    monkeypatch.setattr(h5py.Group, "create_dataset", boom)
    out = tmp_path / "o.h5"
    with pytest.raises(EventsError, match=r"No space left.*nothing was written") as info:
        P.prepare_hhs(src, out, opts())
    assert str(out) in info.value.message and ".tmp" not in info.value.message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.csv"]


def test_cli_hhs(tmp_path):
    from click.testing import CliRunner

    from hawkes_cli.cli import prep

    src = write_hhs(tmp_path / "f.csv", [r for r, _, _ in TRICKY])
    out = tmp_path / "c.h5"
    args = ["hhs", str(src), "--out", str(out), "--n", "20", "--seed", "3", "--locations",
            "centroid", "--suppressed", "2", "--engine", "csv"]  # fmt: skip
    res = CliRunner().invoke(prep, args)
    assert res.exit_code == 0, res.output
    assert "wrote 20 cases" in res.output
    assert "23 read, 10 kept, 13 dropped" in res.output
    assert "33 expanded" in res.output and "bad_date" in res.output
    assert "[" in res.output  # progress lines (stderr, mixed in by CliRunner)
    res = CliRunner().invoke(prep, [*args[:-6], "--suppressed", "lots"])
    assert res.exit_code != 0 and "must be a number >= 0 or 'drop'" in str(res.exception)


# ------------------------------------------------------------------ real county polygons


@POLYGONS
def test_cases_lie_in_their_county_polygons_and_plug_into_hawkes_run(tmp_path):
    import shapely

    from hawkes_cli.counties import load_polygons, read_polygon_layer

    rows = [r for r, what, n in TRICKY if what == "keep"]
    res, ev = run(tmp_path, rows, locations="polygon", seed=4)
    layer = read_polygon_layer()
    geoms = dict(zip(layer.keys.tolist(), layer.geoms, strict=True))
    pts = shapely.points(ev.x, ev.y)
    inside = [geoms[f].buffer(1e-9).contains(p) for f, p in zip(ev.fips, pts, strict=True)]
    assert all(inside)
    assert res.attrs["counties"].endswith("cb_2016_us_county_500k.shp")
    # hawkes-run resamples inside the same polygons, keyed by the file's fips column
    sampler, _ = load_polygons(Path(res.attrs["counties"]))
    codes = sampler.codes(ev.fips)
    assert res.attrs["area"] == pytest.approx(
        sampler.area()[np.isin(np.array(sampler.keys), load_county_table().fips[
            load_county_table().region_mask("states")])].sum())  # fmt: skip
    x, y = sampler.sample(codes, np.random.default_rng(0))
    assert all(geoms[f].buffer(1e-9).contains(shapely.Point(a, b))
               for f, a, b in zip(ev.fips, x, y, strict=True))  # fmt: skip


@POLYGONS
def test_territory_not_in_user_polygons(tmp_path):
    from hawkes_cli.counties import PolygonLayer, read_polygon_layer, write_polygons

    layer = read_polygon_layer()
    keep = np.isin(layer.keys, ["01001", "72001"])
    gpkg = tmp_path / "two.gpkg"
    write_polygons(PolygonLayer(layer.keys[keep], layer.geoms[keep], {}, layer.crs, ""), gpkg)
    rows = [
        row("A", "2021/01/08", "01001", "2"),
        row("B", "2021/01/08", "72001", "2"),
        row("C", "2021/01/08", "66010", "2"),
        row("D", "2021/01/08", "01003", "2"),
    ]
    res, ev = run(tmp_path, rows, locations="polygon", polygons=gpkg, region="all")
    d = {k: v for k, v in res.attrs["dropped"].items() if v}
    assert d == {"territory_not_in_polygons": 1, "unknown_fips": 1}  # Guam; Baldwin (AL)
    assert sorted(set(ev.fips.tolist())) == ["01001", "72001"]


@POLYGONS
@pytest.mark.skipif(not have("pyproj"), reason="needs pyproj")
def test_projected_output_with_polygons_for_hawkes_run(tmp_path):
    from hawkes_cli.counties import PolygonLayer, load_polygons, read_polygon_layer, write_polygons

    layer = read_polygon_layer()
    keep = np.isin(layer.keys, ["01001", "36061"])
    gpkg = tmp_path / "two.gpkg"
    write_polygons(PolygonLayer(layer.keys[keep], layer.geoms[keep], {}, layer.crs, ""), gpkg)
    rows = [row("A", "2021/01/08", "01001", "20"), row("B", "2021/01/08", "36061", "20")]
    _, ev = run(tmp_path, rows, locations="polygon", crs="EPSG:5070", polygons=gpkg,
                  polygons_out=tmp_path / "proj.gpkg")  # fmt: skip
    assert ev.attrs["crs"] == "EPSG:5070"
    assert 800_000 < ev.x[ev.fips == "01001"].mean() < 900_000  # Albers metres, Alabama
    # equal-area projection: the region's area is Census land + water (ALAND + AWATER), m^2
    aland_awater = 1_539_609_015 + 25_749_942 + 58_677_325 + 28_554_883
    assert ev.attrs["area"] == pytest.approx(aland_awater, rel=0.01)
    sampler, _ = load_polygons(Path(ev.attrs["counties"]))
    assert "5070" in str(sampler.crs)
    assert sorted(sampler.keys) == ["01001", "36061"]
