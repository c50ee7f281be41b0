"""Tests of hawkes_cli.data: EventData, load_events (validation) and save_events (atomic)."""

from __future__ import annotations

import errno
import logging
import pickle
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from hawkes_cli.data import EventData, hdf5_file, load_events, save_events
from hawkes_cli.data import files as data_files
from hawkes_cli.errors import EventsError, UsageError


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _events(n: int = 50, seed: int = 0, *, density: bool = True, fips: bool = True) -> EventData:
    rng = np.random.default_rng(seed)
    time = np.sort(rng.uniform(0, 100, n))
    time[3] = time[4]  # a tie
    x = rng.normal(size=n) * 1e3
    x[0] = 0.1
    x[1] = np.nextafter(0.1, 1.0)  # neighbouring floats must stay distinct
    x[2] = 1e-300
    y = rng.normal(size=n) / 3.0
    return EventData(
        time=time,
        x=x,
        y=y,
        density=rng.lognormal(3, 2, n) if density else None,
        fips=np.array([f"{k:05d}" for k in rng.integers(1000, 99999, n)]) if fips else None,
    )


def _h5(path: Path, columns: dict[str, object], attrs: dict[str, object] | None = None) -> Path:
    with h5py.File(path, "w") as f:
        g = f.create_group("events")
        for name, values in columns.items():
            g.create_dataset(name, data=values)
        for key, value in (attrs or {}).items():
            g.attrs[key] = value
    return path


# ---------------------------------------------------------------------------- EventData


def test_eventdata_arrays_are_readonly_copies() -> None:
    t = np.array([0.0, 1.0, 2.0])
    d = EventData(time=t, x=np.zeros(3), y=np.ones(3))
    assert d.n == 3
    with pytest.raises(ValueError):
        d.time[0] = 5.0
    t[0] = -1.0  # the caller's array is still writable and not shared
    assert d.time[0] == 0.0
    assert d.density is None and d.fips is None and d.source == "<memory>"


def test_eventdata_rejects_unsorted_and_bad_shapes() -> None:
    with pytest.raises(ValueError, match="sorted"):
        EventData(time=np.array([1.0, 0.0]), x=np.zeros(2), y=np.zeros(2))
    with pytest.raises(ValueError, match="expected 3"):
        EventData(time=np.arange(3.0), x=np.zeros(2), y=np.zeros(3))
    with pytest.raises(ValueError, match="5-digit"):
        EventData(time=np.arange(2.0), x=np.zeros(2), y=np.zeros(2), fips=np.array(["1", "2"]))


def test_with_locations_and_attrs_are_frozen_and_picklable() -> None:
    d = _events(10).with_attrs(true_params={"xi0": 0.5})
    moved = d.with_locations(d.x + 1.0, d.y - 1.0)
    np.testing.assert_array_equal(moved.x, d.x + 1.0)
    assert moved.time is d.time and moved.fips is d.fips
    assert not moved.x.flags.writeable
    with pytest.raises(TypeError):
        d.attrs["new"] = 1  # type: ignore[index]
    again = pickle.loads(pickle.dumps(d))
    np.testing.assert_array_equal(again.x, d.x)
    assert dict(again.attrs) == {"true_params": {"xi0": 0.5}}


def test_importing_data_does_not_import_h5py() -> None:
    code = "import sys, hawkes_cli.data; assert 'h5py' not in sys.modules, 'h5py imported'"
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)


