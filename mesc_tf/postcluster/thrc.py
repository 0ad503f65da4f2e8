"""thrC (reference-facts §3.1): keep the largest magnitudes of each column of C. The reference's
vectorised form and the blocked form the fast route uses (sparse output), equal bit for bit."""

from __future__ import annotations

import collections
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_info

from mesc_tf.postcluster.checks import check_ratio, check_square

# Bytes of C a block of columns may take (its magnitudes and their partial sort come on top).
_THRC_BLOCK_BYTES = 1 << 24


def thrC_reference(C, ratio: float) -> np.ndarray:
    """thrC vectorised over whole columns with the reference's sort and argsort (n×n int64)."""
    Ind = np.argsort(-np.abs(C), axis=0)
    # The sorted columns as contiguous rows: their sums are then pairwise, as the reference's
    # 1-D column sums (a sum along axis 0 of the sorted array would not give those bits).
    St = np.ascontiguousarray(np.abs(np.sort(-np.abs(C), axis=0)).T)
    t = _thrC_position(St, ratio)
    del St
    keep_sorted = np.arange(C.shape[0])[:, None] <= t[None, :]
    keep = np.zeros(C.shape, dtype=bool)
    np.put_along_axis(keep, Ind, keep_sorted, axis=0)
    return np.where(keep, C, C.dtype.type(0))


def _thrC_position(S_desc, ratio):
    """The reference's t for rows of |C| columns sorted descending (full rows): the first
    position where the sequential running sum, in float64, exceeds ratio × the row's pairwise
    L1 sum; n − 1 where none does (the reference indexes past the end there).

    float64 whatever C's dtype: the reference's ``csum = 0; csum = csum + S[t, i]`` ran under
    NumPy 1.x, where int + float32 scalar is float64 (NumPy 2, NEP 50, keeps float32)."""
    n = S_desc.shape[1]
    cL1 = np.sum(S_desc, axis=1).astype(np.float64)
    hit = np.cumsum(S_desc, axis=1, dtype=np.float64) > (ratio * cL1)[:, None]
    return np.where(hit.any(axis=1), hit.argmax(axis=1), n - 1)


def _columns_as_rows(C, j0, j1, tile=256):
    """C[:, j0:j1].T as a contiguous array, copied tile by tile (3x faster than numpy's
    strided copy for a 10000² C: each tile's rows stay in cache)."""
    out = np.empty((j1 - j0, C.shape[0]), C.dtype)
    for i0 in range(0, C.shape[0], tile):
        out[:, i0:i0 + tile] = C[i0:i0 + tile, j0:j1].T
    return out


