"""Row partitioning, the serial communicator and launcher detection (hawkes_cli.parallel).

Row blocks are also checked end to end: the partial log-likelihoods of the blocks of
``partition_rows`` add up to the full one, for the reference and the OpenCL backends, including
blocks that cut a tie group of a day lattice.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hawkes_cli.engine.base import Likelihood
from hawkes_cli.engine.reference import ReferenceBackend
from hawkes_cli.engine.times import TimeStructure
from hawkes_cli.errors import ParallelError
from hawkes_cli.parallel import SerialComm, launched_by_mpi, local_rank, partition_rows

from .conftest import PARAMS, build_backend, make_events

SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "PMIX_SIZE")
LOCAL_RANK_VARS = (
    "SLURM_LOCALID",
    "MPI_LOCALRANKID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_RANK",
)


# --------------------------------------------------------------------------- partition_rows
def check_partition(cost: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """Assert the contract of partition_rows and return the blocks."""
    cost = np.asarray(cost, dtype=np.float64)
    n = cost.size
    blocks = partition_rows(cost, parts)
    assert len(blocks) == parts
    assert blocks[0][0] == 0
    assert blocks[-1][1] == n
    for (_, a1), (b0, _) in itertools.pairwise(blocks):
        assert a1 == b0, f"blocks not contiguous: {blocks}"
    for start, stop in blocks:
        assert 0 <= start <= stop <= n
        if parts <= n:
            assert stop > start, f"empty block with parts={parts} <= N={n}: {blocks}"
    if n:
        total = float(cost.sum())
        slack = float(cost.max()) * (1 + 1e-12) + 1e-9 * total
        per_block = [float(cost[a:b].sum()) for a, b in blocks]
        for k, c in enumerate(per_block):
            assert abs(c - total / parts) <= slack, (
                f"block {k} costs {c}, target {total / parts}, max row cost {cost.max()}"
            )
    return blocks


@pytest.mark.parametrize("parts", [1, 2, 3, 4, 7, 16])
@pytest.mark.parametrize("n", [1, 5, 97, 1000])
def test_uniform_cost(n, parts):
    blocks = check_partition(np.ones(n), parts)
    if parts <= n:  # uniform rows: sizes differ by at most one row (plus rounding of targets)
        sizes = [b - a for a, b in blocks]
        assert max(sizes) - min(sizes) <= 2


def test_single_part_is_everything():
    cost = np.random.default_rng(0).uniform(0, 5, 321)
    assert partition_rows(cost, 1) == [(0, 321)]


def test_hand_computed_blocks():
    # cum = 1, 2, 3, 4, 5, 6; targets 2 and 4: cut after the rows reaching them
    assert partition_rows(np.ones(6), 3) == [(0, 2), (2, 4), (4, 6)]
    # one heavy row in the middle: cum = 1, 2, 12, 13; target 6.5 is reached at row 2
    assert partition_rows(np.array([1.0, 1.0, 10.0, 1.0]), 2) == [(0, 3), (3, 4)]


@pytest.mark.parametrize("parts", [2, 3, 8])
def test_triangular_cost_is_balanced_by_work_not_rows(parts):
    n = 4000
    cost = np.arange(n, dtype=np.float64) + 1.0  # trigger work of row n is ~n
    blocks = check_partition(cost, parts)
    sizes = [b - a for a, b in blocks]
    # balanced by work: the first block has many more rows than the last one
    assert sizes[0] > 1.5 * sizes[-1]
    # the k-th cut of a triangle sits near N * sqrt(k / parts)
    for k in range(1, parts):
        assert blocks[k][0] == pytest.approx(n * np.sqrt(k / parts), abs=2)


@pytest.mark.parametrize("integer_days", [True, False], ids=["days", "continuous"])
@pytest.mark.parametrize("parts", [2, 3, 5])
def test_row_cost_of_time_structure(integer_days, parts):
    t, *_ = make_events(3000, integer_days=integer_days, seed=11)
    ts = TimeStructure.from_times(t)
    cost = ts.row_cost()
    assert cost.shape == (3000,)
    assert np.all(cost > 0)
    # trigger part: lo[n] sources strictly earlier; by hand for a few rows
    for i in (0, 1, 500, 2999):
        assert ts.lo[i] == np.count_nonzero(t < t[i])
    check_partition(cost, parts)


@pytest.mark.parametrize("parts", [4, 10])
def test_more_parts_than_rows(parts):
    blocks = check_partition(np.ones(3), parts)
    covered = [i for a, b in blocks for i in range(a, b)]
    assert covered == [0, 1, 2]  # every row exactly once
    assert sum(1 for a, b in blocks if b > a) == 3


def test_empty_and_zero_cost():
    assert partition_rows(np.zeros(0), 3) == [(0, 0)] * 3
    blocks = partition_rows(np.zeros(5), 2)
    assert blocks[0][0] == 0 and blocks[-1][1] == 5
    assert blocks[0][1] == blocks[1][0]


@pytest.mark.parametrize("parts", [0, -1])
def test_bad_parts(parts):
    with pytest.raises(ParallelError, match="must be >= 1"):
        partition_rows(np.ones(4), parts)


# --------------------------------------------------------------------------- row blocks
def _block_sum(make_backend, t, parts):
    """Sum of the per-block (local) log-likelihoods for the partition of row_cost."""
    blocks = partition_rows(TimeStructure.from_times(t).row_cost(), parts)
    total = 0.0
    rows_seen = 0
    for rows in blocks:
        lik = Likelihood(make_backend(rows), t)
        ev = lik.evaluate(PARAMS)  # one rank (SerialComm): its own rows' share
        part, B, E = ev.loglik, ev.B, ev.E
        assert B.shape == E.shape == (rows[1] - rows[0],)
        rows_seen += B.size
        total += part
    assert rows_seen == t.size
    return total, blocks


@pytest.mark.parametrize("model", [1, 2])
@pytest.mark.parametrize("parts", [2, 3, 7])
def test_reference_blocks_add_up(model, parts):
    t, x, y, d = make_events(700, integer_days=True, seed=5)

    def backend(rows=None):
        return ReferenceBackend(t, x, y, d, model=model, area=1000.0, rows=rows)

    full = Likelihood(backend(), t).loglik(PARAMS)
    total, blocks = _block_sum(backend, t, parts)
    # the day lattice ties many events: at least one cut falls inside a tie group
    assert any(0 < a < t.size and t[a - 1] == t[a] for a, _ in blocks)
    assert total == pytest.approx(full, rel=1e-12)


@pytest.mark.opencl
@pytest.mark.parametrize("model", [1, 2])
@pytest.mark.parametrize("parts", [2, 3])
def test_opencl_blocks_add_up(model, parts):
    t, x, y, d = make_events(700, integer_days=True, seed=6)
    ref = Likelihood(ReferenceBackend(t, x, y, d, model=model, area=1000.0), t)
    full = ref.evaluate(PARAMS)

    def backend(rows=None):
        return build_backend(
            "opencl", t, x, y, d, model=model, area=1000.0, precision="float64", rows=rows
        )

    total, blocks = _block_sum(backend, t, parts)
    assert total == pytest.approx(full.loglik, rel=1e-12)
    # per-row parts of a middle block equal the reference's rows
    a, b = blocks[1]
    part = Likelihood(backend((a, b)), t).evaluate(PARAMS)
    np.testing.assert_allclose(part.B, full.B[a:b], rtol=1e-12)
    np.testing.assert_allclose(part.E, full.E[a:b], rtol=1e-12, atol=1e-300)


@pytest.mark.opencl
def test_opencl_empty_and_single_row_blocks():
    t, x, y, d = make_events(50, integer_days=True, seed=7)
    full = Likelihood(ReferenceBackend(t, x, y, d, model=1, area=100.0), t).loglik(PARAMS)
    total = 0.0
    for rows in [(0, 0), (0, 1), (1, 1), (1, 49), (49, 50), (50, 50)]:
        backend = build_backend(
            "opencl", t, x, y, d, model=1, area=100.0, precision="float64", rows=rows
        )
        total += Likelihood(backend, t).evaluate(PARAMS).loglik
    assert total == pytest.approx(full, rel=1e-12)


# --------------------------------------------------------------------------- SerialComm
def test_serial_comm():
    comm = SerialComm()
    assert (comm.rank, comm.size) == (0, 1)
    value = comm.allreduce_sum(np.float32(1.5))
    assert type(value) is float and value == 1.5
    assert comm.allreduce_sum(-2) == -2.0
    obj = {"a": [1, 2]}
    assert comm.bcast(obj) is obj
    assert comm.bcast(obj, root=0) is obj
    assert comm.barrier() is None


# --------------------------------------------------------------------------- environment
@pytest.fixture
def clean_env(monkeypatch):
    for var in (*SIZE_VARS, *LOCAL_RANK_VARS):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_not_launched_without_env(clean_env):
    assert launched_by_mpi() is False


@pytest.mark.parametrize(
    ("var", "value", "expected"),
    [
        ("PMI_SIZE", "1", False),
        ("PMI_SIZE", "2", True),
        ("PMI_SIZE", "16", True),
        ("PMI_SIZE", "", False),
        ("PMI_SIZE", "two", False),
        ("OMPI_COMM_WORLD_SIZE", "4", True),
        ("PMIX_SIZE", "1", False),
        ("MPI_LOCALNRANKS", "3", True),
    ],
)
def test_launched_by_mpi(clean_env, var, value, expected):
    clean_env.setenv(var, value)
    assert launched_by_mpi() is expected


def test_local_rank_default_serial(clean_env):
    assert local_rank(SerialComm()) == 0


def test_local_rank_from_slurm(clean_env):
    clean_env.setenv("SLURM_LOCALID", "3")
    assert local_rank(SerialComm()) == 3


def test_local_rank_from_mpich(clean_env):
    clean_env.setenv("MPI_LOCALRANKID", "5")
    assert local_rank(SerialComm()) == 5


def test_local_rank_slurm_wins_over_launcher(clean_env):
    clean_env.setenv("MPI_LOCALRANKID", "1")
    clean_env.setenv("SLURM_LOCALID", "2")
    clean_env.setenv("PMI_SIZE", "4")
    assert local_rank(SerialComm()) == 2


def test_local_rank_skips_non_numeric(clean_env):
    clean_env.setenv("SLURM_LOCALID", "")
    clean_env.setenv("MPI_LOCALRANKID", "x")
    clean_env.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "7")
    assert local_rank(SerialComm()) == 7
