"""Exports of a report: JSON, CSV, arviz ``InferenceData`` and netCDF.

arviz is imported inside :func:`to_inference_data`, so importing this module is cheap. The
netCDF file is built in memory and written through :mod:`hawkes_cli.atomic`: readers see the old
file or the new one, and a full disk is one error, never a failure inside HDF5.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import logging
import math
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import atomic
from ..errors import HawkesError, UsageError, io_cause
from .api import load_draws
from .options import DiagnoseOptions
from .records import STAT_FIELDS, Draws, Report
from .verdicts import ESS_WARN, RHAT_FAIL, RHAT_WARN

if TYPE_CHECKING:  # pragma: no cover
    import arviz

__all__ = ["draws_of", "to_csv", "to_inference_data", "to_json", "write_netcdf"]

log = logging.getLogger(__package__)

_CSV_STATS = ("median", "q2.5", "q97.5", "mean", "sd", "rhat", "ess_bulk", "ess_tail", "mcse_mean")

Source = Report | Draws | Path | str
"""What the exports accept: a report, its draws, or a run directory."""


# --------------------------------------------------------------------------- JSON and CSV


def _clean(x: Any) -> Any:
    """JSON-safe value: non-finite floats become None."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def _options_json(o: DiagnoseOptions) -> dict[str, Any]:
    return {
        "burn": o.burn,
        "thin": o.thin,
        "counties": list(o.counties),
        "strict": o.strict,
        "events": None if o.events is None else str(o.events),
    }


def to_json(report: Report) -> dict[str, Any]:
    """The report as a JSON-serialisable dict (non-finite numbers become ``null``).

    Keys: ``run_dir``, ``config_sha256``, ``model``, ``time_unit``, ``status``, ``options``,
    ``burn``, ``common_draws``, ``chains``, ``parameters``, ``derived``, ``counties``,
    ``verdicts``, ``thresholds``.
    """
    from .. import __version__

    out = {
        "hawkes_version": __version__,
        "run_dir": str(report.run_dir),
        "config_sha256": report.config_sha256,
        "model": report.model,
        "time_unit": report.time_unit,
        "status": report.status,
        "options": _options_json(report.options),
        "burn": report.burn_description,
        "common_draws": report.common_draws,
        "chains": [c.as_dict() for c in report.chains],
        "parameters": [r.as_dict() for r in report.parameters],
        "derived": [r.as_dict() for r in report.derived],
        "counties": [c.as_dict() for c in report.counties],
        "verdicts": [v.as_dict() for v in report.verdicts],
        "thresholds": {"rhat_warn": RHAT_WARN, "rhat_fail": RHAT_FAIL, "ess_warn": ESS_WARN},
    }
    return _clean(out)


def to_csv(report: Report) -> str:
    """One CSV row per parameter and derived quantity (full float precision, ``nan`` kept).

    Columns: ``name, label, kind, unit, median, q2.5, q97.5, mean, sd, rhat, ess_bulk,
    ess_tail, mcse_mean``.
    """
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["name", "label", "kind", "unit", *_CSV_STATS])
    for r in report.rows:
        writer.writerow(
            [r.name, r.label, r.kind, r.unit] + [repr(float(getattr(r, k))) for k in STAT_FIELDS]
        )
    return buf.getvalue()


# --------------------------------------------------------------------------- arviz


def draws_of(source: Source, options: DiagnoseOptions | None) -> tuple[Draws, DiagnoseOptions]:
    """The draws and options of a report, of draws (with ``options``) or of a run directory."""
    if isinstance(source, Report):
        return source.draws, source.options
    if isinstance(source, Draws):
        return source, options or DiagnoseOptions()
    opts = options or DiagnoseOptions()
    return load_draws(Path(source), opts), opts


