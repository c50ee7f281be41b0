"""Reading a chain file: only its committed draws, safe while its writer runs."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from ..errors import StorageError
from .h5files import WAY_OUT, h5_errors, open_reader
from .record import check_fingerprint, read_sidecar
from .schema import FORMAT_NAME, SCHEMA_VERSION, ChainMeta, sidecar_path

_REQUIRED_ATTRS = ("schema_version", "chain_id", "config_sha256", "param_names", "fields")


@dataclass(frozen=True)
class ChainDraws:
    """The committed content of one chain file (see :func:`read_chain`).

    Attributes
    ----------
    path
        The chain file.
    meta
        The chain's identity and settings, typed (the root attributes): what a reader of the
        metadata uses.
    attrs
        The same root attributes by name, decoded to Python values (``format`` and
        ``schema_version`` too); ``param_names`` is a tuple of str and ``fields`` a tuple of
        ``(name, dtype)`` pairs.
    draws
        One array of shape ``(n_committed,)`` per ``/draws`` dataset, parameters on the natural
        scale, warm-up draws included (see the ``warmup`` field).
    n_committed
        Number of committed draws (from the sidecar; 0 without one).
    committed_at
        ISO 8601 UTC time of the last commit, or None.
    checkpoint
        The payload of the last commit, or None.
    last_iteration
        The iteration of the last committed row as the commit recorded it (None: no rows, or a
        schema-1 record).
    """

    path: Path
    meta: ChainMeta
    attrs: dict[str, Any]
    draws: dict[str, np.ndarray]
    n_committed: int
    committed_at: str | None
    checkpoint: dict[str, Any] | None
    last_iteration: int | None = None


def _decode(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        return [_decode(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _json_list(path: Path, key: str, value: Any) -> list[Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise StorageError(f"{path}: root attribute {key!r} is not valid JSON") from exc
    if not isinstance(value, list):
        raise StorageError(f"{path}: root attribute {key!r} is not a list")
    return value


def check_chain_file(h5file: h5py.File, path: Path) -> tuple[dict[str, Any], ChainMeta]:
    """Decoded root attributes of an open chain file and the chain's identity they hold;
    StorageError when the file is foreign or its attributes do not describe a chain."""
    raw = dict(h5file.attrs)
    missing = [k for k in _REQUIRED_ATTRS if k not in raw]
    if raw.get("format") not in (None, FORMAT_NAME) or missing or "draws" not in h5file:
        raise StorageError(
            f"{path} is an HDF5 file but not a hawkes chain file"
            + (f" (missing attributes: {', '.join(missing)})" if missing else "")
            + f"; {WAY_OUT}"
        )
    attrs = {key: _decode(value) for key, value in raw.items()}
    if attrs["schema_version"] != SCHEMA_VERSION:
        raise StorageError(
            f"{path} is a chain file of schema {attrs['schema_version']!r}; this version of "
            f"hawkes reads schema {SCHEMA_VERSION}"
        )
    attrs["param_names"] = tuple(
        str(n) for n in _json_list(path, "param_names", attrs["param_names"])
    )
    fields = _json_list(path, "fields", attrs["fields"])
    try:
        attrs["fields"] = tuple((str(n), str(d)) for n, d in fields)
    except (TypeError, ValueError) as exc:
        raise StorageError(f"{path}: root attribute 'fields' is not a list of pairs") from exc
    group = h5file["draws"]
    for name in attrs["param_names"] + tuple(n for n, _ in attrs["fields"]):
        if not isinstance(group.get(name), h5py.Dataset):
            raise StorageError(f"{path}: dataset /draws/{name} is missing; the file is corrupt")
    try:
        meta = ChainMeta.from_attrs(attrs)
    except ValueError as exc:
        raise StorageError(
            f"{path}: its root attributes do not describe a chain ({exc}); the file is corrupt"
        ) from exc
    return attrs, meta


def read_rows(
    h5file: h5py.File, path: Path, names: tuple[str, ...], n: int
) -> dict[str, np.ndarray]:
    """The first ``n`` rows of every ``/draws`` dataset (the committed rows)."""
    out: dict[str, np.ndarray] = {}
    for name in names:
        ds = h5file["draws"][name]
        if ds.shape[0] < n and h5file.swmr_mode:
            ds.refresh()
        if ds.shape[0] < n:
            raise StorageError(
                f"{path}: /draws/{name} has {ds.shape[0]} rows but the checkpoint "
                f"{sidecar_path(path)} records {n} committed draws; the chain file was "
                "replaced or truncated behind hawkes' back: restore it, or start over with "
                "--overwrite"
            )
        out[name] = np.asarray(ds[:n])
    return out


def check_no_rows(h5file: h5py.File, path: Path, names: tuple[str, ...]) -> None:
    """A chain file without a commit record must hold no rows (hawkes writes the record when
    it creates the file): else the record was deleted and the rows cannot be trusted."""
    rows = max((h5file["draws"][name].shape[0] for name in names), default=0)
    if rows:
        raise StorageError(
            f"chain file {path} holds {rows} rows but its checkpoint {sidecar_path(path)} is "
            "missing, so which of them were committed is unknown; restore the checkpoint, or "
            "start over with --overwrite"
        )


def check_sidecar_matches(side: Mapping[str, Any], found: ChainMeta, path: Path) -> None:
    """Refuse a commit record written for another chain or config than the file (``found``)."""
    for key in ("chain_id", "config_sha256"):
        if side[key] != getattr(found, key):
            raise StorageError(
                f"checkpoint {sidecar_path(path)} does not belong to {path} ({key} "
                f"{side[key]!r} != {getattr(found, key)!r}); restore the right files or start "
                "over with --overwrite"
            )


def is_chain_file(path: Path) -> bool:
    """Whether ``path`` is a hawkes chain file (an HDF5 file :func:`read_chain` would take)."""
    try:
        with h5py.File(path, "r") as h5file:
            check_chain_file(h5file, Path(path))
    except (OSError, ValueError, StorageError):
        return False
    return True


def read_chain(path: Path) -> ChainDraws:
    """Read the committed draws of a chain file; safe while its writer is running.

    The file is opened read-only with SWMR and only the first ``n`` rows are read, ``n`` being
    the sidecar's committed count (rows beyond it belong to an unfinished commit). A file
    without a sidecar reads as 0 draws.

    Parameters
    ----------
    path
        The chain file (``chain-00.h5``).

    Returns
    -------
    ChainDraws

    Raises
    ------
    StorageError
        Missing, foreign or corrupt file, or a sidecar that does not match it.
    """
    path = Path(path)
    if not path.exists():
        raise StorageError(f"chain file {path} does not exist")
    # Sidecar first: rows [0, n) were flushed and fsynced before it was replaced.
    side = read_sidecar(path)
    with open_reader(path) as h5file, h5_errors(path):
        attrs, meta = check_chain_file(h5file, path)
        columns = meta.columns
        names = tuple(name for name, _ in columns)
        if side is not None:
            check_sidecar_matches(side, meta, path)
        else:
            check_no_rows(h5file, path, names)
        n = side["draws"] if side is not None else 0
        draws = read_rows(h5file, path, names, n)
        if side is not None:
            check_fingerprint(side, columns, draws, path)
    return ChainDraws(
        path=path,
        meta=meta,
        attrs=attrs,
        draws=draws,
        n_committed=n,
        committed_at=side.get("committed_at") if side is not None else None,
        checkpoint=side.get("checkpoint") if side is not None else None,
        last_iteration=side.get("last_iteration") if side is not None else None,
    )
