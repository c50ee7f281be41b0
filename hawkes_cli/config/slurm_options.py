"""Slurm's vocabulary as the config uses it: ``--time`` values and sbatch option names."""

from __future__ import annotations

import re

#: Slurm's limit for ``--signal=...@sig_time`` (``slurm.signal_seconds``).
MAX_SIGNAL_SECONDS = 65535

#: sbatch options that have their own key in the slurm section (option -> key), so they are
#: refused in ``slurm.extra``.
OWN_OPTIONS: dict[str, str] = {
    "partition": "partition",
    "time": "time",
    "account": "account",
    "qos": "qos",
    "signal": "signal_seconds",
}

#: An sbatch long option name without the leading ``--``.
SBATCH_OPTION_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")

# Slurm --time forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S
_SLURM_TIME_RE = re.compile(
    r"^(?:(?P<days>\d+)-(?P<dh>\d+)(?::(?P<dm>\d+)(?::(?P<ds>\d+))?)?"
    r"|(?P<a>\d+)(?::(?P<b>\d+)(?::(?P<c>\d+))?)?)$"
)


def slurm_time_seconds(text: str) -> int:
    """Seconds of a Slurm ``--time`` value.

    Parameters
    ----------
    text
        ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM`` or ``D-HH:MM:SS`` (a bare number
        is minutes, as in Slurm). Minutes and seconds after a colon must be < 60.

    Returns
    -------
    int
        The time limit in seconds.

    Raises
    ------
    ValueError
        If ``text`` is not one of these forms.
    """
    m = _SLURM_TIME_RE.match(text.strip())
    if m is None:
        raise ValueError(f"not a Slurm time: {text!r}")
    g = {k: int(v) for k, v in m.groupdict().items() if v is not None}
    if "days" in g:
        minutes, seconds = g.get("dm", 0), g.get("ds", 0)
        if minutes >= 60 or seconds >= 60:
            raise ValueError(f"minutes and seconds must be < 60 in {text!r}")
        return ((g["days"] * 24 + g["dh"]) * 60 + minutes) * 60 + seconds
    if "c" in g:  # H:M:S
        if g["b"] >= 60 or g["c"] >= 60:
            raise ValueError(f"minutes and seconds must be < 60 in {text!r}")
        return (g["a"] * 60 + g["b"]) * 60 + g["c"]
    if "b" in g:  # M:S
        if g["b"] >= 60:
            raise ValueError(f"seconds must be < 60 in {text!r}")
        return g["a"] * 60 + g["b"]
    return g["a"] * 60  # minutes
