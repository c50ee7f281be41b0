"""Hostile diagnose inputs through the real ``hawkes-diagnose`` (issue 13, family "diagnose
inputs").

Run directories and chain files are written with the real
:class:`~hawkes_cli.storage.ChainWriter` (seeded draws), then damaged or bent: NaN/inf draws,
constant chains, one draw, chains of very different lengths, a missing parameter, empty and
garbage files, zero chains, huge ``--thin``/``--burn``, copies, truncation. Each case runs
in-process through the console-script entry point (``hawkes_cli.cli.diagnose_main``, what the
installed ``hawkes-diagnose`` calls) under an alarm, and must end one of two ways:

- ``clean``: a non-zero exit with exactly one ``error: ...`` line on stderr, no traceback;
- ``ok``: exit 0 and output that agrees with an independent expectation: the JSON report's
  R-hat/ESS/MCSE equal :mod:`hawkes_cli.diagnostics.stats` (checked against R's posterior in
  ``tests/test_posterior_reference.py``) on the matrix built here from the written draws, and
  the verdicts that the damage calls for.

Anything else is a ``traceback``, a ``hang`` (the alarm) or ``silent`` (exit 0 with a wrong or
unexplained result). ``python -m tests.test_fuzz_diagnose`` prints the counts.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pytest

from hawkes_cli.cli import diagnose_main
from hawkes_cli.diagnostics import stats
from hawkes_cli.vocab import PARAM_NAMES
from tests.fuzz import Outcome, classify, invoke_entry
from tests.test_diagnostics import WARMUP, iid_values, make_config, write_chain

SEED = 20261124
ALARM_S = 60


# --------------------------------------------------------------------------- running it
def invoke(*args: object, seconds: int = ALARM_S) -> Outcome:
    """Run ``hawkes-diagnose args`` in this process as the console script does; never raises."""
    return invoke_entry(diagnose_main, ["hawkes-diagnose", *args], seconds)


Built = tuple[list[object], Callable[[Outcome], str] | None]


@dataclass
class Case:
    """One hostile input: ``build(tmp)`` writes it and says the arguments and what a success
    must look like (None: only a clean error is right)."""

    name: str
    build: Callable[[Path], Built]

    def run(self, tmp: Path) -> tuple[str, str]:
        args, check_ok = self.build(tmp)
        return classify(invoke(*args), check_ok)


# --------------------------------------------------------------------------- writing runs
def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng([SEED, *name.encode()])


def _run(tmp: Path, chains: list[dict[str, np.ndarray]], **kw) -> Path:
    """A run directory of finished chain files holding ``chains`` (rows include warm-up)."""
    run_dir = tmp / "run"
    config = make_config(tmp)
    for c, values in enumerate(chains):
        write_chain(run_dir, c, values, config, **kw)
    return run_dir


def _matrix(chains: list[dict[str, np.ndarray]], name: str, burn: int = WARMUP, thin: int = 1):
    """The (chain, draw) array the report must use: after burn-in, thinned, common prefix."""
    arrays = [np.asarray(c[name][burn:])[::thin] for c in chains]
    n = min(len(a) for a in arrays)
    return np.stack([a[:n] for a in arrays])


def _report(o: Outcome) -> dict:
    return json.loads(o.out)


def _codes(report: dict, level: str | None = None) -> set[str]:
    return {v["code"] for v in report["verdicts"] if level is None or v["level"] == level}


def _close(got: float | None, want: float) -> bool:
    if got is None:  # JSON's null: a non-finite number
        return not math.isfinite(want)
    return not math.isnan(want) and abs(got - want) <= 1e-9 * abs(want)


def expect_stats(
    chains: list[dict[str, np.ndarray]],
    *,
    burn: int = WARMUP,
    thin: int = 1,
    fails: set[str] = frozenset(),
    warns: set[str] = frozenset(),
) -> Callable[[Outcome], str]:
    """JSON rows equal ``stats.convergence`` of the hand-built matrices, and the report holds
    the ``fail`` and ``warn`` verdict codes named."""

    def check(o: Outcome) -> str:
        try:
            report = _report(o)
        except json.JSONDecodeError:
            return f"not JSON: {o.out[:200]!r}"
        rows = {r["name"]: r for r in report["parameters"]}
        for name in PARAM_NAMES:
            m = _matrix(chains, name, burn, thin)
            keys = ("rhat", "ess_bulk", "ess_tail", "mcse_mean")
            want = dict(zip(keys, stats.convergence(m), strict=True))
            if report["common_draws"] != m.shape[1]:
                return f"common_draws {report['common_draws']} != {m.shape[1]}"
            for key, value in want.items():
                if not _close(rows[name][key], value):
                    return f"{name} {key} = {rows[name][key]}, expected {value}"
        if not fails <= _codes(report, "fail"):
            return f"fail verdicts {_codes(report, 'fail')} lack {fails - _codes(report, 'fail')}"
        if not warns <= _codes(report, "warn"):
            return f"warn verdicts {_codes(report, 'warn')} lack {warns - _codes(report, 'warn')}"
        if fails and report["status"] != "fail":
            return f"status {report['status']} with failing verdicts"
        return ""

    return check


def _fine(n: int = WARMUP + 200, k: int = 4, name: str = "fine") -> list[dict[str, np.ndarray]]:
    rng = _rng(name)
    return [iid_values(rng, n) for _ in range(k)]


# --------------------------------------------------------------------------- the cases
def _ok_baseline(tmp: Path) -> Built:
    chains = _fine()
    return [_run(tmp, chains), "--json"], expect_stats(chains)


def _nonfinite(value: float, where: int) -> Callable[[Path], Built]:
    def build(tmp: Path) -> Built:
        chains = _fine(name=f"nonfinite{value}")
        chains[1]["sigma_x"][where] = value
        fails = {"nonfinite"} if where >= WARMUP else set()  # warm-up draws are not used
        return [_run(tmp, chains), "--json"], expect_stats(chains, fails=fails)

    return build


def _constant_chains(tmp: Path) -> Built:
    """Three chains that never move, each at its own values (not copies of each other)."""
    rng = _rng("c")
    chains = [
        {p: np.full(WARMUP + 100, v) for p, v in iid_values(rng, 1).items()} for _ in range(3)
    ]
    return [_run(tmp, chains), "--json"], expect_stats(chains, fails={"stuck"})


def _one_constant_chain(tmp: Path) -> Built:
    chains = _fine(name="onec")
    chains[2] = {p: np.full(WARMUP + 200, v[0]) for p, v in chains[2].items()}
    return [_run(tmp, chains), "--json"], expect_stats(chains, fails={"stuck", "rhat"})


def _draws(n_after: int, k: int = 3) -> Callable[[Path], Built]:
    def build(tmp: Path) -> Built:
        chains = _fine(WARMUP + n_after, k, name=f"draws{n_after}")
        fails = {"too_few"} if n_after < stats.MIN_DRAWS else set()
        return [_run(tmp, chains), "--json"], expect_stats(chains, fails=fails)

    return build


def _lengths(tmp: Path) -> Built:
    rng = _rng("lengths")
    chains = [iid_values(rng, WARMUP + n) for n in (2000, 1500, 12)]
    return [_run(tmp, chains), "--json"], expect_stats(chains, warns={"short"})


def _param_names(value: str) -> Callable[[Path], Built]:
    """Chain 1's ``param_names`` attribute (JSON text) replaced by ``value``."""

    def build(tmp: Path) -> Built:
        run_dir = _run(tmp, _fine(name="names"))
        with h5py.File(run_dir / "chains" / "chain-01.h5", "r+") as f:
            f.attrs["param_names"] = value
        return [run_dir, "--json"], None

    return build


