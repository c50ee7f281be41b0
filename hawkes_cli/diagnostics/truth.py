"""The simulated truth next to the posterior, for events made by ``hawkes-prep simulate``.

A simulated events file records the parameters it was drawn with (``attrs["true_params"]``).
Only the trigger's parameters generate it: ``hawkes-prep simulate`` draws a constant-rate
background ("immigrants") and lets every event have ``Poisson(xi0)`` children at an
exponential delay (mean ``sigma_t``) and a Gaussian displacement (sd from ``sigma_x``), see
:mod:`hawkes_cli.simulate`. The model's background, ``mu0 * rho * sum_m phi1(t_n - t_m;
tau_t)``, is a kernel smoother of the events themselves, not a generating process, so the
``mu0`` and ``tau_t`` given to ``simulate`` are not a truth the posterior can recover (with a
constant background rate ``tau_t`` runs to the window's length and ``mu0`` follows it along a
ridge). This module says so, in one line, instead of comparing them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .records import SummaryRow

#: The parameters ``hawkes-prep simulate`` draws events with (its branching process).
GENERATING: tuple[str, ...] = ("xi0", "sigma_x", "sigma_t")

UNRECOVERABLE_NOTE = (
    "not compared: the simulation draws a constant-rate background that does not use them "
    "(the model's background is a kernel smoother of the events), so the values given to "
    "`hawkes-prep simulate` are no truth to recover"
)
INTEGER_DAYS_NOTE = (
    "times were floored to whole days: offspring on their parent's day cannot be triggered "
    "(the trigger needs t_m < t_n), so xi0 reads low and sigma_t high; simulate without "
    "--integer-days to recover them"
)


@dataclass(frozen=True)
class TruthRow:
    """One generating parameter: its simulated value and its posterior interval.

    Attributes
    ----------
    name, unit
        Parameter name and unit (as in the posterior table).
    truth
        The value the events were simulated with.
    median, q2_5, q97_5
        The posterior median and equal-tailed 95% interval.
    """

    name: str
    unit: str
    truth: float
    median: float
    q2_5: float
    q97_5: float

    @property
    def covered(self) -> bool:
        """Whether the truth lies inside the 95% interval."""
        return self.q2_5 <= self.truth <= self.q97_5


@dataclass(frozen=True)
class TruthCheck:
    """The simulated truth of a run's events against its posterior.

    Attributes
    ----------
    rows
        The generating parameters, in table order.
    unrecoverable
        Parameters with a recorded value that the simulation does not use.
    integer_days
        Whether the simulated times were floored to whole days.
    """

    rows: tuple[TruthRow, ...]
    unrecoverable: tuple[str, ...]
    integer_days: bool

    @property
    def outside(self) -> tuple[str, ...]:
        """The generating parameters whose truth lies outside the 95% interval."""
        return tuple(r.name for r in self.rows if not r.covered)

    def as_dict(self) -> dict[str, Any]:
        """Plain data (for ``--json``)."""
        return {
            "rows": [
                {
                    "name": r.name,
                    "truth": r.truth,
                    "median": r.median,
                    "q2_5": r.q2_5,
                    "q97_5": r.q97_5,
                    "covered": r.covered,
                }
                for r in self.rows
            ],
            "unrecoverable": list(self.unrecoverable),
            "integer_days": self.integer_days,
        }


def check_truth(attrs: Mapping[str, Any], parameters: Sequence[SummaryRow]) -> TruthCheck | None:
    """Compare the events' recorded ``true_params`` with the posterior rows.

    Parameters
    ----------
    attrs
        The events file's attributes.
    parameters
        The posterior table's parameter rows.

    Returns
    -------
    TruthCheck or None
        None when the events record no simulated truth (real data).
    """
    truth = attrs.get("true_params")
    if not isinstance(truth, Mapping) or not truth:
        return None
    rows = tuple(
        TruthRow(r.name, r.unit, float(truth[r.name]), r.median, r.q2_5, r.q97_5)
        for r in parameters
        if r.name in GENERATING and r.name in truth
    )
    unrecoverable = tuple(
        r.name for r in parameters if r.name in truth and r.name not in GENERATING
    )
    return TruthCheck(rows, unrecoverable, bool(attrs.get("integer_days", False)))


def format_truth(check: TruthCheck) -> str:
    """The comparison as a small table and its notes (no trailing newline)."""
    lines = ["simulated truth (the events file records the parameters it was drawn with):"]
    lines.append(f"{'parameter':<10} {'unit':<12} {'truth':>8} {'median':>8}  95% interval")
    for r in check.rows:
        where = "inside" if r.covered else "OUTSIDE"
        lines.append(
            f"{r.name:<10} {r.unit:<12} {r.truth:>8.4g} {r.median:>8.4g}  "
            f"[{r.q2_5:.4g}, {r.q97_5:.4g}]  truth {where}"
        )
    if check.unrecoverable:
        lines.append(f"{', '.join(check.unrecoverable)}: {UNRECOVERABLE_NOTE}")
    if check.integer_days:
        lines.append(INTEGER_DAYS_NOTE)
    if check.outside:
        lines.append(
            "a truth outside its 95% interval happens by chance about once in 20 parameters; "
            "several, or far outside, point to a problem"
        )
    return "\n".join(lines)
