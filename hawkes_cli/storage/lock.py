"""The writer lock of a chain file (``chain-NN.lock``): one process writes a chain."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
from pathlib import Path

from ..errors import StorageError
from .schema import lock_path

try:  # POSIX only; without it the writer runs unlocked (with a warning)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

_NO_LOCK_ERRNOS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


class WriterLock:
    """Exclusive advisory ``flock`` on ``chain-NN.lock``, so one process writes a chain.

    Released by :meth:`release` or by the kernel when the process dies (also on SIGKILL).
    Where the file system has no ``flock`` the writer runs unlocked, with a warning.
    """

    def __init__(self, chain_path: Path) -> None:
        self.path = lock_path(chain_path)
        self._fd: int | None = None
        if fcntl is None:  # pragma: no cover - Windows
            logger.warning("no fcntl: chain %s is written without a lock", chain_path)
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot create lock file {self.path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode("utf-8", "replace").strip() or "unknown"
            os.close(fd)
            raise StorageError(
                f"chain file {chain_path} is being written by another process ({holder}, "
                f"lock {self.path}); stop that process or wait for it to finish"
            ) from None
        except OSError as exc:
            os.close(fd)
            if exc.errno not in _NO_LOCK_ERRNOS:
                raise StorageError(f"cannot lock {self.path}: {exc}") from exc
            logger.warning(
                "file system does not support flock; chain %s is written without a lock",
                chain_path,
            )
            return
        self._fd = fd
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def writer_holder(chain_path: Path) -> str | None:
    """Who holds the writer lock of a chain file (``"pid 123 on host"``), None when nobody does
    (no lock file, or a file system without ``flock``)."""
    if fcntl is None:  # pragma: no cover - Windows
        return None
    try:
        fd = os.open(lock_path(chain_path), os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.read(fd, 200).decode("utf-8", "replace").strip() or "a process"
    except OSError:
        return None
    finally:
        os.close(fd)  # also releases a lock taken here
    return None
