"""One fast start per run: the first chain to need it searches, the others read its result.

The fast start (:func:`~hawkes_cli.start.find.find_start`) is the same for every chain of a run: it
searches from the same values on the same seeded subsample. Run by each chain, it repeats the
same work ``chains.count`` times; on a machine whose cores the chains share (``hawkes-run
local``) that is most of a small run's wall time. Here the chains of a run directory take an
exclusive lock (``chains/start.lock``, :func:`fcntl.flock`); the holder reuses
``chains/start.json`` when it was written for the same config and data, and otherwise searches
and writes it (atomically) before releasing the lock, so the chains that waited read it.

What is shared is everything the search leaves behind that later draws depend on: the
:class:`~hawkes_cli.start.result.StartResult` and the truncated trigger's cut-off after the search
(its ``kappa`` may tighten during the full-data evaluations). A chain that reads the file
restores both, so its draws are bit-for-bit those it would have drawn had it searched itself,
whichever chain got the lock first.

The file carries a sha256 of its content and is validated when read (a finite mode and log
posterior, a finite, symmetric, positive-definite covariance): a damaged or edited file is
searched again, with a WARNING. The lock's holder writes who it is into the lock file; a chain
waiting for it logs that and for how long, gives up with an error after ``HAWKES_START_WAIT``
seconds (default one hour: a stopped or hung holder never blocks a run forever), and stops at
once on a signal, as the search itself does (``should_stop``).

The file is keyed by :func:`start_key`: the resolved config's sha256, the number of ranks of a
chain and a digest of the events, so a changed config, rank count or events file is never served
a stale start. Where the file system has no working ``flock`` (some network file systems), or the
file cannot be written, each chain searches for itself, as before (a WARNING says so).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import math
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import atomic
from ..data import EventData
from ..errors import Interrupted, StorageError, UsageError
from ..vocab import START_WAIT_ENV, START_WAIT_SECONDS
from .result import StartResult

log = logging.getLogger(__name__)

__all__ = ["SharedStart", "shared_start", "start_key"]

SCHEMA = 2  # 2: a run that redraws locations searches on one draw of them
#: Seconds between attempts to take the lock while another chain searches.
POLL_SECONDS = 0.1
#: Seconds between the INFO lines of a chain that waits for the lock.
REPORT_SECONDS = 60.0


@dataclass(frozen=True)
class SharedStart:
    """A fast start as the chains of a run share it.

    Parameters
    ----------
    result
        The search's mode, curvature, modes and cost.
    truncation
        The truncated trigger's cut-off state right after the search (None for exact engines).
    chain_id
        The chain that ran the search.
    """

    result: StartResult
    truncation: Mapping[str, Any] | None
    chain_id: int

    def to_json(self, key: str) -> dict[str, Any]:
        """The file's content (plain JSON; floats round-trip exactly), with its ``sha256``."""
        content = {
            "schema": SCHEMA,
            "key": key,
            "chain_id": self.chain_id,
            "truncation": None if self.truncation is None else dict(self.truncation),
            "start": self.result.to_json(),
        }
        return {**content, "sha256": _checksum(content)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SharedStart:
        """Inverse of :meth:`to_json`, checked (raises ValueError when the checksum is wrong,
        a value malformed, the mode or log posterior not finite, or the covariance not
        symmetric positive definite)."""
        content = {k: v for k, v in d.items() if k != "sha256"}
        if d.get("sha256") != _checksum(content):
            raise ValueError("its sha256 does not match its content (damaged or edited)")
        try:
            truncation = d["truncation"]
            if truncation is not None and not isinstance(truncation, Mapping):
                raise ValueError("member 'truncation' is not a mapping")
            start = cls(
                result=StartResult.from_json(d["start"]),
                truncation=truncation,
                chain_id=int(d["chain_id"]),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"shared start is malformed: {exc!r}") from exc
        _check_start(start.result)
        return start


def _checksum(content: Mapping[str, Any]) -> str:
    text = json.dumps(content, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _check_start(result: StartResult) -> None:
    """Raise ValueError unless the mode and its covariance can start a sampler."""
    theta = np.asarray(result.theta, dtype=float)
    if not (np.all(np.isfinite(theta)) and math.isfinite(result.log_post)):
        raise ValueError(f"its mode {result.theta} or log posterior is not finite")
    cov = result.cov_matrix
    if cov.shape != (theta.size, theta.size) or not np.all(np.isfinite(cov)):
        raise ValueError("its covariance is not a finite square matrix of the mode's size")
    if not np.allclose(cov, cov.T, rtol=1e-8, atol=0.0):
        raise ValueError("its covariance is not symmetric")
    try:
        np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        raise ValueError("its covariance is not positive definite") from None


def start_key(config_sha256: str, ranks: int, data: EventData) -> str:
    """What a shared start depends on: the resolved config, ranks per chain, the events.

    Parameters
    ----------
    config_sha256
        sha256 of the resolved config without the keys no draw depends on
        (:attr:`Config.draws_sha256`: a chain started after a change of ``RUN_ONLY_KEYS``
        shares the start of those before it).
    ranks
        MPI ranks of one chain (their row split changes rounding, hence the search's path).
    data
        The events as the chain loaded them (times, coordinates, densities digested).

    Returns
    -------
    str
        A hex sha256.
    """
    text = f"{config_sha256}\n{ranks}\n{data.digest()}\n"
    return hashlib.sha256(text.encode()).hexdigest()


def shared_start(
    path: Path,
    key: str,
    compute: Callable[[], SharedStart],
    *,
    chain_id: int,
    should_stop: Callable[[], bool] = lambda: False,
    on_wait: Callable[[str, float], None] | None = None,
) -> tuple[SharedStart, bool]:
    """The run's fast start: read from ``path`` if written for ``key``, else computed and written.

    Parameters
    ----------
    path
        The run's start file (``chains/start.json``); the lock is ``start.lock`` beside it.
    key
        :func:`start_key` of this chain.
    compute
        Runs the search (collective on the chain's ranks) and returns its result.
    chain_id
        This chain (for messages).
    should_stop
        Polled while waiting for the lock: true stops the wait with :class:`Interrupted`.
    on_wait
        Called at every poll of that wait with who holds the lock and the seconds waited.

    Returns
    -------
    (SharedStart, bool)
        The start and whether it was read from the file (False: this chain searched).
    """
    path = Path(path)
    lock = path.with_name(path.stem + ".lock")
    with _exclusive(lock, chain_id, should_stop, on_wait) as locked:
        if locked:
            cached = _read(path, key)
            if cached is not None:
                return cached, True
        value = compute()
        if locked:
            try:
                atomic.write_json(path, value.to_json(key))
            except OSError as exc:
                log.warning(
                    "chain %d: could not write the shared start %s (%s)", chain_id, path, exc
                )
        return value, False


def _read(path: Path, key: str) -> SharedStart | None:
    """The start in ``path`` if it was written for ``key`` (None if absent, stale or damaged)."""
    try:
        d = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring the shared start %s: unreadable (%s); searching again", path, exc)
        return None
    if not isinstance(d, Mapping) or d.get("schema") != SCHEMA or d.get("key") != key:
        log.info("the shared start %s is of another config or events file; searching again", path)
        return None
    try:
        return SharedStart.from_json(d)
    except ValueError as exc:
        log.warning("ignoring the shared start %s: %s; searching again", path, exc)
        return None


def wait_limit() -> float:
    """Seconds to wait for the start lock: ``$HAWKES_START_WAIT``, else one hour.

    Raises
    ------
    UsageError
        The variable is set to something other than a positive number.
    """
    text = os.environ.get(START_WAIT_ENV, "").strip()
    if not text:
        return START_WAIT_SECONDS
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise UsageError(
            f"environment variable {START_WAIT_ENV}={text!r}: give the seconds to wait, a "
            "number > 0, or unset it"
        )
    return value


def _holder(fd: int) -> str:
    """Who holds the lock, as its holder wrote it ("" when unknown)."""
    try:
        return os.pread(fd, 300, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""


@contextlib.contextmanager
def _exclusive(
    lock_path: Path,
    chain_id: int,
    should_stop: Callable[[], bool],
    on_wait: Callable[[str, float], None] | None = None,
) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on ``lock_path`` (yields True), waiting while another chain
    holds it (up to :func:`wait_limit` seconds, or until ``should_stop``; ``on_wait`` hears of
    each poll); yields False where locks do not work (no sharing then)."""
    limit = wait_limit()
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        log.warning("chain %d: no shared fast start (%s: %s)", chain_id, lock_path, exc)
        yield False
        return
    try:
        t0 = time.monotonic()
        reported = -math.inf
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    log.warning("chain %d: no shared fast start (flock: %s)", chain_id, exc)
                    yield False
                    return
            waited = time.monotonic() - t0
            holder = _holder(fd) or "another chain"
            if should_stop():
                raise Interrupted(
                    f"chain {chain_id}: stopped while waiting for the fast start of {holder}; "
                    "nothing was committed, run again to resume"
                )
            if waited > limit:
                raise StorageError(
                    f"chain {chain_id}: gave up after {waited:.0f} s waiting for the fast start "
                    f"of {holder} (lock {lock_path}); if that process is stopped or hung, end "
                    f"it and run again, or set {START_WAIT_ENV} to wait longer"
                )
            if on_wait is not None:
                on_wait(holder, waited)
            if waited - reported >= REPORT_SECONDS:
                log.info(
                    "chain %d: waiting %.0f s for the fast start of %s (gives up after %.0f s)",
                    chain_id,
                    waited,
                    holder,
                    limit,
                )
                reported = waited
            time.sleep(POLL_SECONDS)
        waited = time.monotonic() - t0
        if waited > POLL_SECONDS:
            log.info("chain %d: waited %.1f s for the shared fast start", chain_id, waited)
        with contextlib.suppress(OSError):
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            who = f"chain {chain_id}, pid {os.getpid()} on {socket.gethostname()}, since {since}"
            os.ftruncate(fd, 0)
            os.pwrite(fd, who.encode("utf-8"), 0)
        yield True
    finally:
        os.close(fd)  # releases the lock