def thrC_blocks(C, ratio: float):
    """thrC by blocks of columns: yields (j0, j1, keep, Ct), keep[b, i] for C[i, j0 + b].

    ``Ct`` is the block's columns as contiguous rows. The reference sorts each column's
    magnitudes, runs a float64 running sum down them and stops at the first position t where
    it exceeds ratio × the column's L1 norm (summed pairwise, in the column's dtype); it keeps
    the t+1 largest. Here only the m largest magnitudes are sorted (``np.partition``), their
    running sum is the reference's bit for bit, and the bar uses a float64 L1 norm, which is
    within ~2e-6 (relative) of the reference's. A column whose running sum passes within 1e-5
    of the bar, or not at all within m, is redone exactly as the reference does. The kept set is
    then "|c| ≥ the (t+1)-th largest |c|", the reference's set unless that value is tied with a
    dropped one; such columns (rare with trained float C; every column of a constant C) take
    the reference's argsort.

    The first block sets m for the others, which run ``worker_threads()`` at a time in threads
    (numpy's partition and sort release the GIL; MNIST's thrC takes ~0.6x the time on 2 cores).
    m only decides how much is sorted, not the result.
    """
    n = C.shape[0]
    width = max(1, min(n, _THRC_BLOCK_BYTES // (C.dtype.itemsize * n)))
    *first, m = _thrC_block(C, ratio, 0, width, min(n, 64))
    yield tuple(first)
    rest = range(width, n, width)
    workers = min(worker_threads(), len(rest)) if len(rest) > 1 else 1  # threadpoolctl: ~2 ms
    if workers <= 1:
        for j0 in rest:
            yield _thrC_block(C, ratio, j0, min(n, j0 + width), m)[:4]
        return
    with ThreadPoolExecutor(workers) as pool:
        pending = collections.deque()
        for j0 in rest:  # at most `workers` blocks ahead of the consumer: bounded memory
            pending.append(pool.submit(_thrC_block, C, ratio, j0, min(n, j0 + width), m))
            if len(pending) > workers:
                yield pending.popleft().result()[:4]
        while pending:
            yield pending.popleft().result()[:4]


def worker_threads() -> int:
    """Threads for post-clustering's parallel passes (thrC's column blocks, the affinity's
    rows): as many as BLAS may use (1 in a --jobs worker)."""
    counts = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    return max(1, min(counts)) if counts else 1


def _thrC_block(C, ratio: float, j0: int, j1: int, m: int):
    """One block of ``thrC_blocks``: (j0, j1, keep, Ct, m for the next block)."""
    n = C.shape[0]
    rows = np.arange(j1 - j0)
    Ct = _columns_as_rows(C, j0, j1)
    A = np.abs(Ct)
    bar = ratio * np.sum(A, axis=1, dtype=np.float64)
    tol = 1e-5 * bar + np.finfo(np.float64).tiny
    while True:
        if m < n:
            top = np.partition(np.negative(A), m - 1, axis=1)[:, :m]  # −(m largest)
        else:
            top = np.negative(A)
        top.sort(axis=1)
        np.negative(top, out=top)  # the m largest |c|, descending: the reference's S[:m]
        csum = np.cumsum(top, axis=1, dtype=np.float64)  # as _thrC_position
        hit = csum > bar[:, None]
        found = hit.any(axis=1)
        if found.all() or m == n:
            break
        m = min(n, 4 * m)
    t = np.where(found, hit.argmax(axis=1), n - 1)
    v = top[rows, np.minimum(t, m - 1)]  # the (t+1)-th largest magnitude
    after = csum[rows, np.minimum(t, m - 1)]
    before = np.where(t > 0, csum[rows, np.maximum(t - 1, 0)], -np.inf)
    unsure = ~found | (after - bar <= tol) | (bar - before <= tol)
    for b in np.flatnonzero(unsure):  # the reference's computation, for this column
        S = np.negative(np.sort(np.negative(A[b]))[None, :])
        t[b] = _thrC_position(S, ratio)[0]
        v[b] = S[0, t[b]]
    m_next = min(n, max(64, int(1.5 * t.max()) + 16))
    del top, csum, hit
    keep = A >= v[:, None]
    tied = np.flatnonzero((np.count_nonzero(keep, axis=1) != t + 1) & (v > 0))
    for b in tied:
        ind = np.argsort(-A[b])  # the reference's argsort(-|C|, axis=0) on this column
        keep[b] = False
        keep[b, ind[: t[b] + 1]] = True
    return j0, j1, keep, Ct, m_next


def thrC(C, ratio: float) -> np.ndarray:
    """Column-wise thresholding of reference-facts §3.1, bit for bit.

    For each column, keep the t+1 largest-magnitude entries (signs kept), where t is the first
    sorted position at which the running sum of magnitudes is strictly greater than
    ``ratio`` × the column's L1 norm; zero the rest. ``ratio >= 1`` returns a copy of C.
    A column whose running sum never passes the bar (all zero, or ratio within float rounding
    of 1) is kept whole, so an all-zero column stays zero; the original indexes past the end
    there. A float dtype is kept, except float16, which becomes float32; integer and bool C's
    become float64 (as on every route).
    """
    C = check_square(C, "thrC")
    ratio = check_ratio(ratio)
    if ratio >= 1:
        return C.copy()
    out = np.zeros(C.shape, C.dtype)  # C order, as the reference's np.zeros((N, N)), whatever C's
    for j0, j1, keep, Ct in thrC_blocks(C, ratio):
        out[:, j0:j1] = np.where(keep, Ct, Ct.dtype.type(0)).T
    return out


def thrC_sparse(C, ratio: float) -> sp.csc_array:
    """thrC as a CSC array (explicit zeros dropped: they are zero either way)."""
    n = C.shape[0]
    if ratio >= 1:
        return sp.csc_array(C)
    indptr, indices, data = [np.zeros(1, np.int64)], [], []
    for _, _, keep, Ct in thrC_blocks(C, ratio):
        keep &= Ct != 0
        indptr.append(indptr[-1][-1] + np.cumsum(np.count_nonzero(keep, axis=1)))
        indices.append(np.nonzero(keep)[1])  # row-major over (column, row): CSC order
        data.append(Ct[keep])
    indices = np.concatenate(indices)
    index_dtype = np.int32 if indices.size < 2**31 - 1 else np.int64
    return sp.csc_array((np.concatenate(data), indices.astype(index_dtype),
                         np.concatenate(indptr).astype(index_dtype)), shape=(n, n))
