"""Metropolis-Hastings kernels over a plain log-density callable.

The samplers know no engine, file or MPI: they move a real vector ``theta`` (the log-parameters,
shape ``(d,)``) under a callable ``log_density(theta) -> float`` (log prior + log likelihood, up
to a constant). A returned ``-inf`` or ``nan`` means "outside the support": the proposal is
rejected, never raised.

Three kernels (DESIGN section 5):

``univariate``
    The published random-scan sampler, made correct: each step picks one coordinate ``k``
    uniformly, proposes ``theta_k + scale_k * z`` with ``z ~ N(0, 1)`` and accepts with
    probability ``min(1, exp(new - old))``; one ``log_density`` call per step. While
    ``adapt=True`` (warm-up), every ``adapt_every`` proposals of coordinate ``k`` multiply
    ``scale_k`` by ``clamp(acceptance / target_accept, 0.5, 2)``. With ``adapt=False`` the
    scales are frozen and the step is a valid MH kernel.
``block``
    Adaptive Metropolis (Haario, Saksman & Tamminen 2001; Roberts & Rosenthal 2009): proposal
    ``theta + f * L z`` with ``L L^T = (2.38^2 / d) (S + eps I)``, ``S`` the running (Welford)
    covariance of the states visited while adapting, and ``f`` a global factor adapted by
    Robbins-Monro toward ``target_accept``. Before ``adapt_start`` adapting steps the proposal is
    ``f * diag(initial_scale)``. Frozen when ``adapt=False``; the proposal is symmetric, so the
    plain MH ratio applies.
``tiered``
    Built for the likelihood's lopsided cost (DESIGN section 5): the coordinates split into a
    *cheap* block (``mu0``, ``tau_t``, ``xi0``: no trigger pass) and an *expensive* block
    (``sigma_x``, ``sigma_t``). One step is one iteration: ``n_expensive`` (default 1) joint
    moves of the expensive block (the only ``log_density`` calls that change the expensive
    coordinates: one trigger pass each), then ``n_cheap`` adaptive-Metropolis moves of the
    cheap block, then with probability
    ``jump_prob`` a mode-jumping move of the cheap block. See :class:`TieredSampler`.

Reproducibility: all randomness comes from the ``rng`` argument, in a fixed order per step
(univariate: coordinate, normal, uniform; block: ``d`` normals, uniform; tiered: one array of
normals, one array of uniforms, sizes fixed by the sampler's settings), always drawn even when a
proposal is rejected early. The next state is a function of ``(state, rng state)`` only, so
restoring :meth:`SamplerState.from_json` and ``rng.bit_generator.state`` resumes a chain
bit-for-bit. :class:`SamplerState` holds only Python floats, ints and tuples (hashable, exact
JSON round trip).

Modules: :mod:`.state` (state, step record, protocol), :mod:`.moves` (checks, MH decision),
:mod:`.adapt` (the warm-up adaptation ``block`` and ``tiered`` share: Robbins-Monro factor,
Welford covariance, jittered Cholesky), :mod:`.univariate`, :mod:`.block`, :mod:`.tiered` (one
kernel each); :func:`make_sampler` builds one by name.
"""

from __future__ import annotations

from typing import Any

from ..vocab import DEFAULT_INITIAL_SCALE, SAMPLER_KINDS
from .block import BlockSampler
from .state import STATE_SCHEMA, LogDensity, Sampler, SamplerState, StepInfo
from .tiered import TieredSampler
from .univariate import UnivariateSampler

__all__ = [
    "SAMPLER_KINDS",
    "STATE_SCHEMA",
    "BlockSampler",
    "LogDensity",
    "Sampler",
    "SamplerState",
    "StepInfo",
    "TieredSampler",
    "UnivariateSampler",
    "make_sampler",
]


def make_sampler(
    kind: str,
    dim: int,
    *,
    target_accept: float | None = None,
    initial_scale: float = DEFAULT_INITIAL_SCALE,
    **options: Any,
) -> Sampler:
    """Build a sampler by name.

    Parameters
    ----------
    kind
        One of :data:`SAMPLER_KINDS`: ``"univariate"``, ``"block"`` or ``"tiered"``.
    dim
        Number of coordinates.
    target_accept
        ``None`` = the kind's default (0.44 univariate, 0.234 block; tiered: by block size,
        0.35 for the two expensive coordinates).
    initial_scale
        Starting proposal sd per coordinate (log scale); ``tiered``: the prior posterior sd
        used when :meth:`TieredSampler.init` gets no covariance.
    **options
        ``tiered`` only: the other keyword arguments of :class:`TieredSampler` (``cheap``,
        ``n_cheap``, ``jump_prob``, ``jump_modes``, ...).

    Raises
    ------
    ValueError
        Unknown ``kind``, bad settings, or ``options`` for a kind other than ``tiered``.
    """
    extra = {} if target_accept is None else {"target_accept": float(target_accept)}
    if kind == "tiered":
        return TieredSampler(dim, initial_scale=initial_scale, **extra, **options)
    if kind in ("univariate", "block") and options:
        raise ValueError(
            f"sampler option(s) {', '.join(sorted(options))} apply to the tiered sampler only, "
            f"not to {kind!r}"
        )
    if kind == "univariate":
        return UnivariateSampler(dim, initial_scale=initial_scale, **extra)
    if kind == "block":
        return BlockSampler(dim, initial_scale=initial_scale, **extra)
    raise ValueError(f"unknown sampler kind {kind!r}; valid kinds are {', '.join(SAMPLER_KINDS)}")
