"""Hostile inputs through the real console scripts (issue 13, "hostile input").

Families: events files, configs, model parameters, Slurm rendering, HHS files (and
``hawkes-prep simulate``). Every case is generated from a fixed seed and run in-process through
the console-script entry point (:func:`hawkes_cli.cli.options.run_guarded`, exactly what the
installed ``hawkes-run`` / ``hawkes-prep`` call), under an alarm so a hang is a failure, not a
stuck CI job. Each case must end one of two ways:

- ``clean``: a non-zero exit with exactly one ``error: ...`` line on stderr and no traceback;
- ``ok``: exit 0 and a result that agrees with an independent expectation (a value computed
  here by hand, a file read back, a script compared line by line).

Anything else is counted as a ``traceback`` (an exception escaped), ``hang`` (the alarm fired)
or ``silent`` (exit 0 with a wrong or unexplained result). ``python -m tests.test_fuzz_inputs``
prints the counts per family.
"""

from __future__ import annotations

import math
import os
import random
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

from hawkes_cli.cli import prep_main, run_main
from hawkes_cli.data import EventData, save_events
from tests.conftest import HAVE_OPENCL
from tests.fuzz import Outcome, classify, invoke_entry

SEED = 20261123
PROGRAMS: dict[str, Callable[[], None]] = {"hawkes-run": run_main, "hawkes-prep": prep_main}


# --------------------------------------------------------------------------- running a command
def invoke(program: str, *args: object, seconds: int = 60) -> Outcome:
    """Run ``program args`` in this process as the console script does; never raises."""
    return invoke_entry(PROGRAMS[program], [program, *args], seconds)


@dataclass
class Case:
    """One hostile input: how to build it, how to run it, what a success must look like."""

    family: str
    name: str
    build: Callable[[Path], tuple[str, list[object]]]  # tmp dir -> (program, args)
    check_ok: Callable[[Outcome], str] | None = None  # None: only a clean error is right
    seconds: int = 60
    marks: tuple = field(default_factory=tuple)

    def run(self, tmp: Path) -> tuple[str, str]:
        program, args = self.build(tmp)
        return classify(invoke(program, *args, seconds=self.seconds), self.check_ok)


# --------------------------------------------------------------------------- shared inputs
#: Five events, hand-checkable (times in days, x/y in coordinate units).
T5 = np.array([0.0, 1.0, 2.5, 4.0, 7.0])
X5 = np.array([0.0, 1.0, 0.5, 3.0, 2.0])
Y5 = np.array([0.0, 0.5, 2.0, 1.0, 4.0])
AREA = 100.0
P0 = {"mu0": 0.5, "tau_t": 3.0, "xi0": 0.4, "sigma_x": 1.5, "sigma_t": 2.0}


def loglik_by_hand(p: dict[str, float], area: float = AREA) -> float:
    """DESIGN section 2, model 1, computed in log space with Python floats (no package code).

    Each term of the rate is ``exp(log term)``, summed with :func:`math.fsum` after factoring
    the largest out (log-sum-exp), so tiny or huge lengthscales neither overflow nor divide by
    zero; a term whose exponent is -inf (a zero) is left out.
    """
    with np.errstate(over="ignore", divide="ignore"):  # (d/tau)^2 = inf is a zero term
        return _loglik_by_hand(p, area)


