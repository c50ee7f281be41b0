"""Stable sorts of integer keys by radix passes: the grid index's sorts, redone every time the
locations are redrawn.

:func:`numpy.argsort` with ``kind="stable"`` is a radix sort for 16-bit keys and a merge sort
for wider ones; on a million 64-bit cell keys the merge sort takes ~85 ms (AMD EPYC, one core)
and two 16-bit radix passes ~33 ms. :func:`stable_argsort` sorts the keys' offsets from their
minimum by least-significant-digit passes of 16 bits, as many as the offsets' bit length needs,
and returns exactly what ``numpy.argsort(keys, kind="stable")`` returns (a stable order is
unique). :func:`group_keys` builds :func:`numpy.unique`'s ``return_inverse`` and
``return_counts`` on it, and :func:`lex_key` packs several non-negative digits (a cell's level
and coordinates) into the fewest bits that keep their lexicographic order, so that sorting
them needs as few passes as their ranges allow.
"""

from __future__ import annotations

import numpy as np

#: Below this many keys, or above this many 16-bit passes, numpy's own stable sort is used
#: (four passes of 16 bits cost about one merge sort of 64-bit keys).
RADIX_MIN_KEYS = 4096
RADIX_MAX_PASSES = 3


def stable_argsort(keys: np.ndarray) -> np.ndarray:
    """``numpy.argsort(keys, kind="stable")`` of an integer array, by 16-bit radix passes.

    Parameters
    ----------
    keys : (N,) integer array

    Returns
    -------
    (N,) intp
        The stable ascending order of ``keys``.
    """
    k = np.asarray(keys)
    if k.ndim != 1 or not np.issubdtype(k.dtype, np.integer) or k.size < RADIX_MIN_KEYS:
        return np.argsort(k, kind="stable")
    lo, hi = int(k.min()), int(k.max())
    passes = -(-(hi - lo).bit_length() // 16)
    if passes == 0:
        return np.arange(k.size, dtype=np.intp)
    if passes > RADIX_MAX_PASSES:
        return np.argsort(k, kind="stable")
    if k.dtype.kind == "u":  # offsets from the minimum, in a type they cannot overflow
        offset = k.astype(np.uint64) - np.uint64(lo)
    else:
        offset = (k.astype(np.int64) - np.int64(lo)).astype(np.uint64)
    order = np.argsort((offset & 0xFFFF).astype(np.uint16), kind="stable")
    for p in range(1, passes):
        digit = ((offset[order] >> np.uint64(16 * p)) & 0xFFFF).astype(np.uint16)
        order = order[np.argsort(digit, kind="stable")]
    return order


def group_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Equal integer keys grouped: ``numpy.unique(keys, return_inverse=True,
    return_counts=True)`` and the stable order that sorts them.

    Parameters
    ----------
    keys : (N,) integer array

    Returns
    -------
    unique : (G,) the distinct keys, ascending
    inverse : (N,) intp, the group of each key (``unique[inverse] == keys``)
    counts : (G,) intp, keys per group
    order : (N,) intp, :func:`stable_argsort` of ``keys``
    """
    k = np.asarray(keys)
    order = stable_argsort(k)
    sk = k[order]
    first = np.empty(sk.size, dtype=bool)
    first[:1] = True
    np.not_equal(sk[1:], sk[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    counts = np.diff(np.append(starts, sk.size))
    inverse = np.empty(sk.size, dtype=np.intp)
    inverse[order] = np.cumsum(first) - 1
    return sk[starts], inverse, counts, order


def lex_key(*digits: np.ndarray) -> np.ndarray:
    """One int64 key per row that orders rows as the tuples ``(digits[0][n], digits[1][n],
    ...)`` do: the mixed-radix number with each digit's range ``max + 1`` as its radix.

    Parameters
    ----------
    *digits : (N,) non-negative integer arrays, most significant first

    Returns
    -------
    (N,) int64
        Equal where the tuples are equal, ordered as they are.

    Raises
    ------
    ValueError
        A negative digit, or ranges whose product does not fit in 62 bits.
    """
    key = np.zeros(np.shape(digits[0]), dtype=np.int64)
    total = 1
    for d in digits:
        d = np.asarray(d)
        if d.size and int(d.min()) < 0:
            raise ValueError("lex_key: digits must be non-negative")
        radix = int(d.max()) + 1 if d.size else 1
        total *= radix
        if total >= 1 << 62:
            raise ValueError(f"lex_key: the digits' ranges need {total.bit_length()} bits")
        key *= radix
        key += d
    return key