# ---------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("name", ["ev.csv", "ev.csv.gz"])
def test_csv_roundtrip_is_exact(
    tmp_path: Path, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    d = _events().with_attrs(time_unit="day")
    with caplog.at_level(logging.INFO, logger="hawkes_cli.data"):
        save_events(d, tmp_path / name)
    assert any("CSV cannot keep" in r.getMessage() for r in caplog.records)
    back = load_events(tmp_path / name)
    for col in ("time", "x", "y", "density"):
        np.testing.assert_array_equal(getattr(back, col), getattr(d, col), err_msg=col)
    np.testing.assert_array_equal(back.fips, d.fips)
    assert back.fips.dtype == np.dtype("<U5")
    assert back.x[0] != back.x[1]
    assert back.source == str(tmp_path / name)
    assert dict(back.attrs) == {}


def test_csv_header_and_optional_columns(tmp_path: Path) -> None:
    save_events(_events(density=False, fips=False), tmp_path / "a.csv")
    assert (tmp_path / "a.csv").read_text().splitlines()[0] == "time,x,y"
    save_events(_events(), tmp_path / "b.csv")
    assert (tmp_path / "b.csv").read_text().splitlines()[0] == "time,x,y,density,fips"
    back = load_events(tmp_path / "a.csv")
    assert back.density is None and back.fips is None


def test_hdf5_roundtrip_keeps_values_and_attrs(tmp_path: Path) -> None:
    attrs = {
        "time_unit": "day",
        "crs": "EPSG:5070",
        "origin_date": "2020-01-01",
        "true_params": {"mu0": 0.5, "tau_t": 7.0, "xi0": 0.5, "sigma_x": 0.1, "sigma_t": 2.0},
        "bounds": [0.0, 10.0, 0.0, 10.0],
        "area": 100.0,
        "model": 2,
        "seed": 42,
        "flag": True,
        "provenance": "[draft] not JSON",
    }
    d = _events().with_attrs(**attrs)
    save_events(d, tmp_path / "ev.h5")
    back = load_events(tmp_path / "ev.h5", need_density=True)
    for col in ("time", "x", "y", "density"):
        np.testing.assert_array_equal(getattr(back, col), getattr(d, col), err_msg=col)
    np.testing.assert_array_equal(back.fips, d.fips)
    assert dict(back.attrs) == attrs
    assert type(back.attrs["model"]) is int and type(back.attrs["flag"]) is bool
    with h5py.File(tmp_path / "ev.h5", "r") as f:  # stored as a JSON string, readable elsewhere
        assert isinstance(f["events"].attrs["true_params"], str)


# ---------------------------------------------------------------------------- sorting, FIPS


def test_unsorted_rows_are_sorted_stably_with_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows = [(0, 10), (1, 11), (3, 12), (2, 13), (4, 14), (1, 15)]
    text = "time,x,y\n" + "".join(f"{t},{x},0\n" for t, x in rows)
    with caplog.at_level(logging.WARNING, logger="hawkes_cli.data"):
        d = load_events(_write(tmp_path / "u.csv", text))
    assert d.time.tolist() == [0, 1, 1, 2, 3, 4]
    assert d.x.tolist() == [10, 11, 15, 13, 12, 14]  # ties keep file order
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "3 of 6 rows" in warnings[0].getMessage()
    assert d.attrs["reordered"] == 3


def test_sorted_input_gives_no_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="hawkes_cli.data"):
        d = load_events(_write(tmp_path / "s.csv", "time,x,y\n0,0,0\n0,1,1\n5,2,2\n"))
    assert not caplog.records and "reordered" not in d.attrs


def test_fips_padding_case_and_extra_columns(tmp_path: Path) -> None:
    text = 'Time, X ,y,name,FIPS\n0,1,2,a,1001\n1,1,2,b,48201\n2,1,2,c,"06037"\n'
    d = load_events(_write(tmp_path / "f.csv", text))
    assert d.fips.tolist() == ["01001", "48201", "06037"]
    p = _h5(tmp_path / "f.h5", {"time": [0.0, 1.0], "x": [0, 0], "y": [0, 0], "fips": [1001, 2]})
    assert load_events(p).fips.tolist() == ["01001", "00002"]


# ---------------------------------------------------------------------------- CSV errors

CSV_ERRORS = [
    ("time,x,y\n0,1,2\n1,abc,2\n", "column 'x', line 3: 'abc' is not a number"),
    ("time,x,y\n0,1,2\n1,,2\n", "column 'x', line 3: an empty value"),
    ("time,x,y\n0,1,2\n\n1,nan,2\n", r"column 'x', line 4: value nan is NaN"),
    ("time,x,y\n0,1,2\ninf,1,2\n", "column 'time', line 3: value inf"),
    ("time,x,y\n0,1,2\n-0.5,1,2\n", "column 'time', line 3: time -0.5 is negative"),
    ("time,x,y\n0,1,2\n1,2\n", "line 3 has 2 field"),
    ("time,x,z\n0,1,2\n1,1,2\n", r"missing required column\(s\) 'y'.*found 'time', 'x', 'z'"),
    ("time,x,y\n0,1,2\n", "has 1 event"),
    ("time,x,y\n", "has 0 event"),
    ("", "empty"),
    ("time,x,y,fips\n0,1,2,01001\n1,1,2,12A45\n", "column 'fips', line 3"),
    ("time,x,x,y\n0,1,1,2\n", "more than once"),
]


@pytest.mark.parametrize(("text", "pattern"), CSV_ERRORS)
def test_csv_validation_errors(tmp_path: Path, text: str, pattern: str) -> None:
    path = _write(tmp_path / "bad.csv", text)
    with pytest.raises(EventsError, match=pattern) as info:
        load_events(path)
    assert str(path) in str(info.value)


def test_density_checked_only_when_needed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _write(tmp_path / "d.csv", "time,x,y,density\n0,1,2,5\n1,1,2,3\n2,1,2,0\n")
    with pytest.raises(
        EventsError, match=r"column 'density', line 4: value 0\.0 is not a positive"
    ):
        load_events(path, need_density=True)
    with caplog.at_level(logging.WARNING, logger="hawkes_cli.data"):
        d = load_events(path)
    assert d.density is None and d.n == 3
    assert any("density not loaded" in r.getMessage() for r in caplog.records)
    bad = _write(tmp_path / "e.csv", "time,x,y,density\n0,1,2,5\n1,1,2,many\n")
    with pytest.raises(EventsError, match="column 'density', line 3: 'many'"):
        load_events(bad, need_density=True)
    assert load_events(bad).density is None
    nodens = _write(tmp_path / "n.csv", "time,x,y\n0,1,2\n1,1,2\n")
    with pytest.raises(EventsError, match=r"'density'.*model 2"):
        load_events(nodens, need_density=True)
    good = load_events(_write(tmp_path / "g.csv", "time,x,y,density\n0,1,2,5\n1,1,2,3\n"))
    assert good.density.tolist() == [5.0, 3.0]


