"""``hawkes-diagnose RUN_DIR --gof DIR``: goodness of fit of a run, as files in DIR.

A pipeline: :func:`~.read.read_run` reads the run into a :class:`~.record.GofRun`, then each
step of :data:`STEPS` takes that record and returns it with its results and files added:

1. ``locate`` (:mod:`.read`): the county polygons that describe the events (``--gof-counties``,
   the config's ``data.counties``, else the synthetic grid of simulated data, else the Census
   counties for lon/lat data) and each event's polygon;
2. ``branching`` (:mod:`.branching`): branching probabilities over ``draws`` draws spread evenly
   over the retained ones, one pair pass each, with the chain's own likelihood (its engine,
   precision, truncation tolerance, window);
3. ``write_events``: ``events.csv`` (and ``events.h5`` for large N), ``weekly.csv``;
4. ``temporal`` (:mod:`.residuals`): temporal residuals at the posterior mean: ``gof.json``'s
   KS test, ``qq.png``, ``counts.png``;
5. ``counties`` (:mod:`.counties`, :mod:`.lengthscales`): county residuals at the posterior
   mean: ``counties.csv``; county lengthscales (miles for lon/lat data, else coordinate
   units): ``lengthscales.csv``; the polygons with both: ``counties.gpkg``;
6. ``maps`` (:mod:`.maps`, :mod:`.mapping`): ``map_cases.png``, ``map_pearson.png``,
   ``map_triggered.png``, ``map_lengthscale.png`` and, with ``date``, ``map_intensity.png``;
   without polygons (steps 5 and 6 skipped) ``intensity``: ``map_intensity.png`` on the
   study rectangle, with ``date``.

Residuals use one parameter value, the posterior mean of the retained draws (the plug-in fit),
so that their reference laws (Exponential(1) gaps, Poisson counts) hold.
"""

from __future__ import annotations

import time as clock
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import atomic
from ..errors import StorageError, UsageError, io_cause
from . import steps
from .maps import maps, rectangle_map
from .read import read_run
from .record import DEFAULT_DRAWS, GofOptions, GofRun

__all__ = ["DEFAULT_DRAWS", "GOF_FILES", "STEPS", "GofOptions", "run_gof"]

#: Every file name ``--gof`` writes: the only names an existing output folder may hold.
GOF_FILES = frozenset(
    {
        "events.csv", "events.h5", "weekly.csv", "qq.png", "counts.png", "counties.csv",
        "counties.gpkg",
        "lengthscales.csv", "map_cases.png", "map_pearson.png", "map_triggered.png",
        "map_lengthscale.png", "map_intensity.png", "gof.json",
    }
)  # fmt: skip


def _always(run: GofRun) -> bool:
    return True


def _has_polygons(run: GofRun) -> bool:
    return run.polygons is not None


def _draws_maps(run: GofRun) -> bool:
    return run.polygons is not None and run.opts.maps


def _draws_rectangle_map(run: GofRun) -> bool:
    return run.polygons is None and run.opts.maps and run.opts.date is not None


#: The steps after reading the run: (name in ``gof.json``'s ``seconds``, step, whether it
#: applies to the record so far).
STEPS: tuple[tuple[str, Callable[[GofRun], GofRun], Callable[[GofRun], bool]], ...] = (
    ("locate", steps.locate, _always),
    ("branching", steps.branching, _always),
    ("write_events", steps.write_events, _always),
    ("temporal", steps.temporal, _always),
    ("counties", steps.counties, _has_polygons),
    ("maps", maps, _draws_maps),
    ("intensity", rectangle_map, _draws_rectangle_map),
)


def run_gof(run_dir: Path, out_dir: Path, opts: GofOptions | None = None) -> dict[str, Any]:
    """Compute the goodness-of-fit files of a run (module docstring) into ``out_dir``.

    The files are written into a fresh hidden folder beside ``out_dir`` and swapped in whole
    at the end (:func:`hawkes_cli.atomic.replacing_folder`): an interrupted run leaves the
    previous set as it was, never a mix of two.

    Returns
    -------
    dict
        What ``gof.json`` holds (KS statistics, counts, timings, files written).

    Raises
    ------
    UsageError, ConfigError, EventsError, StorageError
        Not a run directory, no draws, unreadable events or polygons, a bad option, an
        ``out_dir`` holding files ``--gof`` does not write, or a full disk.
    """
    try:
        with atomic.replacing_folder(out_dir, owns=GOF_FILES.__contains__) as tmp:
            return _write_gof(Path(run_dir), tmp, opts)
    except atomic.ForeignFilesError as exc:
        raise UsageError(
            f"--gof {out_dir}: the folder holds files --gof does not write "
            f"({', '.join(exc.names[:5])}); give a new or empty folder (nothing written)"
        ) from None
    except NotADirectoryError:
        raise UsageError(f"--gof {out_dir}: is a file, not a folder") from None
    except OSError as exc:
        if exc.errno not in atomic.NO_SPACE:
            raise
        raise StorageError(
            f"--gof {out_dir}: cannot write its files: {io_cause(exc)}; nothing was written "
            "(the folder keeps what it held): free some space and run again"
        ) from exc


def _write_gof(run_dir: Path, out_dir: Path, opts: GofOptions | None) -> dict[str, Any]:
    """:func:`run_gof` into ``out_dir`` (a fresh folder): read the run, run :data:`STEPS`,
    write ``gof.json``."""
    opts = (opts or GofOptions()).checked()
    t0 = clock.perf_counter()
    run = read_run(Path(run_dir), Path(out_dir), opts)
    seconds = {"read": clock.perf_counter() - t0}
    run.out_dir.mkdir(parents=True, exist_ok=True)
    for name, step, applies in STEPS:
        if applies(run):
            t1 = clock.perf_counter()
            run = step(run)
            seconds[name] = clock.perf_counter() - t1
    seconds["total"] = clock.perf_counter() - t0
    summary = {
        **run.summary,
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "files": [p.name for p in run.written] + ["gof.json"],
    }
    atomic.write_json(run.out_dir / "gof.json", summary)
    return summary
