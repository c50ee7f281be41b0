"""Slurm without a cluster: placement plans and their errors, rendered batch scripts (golden
files, quoting), rank -> GPU mapping and the refusal to share a GPU, the requeue decision, and
the in-job launcher under mpiexec.

The tests that submit real jobs to the local cluster are in ``test_slurm_cluster.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from hawkes_cli import slurm
from hawkes_cli.config import ChainsConfig, config_from_mapping, load_config
from hawkes_cli.errors import ConfigError, ParallelError
from hawkes_cli.parallel import MPIComm, SerialComm, local_rank
from hawkes_cli.rundir import RunDir
from hawkes_cli.slurm import (
    DeviceChoice,
    DeviceSlot,
    check_devices,
    choose_device,
    device_slot,
    launcher_command,
    visible_gpus,
)
from hawkes_cli.slurm import launch as launch_mod
from hawkes_cli.slurm import node as node_mod

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("HAWKES_UPDATE_GOLDEN") == "1"
BASE = Path("/srv/hawkes")
PYTHON = "/opt/hawkes/.venv/bin/python"
BIN = Path(sys.executable).parent


def make_config(run_dir: str = "runs/test", **sections) -> object:
    mapping = {"data": {"events": "cases.h5"}, "output": {"run_dir": run_dir}}
    for name, values in sections.items():
        mapping.setdefault(name, {}).update(values)
    return config_from_mapping(mapping, base_dir=BASE, where="test.yaml")


def chains(count, per_chain, per_node, gpus=8):
    return {
        "count": count,
        "gpus_per_chain": per_chain,
        "chains_per_node": per_node,
        "gpus_per_node": gpus,
    }


# --------------------------------------------------------------------------- plans


def test_paper_plan_two_chains_of_four_gpus_per_node():
    plan = slurm.make_plan(make_config(chains=chains(30, 4, 2)))
    assert len(plan.nodes) == 15
    assert plan.resources.array == "0-14"
    assert (plan.resources.ntasks, plan.resources.gpus, plan.resources.nodes) == (8, 8, 1)
    assert [n.chains for n in plan.nodes[:2]] == [(0, 1), (2, 3)]
    node = plan.nodes[7]
    assert node.chains == (14, 15)
    assert [(s.rank, s.chain, s.chain_rank, s.gpu) for s in node.ranks] == [
        (0, 14, 0, 0),
        (1, 14, 1, 1),
        (2, 14, 2, 2),
        (3, 14, 3, 3),
        (4, 15, 0, 4),
        (5, 15, 1, 5),
        (6, 15, 2, 6),
        (7, 15, 3, 7),
    ]
    assert all(n.idle_gpus == 0 for n in plan.nodes)
    assert [plan.node_of_chain(c) for c in (0, 1, 2, 29)] == [0, 0, 1, 14]


def test_partly_empty_last_node():
    plan = slurm.make_plan(make_config(chains=chains(5, 2, 3)))
    assert [n.chains for n in plan.nodes] == [(0, 1, 2), (3, 4)]
    assert plan.resources.array == "0-1"
    assert plan.resources.ntasks == 6 and plan.resources.gpus == 6
    last = plan.nodes[-1]
    assert last.n_ranks == 4 and last.idle_gpus == 4
    assert [(s.chain, s.gpu) for s in last.ranks] == [(3, 0), (3, 1), (4, 2), (4, 3)]
    text = slurm.format_plan(plan)
    assert "task 1 holds 2 of 3 chain(s): 4 rank(s), 2 requested GPU(s) idle there" in text
    assert "chain   4: rank 2 -> GPU 2, rank 3 -> GPU 3  (rank 2 drives)" in text


def test_fewer_chains_than_a_node_holds():
    plan = slurm.make_plan(make_config(chains=chains(1, 2, 4)))
    assert plan.chains_per_node == 1 and len(plan.nodes) == 1
    assert plan.resources.array == "0" and plan.resources.ntasks == 2


def test_impossible_placements_cannot_be_built():
    """The placement rule has one home (ChainsConfig): a config built in code is refused too."""
    with pytest.raises(
        ConfigError,
        match=r"^chains: impossible placement.*3\) \* .*\(4\) = 12 GPUs per node.*at most 2$",
    ):
        ChainsConfig(4, 4, 3, 8)
    with pytest.raises(ConfigError, match="gpus_per_chain must be at most 8"):
        ChainsConfig(4, 16, 1, 8)
    assert ChainsConfig(4, 4, 2, 8).chains_per_node == 2  # exactly full is fine


def test_submit_into_a_run_of_another_config_is_refused(tmp_path, monkeypatch):
    """The refusal is recognised by its type (OtherRunError), not its words; nothing is written."""
    from hawkes_cli.errors import OtherRunError
    from hawkes_cli.slurm import jobs

    run_dir = str(tmp_path / "run")
    RunDir.of(make_config(run_dir)).write_config(make_config(run_dir))
    before = (tmp_path / "run" / "config.yaml").read_bytes()
    monkeypatch.setattr(jobs, "slurm_command", lambda name: "/nonexistent/sbatch")
    other = make_config(run_dir, sampler={"seed": 7})
    with pytest.raises(OtherRunError, match=r"holds a run of a different config.*remove that run"):
        jobs.submit(other)
    assert (tmp_path / "run" / "config.yaml").read_bytes() == before
    assert not (tmp_path / "run" / "slurm").exists()


def test_dry_run_reports_a_run_only_change_and_writes_nothing(tmp_path, monkeypatch):
    """A dry run says what a submission would change in config.yaml (here slurm.time, which no
    draw depends on), refuses what a submission refuses, and writes nothing either way."""
    from hawkes_cli.errors import OtherRunError
    from hawkes_cli.slurm import jobs

    run_dir = str(tmp_path / "run")
    assert jobs.submit(make_config(run_dir), dry_run=True).change is None  # a new run
    assert not (tmp_path / "run").exists()
    RunDir.of(make_config(run_dir)).write_config(make_config(run_dir))
    before = (tmp_path / "run" / "config.yaml").read_bytes()
    assert jobs.submit(make_config(run_dir), dry_run=True).change == ()
    longer = make_config(run_dir, slurm={"time": "48:00:00"})
    change = jobs.submit(longer, dry_run=True).change
    assert len(change) == 1 and change[0].startswith("slurm.time")
    with pytest.raises(OtherRunError, match="remove that run"):
        jobs.submit(make_config(run_dir, sampler={"seed": 7}), dry_run=True)
    assert (tmp_path / "run" / "config.yaml").read_bytes() == before
    assert not (tmp_path / "run" / "slurm").exists()


def test_dry_run_prints_the_change_on_stderr(tmp_path):
    cfg = tmp_path / "c.yaml"
    mapping = {"data": {"events": "x.h5"}, "output": {"run_dir": str(tmp_path / "run")}}
    cfg.write_text(yaml.safe_dump(mapping))
    RunDir.of(load_config(cfg)).write_config(load_config(cfg))
    cfg.write_text(yaml.safe_dump({**mapping, "slurm": {"time": "2-00:00:00"}}))
    proc = _cli("submit", "--dry-run", cfg)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("#!") and "--time=2-00:00:00" in proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("dry run: would change") and "slurm.time" in last


def test_a_refused_sbatch_leaves_the_run_as_it_was(tmp_path, monkeypatch):
    """sbatch refuses the job: config.yaml, the script and the plan are what they were before
    the submission (a changed slurm.time is not left behind for the next command to read)."""
    from hawkes_cli.errors import HawkesError
    from hawkes_cli.slurm import jobs

    sbatch = tmp_path / "sbatch"
    sbatch.write_text("#!/bin/sh\necho 'sbatch: error: invalid partition' >&2\nexit 1\n")
    sbatch.chmod(0o755)
    monkeypatch.setattr(jobs, "slurm_command", lambda name: str(sbatch))
    run_dir = str(tmp_path / "run")
    rdir = RunDir.of(make_config(run_dir))
    rdir.write_config(make_config(run_dir))
    rdir.slurm_dir.mkdir()
    rdir.script_path.write_text("#!/bin/sh\n# the script of an earlier submission\n")
    files = {p: p.read_bytes() for p in (rdir.config_path, rdir.script_path)}
    longer = make_config(run_dir, slurm={"time": "48:00:00", "partition": "nope"})
    with pytest.raises(HawkesError, match=r"sbatch refused the job.*invalid partition"):
        jobs.submit(longer)
    assert {p: p.read_bytes() for p in files} == files
    assert not rdir.plan_path.exists()  # it had none
    assert rdir.read_jobs() == []
    # byte for byte, whatever the old script's encoding and line ends
    rdir.script_path.write_bytes(b"#!/bin/sh\r\n# caf\xe9\r\n")
    with pytest.raises(HawkesError, match="sbatch refused"):
        jobs.submit(longer)
    assert rdir.script_path.read_bytes() == b"#!/bin/sh\r\n# caf\xe9\r\n"
    # a failure before sbatch (the logs folder cannot be made) is undone too
    rdir.script_path.write_bytes(files[rdir.script_path])
    assert not rdir.slurm_logs_dir.exists()  # the refused submissions removed the folder they made
    rdir.slurm_logs_dir.write_text("not a folder")
    with pytest.raises(OSError):
        jobs.submit(longer)
    assert {p: p.read_bytes() for p in files} == files


def test_a_refused_new_run_leaves_no_folder_and_no_warning(tmp_path, monkeypatch, caplog):
    """sbatch refuses the first submission of a run: no run directory is left behind (not even
    the empty folders above it); a refused run-only change logs no "changed" WARNING, and the
    same change logs it once when sbatch takes the job."""
    from hawkes_cli.errors import HawkesError
    from hawkes_cli.slurm import jobs

    refuse = tmp_path / "refuse"
    refuse.write_text("#!/bin/sh\necho 'sbatch: error: invalid partition' >&2\nexit 1\n")
    accept = tmp_path / "accept"
    accept.write_text("#!/bin/sh\necho 4242\n")
    for script in (refuse, accept):
        script.chmod(0o755)
    sbatch = {"path": str(refuse)}
    monkeypatch.setattr(jobs, "slurm_command", lambda name: sbatch["path"])
    monkeypatch.setattr(jobs, "active_jobs", lambda root: [])
    run_dir = tmp_path / "new" / "deeper" / "run"
    with pytest.raises(HawkesError, match="sbatch refused the job"):
        jobs.submit(make_config(str(run_dir)))
    assert not (tmp_path / "new").exists()

    rdir = RunDir.of(make_config(str(run_dir)))
    rdir.write_config(make_config(str(run_dir)))
    longer = make_config(str(run_dir), slurm={"time": "48:00:00"})
    caplog.set_level("WARNING", logger="hawkes_cli")
    with pytest.raises(HawkesError, match="sbatch refused the job"):
        jobs.submit(longer)
    assert not [r for r in caplog.records if "changed" in r.getMessage()]
    assert sorted(p.name for p in run_dir.iterdir()) == ["chains", "config.yaml", "logs"]
    sbatch["path"] = str(accept)
    assert jobs.submit(longer).job_id == "4242"
    changed = [r.getMessage() for r in caplog.records if "changed" in r.getMessage()]
    assert len(changed) == 1 and "slurm.time" in changed[0]


def test_a_job_that_may_be_queued_keeps_the_submissions_files(tmp_path, monkeypatch):
    """sbatch answers with no readable job id (or does not answer in time): the job may be
    queued, so config.yaml stays what the job reads, and the error says to check squeue."""
    from hawkes_cli.errors import HawkesError
    from hawkes_cli.slurm import jobs

    sbatch = tmp_path / "sbatch"
    sbatch.write_text("#!/bin/sh\necho 4242\necho 'note: job queued'\n")
    sbatch.chmod(0o755)
    monkeypatch.setattr(jobs, "slurm_command", lambda name: str(sbatch))
    run_dir = str(tmp_path / "run")
    longer = make_config(run_dir, slurm={"time": "48:00:00"})
    with pytest.raises(HawkesError, match="may have been queued: check squeue"):
        jobs.submit(longer)
    rdir = RunDir.of(longer)
    assert rdir.load_config().slurm.time == "48:00:00"
    assert rdir.script_path.exists() and rdir.plan_path.exists()


def test_dry_run_refuses_a_run_with_live_jobs(tmp_path, monkeypatch):
    from hawkes_cli.errors import HawkesError
    from hawkes_cli.slurm import jobs

    run_dir = str(tmp_path / "run")
    RunDir.of(make_config(run_dir)).write_config(make_config(run_dir))
    monkeypatch.setattr(jobs, "active_jobs", lambda root: ["100"])
    with pytest.raises(HawkesError, match=r"has job.s. 100 pending or running"):
        jobs.submit(make_config(run_dir, slurm={"time": "48:00:00"}), dry_run=True)


@pytest.mark.parametrize(
    "option",
    ["ntasks", "gres", "array", "requeue", "output", "nodes", "gpus_per_node", "open-mode"],
)
def test_extra_cannot_override_the_plan(option):
    cfg = make_config(slurm={"extra": {option: "1"}})
    with pytest.raises(ConfigError, match=rf"slurm.extra.{option}: .*set by the placement plan"):
        slurm.make_plan(cfg)


def test_extra_may_set_cpus_and_job_name():
    plan = slurm.make_plan(make_config(slurm={"extra": {"cpus_per_task": 6, "job-name": "x"}}))
    opts = dict(plan.resources.options(output="o"))
    assert opts["cpus-per-task"] == "6" and opts["job-name"] == "x"
    with pytest.raises(ConfigError, match="whole number"):
        slurm.make_plan(make_config(slurm={"extra": {"cpus-per-task": "many"}}))


def test_plan_cli_prints_placement_and_error(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"data": {"events": "x.h5"}, "chains": chains(3, 2, 2)}))
    proc = _cli("plan", good)
    assert proc.returncode == 0, proc.stderr
    assert "--array=0-1" in proc.stdout and "--gres=gpu:4" in proc.stdout
    assert "task 1 holds 1 of 2 chain(s)" in proc.stdout
    as_json = json.loads(_cli("plan", good, "--json").stdout)
    assert as_json["nodes"][1]["chains"] == [2] and as_json["resources"]["ntasks"] == 4
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"data": {"events": "x.h5"}, "chains": chains(3, 4, 3)}))
    proc = _cli("plan", bad)
    assert proc.returncode == 4 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: ") and "impossible placement" in proc.stderr


def _cli(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hawkes_cli", "run", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


# --------------------------------------------------------------------------- scripts

NASTY = '/srv/hawkes/runs/it\'s a "run" $(touch pwned) `x` ; # 50% \\ done'

GOLDEN_CASES = {
    "paper": dict(
        run_dir="/srv/hawkes/runs/covid-m1",
        chains=chains(30, 4, 2),
        slurm={
            "partition": "gpu",
            "time": "24:00:00",
            "account": "hawkes-lab",
            "qos": "normal",
            "extra": {"constraint": "a100", "exclusive": True, "mail-type": "END,FAIL"},
        },
    ),
    "single": dict(run_dir="runs/one", chains=chains(1, 1, 1), slurm={"time": "90"}),
    "quoting": dict(
        run_dir=NASTY,
        chains=chains(3, 2, 2, gpus=4),
        slurm={
            "partition": "gpu a",
            "account": "lab; rm -rf /",
            "time": "1-00:00:00",
            "signal_seconds": 600,
            "requeue_budget": 3,
            "extra": {"comment": "say \"hi\" # not a comment $(x) 'q'"},
        },
    ),
}


def render(case: str, python: str = PYTHON) -> str:
    kw = GOLDEN_CASES[case]
    cfg = make_config(kw["run_dir"], chains=kw["chains"], slurm=kw["slurm"])
    plan = slurm.make_plan(cfg)
    return slurm.render_script(
        cfg, plan, config_path=cfg.output.run_dir / "config.yaml", python=python
    )


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_rendered_script_matches_golden(case):
    text = render(case)
    path = GOLDEN / f"{case}.sbatch"
    if UPDATE:
        path.write_text(text)
    assert text == path.read_text(), f"{path} differs; HAWKES_UPDATE_GOLDEN=1 rewrites it"


def test_golden_scripts_are_valid_bash():
    for case in GOLDEN_CASES:
        subprocess.run(["bash", "-n", str(GOLDEN / f"{case}.sbatch")], check=True)


def test_every_directive_precedes_the_first_command():
    for case in GOLDEN_CASES:
        lines = render(case).splitlines()
        first_cmd = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
        assert all(not line.startswith("#SBATCH") for line in lines[first_cmd:])
        assert sum(line.startswith("#SBATCH --array=") for line in lines) == 1


def _sbatch_parse(line: str) -> list[str]:
    """Arguments of one ``#SBATCH`` line as sbatch reads them (src/sbatch/opt.c)."""
    rest, args = line[len("#SBATCH") :], []
    i = 0
    while i < len(rest):
        while i < len(rest) and rest[i].isspace():
            i += 1
        if i >= len(rest) or rest[i] == "#":
            break
        arg, quoted, escaped = "", False, False
        while i < len(rest) and (quoted or not rest[i].isspace()):
            c = rest[i]
            if escaped:
                arg, escaped = arg + c, False
            elif c == "\\":
                escaped = True
            elif c == '"':
                quoted = not quoted
            elif c == "#" and not quoted:
                break
            else:
                arg += c
            i += 1
        args.append(arg)
        if i < len(rest) and rest[i] == "#":
            break
    return args


