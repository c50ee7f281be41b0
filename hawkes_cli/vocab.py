"""The domain's names and defaults, in one place.

Every module that validates or offers one of these choices (config, engine, sampler, kernels,
the CLI's ``click.Choice`` lists) imports it from here, so a name or a default is written once.
This module imports nothing of the package.
"""

from __future__ import annotations

import math

#: The five model parameters, in the order of every vector, table and chain file (DESIGN 2).
PARAM_NAMES: tuple[str, ...] = ("mu0", "tau_t", "xi0", "sigma_x", "sigma_t")

#: Model kinds: 1 constant spatial lengthscale, 2 lengthscale ``sigma_x / sqrt(density)``.
MODELS: tuple[int, ...] = (1, 2)

#: Edge corrections (``model.edge``): ``none`` is the paper's likelihood (every event's whole
#: trigger mass in the compensator); ``censored`` counts only the trigger mass inside the study
#: region (offspring across the border or in the sea happen but are not in the data;
#: :mod:`hawkes_cli.engine.region`).
EDGE_NONE = "none"
EDGE_CENSORED = "censored"
#: ``renormalized``: offspring cannot land outside the study region; each event's trigger
#: kernel is divided by its mass inside, the compensator is the paper's (DESIGN section 2b).
EDGE_RENORMALIZED = "renormalized"
EDGES: tuple[str, ...] = (EDGE_NONE, EDGE_CENSORED, EDGE_RENORMALIZED)
DEFAULT_EDGE = EDGE_NONE
#: Study regions of ``hawkes-prep simulate --geography``: a rectangle, or the lower 48 states
#: (:meth:`hawkes_cli.simulate.CountyMap.conus`).
GEOGRAPHIES: tuple[str, ...] = ("rectangle", "us")
#: What becomes of a child displaced off the land (``--edge``): dropped, or redrawn.
SIMULATE_EDGES: tuple[str, ...] = (EDGE_CENSORED, EDGE_RENORMALIZED)

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

#: Background forms (``engine.background``): ``auto`` once per distinct time (exact) when the
#: events have at most :data:`LATTICE_FROM` distinct times, else ``lattice``; ``lattice`` the
#: times binned onto a fine power-of-two lattice and summed by FFT, with a rigorous bound on its
#: error (exact, bound 0, for times already on such a lattice: whole days); ``pairs`` the plain
#: pair sum over all events (to check the others).
BACKGROUNDS: tuple[str, ...] = ("auto", "lattice", "pairs")
#: ``engine.background: auto`` sums on a lattice (:mod:`hawkes_cli.engine.binned`) above this many
#: distinct times: the per-distinct-time sum costs U^2 pair terms (a day lattice has ~700; the
#: demo's continuous times 4,003; a million continuous times 1e12).
LATTICE_FROM = 2048
DEFAULT_BACKGROUND = BACKGROUNDS[0]

#: Default ``engine.tolerance`` of MCMC runs, in nats of log-likelihood (absolute): the
#: truncated trigger with a log-likelihood within this many nats of the exact pair sum at every
#: evaluation. The value is chosen from the benchmark in ``benchmarks/results/fast*``: across
#: +-3 posterior sd, errors in log-likelihood differences against the exact engine stayed far
#: below 0.01 nats at 200,000 and 1,000,000 events, both models, at 0.05, 0.2 and 0.5 alike
#: (at most 1e-3). At 0.2, a small posterior (2,000 events, tests/test_inference.py, tiered,
#: model 1) put sigma_x's median 0.72 sd from the exact mode (the test allows 0.5), so the
#: default keeps 0.05, whose cost at 1M is within the timing noise of 0.2. 0 asks for the
#: exact pair sum, which is the default of ``hawkes-run loglik`` (a checking tool) and of
#: :func:`make_likelihood`.
DEFAULT_TOLERANCE = 0.05
EXACT_TOLERANCE = 0.0
#: How the trigger is summed when ``engine.tolerance > 0`` (``engine.trigger``): ``auto`` (the
#: default) times one exact and one truncated pass at each chain's start, on the chain's own
#: device and ranks, and keeps the faster (the exact one unless it is slower by more than
#: :data:`EXACT_SLOWER_BY`; :mod:`hawkes_cli.engine.choice`); ``exact`` the pair sum (as
#: tolerance 0); ``truncated`` the truncated trigger. The reference engine is always exact.
TRIGGERS: tuple[str, ...] = ("auto", "exact", "truncated")
TRIGGER_AUTO, TRIGGER_EXACT, TRIGGER_TRUNCATED = TRIGGERS
DEFAULT_TRIGGER = TRIGGER_AUTO
#: ``engine.trigger: auto`` keeps the exact pair sum while its pass takes at most this factor
#: of the truncated pass's time (no truncation error for a tenth more time).
EXACT_SLOWER_BY = 1.1
#: The smallest positive ``engine.tolerance`` (nats) accepted: values in ``(0, MIN_TOLERANCE)``
#: are refused by :func:`tolerance_problem`, since they look like the old relative tolerance
#: (``|ell~ - ell| <= T |ell~|``, default 1e-6); a bound that tight costs nearly the exact pair
#: sum anyway.
MIN_TOLERANCE = 1e-3


