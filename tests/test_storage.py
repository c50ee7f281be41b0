"""Tests of hawkes_cli.storage: chain files, the atomic sidecar, and SIGKILL + resume.

The crash tests run real writer processes (``python`` on a script under ``tmp_path``) and kill
them with SIGKILL at random points, then check that exactly the committed draws survive and
that the chain resumes where it stopped.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from hawkes_cli.errors import StorageError
from hawkes_cli.storage import (
    CHUNK_ROWS,
    DRAW_FIELDS,
    SCHEMA_VERSION,
    SIDECAR_SCHEMA,
    ChainMeta,
    ChainWriter,
    is_chain_file,
    read_chain,
    read_sidecar,
    sidecar_path,
)
from hawkes_cli.storage.record import record_digest, rows_bytes
from hawkes_cli.vocab import PARAM_NAMES

ROOT = Path(__file__).resolve().parents[1]
PARAMS = PARAM_NAMES
FIELDS = DRAW_FIELDS
WARMUP = 20


def make_meta(**changes) -> ChainMeta:
    """Metadata of the test chain; keyword arguments override fields."""
    kwargs = dict(
        chain_id=3,
        seed=11,
        model=1,
        n_events=1000,
        iterations=10**9,
        warmup=WARMUP,
        thin=1,
        config_yaml="model: {kind: 1}\n",
        config_sha256="a" * 64,
        kernel_sha256="b" * 64,
        param_names=PARAMS,
        fields=FIELDS,
    )
    kwargs.update(changes)
    return ChainMeta(**kwargs)


def draw(i: int) -> dict[str, float | int]:
    """The deterministic draw number ``i`` (values exact in float64)."""
    row: dict[str, float | int] = {name: i + (j + 1) / 8 for j, name in enumerate(PARAMS)}
    row.update(
        iteration=i,
        loglik=-0.5 * i,
        logprior=-i / 16,
        accepted=i % 2,
        warmup=int(i < WARMUP),
        coordinate=i % 5,
        scale=1 + (i % 7) / 4,
        pair_passes=i % 13,
        n_proposals=1 + i % 11,
        n_accepted=i % 3,
        jump=i % 3 - 1,
    )
    return row


def assert_rows(draws: dict[str, np.ndarray], n: int) -> None:
    """``draws`` holds exactly draws 0..n-1, each once, with the values of :func:`draw`."""
    assert set(draws) == set(PARAMS) | {name for name, _ in FIELDS}
    np.testing.assert_array_equal(draws["iteration"], np.arange(n))
    for name, dtype in (*((p, "f8") for p in PARAMS), *FIELDS):
        assert draws[name].dtype == np.dtype(dtype), name
        expected = np.array([draw(i)[name] for i in range(n)], dtype=dtype)
        np.testing.assert_array_equal(draws[name], expected, err_msg=name)


def raw_rows(path: Path) -> dict[str, int]:
    """Rows physically present in each /draws dataset (committed or not)."""
    with h5py.File(path, "r", libver="latest", swmr=True) as f:
        return {name: f["draws"][name].shape[0] for name in f["draws"]}


def write_draws(writer: ChainWriter, start: int, stop: int) -> None:
    for i in range(start, stop):
        writer.append(draw(i))


# --------------------------------------------------------------------------- basics


def test_new_chain_layout_commit_and_read(tmp_path):
    path = tmp_path / "chains" / "chain-03.h5"
    writer, checkpoint = ChainWriter.open(path, make_meta())
    assert checkpoint is None
    assert (writer.n_committed, writer.n_pending) == (0, 0)
    write_draws(writer, 0, 25)
    assert (writer.n_committed, writer.n_pending) == (0, 25)
    assert raw_rows(path)["mu0"] == 0  # append does no I/O
    writer.commit({"next": 25, "rng": {"state": [1, 2, 3]}})
    assert (writer.n_committed, writer.n_pending) == (25, 0)
    writer.close()
    writer.close()  # idempotent

    with h5py.File(path, "r") as f:
        assert f.attrs["schema_version"] == SCHEMA_VERSION
        assert f.attrs["config_sha256"] == "a" * 64
        assert json.loads(f.attrs["param_names"]) == list(PARAMS)
        assert f["draws"].attrs["warmup_flag"] == "warmup"
        for name, dtype in (*((p, "f8") for p in PARAMS), *FIELDS):
            ds = f["draws"][name]
            assert ds.dtype == np.dtype(dtype)
            assert ds.maxshape == (None,)
            assert ds.chunks == (CHUNK_ROWS,)
            assert ds.shape == (25,)

    side = read_sidecar(path)
    assert sidecar_path(path) == path.parent / "chain-03.ckpt.json"
    assert side["schema"] == SIDECAR_SCHEMA
    assert (side["chain_id"], side["config_sha256"], side["draws"]) == (3, "a" * 64, 25)
    assert side["committed_at"].endswith("+00:00")
    assert side["checkpoint"] == {"next": 25, "rng": {"state": [1, 2, 3]}}

    chain = read_chain(path)
    assert chain.n_committed == 25
    assert chain.checkpoint == side["checkpoint"]
    assert chain.committed_at == side["committed_at"]
    assert chain.attrs["param_names"] == PARAMS
    assert chain.attrs["fields"] == FIELDS
    assert chain.attrs["chain_id"] == 3 and chain.attrs["warmup"] == WARMUP
    assert chain.meta == make_meta()  # the typed metadata, as written
    assert_rows(chain.draws, 25)


def test_resume_continues_and_close_drops_pending(tmp_path):
    path = tmp_path / "chain-03.h5"
    with ChainWriter.open(path, make_meta())[0] as writer:
        write_draws(writer, 0, 10)
        writer.commit({"next": 10})
        write_draws(writer, 10, 14)  # never committed
    writer2, checkpoint = ChainWriter.open(path, make_meta())
    assert checkpoint == {"next": 10}
    assert writer2.n_committed == 10 and writer2.n_pending == 0
    write_draws(writer2, 10, 30)
    writer2.commit({"next": 30})
    writer2.commit({"next": 30, "note": "empty commit updates the checkpoint only"})
    writer2.close()
    chain = read_chain(path)
    assert chain.n_committed == 30 and chain.checkpoint["note"]
    assert_rows(chain.draws, 30)
    assert set(raw_rows(path).values()) == {30}


def test_append_checks_keys_and_closed_writer(tmp_path):
    writer, _ = ChainWriter.open(tmp_path / "c.h5", make_meta())
    bad = draw(0)
    del bad["loglik"]
    with pytest.raises(ValueError, match="loglik"):
        writer.append(bad)
    with pytest.raises(ValueError, match="bogus"):
        writer.append({**draw(0), "bogus": 1.0})
    assert writer.n_pending == 0
    writer.close()
    with pytest.raises(StorageError, match="closed"):
        writer.append(draw(0))
    with pytest.raises(StorageError, match="closed"):
        writer.commit({})


def test_meta_validation():
    with pytest.raises(ValueError, match="duplicate"):
        make_meta(fields=(("mu0", "f8"),))
    with pytest.raises(ValueError, match="dtype"):
        make_meta(fields=(("x", "nonsense"),))
    with pytest.raises(ValueError, match="numeric"):
        make_meta(fields=(("x", "U3"),))
    with pytest.raises(ValueError, match="invalid dataset name"):
        make_meta(param_names=("a/b",))
    assert make_meta(param_names=list(PARAMS)).param_names == PARAMS


def test_second_writer_is_refused_while_first_is_open(tmp_path):
    path = tmp_path / "c.h5"
    writer, _ = ChainWriter.open(path, make_meta())
    with pytest.raises(StorageError, match="another process"):
        ChainWriter.open(path, make_meta())
    writer.close()
    ChainWriter.open(path, make_meta())[0].close()


# --------------------------------------------------------------------------- commit safety


def test_commit_failure_before_sidecar_leaves_rows_uncommitted(tmp_path, monkeypatch):
    """Rows written to HDF5 but no sidecar replace: readers and resume ignore them."""
    path = tmp_path / "c.h5"
    writer, _ = ChainWriter.open(path, make_meta())
    write_draws(writer, 0, 10)
    writer.commit({"next": 10})
    before = sidecar_path(path).read_bytes()
    write_draws(writer, 10, 17)

    def fail(src, dst):
        raise OSError("simulated crash before os.replace")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(StorageError, match=r"simulated.*last commit \(10 draws\) is intact"):
        writer.commit({"next": 17})
    monkeypatch.undo()
    assert sidecar_path(path).read_bytes() == before
    assert raw_rows(path)["mu0"] == 17  # rows were appended and flushed ...
    assert (writer.n_committed, writer.n_pending) == (10, 7)  # ... but are not committed
    chain = read_chain(path)
    assert chain.n_committed == 10 and chain.checkpoint == {"next": 10}
    assert_rows(chain.draws, 10)
    writer.close()

    writer, checkpoint = ChainWriter.open(path, make_meta())
    assert checkpoint == {"next": 10} and writer.n_committed == 10
    assert set(raw_rows(path).values()) == {10}  # truncated back to the sidecar
    write_draws(writer, 10, 12)
    writer.commit({"next": 12})
    writer.close()
    assert_rows(read_chain(path).draws, 12)


def test_commit_retry_after_failure_stores_each_draw_once(tmp_path, monkeypatch):
    path = tmp_path / "c.h5"
    writer, _ = ChainWriter.open(path, make_meta())
    write_draws(writer, 0, 5)
    real_replace = os.replace
    calls = []

    def flaky(src, dst):
        calls.append((Path(src), Path(dst)))
        if len(calls) == 1:
            raise OSError("disk hiccup")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", flaky)
    with pytest.raises(StorageError, match="disk hiccup"):
        writer.commit({"next": 5})
    write_draws(writer, 5, 8)
    writer.commit({"next": 8})
    writer.close()
    src, dst = calls[-1]
    assert src.parent == dst.parent == path.parent and dst == sidecar_path(path)
    chain = read_chain(path)
    assert chain.n_committed == 8
    assert_rows(chain.draws, 8)
    assert set(raw_rows(path).values()) == {8}


def test_sidecar_write_failing_midway_keeps_old_sidecar(tmp_path, monkeypatch):
    path = tmp_path / "c.h5"
    writer, _ = ChainWriter.open(path, make_meta())
    write_draws(writer, 0, 3)
    writer.commit({"next": 3})
    before = sidecar_path(path).read_bytes()

    real_write_bytes = Path.write_bytes

    def half_write(self, data):  # the temporary sidecar is half written, never renamed
        real_write_bytes(self, data[: len(data) // 2])
        raise RuntimeError("killed mid-write")

    write_draws(writer, 3, 6)
    monkeypatch.setattr(Path, "write_bytes", half_write)
    with pytest.raises(RuntimeError, match="mid-write"):
        writer.commit({"next": 6})
    monkeypatch.undo()
    assert sidecar_path(path).read_bytes() == before
    assert json.loads(before)["draws"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.ckpt.json", "c.h5", "c.lock"]
    assert read_chain(path).n_committed == 3
    writer.commit({"next": 6})
    writer.close()
    assert_rows(read_chain(path).draws, 6)


def test_non_json_checkpoint_is_rejected_before_writing(tmp_path):
    path = tmp_path / "c.h5"
    writer, _ = ChainWriter.open(path, make_meta())
    write_draws(writer, 0, 4)
    with pytest.raises(TypeError):
        writer.commit({"state": object()})
    assert raw_rows(path)["mu0"] == 0
    assert read_sidecar(path)["draws"] == 0  # the empty record written with the file
    assert writer.n_pending == 4
    writer.commit({"next": 4})
    writer.close()
    assert_rows(read_chain(path).draws, 4)


def test_crash_before_first_commit_resumes_empty(tmp_path, monkeypatch):
    path = tmp_path / "c.h5"
    writer, _ = ChainWriter.open(path, make_meta())
    write_draws(writer, 0, 6)

    def fail(src, dst):
        raise OSError("crash before the first sidecar")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(StorageError, match="first sidecar"):
        writer.commit({"next": 6})
    monkeypatch.undo()
    writer.close()
    assert raw_rows(path)["mu0"] == 6 and read_sidecar(path)["draws"] == 0
    assert read_chain(path).n_committed == 0
    writer, checkpoint = ChainWriter.open(path, make_meta())
    assert checkpoint is None and writer.n_committed == 0
    assert set(raw_rows(path).values()) == {0}
    writer.close()


# --------------------------------------------------------------------------- refusals


def _assert_refused(path: Path, match: str, meta: ChainMeta | None = None) -> None:
    files = {p: p.read_bytes() for p in path.parent.iterdir() if p.suffix != ".lock"}
    with pytest.raises(StorageError, match=match) as info:
        ChainWriter.open(path, meta or make_meta())
    assert str(path.with_suffix("")) in str(info.value)  # names the chain file or its sidecar
    assert {p: p.read_bytes() for p in path.parent.iterdir() if p.suffix != ".lock"} == files


def test_foreign_hdf5_file_is_refused_and_untouched(tmp_path):
    path = tmp_path / "chain-03.h5"
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "somebody else's data"
        f.create_dataset("draws/mu0", data=np.arange(5.0))
    _assert_refused(path, "not a hawkes chain file")
    with pytest.raises(StorageError, match="not a hawkes chain file"):
        read_chain(path)
    # the way out names the command that has it (hawkes-diagnose reads these files too)
    with pytest.raises(StorageError, match=r"restore it from a copy, or .*`hawkes-run local "):
        read_chain(path)


def test_non_hdf5_files_are_refused_and_untouched(tmp_path):
    path = tmp_path / "chain-03.h5"
    path.write_text("this is not HDF5\n")
    _assert_refused(path, "not an HDF5 file")
    with pytest.raises(StorageError, match="not an HDF5 file"):
        read_chain(path)
    path.write_bytes(b"")
    _assert_refused(path, "not an HDF5 file")


def test_corrupt_hdf5_file_is_refused(tmp_path):
    path = tmp_path / "chain-03.h5"
    writer, _ = ChainWriter.open(path, make_meta())
    writer.close()
    data = bytearray(path.read_bytes())
    data[48:] = b"\xff" * (len(data) - 48)  # keep the signature, destroy the rest
    path.write_bytes(bytes(data))
    _assert_refused(path, "corrupt")
    with pytest.raises(StorageError, match="corrupt"):
        read_chain(path)


def test_other_config_or_chain_is_refused(tmp_path):
    path = tmp_path / "chain-03.h5"
    writer, _ = ChainWriter.open(path, make_meta())
    write_draws(writer, 0, 5)
    writer.commit({"next": 5})
    writer.close()
    other = make_meta(config_sha256="c" * 64, config_yaml="model: {kind: 2}\n")
    _assert_refused(path, "different config.*new run_dir.*--overwrite", other)
    _assert_refused(path, "chain 3, not chain 4", make_meta(chain_id=4))
    _assert_refused(path, "datasets", make_meta(fields=FIELDS[:-1]))
    assert_rows(read_chain(path).draws, 5)


def test_a_config_differing_in_run_only_keys_resumes_and_the_file_keeps_its_own(tmp_path):
    """``output.commit_every`` (one of ``config.RUN_ONLY_KEYS``) changes no draw: the resume
    goes on, and the rewritten file and its commit records keep the config it was made with."""
    path = tmp_path / "chain-03.h5"
    made = make_meta(config_yaml="model: {kind: 1}\noutput: {commit_every: 5}\n")
    writer, _ = ChainWriter.open(path, made)
    write_draws(writer, 0, 5)
    writer.commit({"next": 5})
    writer.close()
    edited = make_meta(config_sha256="c" * 64, config_yaml=made.config_yaml.replace("5", "9"))
    writer, checkpoint = ChainWriter.open(path, edited)
    assert checkpoint == {"next": 5} and writer.n_committed == 5
    write_draws(writer, 5, 8)
    writer.commit({"next": 8})
    writer.close()
    attrs = read_chain(path).attrs
    assert (attrs["config_sha256"], attrs["config_yaml"]) == (made.config_sha256, made.config_yaml)
    assert read_sidecar(path)["config_sha256"] == made.config_sha256
    assert_rows(read_chain(path).draws, 8)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda attrs: attrs.__delitem__("warmup"), r"root attribute\(s\) warmup missing"),
        (lambda attrs: attrs.__setitem__("seed", "11"), "root attribute 'seed' is '11', not an"),
        (lambda attrs: attrs.__setitem__("chain_id", -3), "chain_id must be >= 0"),
        (lambda attrs: attrs.__setitem__("param_names", "[]"), "param_names must not be empty"),
    ],
    ids=["missing", "not an integer", "negative chain", "no parameters"],
)
def test_root_attributes_that_are_no_chain_are_refused(tmp_path, edit, match):
    """Root attributes that do not make a ChainMeta: the file is corrupt for the reader, the
    chain-file test and the writer (which leaves it untouched)."""
    path = tmp_path / "chain-03.h5"
    writer, _ = ChainWriter.open(path, make_meta())
    write_draws(writer, 0, 5)
    writer.commit({"next": 5})
    writer.close()
    assert is_chain_file(path)
    with h5py.File(path, "r+") as f:
        edit(f.attrs)
    with pytest.raises(StorageError, match=match) as info:
        read_chain(path)
    assert "root attributes do not describe a chain" in str(info.value)
    assert str(info.value).endswith("the file is corrupt")
    assert not is_chain_file(path)
    _assert_refused(path, match)


#: The per-draw fields before the per-iteration cost record (pair_passes ... jump).
OLD_FIELDS = FIELDS[:7]


def test_file_of_an_older_layout_is_refused_but_readable(tmp_path):
    """A chain file written with the earlier field list: resuming it (even under a changed
    config, as the new keys change the resolved config) names the layout and the two ways out;
    its committed draws stay readable with the file's own fields."""
    assert [n for n, _ in OLD_FIELDS][-1] == "scale"
    path = tmp_path / "chain-03.h5"
    writer, _ = ChainWriter.open(path, make_meta(fields=OLD_FIELDS))
    for i in range(5):
        writer.append({k: v for k, v in draw(i).items() if k in dict(OLD_FIELDS) or k in PARAMS})
    writer.commit({"next": 5})
    writer.close()
    for meta in (make_meta(), make_meta(config_sha256="c" * 64)):
        _assert_refused(
            path, r"missing: pair_passes, n_proposals, n_accepted, jump.*another draw layout.*"
            r"Start a new run_dir, or pass --overwrite", meta)  # fmt: skip
    chain = read_chain(path)
    assert chain.attrs["fields"] == OLD_FIELDS
    assert set(chain.draws) == set(PARAMS) | {n for n, _ in OLD_FIELDS}
    np.testing.assert_array_equal(chain.draws["iteration"], np.arange(5))