def _sample_stats(draws: Draws) -> dict[str, np.ndarray]:
    """``iteration``, the sampler fields, and ``lp``, over the common prefix."""
    n = draws.common_draws
    stats: dict[str, np.ndarray] = {
        "iteration": np.stack([it[:n] for it in draws.iterations]).astype(np.int64)
    }
    for key, arrays in draws.stats.items():
        stats[key] = np.stack([a[:n] for a in arrays])
    if "accepted" in stats:
        stats["accepted"] = stats["accepted"] != 0
    if "n_accepted" in stats and "n_proposals" in stats:  # ArviZ's name: accepted / proposed
        proposed = stats.pop("n_proposals")
        stats["acceptance_rate"] = stats.pop("n_accepted") / np.maximum(proposed, 1)
    if "loglik" in stats and "logprior" in stats:
        stats["lp"] = stats["loglik"] + stats["logprior"]
    return stats


def _warmup(draws: Draws, opts: DiagnoseOptions) -> dict[str, dict[str, np.ndarray]]:
    """``warmup_posterior`` and ``warmup_sample_stats`` of the run (the draws before each
    used chain's first retained one, over their common prefix); empty when the retained draws
    are not the post-warm-up ones (``--burn`` given) or there is no warm-up."""
    if opts.burn is not None:
        return {}
    try:
        every = load_draws(draws.run_dir, dataclasses.replace(opts, burn=0))
    except HawkesError:
        return {}
    where = {cid: i for i, cid in enumerate(every.chain_ids)}
    if not all(cid in where for cid in draws.chain_ids):
        return {}
    rows = [where[cid] for cid in draws.chain_ids]
    masks = [every.iterations[i] < it[0] for i, it in zip(rows, draws.iterations, strict=True)]
    n = min(int(m.sum()) for m in masks)
    if n == 0:
        return {}

    def cut(arrays: tuple[np.ndarray, ...]) -> np.ndarray:
        return np.stack([arrays[i][m][:n] for i, m in zip(rows, masks, strict=True)])

    posterior = {name: cut(every.variables[name]) for name in draws.variables}
    stats = {"iteration": cut(every.iterations).astype(np.int64)}
    stats.update({key: cut(arrays) for key, arrays in every.stats.items()})
    return {"warmup_posterior": posterior, "warmup_sample_stats": stats}


def _observed(draws: Draws) -> dict[str, np.ndarray]:
    """The events the chains ran on (``time``, ``x``, ``y``, and ``density`` for model 2), as
    ``observed_data``; empty when the run's events file cannot be read."""
    from ..data import load_events
    from ..rundir import RunDir

    try:
        data = load_events(RunDir(draws.run_dir).load_config().data.events)
    except HawkesError:
        return {}
    out = {"time": data.time, "x": data.x, "y": data.y}
    if data.density is not None:
        out["density"] = data.density
    return {name: np.asarray(v) for name, v in out.items()}


def _attrs(draws: Draws, opts: DiagnoseOptions) -> dict[str, Any]:
    return {
        "run_dir": str(draws.run_dir),
        "config_sha256": draws.config_sha256,
        "model": int(draws.model),
        "time_unit": draws.time_unit,
        "burn": -1 if opts.burn is None else int(opts.burn),
        "burn_is_warmup": int(opts.burn is None),
        "thin": int(opts.thin),
        "created_by": "hawkes-diagnose",
    }


