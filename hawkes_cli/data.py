"""Events: the in-memory table (:class:`EventData`), loading with validation, atomic saving.

An events file (DESIGN section 4) is either

- a CSV file (``.csv``, or gzip-compressed ``.csv.gz``) with a header row naming the columns
  ``time``, ``x``, ``y`` (required), ``density`` and ``fips`` (optional); other columns are
  ignored; or
- an HDF5 file (``.h5``, ``.hdf5``, ``.he5``) with a group ``/events`` holding 1-D datasets of
  those names; the group's attributes are the metadata (:attr:`EventData.attrs`).

Units: ``time`` in the data's time unit (normally days, ``attrs["time_unit"]``), ``x``/``y`` in
coordinate units (``attrs["crs"]``), ``density`` in persons per square mile.

Every problem with an input file is an :class:`~hawkes_cli.errors.EventsError` whose message
names the file, the column, the first bad row (1-based line number in a CSV file, 0-based index in
an HDF5 dataset) and what to do. Rows are never dropped; rows out of time order are sorted (stable)
and a WARNING says how many moved.

h5py is imported only inside the functions that read or write HDF5, so importing this module is
cheap.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import gzip
import hashlib
import json
import logging
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from . import atomic
from .errors import ConfigError, EventsError, UsageError, io_cause
from .vocab import DATA_LIMIT

log = logging.getLogger(__name__)

#: Required columns, in file order.
REQUIRED_COLUMNS: tuple[str, ...] = ("time", "x", "y")
#: Optional columns, in file order.
OPTIONAL_COLUMNS: tuple[str, ...] = ("density", "fips")
CSV_SUFFIXES: tuple[str, ...] = (".csv", ".csv.gz")
HDF5_SUFFIXES: tuple[str, ...] = (".h5", ".hdf5", ".he5")
#: Every suffix :func:`load_events` and :func:`save_events` accept.
SUFFIXES: tuple[str, ...] = CSV_SUFFIXES + HDF5_SUFFIXES
#: Name of the HDF5 group holding the event columns.
HDF5_GROUP = "events"
FIPS_DTYPE = np.dtype("<U5")

PathLike = str | os.PathLike[str]


class FrozenAttrs(Mapping[str, Any]):
    """A read-only, picklable ``str -> value`` mapping (the metadata of an :class:`EventData`).

    The values are deep-copied on construction, so the caller's dict cannot change it later.
    """

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self._data: dict[str, Any] = copy.deepcopy(dict(data or {}))

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"FrozenAttrs({self._data!r})"


def _readonly_float(name: str, values: Any, n: int | None) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"EventData.{name} must be 1-D, got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"EventData.{name} has {arr.shape[0]} values, expected {n}")
    if arr.flags.writeable:
        arr = arr.copy()
        arr.setflags(write=False)
    return arr


def _readonly_fips(values: Any, n: int) -> np.ndarray:
    raw = np.asarray(values)
    if raw.ndim != 1 or raw.shape[0] != n:
        raise ValueError(f"EventData.fips must have shape ({n},), got {raw.shape}")
    if raw.dtype == FIPS_DTYPE and not raw.flags.writeable:
        return raw  # already frozen (by an EventData): keep it, skip the O(N) string checks
    text = raw.astype(str)
    lengths = np.char.str_len(text) if n else np.zeros(0, dtype=int)
    if n and (np.any(lengths != 5) or not np.all(np.char.isdigit(text))):
        bad = int(np.flatnonzero((lengths != 5) | ~np.char.isdigit(text))[0])
        raise ValueError(f"EventData.fips[{bad}] = {text[bad]!r} is not a 5-digit code")
    arr = text.astype(FIPS_DTYPE)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class EventData:
    """Events sorted by time, with optional county density and FIPS code.

    Equality is identity (``eq=False``): comparing arrays element-wise is the caller's business.

    Attributes
    ----------
    time : numpy.ndarray, shape (N,), float64
        Event times in the data's time unit (normally days), ``>= 0``, ascending.
    x, y : numpy.ndarray, shape (N,), float64
        Event coordinates (coordinate units, see ``attrs["crs"]``).
    density : numpy.ndarray or None, shape (N,), float64
        Population density of each event's county, persons per square mile, ``> 0``.
    fips : numpy.ndarray or None, shape (N,), ``<U5``
        Zero-padded 5-character county codes.
    attrs : Mapping[str, Any]
        Metadata (``time_unit``, ``crs``, ``origin_date``, ``provenance``, ``true_params``,
        ``area``, ``model``, ``seed``, ...); read-only.
    source : str
        Path the events came from, or ``"<memory>"``.

    Notes
    -----
    All arrays are read-only (``setflags(write=False)``); writable inputs are copied first.
    The constructor checks shapes, finiteness, ``time >= 0``, ascending time and
    ``density > 0`` and raises :class:`ValueError` (a programming error) if one fails; files are
    validated with user-facing messages by :func:`load_events` before they get here.
    """

    time: np.ndarray
    x: np.ndarray
    y: np.ndarray
    density: np.ndarray | None = None
    fips: np.ndarray | None = None
    attrs: Mapping[str, Any] = field(default_factory=FrozenAttrs)
    source: str = "<memory>"

    def __post_init__(self) -> None:
        time = _readonly_float("time", self.time, None)
        n = time.shape[0]
        x = _readonly_float("x", self.x, n)
        y = _readonly_float("y", self.y, n)
        for name, arr in (("time", time), ("x", x), ("y", y)):
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"EventData.{name} contains NaN or inf")
        if n and time[0] < 0:
            raise ValueError("EventData.time must be >= 0")
        if np.any(np.diff(time) < 0):
            raise ValueError("EventData.time must be sorted ascending (use load_events to sort)")
        object.__setattr__(self, "time", time)
        object.__setattr__(self, "x", x)
        object.__setattr__(self, "y", y)
        if self.density is not None:
            density = _readonly_float("density", self.density, n)
            if not np.all(np.isfinite(density) & (density > 0)):
                raise ValueError("EventData.density must be finite and > 0")
            object.__setattr__(self, "density", density)
        if self.fips is not None:
            object.__setattr__(self, "fips", _readonly_fips(self.fips, n))
        if not isinstance(self.attrs, FrozenAttrs):
            object.__setattr__(self, "attrs", FrozenAttrs(self.attrs))
        object.__setattr__(self, "source", str(self.source))

    @property
    def n(self) -> int:
        """Number of events N."""
        return int(self.time.shape[0])

    def digest(self) -> str:
        """SHA-256 (hex) of the events' content: times, coordinates, densities and FIPS codes
        as loaded (whatever the file's format or path). A run keeps it, so that a resume on
        changed data is refused."""
        cached = self.__dict__.get("_digest")
        if cached is not None:  # computed once per object (the chain file and the start key)
            return cached
        h = hashlib.sha256(f"{self.n}\n".encode())
        for column in (self.time, self.x, self.y, self.density):
            if column is not None:
                h.update(np.ascontiguousarray(column, dtype=np.float64).tobytes())
            h.update(b"|")
        if self.fips is not None:
            h.update("\n".join(self.fips.tolist()).encode("utf-8"))
        object.__setattr__(self, "_digest", h.hexdigest())  # the arrays are read-only
        return self._digest

    def with_locations(self, x: np.ndarray, y: np.ndarray) -> EventData:
        """The same events with new coordinates (e.g. resampled inside their counties).

        Parameters
        ----------
        x, y : numpy.ndarray, shape (N,), float64
            New coordinates, in the order of :attr:`time`.
        """
        return dataclasses.replace(self, x=x, y=y)

    def with_attrs(self, **updates: Any) -> EventData:
        """The same events with ``attrs`` updated by ``updates``."""
        merged = dict(self.attrs)
        merged.update(updates)
        return dataclasses.replace(self, attrs=merged)


# --------------------------------------------------------------------------------------------
# helpers shared by the readers


def _kind(path: Path) -> str:
    """``"csv"`` or ``"hdf5"`` from the file name, or ``""`` if the suffix is not accepted."""
    name = path.name.lower()
    if name.endswith(CSV_SUFFIXES):
        return "csv"
    if name.endswith(HDF5_SUFFIXES):
        return "hdf5"
    return ""


def _is_gz(path: Path) -> bool:
    return path.name.lower().endswith(".gz")


def _suffix_text() -> str:
    return ", ".join(SUFFIXES)


Locator = Callable[[int], str]


def _parse_numbers(path: Path, column: str, values: list[str], where: Locator) -> np.ndarray:
    """Text values -> float64 array; the first non-number is an :class:`EventsError`."""
    try:
        return np.array(values, dtype=np.float64)
    except ValueError:
        pass
    for i, text in enumerate(values):
        try:
            float(text)
        except ValueError:
            shown = repr(text) if text.strip() else "an empty value"
            raise EventsError(
                f"{path}: column {column!r}, {where(i)}: {shown} is not a number; "
                f"fix or remove that row"
            ) from None
    raise AssertionError("unreachable: numpy refused a column that float() accepts")


def _check_finite(path: Path, column: str, arr: np.ndarray, where: Locator) -> None:
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        i = int(bad[0])
        raise EventsError(
            f"{path}: column {column!r}, {where(i)}: value {arr[i]} is NaN or infinite "
            f"({bad.size} such row(s)); fix or remove those rows"
        )


def _check_magnitude(path: Path, column: str, arr: np.ndarray, where: Locator) -> None:
    bad = np.flatnonzero(np.abs(arr) > DATA_LIMIT)
    if bad.size:
        i = int(bad[0])
        raise EventsError(
            f"{path}: column {column!r}, {where(i)}: value {arr[i]:g} is beyond +-{DATA_LIMIT:g} "
            f"({bad.size} such row(s)), where the engines' float32 pair terms overflow; use "
            "days, degrees or metres (or rescale the column)"
        )


def _normalise_fips(path: Path, texts: list[str], where: Locator) -> np.ndarray:
    """FIPS texts -> ``<U5`` zero-padded codes; anything but 1-5 digits is an error."""
    out = np.empty(len(texts), dtype=FIPS_DTYPE)
    for i, raw in enumerate(texts):
        text = raw.strip()
        if not (1 <= len(text) <= 5 and text.isascii() and text.isdigit()):
            shown = repr(raw) if text else "an empty value"
            raise EventsError(
                f"{path}: column 'fips', {where(i)}: {shown} is not a county FIPS code "
                f"(expected 1-5 digits, e.g. 01001 or 1001); fix that row or drop the fips "
                f"column"
            )
        out[i] = text.zfill(5)
    return out


def _build(
    path: Path,
    columns: Mapping[str, np.ndarray],
    fips: np.ndarray | None,
    density_problem: str | None,
    attrs: dict[str, Any],
    where: Locator,
    need_density: bool,
) -> EventData:
    """Validate parsed columns (all of length N), sort by time, build the :class:`EventData`."""
    time, x, y = columns["time"], columns["x"], columns["y"]
    for name in REQUIRED_COLUMNS:
        _check_finite(path, name, columns[name], where)
        _check_magnitude(path, name, columns[name], where)
    negative = np.flatnonzero(time < 0)
    if negative.size:
        i = int(negative[0])
        raise EventsError(
            f"{path}: column 'time', {where(i)}: time {time[i]} is negative "
            f"({negative.size} such row(s)); times are counted from the window start 0, so "
            f"shift them (subtract the earliest time) or remove those rows"
        )
    density = columns.get("density")
    if density is not None and density_problem is None:
        ok = np.isfinite(density) & (density >= 1.0 / DATA_LIMIT) & (density <= DATA_LIMIT)
        bad = np.flatnonzero(~ok)
        if bad.size:
            i = int(bad[0])
            density_problem = (
                f"{path}: column 'density', {where(i)}: value {density[i]} is not a positive "
                f"finite density ({bad.size} such row(s)); densities are persons per square "
                f"mile, between {1.0 / DATA_LIMIT:g} and {DATA_LIMIT:g}"
            )
    if density_problem is not None:
        if need_density:
            raise EventsError(density_problem)
        log.warning("%s; density not loaded (only model 2 needs it)", density_problem)
        density = None

    order = np.argsort(time, kind="stable")
    moved = int(np.count_nonzero(order != np.arange(order.size)))
    if moved:
        log.warning(
            "%s: %d of %d rows were not in time order; sorted them by time (stable, no row "
            "dropped)",
            path,
            moved,
            order.size,
        )
        attrs["reordered"] = moved
        time, x, y = time[order], x[order], y[order]
        density = None if density is None else density[order]
        fips = None if fips is None else fips[order]
    return EventData(time=time, x=x, y=y, density=density, fips=fips, attrs=attrs, source=str(path))


def _check_count(path: Path, n: int) -> None:
    if n < 2:
        raise EventsError(
            f"{path}: has {n} event(s); at least 2 are needed to fit the model — check that "
            f"the right file was given"
        )


def _missing_columns(path: Path, found: list[str], need_density: bool, what: str) -> None:
    required = list(REQUIRED_COLUMNS) + (["density"] if need_density else [])
    missing = [c for c in required if c not in found]
    if missing:
        hint = " (model 2 needs the county population density)" if "density" in missing else ""
        raise EventsError(
            f"{path}: missing required {what}(s) {', '.join(repr(m) for m in missing)}{hint}; "
            f"found {', '.join(repr(f) for f in found) or 'none'}; the events file needs "
            f"{', '.join(required)}"
        )


# --------------------------------------------------------------------------------------------
# CSV


def _open_text(path: Path, mode: str, *, gz: bool) -> IO[str]:
    """Open a (possibly gzip-compressed) CSV file in text mode ``"r"`` or ``"w"``."""
    encoding = "utf-8-sig" if mode == "r" else "utf-8"  # read: tolerate a BOM (Excel)
    if gz:
        return gzip.open(path, mode + "t", encoding=encoding, newline="")
    return open(path, mode, encoding=encoding, newline="")


def _load_csv(path: Path, need_density: bool) -> EventData:
    try:
        with _open_text(path, "r", gz=_is_gz(path)) as handle:
            reader = csv.reader(handle)
            header: list[str] | None = None
            header_line = 0
            for row in reader:
                if row and any(cell.strip() for cell in row):
                    header = [cell.strip().lower() for cell in row]
                    header_line = reader.line_num
                    break
            if header is None:
                raise EventsError(
                    f"{path}: the file is empty; expected a header row naming the columns "
                    f"time,x,y[,density][,fips] followed by one row per event"
                )
            dupes = sorted({h for h in header if h and header.count(h) > 1})
            if dupes:
                raise EventsError(
                    f"{path}: line {header_line}: column(s) {', '.join(dupes)} appear more than "
                    f"once in the header; keep one of each"
                )
            _missing_columns(path, header, need_density, "column")
            wanted = [c for c in REQUIRED_COLUMNS + OPTIONAL_COLUMNS if c in header]
            index = [header.index(c) for c in wanted]
            texts: dict[str, list[str]] = {c: [] for c in wanted}
            lines: list[int] = []
            width = len(header)
            for row in reader:
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue  # blank line
                if len(row) != width:
                    raise EventsError(
                        f"{path}: line {reader.line_num} has {len(row)} field(s) but the header "
                        f"has {width}; fix that row (a stray or missing comma?)"
                    )
                lines.append(reader.line_num)
                for c, j in zip(wanted, index, strict=True):
                    texts[c].append(row[j])
    except EventsError:
        raise
    except (UnicodeDecodeError, csv.Error, EOFError, gzip.BadGzipFile) as exc:
        raise EventsError(
            f"{path}: not a readable UTF-8 CSV file ({exc}); give a CSV with a header row or "
            f"an HDF5 file with suffix {', '.join(HDF5_SUFFIXES)}"
        ) from None
    except OSError as exc:
        raise EventsError(
            f"{path}: cannot read the file ({exc.strerror or exc}); check the path and its "
            f"permissions"
        ) from None

    def where(i: int) -> str:
        return f"line {lines[i]}"

    _check_count(path, len(lines))
    columns = {c: _parse_numbers(path, c, texts[c], where) for c in REQUIRED_COLUMNS}
    density_problem = None
    if "density" in texts:
        try:
            columns["density"] = _parse_numbers(path, "density", texts["density"], where)
        except EventsError as exc:
            density_problem = exc.message
    fips = _normalise_fips(path, texts["fips"], where) if "fips" in texts else None
    return _build(path, columns, fips, density_problem, {}, where, need_density)


def _write_csv(data: EventData, handle: IO[str]) -> None:
    names = ["time", "x", "y"]
    cols: list[list[str]] = [
        [repr(v) for v in data.time.tolist()],
        [repr(v) for v in data.x.tolist()],
        [repr(v) for v in data.y.tolist()],
    ]
    if data.density is not None:
        names.append("density")
        cols.append([repr(v) for v in data.density.tolist()])
    if data.fips is not None:
        names.append("fips")
        cols.append(data.fips.tolist())
    handle.write(",".join(names) + "\n")
    block = 65536
    for start in range(0, data.n, block):
        rows = zip(*(c[start : start + block] for c in cols), strict=True)
        handle.write("".join(",".join(r) + "\n" for r in rows))


# --------------------------------------------------------------------------------------------
# HDF5


def _import_h5py() -> Any:
    try:
        import h5py
    except ImportError:  # pragma: no cover - h5py is a dependency
        raise EventsError(
            "reading or writing HDF5 events files needs h5py; install it (pip install h5py) "
            "or use a CSV file"
        ) from None
    return h5py


def _decode_attr(value: Any) -> Any:
    """HDF5 attribute -> plain Python (bytes decoded, JSON strings parsed, numpy unwrapped)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("{", "["):
            try:
                return json.loads(text)
            except ValueError:
                return value
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "SO":
            return [_decode_attr(v) for v in value.tolist()]
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Mapping):
        return dict(obj)
    raise TypeError(f"cannot store {type(obj).__name__} in an HDF5 attribute")


