"""One 8-GPU node, PROJECTED from a ``bench_mission.py`` run on this machine: seconds per
iteration, time to a converged posterior and the cost of the paper's 20,000 iterations, for each
way of sharing the node's GPUs between chains.

This is a projection, not a measurement. It takes from the mission run (measured here):

- the wall seconds per iteration per chain with all chains sharing this machine's cores, and the
  share of them in the trigger kernel (``py-spy``'s split of chain 0);
- the worst post-warm-up ESS per draw over the five parameters (bulk and tail) and the warm-up;

and assumes:

- the trigger kernel is the only part on the GPU. One GPU runs a trigger pass ``speed-up`` times
  faster than this whole machine (all its cores) does. Measure it: ``bench_fast.py`` on the GPU
  and here, same N and model, and give both ``--pass-s`` values. Without them, the table is
  given for a range of speed-ups;
- a chain's ranks split the kernel evenly (the paper: near-linear up to 8 GPUs in one node);
- the rest of an iteration is one host thread per chain, on a core as fast as one here, and
  does not shrink with more GPUs;
- the chains mix per draw as they did here, so the ESS target needs ``400 / (chains * ESS per
  draw)`` post-warm-up draws per chain (R-hat cannot be projected).

    python benchmarks/project_node.py benchmarks/results/mission-m2-1000000.json
    python benchmarks/project_node.py RESULT.json --pass-s 1.49 0.02   # here, GPU (bench_fast)

Writes ``benchmarks/results/node-m{model}-{N}.{json,txt}`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
PARAMS = ("mu0", "tau_t", "xi0", "sigma_x", "sigma_t")
ESS_MIN = 400.0
GPUS_PER_NODE = 8
GPUS_PER_CHAIN = (1, 2, 4)  # 2+ chains per node: R-hat needs several
SPEEDUPS = (10.0, 30.0, 100.0, 300.0)  # one GPU / this whole machine, per trigger pass
PAPER_ITERATIONS = 20_000
PAPER_CHAINS = 30


@dataclass(frozen=True)
class Measured:
    """What the projection takes from one mission run (this machine, all chains at once).

    Attributes
    ----------
    s_per_it : float
        Wall seconds per iteration of one chain while ``chains`` chains share ``cores`` cores.
    kernel_share : float
        Share of a chain's wall time in the trigger kernel (0-1).
    cores, chains, warmup : int
    ess_per_draw : float
        Worst post-warm-up ESS (bulk or tail, over the five parameters) per draw, all chains.
    """

    s_per_it: float
    kernel_share: float
    cores: int
    chains: int
    warmup: int
    ess_per_draw: float

    @property
    def kernel_machine_s(self) -> float:
        """Seconds of this whole machine the trigger kernel takes per chain iteration."""
        return self.kernel_share * self.s_per_it / self.chains

    @property
    def host_s(self) -> float:
        """Seconds of one core the rest of a chain iteration takes (host-side, one thread)."""
        return (1.0 - self.kernel_share) * self.s_per_it * self.cores / self.chains


@dataclass(frozen=True)
class NodeRow:
    """One way to share a node's GPUs, at one kernel speed-up (seconds; node-hours)."""

    speedup: float
    gpus_per_chain: int
    chains: int
    s_per_it: float
    kernel_fraction: float
    post_warmup_per_chain: float
    converge_s: float
    paper_run_h: float
    paper_node_hours: float


def measured_from(result: dict, split: dict | None = None) -> Measured:
    """:class:`Measured` from a ``bench_mission.py`` result (its JSON, as a dict).

    ``split`` (a py-spy split, shares by category) stands in when the run has none of its own.
    """
    split = result.get("split") or split
    if not split:
        raise SystemExit("the run has no py-spy split: give --split-from a run that has one")
    ess = result["ess_per_iteration"]
    machine = result["meta"]["machine"]  # "x86_64 2 cores"
    return Measured(
        s_per_it=result["seconds_per_iteration_per_chain"],
        kernel_share=split["trigger kernel"],
        cores=int(machine.split()[-2]),
        chains=result["meta"]["chains"],
        warmup=result["meta"]["warmup"],
        ess_per_draw=min(min(ess[p]["bulk"], ess[p]["tail"]) for p in PARAMS),
    )