def to_inference_data(
    source: Source, options: DiagnoseOptions | None = None
) -> arviz.InferenceData:
    """The retained draws as an arviz ``InferenceData``.

    Parameters
    ----------
    source
        A run directory (read with ``options``), or a :class:`Report` / :class:`Draws`.
    options
        Burn-in, thinning, counties when ``source`` is a directory.

    Returns
    -------
    arviz.InferenceData
        ``posterior``: every parameter and derived quantity (``xi0_frac``, county lengthscales;
        attribute ``kind``: ``parameter`` or ``derived``), dims ``(chain, draw)``, the chain
        coordinate holding the chain ids; chains are cut to the common prefix (arviz needs equal
        lengths). A parameter in another unit (``tau_t_weeks``) is not a quantity of its own
        and is left out. ``sample_stats``: ``lp`` (log posterior), ``loglik``, ``logprior``,
        ``accepted`` (any move accepted), ``acceptance_rate`` (moves accepted / proposed in the
        iteration) and ``iteration`` where the chain files have them. ``warmup_posterior`` and
        ``warmup_sample_stats``: the same for the warm-up draws (when the retained draws are
        the post-warm-up ones). ``observed_data``: the events (``time``, ``x``, ``y``,
        ``density`` for model 2; dim ``event``) when the run's events file can be read.
        Variables carry ``units`` and ``label`` attributes; the groups carry the run's
        ``config_sha256``, ``model``, ``time_unit``, ``burn`` and ``thin``.
    """
    import arviz as az

    draws, opts = draws_of(source, options)
    attrs = _attrs(draws, opts)
    warmup = _warmup(draws, opts)
    observed = _observed(draws)
    copies = {n for n, (param, _) in draws.scale_of.items() if draws.labels[n] == param}
    names = [name for name in draws.variables if name not in copies]
    with warnings.catch_warnings():  # "more chains than draws": the verdicts say it already
        warnings.filterwarnings("ignore", "More chains", UserWarning)
        idata = az.from_dict(
            posterior={name: draws.matrix(name) for name in names},
            sample_stats=_sample_stats(draws),
            observed_data=observed or None,
            dims={name: ["event"] for name in observed},
            coords={"chain": list(draws.chain_ids)},  # draw: 0.. per group (warm-up apart)
            attrs=attrs,
            save_warmup=bool(warmup),
            **warmup,
        )
    for group in idata.groups():
        idata[group].attrs.update(attrs)
    for name in names:
        idata.posterior[name].attrs["units"] = draws.units[name]
        idata.posterior[name].attrs["label"] = draws.labels[name]
        idata.posterior[name].attrs["kind"] = (
            "parameter" if name in draws.param_names else "derived"
        )
    return idata


def _netcdf_image(idata: arviz.InferenceData) -> bytes:
    """The netCDF-4 file of ``idata`` as ``idata.to_netcdf`` writes it (root attributes, one
    group per arviz group with its attributes, numbers zlib-compressed), built in memory
    (xarray's ``DataTree`` through h5netcdf): written with plain writes
    (:func:`hawkes_cli.atomic.write_bytes`), a full disk never fails inside HDF5."""
    from arviz.data.inference_data import _compressible_dtype

    try:
        tree = idata.to_datatree()
    except ImportError:  # xarray before 2024.11 has no DataTree: arviz writes a scratch file
        with tempfile.TemporaryDirectory(prefix="hawkes-netcdf-") as scratch:
            idata.to_netcdf(str(Path(scratch) / "idata.nc"))
            return (Path(scratch) / "idata.nc").read_bytes()
    tree.attrs = dict(idata.attrs)
    encoding = {
        f"/{group}": {
            name: {"zlib": True}
            for name, var in ds.variables.items()
            if _compressible_dtype(var.dtype)
        }
        for group, ds in idata.items()
    }
    return bytes(tree.to_netcdf(None, engine="h5netcdf", encoding=encoding))


def write_netcdf(
    source: Source,
    path: Path,
    options: DiagnoseOptions | None = None,
) -> Path:
    """Write :func:`to_inference_data` to a netCDF file (``arviz.from_netcdf`` reads it back).

    Parameters
    ----------
    source
        A :class:`Report`, :class:`Draws` or a run directory (read with ``options``).
    path
        Target file (``.nc``); replaced atomically if it exists. Its folder must exist.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    UsageError
        The file cannot be written (a full disk: how much it needs).
    """
    path = Path(path)
    image = _netcdf_image(to_inference_data(source, options))
    try:
        atomic.write_bytes(path, image, make_parents=True)
    except OSError as exc:
        raise UsageError(
            f"cannot write the netCDF file {path}: {io_cause(exc)}{atomic.room_hint(exc)}; "
            "free some space or choose another path"
        ) from exc
    log.info("wrote %s", path)
    return path
