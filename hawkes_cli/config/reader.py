"""One section's raw YAML mapping, with typed, range-checked getters and the error wording.

The getters read a key whose value is present (not ``None``) against its
:class:`~.spec.KeySpec`; the loader (:mod:`.sections`) fills in defaults for absent keys.
"""

from __future__ import annotations

import difflib
import math
import os
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .spec import KeySpec

_MISSING = object()


def describe(value: Any) -> str:
    """A value and its YAML type, for error messages."""
    if value is None:
        return "null"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return f"{text} (a string)"
        return (
            f"{text} (a string; numbers go unquoted, and YAML reads an exponent as a number "
            "only with a dot and a sign: 1.0e+5, not 1e5)"
        )
    if isinstance(value, int):
        return f"{text} (an integer)"
    if isinstance(value, float):
        return f"{text} (a number)"
    if isinstance(value, Mapping):
        return f"{text} (a mapping)"
    if isinstance(value, (list, tuple)):
        return f"{text} (a list)"
    return f"{text} (a {type(value).__name__})"


def suggest(name: Any, valid: tuple[str, ...] | list[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest valid name, or ``""``."""
    close = difflib.get_close_matches(str(name), list(valid), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def is_int(value: Any) -> bool:
    """An integer that is not a boolean."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An integer or float that is not a boolean."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def control_character(text: str) -> str | None:
    """The first control or invisible formatting character of ``text`` (escape sequences,
    bells, line breaks, bidirectional overrides: Unicode categories Cc and Cf), or ``None``."""
    for ch in text:
        if unicodedata.category(ch) in ("Cc", "Cf"):
            return ch
    return None


def resolve_path(base_dir: Path, value: str) -> Path:
    """``value`` made absolute against ``base_dir`` (``~`` expanded, no file-system access)."""
    p = Path(value).expanduser()
    if not p.is_absolute():
        p = base_dir / p
    return Path(os.path.normpath(p))


class SectionReader:
    """One section's raw mapping; unknown keys are refused on construction.

    Parameters
    ----------
    raw
        The section's value from YAML (``None`` is an empty section).
    name
        The section's name, for error messages.
    keys
        Its valid keys.
    where
        The config's origin (normally the YAML path), for error messages.
    base_dir
        Directory that relative paths are resolved against (absolute).
    """

    def __init__(
        self, raw: Any, name: str, keys: tuple[str, ...], where: str, base_dir: Path
    ) -> None:
        self.name, self.where, self.base_dir = name, where, base_dir
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise ConfigError(
                f"{where}: section {name!r} must be a mapping of key: value, "
                f"got {describe(raw)}; valid keys: {', '.join(keys)}"
            )
        for key in raw:
            if key not in keys:
                raise ConfigError(
                    f"{where}: unknown key '{name}.{key}' in section {name!r}; valid keys: "
                    f"{', '.join(keys)}{suggest(key, keys)}"
                )
        self.raw = raw

    def error(self, key: str, expected: str, value: Any = _MISSING) -> ConfigError:
        """``<where>: <section>.<key>: expected <expected>, got <value>``."""
        got = "" if value is _MISSING else f", got {describe(value)}"
        return ConfigError(f"{self.where}: {self.name}.{key}: expected {expected}{got}")

    def get(self, key: str) -> Any:
        """The raw value, ``None`` when absent or null."""
        return self.raw.get(key)

    def integer(self, key: str, spec: KeySpec) -> int:
        """An integer within ``[spec.minimum, spec.maximum]``."""
        value, lo, hi = self.get(key), spec.minimum, spec.maximum
        if lo is not None and hi is not None:
            expected = f"an integer in [{lo}, {hi}]"
        elif lo is not None:
            expected = f"an integer >= {lo}"
        else:
            expected = "an integer"
        if not is_int(value) or (lo is not None and value < lo) or (hi is not None and value > hi):
            raise self.error(key, expected, value)
        return int(value)

    def number(self, key: str, spec: KeySpec) -> float:
        """A finite number within the spec's ``gt``/``ge``/``lt``/``le`` bounds, as a float."""
        value, gt, ge, lt, le = self.get(key), spec.gt, spec.ge, spec.lt, spec.le
        upper = None  # the closing end of an interval: "1)" or "1]"
        if lt is not None:
            upper = f"{lt:g})"
        elif le is not None:
            upper = f"{le:g}]"
        if upper is not None and (gt is not None or ge is not None):
            lower = f"({gt:g}" if gt is not None else f"[{ge:g}"
            expected = f"a number in {lower}, {upper}"
        elif gt is not None:
            expected = f"a number > {gt:g}"
        elif ge is not None:
            expected = f"a number >= {ge:g}"
        else:
            expected = "a finite number"
        expected += spec.hint
        if not is_number(value) or not math.isfinite(value):
            raise self.error(key, expected, value)
        too_low = (gt is not None and value <= gt) or (ge is not None and value < ge)
        too_high = (lt is not None and value >= lt) or (le is not None and value > le)
        if too_low or too_high:
            raise self.error(key, expected, value)
        return float(value)

    def string(self, key: str, spec: KeySpec) -> str:
        """A non-empty, single-line string."""
        value = self.get(key)
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, f"a non-empty string{spec.hint}", value)
        if "\n" in value or "\r" in value:
            raise self.error(key, "a single line of text", value)
        self.printable(key, value)
        return value

    def printable(self, key: str, text: str) -> None:
        """Refuse a control character (it would reach terminals and batch scripts raw)."""
        ch = control_character(text)
        if ch is not None:
            raise ConfigError(
                f"{self.where}: {self.name}.{key}: contains the control character "
                f"{ch!r} (U+{ord(ch):04X}); remove it (names are printed and go into scripts)"
            )

    def choice(self, key: str, spec: KeySpec) -> Any:
        """One of ``spec.choices`` (strings, or integers; a boolean is not an integer)."""
        value, choices = self.get(key), spec.choices
        if all(isinstance(c, str) for c in choices):
            if isinstance(value, str) and value in choices:
                return value
            hint = suggest(value, choices)
        else:
            if is_int(value) and value in choices:
                return int(value)
            hint = ""
        raise ConfigError(
            f"{self.where}: {self.name}.{key}: expected one of {', '.join(map(str, choices))}, "
            f"got {describe(value)}{hint}"
        )

    def path(self, key: str, spec: KeySpec) -> Path:
        """A file path made absolute against :attr:`base_dir`."""
        value = self.get(key)
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if not isinstance(value, str) or not value.strip():
            raise self.error(
                key, "a file path (absolute, or relative to the YAML file's directory)", value
            )
        self.printable(key, value)
        try:
            return resolve_path(self.base_dir, value)
        except RuntimeError:  # ~user of an unknown user
            raise self.error(
                key, "a path whose '~' can be expanded (no such user?); write it out", value
            ) from None