def tolerance_problem(value: float, name: str = "engine.tolerance") -> str | None:
    """Why ``value`` is not a truncation tolerance in nats, or ``None`` when it is one.

    A tolerance is 0 (the exact pair sum) or a finite number >= :data:`MIN_TOLERANCE` nats of
    log-likelihood. The one check of the config loader, :func:`make_likelihood` and
    ``hawkes-run loglik --tolerance``.

    Parameters
    ----------
    value
        The tolerance given.
    name
        How the message names it (``"engine.tolerance"``, ``"--tolerance"``).
    """
    try:
        finite = not isinstance(value, bool) and math.isfinite(value)
    except TypeError:
        finite = False
    if not finite:
        return f"{name} must be a finite number of nats >= 0 (0: exact pair sum), got {value!r}"
    if value < 0:
        return f"{name} must be >= 0 nats of log-likelihood (0: exact pair sum), got {value!r}"
    if 0 < value < MIN_TOLERANCE:
        return (
            f"{name} is now in nats of log-likelihood (absolute), not relative to |loglik|; "
            f"{value:g} looks like an old relative value. Use 0 for the exact pair sum or a "
            f"value >= {MIN_TOLERANCE:g} nats (default {DEFAULT_TOLERANCE:g}); an old relative "
            "value r corresponds to about r x |loglik| nats (|loglik| is printed by "
            "`hawkes-run loglik`)"
        )
    return None


#: Set by ``hawkes-run local`` to its pid in each chain's environment: the chain stops (commits
#: and exits) when its parent is no longer that process.
LAUNCHER_PID_ENV = "HAWKES_LAUNCHER_PID"
#: Environment variable: seconds a chain waits for another chain's fast start (the holder of
#: ``chains/start.lock``) before it gives up with an error; default :data:`START_WAIT_SECONDS`.
START_WAIT_ENV = "HAWKES_START_WAIT"
START_WAIT_SECONDS = 3600.0
#: Environment variable: ``0`` builds the next location draw's grid index on the main thread,
#: not ahead on a worker (:mod:`hawkes_cli.engine.ahead`; the same draws either way), for
#: A/B measurements on a new machine.
DRAW_AHEAD_ENV = "HAWKES_DRAW_AHEAD"

#: What a chain is doing, as `hawkes-run local` and `status` show it (its progress record).
PHASE_PENDING = "pending"  # no record yet (or the launcher has not started the chain)
PHASE_STARTING = "starting"  # launched, its process not yet reporting (data, device set-up)
PHASE_FAST_START = "fast start"  # searching for the mode, or waiting for another chain's search
PHASE_WARMUP = "warm-up"
PHASE_SAMPLING = "sampling"
PHASE_FINISHED = "finished"
PHASE_STOPPED = "stopped"  # stopped on request; resumable
PHASE_FAILED = "failed"
PHASES: tuple[str, ...] = (
    PHASE_PENDING,
    PHASE_STARTING,
    PHASE_FAST_START,
    PHASE_WARMUP,
    PHASE_SAMPLING,
    PHASE_FINISHED,
    PHASE_STOPPED,
    PHASE_FAILED,
)

#: Exit code of a chain (or launcher) that stopped on request after committing its draws
#: (SIGTERM, SIGINT, SIGUSR1): EX_TEMPFAIL, "run again to resume".
EXIT_STOPPED = 75

# --------------------------------------------------------------------------- config defaults
# The value a run gets for a key its YAML leaves out (``hawkes_cli.config.schema`` fields); the
# samplers' own keyword defaults are these too. Documented per key in configs/*.yaml.

