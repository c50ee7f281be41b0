"""Progress lines and stage timings of :func:`hawkes_cli.prep.prepare_hhs`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: Called with one line of text at each stage or milestone.
Progress = Callable[[str], None]


class StageClock:
    """Logs each stage's message, passes it to ``progress`` and times the stages.

    Parameters
    ----------
    progress
        Receives ``[elapsed s] message`` lines; ``None``: log only.
    """

    def __init__(self, progress: Progress | None) -> None:
        self.progress = progress
        self.t0 = self.last = time.perf_counter()
        #: Stage name -> wall time of the stage, seconds.
        self.seconds: dict[str, float] = {}

    def say(self, msg: str) -> None:
        """Log ``msg`` and pass it on with the time since the start."""
        log.info(msg)
        if self.progress is not None:
            self.progress(f"[{time.perf_counter() - self.t0:7.1f} s] {msg}")

    def lap(self, stage: str, msg: str) -> None:
        """End ``stage`` (its time is since the previous lap or the start) and say ``msg``."""
        now = time.perf_counter()
        self.seconds[stage] = now - self.last
        self.last = now
        self.say(msg)
