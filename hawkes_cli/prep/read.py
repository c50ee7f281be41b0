"""Reading the needed columns of the facility file as text (pyarrow or the stdlib csv module).

Both readers give the same text for the same file, so the same output whichever read it.
"""

from __future__ import annotations

import csv
import gzip
import importlib.util
import logging
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..errors import EventsError, UsageError
from .columns import match_columns
from .progress import Progress

log = logging.getLogger(__name__)

#: What a reader returns: normalised name -> text column, data records read, damaged rows.
_Parsed = tuple[dict[str, np.ndarray], int, list[str]]


@dataclass(frozen=True, eq=False)
class FacilityColumns:
    """The needed columns of a facility file, as text.

    Attributes
    ----------
    path : str
        The file.
    columns : Mapping[str, numpy.ndarray]
        Normalised name -> shape (R,) array of str (``""`` for blanks), one per data record.
    names : Mapping[str, str]
        Normalised name -> the header's spelling.
    n_rows : int
        Data records R (blank lines skipped).
    engine : str
        ``pyarrow`` or ``csv``.
    """

    path: str
    columns: Mapping[str, np.ndarray]
    names: Mapping[str, str]
    n_rows: int
    engine: str


def _open_text(path: Path) -> IO[str]:
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
    return open(path, encoding="utf-8-sig", newline="")


def read_header(path: Path) -> list[str]:
    """Column names of the first line of a CSV file (gzip allowed).

    Raises
    ------
    EventsError
        Missing, empty or unreadable file.
    """
    if not path.exists():
        raise EventsError(f"{path}: file not found")
    if path.is_dir():
        raise EventsError(f"{path}: is a directory, not the HHS facility CSV file")
    try:
        with _open_text(path) as handle:
            header = next(csv.reader(handle), None)
    except (OSError, UnicodeDecodeError, csv.Error, EOFError) as exc:
        raise EventsError(f"{path}: cannot read as a UTF-8 CSV file ({exc})") from None
    if not header:
        raise EventsError(f"{path}: the file is empty; expected the HHS facility CSV file")
    return header


def _read_pyarrow(path: Path, width: int, index: dict[str, int], progress: Progress) -> _Parsed:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    names = [f"c{i}" for i in range(width)]
    chosen = {key: names[i] for key, i in index.items()}
    bad: list[str] = []

    def on_invalid(row: Any) -> str:
        bad.append(f"line {row.number}: " if row.number is not None else "")
        bad[-1] += f"{row.actual_columns} fields: {row.text[:80]!r}"
        return "skip"

    try:
        table = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(column_names=names, skip_rows=1, block_size=16 << 20),
            parse_options=pacsv.ParseOptions(
                newlines_in_values=True, invalid_row_handler=on_invalid
            ),
            convert_options=pacsv.ConvertOptions(
                include_columns=list(chosen.values()),
                column_types={c: pa.string() for c in chosen.values()},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except (pa.ArrowInvalid, OSError) as exc:
        raise EventsError(f"{path}: cannot parse the CSV file: {exc}") from None
    progress(f"parsed {table.num_rows:,} rows")
    cols = {}
    for key, col in chosen.items():
        cols[key] = np.asarray(table.column(col).to_numpy(zero_copy_only=False)).astype(str)
    return cols, table.num_rows, bad


def _read_stdlib(path: Path, width: int, index: dict[str, int], progress: Progress) -> _Parsed:
    keys = list(index)
    getter = operator.itemgetter(*[index[k] for k in keys])
    rows: list[Any] = []
    bad: list[str] = []
    every = 200_000
    try:
        with _open_text(path) as handle:
            reader = csv.reader(handle)
            next(reader, None)
            for row in reader:
                if len(row) != width:
                    if not row:
                        continue  # blank line
                    bad.append(f"line {reader.line_num}: {len(row)} fields: {','.join(row)[:80]!r}")
                    continue
                rows.append(getter(row))
                if len(rows) % every == 0:
                    progress(f"read {len(rows):,} rows")
    except (OSError, UnicodeDecodeError, csv.Error, EOFError) as exc:
        raise EventsError(f"{path}: cannot read the CSV file ({exc})") from None
    if len(keys) == 1:
        rows = [(r,) for r in rows]
    cols = {}
    for j, key in enumerate(keys):
        cols[key] = np.array([r[j] for r in rows], dtype=str) if rows else np.zeros(0, dtype="<U1")
    return cols, len(rows), bad


def read_facility_columns(
    path: Path, wanted: Sequence[str], *, engine: str = "auto", progress: Progress | None = None
) -> FacilityColumns:
    """Read the wanted columns (normalised names) of a facility file as text.

    Parameters
    ----------
    path
        The CSV file (``.csv`` or ``.csv.gz``).
    wanted
        Normalised column names (:func:`~hawkes_cli.prep.columns.normalise_column`); ``zip`` may
        be absent.
    engine
        ``pyarrow`` (fast, multi-threaded), ``csv`` (stdlib) or ``auto``.
    progress
        Called with a line of text at each milestone.

    Raises
    ------
    EventsError
        Unreadable file, missing columns, or rows whose number of fields differs from the
        header's (the message gives how many and the first).
    """
    path = Path(path)
    say = progress or (lambda msg: None)
    header = read_header(path)
    index = match_columns(path, header, wanted)
    have_arrow = importlib.util.find_spec("pyarrow") is not None
    if engine == "auto":
        engine = "pyarrow" if have_arrow else "csv"
        if not have_arrow:
            log.info("pyarrow not installed: reading with the csv module (slower)")
    if engine == "pyarrow":
        if not have_arrow:
            raise UsageError("--engine pyarrow needs pyarrow (pip install pyarrow)")
        cols, n_rows, bad = _read_pyarrow(path, len(header), index, say)
    else:
        cols, n_rows, bad = _read_stdlib(path, len(header), index, say)
    if bad:
        raise EventsError(
            f"{path}: {len(bad)} row(s) do not have the header's {len(header)} fields (first: "
            f"{bad[0]}); the file is damaged or truncated -- fix or remove those rows"
        )
    return FacilityColumns(
        path=str(path),
        columns=cols,
        names={k: header[i] for k, i in index.items()},
        n_rows=n_rows,
        engine=engine,
    )
