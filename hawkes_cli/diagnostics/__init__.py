"""Convergence diagnostics, posterior tables, exports and plots of a run's chain files.

This is the engine of ``hawkes-diagnose`` (DESIGN sections 4, 5 and 9). It reads every chain
file of a run directory (found by :class:`hawkes_cli.rundir.RunDir`), finished or still being
written (only committed draws, through :func:`hawkes_cli.storage.read_chain`), drops the
burn-in, optionally thins, and computes per parameter, as R's ``posterior`` package does (the
reference implementation; :mod:`.stats` is a checked port):

- rank-normalised split R-hat (``posterior::rhat``),
- bulk and tail ESS (``ess_bulk``, ``ess_tail``),
- the Monte Carlo standard error of the mean (``mcse_mean``),
- posterior median, equal-tailed 95% interval (2.5% and 97.5% quantiles), mean and sd;

plus derived quantities: ``xi0/(xi0+mu0)``, ``tau_t`` and ``sigma_t`` in weeks (when times are in
days) and, per requested county, the effective spatial lengthscale in miles.

Nothing here prints: :func:`diagnose` returns a :class:`Report`, and :func:`format_table`,
:func:`to_json`, :func:`to_csv` render it; :func:`write_netcdf` and :func:`write_plots` write
files. arviz, matplotlib and h5py are imported inside the functions that need them, so importing
this package is cheap.

Modules, each importing only those above it:

- :mod:`.options` -- :class:`DiagnoseOptions`;
- :mod:`.records` -- the frozen records: rows, verdicts, chains, counties, draws, the report;
- :mod:`.derived` -- units, ``xi0/(xi0+mu0)``, weeks, county lengthscales in miles;
- :mod:`.read` -- chain files, burn-in/thinning, same-config check, the run's config and events;
- :mod:`.stats` -- R-hat, ESS, MCSE (R's posterior) and summaries, pure functions over arrays;
- :mod:`.verdicts` -- thresholds, chain and row verdicts, :func:`exit_code`;
- :mod:`.api` -- :func:`load_draws` and :func:`diagnose`;
- :mod:`.render` -- :func:`format_table`;
- :mod:`.export` -- :func:`to_json`, :func:`to_csv`, :func:`to_inference_data`,
  :func:`write_netcdf`;
- :mod:`.plots` -- :func:`write_plots`.

Burn-in and thinning
--------------------
``burn=None`` (the default) drops the draws flagged as warm-up in the chain file (the ``warmup``
field; files without it drop ``iteration < warmup`` from the root attributes). ``burn=B`` drops
every draw whose ``iteration`` is below ``B`` (iterations count from 0 and include warm-up, as in
the config), whatever the warm-up flag says; ``burn=0`` keeps the warm-up draws. ``thin=k`` then
keeps the 1st, (k+1)-th, ... of the remaining draws of each chain.

Chains of unequal length
------------------------
Chains still running differ in length. Medians, intervals, means and sds use every retained draw
of every chain; R-hat, ESS and MCSE need a rectangular (chain, draw) array and use the first
``L`` retained draws of each chain, ``L`` being the shortest chain's count (the *common prefix*),
which the report states. Chains without any retained draw (still in warm-up) are left out and
named.

Non-finite draws
----------------
A NaN or inf draw fails the run (the verdict names the chain, the parameter and the first
iteration); R-hat, ESS and MCSE of that quantity are NaN, its median, interval, mean and sd are
taken over the finite draws, and the plots leave it out.
"""

from __future__ import annotations

from .api import diagnose, load_draws
from .derived import DAYS_PER_WEEK, MILES_PER_DEGREE, lengthscale_miles
from .export import to_csv, to_inference_data, to_json, write_netcdf
from .options import DiagnoseOptions
from .plots import write_plots
from .read import find_chain_files
from .records import LEVELS, ChainSummary, County, Draws, Report, SummaryRow, Verdict
from .render import format_table
from .stats import MIN_DRAWS
from .verdicts import (
    ESS_WARN,
    RHAT_FAIL,
    RHAT_WARN,
    SHORT_CHAIN_FRACTION,
    STRICT_FAILURE_EXIT_CODE,
    exit_code,
)

__all__ = [
    "DAYS_PER_WEEK",
    "ESS_WARN",
    "LEVELS",
    "MILES_PER_DEGREE",
    "MIN_DRAWS",
    "RHAT_FAIL",
    "RHAT_WARN",
    "SHORT_CHAIN_FRACTION",
    "STRICT_FAILURE_EXIT_CODE",
    "ChainSummary",
    "County",
    "DiagnoseOptions",
    "Draws",
    "Report",
    "SummaryRow",
    "Verdict",
    "diagnose",
    "exit_code",
    "find_chain_files",
    "format_table",
    "lengthscale_miles",
    "load_draws",
    "to_csv",
    "to_inference_data",
    "to_json",
    "write_netcdf",
    "write_plots",
]