def resigned(text: str, **members) -> str:
    """A commit record with ``members`` replaced and its checksum recomputed to fit."""
    record = json.loads(text)
    record.update(members)
    record["record_sha256"] = record_digest(record)
    return json.dumps(record)


def test_deleted_sidecar_with_rows_is_refused(tmp_path):
    """Without its commit record a chain file's rows cannot be trusted: never dropped silently."""
    path = tmp_path / "chain-03.h5"
    writer, _ = ChainWriter.open(path, make_meta())
    write_draws(writer, 0, 5)
    writer.commit({"next": 5})
    writer.close()
    sidecar_path(path).unlink()
    _assert_refused(path, "checkpoint .* is missing")
    with pytest.raises(StorageError, match="holds 5 rows"):
        read_chain(path)


def test_flipped_committed_value_is_detected(tmp_path):
    path = tmp_path / "chain-03.h5"
    writer, _ = ChainWriter.open(path, make_meta())
    write_draws(writer, 0, 30)
    writer.commit({"next": 30})
    writer.close()
    with h5py.File(path, "r+") as f:
        f["draws"]["sigma_x"][7] += 1e-12
    _assert_refused(path, "sha256 differs")
    with pytest.raises(StorageError, match="do not match their commit record"):
        read_chain(path)


def test_fingerprint_survives_resumes(tmp_path):
    """The draws' fingerprint is kept across commits and resumes: equal to a fresh hash."""
    path = tmp_path / "chain-03.h5"
    for lo, hi in ((0, 7), (7, 19), (19, 25)):
        writer, _ = ChainWriter.open(path, make_meta())
        write_draws(writer, lo, hi)
        writer.commit({"next": hi})
        writer.close()
    side, chain = read_sidecar(path), read_chain(path)
    columns = tuple((n, "f8") for n in chain.attrs["param_names"]) + chain.attrs["fields"]
    import hashlib

    raw = rows_bytes(columns, chain.draws, 0, 25)
    assert side["draws_sha256"] == hashlib.sha256(raw).hexdigest()
    assert side["last_iteration"] == int(chain.draws["iteration"][-1])


