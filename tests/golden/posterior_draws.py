"""Write the draws of the R-hat/ESS reference cases: ``posterior_draws.csv.gz``.

Seeded; run once, then ``posterior_reference.R`` computes R's values from the stored file
(the file, not this script, is the input of both R and ``tests/test_posterior_reference.py``,
so a change of numpy's generators cannot move the reference):

    python tests/golden/posterior_draws.py
    nice Rscript tests/golden/posterior_reference.R   # writes posterior_reference.json

The file has one chain a line: ``case,log2_scale,chain,draws``, ``draws`` the chain's values
separated by spaces, each ``k * 2**log2_scale`` with ``k`` an integer below 2**53 (or ``Inf``,
``-Inf``, ``NaN``), so both languages read the same doubles exactly and the file stays small.
Every case is quantised to its scale (:data:`SCALES`, default 2**-16) before it is written,
except the cases of :data:`FULL_PRECISION`, whose ``log2_scale`` is ``hex`` and whose draws
are C99 hexadecimal floats (``float.hex``; R's ``as.numeric`` reads them exactly): arviz's
tail-ESS quantile falls one ulp below a tied value only for draws with all 53 bits.
"""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OUT = HERE / "posterior_draws.csv.gz"
HEADER = "case,log2_scale,chain,draws"
DEFAULT_SCALE = -16
SCALES = {"lognormal_mu0_6x300": -36, "tiny_scale_4x100": -86}
FULL_PRECISION = ("metropolis_full_precision_4x189_odd", "metropolis_full_precision_4x280")


def ar1(rng: np.random.Generator, chains: int, n: int, phi: float) -> np.ndarray:
    """AR(1) chains ``x_t = phi x_{t-1} + e_t`` started from stationarity."""
    x = np.empty((chains, n))
    x[:, 0] = rng.standard_normal(chains) / math.sqrt(1 - phi * phi)
    for t in range(1, n):
        x[:, t] = phi * x[:, t - 1] + rng.standard_normal(chains)
    return x


def metropolis(
    rng: np.random.Generator, chains: int, n: int, scale: float, shift: float = 0.0
) -> np.ndarray:
    """Random-walk Metropolis on N(0, 1): rejected proposals repeat the current value, so
    draws tie (also at the 5% and 95% quantiles)."""
    x = np.empty((chains, n))
    cur = rng.standard_normal(chains) + shift
    for t in range(n):
        prop = cur + scale * rng.standard_normal(chains)
        log_ratio = 0.5 * ((cur - shift) ** 2 - (prop - shift) ** 2)
        take = np.log(rng.uniform(size=chains)) < log_ratio
        cur = np.where(take, prop, cur)
        x[:, t] = cur
    return x