DEFAULT_MODEL = 1
#: ``sampler.iterations`` (warm-up included) and ``sampler.start_subsample`` (events).
DEFAULT_ITERATIONS = 20_000
DEFAULT_THIN = 1
DEFAULT_SEED = 1
#: ``sampler.resample_every``: 0 keeps locations fixed.
DEFAULT_RESAMPLE_EVERY = 0
#: ``sampler.initial_scale``: initial proposal sd on the log scale (without the fast start).
DEFAULT_INITIAL_SCALE = 0.1
#: ``sampler.n_cheap``, ``n_expensive``, ``jump_prob`` (tiered sampler).
DEFAULT_N_CHEAP = 10
DEFAULT_N_EXPENSIVE = 1
DEFAULT_JUMP_PROB = 0.2
#: ``sampler.n_expensive`` of the shipped covid configs (``configs/covid-model{1,2}.yaml``; the
#: default stays 1 so that configs without the key keep their draws): at 1M cases 4 moves per
#: location redraw converged in 308 draws per chain where 1 had not in 630 (about 3x the ESS per
#: second), and both carry the cut posterior (``benchmarks/results/cut-1000000-m1-linear300.txt``).
COVID_N_EXPENSIVE = 4
#: ``sampler.expensive_move`` (tiered): ``coupled`` carries the cheap block along its learned
#: regression on (sigma_x, sigma_t); ``conditional`` holds it; ``joint`` moves all five; ``auto``
#: alternates coupled and conditional in warm-up and keeps the one with the larger steps
#: (robust where a curved mu0-tau_t ridge misleads the regression; the demo config names it).
#: The default stays ``coupled``: a config without the key (every run made before it existed)
#: must keep meaning what it meant, for its hash and its resume.
EXPENSIVE_MOVES: tuple[str, ...] = ("coupled", "conditional", "joint", "auto")
DEFAULT_EXPENSIVE_MOVE = EXPENSIVE_MOVES[0]
DEFAULT_START_SUBSAMPLE = 20_000
#: ``sampler.stop_when``: run every iteration, or stop every chain once the run's draws pass
#: ``hawkes-diagnose`` (R-hat and bulk and tail ESS of every parameter; runner/converged.py).
STOP_ITERATIONS = "iterations"
STOP_CONVERGED = "converged"
STOP_WHEN = (STOP_ITERATIONS, STOP_CONVERGED)
DEFAULT_STOP_WHEN = STOP_ITERATIONS
#: ``chains``: 4 chains of one GPU each, one chain per node job of 8 GPUs.
DEFAULT_CHAINS = 4
DEFAULT_GPUS_PER_CHAIN = 1
DEFAULT_CHAINS_PER_NODE = 1
DEFAULT_GPUS_PER_NODE = 8
#: ``output.commit_every``: iterations between commits.
DEFAULT_COMMIT_EVERY = 100
#: ``slurm.time``, ``requeue_budget``, ``signal_seconds``.
DEFAULT_SLURM_TIME = "24:00:00"
DEFAULT_REQUEUE_BUDGET = 10
DEFAULT_SIGNAL_SECONDS = 300

# --------------------------------------------------------------------------- hawkes-prep

#: Counts of the HHS facility file that become cases (``hawkes-prep hhs --count``): new
#: confirmed admissions (the default) or the census column behind the paper's double counting.
COUNTS: tuple[str, ...] = ("admissions", "census")
#: Study regions (``--region``): the 50 states and DC, the contiguous US, every polygon.
REGION_NAMES: tuple[str, ...] = ("states", "conus", "all")
#: Where a case is put in its county (``--locations``): uniformly inside, or at the centroid.
LOCATIONS: tuple[str, ...] = ("polygon", "centroid")
#: CSV readers of the HHS file (``hawkes-prep hhs --engine``): pyarrow if installed, pyarrow,
#: stdlib csv.
CSV_READERS: tuple[str, ...] = ("auto", "pyarrow", "csv")
#: Units of a polygon file's land-area field (``hawkes-prep counties``): Census ALAND square
#: metres, or CENSUSAREA square miles.
LAND_UNITS: tuple[str, ...] = ("m2", "sqmi")

# --------------------------------------------------------------------------- Slurm

#: How a Slurm node starts a chain's ranks (``submit --launcher``): srun inside an allocation,
#: mpiexec (the mpich wheel's Hydra), or auto (srun when there is one).
LAUNCHERS: tuple[str, ...] = ("auto", "srun", "mpiexec")

#: Largest magnitude of an event's time or coordinates, and of a county density (whose
#: smallest value is its inverse), that an events file may hold: beyond it float32 pair terms
#: (squared distances, ``sigma_x / sqrt(density)``) leave the float range. Real data (days,
#: degrees, projected metres, persons per square mile) lie many decades inside.
DATA_LIMIT = 1e15