def _encode_attr(key: str, value: Any) -> Any:
    """Plain Python -> something h5py stores; dicts, lists and tuples become JSON strings."""
    if isinstance(value, (Mapping, list, tuple)):
        return json.dumps(value, default=_json_default)
    if isinstance(value, (str, bool, int, float, np.generic)):
        return value
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return value
    raise UsageError(
        f"attribute {key!r} has type {type(value).__name__}, which an HDF5 events file cannot "
        f"store; use a string, number, list or dict"
    )


def _h5_numbers(path: Path, name: str, values: np.ndarray, where: Locator) -> np.ndarray:
    kind = values.dtype.kind
    if kind in "biuf":
        return values.astype(np.float64)
    if kind in "SOU":
        texts = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values]
        return _parse_numbers(path, name, texts, where)
    raise EventsError(
        f"{path}: dataset /{HDF5_GROUP}/{name} has dtype {values.dtype}, not numbers; store it "
        f"as float64"
    )


def _h5_fips(path: Path, values: np.ndarray, where: Locator) -> np.ndarray:
    kind = values.dtype.kind
    if kind in "iu":
        texts = [str(int(v)) for v in values]
    elif kind in "SOU":
        texts = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values]
    else:
        raise EventsError(
            f"{path}: dataset /{HDF5_GROUP}/fips has dtype {values.dtype}; store county codes as "
            f"5-character strings (e.g. '01001')"
        )
    return _normalise_fips(path, texts, where)


