"""The domain's names and defaults, in one place.

Every module that validates or offers one of these choices (config, engine, sampler, kernels,
the CLI's ``click.Choice`` lists) imports it from here, so a name or a default is written once.
This module imports nothing of the package.
"""

from __future__ import annotations

#: The five model parameters, in the order of every vector, table and chain file (DESIGN 2).
PARAM_NAMES: tuple[str, ...] = ("mu0", "tau_t", "xi0", "sigma_x", "sigma_t")

#: Model kinds: 1 constant spatial lengthscale, 2 lengthscale ``sigma_x / sqrt(density)``.
MODELS: tuple[int, ...] = (1, 2)

#: MCMC sampler kinds (``sampler.kind``): ``univariate`` and ``block`` reproduce the paper,
#: ``tiered`` (the default) spends one trigger pass per iteration and many cheap moves (no
#: trigger pass).
SAMPLER_KINDS: tuple[str, ...] = ("univariate", "block", "tiered")
DEFAULT_SAMPLER = "tiered"

#: Likelihood engines (``engine.backend`` / ``loglik --engine``); ``opencl`` is the default of
#: MCMC runs, ``reference`` is numpy float64 straight from the formulas.
ENGINES: tuple[str, ...] = ("opencl", "reference")
DEFAULT_ENGINE = "opencl"

#: Working precisions of the OpenCL kernels (``engine.precision``); the first is the default.
PRECISIONS: tuple[str, ...] = ("float32", "float64")
DEFAULT_PRECISION = PRECISIONS[0]

#: Background forms (``engine.background``): ``auto`` once per distinct time (exact), ``pairs``
#: the plain pair sum over all events (to check the former).
BACKGROUNDS: tuple[str, ...] = ("auto", "pairs")
DEFAULT_BACKGROUND = BACKGROUNDS[0]

#: Default ``engine.tolerance`` of MCMC runs: the truncated trigger with a log-likelihood within
#: 1e-6 relative of the exact pair sum at every evaluation. 0 asks for the exact pair sum, which
#: is the default of ``hawkes-run loglik`` (a checking tool) and of :func:`make_likelihood`.
DEFAULT_TOLERANCE = 1e-6
EXACT_TOLERANCE = 0.0

#: Set by ``hawkes-run local`` to its pid in each chain's environment: the chain stops (commits
#: and exits) when its parent is no longer that process.
LAUNCHER_PID_ENV = "HAWKES_LAUNCHER_PID"

#: Exit code of a chain (or launcher) that stopped on request after committing its draws
#: (SIGTERM, SIGINT, SIGUSR1): EX_TEMPFAIL, "run again to resume".
EXIT_STOPPED = 75

# --------------------------------------------------------------------------- hawkes-prep

#: Counts of the HHS facility file that become cases (``hawkes-prep hhs --count``): new
#: confirmed admissions (the default) or the census column behind the paper's double counting.
COUNTS: tuple[str, ...] = ("admissions", "census")
#: Study regions (``--region``): the 50 states and DC, the contiguous US, every polygon.
REGION_NAMES: tuple[str, ...] = ("states", "conus", "all")
#: Where a case is put in its county (``--locations``): uniformly inside, or at the centroid.
LOCATIONS: tuple[str, ...] = ("polygon", "centroid")
#: CSV readers of the HHS file (``--reader``): pyarrow if installed, pyarrow, stdlib csv.
CSV_READERS: tuple[str, ...] = ("auto", "pyarrow", "csv")
#: Units of a polygon file's land-area field (``hawkes-prep counties``): Census ALAND square
#: metres, or CENSUSAREA square miles.
LAND_UNITS: tuple[str, ...] = ("m2", "sqmi")

# --------------------------------------------------------------------------- Slurm

#: How a Slurm node starts a chain's ranks (``submit --launcher``): srun inside an allocation,
#: mpiexec (the mpich wheel's Hydra), or auto (srun when there is one).
LAUNCHERS: tuple[str, ...] = ("auto", "srun", "mpiexec")