def test_directives_survive_sbatch_parsing():
    text = render("quoting")
    parsed = {}
    for line in text.splitlines():
        if line.startswith("#SBATCH"):
            (arg,) = _sbatch_parse(line)
            name, _, value = arg[2:].partition("=")
            parsed[name] = value
    assert parsed["account"] == "lab; rm -rf /"
    assert parsed["partition"] == "gpu a"
    assert parsed["comment"] == "say \"hi\" # not a comment $(x) 'q'"
    assert parsed["output"] == NASTY.replace("%", "%%") + "/slurm/logs/%A_%a.out"
    assert parsed["signal"] == "B:USR1@600" and parsed["requeue"] == ""


def test_script_body_passes_paths_verbatim(tmp_path):
    """Run the rendered script with a fake interpreter: argv arrives exactly, nothing runs."""
    fake = tmp_path / "bin dir 'x'" / "py thon"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$HAWKES_ARGV"\n')
    fake.chmod(0o755)
    script = tmp_path / "job.sbatch"
    script.write_text(render("quoting", python=str(fake)))
    out = tmp_path / "argv.txt"
    env = {"PATH": os.environ["PATH"], "SLURM_ARRAY_TASK_ID": "1", "HAWKES_ARGV": str(out)}
    subprocess.run(["bash", str(script)], check=True, env=env, cwd=tmp_path, timeout=30)
    assert out.read_text().splitlines() == [
        "-m",
        "hawkes_cli",
        "run",
        "-v",
        "node",
        NASTY + "/config.yaml",
        "--node",
        "1",
    ]
    assert not (tmp_path / "pwned").exists()
    proc = subprocess.run(
        ["bash", str(script)],
        env={**env, "SLURM_ARRAY_TASK_ID": ""},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode != 0 and "run this script with sbatch" in proc.stderr


def test_template_is_found_in_the_checkout():
    path = slurm.template_path()
    assert path.name == slurm.TEMPLATE_NAME
    assert path.read_text() == (Path(__file__).parents[1] / "slurm" / "job.sbatch.tmpl").read_text()


def test_line_breaks_cannot_reach_the_script():
    with pytest.raises(ConfigError, match="line break"):
        slurm.sbatch_quote("a\nb")
    with pytest.raises(ConfigError, match="control character"):  # the config refuses it
        make_config("/srv/x\n#SBATCH --wrap=evil")
    cfg = make_config("/srv/x")  # and the script would, were a Config built in code
    evil = dataclasses.replace(cfg.output, run_dir=Path("/srv/x\n#SBATCH --wrap=evil"))
    cfg = dataclasses.replace(cfg, output=evil)
    with pytest.raises(ConfigError, match="line break"):
        slurm.render_script(cfg, slurm.make_plan(cfg), config_path=Path("/c.yaml"))


def test_sbatch_quote_plain_values_stay_bare():
    assert slurm.sbatch_quote("gpu:4") == "gpu:4"
    assert slurm.sbatch_quote("B:USR1@300") == "B:USR1@300"
    assert slurm.sbatch_quote("a b") == '"a b"'
    assert slurm.sbatch_quote('a"b\\c') == '"a\\"b\\\\c"'
    assert slurm.sbatch_quote("") == '""'


def test_dry_run_prints_script_and_writes_nothing(tmp_path):
    cfg = tmp_path / "c.yaml"
    run_dir = tmp_path / "run"
    cfg.write_text(
        yaml.safe_dump(
            {
                "data": {"events": "x.h5"},
                "chains": chains(4, 2, 2),
                "output": {"run_dir": str(run_dir)},
            }
        )
    )
    proc = _cli("submit", cfg, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("#!/bin/bash") and "#SBATCH --array=0-1" in proc.stdout
    assert f"node {run_dir}/config.yaml --node" in proc.stdout
    assert not run_dir.exists()


def test_submit_without_sbatch_is_one_error_line(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        yaml.safe_dump({"data": {"events": "x.h5"}, "output": {"run_dir": str(tmp_path / "run")}})
    )
    env = {**os.environ, "PATH": str(tmp_path / "empty")}
    proc = _cli("submit", cfg, env=env)
    assert proc.returncode == 1 and proc.stderr.startswith("error: sbatch not found")
    assert len(proc.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------- devices


def test_visible_gpus_precedence_and_empty():
    assert visible_gpus({}) is None
    env = {"GPU_DEVICE_ORDINAL": "2,3", "CUDA_VISIBLE_DEVICES": "4, 5"}
    assert visible_gpus(env) == ("CUDA_VISIBLE_DEVICES", ("4", "5"))
    assert visible_gpus({"ROCR_VISIBLE_DEVICES": "1", "GPU_DEVICE_ORDINAL": "0"}) == (
        "ROCR_VISIBLE_DEVICES",
        ("1",),
    )
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == ("CUDA_VISIBLE_DEVICES", ())


def test_device_slot_follows_local_rank():
    assert device_slot(3, {}) == DeviceSlot(3, 3, None, None)
    env = {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    # the driver honours the variable: it lists 4 GPUs, rank r takes the r-th
    s = device_slot(2, env, n_gpus=4)
    assert (s.slot, s.var, s.visible_id) == (2, "CUDA_VISIBLE_DEVICES", "6")
    # the runtime ignores it and lists all 8: rank r takes device number ids[r]
    assert device_slot(2, env, n_gpus=8).slot == 6
    assert device_slot(1, {"ROCR_VISIBLE_DEVICES": "GPU-aa,GPU-bb"}, n_gpus=8).slot == 1
    # more ranks than visible GPUs: no id of its own
    assert device_slot(5, env, n_gpus=4).visible_id is None


def choice(rank, chain, ident, kind="gpu", vid=None, host="n1"):
    return DeviceChoice(
        rank,
        chain,
        rank % 2,
        rank,
        ident,
        "Dev",
        kind,
        "CUDA_VISIBLE_DEVICES" if vid is not None else None,
        vid,
        rank,
        host,
    )


def test_distinct_gpus_pass():
    choices = [choice(r, r // 2, f"0:{r}", vid=str(r)) for r in range(4)]
    assert check_devices(choices) == []


def test_two_ranks_of_a_chain_on_one_gpu_are_refused():
    choices = [choice(0, 0, "0:0"), choice(1, 0, "0:0")]
    with pytest.raises(
        ParallelError,
        match=r"ranks 0 \(chain 0\), 1 \(chain 0\) on n1 would "
        r"share GPU 0:0",
    ):
        check_devices(choices)


def test_ranks_of_two_chains_on_one_gpu_are_refused():
    choices = [choice(0, 0, "0:0"), choice(1, 0, "0:1"), choice(2, 1, "0:1"), choice(3, 1, "0:3")]
    with pytest.raises(ParallelError, match=r"1 \(chain 0\), 2 \(chain 1\)"):
        check_devices(choices)


def test_same_visible_gpu_id_is_refused():
    choices = [choice(0, 0, "0:0", vid="3"), choice(1, 0, "0:1", vid="3")]
    with pytest.raises(ParallelError, match="CUDA_VISIBLE_DEVICES=3"):
        check_devices(choices)


def test_cpu_device_sharing_is_allowed_and_said():
    choices = [choice(r, r // 2, "0:0", kind="cpu", vid=str(r)) for r in range(4)]
    (note,) = check_devices(choices)
    assert "share the CPU device 0:0" in note and "allowed" in note


def test_same_ident_on_two_hosts_is_not_sharing():
    assert check_devices([choice(0, 0, "0:0", host="a"), choice(1, 0, "0:0", host="b")]) == []


def test_reference_engine_needs_no_device():
    cfg = make_config(engine={"backend": "reference"})
    c = choose_device(cfg, rank=1, chain=0, chain_rank=1, local_rank=1, env={})
    assert (c.ident, c.kind) == ("reference", "cpu")
    assert "share" in check_devices([c, dataclasses.replace(c, rank=0)])[0]


@pytest.mark.opencl
def test_choose_device_on_pocl_logs_cpu_sharing():
    cfg = make_config(engine={"backend": "opencl", "device": "cpu"})
    env = {"CUDA_VISIBLE_DEVICES": "0,1"}
    cs = [
        choose_device(cfg, rank=r, chain=0, chain_rank=r, local_rank=r, env=env) for r in range(2)
    ]
    assert {c.kind for c in cs} == {"cpu"} and [c.visible_id for c in cs] == ["0", "1"]
    assert "share the CPU device" in check_devices(cs)[0]


def test_pinned_local_rank_wins_over_environment(monkeypatch):
    monkeypatch.setenv("SLURM_LOCALID", "0")  # stale inside mpiexec in a batch script
    assert local_rank(SerialComm()) == 0
    assert local_rank(SerialComm(local_rank=5)) == 5
    assert SerialComm().allgather("x") == ["x"]


# --------------------------------------------------------------------------- launcher


def test_srun_command(monkeypatch):
    monkeypatch.setattr(launch_mod.shutil, "which", lambda name: f"/usr/bin/{name}")
    env = {"SLURM_JOB_ID": "12", "SLURM_CPUS_PER_TASK": "3"}
    cmd = launcher_command("auto", 4, ["py", "rank"], env)
    assert cmd == [
        "/usr/bin/srun",
        "--mpi=pmi2",
        "--ntasks=4",
        "--nodes=1",
        "--kill-on-bad-exit=1",
        "--cpus-per-task=3",
        "py",
        "rank",
    ]
    cmd = launcher_command("srun", 2, ["x"], {"HAWKES_SRUN_MPI": "pmix"})
    assert cmd[1] == "--mpi=pmix"


@pytest.mark.mpi
def test_mpiexec_command_is_hydra_on_this_node():
    cmd = launcher_command("mpiexec", 3, ["py"], {})
    assert Path(cmd[0]).name == "mpiexec"
    assert cmd[1:] == ["-launcher", "fork", "-n", "3", "py"]


def _after(tmp_path, monkeypatch, *, rc, got=(), restart=0, budget=2, job="77", done=False):
    cfg = make_config(
        str(tmp_path / "run"), chains=chains(2, 1, 2), slurm={"requeue_budget": budget}
    )
    plan = slurm.make_plan(cfg)
    monkeypatch.setattr(node_mod, "_unfinished", lambda c, n: [] if done else [0, 1])
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(node_mod.subprocess, "run", fake_run)
    monkeypatch.setattr(node_mod.shutil, "which", lambda name: f"/usr/bin/{name}")
    code = node_mod._after_ranks(cfg, plan.nodes[0], rc, list(got), restart, job)
    events = [e["event"] for e in RunDir(cfg.output.run_dir).read_node_state(0)["events"]]
    return code, calls, events


def test_stopped_chains_requeue_within_budget(tmp_path, monkeypatch):
    code, calls, events = _after(tmp_path, monkeypatch, rc=75, got=[signal.SIGUSR1], restart=1)
    assert code == 0 and calls == [["/usr/bin/scontrol", "requeue", "77"]]
    assert events == ["requeue"]


def test_spent_budget_exits_cleanly(tmp_path, monkeypatch):
    code, calls, events = _after(tmp_path, monkeypatch, rc=75, got=[signal.SIGUSR1], restart=2)
    assert code == 0 and calls == [] and events == ["budget-spent"]


def test_sigterm_leaves_requeueing_to_slurm(tmp_path, monkeypatch):
    code, calls, events = _after(tmp_path, monkeypatch, rc=143, got=[signal.SIGTERM])
    assert code == 75 and calls == [] and events == ["stopped"]


def test_failed_ranks_do_not_requeue(tmp_path, monkeypatch):
    code, calls, events = _after(tmp_path, monkeypatch, rc=6)
    assert code == 6 and calls == [] and events == ["failed"]


def test_finished_node_does_nothing_more(tmp_path, monkeypatch):
    code, calls, events = _after(tmp_path, monkeypatch, rc=0, done=True)
    assert code == 0 and calls == [] and events == ["finished"]


# --------------------------------------------------------------------------- status


def test_status_without_slurm(tmp_path):

    cfg = make_config(str(tmp_path / "run"), chains=chains(3, 1, 2))
    RunDir.of(cfg).write_config(cfg)
    run_dir = RunDir.of(cfg)
    run_dir.record_job({"job_id": "41", "array": "0-1", "nodes": [0, 1]})
    run_dir.record_node_event(1, "start", job="43", array_job="41", restart=0)
    run_dir.record_node_event(1, "start", job="43", array_job="41", restart=1)
    rows = slurm.run_status(cfg.output.run_dir, query_slurm=False)
    assert [(r.chain, r.node, r.job, r.requeues, r.draws) for r in rows] == [
        (0, 0, "41_0", 0, 0),
        (1, 0, "41_0", 0, 0),
        (2, 1, "41_1", 1, 0),
    ]
    assert [r.phase for r in rows] == ["pending"] * 3  # no progress record yet
    proc = _cli("status", cfg.output.run_dir, env={**os.environ, "PATH": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert "0/3 chains finished" in proc.stdout and "41_1" in proc.stdout
    proc = _cli("status", tmp_path)
    assert proc.returncode == 2 and "not a run directory" in proc.stderr


def test_task_state_reads_pending_array_ranges():
    states = {"9_[2-4,7]": "PENDING", "9_0": "RUNNING"}
    assert slurm.task_state(states, "9", 0) == "RUNNING"
    assert slurm.task_state(states, "9", 3) == "PENDING"
    assert slurm.task_state(states, "9", 7) == "PENDING"
    assert slurm.task_state(states, "9", 5) is None


# --------------------------------------------------------------------------- node under mpiexec

TRUTH = {"mu0": 0.5, "tau_t": 40.0, "xi0": 0.5, "sigma_x": 0.1, "sigma_t": 4.0}


@pytest.fixture(scope="module")
def small_events(tmp_path_factory) -> Path:
    from hawkes_cli.data import save_events
    from hawkes_cli.model import Params
    from hawkes_cli.simulate import simulate

    data = simulate(
        Params(**TRUTH),
        model=1,
        n_background=150,
        t_end=100.0,
        bounds=(0.0, 20.0, 0.0, 20.0),
        seed=5,
    )
    path = tmp_path_factory.mktemp("node-ev") / "events.h5"
    save_events(data, path)
    return path


def node_config(tmp_path: Path, events: Path, name: str, **chains_kw) -> Path:
    cfg = {
        "data": {"events": str(events)},
        # exact serial == MPI draws: a sampler without the fast start (whose curvature carries
        # the ranks' summation order into the start)
        "sampler": {
            "kind": "univariate",
            "initial": {},
            "iterations": 120,
            "warmup": 30,
            "seed": 3,
        },
        "chains": {
            "count": 3,
            "gpus_per_chain": 2,
            "chains_per_node": 2,
            "gpus_per_node": 4,
            **chains_kw,
        },
        "engine": {"backend": "reference"},
        "output": {"run_dir": str(tmp_path / name), "commit_every": 10},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _clean_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "PMI_", "PMIX_", "HAWKES_", "MPI_LOCAL"))
    }
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.mark.mpi
def test_node_launcher_runs_its_chains_then_nothing(tmp_path, small_events):
    """Outside Slurm (mpiexec): node 0 runs chains 0 and 1 with 2 ranks each, like run_chain."""
    from hawkes_cli.runner import run_chain
    from hawkes_cli.storage import read_chain

    path = node_config(tmp_path, small_events, "node")
    cfg = load_config(path)
    RunDir.of(cfg).write_config(cfg)
    proc = subprocess.run(
        cli_node(cfg, 0, "--launcher", "mpiexec"),
        capture_output=True,
        text=True,
        timeout=180,
        env=_clean_env(),
    )
    assert proc.returncode == 0, proc.stderr
    assert "share the CPU device reference" in proc.stderr
    ser = load_config(node_config(tmp_path, small_events, "serial"))
    for c in (0, 1):
        run_chain(ser, c)
        a = read_chain(RunDir(ser.output.run_dir).chain_path(c)).draws
        b = read_chain(RunDir(cfg.output.run_dir).chain_path(c)).draws
        for key in a:
            if key == "loglik":
                np.testing.assert_allclose(b[key], a[key], rtol=1e-12)
            else:
                np.testing.assert_array_equal(b[key], a[key], err_msg=key)
    assert not RunDir(cfg.output.run_dir).chain_path(2).exists()
    before = os.stat(RunDir(cfg.output.run_dir).chain_path(0)).st_mtime_ns
    again = subprocess.run(
        cli_node(cfg, 0, "--launcher", "mpiexec"),
        capture_output=True,
        text=True,
        timeout=60,
        env=_clean_env(),
    )
    assert again.returncode == 0 and "all finished; nothing to do" in again.stderr
    assert os.stat(RunDir(cfg.output.run_dir).chain_path(0)).st_mtime_ns == before
    events = [e["event"] for e in RunDir(cfg.output.run_dir).read_node_state(0)["events"]]
    assert events == ["start", "finished", "start", "finished"]


def cli_node(cfg, node: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "hawkes_cli",
        "run",
        "-v",
        "node",
        str(cfg.output.run_dir / "config.yaml"),
        "--node",
        str(node),
        *extra,
    ]


@pytest.mark.mpi
def test_warning_signal_stops_node_at_a_commit(tmp_path, small_events):
    from hawkes_cli.storage import read_sidecar

    path = node_config(tmp_path, small_events, "warn")
    text = path.read_text().replace("iterations: 120", "iterations: 100000")
    path.write_text(text)
    cfg = load_config(path)
    RunDir.of(cfg).write_config(cfg)
    proc = subprocess.Popen(
        cli_node(cfg, 1, "--launcher", "mpiexec"),
        stderr=subprocess.PIPE,
        text=True,
        env=_clean_env(),
    )
    target = RunDir(cfg.output.run_dir).chain_path(2)
    t0 = time.monotonic()
    while not (read_sidecar(target) or {}).get("draws"):
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() - t0 < 120, "no commit in time"
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err  # stopped, and not in a Slurm job: no requeue
    assert "not in a Slurm job, so no requeue" in err and "Traceback" not in err
    side = read_sidecar(target)
    assert 0 < side["draws"] == side["checkpoint"]["iteration"] < 100000


@pytest.mark.mpi
def test_rank_count_must_match_the_plan(tmp_path, small_events):
    path = node_config(tmp_path, small_events, "size")
    cfg = load_config(path)

    RunDir.of(cfg).write_config(cfg)
    mpiexec = str(BIN / "mpiexec")
    proc = subprocess.run(
        [mpiexec, "-n", "3", *cli_node(cfg, 0, "--ranks")],
        capture_output=True,
        text=True,
        timeout=120,
        env=_clean_env(),
    )
    assert proc.returncode == 6, proc.stderr
    assert "needs 4 MPI rank(s), but the launcher started 3" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.mpi
def test_mpi_split_gives_chain_communicators(tmp_path):
    code = (
        "from mpi4py import MPI\n"
        "from hawkes_cli.parallel import MPIComm, local_rank\n"
        "w = MPIComm(MPI.COMM_WORLD)\n"
        "c = w.split(w.rank // 2, w.rank % 2, local_rank=w.rank)\n"
        "rows = w.allgather(f'{w.rank} {c.rank} {c.size} {local_rank(c)} {c.allgather(w.rank)}')\n"
        "if w.rank == 0:\n"
        "    print('\\n'.join(rows))\n"
    )
    proc = subprocess.run(
        [str(BIN / "mpiexec"), "-n", "4", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=_clean_env(),
    )
    assert proc.returncode == 0, proc.stderr
    rows = proc.stdout.strip().splitlines()
    assert rows == ["0 0 2 0 [0, 1]", "1 1 2 1 [0, 1]", "2 0 2 2 [2, 3]", "3 1 2 3 [2, 3]"]
    assert MPIComm  # imported for the type of the split result
