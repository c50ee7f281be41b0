"""The in-memory events (:class:`EventData`, its read-only :class:`FrozenAttrs`) and what a
run asks of them (its window end, its area)."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError
from .formats import FIPS_DTYPE


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
    validated with user-facing messages by :func:`~hawkes_cli.data.load_events` before they get
    here.
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
