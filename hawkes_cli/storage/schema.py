"""The chain file's schema: its version, the per-draw fields, the chain's identity
(:class:`ChainMeta`, stored as the file's root attributes) and the names of its sidecar files."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__

SCHEMA_VERSION = 1
"""Version of the chain-file and sidecar layout; bumped on incompatible changes."""

#: The chain file's per-draw datasets besides the parameters (name, numpy dtype): the schema
#: every writer (the runner) and reader (diagnostics, tests) imports from here.
#: What each iteration proposed and cost: ``pair_passes`` (pair passes, background and
#: trigger, rank 0's likelihood ran in the iteration, a location redraw included),
#: ``n_proposals`` and ``n_accepted`` (log-density calls and accepted moves), ``jump`` (the
#: tiered sampler's mode jump: -1 not proposed, 0 rejected, 1 accepted). A reader takes a file's
#: own field list (files written before these fields stay readable); a writer resumes only a
#: file with exactly these.
DRAW_FIELDS: tuple[tuple[str, str], ...] = (
    ("iteration", "i8"),
    ("loglik", "f8"),
    ("logprior", "f8"),
    ("accepted", "i1"),
    ("warmup", "i1"),
    ("coordinate", "i1"),
    ("scale", "f8"),
    ("pair_passes", "i4"),
    ("n_proposals", "i2"),
    ("n_accepted", "i2"),
    ("jump", "i1"),
)

CHUNK_ROWS = 1024
"""Rows per HDF5 chunk of every ``/draws`` dataset."""

FORMAT_NAME = "hawkes-chain"
"""Value of the root attribute ``format`` that marks a file as a chain file."""

_INT_ATTRS = ("chain_id", "seed", "model", "n_events", "iterations", "warmup", "thin")
_STR_ATTRS = ("config_yaml", "config_sha256", "kernel_sha256", "package_version")


@dataclass(frozen=True)
class ChainMeta:
    """Identity and provenance of one chain, stored as root attributes of its file.

    Parameters
    ----------
    chain_id
        0-based chain index within the run.
    seed
        Sampler seed from the config (the chain's RNG also depends on ``chain_id``).
    model
        Model kind (1 or 2).
    n_events
        Number of events N the likelihood is evaluated on.
    iterations, warmup, thin
        Sampler settings; ``iterations`` counts warm-up too.
    config_yaml, config_sha256
        The resolved config text and its sha256 (hex); a resume with another config is refused.
    kernel_sha256
        sha256 (hex) of the kernel sources used to evaluate the likelihood.
    param_names
        The model parameters, each stored as ``/draws/<name>`` (float64, natural scale).
    fields
        Extra per-draw datasets as ``(name, numpy dtype string)`` pairs, e.g.
        ``(("iteration", "i8"), ("loglik", "f8"), ("warmup", "i1"))``.
    package_version
        Version of the package that wrote the file.
    events_sha256
        :meth:`~hawkes_cli.data.EventData.digest` of the events the chain runs on ("" when
        unknown: files of earlier versions); a resume on other events is refused.
    """

    chain_id: int
    seed: int
    model: int
    n_events: int
    iterations: int
    warmup: int
    thin: int
    config_yaml: str
    config_sha256: str
    kernel_sha256: str
    param_names: tuple[str, ...]
    fields: tuple[tuple[str, str], ...]
    package_version: str = __version__
    events_sha256: str = ""

    def __post_init__(self) -> None:
        names = tuple(str(n) for n in self.param_names)
        fields = tuple((str(n), str(d)) for n, d in self.fields)
        object.__setattr__(self, "param_names", names)
        object.__setattr__(self, "fields", fields)
        if not names:
            raise ValueError("ChainMeta.param_names must not be empty")
        all_names = names + tuple(n for n, _ in fields)
        for name in all_names:
            if not name or "/" in name or name in (".", ".."):
                raise ValueError(f"invalid dataset name {name!r} in ChainMeta")
        duplicates = sorted({n for n in all_names if all_names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate dataset name(s) in ChainMeta: {', '.join(duplicates)}")
        for name, dtype in fields:
            try:
                kind = np.dtype(dtype).kind
            except TypeError as exc:
                raise ValueError(f"field {name!r}: invalid numpy dtype {dtype!r}") from exc
            if kind not in "biuf":
                raise ValueError(f"field {name!r}: dtype {dtype!r} is not numeric")
        if self.chain_id < 0:
            raise ValueError(f"chain_id must be >= 0, got {self.chain_id}")

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        """All ``/draws`` datasets in file order: the parameters (``f8``), then the fields."""
        return tuple((n, "f8") for n in self.param_names) + self.fields

    def to_attrs(self) -> dict[str, Any]:
        """Root attributes as written to the file (lists stored as JSON strings)."""
        attrs: dict[str, Any] = {"format": FORMAT_NAME, "schema_version": SCHEMA_VERSION}
        for key in _INT_ATTRS:
            attrs[key] = int(getattr(self, key))
        for key in _STR_ATTRS:
            attrs[key] = str(getattr(self, key))
        if self.events_sha256:
            attrs["events_sha256"] = self.events_sha256
        attrs["param_names"] = json.dumps(list(self.param_names))
        attrs["fields"] = json.dumps([list(f) for f in self.fields])
        return attrs

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> ChainMeta:
        """The metadata of a file's decoded root attributes (``param_names`` and ``fields``
        decoded from their JSON; :func:`~hawkes_cli.storage.read_chain` reads them so).

        Raises
        ------
        ValueError
            An attribute is missing or an integer one is not an integer, or the values do not
            describe a chain (see the class).
        """
        missing = [key for key in (*_INT_ATTRS, *_STR_ATTRS) if key not in attrs]
        if missing:
            raise ValueError(f"root attribute(s) {', '.join(missing)} missing")
        for key in _INT_ATTRS:
            value = attrs[key]
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"root attribute {key!r} is {value!r}, not an integer")
        kwargs: dict[str, Any] = {key: attrs[key] for key in _INT_ATTRS}
        kwargs.update({key: str(attrs[key]) for key in _STR_ATTRS})
        kwargs["events_sha256"] = str(attrs.get("events_sha256", ""))
        kwargs["param_names"] = tuple(attrs["param_names"])
        kwargs["fields"] = tuple(tuple(f) for f in attrs["fields"])
        return cls(**kwargs)


def sidecar_path(chain_path: Path) -> Path:
    """Sidecar checkpoint of a chain file: ``chain-00.h5`` -> ``chain-00.ckpt.json``."""
    return Path(chain_path).with_suffix(".ckpt.json")


def lock_path(chain_path: Path) -> Path:
    """Advisory lock file of a chain file: ``chain-00.h5`` -> ``chain-00.lock``."""
    return Path(chain_path).with_suffix(".lock")


# --------------------------------------------------------------------------- low-level I/O
