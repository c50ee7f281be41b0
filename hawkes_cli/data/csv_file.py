"""CSV events files (``.csv``, ``.csv.gz``): read with validation, write with full precision."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path
from typing import IO

from ..errors import EventsError
from .events import EventData
from .formats import HDF5_SUFFIXES, OPTIONAL_COLUMNS, REQUIRED_COLUMNS, is_gz
from .validate import check_count, missing_columns, normalise_fips, parse_events, parse_numbers


def open_text(path: Path, mode: str, *, gz: bool) -> IO[str]:
    """Open a (possibly gzip-compressed) CSV file in text mode ``"r"`` or ``"w"``."""
    encoding = "utf-8-sig" if mode == "r" else "utf-8"  # read: tolerate a BOM (Excel)
    if gz:
        return gzip.open(path, mode + "t", encoding=encoding, newline="")
    return open(path, mode, encoding=encoding, newline="")


def load_csv(path: Path, need_density: bool) -> EventData:
    """Read and validate a CSV events file (see :func:`~hawkes_cli.data.load_events`)."""
    try:
        with open_text(path, "r", gz=is_gz(path)) as handle:
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
            missing_columns(path, header, need_density, "column")
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

    check_count(path, len(lines))
    return parse_events(path, texts, parse_numbers, normalise_fips, {}, where, need_density)


def write_csv(data: EventData, handle: IO[str]) -> None:
    """Write ``data`` as CSV (header, then every float by ``repr``) to an open text handle."""
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