def _read_in_child(path: Path, conn) -> None:
    try:
        read_chain(path)
        conn.send("read")
    except StorageError as exc:
        conn.send(f"StorageError: {exc}")
    except BaseException as exc:
        conn.send(f"{type(exc).__name__}: {exc}")


@pytest.mark.parametrize("offset", [200, 400, 800])
def test_damaged_file_of_a_killed_writer_fails_fast(tmp_path, offset):
    """A file left open for writing (SWMR flags set, as after a SIGKILL) is read through a SWMR
    reader, which skips HDF5's size check and retried bad metadata for up to an hour: 32 bytes
    flipped in its metadata, or a truncation, must give a StorageError within seconds."""
    import multiprocessing
    import shutil

    path = tmp_path / "chain-03.h5"
    writer, _ = ChainWriter.open(path, make_meta())
    write_draws(writer, 0, 40)
    writer.commit({"next": 40})
    killed = tmp_path / "k" / "chain-03.h5"
    killed.parent.mkdir()
    shutil.copyfile(path, killed)  # as the writer left it: open, flags set
    shutil.copyfile(sidecar_path(path), sidecar_path(killed))
    writer.close()
    assert_rows(read_chain(killed).draws, 40)  # undamaged, it reads
    raw = bytearray(killed.read_bytes())
    raw[offset : offset + 32] = bytes(b ^ 0x5A for b in raw[offset : offset + 32])
    cases = {"flipped": bytes(raw), "truncated": killed.read_bytes()[: len(raw) // 2]}
    ctx = multiprocessing.get_context("fork")
    for what, content in cases.items():
        killed.write_bytes(content)
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_read_in_child, args=(killed, child))
        t0 = time.monotonic()
        proc.start()
        got = parent.recv() if parent.poll(30) else "hang"
        proc.kill()
        proc.join()
        assert got.startswith("StorageError"), (what, got)
        assert time.monotonic() - t0 < 30


def test_bad_sidecars_are_refused(tmp_path):
    path = tmp_path / "chain-03.h5"
    writer, _ = ChainWriter.open(path, make_meta())
    write_draws(writer, 0, 5)
    writer.commit({"next": 5})
    writer.close()
    side = sidecar_path(path)
    good = side.read_text()

    side.write_text(good[:20])
    _assert_refused(path, "not valid JSON")
    with pytest.raises(StorageError, match="not valid JSON"):
        read_chain(path)

    side.write_text(good.replace('"draws": 5', '"draws": 50'))
    _assert_refused(path, "fails its checksum")
    with pytest.raises(StorageError, match="fails its checksum"):
        read_chain(path)
    # the same edits with the checksum made to fit: the file disagrees
    side.write_text(resigned(good, draws=50))
    _assert_refused(path, "records 50 committed draws")
    with pytest.raises(StorageError, match="records 50"):
        read_chain(path)
    side.write_text(resigned(good, draws=4))
    _assert_refused(path, "do not match their commit record")
    with pytest.raises(StorageError, match="do not match their commit record"):
        read_chain(path)

    side.write_text(resigned(good, schema=99))
    _assert_refused(path, "schema 99")

    side.write_text(resigned(good, chain_id=7))
    _assert_refused(path, "does not belong")

    side.write_text(good)
    path.unlink()
    with pytest.raises(StorageError, match="exists but chain file"):
        ChainWriter.open(path, make_meta())
    assert not path.exists()


def test_overwrite_replaces_chain_and_foreign_files(tmp_path):
    path = tmp_path / "chain-03.h5"
    writer, _ = ChainWriter.open(path, make_meta())
    write_draws(writer, 0, 5)
    writer.commit({"next": 5})
    writer.close()
    writer, checkpoint = ChainWriter.open(path, make_meta(config_sha256="c" * 64), overwrite=True)
    assert checkpoint is None and writer.n_committed == 0
    assert read_sidecar(path)["draws"] == 0 and read_sidecar(path)["checkpoint"] is None
    writer.close()
    chain = read_chain(path)
    assert chain.n_committed == 0 and chain.attrs["config_sha256"] == "c" * 64

    path.write_text("junk")
    writer, checkpoint = ChainWriter.open(path, make_meta(), overwrite=True)
    write_draws(writer, 0, 3)
    writer.commit({"next": 3})
    writer.close()
    assert_rows(read_chain(path).draws, 3)


def test_read_chain_missing_file(tmp_path):
    with pytest.raises(StorageError, match="does not exist"):
        read_chain(tmp_path / "nope.h5")


# --------------------------------------------------------------------------- real processes

WRITER_SCRIPT = """\
import os, signal, sys, time
from pathlib import Path
from hawkes_cli.storage import ChainWriter
from tests.test_storage import draw, make_meta

path, total, k = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
sleep, mode = float(sys.argv[4]), sys.argv[5]
writer, ckpt = ChainWriter.open(path, make_meta())
start = writer.n_committed
assert (ckpt is None) if start == 0 else (ckpt["next"] == start), (start, ckpt)
say = lambda *words: (sys.stdout.write(" ".join(map(str, words)) + "\\n"), sys.stdout.flush())
say("ready", start)  # one write per line: a kill never leaves half a line, even unbuffered
if mode == "die-before-replace":
    os.replace = lambda src, dst: os.kill(os.getpid(), signal.SIGKILL)
for i in range(start, total):
    writer.append(draw(i))
    if writer.n_pending == k or i == total - 1:
        writer.commit({"next": i + 1, "rng": {"state": i + 1}})
        say("committed", writer.n_committed)
    if sleep:
        time.sleep(sleep)
writer.close()
say("done", writer.n_committed)
"""


def _start(
    tmp_path: Path,
    out: Path,
    path: Path,
    total: int,
    k: int,
    sleep: float = 0.0,
    mode: str = "normal",
) -> subprocess.Popen:
    script = tmp_path / "writer.py"
    script.write_text(WRITER_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(out, "w") as fh:
        return subprocess.Popen(
            [sys.executable, str(script), str(path), str(total), str(k), str(sleep), mode],
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=env,
        )


def _wait_for(out: Path, word: str, proc: subprocess.Popen, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while word not in out.read_text():
        assert proc.poll() is None, f"writer exited early:\n{out.read_text()}"
        assert time.monotonic() < deadline, f"writer never printed {word!r}"
        time.sleep(0.005)


def _last_count(out: Path) -> int | None:
    # only whole lines: with PYTHONUNBUFFERED set (as some CI runners do) a kill used to
    # land between print's separate writes and leave "committed" without its count
    whole = out.read_text().split("\n")[:-1]
    counts = [
        int(line.split()[1])
        for line in whole
        if line.split()[:1] in (["ready"], ["committed"]) and len(line.split()) == 2
    ]
    return counts[-1] if counts else None


@pytest.mark.slow
def test_sigkill_at_random_points_then_resume(tmp_path):
    path = tmp_path / "chains" / "chain-03.h5"
    k = 5
    rng = random.Random(20240531)
    committed = 0
    seen = set()
    for kill in range(12):
        out = tmp_path / f"out-{kill}.txt"
        proc = _start(tmp_path, out, path, total=10**9, k=k)
        if kill % 4 == 1:  # anywhere, including start-up and the resume rewrite
            time.sleep(rng.uniform(0.0, 0.5))
        else:  # inside the append/commit loop
            _wait_for(out, "ready", proc)
            time.sleep(rng.uniform(0.0, 0.25))
        proc.send_signal(signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL, out.read_text()

        printed = _last_count(out)
        lower = committed if printed is None else printed
        chain = read_chain(path) if path.exists() else None
        n = 0 if chain is None else chain.n_committed
        # the kill may land after the sidecar replace but before the print
        assert n in (lower, lower + k), (kill, lower, n, out.read_text()[-300:])
        assert n >= committed
        if chain is not None:
            assert_rows(chain.draws, n)
            assert chain.checkpoint is None if n == 0 else chain.checkpoint["next"] == n
        committed = n
        seen.add(n)
    assert committed > 0 and len(seen) >= 5, seen

    # run to completion (with a final partial block), then resume once more in-process
    total = committed + 3 * k + 2
    out = tmp_path / "out-final.txt"
    proc = _start(tmp_path, out, path, total=total, k=k)
    assert proc.wait(timeout=60) == 0, out.read_text()
    chain = read_chain(path)
    assert chain.n_committed == total and chain.checkpoint["next"] == total
    assert_rows(chain.draws, total)
    writer, checkpoint = ChainWriter.open(path, make_meta())
    assert checkpoint["next"] == total and writer.n_committed == total
    write_draws(writer, total, total + 7)
    writer.commit({"next": total + 7})
    writer.close()
    assert_rows(read_chain(path).draws, total + 7)
    assert set(raw_rows(path).values()) == {total + 7}


def test_sigkill_after_rows_before_sidecar_replace(tmp_path):
    """A writer killed between appending rows and replacing the sidecar loses only that block."""
    path = tmp_path / "chain-03.h5"
    writer, _ = ChainWriter.open(path, make_meta())
    write_draws(writer, 0, 10)
    writer.commit({"next": 10})
    writer.close()
    out = tmp_path / "out.txt"
    proc = _start(tmp_path, out, path, total=100, k=4, mode="die-before-replace")
    assert proc.wait(timeout=30) == -signal.SIGKILL, out.read_text()
    assert list(tmp_path.glob(".chain-03.ckpt.json.*.tmp"))  # written, never replaced
    assert raw_rows(path)["mu0"] == 14  # the block reached the HDF5 file ...
    chain = read_chain(path)
    assert chain.n_committed == 10  # ... but is not committed
    assert_rows(chain.draws, 10)
    writer, checkpoint = ChainWriter.open(path, make_meta())
    assert checkpoint == {"next": 10} and writer.n_committed == 10
    assert set(raw_rows(path).values()) == {10}
    write_draws(writer, 10, 20)
    writer.commit({"next": 20})
    writer.close()
    assert_rows(read_chain(path).draws, 20)


@pytest.mark.slow
def test_read_chain_while_writer_runs(tmp_path):
    path = tmp_path / "chain-03.h5"
    k = 5
    out = tmp_path / "out.txt"
    proc = _start(tmp_path, out, path, total=10**9, k=k, sleep=0.0005)
    try:
        _wait_for(out, "ready", proc)
        with pytest.raises(StorageError, match="another process"):
            ChainWriter.open(path, make_meta())
        counts = []
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            side = read_sidecar(path)  # never a partial JSON
            chain = read_chain(path)
            assert chain.n_committed % k == 0
            assert chain.n_committed >= (side["draws"] if side else 0)
            assert chain.checkpoint is None or chain.checkpoint["next"] == chain.n_committed
            assert_rows(chain.draws, chain.n_committed)
            counts.append(chain.n_committed)
        assert counts == sorted(counts)
        assert len(set(counts)) >= 3, counts
        assert proc.poll() is None, out.read_text()
    finally:
        proc.kill()
        proc.wait()
    chain = read_chain(path)
    assert chain.n_committed >= counts[-1]
    assert_rows(chain.draws, chain.n_committed)
