"""Resuming a chain file: may it be continued (this chain, layout, config and events), and
what did it commit."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import same_draws
from ..errors import StorageError
from .h5files import h5_errors, open_reader
from .reader import check_chain_file, check_no_rows, check_sidecar_matches, read_rows
from .record import check_fingerprint, read_sidecar
from .schema import ChainMeta

logger = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class Committed:
    """What a chain file committed, verified for its resume.

    Attributes
    ----------
    side
        The commit record (None: the file never committed).
    rows
        The committed rows of every ``/draws`` dataset, shape ``(n,)`` each.
    n
        Committed rows.
    n_rows
        Rows in the file, uncommitted ones included.
    meta
        The identity to rewrite the file with: the resume's, but the config (text, sha256 and
        iterations) the file was created with, which the commit record names and which may
        differ from the resume's in :data:`~hawkes_cli.config.RUN_ONLY_KEYS` only (a
        checkpoint records the iterations it ran for).
    """

    side: dict[str, Any] | None
    rows: dict[str, np.ndarray]
    n: int
    n_rows: int
    meta: ChainMeta


def read_committed(
    path: Path,
    meta: ChainMeta,
    check: Callable[[dict[str, Any] | None, ChainMeta], None] | None = None,
) -> Committed:
    """Read what ``path`` committed, refusing a file that cannot be resumed as ``meta``.

    The file is only read (through a SWMR reader): its identity (:func:`check_resume`), its
    commit record (which must match it) and the committed rows (which must match the record's
    fingerprint); then ``check`` is called with the verified record and the file's identity.

    Raises
    ------
    StorageError
        A foreign, corrupt or changed file, or one of another chain, layout, config or events.
    """
    with open_reader(path) as src, h5_errors(path):
        _, found = check_chain_file(src, path)
        side = read_sidecar(path)
        check_resume(found, meta, path)
        names = tuple(name for name, _ in meta.columns)
        if side is not None:
            check_sidecar_matches(side, found, path)
        else:
            check_no_rows(src, path, names)
        n = side["draws"] if side is not None else 0
        rows = read_rows(src, path, names, n)
        n_rows = max(src["draws"][name].shape[0] for name in names)
    if side is not None:
        check_fingerprint(side, meta.columns, rows, path)
    if check is not None:
        check(side, found)
    kept = dataclasses.replace(
        meta,
        config_yaml=found.config_yaml,
        config_sha256=found.config_sha256,
        iterations=found.iterations,
    )
    return Committed(side=side, rows=rows, n=n, n_rows=n_rows, meta=kept)


def check_resume(found: ChainMeta, meta: ChainMeta, path: Path) -> None:
    """Refuse to resume a chain file (whose identity is ``found``) written for another chain,
    layout, config or events than ``meta``'s.

    The layout (datasets) is checked before the config: a file of an older version of the
    package has both another layout and another resolved config, and the layout is the reason
    it can never be continued.
    """
    if found.chain_id != meta.chain_id:
        raise StorageError(
            f"{path} belongs to chain {found.chain_id}, not chain {meta.chain_id}; "
            "use a new run_dir or pass --overwrite"
        )
    if found.param_names != meta.param_names or found.fields != meta.fields:
        have = [n for n, _ in found.fields]
        want = [n for n, _ in meta.fields]
        missing = [n for n in want if n not in have]
        extra = [n for n in have if n not in want]
        detail = "".join(
            f"; {what}: {', '.join(names)}"
            for what, names in (("missing", missing), ("not expected", extra))
            if names
        )
        raise StorageError(
            f"{path} stores datasets {list(found.param_names)} + {have}, expected "
            f"{list(meta.param_names)} + {want}{detail}: it was written with another draw "
            "layout (another version of hawkes_cli) and cannot be continued; its draws stay "
            "readable (hawkes-diagnose). Start a new run_dir, or pass --overwrite to discard "
            "its draws"
        )
    if found.config_sha256 != meta.config_sha256 and not same_draws(
        found.config_yaml, meta.config_yaml
    ):
        raise StorageError(
            f"{path} was written with a different config (sha256 {found.config_sha256}, "
            f"now {meta.config_sha256}); use a new run_dir, or pass --overwrite to discard "
            "its draws"
        )
    was = found.events_sha256
    if was and meta.events_sha256 and was != meta.events_sha256:
        raise StorageError(
            f"{path} was written for other events than the config's data.events now holds "
            f"(content sha256 {was[:12]}..., now {meta.events_sha256[:12]}...): the events file "
            "changed since this chain started. Restore the original events to resume, or pass "
            "--overwrite to discard its draws and start afresh on the new events"
        )
    for key in ("kernel_sha256", "package_version"):
        if getattr(found, key) != getattr(meta, key):
            logger.warning(
                "resuming %s with %s %s (was %s)",
                path,
                key,
                getattr(meta, key),
                getattr(found, key),
            )
