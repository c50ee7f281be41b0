"""How ``hawkes-run local`` shows its chains: progress records in, lines out.

The functions are pure (a :class:`~hawkes_cli.rundir.Progress` record, or several, to text):
:func:`chain_line` is one chain's line (phase, iteration/total, the current phase's rate,
elapsed, ETA, with ``stop_when: converged`` the end projected from the ESS, acceptance; the
fast start's evaluations and best log posterior), :func:`redraw` the ANSI text
that rewrites a block of lines in place, :class:`LogCadence` which chains a plain log prints
now. :class:`ProgressDisplay` writes them to a stream: on a terminal one line per chain,
redrawn in place; elsewhere (Slurm logs, pipes) a time-stamped line per chain at each phase
change and every :data:`LOG_SECONDS` within a phase.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from ..chain_progress import Progress
from ..vocab import (
    PHASE_FAILED,
    PHASE_FAST_START,
    PHASE_PENDING,
    PHASE_SAMPLING,
    PHASE_STARTING,
    PHASE_WARMUP,
)

__all__ = [
    "LOG_SECONDS",
    "LogCadence",
    "ProgressDisplay",
    "chain_line",
    "converge_seconds",
    "eta_seconds",
    "format_duration",
    "format_rate",
    "redraw",
]

#: Seconds between a chain's lines in the plain (non-terminal) form, within one phase.
LOG_SECONDS = 30.0
_RUNNING = (PHASE_WARMUP, PHASE_SAMPLING, "running")
_UP, _CLEAR_LINE, _CLEAR_BELOW = "\x1b[{}A", "\r\x1b[2K", "\x1b[J"


def format_duration(seconds: float | None) -> str:
    """``m:ss`` under an hour, else ``h:mm:ss``; ``-`` when unknown."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "-"
    total = round(float(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def format_rate(it_per_s: float | None) -> str:
    """``12.3 it/s`` at one iteration a second or more, else ``4.2 s/it``; ``-`` when unknown."""
    if it_per_s is None or not math.isfinite(it_per_s) or it_per_s <= 0:
        return "-"
    if it_per_s >= 1.0:
        return f"{it_per_s:.1f} it/s"
    return f"{1.0 / it_per_s:.1f} s/it"


def eta_seconds(record: Progress) -> float | None:
    """Seconds to the chain's last iteration at its current rate (None unless iterating):
    ``(iterations - iteration) / it_per_s``."""
    rate = record.it_per_s
    if record.current_phase() not in _RUNNING or not rate or rate <= 0:
        return None
    return max(record.iterations - record.iteration, 0) / rate


def converge_seconds(record: Progress) -> float | None:
    """Seconds until the run is projected to converge (``stop_when: converged``: the
    iteration :attr:`~hawkes_cli.rundir.Progress.converge_at` projected from the last check's
    ESS, reached at the current rate); None when there is no projection, it lies at or
    beyond the cap (the ETA says when that ends), or the chain is not iterating."""
    rate, at = record.it_per_s, record.converge_at
    if record.current_phase() not in _RUNNING or not rate or rate <= 0 or at is None:
        return None
    if at >= record.iterations:
        return None
    return max(at - record.iteration, 0) / rate


def chain_line(record: Progress) -> str:
    """One chain's line, e.g. ``chain  0  sampling    1200/2500  9.8 it/s  elapsed 2:03  ETA
    2:13  acc 0.31``, or during the fast start ``chain  0  fast start  312 evals, best log
    posterior -5123.4  elapsed 0:41`` (a chain not yet running shows its phase and elapsed
    time only)."""
    phase = record.current_phase()
    parts = [f"chain {record.chain:>2}  {phase:<10}"]
    if phase == PHASE_FAST_START:
        if record.note:
            parts.append(record.note)
        else:
            parts.append(f"{record.evaluations or 0} evals")
            if record.best_log_post is not None:
                parts[-1] += f", best log posterior {record.best_log_post:.6g}"
    elif phase not in (PHASE_PENDING, PHASE_STARTING):
        total = record.iterations
        parts.append(f"{record.iteration:>{len(str(total))}}/{total}")
        if record.it_per_s:
            parts.append(format_rate(record.it_per_s))
    if record.elapsed is not None:
        parts.append(f"elapsed {format_duration(record.elapsed)}")
    eta = eta_seconds(record)
    if eta is not None:
        parts.append(f"ETA {format_duration(eta)}")
    converge = converge_seconds(record)
    if converge is not None:
        parts.append(f"converged in ~{format_duration(converge)} (projected from ESS)")
    if record.acceptance is not None and phase != PHASE_FAST_START:
        parts.append(f"acc {record.acceptance:.2f}")
    if phase in (PHASE_FAILED, *_RUNNING) and record.note:
        parts.append(record.note)
    return "  ".join(parts)


def fit(line: str, width: int) -> str:
    """``line`` cut to fewer than ``width`` characters (a terminal line that wraps would break
    the in-place redraw)."""
    return line if len(line) < width else line[: max(width - 1, 1)]


def redraw(lines: Sequence[str], previous: int) -> str:
    """The text that replaces the ``previous`` lines last drawn (the cursor below them) by
    ``lines``: cursor up, then each line cleared and written; lines left over are cleared."""
    out = [_UP.format(previous)] if previous else []
    out += [f"{_CLEAR_LINE}{line}\n" for line in lines]
    if previous > len(lines):
        out.append(_CLEAR_BELOW)
    return "".join(out)


class LogCadence:
    """Which chains the plain form prints now: a chain whose phase changed since its last
    line, or whose last line is ``every`` seconds old."""

    def __init__(self, every: float = LOG_SECONDS) -> None:
        self.every = every
        self.last: dict[int, tuple[str, float]] = {}

    def due(self, records: Sequence[Progress], now: float) -> list[Progress]:
        out = []
        for record in records:
            phase = record.current_phase()
            seen = self.last.get(record.chain)
            if seen is None or seen[0] != phase or now - seen[1] >= self.every:
                self.last[record.chain] = (phase, now)
                out.append(record)
        return out


class ProgressDisplay:
    """The chains' progress on ``stream``: in place on a terminal, else a plain log.

    Parameters
    ----------
    stream
        Where to write (``sys.stdout``).
    terminal
        Redraw one line per chain in place (ANSI); else print :class:`LogCadence` lines.
    every
        Seconds between a chain's plain lines within one phase.
    clock, stamp, width
        Seconds (monotonic), the time stamp of a plain line, the terminal's width.
    """

    def __init__(
        self,
        stream: TextIO,
        *,
        terminal: bool,
        every: float = LOG_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        stamp: Callable[[], str] = lambda: time.strftime("%H:%M:%S"),
        width: Callable[[], int] = lambda: shutil.get_terminal_size().columns,
    ) -> None:
        self.stream, self.terminal = stream, terminal
        self.cadence = LogCadence(every)
        self.clock, self.stamp, self.width = clock, stamp, width
        self.drawn = 0  # lines of the block on screen (terminal)
        self.lines: list[str] = []

    def update(self, records: Sequence[Progress]) -> None:
        """Show ``records`` (one per chain)."""
        if self.terminal:
            self.lines = [chain_line(r) for r in records]
            self._draw()
            return
        for record in self.cadence.due(records, self.clock()):
            self.stream.write(f"{self.stamp()} {chain_line(record)}\n")
        self.stream.flush()

    def notice(self, text: str) -> None:
        """One line above the block (terminal), or a time-stamped line."""
        if self.terminal:
            self.clear()
            self.stream.write(f"{text}\n")
            self._draw()
        else:
            self.stream.write(f"{self.stamp()} {text}\n")
            self.stream.flush()

    def clear(self) -> None:
        """Erase the block (terminal), so that other output starts where it was."""
        if self.terminal and self.drawn:
            self.stream.write(_UP.format(self.drawn) + "\r" + _CLEAR_BELOW)
            self.stream.flush()
            self.drawn = 0

    def _draw(self) -> None:
        width = self.width()
        self.stream.write(redraw([fit(line, width) for line in self.lines], self.drawn))
        self.stream.flush()
        self.drawn = len(self.lines)