def _loglik_by_hand(p: dict[str, float], area: float) -> float:
    mu0, tau, xi0, sx, st = (p[k] for k in ("mu0", "tau_t", "xi0", "sigma_x", "sigma_t"))
    total = 0.0
    for n in range(T5.size):
        logs = []
        for m in range(T5.size):
            d = T5[n] - T5[m]
            if d != 0:  # background: every other time, normal density sd tau
                logs.append(
                    math.log(mu0 / area) - 0.5 * (d / tau) ** 2 - math.log(tau)
                    - 0.5 * math.log(2 * math.pi)
                )  # fmt: skip
            if d > 0:  # trigger: exponential in time, isotropic normal in space
                r2 = (X5[n] - X5[m]) ** 2 + (Y5[n] - Y5[m]) ** 2
                logs.append(
                    math.log(xi0) - math.log(st) - d / st - 0.5 * r2 / sx / sx
                    - math.log(2 * math.pi) - 2 * math.log(sx)
                )  # fmt: skip
        logs = [v for v in logs if v != -math.inf]
        top = max(logs) if logs else -math.inf
        log_lam = top + math.log(math.fsum(math.exp(v - top) for v in logs)) if logs else top
        total += max(log_lam, math.log(1e-40))
    T = T5[-1]
    for t in T5:
        bg = 0.5 * (math.erf((T - t) / tau / math.sqrt(2)) - math.erf(-t / tau / math.sqrt(2)))
        total -= mu0 * bg + xi0 * -math.expm1(-(T - t) / st)
    return total


def write_events(path: Path, *, area: object = AREA, **attrs: object) -> Path:
    data = EventData(time=T5, x=X5, y=Y5)
    save_events(data, path)
    if area is not _NO_AREA:
        with h5py.File(path, "r+") as f:
            f["events"].attrs["area"] = area
            for k, v in attrs.items():
                f["events"].attrs[k] = v
    return path


_NO_AREA = object()


def param_args(p: dict[str, float]) -> list[str]:
    return [a for k, v in p.items() for a in ("--param", f"{k}={v!r}")]


def loglik_value(o: Outcome) -> float | None:
    for line in o.out.splitlines():
        if line.startswith("loglik"):
            return float(line.split()[1])
    return None


def expect_loglik(want: float, rtol: float) -> Callable[[Outcome], str]:
    def check(o: Outcome) -> str:
        got = loglik_value(o)
        if got is None:
            return f"no loglik line in {o.out!r}"
        if not math.isfinite(got) or abs(got - want) > rtol * max(1.0, abs(want)):
            return f"loglik {got!r}, by hand {want!r} (rtol {rtol})"
        return ""

    return check


def expect_loglik_or_explained(want: float, rtol: float) -> Callable[[Outcome], str]:
    """The hand value, or ``-inf`` with a line on stderr that says why."""

    def check(o: Outcome) -> str:
        got = loglik_value(o)
        if got == -math.inf:
            return "" if "outside" in o.err else f"loglik -inf without an explanation: {o.err!r}"
        return expect_loglik(want, rtol)(o)

    return check


