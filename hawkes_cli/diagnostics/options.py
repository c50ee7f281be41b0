"""What ``hawkes-diagnose`` should look at: :class:`DiagnoseOptions`, validated on creation."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError

__all__ = [
    "MIN_CUT_DRAWS",
    "MIN_LINEAR_NEWTON_DRAWS",
    "DiagnoseOptions",
    "check_is_draws",
    "check_newton_draws",
]

MIN_CUT_DRAWS = 3
"""Fewest location draws of the cut-posterior check (a between-draw sd and its jackknife)."""

MIN_LINEAR_NEWTON_DRAWS = 4
"""Fewest Newton draws of a check with linear modes (the double sampling's slope and residual
variance, :mod:`hawkes_cli.diagnostics.cut`)."""


def _county_codes(counties: tuple[str, ...]) -> tuple[str, ...]:
    """5-digit FIPS codes, zero-padded and deduplicated in order (``UsageError`` if not digits)."""
    codes: list[str] = []
    for raw in counties:
        text = str(raw).strip()
        if not (text.isdigit() and 1 <= len(text) <= 5):
            raise UsageError(
                f"--county {raw!r}: a county is given by its FIPS code, 5 digits "
                "(e.g. 36061 for New York County, NY)"
            )
        code = text.zfill(5)
        if code not in codes:
            codes.append(code)
    return tuple(codes)


@dataclass(frozen=True)
class DiagnoseOptions:
    """What ``hawkes-diagnose`` should look at.

    Parameters
    ----------
    burn
        ``None``: drop the draws flagged as warm-up (the run's own warm-up). An integer ``B >= 0``:
        drop every draw with ``iteration < B`` instead (0 keeps everything).
    thin
        Keep every ``thin``-th retained draw of each chain (>= 1).
    counties
        5-digit county FIPS codes whose effective spatial lengthscale is reported (miles for
        lon/lat data, else coordinate units); shorter digit strings are zero-padded
        (``"6037"`` -> ``"06037"``).
    strict
        Whether a failing verdict makes :func:`~hawkes_cli.diagnostics.exit_code` non-zero.
    events
        Events file for the county rows and the time unit; ``None`` takes the config's
        ``data.events`` as recorded in the chain files.
    systematic
        Whether to weigh the model's systematic errors against the posterior's width (the
        trigger mass outside the study region, offspring hidden by ties:
        :mod:`~hawkes_cli.diagnostics.systematic`); ``hawkes-diagnose`` does, the convergence
        check of running chains does not (it needs R-hat and ESS only).
    cut_draws
        Location draws of the cut-posterior check (``hawkes-diagnose --cut-check``,
        :mod:`hawkes_cli.cutcheck`), an integer >= :data:`MIN_CUT_DRAWS`; ``None``: no check.
    cut_newton_draws
        Of those, how many get Newton's mode and curvature (an integer >= ``MIN_CUT_DRAWS``;
        the others a linear mode only); ``None``: the check's default
        (:data:`hawkes_cli.diagnostics.cut.DEFAULT_CUT_NEWTON_DRAWS`).
    cut_is_draws
        Of the Newton draws, how many are also importance-sampled (an integer >= 0); ``None``:
        the check's default (:data:`hawkes_cli.diagnostics.cut.DEFAULT_CUT_IS_DRAWS`).

    Raises
    ------
    UsageError
        A negative ``burn``, ``thin < 1``, a county code that is not 1-5 digits, or
        ``cut_draws`` or ``cut_newton_draws`` below ``MIN_CUT_DRAWS``, a negative
        ``cut_is_draws``.
    """

    burn: int | None = None
    thin: int = 1
    counties: tuple[str, ...] = ()
    strict: bool = False
    events: Path | None = None
    systematic: bool = False
    cut_draws: int | None = None
    cut_newton_draws: int | None = None
    cut_is_draws: int | None = None

    def __post_init__(self) -> None:
        j = self.cut_is_draws
        if j is not None and (isinstance(j, bool) or int(j) != j or j < 0):
            raise UsageError(f"--cut-is-draws must be an integer >= 0, got {j!r}")
        k = self.cut_draws
        if k is not None and (isinstance(k, bool) or int(k) != k or k < MIN_CUT_DRAWS):
            raise UsageError(f"--cut-draws must be an integer >= {MIN_CUT_DRAWS}, got {k!r}")
        n = self.cut_newton_draws
        if n is not None and (isinstance(n, bool) or int(n) != n or n < MIN_CUT_DRAWS):
            raise UsageError(f"--cut-newton-draws must be an integer >= {MIN_CUT_DRAWS}, got {n!r}")
        if j is not None and k is not None:
            check_is_draws(j, k, n)
        if n is not None and k is not None:
            check_newton_draws(n, k)
        if self.burn is not None and (isinstance(self.burn, bool) or int(self.burn) < 0):
            raise UsageError(f"--burn must be an integer >= 0, got {self.burn!r}")
        if isinstance(self.thin, bool) or int(self.thin) < 1:
            raise UsageError(f"--thin must be an integer >= 1, got {self.thin!r}")
        object.__setattr__(self, "counties", _county_codes(self.counties))
        if self.burn is not None:
            object.__setattr__(self, "burn", int(self.burn))
        object.__setattr__(self, "thin", int(self.thin))
        if self.events is not None:
            object.__setattr__(self, "events", Path(self.events))
        if k is not None:
            object.__setattr__(self, "cut_draws", int(k))
        if j is not None:
            object.__setattr__(self, "cut_is_draws", int(j))
        if n is not None:
            object.__setattr__(self, "cut_newton_draws", int(n))


def check_newton_draws(newton_draws: int, draws: int) -> None:
    """Refuse too few Newton draws for the linear modes of the others."""
    if int(newton_draws) < MIN_LINEAR_NEWTON_DRAWS and int(newton_draws) < int(draws):
        raise UsageError(
            f"--cut-newton-draws {newton_draws} with --cut-draws {draws}: the regression on the "
            f"linear modes needs {MIN_LINEAR_NEWTON_DRAWS} Newton draws or more (or as many as "
            "--cut-draws: no linear modes)"
        )


def check_is_draws(is_draws: int, draws: int, newton_draws: int | None = None) -> None:
    """Refuse more importance-sampled draws (``--cut-is-draws``) than Newton draws (the first
    ``min(draws, newton_draws)`` location draws; ``None``: all of them)."""
    if int(is_draws) > int(draws):
        raise UsageError(
            f"--cut-is-draws {is_draws} is more than the location draws (--cut-draws {draws}): "
            "at most one importance sample per draw"
        )
    if newton_draws is not None and int(is_draws) > int(newton_draws):
        raise UsageError(
            f"--cut-is-draws {is_draws} is more than the Newton draws (--cut-newton-draws "
            f"{newton_draws}): only a draw with a Laplace fit is importance-sampled"
        )
