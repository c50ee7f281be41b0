"""YAML file or text, or a parsed mapping -> :class:`~.schema.Config`."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError
from .reader import describe, suggest
from .schema import SECTIONS, Config
from .sections import load_section

log = logging.getLogger(__name__)


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
    return Config(**sections, source=source)


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects a key repeated in one mapping."""

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
    try:
        mapping = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
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
        With :attr:`Config.source` set to the file's absolute path.

    Raises
    ------
    ConfigError
        If the file is missing or unreadable, or its content is invalid.
    """
    where = str(path)
    file = Path(path).expanduser().absolute()
    if not file.exists():
        raise ConfigError(f"{where}: config file not found (looked for {file})")
    if file.is_dir():
        raise ConfigError(f"{where}: is a directory, expected a YAML config file")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not a UTF-8 text file ({exc.reason})") from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read config file: {exc.strerror or exc}") from None
    config = config_from_yaml_text(text, base_dir=file.parent, where=where, source=file)
    log.debug("loaded config %s (sha256 %s)", file, config.sha256)
    return config