# --------------------------------------------------------------------------- family: events
def _events_cases() -> list[Case]:
    cases: list[Case] = []
    p_args = ["--engine", "reference", *param_args(P0)]

    def with_area(value: object) -> Callable[[Path], tuple[str, list[object]]]:
        return lambda tmp: ("hawkes-run", ["loglik", write_events(tmp / "e.h5", area=value),
                                            *p_args])  # fmt: skip

    for label, value in [
        ("string", "abc"), ("numeric-string", "100"), ("list", [1.0, 2.0]), ("zero", 0.0),
        ("negative", -5.0), ("nan", float("nan")), ("inf", float("inf")), ("bool", True),
        ("int-array", np.array([3, 4])),
    ]:  # fmt: skip
        cases.append(Case("events", f"area-{label}", with_area(value)))
    cases.append(
        Case("events", "area-valid", with_area(AREA), expect_loglik(loglik_by_hand(P0), 1e-9))
    )

    rng = random.Random(SEED)
    for k in range(8):
        seed = rng.randrange(2**32)

        def flipped(tmp: Path, seed: int = seed) -> tuple[str, list[object]]:
            path = write_events(tmp / "e.h5")
            raw = bytearray(path.read_bytes())
            r = random.Random(seed)
            for _ in range(r.choice((1, 16, 64))):
                raw[r.randrange(len(raw))] ^= 1 << r.randrange(8)
            path.write_bytes(bytes(raw))
            return "hawkes-run", ["loglik", path, *p_args]

        # a flip may land in padding (same value) or in the data (another, valid value): any
        # finite loglik or a clean error is right, never a traceback
        cases.append(Case("events", f"flipped-{k}", flipped, _any_finite_loglik))

    def soft_link(tmp: Path) -> tuple[str, list[object]]:
        path = write_events(tmp / "e.h5")
        with h5py.File(path, "r+") as f:
            del f["events/x"]
            f["events/x"] = h5py.SoftLink("/nowhere/x")
        return "hawkes-run", ["loglik", path, *p_args]

    def external_link(tmp: Path) -> tuple[str, list[object]]:
        path = write_events(tmp / "e.h5")
        with h5py.File(path, "r+") as f:
            del f["events/y"]
            f["events/y"] = h5py.ExternalLink(str(tmp / "missing.h5"), "/y")
        return "hawkes-run", ["loglik", path, *p_args]

    def group_link(tmp: Path) -> tuple[str, list[object]]:
        path = tmp / "g.h5"
        with h5py.File(path, "w") as f:
            f["events"] = h5py.SoftLink("/gone")
        return "hawkes-run", ["loglik", path, *p_args]

    cases += [
        Case("events", "dangling-soft-link", soft_link),
        Case("events", "dangling-external-link", external_link),
        Case("events", "dangling-group-link", group_link),
        Case(
            "events",
            "name-too-long",
            lambda tmp: ("hawkes-run", ["loglik", tmp / ("a" * 300 + ".h5"), *p_args]),
        ),
        Case(
            "events",
            "path-too-long",
            lambda tmp: (
                "hawkes-run",
                ["loglik", tmp / "/".join(["b" * 200] * 25) / "e.h5", *p_args],
            ),
        ),
        Case(
            "events",
            "unknown-user",
            lambda tmp: ("hawkes-run", ["loglik", "~no_such_user_zz9/e.h5", *p_args]),
        ),
        Case(
            "events",
            "window-end-before-last",
            lambda tmp: (
                "hawkes-run",
                ["loglik", write_events(tmp / "e.h5"), *p_args, "--window-end", "3"],
            ),
        ),
    ]
    return cases


def _any_finite_loglik(o: Outcome) -> str:
    got = loglik_value(o)
    return "" if got is not None and math.isfinite(got) else f"loglik {got!r} on exit 0"


# --------------------------------------------------------------------------- family: configs
def _config(tmp: Path, **sections: object) -> Path:
    events = write_events(tmp / "e.h5")
    cfg: dict = {"data": {"events": str(events)}, "output": {"run_dir": str(tmp / "run")}}
    for key, value in sections.items():
        section, _, name = key.partition("__")
        cfg.setdefault(section, {})[name] = value
    path = tmp / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _text_config(text: str) -> Callable[[Path], tuple[str, list[object]]]:
    def build(tmp: Path) -> tuple[str, list[object]]:
        path = tmp / "c.yaml"
        path.write_text(text)
        return "hawkes-run", ["validate", path]

    return build


def _cfg(command: list[str], **sections: object) -> Callable[[Path], tuple[str, list[object]]]:
    return lambda tmp: ("hawkes-run", [*command, _config(tmp, **sections)])


def _bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _file_run_dir(tmp: Path) -> tuple[str, list[object]]:
    (tmp / "afile").write_text("x")
    return "hawkes-run", ["validate", _config(tmp, output__run_dir=str(tmp / "afile"))]


def _under_file_run_dir(tmp: Path) -> tuple[str, list[object]]:
    (tmp / "afile").write_text("x")
    return "hawkes-run", ["validate", _config(tmp, output__run_dir=str(tmp / "afile" / "run"))]


#: os.access (and the kernel) let root write anywhere, so an unwritable folder needs a user.
NOT_ROOT = (pytest.mark.skipif(os.geteuid() == 0, reason="root may write into any folder"),)


def _unwritable_run_dir(tmp: Path) -> tuple[str, list[object]]:
    locked = tmp / "locked"
    locked.mkdir(mode=0o500)
    return "hawkes-run", ["validate", _config(tmp, output__run_dir=str(locked / "run"))]