def _load_hdf5(path: Path, need_density: bool) -> EventData:
    h5py = _import_h5py()
    if not h5py.is_hdf5(str(path)):
        raise EventsError(
            f"{path}: not an HDF5 file although its suffix says so; give an HDF5 file with a "
            f"group /{HDF5_GROUP}, or a CSV file (suffix .csv)"
        )

    def where(i: int) -> str:
        return f"index {i}"

    try:
        with h5py.File(path, "r") as f:
            if HDF5_GROUP not in f or not isinstance(f[HDF5_GROUP], h5py.Group):
                found = ", ".join("/" + k for k in f) or "nothing"
                raise EventsError(
                    f"{path}: no group /{HDF5_GROUP} (found {found}); the events must be 1-D "
                    f"datasets /{HDF5_GROUP}/time, /{HDF5_GROUP}/x, /{HDF5_GROUP}/y"
                )
            group = f[HDF5_GROUP]
            found = [k for k in group if isinstance(group[k], h5py.Dataset)]
            _missing_columns(path, found, need_density, "dataset")
            raw: dict[str, np.ndarray] = {}
            for name in REQUIRED_COLUMNS + OPTIONAL_COLUMNS:
                if name not in found:
                    continue
                ds = group[name]
                if ds.ndim != 1:
                    raise EventsError(
                        f"{path}: dataset /{HDF5_GROUP}/{name} has shape {ds.shape}; every column "
                        f"must be 1-D with one value per event"
                    )
                raw[name] = ds[()]
            attrs = {str(k): _decode_attr(v) for k, v in group.attrs.items()}
    except EventsError:
        raise
    except (OSError, KeyError, RuntimeError, ValueError) as exc:
        # h5py: KeyError for a dangling soft or external link, RuntimeError or OSError for
        # damaged metadata (flipped bytes), ValueError for an unreadable attribute
        raise EventsError(
            f"{path}: cannot read the HDF5 file ({exc}); it is damaged or holds a link to "
            f"something missing; check that it is complete, or write it again"
        ) from None
    _check_area_attr(path, attrs)

    n = raw["time"].shape[0]
    for name, values in raw.items():
        if values.shape[0] != n:
            raise EventsError(
                f"{path}: dataset /{HDF5_GROUP}/{name} has {values.shape[0]} values but "
                f"/{HDF5_GROUP}/time has {n}; all columns need one value per event"
            )
    _check_count(path, n)
    columns = {c: _h5_numbers(path, c, raw[c], where) for c in REQUIRED_COLUMNS}
    density_problem = None
    if "density" in raw:
        try:
            columns["density"] = _h5_numbers(path, "density", raw["density"], where)
        except EventsError as exc:
            density_problem = exc.message
    fips = _h5_fips(path, raw["fips"], where) if "fips" in raw else None
    return _build(path, columns, fips, density_problem, attrs, where, need_density)