def _dataset_deleted(tmp: Path) -> Built:
    run_dir = _run(tmp, _fine(name="deleted"))
    with h5py.File(run_dir / "chains" / "chain-01.h5", "r+") as f:
        del f["draws/sigma_t"]
    return [run_dir, "--json"], None


def _empty_file(tmp: Path) -> Built:
    run_dir = _run(tmp, _fine(name="empty"))
    (run_dir / "chains" / "chain-02.h5").write_bytes(b"")
    return [run_dir], None


def _garbage_file(tmp: Path) -> Built:
    run_dir = _run(tmp, _fine(name="garbage"))
    (run_dir / "chains" / "chain-02.h5").write_bytes(_rng("g").bytes(5000))
    return [run_dir], None


def _truncated(fraction: float) -> Callable[[Path], Built]:
    def build(tmp: Path) -> Built:
        run_dir = _run(tmp, _fine(name=f"trunc{fraction}"))
        path = run_dir / "chains" / "chain-01.h5"
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * fraction)])
        return [run_dir], None

    return build


def _zero_chains(tmp: Path) -> Built:
    run_dir = _run(tmp, _fine(name="zero"))
    for p in (run_dir / "chains").glob("chain-*.h5"):
        p.unlink()
    return [run_dir], None


def _no_chains_dir(tmp: Path) -> Built:
    run_dir = _run(tmp, _fine(name="nochains"))
    shutil.rmtree(run_dir / "chains")
    return [run_dir], None