def _config_cases() -> list[Case]:
    v, plan, dry = ["validate"], ["plan"], ["submit", "--dry-run"]
    big = 10**30
    return [
        Case("configs", "yaml-bomb", _text_config(_bomb())),
        Case("configs", "yaml-alias", _text_config("x: &a {events: e.h5}\ndata: *a\n")),
        Case("configs", "deep-list", _text_config("data: " + "[" * 10000 + "]" * 10000 + "\n")),
        Case("configs", "deep-map", _text_config("data:" + "{a:" * 10000 + "1" + "}" * 10000)),
        Case("configs", "huge-document", _text_config("# " + "x" * (20 << 20) + "\n")),
        Case("configs", "chains-1e7-plan", _cfg(plan, chains__count=10_000_000), seconds=30),
        Case("configs", "chains-1e7-dry-run", _cfg(dry, chains__count=10_000_000), seconds=30),
        Case("configs", "iterations-1e30", _cfg(v, sampler__iterations=big)),
        Case("configs", "thin-1e30", _cfg(v, sampler__thin=big)),
        Case("configs", "commit-every-1e30", _cfg(v, output__commit_every=big)),
        Case("configs", "resample-every-1e30", _cfg(v, sampler__resample_every=big)),
        Case("configs", "run-dir-is-file", _file_run_dir),
        Case("configs", "run-dir-under-file", _under_file_run_dir),
        Case("configs", "run-dir-unwritable", _unwritable_run_dir, marks=NOT_ROOT),
        # a place nobody can create a folder in, root included: refused when local creates it
        Case("configs", "run-dir-in-proc", _cfg(["local"], output__run_dir="/proc/hawkes/run")),
        Case("configs", "prior-bool", _cfg(v, priors__mu0={"gamma": [True, 1.0]})),
        Case("configs", "prior-string", _cfg(v, priors__mu0={"gamma": ["1", 1.0]})),
        Case("configs", "prior-bool-scalar", _cfg(v, priors__tau_t={"exponential": True})),
        Case("configs", "window-end-before-last", _cfg(v, data__window_end=3.0)),
        Case("configs", "area-bool", _cfg(v, data__area=True)),
    ]


# --------------------------------------------------------------------------- family: parameters
PARAM_ENGINES: list[tuple[str, list[str], float]] = [
    # (name, loglik options, relative tolerance against the hand value, absolute below 1:
    # float64 sums of five terms agree to ~1e-15; float32 pair terms carry ~1e-7 each;
    # truncation allows 1e-3 nats on top of float32)
    ("reference", ["--engine", "reference"], 1e-9),
    ("opencl-f64", ["--engine", "opencl", "--precision", "float64"], 1e-9),
    ("opencl-f32", ["--engine", "opencl", "--precision", "float32"], 1e-5),
    ("truncated", ["--engine", "opencl", "--tolerance", "1e-3"], 2e-3),
]
EXTREMES: list[tuple[str, float]] = [
    ("tau_t", 1e-300), ("sigma_x", 1e-300), ("sigma_x", 5e-324), ("sigma_x", 1e300),
    ("sigma_t", 1e-300), ("tau_t", 1e300), ("mu0", 1e300), ("xi0", 1e-300), ("sigma_t", 1e300),
    ("sigma_x", 1e-12), ("tau_t", 1e12), ("mu0", 1e-12),
    # the edges of engine.base.PARAM_RANGE: still evaluated, and right
    ("sigma_x", 1e-15), ("sigma_t", 1e-15), ("tau_t", 1e-15), ("sigma_x", 1e15),
]  # fmt: skip


