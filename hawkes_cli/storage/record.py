"""The commit record (the sidecar ``chain-NN.ckpt.json``): its schema, its checksum, the
fingerprint of the committed draws, and reading it back with every check."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import StorageError
from .schema import sidecar_path

logger = logging.getLogger(__name__)

SIDECAR_SCHEMA = 2
"""Version of the sidecar (commit record). Schema 2 adds its integrity members:
``record_sha256`` (sha256 of the record's own canonical JSON), and the fingerprint of the
committed draws, ``draws_sha256`` (sha256 of rows ``0 .. draws-1``, row-major, little-endian, in
:attr:`ChainMeta.columns` order) and ``last_iteration``. Schema 1 records (no integrity) are
still read and resumed, with a warning."""


def record_digest(record: Mapping[str, Any]) -> str:
    """sha256 (hex) of a commit record's canonical JSON, without ``record_sha256`` itself."""
    body = {k: v for k, v in record.items() if k != "record_sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def rows_bytes(
    columns: tuple[tuple[str, str], ...], rows: Mapping[str, np.ndarray], lo: int, hi: int
) -> bytes:
    """Rows ``lo .. hi-1`` as row-major little-endian records (the draws fingerprint's input)."""
    dtype = np.dtype([(name, np.dtype(d).newbyteorder("<")) for name, d in columns])
    out = np.empty(max(hi - lo, 0), dtype=dtype)
    for name, _ in columns:
        out[name] = np.asarray(rows[name])[lo:hi]
    return out.tobytes()


def check_fingerprint(
    side: Mapping[str, Any],
    columns: tuple[tuple[str, str], ...],
    rows: Mapping[str, np.ndarray],
    path: Path,
) -> None:
    """Refuse committed rows that differ from the commit record's fingerprint."""
    if side.get("draws_sha256") is None:  # schema 1: no fingerprint
        return
    n = side["draws"]
    problem = None
    if hashlib.sha256(rows_bytes(columns, rows, 0, n)).hexdigest() != side["draws_sha256"]:
        problem = "their sha256 differs from the one recorded at the commit"
    elif "iteration" in rows and n and int(rows["iteration"][n - 1]) != side["last_iteration"]:
        problem = (
            f"the last committed row is iteration {int(rows['iteration'][n - 1])}, the commit "
            f"recorded {side['last_iteration']}"
        )
    if problem:
        raise StorageError(
            f"the {n} committed draws of {path} do not match their commit record "
            f"{sidecar_path(path)} ({problem}): the file or its checkpoint was changed after the "
            "commit; restore both from a backup, or start over with --overwrite"
        )


def read_sidecar(chain_path: Path) -> dict[str, Any] | None:
    """Read the sidecar checkpoint of a chain file.

    Parameters
    ----------
    chain_path
        The chain file (``chain-00.h5``), not the sidecar itself.

    Returns
    -------
    dict or None
        ``{"schema", "chain_id", "config_sha256", "draws", "committed_at", "checkpoint"}``, or
        None when there is no sidecar (nothing committed yet).

    Raises
    ------
    StorageError
        The sidecar is unreadable, not JSON, or not of this schema.
    """
    side = sidecar_path(chain_path)
    try:
        text = side.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"cannot read checkpoint {side}: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StorageError(
            f"checkpoint {side} is not valid JSON ({exc}); it was not written by hawkes "
            "(hawkes replaces it atomically); restore it or start over with --overwrite"
        ) from exc
    if not isinstance(data, dict):
        raise StorageError(f"checkpoint {side} is not a JSON object")
    schema = data.get("schema")
    if schema not in (1, SIDECAR_SCHEMA) or isinstance(schema, bool):
        raise StorageError(
            f"checkpoint {side} has schema {schema!r}, this version of hawkes reads schema "
            f"{SIDECAR_SCHEMA} (and 1)"
        )
    if schema == SIDECAR_SCHEMA:
        _check_record_integrity(data, side)
    else:
        logger.warning("checkpoint %s has schema 1: no checksum to verify it against", side)
        data["draws_sha256"] = data["last_iteration"] = None
    draws = data.get("draws")
    if not isinstance(draws, int) or isinstance(draws, bool) or draws < 0:
        raise StorageError(f"checkpoint {side}: 'draws' must be an integer >= 0, got {draws!r}")
    for key in ("chain_id", "config_sha256"):
        if key not in data:
            raise StorageError(f"checkpoint {side} lacks {key!r}")
    checkpoint = data.get("checkpoint")
    if checkpoint is not None and not isinstance(checkpoint, dict):
        raise StorageError(f"checkpoint {side}: 'checkpoint' must be a JSON object")
    return data


def _check_record_integrity(data: Mapping[str, Any], side: Path) -> None:
    """A schema-2 record must carry its own checksum and the draws' fingerprint."""
    if data.get("record_sha256") != record_digest(data):
        raise StorageError(
            f"checkpoint {side} fails its checksum (record_sha256): it was edited or damaged "
            "after hawkes wrote it; restore it from a backup, or start over with --overwrite"
        )
    last = data.get("last_iteration")
    if (
        not isinstance(data.get("draws_sha256"), str)
        or "last_iteration" not in data
        or not (last is None or (isinstance(last, int) and not isinstance(last, bool)))
    ):
        raise StorageError(f"checkpoint {side}: its draws fingerprint is malformed")