def test_missing_file_suffix_and_directory(tmp_path: Path) -> None:
    with pytest.raises(EventsError, match="not found"):
        load_events(tmp_path / "nope.csv")
    with pytest.raises(EventsError, match=r"accepted suffixes are \.csv, \.csv\.gz, \.h5"):
        load_events(_write(tmp_path / "ev.txt", "time,x,y\n"))
    (tmp_path / "dir.csv").mkdir()
    with pytest.raises(EventsError, match="directory"):
        load_events(tmp_path / "dir.csv")
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00garbage\x00")
    with pytest.raises(EventsError, match="UTF-8 CSV"):
        load_events(tmp_path / "bin.csv")


# ---------------------------------------------------------------------------- HDF5 errors


def test_hdf5_validation_errors(tmp_path: Path) -> None:
    ok = {"time": [0.0, 1.0, 2.0], "x": [0.0, 1.0, 2.0], "y": [0.0, 1.0, 2.0]}
    with pytest.raises(EventsError, match="not an HDF5 file"):
        load_events(_write(tmp_path / "text.h5", "time,x,y\n0,0,0\n"))
    with h5py.File(tmp_path / "nogroup.h5", "w") as f:
        f.create_group("cases")
    with pytest.raises(EventsError, match=r"no group /events.*found /cases"):
        load_events(tmp_path / "nogroup.h5")
    p = _h5(tmp_path / "noy.h5", {"time": ok["time"], "x": ok["x"]})
    with pytest.raises(EventsError, match=r"'y'.*found 'time', 'x'"):
        load_events(p)
    p = _h5(tmp_path / "len.h5", {**ok, "y": [0.0, 1.0]})
    with pytest.raises(EventsError, match="/events/y has 2 values but /events/time has 3"):
        load_events(p)
    p = _h5(tmp_path / "nan.h5", {**ok, "y": [0.0, 1.0, np.nan]})
    with pytest.raises(EventsError, match="column 'y', index 2: value nan"):
        load_events(p)
    p = _h5(tmp_path / "neg.h5", {**ok, "time": [0.0, -1.0, 2.0]})
    with pytest.raises(EventsError, match=r"column 'time', index 1: time -1\.0 is negative"):
        load_events(p)
    p = _h5(tmp_path / "str.h5", {**ok, "x": np.array([b"1", b"two", b"3"])})
    with pytest.raises(EventsError, match="column 'x', index 1: 'two' is not a number"):
        load_events(p)
    p = _h5(tmp_path / "dens.h5", {**ok, "density": [1.0, -2.0, 3.0]})
    with pytest.raises(EventsError, match="column 'density', index 1"):
        load_events(p, need_density=True)
    assert load_events(p).density is None
    p = _h5(tmp_path / "one.h5", {"time": [0.0], "x": [0.0], "y": [0.0]})
    with pytest.raises(EventsError, match="has 1 event"):
        load_events(p)


def test_hdf5_unsorted_is_sorted(tmp_path: Path) -> None:
    p = _h5(
        tmp_path / "u.h5",
        {"time": [2.0, 0.0, 1.0], "x": [2.0, 0.0, 1.0], "y": [0.0, 0.0, 0.0], "fips": [3, 1, 2]},
        {"time_unit": b"day"},
    )
    d = load_events(p)
    assert d.time.tolist() == d.x.tolist() == [0.0, 1.0, 2.0]
    assert d.fips.tolist() == ["00001", "00002", "00003"]
    assert d.attrs["time_unit"] == "day"


# ---------------------------------------------------------------------------- saving


def test_save_is_atomic_csv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "ev.csv"
    d = _events()

    def failing(data: EventData, handle: object) -> None:
        handle.write("time,x,y\n0.0,1.0")  # type: ignore[attr-defined]
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(data_files, "write_csv", failing)
    with pytest.raises(EventsError, match="No space left"):
        save_events(d, target)
    assert list(tmp_path.iterdir()) == []


def test_save_failure_keeps_existing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "ev.h5"
    old = _events(seed=1)
    save_events(old, target)
    before = target.read_bytes()

    def boom(key: str, value: object) -> object:
        raise RuntimeError("interrupted while writing attributes")

    monkeypatch.setattr(hdf5_file, "_encode_attr", boom)
    with pytest.raises(EventsError, match=r"writing the events file failed \(interrupted"):
        save_events(_events(seed=2).with_attrs(time_unit="day"), target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ev.h5"]
    assert target.read_bytes() == before


def test_save_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"\.csv, \.csv\.gz, \.h5"):
        save_events(_events(), tmp_path / "ev.parquet")
    with pytest.raises(EventsError, match="exists and is writable"):
        save_events(_events(), tmp_path / "missing" / "ev.csv")
    with pytest.raises(UsageError, match="attribute 'obj'"):
        save_events(_events().with_attrs(obj=object()), tmp_path / "ev.h5")
    assert list(tmp_path.iterdir()) == []
