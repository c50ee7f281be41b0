"""The grid index's radix sorts against numpy's own stable sort and unique (the reference):
the same order and groups for every key width, sign and size, including the fall-backs."""

from __future__ import annotations

import numpy as np
import pytest

from hawkes_cli.engine.keysort import (
    RADIX_MAX_PASSES,
    RADIX_MIN_KEYS,
    group_keys,
    lex_key,
    stable_argsort,
)


@pytest.mark.parametrize(
    "low, high",
    [(0, 1), (-7, 3), (0, 2**16), (5, 2**16 + 6), (0, 2**31), (-(2**40), 2**40), (0, 2**62)],
)
@pytest.mark.parametrize("n", [0, 10, RADIX_MIN_KEYS + 3, 200_001])
def test_stable_argsort_is_numpys_stable_sort(low, high, n):
    """Keys of 0 to 63 bits (1 to 4 radix passes, the last numpy's merge sort), with many
    ties: the order is numpy's ``kind="stable"`` one exactly (a stable order is unique)."""
    rng = np.random.default_rng(n + high % 1000)
    keys = rng.integers(low, high, n, endpoint=True)
    keys[: n // 3] = keys[n // 2 : n // 2 + n // 3]  # ties, whose order stability decides
    np.testing.assert_array_equal(stable_argsort(keys), np.argsort(keys, kind="stable"))


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int16, np.uint64])
def test_stable_argsort_of_other_integer_types(dtype):
    keys = np.random.default_rng(1).integers(0, 30_000, 50_000).astype(dtype)
    np.testing.assert_array_equal(stable_argsort(keys), np.argsort(keys, kind="stable"))


def test_stable_argsort_where_the_keys_own_type_would_overflow():
    """int16 keys spanning more than int16 holds, and uint64 keys above 2**63."""
    rng = np.random.default_rng(4)
    wide = rng.integers(-32_000, 32_000, 50_000).astype(np.int16)
    top = (np.uint64(2**63) + rng.integers(0, 2**20, 50_000).astype(np.uint64)).astype(np.uint64)
    for keys in (wide, top):
        np.testing.assert_array_equal(stable_argsort(keys), np.argsort(keys, kind="stable"))


def test_stable_argsort_of_floats_and_constant_keys():
    """Non-integer keys go to numpy's sort; one repeated key is the identity."""
    q = np.random.default_rng(2).random(10_000)
    np.testing.assert_array_equal(stable_argsort(q), np.argsort(q, kind="stable"))
    np.testing.assert_array_equal(stable_argsort(np.full(9_000, 4)), np.arange(9_000))
    assert RADIX_MAX_PASSES * 16 < 64  # 64-bit keys fall back: checked by the 2**62 case


@pytest.mark.parametrize("high", [3, 5_000, 2**33])
def test_group_keys_is_numpys_unique(high):
    keys = np.random.default_rng(high).integers(0, high, 100_000)
    unique, inverse, counts, order = group_keys(keys)
    want_u, want_i, want_c = np.unique(keys, return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(unique, want_u)
    np.testing.assert_array_equal(inverse, want_i)
    np.testing.assert_array_equal(counts, want_c)
    np.testing.assert_array_equal(order, np.argsort(keys, kind="stable"))


def test_lex_key_orders_as_the_tuples():
    """Sorting by the packed key is sorting by (level, x cell, y cell): numpy's lexsort of the
    same digits (its last key is the primary one)."""
    rng = np.random.default_rng(3)
    level, cx, cy = (
        rng.integers(0, 5, 30_000),
        rng.integers(0, 900, 30_000),
        rng.integers(0, 70, 30_000),
    )
    key = lex_key(level, cx, cy)
    np.testing.assert_array_equal(stable_argsort(key), np.lexsort((cy, cx, level)))
    same = (level[:-1] == level[1:]) & (cx[:-1] == cx[1:]) & (cy[:-1] == cy[1:])
    np.testing.assert_array_equal(key[:-1] == key[1:], same)


def test_lex_key_refuses_what_it_cannot_pack():
    with pytest.raises(ValueError, match="non-negative"):
        lex_key(np.array([0, -1]))
    with pytest.raises(ValueError, match="bits"):
        lex_key(np.array([2**40]), np.array([2**30]))
