"""``engine.trigger: auto``: which trigger a chain runs, from one exact and one truncated pass.

Where the exact pair sum is as fast as truncation (a GPU at 10^5 events, several GPUs at 10^6)
it is the better engine: no truncation error at all. At a chain's start (after the truncated
engine's calibration, at the start's lengthscales) :func:`time_choice` times one truncated pass
and one exact pass on the chain's own device and ranks, each warmed once first (the first pass
compiles and builds the grid index), and keeps the exact one when it takes at most
:data:`~hawkes_cli.vocab.EXACT_SLOWER_BY` times the truncated one's time (:func:`choose`).
Every rank times its own rows; a pass's time is the slowest rank's (an allgather), so every
rank takes the same decision.

The exact pass is timed in growing shares of its pair terms (the last rows first, where the
terms are; :data:`EXACT_SHARES`) and stops as soon as a share alone is slower than the
truncated pass allows: on 2 CPU cores at 10^6 events a whole exact pass would take minutes.
The recorded :class:`TriggerChoice` says which share was timed.

The chosen trigger lives in the truncated backend (:class:`TriggerSwitch`): in exact mode it
returns the exact pair sum with a zero bound, so :class:`~hawkes_cli.engine.base.Likelihood`
runs unchanged. Its cut-off state (a chain's checkpoint, ``truncation``) carries the choice, so
a resumed chain continues with it, bit for bit, without timing again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from ..parallel import Comm, SerialComm
from ..vocab import EXACT_SLOWER_BY, TRIGGER_EXACT, TRIGGER_TRUNCATED

if TYPE_CHECKING:
    from ..model import Params
    from .base import Likelihood
    from .opencl import OpenCLBackend

__all__ = [
    "EXACT_SHARES",
    "SwitchedTrigger",
    "TriggerChoice",
    "TriggerSwitch",
    "choose",
    "choose_trigger",
    "tail_rows",
    "time_choice",
    "trigger_switch",
]

#: Shares of the exact pass's pair terms timed in turn (the last one the whole pass); the
#: timing stops at the first share slower than the truncated pass allows.
EXACT_SHARES: tuple[float, ...] = (1 / 512, 1 / 64, 1 / 8, 1.0)


@dataclass(frozen=True)
class TriggerChoice:
    """The trigger a chain runs and the two timings it was chosen from.

    Attributes
    ----------
    trigger
        ``"exact"`` or ``"truncated"`` (:data:`~hawkes_cli.vocab.TRIGGERS`).
    exact_seconds
        Seconds of the exact pass over ``exact_share`` of its pair terms (the slowest rank's).
    truncated_seconds
        Seconds of one truncated pass (the slowest rank's).
    exact_share
        Share of the exact pass's pair terms that was timed: 1 for the whole pass; less when
        that share alone was already too slow (``exact_seconds`` is then a lower bound).
    """

    trigger: str
    exact_seconds: float
    truncated_seconds: float
    exact_share: float = 1.0

    def __post_init__(self) -> None:
        if self.trigger not in (TRIGGER_EXACT, TRIGGER_TRUNCATED):
            raise ValueError(f"trigger must be exact or truncated, got {self.trigger!r}")
        for name in ("exact_seconds", "truncated_seconds"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if not (isinstance(self.exact_share, (int, float)) and 0 < self.exact_share <= 1):
            raise ValueError(f"exact_share must be in (0, 1], got {self.exact_share!r}")

    def to_json(self) -> dict[str, Any]:
        """The choice as JSON (a chain checkpoint's ``truncation["trigger"]``)."""
        return {
            "trigger": self.trigger,
            "exact_seconds": float(self.exact_seconds),
            "truncated_seconds": float(self.truncated_seconds),
            "exact_share": float(self.exact_share),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TriggerChoice:
        """The choice of :meth:`to_json`.

        Raises
        ------
        ValueError
            Not such a record.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"a trigger choice is a JSON object, got {data!r}")
        try:
            return cls(
                trigger=data["trigger"],
                exact_seconds=data["exact_seconds"],
                truncated_seconds=data["truncated_seconds"],
                exact_share=data.get("exact_share", 1.0),
            )
        except KeyError as exc:
            raise ValueError(f"a trigger choice needs {exc.args[0]!r}") from exc

    def describe(self) -> str:
        """One line: the choice and both timings, e.g. ``"exact pair sum (exact pass 0.012 s,
        truncated pass 0.015 s)"``."""
        exact = f"exact pass {self.exact_seconds:.3g} s"
        if self.exact_share < 1:
            exact = (
                f"exact pass over {self.exact_share:.3g} of its pairs already "
                f"{self.exact_seconds:.3g} s"
            )
        what = "exact pair sum" if self.trigger == TRIGGER_EXACT else "truncated trigger"
        return f"{what} ({exact}, truncated pass {self.truncated_seconds:.3g} s)"


def choose(exact_seconds: float, truncated_seconds: float) -> str:
    """``"exact"`` when the exact pass takes at most :data:`~hawkes_cli.vocab.EXACT_SLOWER_BY`
    times the truncated pass's seconds, else ``"truncated"`` (a pure rule)."""
    if exact_seconds <= EXACT_SLOWER_BY * truncated_seconds:
        return TRIGGER_EXACT
    return TRIGGER_TRUNCATED


def tail_rows(pairs: np.ndarray, rows: tuple[int, int], share: float) -> np.ndarray:
    """The last rows of ``rows`` whose exact pair terms (``pairs[n]``: events before row n)
    make up at least ``share`` of the rows' terms: indices into all N, ascending."""
    start, stop = rows
    terms = np.asarray(pairs[start:stop], dtype=np.float64)
    if terms.size == 0:
        return np.arange(start, stop)
    from_end = np.cumsum(terms[::-1])
    need = share * from_end[-1]
    k = int(np.searchsorted(from_end, need, side="left")) + 1
    return np.arange(stop - min(k, terms.size), stop)


@runtime_checkable
class TriggerSwitch(Protocol):
    """A trigger backend that can run either pass and keep either (the truncated backend)."""

    def truncated_pass(self, sigma_x: float, sigma_t: float) -> None:
        """One truncated trigger pass over this rank's rows (finished when it returns)."""

    def exact_pass(self, sigma_x: float, sigma_t: float, share: float = 1.0) -> None:
        """The exact trigger over the last rows holding ``share`` of this rank's pair terms
        (the whole pass at 1; finished when it returns)."""

    def use_choice(self, choice: TriggerChoice) -> None:
        """Run the chosen trigger from now on."""


class SwitchedTrigger:
    """The :class:`TriggerSwitch` of the truncated backend
    (:class:`~hawkes_cli.engine.truncated.TruncatedBackend`, which sets :attr:`choice` and
    returns the exact pair sum with a zero bound while :attr:`truncates` is False).

    Attributes
    ----------
    choice
        What :func:`time_choice` chose (:meth:`use_choice`), None before (truncated).
    """

    choice: TriggerChoice | None
    exact: OpenCLBackend
    row_start: int
    row_stop: int

    def _truncated(self, sigma_x: float, sigma_t: float) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def use_choice(self, choice: TriggerChoice) -> None:
        """Run the trigger ``choice`` names from now on (kept in the cut-off state)."""
        self.choice = choice

    @property
    def truncates(self) -> bool:
        """Whether the trigger is truncated (False once the exact pair sum was chosen)."""
        return self.choice is None or self.choice.trigger != TRIGGER_EXACT

    def truncated_pass(self, sigma_x: float, sigma_t: float) -> None:
        """One truncated trigger pass, whatever the choice (for its timing)."""
        self._truncated(sigma_x, sigma_t)

    def exact_pass(self, sigma_x: float, sigma_t: float, share: float = 1.0) -> None:
        """The exact trigger over the last rows holding ``share`` of this rank's pair terms
        (all rows at 1), for its timing."""
        if share >= 1.0:
            self.exact.trigger(sigma_x, sigma_t)
            return
        pairs = self.exact.events.times.lo  # events before each row: its exact pair terms
        rows = tail_rows(pairs, (self.row_start, self.row_stop), share)
        self.exact.trigger_at(rows, sigma_x, sigma_t)


def trigger_switch(backend: object) -> TriggerSwitch | None:
    """``backend`` when it can switch its trigger (the truncated backend), else None (the
    reference and the exact engines: nothing to choose)."""
    return backend if isinstance(backend, TriggerSwitch) else None


def time_choice(
    switch: TriggerSwitch,
    sigma_x: float,
    sigma_t: float,
    comm: Comm | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> TriggerChoice:
    """Time one truncated and one exact pass at ``(sigma_x, sigma_t)`` and choose (collective
    over ``comm``: every rank times its rows, the slowest rank's time counts, every rank
    returns the same choice). Does not apply it (:meth:`TriggerSwitch.use_choice`).

    Each pass runs once untimed first. The exact pass is timed over the growing
    :data:`EXACT_SHARES` of its pair terms, stopping at the first share that alone is slower
    than :func:`choose` allows.
    """
    comm = comm or SerialComm()

    def timed(run: Callable[[], None]) -> float:
        t0 = clock()
        run()
        return max(comm.allgather(clock() - t0))

    switch.truncated_pass(sigma_x, sigma_t)  # warm: compiles, builds the grid index
    truncated = timed(lambda: switch.truncated_pass(sigma_x, sigma_t))
    switch.exact_pass(sigma_x, sigma_t, EXACT_SHARES[0])  # warm: compiles the exact kernel
    exact, share = math.nan, EXACT_SHARES[0]
    for share in EXACT_SHARES:
        exact = timed(lambda s=share: switch.exact_pass(sigma_x, sigma_t, s))
        if choose(exact, truncated) == TRIGGER_TRUNCATED:
            break
    return TriggerChoice(
        trigger=choose(exact, truncated),
        exact_seconds=exact,
        truncated_seconds=truncated,
        exact_share=share,
    )


def choose_trigger(
    likelihood: Likelihood, p: Params, clock: Callable[[], float] = time.perf_counter
) -> TriggerChoice | None:
    """Choose and apply the trigger of ``likelihood`` at ``p`` (collective over its ranks):
    one evaluation first (it calibrates the truncation cut-off, and adapts it to the
    tolerance), then :func:`time_choice` at ``p``'s lengthscales; the caches are dropped so
    that every later pass is the chosen one's. None, touching nothing, when the likelihood's
    backend has no choice (reference, exact, or ``tolerance: 0``)."""
    switch = trigger_switch(likelihood.backend)
    if switch is None:
        return None
    likelihood.loglik(p)
    choice = time_choice(switch, p.sigma_x, p.sigma_t, likelihood.comm, clock)
    switch.use_choice(choice)
    likelihood.clear_cache()
    return choice