def _parameter_cases() -> list[Case]:
    cases = []
    for engine, options, rtol in PARAM_ENGINES:
        marks = () if engine == "reference" else (pytest.mark.opencl,)
        for name, value in EXTREMES:
            p = {**P0, name: value}
            want = loglik_by_hand(p)

            def build(tmp: Path, p=p, options=options) -> tuple[str, list[object]]:
                return "hawkes-run", ["loglik", write_events(tmp / "e.h5"), *options,
                                      *param_args(p)]  # fmt: skip

            cases.append(
                Case("parameters", f"{engine}-{name}={value:g}", build,
                     expect_loglik_or_explained(want, rtol), seconds=120, marks=marks)
            )  # fmt: skip
    return cases


# --------------------------------------------------------------------------- family: Slurm
ABBREVIATIONS = ["sig", "arr", "no-req", "parti", "acco", "outp", "ntasks-per-no", "cpus-per-t",
                 "job-na", "requ", "gpus-per-n", "p"]  # fmt: skip


def _script_matches(o: Outcome) -> str:
    """``submit --dry-run`` printed a script with the one extra directive, escaped nowhere."""
    lines = o.out.splitlines()
    if "#SBATCH --constraint=a100" not in lines:
        return "no '#SBATCH --constraint=a100' line in the script"
    if any(ch in o.out for ch in "\x1b\x07\x9b"):
        return "terminal control characters in the script"
    return ""


def _slurm_cases() -> list[Case]:
    dry = ["submit", "--dry-run"]
    cases = [
        Case("Slurm rendering", f"extra-abbrev-{name}", _cfg(["plan"], slurm__extra={name: "1"}))
        for name in ABBREVIATIONS
    ]
    cases += [
        Case("Slurm rendering", "extra-empty-value", _cfg(dry, slurm__extra={"constraint": ""})),
        Case(
            "Slurm rendering",
            "extra-valid",
            _cfg(dry, slurm__extra={"constraint": "a100"}),
            _script_matches,
        ),
        Case("Slurm rendering", "partition-escape", _cfg(["plan"], slurm__partition="gpu\x1b[2J")),
        Case(
            "Slurm rendering",
            "extra-value-escape",
            _cfg(dry, slurm__extra={"comment": "a\x1b]0;owned\x07"}),
        ),
        Case("Slurm rendering", "account-bell", _cfg(["plan"], slurm__account="acct\x07")),
        Case(
            "Slurm rendering",
            "run-dir-escape",
            lambda tmp: (
                "hawkes-run",
                ["plan", _config(tmp, output__run_dir=str(tmp / "run\x1b[31mred"))],
            ),
        ),
        Case(
            "Slurm rendering", "extra-c1-control", _cfg(dry, slurm__extra={"comment": "a\x9b31m"})
        ),
    ]
    return cases


# --------------------------------------------------------------------------- family: HHS files
def _hhs(tmp: Path, rows: list[dict], *extra: object) -> tuple[str, list[object]]:
    from tests.test_prep import write_hhs

    src = write_hhs(tmp / "facility.csv", rows)
    return "hawkes-prep", ["hhs", src, "--out", tmp / "cases.h5", "--locations", "centroid",
                           "--engine", "csv", "-q", *extra]  # fmt: skip


def _hhs_row(week: str, adult: str = "3") -> dict:
    from tests.test_prep import row

    return row("A", week, "01001", adult, "0")


def _hhs_ok_count(want: int) -> Callable[[Outcome], str]:
    def check(o: Outcome) -> str:
        return "" if f"wrote {want:,} cases" in o.out else f"expected {want} cases: {o.out!r}"

    return check