def node_row(m: Measured, speedup: float, gpus_per_chain: int) -> NodeRow:
    """The projected iteration on a node with ``GPUS_PER_NODE`` GPUs, ``gpus_per_chain`` each."""
    chains = GPUS_PER_NODE // gpus_per_chain
    kernel = m.kernel_machine_s / (speedup * gpus_per_chain)
    s_it = m.host_s + kernel
    post = ESS_MIN / (chains * m.ess_per_draw)
    paper_s = PAPER_ITERATIONS * s_it
    return NodeRow(
        speedup=speedup,
        gpus_per_chain=gpus_per_chain,
        chains=chains,
        s_per_it=s_it,
        kernel_fraction=kernel / s_it,
        post_warmup_per_chain=post,
        converge_s=(m.warmup + post) * s_it,
        paper_run_h=paper_s / 3600.0,
        paper_node_hours=paper_s / 3600.0 * PAPER_CHAINS / chains,
    )


def table(m: Measured, speedups: list[float]) -> list[NodeRow]:
    return [node_row(m, s, g) for s in speedups for g in GPUS_PER_CHAIN]


def text(meta: dict, m: Measured, rows: list[NodeRow], measured_speedup: float | None) -> str:
    lines = [
        f"# PROJECTION (not a measurement) to one {GPUS_PER_NODE}-GPU node from bench_mission "
        f"N={meta['n']} model {meta['model']} on {meta['machine']} (commit {meta['commit']})",
        f"# measured here: {m.s_per_it:.2f} s/it/chain with {m.chains} chains on {m.cores} cores,"
        f" trigger kernel {m.kernel_share:.1%} -> {m.kernel_machine_s:.2f} s of the machine and "
        f"{m.host_s:.2f} s of one core per iteration; worst ESS/draw {m.ess_per_draw:.3f}",
        "# speed-up: one GPU's trigger pass against this whole machine's "
        + (
            f"(measured with bench_fast: {measured_speedup:.1f}x)"
            if measured_speedup
            else "(assumed: no GPU was measured)"
        ),
        f"# host-bound limit: {m.host_s:.2f} s per iteration however fast the GPU",
        "# converge: (warm-up + post/ch) iterations x s/it for the ESS target alone (fast start "
        "and R-hat not included); 20k its: one chain of the paper's length; node-h: the paper's "
        f"{PAPER_CHAINS} chains",
        f"{'speed-up':>8} {'GPUs/ch':>7} {'chains':>6} {'s/it':>7} {'kernel':>6} "
        f"{'post/ch':>7} {'converge':>9} {'20k its':>8} {'30 ch node-h':>12}",
    ]
    lines += [
        f"{r.speedup:8.0f} {r.gpus_per_chain:7d} {r.chains:6d} {r.s_per_it:7.3f} "
        f"{r.kernel_fraction:6.0%} {r.post_warmup_per_chain:7.0f} {r.converge_s / 60:7.1f} m "
        f"{r.paper_run_h:6.1f} h {r.paper_node_hours:12.1f}"
        for r in rows
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("result", type=Path, help="a bench_mission.py result JSON")
    ap.add_argument("--split-from", type=Path, help="a result JSON whose py-spy split to use")
    ap.add_argument(
        "--pass-s",
        nargs=2,
        type=float,
        metavar=("HERE", "GPU"),
        help="seconds per trigger pass (bench_fast 'fast s') here and on one GPU",
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    result = json.loads(args.result.read_text())
    split = json.loads(args.split_from.read_text())["split"] if args.split_from else None
    m = measured_from(result, split)
    measured = args.pass_s[0] / args.pass_s[1] if args.pass_s else None
    rows = table(m, [measured] if measured else list(SPEEDUPS))
    meta = result["meta"]
    out = args.out or HERE / "results" / f"node-m{meta['model']}-{meta['n']}"
    doc = {
        "label": "PROJECTION to one 8-GPU node from measured rates on this machine",
        "source": str(args.result),
        "split_from": str(args.split_from) if args.split_from else None,
        "measured_speedup": measured,
        "measured": asdict(m) | {"kernel_machine_s": m.kernel_machine_s, "host_s": m.host_s},
        "rows": [asdict(r) for r in rows],
    }
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1))
    out.with_suffix(".txt").write_text(text(meta, m, rows, measured) + "\n")
    print(text(meta, m, rows, measured))


if __name__ == "__main__":
    main()