def _copied_chain(with_record: bool) -> Callable[[Path], Built]:
    """chain-00 copied to chain-07 (with its commit record, or the file alone)."""

    def build(tmp: Path) -> Built:
        run_dir = _run(tmp, _fine(name="copy"))
        chains = run_dir / "chains"
        shutil.copy(chains / "chain-00.h5", chains / "chain-07.h5")
        if with_record:
            shutil.copy(chains / "chain-00.ckpt.json", chains / "chain-07.ckpt.json")
        return [run_dir], None

    return build


def _run_dir_is_file(tmp: Path) -> Built:
    path = tmp / "file"
    path.write_text("not a run directory\n")
    return [path], None


def _option(*extra: object) -> Callable[[Path], Built]:
    def build(tmp: Path) -> Built:
        return [_run(tmp, _fine(name="opt")), *extra], None

    return build


def _thin(thin: int) -> Callable[[Path], Built]:
    def build(tmp: Path) -> Built:
        chains = _fine(name=f"thin{thin}")
        n_after = len(chains[0]["mu0"]) - WARMUP
        kept = -(-n_after // thin)
        fails = {"too_few"} if kept < stats.MIN_DRAWS else set()
        check = expect_stats(chains, thin=thin, fails=fails)
        return [_run(tmp, chains), "--json", "--thin", thin], check

    return build


def _extreme_values(tmp: Path) -> Built:
    """Draws from 1e-300 to 1e300: sums of squares would overflow; the mean and sd must be
    the exact ones (``statistics`` computes with fractions)."""
    import statistics

    rng = _rng("extreme")
    chains = [
        {p: np.exp(rng.uniform(-690, 690, WARMUP + 300)) for p in PARAM_NAMES} for _ in range(3)
    ]
    same = expect_stats(chains)

    def check(o: Outcome) -> str:
        problem = same(o)
        if problem:
            return problem
        row = {r["name"]: r for r in _report(o)["parameters"]}["tau_t"]
        pooled = [float(v) for c in chains for v in c["tau_t"][WARMUP:]]
        for key, want in (("mean", statistics.mean(pooled)), ("sd", statistics.stdev(pooled))):
            if row[key] is None or abs(row[key] - want) > 1e-12 * want:
                return f"tau_t {key} = {row[key]}, exact {want}"
        return ""

    return [_run(tmp, chains), "--json"], check


def _ties(tmp: Path) -> Built:
    rng = _rng("ties")
    chains = [
        {p: 1.0 + np.round(rng.standard_normal(WARMUP + 301), 1) ** 2 for p in PARAM_NAMES}
        for _ in range(4)
    ]
    return [_run(tmp, chains), "--json"], expect_stats(chains)


def _many_short_chains(tmp: Path) -> Built:
    chains = _fine(WARMUP + 7, 40, name="many")
    return [_run(tmp, chains), "--json"], expect_stats(chains)


def _all_warmup(tmp: Path) -> Built:
    return [_run(tmp, _fine(WARMUP, 2, name="allwarm"))], None


def _mixed_configs(tmp: Path) -> Built:
    run_dir = tmp / "run"
    write_chain(run_dir, 0, _fine(name="mixa")[0], make_config(tmp, seed=1))
    write_chain(run_dir, 1, _fine(name="mixb")[0], make_config(tmp, seed=2))
    return [run_dir], None


def _negative_draw(tmp: Path) -> Built:
    chains = _fine(name="neg")
    chains[0]["sigma_x"][WARMUP + 3] = -0.5
    return [_run(tmp, chains)], None


def _cases() -> list[Case]:
    return [
        Case("baseline", _ok_baseline),
        Case("nan draw", _nonfinite(math.nan, WARMUP + 17)),
        Case("inf draw", _nonfinite(math.inf, WARMUP + 3)),
        Case("nan in warm-up only", _nonfinite(math.nan, 3)),
        Case("constant chains", _constant_chains),
        Case("one constant chain", _one_constant_chain),
        Case("1 draw", _draws(1)),
        Case("2 draws", _draws(2)),
        Case("5 draws", _draws(5)),
        Case("6 draws", _draws(6)),
        Case("7 draws one chain", _draws(7, k=1)),
        Case("very different lengths", _lengths),
        Case(
            "a parameter left out of param_names",
            _param_names('["mu0", "tau_t", "xi0", "sigma_x"]'),
        ),
        Case("param_names not JSON", _param_names("[")),
        Case("param_names empty", _param_names("[]")),
        Case("a parameter's dataset deleted", _dataset_deleted),
        Case("empty chain file", _empty_file),
        Case("garbage chain file", _garbage_file),
        Case("truncated to half", _truncated(0.5)),
        Case("truncated to 1%", _truncated(0.01)),
        Case("zero chains", _zero_chains),
        Case("no chains folder", _no_chains_dir),
        Case("copied chain file and record", _copied_chain(True)),
        Case("copied chain file alone", _copied_chain(False)),
        Case("run dir is a file", _run_dir_is_file),
        Case("thin 0", _option("--thin", 0)),
        Case("thin -3", _option("--thin", -3)),
        Case("burn -1", _option("--burn", -1)),
        Case("burn 1e30", _option("--burn", 10**30)),
        Case("thin 7", _thin(7)),
        Case("thin 1000", _thin(1000)),
        Case("huge thin 1e30", _thin(10**30)),
        Case("extreme magnitudes", _extreme_values),
        Case("heavy ties", _ties),
        Case("40 chains of 7 draws", _many_short_chains),
        Case("every draw is warm-up", _all_warmup),
        Case("chains of two configs", _mixed_configs),
        Case("negative sigma_x", _negative_draw),
    ]


CASES = _cases()


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
def test_hostile_diagnose_input(case: Case, tmp_path: Path) -> None:
    kind, why = case.run(tmp_path)
    assert kind in ("clean", "ok"), f"{kind}: {why}"


def main() -> None:  # pragma: no cover - the before/after counts of the report
    import tempfile

    counts: Counter = Counter()
    for case in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            kind, why = case.run(Path(tmp))
        counts[kind] += 1
        if kind not in ("clean", "ok"):
            print(f"{kind:<9} {case.name}: {why[:200]}", file=sys.__stdout__)
    print(f"diagnose inputs {sum(counts.values()):>4} cases  {dict(counts)}", file=sys.__stdout__)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