def _check_area_attr(path: Path, attrs: Mapping[str, Any]) -> None:
    """The ``area`` attribute, when present, must be one finite number > 0 (not a boolean)."""
    if "area" not in attrs:
        return
    value = attrs["area"]
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value <= 0:
        raise EventsError(
            f"{path}: attribute /{HDF5_GROUP}.area is {value!r} ({type(value).__name__}), not "
            f"a finite number > 0; it is the study-region area in coordinate units squared: "
            f"store it as one positive number, or give the area in the config (data.area) or "
            f"with --area"
        )


def _write_hdf5(data: EventData, target: str) -> None:
    h5py = _import_h5py()
    with h5py.File(target, "w") as f:
        group = f.create_group(HDF5_GROUP)
        group.create_dataset("time", data=data.time)
        group.create_dataset("x", data=data.x)
        group.create_dataset("y", data=data.y)
        if data.density is not None:
            group.create_dataset("density", data=data.density)
        if data.fips is not None:
            group.create_dataset("fips", data=np.char.encode(data.fips, "ascii").astype("S5"))
        for key, value in data.attrs.items():
            if value is None:
                log.debug("attribute %r is None; not stored in HDF5", key)
                continue
            group.attrs[key] = _encode_attr(key, value)


# --------------------------------------------------------------------------------------------
# public API


