"""YAML file or text, or a parsed mapping -> :class:`~.schema.Config`."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError
from .reader import describe, suggest
from .schema import SECTIONS, Config, stopping_problem
from .sections import load_section

log = logging.getLogger(__name__)

#: The resolved config inside a run directory (``RUN_DIR/config.yaml``).
CONFIG_NAME = "config.yaml"

_HEADER = re.compile(r"^# sha256: ([0-9a-f]{64})\s*$")


def resolved_text(config: Config) -> str:
    """A run directory's ``config.yaml``: a ``# sha256:`` header line, then the resolved YAML."""
    return f"# sha256: {config.sha256}\n" + config.to_yaml()


def header_sha256(first_line: str) -> str | None:
    """The sha256 a ``config.yaml`` header line records (None: not such a line)."""
    m = _HEADER.match(first_line)
    return m.group(1) if m else None


def _same_place(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.normpath(a) == os.path.normpath(b)


def _relocated(config: Config, file: Path, text: str) -> Config:
    """A run directory's own config read from where the directory is now.

    ``RUN_DIR/config.yaml`` (its header's sha256 that of its content) names the directory the
    run was created in. When the directory was moved or copied, the run is where the file is:
    ``output.run_dir`` becomes the file's folder, and :attr:`Config.created_in` keeps the old
    path, so the run's identity (:attr:`Config.sha256`) does not change. Any other file is
    returned as it is.
    """
    if file.name != CONFIG_NAME or header_sha256(text.partition("\n")[0]) != config.sha256:
        return config
    here, written = file.parent, Path(config.output.run_dir)
    if _same_place(here, written):
        return config
    log.info("run directory %s was created as %s (moved or copied): using %s", here, written, here)
    output = dataclasses.replace(config.output, run_dir=here)
    return dataclasses.replace(config, output=output, created_in=written)


def config_from_mapping(
    mapping: Mapping[str, Any],
    *,
    base_dir: Path,
    where: str,
    source: Path | None = None,
) -> Config:
    """Validate a parsed config and fill in every default.

    Parameters
    ----------
    mapping
        The top-level mapping (sections -> mappings), as read from YAML.
    base_dir
        Directory that relative paths are resolved against (made absolute against the
        current directory if it is relative).
    where
        Name of the config's origin for error messages, normally the YAML path.
    source
        The YAML file, recorded in :attr:`Config.source`; its stem names the default run
        directory (``runs/<stem>``). Without it, the stem of ``where`` is used.

    Returns
    -------
    Config

    Raises
    ------
    ConfigError
        For the first problem found, naming ``where`` and the dotted key.
    """
    if not isinstance(mapping, Mapping):
        raise ConfigError(
            f"{where}: the top level must be a mapping of sections ({', '.join(SECTIONS)}), "
            f"got {describe(mapping)}"
        )
    for name in mapping:
        if name not in SECTIONS:
            raise ConfigError(
                f"{where}: unknown section {name!r}; valid sections: {', '.join(SECTIONS)}"
                f"{suggest(name, SECTIONS)}"
            )
    base_dir = Path(base_dir).expanduser().absolute()
    stem = source.stem if source is not None else (Path(where).stem or "run")
    if "data" not in mapping or mapping["data"] is None:
        raise ConfigError(
            f"{where}: data.events: required; add a 'data' section with the events file, e.g. "
            "data: {events: cases.h5}"
        )
    sections = {
        name: load_section(name, mapping.get(name), where=where, base_dir=base_dir, stem=stem)
        for name in SECTIONS
    }
    problem = stopping_problem(sections["sampler"].stop_when, sections["chains"].count)
    if problem is not None:
        raise ConfigError(f"{where}: {problem}")
    return Config(**sections, source=source)


#: Largest config file read (bytes); a config is a few kilobytes.
MAX_CONFIG_BYTES = 1 << 20
#: Deepest nesting of lists and mappings in a config (the schema needs 3).
MAX_CONFIG_DEPTH = 20


class _RefusedYAML(yaml.MarkedYAMLError):
    """YAML that is valid but not accepted in a config (an alias, too deep)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects a key repeated in one mapping, aliases (``*name``: a
    few lines of nested aliases expand to billions of nodes) and nesting deeper than
    :data:`MAX_CONFIG_DEPTH` (Python's recursion limit)."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _RefusedYAML(
                None,
                None,
                f"aliases (*{event.anchor}) are not allowed in a config; write the value out",
                event.start_mark,
            )
        self._depth += 1
        try:
            if self._depth > MAX_CONFIG_DEPTH:
                raise _RefusedYAML(
                    None,
                    None,
                    f"nested more than {MAX_CONFIG_DEPTH} levels deep; a config is sections "
                    "of key: value",
                    self.peek_event().start_mark,
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            key = key_node.value
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def config_from_yaml_text(
    text: str, *, base_dir: Path, where: str, source: Path | None = None
) -> Config:
    """Parse and validate YAML text; reads back :meth:`Config.to_yaml` to an equal config.

    Parameters
    ----------
    text
        The YAML document.
    base_dir, where, source
        As in :func:`config_from_mapping`.

    Raises
    ------
    ConfigError
        On a YAML syntax error (with its line and column), an empty document, or any
        validation failure.
    """
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{where}: {len(text):,} characters, more than a config can have "
            f"({MAX_CONFIG_BYTES:,}); is this the right file?"
        )
    try:
        mapping = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except _RefusedYAML as exc:
        mark = exc.problem_mark
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise ConfigError(f"{where}: {exc.problem}{at}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(f"{where}: YAML syntax error{at}: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: YAML syntax error: {exc}") from None
    if mapping is None:
        raise ConfigError(
            f"{where}: the config is empty; it needs at least data.events, e.g. "
            "data: {events: cases.h5}"
        )
    return config_from_mapping(mapping, base_dir=base_dir, where=where, source=source)


def load_config(path: str | Path) -> Config:
    """Read, validate and resolve a YAML config file.

    Parameters
    ----------
    path
        The YAML file. Relative paths inside it are resolved against its directory.

    Returns
    -------
    Config
        With :attr:`Config.source` set to the file's absolute path. A run directory's own
        ``config.yaml`` read from a moved or copied directory names that directory as
        ``output.run_dir`` (see :attr:`Config.created_in`).

    Raises
    ------
    ConfigError
        If the file is missing or unreadable, or its content is invalid.
    """
    where = str(path)
    try:
        file = Path(path).expanduser().absolute()
    except RuntimeError:
        raise ConfigError(
            f"{where}: cannot expand '~' (no such user, or no home directory); write the path "
            "out in full"
        ) from None
    try:
        file.stat()
    except FileNotFoundError:
        raise ConfigError(f"{where}: config file not found (looked for {file})") from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot use this path ({exc.strerror or exc})") from None
    if file.is_dir():
        raise ConfigError(f"{where}: is a directory, expected a YAML config file")
    try:
        if file.stat().st_size > 4 * MAX_CONFIG_BYTES:  # refuse before reading it all
            raise ConfigError(
                f"{where}: {file.stat().st_size:,} bytes, more than a config can have "
                f"({MAX_CONFIG_BYTES:,}); is this the right file?"
            )
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not a UTF-8 text file ({exc.reason})") from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read config file: {exc.strerror or exc}") from None
    config = config_from_yaml_text(text, base_dir=file.parent, where=where, source=file)
    config = _relocated(config, file, text)
    log.debug("loaded config %s (sha256 %s)", file, config.sha256)
    return config