def _hhs_cases() -> list[Case]:
    def rows(*weeks_counts: tuple[str, str]) -> Callable[[Path], tuple[str, list[object]]]:
        return lambda tmp: _hhs(tmp, [_hhs_row(w, c) for w, c in weeks_counts], "--n", "0")

    cases = [
        Case("HHS files", "year-1", rows(("0001/01/05", "3"))),
        Case("HHS files", "year-9999", rows(("9999/12/31", "3"))),
        Case("HHS files", "year-1-and-9999", rows(("0001/01/05", "3"), ("9999/12/31", "2"))),
        Case("HHS files", "count-1e12-n0", rows(("2021/01/08", "1000000000000"))),
        Case("HHS files", "count-1e19", rows(("2021/01/08", "10000000000000000000"))),
        Case("HHS files", "count-1e30", rows(("2021/01/08", "1e30"))),
        Case("HHS files", "count-inf", rows(("2021/01/08", "inf")), _hhs_ok_count(0)),
        Case("HHS files", "plain", rows(("2021/01/08", "3")), _hhs_ok_count(3)),
    ]

    def sim(*extra: object) -> Callable[[Path], tuple[str, list[object]]]:
        return lambda tmp: ("hawkes-prep", ["simulate", "--out", tmp / "s.h5", "--n-background",
                                            "20", "--t-end", "10", *extra])  # fmt: skip

    cases += [
        Case("HHS files", "simulate-seed-negative", sim("--seed", "-1")),
        Case("HHS files", "simulate-seed-2^64", sim("--seed", str(2**64))),
        Case("HHS files", "simulate-bounds-1e308", sim("--bounds", "-1e308", "1e308", "0", "1")),
        Case("HHS files", "simulate-bounds-huge", sim("--bounds", "0", "1.7e308", "0", "1.7e308")),
        Case("HHS files", "simulate-grid-1e10", sim("--grid", "100000", "100000")),
        Case("HHS files", "simulate-grid-huge-int", sim("--grid", str(2**70), "1")),
        Case(
            "HHS files",
            "simulate-density-nan",
            sim("--grid", "2", "2", "--density-range", "nan", "1"),
        ),
    ]
    return cases


FAMILIES: dict[str, Callable[[], list[Case]]] = {
    "events": _events_cases,
    "configs": _config_cases,
    "parameters": _parameter_cases,
    "Slurm rendering": _slurm_cases,
    "HHS files": _hhs_cases,
}
CASES: list[Case] = [case for make in FAMILIES.values() for case in make()]


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=f"{c.family}:{c.name}", marks=c.marks) for c in CASES],
)
def test_hostile_input(case: Case, tmp_path: Path) -> None:
    kind, why = case.run(tmp_path)
    assert kind in ("clean", "ok"), f"{kind}: {why}"


def main() -> None:  # pragma: no cover - the before/after counts of the report
    import tempfile

    counts: dict[str, Counter] = {}
    for case in CASES:
        if case.marks is NOT_ROOT and os.geteuid() == 0:
            continue
        if case.marks and case.marks is not NOT_ROOT and not HAVE_OPENCL:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            kind, why = case.run(Path(tmp))
        counts.setdefault(case.family, Counter())[kind] += 1
        if kind not in ("clean", "ok"):
            print(f"{kind:<9} {case.family}:{case.name}: {why[:160]}", file=sys.__stdout__)
    total: Counter = Counter()
    for family, c in counts.items():
        total.update(c)
        print(f"{family:<16} {sum(c.values()):>4} cases  {dict(c)}", file=sys.__stdout__)
    print(f"{'all':<16} {sum(total.values()):>4} cases  {dict(total)}", file=sys.__stdout__)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()


# --------------------------------------------------------------------------- diagnose: draws
@pytest.mark.parametrize("bad", [-0.3, 0.0, -math.inf])
def test_impossible_parameter_draws_are_refused(bad: float) -> None:
    """A negative or zero sigma_x cannot come out of a chain (exp of a log); NaN and +inf are
    the ``nonfinite`` verdict's (tests/test_diagnostics.py)."""
    from hawkes_cli.diagnostics import derived
    from hawkes_cli.errors import StorageError

    good = np.array([0.5, 0.6, 0.7])
    arrays = {"mu0": (good, good), "sigma_x": (good, np.array([0.5, bad, 0.4]))}
    with pytest.raises(StorageError, match=r"sigma_x = .* at retained draw 1 of chain file #2"):
        derived.parameters(("mu0", "sigma_x"), arrays, "days", "lonlat")
    assert len(derived.parameters(("mu0",), arrays, "days", "lonlat")) == 1