def load_events(path: PathLike, *, need_density: bool = False) -> EventData:
    """Read, validate and sort an events file (CSV or HDF5).

    Parameters
    ----------
    path
        ``.csv`` / ``.csv.gz`` (header row; columns ``time``, ``x``, ``y``, optional ``density``
        and ``fips``; other columns ignored; names are case-insensitive) or ``.h5`` / ``.hdf5`` /
        ``.he5`` (group ``/events`` with 1-D datasets of those names; its attributes become
        :attr:`EventData.attrs`, JSON strings decoded back to dicts/lists).
    need_density
        If true (model 2), the ``density`` column is required and every value must be a finite
        number > 0. If false, a valid ``density`` column is loaded when present; an invalid one
        is skipped with a WARNING.

    Returns
    -------
    EventData
        N >= 2 events sorted by time (stable); ``fips`` zero-padded to 5 characters.

    Raises
    ------
    EventsError
        Missing/unreadable file, unknown suffix, not HDF5, no ``/events`` group, a missing column,
        a non-number, NaN/inf, negative time, bad density (when needed), bad FIPS code, columns of
        unequal length, fewer than 2 events. The message names the file, the column and the first
        bad row (CSV: 1-based line number in the file; HDF5: 0-based index).
    """
    p = _user_path(path)
    kind = _kind(p)
    if not kind:
        raise EventsError(
            f"{p}: unknown events file type {''.join(p.suffixes) or '(no suffix)'!r}; "
            f"accepted suffixes are {_suffix_text()}"
        )
    try:
        os.stat(p)
    except FileNotFoundError:
        start = (
            ""
            if Path(path).expanduser().is_absolute()
            else (f" (relative paths start at {Path.cwd()})")
        )
        raise EventsError(f"{p}: file not found; check the path{start}") from None
    except OSError as exc:  # a name or path too long, a loop of links, no permission
        raise EventsError(
            f"{p}: cannot use this path ({exc.strerror or exc}); check the path"
        ) from None
    if p.is_dir():
        raise EventsError(f"{p}: is a directory, not an events file")
    data = _load_csv(p, need_density) if kind == "csv" else _load_hdf5(p, need_density)
    log.info("loaded %d events from %s", data.n, p)
    return data


