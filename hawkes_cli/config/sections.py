"""One section's raw mapping -> its dataclass, read key by key from the fields' specs.

:func:`load_section` is the one loader of every section: each field of the section's dataclass
is read by its :class:`~.spec.KeySpec` (absent or ``null`` takes the field's default); what a
spec cannot say stays in small functions here: the keys with their own reader
(``sampler.initial``, ``slurm.time``, ``slurm.extra``), the priors, and the checks that span
keys (``data.events`` required, the default ``output.run_dir``, ``warmup < iterations``, the
chains' placement, ``signal_seconds`` within ``time``, ``engine.tolerance`` in nats, not an
old relative value).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..priors import Prior, parse_priors
from ..vocab import PARAM_NAMES, tolerance_problem
from .reader import SectionReader, is_number, resolve_path, suggest
from .schema import INITIAL_AUTO, KEYS, SECTION_TYPES, default_warmup, placement_problem
from .slurm_options import OWN_OPTIONS, SBATCH_OPTION_RE, slurm_time_seconds
from .spec import KeySpec, default_of, spec_of

# --------------------------------------------------------------------------- keys with a reader


def _start_values(sec: SectionReader, key: str, spec: KeySpec) -> str | dict[str, float]:
    """``sampler.initial``: ``auto`` (fast start) or parameter name -> starting value (natural
    scale, > 0)."""
    raw = sec.get(key)
    expected = (
        f"{INITIAL_AUTO!r} (find the posterior mode, then start each chain over-dispersed "
        "around it) or a mapping of parameter name -> starting value, e.g. {sigma_t: 5.0}"
    )
    if isinstance(raw, str):
        if raw == INITIAL_AUTO:
            return INITIAL_AUTO
        raise sec.error(key, expected, raw)
    if not isinstance(raw, Mapping):
        raise sec.error(key, expected, raw)
    out: dict[str, float] = {}
    for name, value in raw.items():
        if name not in PARAM_NAMES:
            raise ConfigError(
                f"{sec.where}: unknown parameter '{sec.name}.{key}.{name}'; valid names: "
                f"{', '.join(PARAM_NAMES)}{suggest(name, PARAM_NAMES)}"
            )
        if not is_number(value) or not math.isfinite(value) or value <= 0:
            raise sec.error(f"{key}.{name}", "a number > 0 (natural scale)", value)
        out[name] = float(value)
    return {n: out[n] for n in PARAM_NAMES if n in out}


def _slurm_time(sec: SectionReader, key: str, spec: KeySpec) -> str:
    """``slurm.time``: a quoted Slurm ``--time`` value > 0, stripped."""
    value = sec.get(key)
    expected = (
        'a quoted Slurm time such as "24:00:00", "1-12:00:00" or "90" (minutes), > 0 '
        "(unquoted, YAML reads 24:00:00 as the number 86400)"
    )
    if not isinstance(value, str):
        raise sec.error(key, expected, value)
    try:
        seconds = slurm_time_seconds(value)
    except ValueError:
        raise sec.error(key, expected, value) from None
    if seconds <= 0:
        raise sec.error(key, expected, value)
    return value.strip()


def _sbatch_options(sec: SectionReader, key: str, spec: KeySpec) -> dict[str, str | bool]:
    """``slurm.extra``: sbatch option name (no ``--``) -> value as one line of text, or
    ``True`` for a flag (an option without a value)."""
    raw = sec.get(key)
    if not isinstance(raw, Mapping):
        raise sec.error(key, "a mapping of sbatch option -> value, e.g. {constraint: a100}", raw)
    out: dict[str, str | bool] = {}
    for option, value in raw.items():
        sub = f"{key}.{option}"
        if not isinstance(option, str) or not SBATCH_OPTION_RE.match(option):
            raise ConfigError(
                f"{sec.where}: {sec.name}.{sub}: expected an sbatch long option name without "
                "the leading '--' (letters, digits, '-', '_'), e.g. constraint"
            )
        if option in OWN_OPTIONS:
            raise ConfigError(
                f"{sec.where}: {sec.name}.{sub}: use {sec.name}.{OWN_OPTIONS[option]} instead "
                f"of {sec.name}.{key} for this option"
            )
        if value is True:  # a flag option without a value, e.g. exclusive: true
            out[option] = True
            continue
        if not (isinstance(value, str) or is_number(value)):
            raise sec.error(sub, "a string, a number, or true for a flag without a value", value)
        text = str(value)
        if not text.strip():
            raise sec.error(
                sub, "a value; for an option without a value (a flag) write true", value
            )
        if "\n" in text or "\r" in text:
            raise sec.error(sub, "a single line of text", value)
        sec.printable(sub, text)
        out[option] = text
    return out


_READERS: dict[str, Callable[[SectionReader, str, KeySpec], Any]] = {
    "integer": SectionReader.integer,
    "number": SectionReader.number,
    "choice": SectionReader.choice,
    "string": SectionReader.string,
    "path": SectionReader.path,
    "start_values": _start_values,
    "slurm_time": _slurm_time,
    "sbatch_options": _sbatch_options,
}

# --------------------------------------------------------------------------- cross-key checks


def _check_data(values: dict[str, Any], sec: SectionReader, stem: str) -> None:
    if values["events"] is None:
        raise ConfigError(
            f"{sec.where}: data.events: required; give the events file (CSV or HDF5), absolute "
            "or relative to the YAML file's directory"
        )


def _check_sampler(values: dict[str, Any], sec: SectionReader, stem: str) -> None:
    warmup, iterations = values["warmup"], values["iterations"]
    if warmup is not None and warmup >= iterations:  # the default warm-up always fits
        raise sec.error(
            "warmup",
            f"an integer >= 0 and < sampler.iterations ({iterations}; iterations count the "
            "warm-up too)",
            warmup,
        )
    kept = iterations - (default_warmup(iterations) if warmup is None else warmup)
    if values["thin"] > kept:
        raise sec.error(
            "thin",
            f"an integer >= 1 and <= the iterations after warm-up ({kept}); a larger one keeps "
            "no draw",
            values["thin"],
        )
    if values["kind"] == "tiered" and values["n_cheap"] == 0 and values["jump_prob"] == 0:
        raise sec.error(
            "n_cheap",
            "an integer >= 1 when sampler.jump_prob is 0 (otherwise the tiered sampler never "
            "moves mu0, tau_t and xi0 on their own)",
            0,
        )


def _check_engine(values: dict[str, Any], sec: SectionReader, stem: str) -> None:
    problem = tolerance_problem(values["tolerance"], f"{sec.name}.tolerance")
    if problem is not None:
        raise ConfigError(f"{sec.where}: {problem}")


def _check_chains(values: dict[str, Any], sec: SectionReader, stem: str) -> None:
    problem = placement_problem(
        values["gpus_per_chain"], values["chains_per_node"], values["gpus_per_node"]
    )
    if problem is not None:
        raise ConfigError(f"{sec.where}: chains: {problem}")


def _check_output(values: dict[str, Any], sec: SectionReader, stem: str) -> None:
    if values["run_dir"] is None:
        values["run_dir"] = resolve_path(sec.base_dir, f"runs/{stem}")
    _check_run_dir(values["run_dir"], sec)


def _check_run_dir(run_dir: Path, sec: SectionReader) -> None:
    """The run directory is a directory, or can be made: nothing in its path is a file, and
    the nearest folder that exists is writable when it must be created (only reads, no
    writes; an existing run directory is not required to be writable, so a finished run can
    be read from a read-only copy)."""
    where = f"{sec.where}: output.run_dir {str(run_dir)!r}"
    try:
        if run_dir.exists():
            if not run_dir.is_dir():
                raise ConfigError(
                    f"{where}: is a file, not a directory; choose another output.run_dir"
                )
            return
        parent = run_dir.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
    except OSError as exc:  # a name too long, a loop of links
        raise ConfigError(f"{where}: cannot be used ({exc.strerror or exc})") from None
    if not parent.is_dir():
        raise ConfigError(
            f"{where}: cannot be created: {parent} is a file, not a directory; choose another "
            "output.run_dir"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{where}: cannot be created: the folder {parent} is not writable; choose another "
            "output.run_dir"
        )


def _check_slurm(values: dict[str, Any], sec: SectionReader, stem: str) -> None:
    time_text, signal_seconds = values["time"], values["signal_seconds"]
    limit = slurm_time_seconds(time_text)
    if signal_seconds >= limit:
        raise sec.error(
            "signal_seconds",
            f"fewer seconds than the time limit slurm.time ({time_text!r} = {limit} s)",
            signal_seconds,
        )


#: Checks run on a section's values before its dataclass is made; they may fill in a default.
_CHECKS: dict[str, Callable[[dict[str, Any], SectionReader, str], None]] = {
    "data": _check_data,
    "sampler": _check_sampler,
    "chains": _check_chains,
    "engine": _check_engine,
    "output": _check_output,
    "slurm": _check_slurm,
}

# --------------------------------------------------------------------------- sections


def _priors(raw: Any, where: str, base_dir: Path) -> dict[str, Prior]:
    if raw is not None and isinstance(raw, Mapping):
        SectionReader(raw, "priors", KEYS["priors"], where, base_dir)  # unknown names, suggested
    return parse_priors(raw, where)


def load_section(name: str, raw: Any, *, where: str, base_dir: Path, stem: str) -> Any:
    """Validate one section and fill in its defaults.

    Parameters
    ----------
    name
        The section (one of :data:`~.schema.SECTIONS`).
    raw
        Its value from YAML; ``None`` (absent) takes every default.
    where
        The config's origin, for error messages.
    base_dir
        Directory that relative paths are resolved against (absolute).
    stem
        Names the default run directory, ``runs/<stem>``.

    Returns
    -------
    Any
        The section's dataclass (the priors: parameter name -> :class:`~hawkes_cli.priors.Prior`).

    Raises
    ------
    ConfigError
        For the first problem found, naming ``where`` and the dotted key.
    """
    if name == "priors":
        return _priors(raw, where, base_dir)
    cls = SECTION_TYPES[name]
    sec = SectionReader(raw, name, KEYS[name], where, base_dir)
    values = {}
    for f in dataclasses.fields(cls):
        if sec.get(f.name) is None:
            values[f.name] = default_of(f)
        else:
            spec = spec_of(f)
            values[f.name] = _READERS[spec.kind](sec, f.name, spec)
    check = _CHECKS.get(name)
    if check is not None:
        check(values, sec, stem)
    return cls(**values)
