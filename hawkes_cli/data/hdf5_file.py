"""HDF5 events files (group ``/events``): read with validation, write with the metadata as
attributes. h5py is imported inside the functions, so importing this module is cheap."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .. import atomic
from ..errors import EventsError, UsageError
from .events import EventData
from .formats import HDF5_GROUP, OPTIONAL_COLUMNS, REQUIRED_COLUMNS
from .validate import (
    Locator,
    check_count,
    missing_columns,
    normalise_fips,
    parse_events,
    parse_numbers,
)

log = logging.getLogger(__name__)


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
        return parse_numbers(path, name, texts, where)
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
    return normalise_fips(path, texts, where)


def load_hdf5_attrs(path: Path) -> dict[str, Any]:
    """The metadata of an HDF5 events file (the attributes of its ``/events`` group, decoded as
    :func:`load_hdf5` decodes them), without reading its datasets: cheap at any size.

    Raises
    ------
    EventsError
        Not an HDF5 file, no ``/events`` group, or unreadable metadata.
    """
    import h5py  # here, not at the top: importing the package stays cheap

    if not h5py.is_hdf5(str(path)):
        raise EventsError(f"{path}: not an HDF5 file although its suffix says so")
    try:
        with h5py.File(path, "r") as f:
            group = f.get(HDF5_GROUP)
            if not isinstance(group, h5py.Group):
                raise EventsError(f"{path}: no group /{HDF5_GROUP}")
            return {str(k): _decode_attr(v) for k, v in group.attrs.items()}
    except EventsError:
        raise
    except (OSError, KeyError, RuntimeError, ValueError) as exc:
        raise EventsError(f"{path}: cannot read the HDF5 file's metadata ({exc})") from None


def load_hdf5(path: Path, need_density: bool) -> EventData:
    """Read and validate an HDF5 events file (see :func:`~hawkes_cli.data.load_events`)."""
    import h5py  # here, not at the top: importing the package stays cheap

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
            missing_columns(path, found, need_density, "dataset")
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
    check_count(path, n)
    return parse_events(path, raw, _h5_numbers, _h5_fips, attrs, where, need_density)


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


def write_hdf5(
    data: EventData, target: str | Path, finish: Callable[[Any], None] | None = None
) -> None:
    """Write ``data`` to the new (or empty) file ``target``: ``/events``, attributes as JSON
    where needed (see :func:`~hawkes_cli.data.save_events`).

    The file is built in memory and written with plain writes
    (:func:`hawkes_cli.atomic.hdf5_image`), so a full disk is one
    :class:`~hawkes_cli.atomic.NoSpaceError` and HDF5 never meets it.

    Parameters
    ----------
    finish
        Called with the open ``h5py.File`` once the events are in it, to add groups of the
        caller's own.
    """

    def build(f: Any) -> None:
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
        if finish is not None:
            finish(f)

    atomic.fill(target, atomic.hdf5_image(build))