def check_window_end(data: EventData, window_end: float | None, *, what: str) -> None:
    """Refuse an observation window that ends before the last event.

    Parameters
    ----------
    data
        The events.
    window_end
        End ``T`` of the window (time units), ``None`` for the last event time.
    what
        Where the value came from, for the message (e.g. ``"c.yaml: data.window_end"``).

    Raises
    ------
    ConfigError
        ``window_end`` is before ``data.time[-1]``.
    """
    if window_end is not None and data.n and window_end < data.time[-1]:
        raise ConfigError(
            f"{what} {window_end:g} is before the last event time {data.time[-1]:g} of "
            f"{data.source}; the window must hold every event: set it at or after that time, "
            f"or leave it out (the last event time)"
        )


def _user_path(path: PathLike) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded; an unknown user is an error."""
    p = Path(path)
    if str(p).startswith("~"):
        try:
            p = p.expanduser()
        except RuntimeError:
            raise EventsError(
                f"{p}: cannot expand {str(p).split(os.sep)[0]!r} (no such user, or no home "
                f"directory); write the path out in full"
            ) from None
    return p


def _create_empty(tmp: Path, path: Path) -> None:
    """Create the temporary file first, so a missing or read-only folder gets its own message.

    Mode 0o666 so the umask applies as for a normal file.
    """
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666))
    except OSError as exc:
        raise EventsError(
            f"{path}: cannot write the events file ({exc.strerror or exc}); check that the folder "
            f"{path.parent} exists and is writable"
        ) from None


def save_events(
    data: EventData, path: PathLike, *, finish: Callable[[Path], None] | None = None
) -> None:
    """Write events to CSV or HDF5 atomically (temporary file in the same folder + rename).

    Parameters
    ----------
    data
        The events to write.
    path
        Target file; the suffix picks the format (see :data:`SUFFIXES`). CSV gets the header
        ``time,x,y[,density][,fips]`` and every float with full precision (``repr``, which reads
        back to the same float64); CSV cannot keep ``attrs`` (an INFO message says so). HDF5 gets
        the datasets under ``/events`` and ``attrs`` as attributes of that group, dicts, lists and
        tuples as JSON strings (``None`` values are left out).
    finish
        Called with the temporary file once the events are in it, before it replaces ``path``
        (to add HDF5 groups of the caller's own); whatever it raises leaves ``path`` untouched.

    Raises
    ------
    UsageError
        Unknown suffix, or an attribute value HDF5 cannot store.
    EventsError
        The file cannot be written (folder missing, no permission, disk full). No partial file is
        left behind; an existing file at ``path`` stays as it was.
    """
    p = Path(path)
    kind = _kind(p)
    if not kind:
        raise UsageError(
            f"{p}: cannot tell the events file type from {''.join(p.suffixes) or '(no suffix)'!r}; "
            f"use one of {_suffix_text()}"
        )
    if kind == "csv" and len(data.attrs):
        log.info(
            "%s: CSV cannot keep the attributes %s; save as .h5 to keep them",
            p,
            ", ".join(sorted(data.attrs)),
        )
    try:
        with atomic.replacing(p) as tmp:
            _create_empty(tmp, p)
            if kind == "csv":
                with _open_text(tmp, "w", gz=_is_gz(p)) as handle:
                    _write_csv(data, handle)
            else:
                _write_hdf5(data, str(tmp))
            if finish is not None:
                finish(tmp)
    except (OSError, RuntimeError) as exc:  # h5py raises RuntimeError for failed writes too
        raise EventsError(
            f"{p}: writing the events file failed ({io_cause(exc)}); nothing was "
            f"written — check free space and permissions"
        ) from exc
    log.info("wrote %d events to %s", data.n, p)


__all__ = [
    "SUFFIXES",
    "EventData",
    "FrozenAttrs",
    "load_events",
    "save_events",
]


def resolve_area(config: Any, data: EventData) -> float:
    """The study region's area of a run: the config's ``data.area``, else the events file's
    ``area`` attribute (coordinate units squared).

    Parameters
    ----------
    config
        The run's :class:`~hawkes_cli.config.Config` (its ``data.area`` and ``source``).
    data
        The run's events.

    Raises
    ------
    ConfigError
        Neither gives an area.
    """
    if config.data.area is not None:
        return float(config.data.area)
    if "area" in data.attrs:
        return float(data.attrs["area"])
    raise ConfigError(
        f"{config.source}: data.area is not set and {data.source} has no 'area' attribute; "
        "set data.area (study-region area in coordinate units squared)"
    )