def cases() -> dict[str, np.ndarray]:
    """Every case: name -> (chain, draw) array."""
    rng = np.random.default_rng(20261123)
    out: dict[str, np.ndarray] = {}
    out["iid_4x600"] = rng.standard_normal((4, 600))
    out["iid_4x601_odd"] = rng.standard_normal((4, 601))
    out["ar09_4x1000"] = ar1(rng, 4, 1000, 0.9)
    out["ar095_3x777_odd"] = ar1(rng, 3, 777, 0.95)
    out["ar099_2x2001_odd"] = ar1(rng, 2, 2001, 0.99)
    out["antithetic_4x500"] = ar1(rng, 4, 500, -0.7)
    out["antithetic_2x301_odd"] = ar1(rng, 2, 301, -0.95)
    out["metropolis_4x1000"] = metropolis(rng, 4, 1000, 2.4)
    out["metropolis_4x999_odd"] = metropolis(rng, 4, 999, 2.4)
    out["metropolis_wide_4x1001_odd"] = metropolis(rng, 4, 1001, 6.0)  # few acceptances
    # seeds chosen (by a search) so that a value tied at the 5% quantile makes arviz 0.22's
    # tail ESS depart from R's: 5.0% and 4.7% off
    out["metropolis_full_precision_4x189_odd"] = metropolis(np.random.default_rng(157), 4, 189, 2.4)
    out["metropolis_full_precision_4x280"] = metropolis(np.random.default_rng(164), 4, 280, 2.4)
    out["metropolis_8x250"] = metropolis(rng, 8, 250, 3.0)
    out["metropolis_1x501_odd"] = metropolis(rng, 1, 501, 2.4)
    out["metropolis_stuck_start_3x400"] = np.concatenate(
        [np.full((3, 40), 0.25), metropolis(rng, 3, 360, 5.0)], axis=1
    )
    out["metropolis_shifted_4x600"] = np.concatenate(
        [metropolis(rng, 3, 600, 2.4), metropolis(rng, 1, 600, 2.4, shift=1.5)]
    )
    out["rounded_4x400_ties"] = np.round(rng.standard_normal((4, 400)) * 2) / 2
    out["rounded_5x333_odd_ties"] = np.round(ar1(rng, 5, 333, 0.5))
    out["two_values_4x200"] = (rng.uniform(size=(4, 200)) < 0.9).astype(float)
    out["lognormal_mu0_6x300"] = 0.002 * np.exp(0.05 * ar1(rng, 6, 300, 0.8))
    out["cauchy_4x500"] = rng.standard_cauchy((4, 500))
    out["not_mixed_4x500"] = rng.standard_normal((4, 500)) + np.array([[0], [0], [0], [3.0]])
    out["trend_2x400"] = rng.standard_normal((2, 400)) + np.linspace(0, 3, 400)
    for k in range(1, 9):
        out[f"chains_{k}x{100 + 7 * k}"] = ar1(rng, k, 100 + 7 * k, 0.6)
    out["one_chain_1x1000"] = ar1(rng, 1, 1000, 0.3)
    for n in range(1, 8):
        out[f"short_1x{n}"] = rng.standard_normal((1, n))
    for n in range(4, 10):
        out[f"short_4x{n}"] = rng.standard_normal((4, n))
    out["short_2x8"] = rng.standard_normal((2, 8))
    out["constant_4x100"] = np.full((4, 100), 1.5)
    constant_chain = rng.standard_normal((3, 100))
    constant_chain[1] = 0.7
    out["one_constant_chain_3x100"] = constant_chain
    out["tiny_scale_4x100"] = 1e-20 * rng.standard_normal((4, 100))  # R: constant (abs eps)
    with_inf = rng.standard_normal((4, 100))
    with_inf[2, 17] = math.inf
    out["with_inf_4x100"] = with_inf
    with_nan = rng.standard_normal((4, 100))
    with_nan[0, 3] = math.nan
    out["with_nan_4x100"] = with_nan
    # every chain stuck, each at its own value (within-chain variance exactly 0)
    out["stuck_apart_3x100"] = np.repeat(0.002 * np.exp(0.05 * rng.standard_normal((3, 1))), 100, 1)
    out["stuck_apart_2x101_odd"] = np.repeat(rng.standard_normal((2, 1)), 101, axis=1)
    return out


def _text(v: float, log2_scale: int | None) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Inf" if v > 0 else "-Inf"
    if log2_scale is None:
        return v.hex()
    k = round(math.ldexp(v, -log2_scale))
    assert abs(k) < 2**53
    return str(k)


def read_draws(path: Path = OUT) -> dict[str, np.ndarray]:
    """The stored cases: name -> (chain, draw) array (values exact)."""
    chains: dict[str, list[list[float]]] = {}
    with gzip.open(path, "rt", encoding="ascii") as f:
        assert f.readline().strip() == HEADER
        for line in f:
            case, scale, chain, draws = line.rstrip("\n").split(",")
            values = [
                float(k)
                if k in ("Inf", "-Inf", "NaN")
                else float.fromhex(k)
                if scale == "hex"
                else math.ldexp(int(k), int(scale))
                for k in draws.split(" ")
            ]
            assert int(chain) == len(chains.setdefault(case, [])) + 1
            chains[case].append(values)
    return {case: np.array(rows, dtype=np.float64) for case, rows in chains.items()}


def main() -> None:
    lines = [HEADER]
    for name, x in cases().items():
        e = None if name in FULL_PRECISION else SCALES.get(name, DEFAULT_SCALE)
        for c in range(x.shape[0]):
            draws = " ".join(_text(float(v), e) for v in x[c])
            lines.append(f"{name},{'hex' if e is None else e},{c + 1},{draws}")
    with gzip.GzipFile(OUT, "wb", mtime=0) as f:  # mtime 0: the same bytes every time
        f.write(("\n".join(lines) + "\n").encode("ascii"))
    print(f"wrote {OUT} ({len(lines) - 1} chains)")


if __name__ == "__main__":
    main()
