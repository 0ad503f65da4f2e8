"""Post-clustering of a self-expression matrix C: thrC, then post_proC (reference-facts §3.1-§3.2).

Shared by every experiment (MESC and DSC variants). The steps follow the released code exactly,
including the orientation of C (reference-facts §4 pitfall 6: thrC works on columns and MESC takes
the left singular vectors of the unsymmetrised C, so C and Cᵀ give different results) and the
per-variant diagonal handling (pitfall 7). Nondeterminism (pitfall 5): the SVD start vector is
fixed by the reference and the spectral step is seeded here. ARPACK asks for a random vector
when its Krylov space becomes invariant (near-uniform C's, e.g. after a few steps); SciPy (1.17
here) draws it from OS entropy unless eigsh is given ``rng``. The fast route gives every eigsh
call a generator seeded with ``seed`` (``_arpack_rng``), so its labels are repeatable for a
given C and seed; the reference route, through svds and sklearn, is not on such C's.

Pipeline: ``cluster`` = ``thrC`` → ``affinity`` (pre-treat, truncated SVD, affinity L) →
``spectral``. ``post_proC`` is the last two steps, as in the original scripts.

Three methods (``cluster(..., method=...)``, :data:`mesc_tf.config.POST_METHODS`; the default
is "fast"):

* ``"reference"``: the definition, as the released scripts run it: dense float64 pre-treatment,
  ``scipy.sparse.linalg.svds`` (ARPACK on CᵀC, v0 of ones), the affinity by the script's
  formulas, and sklearn's ``SpectralClustering`` (ARPACK shift-invert on the dense Laplacian,
  then ``discretize``). ``post_proC``, ``affinity`` and ``spectral`` are this route.
* ``"fast"``: the same mathematics with cheaper numerics and one n×n float64 buffer instead of
  a dozen (measured against the reference route: README, "Performance"):

  - thrC column block by column block (``_thrC_blocks``): only each column's largest
    magnitudes are sorted, the running sum is the reference's bit for bit, and a column
    whose running sum passes near the bar (or ties at the threshold value) is redone exactly
    as the reference does. The result equals the reference's; it stays sparse (CSC).
  - The rank-r SVD: svds takes the top-r eigenvectors V of CᵀC from ARPACK, then the SVD of
    C·V. Only the eigen-solver changes: a dense LAPACK ``eigh`` of CᵀC for n ≤
    ``DENSE_SVD_MAX_N`` (r is 10-20 % of n there, where ARPACK needs hundreds of restarts),
    else ARPACK on the sparse thresholded C with a smaller Lanczos basis (``SVD_NCV_FACTOR``).
    The affinity depends on the top-r subspace only (signs and rotations inside it cancel in
    U·diag(σ)·Uᵀ), so it agrees with svds' to rounding (~1e-13) if σ_r and σ_{r+1} are
    apart; the gap is checked (``SVD_GAP_MIN``) and svds itself is used when it is not.
  - The affinity is formed in place (syrk, clip, power, scale; exactly symmetric), in memory
    mapped with its pages in place (``_zeroed_buffer``).
  - The spectral step is sklearn's own algorithm without its copies: the normalised Laplacian
    built in place exactly as ``scipy.sparse.csgraph.laplacian``, sklearn's unit diagonal,
    its seeded ARPACK start vector, the same shift-invert ARPACK call, the division by the
    degrees, ``_deterministic_vector_sign_flip`` and sklearn's ``discretize`` with the same
    random state. Up to ``SI_LU_MAX_N`` the shifted matrix is LU-factored in place as scipy
    does, and the labels are sklearn's bit for bit given the same L; above, a Cholesky factor
    (half the LU's flops) serves the same shift-invert, as a block Lanczos (one solve with the
    factor serves a block of vectors; ``BLOCK_SI_MAX_VECTORS``, ``BLOCK_SI_TOL``) with
    ARPACK's single-vector iteration taking over where that has not converged, and the K
    eigenpairs equal sklearn's to rounding (MNIST's within 3e-15). (Lanczos on D^-½·A·D^-½,
    products only, can be tried first: ``LANCZOS_MAX_PRODUCTS``.)
* ``"strict"``: "fast", but where its labels are not certain to be the reference's (below),
  the affinity is recomputed by the reference route and the spectral step run with the LU:
  then the labels are exactly ``"reference"``'s (same BLAS thread settings).

When the labels can differ. The two routes' affinities differ by rounding (~1e-13), so the
labels agree wherever the spectral step is stable under such a change. ``info`` reports it:
``spectral_min_gap`` (the smallest gap between the K smallest Laplacian eigenvalues; below
``SPECTRAL_GAP_MIN`` ARPACK returns an arbitrary basis of a repeated eigenspace, e.g. for a
graph with several components, or power 8 making between-cluster weights ~1e-20) and
``discretize_margin`` (how far ``discretize``'s discrete decisions were from flipping, see
``_discretize_margin``; sklearn's seeding can leave clusters empty, after which its rotation is
arbitrary). ``ill_posed`` is set when either is below its bound; when a sample's row of U·√σ
is rounding noise (``embedding_norm_ratio`` below ``EMBEDDING_NORM_MIN``: the rank-r subspace
misses that sample, and step 5 scales the noise to a unit row); where the fast route falls
back to the reference's svds (an ill-determined rank-r subspace) or to sklearn's LOBPCG
(below); and where sklearn's step runs unchecked (K ≥ n − 1, or scikit-learn < 1.9). In
that regime the reference's own labels change with floating-point noise: on the trained COIL20
C (repeated eigenvalues) and on the released ORL C (empty clusters in discretize), running the
reference route with 1 instead of 2 BLAS threads, or on an L perturbed by 1e-13, renumbers or moves
64-336 labels and moves ACC by up to 3 points. The fast route's labels there are as valid as the
reference's, only not the same digits; ``"strict"`` reproduces them at the reference's cost.
Where ARPACK's shift-invert does not converge at all (an untrained, near-constant C), both
routes hand the affinity to sklearn's own step, which falls back to LOBPCG; the fast and strict
routes flag it in ``info``.

LAPACK's symmetric eigensolver runs with ``EIGH_THREADS`` (1) OpenBLAS threads: its
tridiagonal reduction is memory-bound BLAS-2 with a sync per column, and 2 threads on a busy
2-core machine were 8x slower than 1. BLAS-3 work (products, LU, Cholesky) keeps the library
default, which does not depend on the load, so neither do the results.
"""

from __future__ import annotations

import collections
import functools
import inspect
import mmap
import re
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.sparse.linalg import ArpackError, LinearOperator, aslinearoperator, eigsh, svds
import sklearn
from sklearn.cluster import SpectralClustering
from sklearn.preprocessing import normalize
from threadpoolctl import threadpool_info, threadpool_limits

from mesc_tf.config import VARIANTS, check_post_method
from mesc_tf.errors import MescError, one_line

# OpenBLAS threads for LAPACK's symmetric eigensolver (None: the library's default).
EIGH_THREADS: int | None = 1
# Above this n the spectral step's shift-invert uses a Cholesky factor (half the flops of
# sklearn's LU; the labels then equal sklearn's to rounding, not bit for bit).
SI_LU_MAX_N = 4096
# Products M·x that Lanczos on D^-1/2·A·D^-1/2 may spend above SI_LU_MAX_N before the Cholesky
# route; 0 (the default): the Cholesky route alone. On the trained MNIST C (n = 10000) Lanczos
# needed 371-517 products at power 8 and 1604 at power 16, the configured one, where the
# Cholesky route is worth 640-770 (benchmarks/spectral_routes.py; benchmarks/README.md), and a
# capped attempt that fails costs the cap on top. The benchmark and the tests set a cap.
LANCZOS_MAX_PRODUCTS = 0
# Vectors the block shift-invert (``_block_shift_invert``) may build with the Cholesky factor
# before ARPACK's single-vector shift-invert takes over from scratch; 0: ARPACK at once. MNIST
# (K = 10, blocks of 15) converges in 180 (12 block solves, 2.4 s against ARPACK's 3.2-3.4 s;
# 1.2-1.6 s with SciPy's BLAS throughout, session 33), USPS in 13; a problem that does not
# costs at most these solves on top. Where fewer than BLOCK_SI_MIN_BLOCKS blocks fit (K > 14),
# the blocks are not tried.
BLOCK_SI_MAX_VECTORS = 256
BLOCK_SI_MIN_BLOCKS = 12
# Its convergence test: every Ritz pair's residual ‖S⁻¹y − θy‖ ≤ BLOCK_SI_TOL · θ. At 1e-12 the
# MNIST eigenvectors agree with ARPACK's (tol 0) to |cos| ≥ 1 − 3e-15 (12 block solves).
BLOCK_SI_TOL = 1e-12
# Up to this n the SVD uses a dense eigh of CᵀC (O(n³), but no ARPACK restarts).
DENSE_SVD_MAX_N = 4096
# Above it, ARPACK's Lanczos basis for the k = r + 1 eigenvectors of CᵀC: SVD_NCV_FACTOR·k
# vectors (at least k + 20) where that is fewer than eigsh's 2k + 1. On the trained MNIST C
# (k 322), 400-500 vectors took 6.8-7.2 s against 8.5 s (as many products, less work per
# restart), 350 took 10 s; the same labels (benchmarks/README.md, session 26).
SVD_NCV_FACTOR = 4 / 3
# (σ_r² − σ_{r+1}²) / σ_1² below this: the rank-r subspace is ill-determined; use svds.
SVD_GAP_MIN = 1e-6
# Smallest row norm of U·√σ over the largest. A sample the rank-r subspace (nearly) misses has
# a row of rounding noise, which step 5 scales to norm 1: its affinities are then arbitrary on
# every route. 15 trained C's (ORL, COIL20, EYaleB, USPS and MNIST cells of the main table)
# give 0.006-0.36; such samples give ~1e-15.
EMBEDDING_NORM_MIN = 1e-6
# Smallest gap between the K smallest Laplacian eigenvalues for a well-posed spectral step.
SPECTRAL_GAP_MIN = 1e-6
# Smallest margin of discretize's discrete decisions (see _discretize_margin) for labels that
# do not depend on rounding-level differences in the embedding.
DISCRETIZE_MARGIN_MIN = 1e-6
# sklearn's spectral_embedding: eigsh(laplacian, k, sigma=-1e-5, which="LM", tol=0, v0=v0).
_SIGMA = -1e-5
# Since scikit-learn 1.9; before, eigsh(−laplacian, sigma=1.0), whose labels the in-place step
# does not reproduce (the same eigenvectors only in exact arithmetic). setup.py requires 1.9;
# with an older sklearn installed all the same, the fast route runs sklearn's own step, flagged
# ill-posed (its affinity is the fast route's, which the old shift-invert may not forgive).
_SKLEARN_VERSION = tuple(map(int, re.match(r"(\d+)\.(\d+)", sklearn.__version__).groups()))
_SKLEARN_SIGMA_BELOW_ZERO = _SKLEARN_VERSION >= (1, 9)
_THRC_BLOCK_BYTES = 1 << 24


def _blas_threads(threads):
    """A context limiting BLAS to ``threads`` threads (None: no change)."""
    return threadpool_limits(limits=int(threads) if threads else None, user_api="blas")


# NumPy and SciPy each bring their own OpenBLAS, with its own thread pool, and after a call a
# pool's threads spin for a while before they sleep. A NumPy product or QR just after a SciPy
# solve runs against those spinning threads: in MNIST's block shift-invert, NumPy's `@` and
# `np.linalg.qr` took 1.0 s of the loop's 2.85 s, SciPy's BLAS and LAPACK 0.2 s (and the
# solves ran faster; benchmarks/README.md, session 33). So that loop calls SciPy's.
def _mul(a, b, trans_a=False):
    """a·b, or aᵀ·b, by SciPy's BLAS (float64)."""
    return scipy.linalg.blas.dgemm(1.0, a, b, trans_a=trans_a)


def _orth(a):
    """(Q, R) of the thin QR of a, by SciPy's LAPACK."""
    return scipy.linalg.qr(a, mode="economic", check_finite=False)


def _check_square(C, where: str, name: str = "C") -> np.ndarray:
    """C as a finite square 2-D float array (integers become float64, float16 float32: the
    released code's C is float32, and thrC's blocks assume sums at least that precise).
    ``name``: "C" (a self-expression matrix) or "L" (an affinity), for the messages."""
    what, hint = (("self-expression coefficient matrix",
                   "training probably diverged, lower the learning rate or the regulariser weights")
                  if name == "C" else ("affinity matrix", "pass an affinity with entries in [0, 1]"))
    if sp.issparse(C):
        raise MescError(f"{where}: {name} is a scipy.sparse matrix; pass a dense array "
                        f"({name}.toarray())")
    try:
        C = np.asarray(C)
    except (TypeError, ValueError) as e:  # ragged nested lists
        raise MescError(f"{where}: {name} is not an array of numbers ({one_line(e)})") from None
    if C.ndim != 2 or C.shape[0] != C.shape[1] or C.shape[0] < 2:
        raise MescError(f"{where}: {name} must be a square n×n matrix with n >= 2, got shape "
                        f"{C.shape}; pass the {what}")
    if not np.issubdtype(C.dtype, np.floating):
        if not (np.issubdtype(C.dtype, np.integer) or C.dtype == bool):
            raise MescError(f"{where}: {name} must be numeric, got dtype {C.dtype}; "
                            "pass a float matrix")
        C = C.astype(np.float64)
    elif C.dtype.itemsize < 4:
        C = C.astype(np.float32)
    lo, hi = np.min(C), np.max(C)  # NaN propagates; no n×n temporary, unlike np.isfinite
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise MescError(f"{where}: {name} contains NaN or inf; {hint}")
    # thrC sums each column in C's dtype and the SVD squares C in float64: neither may
    # overflow (past that the fast thrC parts from the reference's, or the SVD fails in numpy).
    big, n = float(max(-lo, hi)), C.shape[0]
    own_max, f64_max = float(np.finfo(C.dtype).max), float(np.finfo(np.float64).max)
    if 2 * n * big >= own_max or n * big * big >= f64_max:
        raise MescError(f"{where}: {name}'s entries are too large (up to {big:.3g} in magnitude): "
                        f"its column sums or {name}ᵀ{name} would overflow; {hint}")
    return C


def _real(value) -> float | None:
    """value as a float where it is a real number (not a string); None otherwise."""
    if isinstance(value, (str, bytes)):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _shown(value) -> str:
    """value for a message: strings quoted, so "3" is not taken for 3."""
    return repr(value) if isinstance(value, (str, bytes)) else str(value)


def _check_clusters(n_clusters, n: int, where: str) -> int:
    k = _real(n_clusters)
    if k is None or not k.is_integer() or not 1 <= k <= n:
        raise MescError(f"{where}: n_clusters must be a whole number between 1 and n={n}, "
                        f"got {_shown(n_clusters)}; check the dataset's number of classes")
    return int(k)


def _check_ratio(ratio):
    r = _real(ratio)
    if r is None or not np.isfinite(r) or r < 0:
        raise MescError(f"thrC: ratio must be a finite number >= 0, got {_shown(ratio)}; "
                        "use e.g. 0.03-0.2 (1 or more keeps C unchanged)")


# ---------------------------------------------------------------------------------------------
# thrC (§3.1)


def _thrC_reference(C, ratio: float) -> np.ndarray:
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


def _thrC_blocks(C, ratio: float):
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

    The first block sets m for the others, which run ``_thrc_workers()`` at a time in threads
    (numpy's partition and sort release the GIL; MNIST's thrC takes ~0.6x the time on 2 cores).
    m only decides how much is sorted, not the result.
    """
    n = C.shape[0]
    width = max(1, min(n, _THRC_BLOCK_BYTES // (4 * n)))
    *first, m = _thrC_block(C, ratio, 0, width, min(n, 64))
    yield tuple(first)
    rest = range(width, n, width)
    workers = min(_thrc_workers(), len(rest)) if len(rest) > 1 else 1  # threadpoolctl: ~2 ms
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


def _thrc_workers() -> int:
    """Threads for thrC's column blocks: as many as BLAS may use (1 in a --jobs worker)."""
    counts = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    return max(1, min(counts)) if counts else 1


def _thrC_block(C, ratio: float, j0: int, j1: int, m: int):
    """One block of ``_thrC_blocks``: (j0, j1, keep, Ct, m for the next block)."""
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
    C = _check_square(C, "thrC")
    _check_ratio(ratio)
    if ratio >= 1:
        return C.copy()
    out = np.zeros(C.shape, C.dtype)  # C order, as the reference's np.zeros((N, N)), whatever C's
    for j0, j1, keep, Ct in _thrC_blocks(C, ratio):
        out[:, j0:j1] = np.where(keep, Ct, Ct.dtype.type(0)).T
    return out


def _thrC_sparse(C, ratio: float) -> sp.csc_array:
    """thrC as a CSC array (explicit zeros dropped: they are zero either way)."""
    n = C.shape[0]
    if ratio >= 1:
        return sp.csc_array(C)
    indptr, indices, data = [np.zeros(1, np.int64)], [], []
    for _, _, keep, Ct in _thrC_blocks(C, ratio):
        keep &= Ct != 0
        indptr.append(indptr[-1][-1] + np.cumsum(np.count_nonzero(keep, axis=1)))
        indices.append(np.nonzero(keep)[1])  # row-major over (column, row): CSC order
        data.append(Ct[keep])
    indices = np.concatenate(indices)
    index_dtype = np.int32 if indices.size < 2**31 - 1 else np.int64
    return sp.csc_array((np.concatenate(data), indices.astype(index_dtype),
                         np.concatenate(indptr).astype(index_dtype)), shape=(n, n))


# ---------------------------------------------------------------------------------------------
# post_proC (§3.2): the reference route


def pretreat(C, variant: str = "mesc") -> np.ndarray:
    """Step 1 of §3.2 in float64: 'mesc' diag := 1 (no symmetrisation), 'dsc' ½(C+Cᵀ),
    'dsc_diag' ½(C+Cᵀ) then diag := 1."""
    _check_variant(variant)
    C = _check_square(C, "post_proC").astype(np.float64)  # astype copies: C is never modified
    if variant in ("dsc", "dsc_diag"):
        C = 0.5 * (C + C.T)
    if variant in ("mesc", "dsc_diag"):
        np.fill_diagonal(C, 1.0)  # the original comment: makes sparse C numerically stabler
    return C


def _check_variant(variant):
    if variant not in VARIANTS:
        raise MescError(f"unknown post_proC variant {variant!r}; choose one of {', '.join(VARIANTS)}")


def _rank(n_clusters, subspace_dim, n):
    # svds (ARPACK) needs r < n; DSC ORL applies this clip, elsewhere it never binds.
    return min(int(subspace_dim) * n_clusters + 1, n - 1)


# SciPy's eigsh takes ``rng`` since its ARPACK was rewritten in C; before, the restart
# vectors came from ARPACK's own LAPACK seed (the same sequence in every process).
_EIGSH_TAKES_RNG = "rng" in inspect.signature(eigsh).parameters


def _arpack_rng(seed):
    """Keyword arguments giving eigsh a generator for ARPACK's restart vectors (module
    docstring); none for a seed that is not a whole number (SciPy's default: OS entropy)."""
    if not _EIGSH_TAKES_RNG or not isinstance(seed, (int, np.integer)):
        return {}
    return {"rng": np.random.default_rng(int(seed))}


def _svds_seeded(C: np.ndarray, r: int, v0: np.ndarray, arpack_kw: dict):
    """``svds(C, r, v0=v0)`` (its ARPACK path, step by step) with eigsh given ``arpack_kw``
    (``_arpack_rng``): svds does not pass its own ``rng`` on to eigsh."""
    A = aslinearoperator(C)
    gram = LinearOperator(C.shape, dtype=C.dtype, matvec=lambda x: A.rmatvec(A.matvec(x)),
                          matmat=lambda X: A.rmatmat(A.matmat(X)))
    _, V = eigsh(gram, k=r, tol=0, v0=v0, **arpack_kw)
    V, _ = np.linalg.qr(V)
    u, s, vh = scipy.linalg.svd(A.matmat(V), full_matrices=False, overwrite_a=True)
    return u[:, ::-1], s[::-1], vh[::-1] @ V.T


def _svd_embedding(C: np.ndarray, n_clusters: int, subspace_dim: int,
                   arpack_kw=None) -> np.ndarray:
    """Steps 2-5: rank-r left singular vectors scaled by √σ, rows L2-normalised.
    ``arpack_kw``: ``_arpack_rng``'s keywords; None or empty runs svds itself (the reference)."""
    n = C.shape[0]
    r = _rank(n_clusters, subspace_dim, n)
    # v0 of ones as in the reference: ARPACK's start vector is otherwise random.
    try:
        if not arpack_kw:
            U, s, _ = svds(C, r, v0=np.ones(n))
        else:
            U, s, _ = _svds_seeded(C, r, np.ones(n), arpack_kw)
    except ArpackError:
        # ARPACK stops (e.g. error 3, "no shifts could be applied") on a C with many equal
        # singular values, such as ORL's after 30 steps at lr 1e-4. LAPACK's SVD gives the same
        # leading triplets (signs cancel in U·Uᵀ), in svds' ascending order.
        U, s, _ = np.linalg.svd(C, full_matrices=False)
        U, s = U[:, r - 1::-1], s[r - 1::-1]
    U, s = U[:, ::-1], s[::-1]  # scipy returns ascending singular values; the code reverses them
    return normalize(U * np.sqrt(s), norm="l2", axis=1)


def _affinity_from_embedding(U: np.ndarray, power: float) -> np.ndarray:
    """Steps 6-7: L = |max(UUᵀ, 0)^power| / max, symmetrised."""
    Z = U @ U.T
    Z = Z * (Z > 0)
    L = np.abs(Z**power)
    top = L.max()
    if not top > 0:
        raise _zero_affinity()
    L = L / top
    return 0.5 * (L + L.T)


def _zero_affinity():
    return MescError("post_proC: the affinity matrix is all zero (C carries no structure); "
                     "check that training produced a non-zero C")


def _check_affinity_args(n_clusters, subspace_dim, power, n):
    K = _check_clusters(n_clusters, n, "post_proC")
    d = _real(subspace_dim)
    if d is None or not d.is_integer() or d < 1:
        raise MescError("post_proC: subspace_dim must be a whole number >= 1, "
                        f"got {_shown(subspace_dim)}")
    p = _real(power)
    if p is None or not np.isfinite(p) or p <= 0:
        raise MescError(f"post_proC: power must be a finite number > 0, got {_shown(power)}")
    return K


def affinity(C, n_clusters: int, subspace_dim: int, power: float, variant: str = "mesc") -> np.ndarray:
    """Steps 1-7 of reference-facts §3.2: the n×n symmetric affinity L (float64, max 1)."""
    C = pretreat(C, variant)
    K = _check_affinity_args(n_clusters, subspace_dim, power, C.shape[0])
    return _affinity_from_embedding(_svd_embedding(C, K, subspace_dim), power)


def spectral(L, n_clusters: int, seed: int | None = 0) -> np.ndarray:
    """Step 8 of §3.2: spectral clustering of the precomputed affinity L; labels 0..K-1.

    The originals leave random_state unset and fit twice (fit, then fit_predict), using the
    second labels. With a fixed seed both fits are identical, so one fit is enough; the
    original's +1 shift to 1..K is left to whoever needs it (see metrics.f1_unmapped).
    """
    L = _check_square(L, "spectral", name="L")
    K = _check_clusters(n_clusters, L.shape[0], "spectral")
    if L.min() < 0:  # sklearn would take square roots of negative degrees
        raise MescError("spectral: the affinity L has negative entries; pass a non-negative "
                        "matrix (affinity() builds one from C)")
    model = SpectralClustering(n_clusters=K, eigen_solver="arpack", affinity="precomputed",
                               assign_labels="discretize", random_state=seed)
    return model.fit(L).labels_.astype(np.int64)


def post_proC(C, n_clusters: int, subspace_dim: int, power: float, variant: str = "mesc",
              seed: int | None = 0) -> np.ndarray:
    """The reference post_proC (§3.2): labels 0..K-1 of the (already thresholded) C."""
    return spectral(affinity(C, n_clusters, subspace_dim, power, variant), n_clusters, seed)


# ---------------------------------------------------------------------------------------------
# post_proC: the fast route


def _pretreat_sparse(Cs, variant: str) -> sp.csr_array:
    """``pretreat`` on a sparse C, same values (float64; ½(a+b) and diag := 1 are exact)."""
    C = sp.csr_array(Cs, dtype=np.float64)
    if variant in ("dsc", "dsc_diag"):
        C = 0.5 * (C + C.T)
    if variant in ("mesc", "dsc_diag"):
        n = C.shape[0]
        C = sp.csr_array(C - sp.diags_array(C.diagonal()) + sp.eye_array(n, format="csr"))
    C.eliminate_zeros()
    return C


def _svd_embedding_fast(Cs, n_clusters: int, subspace_dim: int, info: dict,
                        arpack_kw=None):
    """Steps 2-5 as svds computes them, with another eigen-solver for CᵀC (see the module
    docstring). Returns the embedding, or None where the rank-r subspace is ill-determined."""
    n = Cs.shape[0]
    r = _rank(n_clusters, subspace_dim, n)  # r + 1 <= n: the dense route takes all n pairs
    dense = None
    if n <= DENSE_SVD_MAX_N:
        dense = Cs.toarray()
        if Cs.nnz < 0.05 * n * n:
            gram = (Cs.T @ Cs).toarray()
        else:
            gram = scipy.linalg.blas.dsyrk(1.0, dense.T, trans=0, lower=0)  # upper of CᵀC
        with _blas_threads(EIGH_THREADS):
            w, V = scipy.linalg.eigh(gram, lower=False, subset_by_index=[n - r - 1, n - 1],
                                     driver="evr", overwrite_a=True, check_finite=False)
        del gram
        info["svd"] = "dense eigh of CᵀC"
    elif r + 1 >= n:  # ARPACK needs k < n
        return None
    else:
        Ct = sp.csr_array(Cs.T)
        op = LinearOperator((n, n), dtype=np.float64, matvec=lambda x: Ct @ (Cs @ x),
                            matmat=lambda X: Ct @ (Cs @ X))
        try:
            k = r + 1
            ncv = min(n, max(2 * k + 1, 20), max(int(SVD_NCV_FACTOR * k), k + 20))
            w, V = eigsh(op, k=k, tol=0, v0=np.ones(n), ncv=ncv, **(arpack_kw or {}))
        except ArpackError:
            return None
        info["svd"] = "ARPACK on sparse CᵀC"
    gap = float((w[1] - w[0]) / w[-1]) if w[-1] > 0 else 0.0
    info["svd_gap"] = gap
    if not gap >= SVD_GAP_MIN:
        return None
    # From here exactly svds: orthonormalise, SVD of C·V (descending, as the code reverses).
    V, _ = np.linalg.qr(V[:, 1:])
    Av = (dense @ V) if dense is not None else (Cs @ V)
    u, s, _ = scipy.linalg.svd(Av, full_matrices=False, overwrite_a=True, check_finite=False)
    embedding = u * np.sqrt(s)
    norms = np.linalg.norm(embedding, axis=1)
    ratio = float(norms.min() / norms.max()) if norms.max() > 0 else 0.0
    info["embedding_norm_ratio"] = ratio
    if not ratio >= EMBEDDING_NORM_MIN:
        info["ill_posed"] = True
    return normalize(embedding, norm="l2", axis=1)


def _zeroed_buffer(n: int) -> np.ndarray:
    """An n×n float64 buffer of zeros (Fortran order), as SciPy gives dsyrk, with its memory
    in place (Linux).

    np.zeros gets a buffer's pages one fault at a time at their first write (and asks for
    transparent huge pages, for which the kernel may stop to compact memory): on this project's
    VMs 1.5-2 s for MNIST's 800 MB affinity, more than the syrk that fills it. An anonymous
    mapping with MAP_POPULATE has them all at once: 0.2-0.3 s (benchmarks/README.md, session 33).
    """
    populate = getattr(mmap, "MAP_POPULATE", None)
    if populate is None:
        return np.zeros((n, n), order="F")
    try:
        memory = mmap.mmap(-1, 8 * n * n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | populate)
    except OSError as e:  # e.g. ENOMEM where the kernel does not overcommit
        raise MescError(f"post-clustering: no memory for the {n}×{n} affinity matrix "
                        f"({8 * n * n / 2**30:.2f} GiB): {e.strerror}; free memory or run on a "
                        "machine with more") from e
    return np.frombuffer(memory, dtype=np.float64).reshape((n, n), order="F")


def _affinity_inplace(U: np.ndarray, power: float) -> np.ndarray:
    """Steps 6-7 in one n×n float64 buffer (C order), exactly symmetric."""
    # U·Uᵀ, upper triangle, Fortran order
    Z = scipy.linalg.blas.dsyrk(1.0, U, beta=0.0, c=_zeroed_buffer(U.shape[0]), trans=0,
                                lower=0, overwrite_c=True)
    _mirror_upper(Z)
    L = Z.T  # symmetric: the C-ordered view holds the same matrix
    np.maximum(L, 0.0, out=L)  # Z·(Z > 0): negative entries → 0
    if power in (2, 4, 8, 16):  # repeated squaring: 2-3x faster than pow (within 2 ulp)
        for _ in range(int(power).bit_length() - 1):
            np.multiply(L, L, out=L)
    elif power != 1:
        np.power(L, power, out=L)  # non-negative, so |Z^p| = Z^p
    top = L.max()
    if not top > 0:
        raise _zero_affinity()
    L /= top
    return L  # ½(L + Lᵀ) = L: already symmetric bit for bit


def _mirror_upper(Z, block=512):
    """Copy the upper triangle of the square Z onto its lower triangle, in place."""
    n = Z.shape[0]
    for i0 in range(0, n, block):
        i1 = min(n, i0 + block)
        d = Z[i0:i1, i0:i1]
        d[...] = np.triu(d) + np.triu(d, 1).T
        for j0 in range(i1, n, block):
            j1 = min(n, j0 + block)
            Z[j0:j1, i0:i1] = Z[i0:i1, j0:j1].T


def _normalised_adjacency_inplace(m: np.ndarray):
    """M = D^-½·A·D^-½ with a zero diagonal, in the buffer of the symmetric C-ordered affinity
    m (the normalised Laplacian is I − M). Returns the degrees' square roots dd.

    Same operations as ``scipy.sparse.csgraph.laplacian(m, normed=True, return_diag=True)``
    before its negation: degrees = column sums without the diagonal, divide columns then rows
    by √degree (rows first in the buffer, which holds the transpose; M is symmetric).
    """
    np.fill_diagonal(m, 0)
    w = m.sum(axis=0)
    isolated = w == 0
    w = np.where(isolated, 1, np.sqrt(w))
    m /= w[:, np.newaxis]  # m is symmetric: row i of the transpose is column i of m
    m /= w
    return w


def _shift_inplace(m: np.ndarray):
    """M → laplacian − σI = (1 − σ)I − M, sklearn's shift-invert matrix, in place; returns its
    Fortran-ordered view.

    The steps of csgraph (negate, unit diagonal, which sklearn's ``_set_diag`` sets again) and
    scipy's ``get_OPinv_matvec`` (diagonal −= σ). LAPACK wants Fortran order: the buffer holds
    the transpose, so its Fortran view is that matrix bit for bit and ``lu_factor`` can
    overwrite it instead of copying 8n² bytes.
    """
    n = m.shape[0]
    m *= -1
    m.flat[:: n + 1] = 1  # csgraph sets 1 − isolated, then sklearn's _set_diag sets 1
    m.flat[:: n + 1] -= _SIGMA
    return m.T


def _discretize_margin(vectors, random_state, n_iter_max=20, max_svd_restarts=30):
    """sklearn's ``discretize`` (Yu & Shi's rotation search), step for step, also returning
    how far its discrete decisions were from flipping. Returns (labels, margin).

    The decisions: the rows that seed the rotation (``_seed_rotation``), each row's ``argmax``
    label in every iteration (``_argmax_margin``), the rotation taken from the SVD of the K×K
    label/embedding matrix (its second smallest over largest singular value counts, see below)
    and the convergence test on the Ncut value.
    An embedding perturbed by much less than the margin gives the same labels; the margin is
    in units of the row-normalised embedding (entries in [−1, 1]).
    """
    vectors = _unit_rows(vectors)
    n, k = vectors.shape
    eps = np.finfo(float).eps
    margin = np.inf
    for _ in range(max_svd_restarts):
        rotation, seed_margin = _seed_rotation(vectors, random_state)
        margin = min(margin, seed_margin)
        last, n_iter = 0.0, 0
        while True:
            n_iter += 1
            t_discrete = np.dot(vectors, rotation)
            labels = t_discrete.argmax(axis=1)
            margin = min(margin, _argmax_margin(t_discrete, rotation))
            discrete = sp.csc_array((np.ones(len(labels)), (np.arange(0, n), labels)),
                                    shape=(n, k))
            try:
                U, S, Vh = np.linalg.svd(discrete.T @ vectors)
            except np.linalg.LinAlgError:
                break  # sklearn restarts from a new random row
            # The next rotation, the polar factor Vh.T·U.T, is fixed by the data when the K×K
            # matrix is well away from singular. An empty cluster makes it singular; with one
            # null direction the factor is fixed up to that direction's sign, which LAPACK
            # resolves the same way for nearby matrices; with two or more, it is arbitrary.
            if k > 1:
                margin = min(margin, float(S[-2] / S[0]) if S[0] > 0 else 0.0)
            ncut = 2.0 * (n - S.sum())
            change = abs(ncut - last)
            if change < eps or n_iter > n_iter_max:
                if change > 0 and n_iter <= n_iter_max:
                    margin = min(margin, float(change))  # stopped on a nonzero change
                return labels, margin
            margin = min(margin, float(change))  # a tiny change would have stopped it
            last = ncut
            rotation = np.dot(Vh.T, U.T)
    return labels, 0.0  # sklearn raises here (no SVD converged): no certificate


def _unit_rows(vectors):
    """discretize's normalisation: each column scaled to norm √n with its first entry made
    negative (where it is not zero), then each row scaled to unit norm (a new array)."""
    vectors = np.array(vectors, dtype=np.float64)
    n, k = vectors.shape
    for i in range(k):
        vectors[:, i] = (vectors[:, i] / np.linalg.norm(vectors[:, i])) * np.sqrt(n)
        if vectors[0, i] != 0:
            vectors[:, i] = -1 * vectors[:, i] * np.sign(vectors[0, i])
    return vectors / np.sqrt((vectors**2).sum(axis=1))[:, np.newaxis]


def _seed_rotation(vectors, random_state):
    """discretize's first rotation: a random row, then rows as orthogonal as possible to those
    picked (``c.argmin()``). Returns (rotation, margin): the smallest lead of each argmin over
    its rivals, rows that differ from the pick by more than 1e-6 (an equal *row vector* gives
    the same rotation); inf where there is none (K = 1)."""
    n, k = vectors.shape
    margin = np.inf
    rotation = np.zeros((k, k))
    rotation[:, 0] = vectors[random_state.randint(n), :].T
    c = np.zeros(n)
    for j in range(1, k):
        c += np.abs(np.dot(vectors, rotation[:, j - 1]))
        pick = c.argmin()
        rivals = np.abs(vectors - vectors[pick]).max(axis=1) > 1e-6
        if rivals.any():
            margin = min(margin, float((c[rivals] - c[pick]).min()))
        rotation[:, j] = vectors[pick, :].T
    return rotation, margin


def _argmax_margin(t_discrete, rotation) -> float:
    """The smallest lead of a row's largest entry of ``t_discrete`` over its second (inf with
    one column). Identical rotation columns (the seeding can pick a row twice) tie exactly in
    every row and always resolve to the first: only distinct columns are rivals."""
    distinct = t_discrete[:, np.unique(rotation, axis=1, return_index=True)[1]]
    if distinct.shape[1] < 2:
        return np.inf
    top2 = np.partition(distinct, distinct.shape[1] - 2, axis=1)[:, -2:]
    return float((top2[:, 1] - top2[:, 0]).min())


def _lanczos_smallest(M: np.ndarray, K: int, v0: np.ndarray, info: dict | None = None,
                      arpack_kw=None):
    """The K smallest eigenpairs of the normalised Laplacian I − M, from ARPACK's Lanczos on
    the largest algebraic eigenvalues of M (tol 0, as sklearn's call). Each step is one
    symmetric product that reads half of M, and nothing is factorised. Returns (λ ascending,
    eigenvectors), or None if ARPACK has not converged within ``LANCZOS_MAX_PRODUCTS``;
    ``info["lanczos_products"]`` counts the products either way.
    """
    n = M.shape[0]
    upper = M.T  # the symmetric C-ordered buffer's Fortran view: dsymv reads it without a copy
    products = [0]

    def matvec(x):
        products[0] += 1
        return scipy.linalg.blas.dsymv(1.0, upper, np.ravel(x))

    op = LinearOperator((n, n), dtype=np.float64, matvec=matvec)
    # A basis of 3K (at least 30) vectors: fewer products than ARPACK's default 2K + 1 on MNIST
    # (371 vs 417). ARPACK builds the basis (ncv products), then restarts up to maxiter times
    # (at most ncv − K products each; at least once).
    ncv = min(n - 1, max(3 * K, 30))
    maxiter = max(1, (LANCZOS_MAX_PRODUCTS - ncv) // (ncv - K))
    try:
        mu, vectors = eigsh(op, k=K, which="LA", tol=0, v0=v0, ncv=ncv, maxiter=maxiter,
                            **(arpack_kw or {}))
    except ArpackError:  # ArpackNoConvergence included
        return None
    finally:
        if info is not None:
            info["lanczos_products"] = products[0]
    order = np.argsort(1.0 - mu, kind="stable")
    return 1.0 - mu[order], vectors[:, order]


def _block_shift_invert(solve, n: int, K: int, v0: np.ndarray, seed, info: dict):
    """The K eigenpairs of the Laplacian nearest ``_SIGMA`` by block Lanczos on S⁻¹, S the
    shifted Laplacian whose factor ``solve`` applies to a block of vectors at once (with the
    Cholesky factor of MNIST's 10000² S, 10-15 right-hand sides cost 1.3-2× one).

    Blocks of K + max(2, K/2) vectors, the first holding sklearn's start vector v0, the others
    drawn from ``seed``; full reorthogonalisation (twice) and Rayleigh-Ritz after each block.
    Converged when every Ritz pair's residual ‖S⁻¹y − θy‖ = ‖R·y_last‖ (R from the QR of the
    next block, y_last the Ritz vector's part in the last block: the Lanczos estimate ARPACK
    also uses) is at most ``BLOCK_SI_TOL`` × its θ. Returns (λ ascending, as eigsh
    returns them, eigenvectors), or None without convergence within ``BLOCK_SI_MAX_VECTORS``;
    ``info["block_si_solves"]`` counts the block solves.
    """
    b = K + max(2, K // 2)
    cap = (min(BLOCK_SI_MAX_VECTORS, n - 1) // b) * b
    info["block_si_solves"] = 0
    if cap < BLOCK_SI_MIN_BLOCKS * b:
        return None
    rng = np.random.default_rng(seed if isinstance(seed, (int, np.integer)) else None)
    Q = np.empty((n, cap), order="F")  # orthonormal basis
    H = np.zeros((cap, cap))  # Qᵀ·S⁻¹·Q
    block = rng.standard_normal((n, b))
    block[:, 0] = v0
    Q[:, :b] = _orth(block)[0]
    m = 0
    while True:
        W = solve(Q[:, m:m + b])
        info["block_si_solves"] += 1
        H[:m + b, m:m + b] = _mul(Q[:, :m + b], W, trans_a=True)
        H[m:m + b, :m + b] = H[:m + b, m:m + b].T
        m += b
        theta, Y = scipy.linalg.eigh(H[:m, :m], subset_by_index=[m - K, m - 1])
        for _ in range(2):
            W = W - _mul(Q[:, :m], _mul(Q[:, :m], W, trans_a=True))
        Q_next, R = _orth(W)
        if np.all(np.linalg.norm(R @ Y[m - b:], axis=0) <= BLOCK_SI_TOL * theta):
            lam = 1.0 / theta + _SIGMA  # θ = 1 / (λ − σ)
            order = np.argsort(lam, kind="stable")
            return lam[order], _mul(Q[:, :m], Y[:, order])
        if m + b > cap:
            return None
        # Where a column of W lay (nearly) in span(Q), Q_next holds an arbitrary unit vector
        # there, not orthogonal to Q: one more projection keeps the basis orthonormal.
        Q_next -= _mul(Q[:, :m], _mul(Q[:, :m], Q_next, trans_a=True))
        Q[:, m:m + b] = _orth(Q_next)[0]


class _NotPositiveDefinite(Exception):
    """The Cholesky factorisation failed (and overwrote L)."""


def _spectral_inplace(L: np.ndarray, n_clusters: int, seed, info: dict,
                      exact: bool = False) -> np.ndarray:
    """sklearn's SpectralClustering(eigen_solver='arpack', affinity='precomputed',
    assign_labels='discretize', random_state=seed) on L, step by step; L is overwritten.

    Up to ``SI_LU_MAX_N`` (or with ``exact``) it factors the shifted Laplacian by LU as sklearn
    (through scipy) does, and returns sklearn's labels bit for bit. Above, a Cholesky factor of
    the shifted matrix (half the LU's flops; the LU of a 10000² matrix takes 9-14 s here) does
    sklearn's shift-invert, by blocks (``_block_shift_invert``) or, where those have not
    converged, by ARPACK as sklearn; before it, ARPACK's Lanczos on M = I − Laplacian without a
    factorisation if ``LANCZOS_MAX_PRODUCTS`` allows it and it converges within them. Either
    way the eigenvectors agree with sklearn's to rounding.
    """
    from sklearn.cluster._spectral import discretize
    from sklearn.utils import check_random_state
    from sklearn.utils._arpack import _init_arpack_v0
    from sklearn.utils.extmath import _deterministic_vector_sign_flip

    n, K = L.shape[0], n_clusters
    random_state = check_random_state(seed)
    dd = _normalised_adjacency_inplace(L)
    v0 = _init_arpack_v0(n, random_state)
    large = n > SI_LU_MAX_N and not exact
    arpack_kw = _arpack_rng(seed)
    found = (_lanczos_smallest(L, K, v0, info, arpack_kw)
             if large and LANCZOS_MAX_PRODUCTS > 0 else None)
    if found is not None:
        lam, vectors = found
        info["spectral"] = "ARPACK Lanczos on D^-1/2·A·D^-1/2 (symv), in place"
    else:
        shifted = _shift_inplace(L)
        if large:
            try:
                factor = scipy.linalg.cho_factor(shifted, lower=False, overwrite_a=True,
                                                 check_finite=False)
            except np.linalg.LinAlgError as e:  # not positive definite in floating point
                raise _NotPositiveDefinite from e  # L is overwritten: the caller rebuilds it
            info["spectral"] = "ARPACK shift-invert as sklearn's, Cholesky factor, in place"
            solve = functools.partial(scipy.linalg.cho_solve, factor, check_finite=False)
            found = _block_shift_invert(solve, n, K, v0, seed, info)
        else:
            # scipy's get_OPinv_matvec for a dense A: LU of A − σI, lu_solve per ARPACK request.
            factor = scipy.linalg.lu_factor(shifted, overwrite_a=True, check_finite=False)
            info["spectral"] = "sklearn's ARPACK shift-invert (LU), in place"
            solve = functools.partial(scipy.linalg.lu_solve, factor)
        if found is not None:
            lam, vectors = found
            info["spectral"] = "block shift-invert as sklearn's, Cholesky factor, in place"
        else:
            OPinv = LinearOperator((n, n), dtype=np.float64, matvec=solve)
            shape_only = LinearOperator((n, n), dtype=np.float64, matvec=lambda x: x)
            lam, vectors = eigsh(shape_only, k=K, sigma=_SIGMA, which="LM", tol=0, v0=v0,
                                 OPinv=OPinv, **arpack_kw)
    lam_sorted = np.sort(lam)
    min_gap = float(np.min(np.diff(lam_sorted))) if K > 1 else np.inf
    info["spectral_min_gap"] = min_gap
    info["ill_posed"] = bool(info.get("ill_posed")) or not min_gap >= SPECTRAL_GAP_MIN
    embedding = vectors.T[:K] / dd
    embedding = _deterministic_vector_sign_flip(embedding)
    maps = embedding[:K].T
    state = random_state.get_state()
    labels = discretize(maps, random_state=random_state).astype(np.int64)
    replay = np.random.RandomState()
    replay.set_state(state)
    replayed, margin = _discretize_margin(maps, replay)
    if not np.array_equal(replayed, labels):  # sklearn's discretize changed: no certificate
        margin = 0.0
    info["discretize_margin"] = margin
    info["ill_posed"] = bool(info["ill_posed"]) or not margin >= DISCRETIZE_MARGIN_MIN
    return labels


def _spectral_with_fallbacks(make_L, n_clusters, seed, info, timings, exact=False):
    """``_spectral_inplace`` on the affinity ``make_L()`` builds, with the retries: where the
    Cholesky factor fails (the shifted Laplacian is positive definite only in exact arithmetic)
    the LU on a new L, and where ARPACK does not converge sklearn's own step on a new L (its
    LOBPCG fallback, flagged). Tiny problems (K ≥ n − 1, where eigsh's shift-invert needs
    k < n − 1) go to sklearn at once, flagged: no gap or margin certifies their labels; so does
    every problem under scikit-learn < 1.9 (``_SKLEARN_SIGMA_BELOW_ZERO``). The
    first L's seconds count in ``timings["svd_s"]``, the rest (retries included) in
    ``timings["spectral_s"]``."""
    t0 = time.perf_counter()
    L = make_L()
    t1 = time.perf_counter()
    timings["svd_s"] += t1 - t0
    try:
        if n_clusters + 1 >= L.shape[0]:
            info["spectral"] = "sklearn's (K >= n - 1)"
            info["ill_posed"] = True
            return spectral(L, n_clusters, seed)
        if not _SKLEARN_SIGMA_BELOW_ZERO:
            info["spectral"] = f"sklearn's (scikit-learn {sklearn.__version__} < 1.9)"
            info["ill_posed"] = True
            return spectral(L, n_clusters, seed)
        failed = None
        try:
            return _spectral_inplace(L, n_clusters, seed, info, exact=exact)
        except _NotPositiveDefinite:
            failed = "cholesky"
        except ArpackError:
            failed = "arpack"
        # L is overwritten. Drop it before building it again, outside the except clause,
        # whose traceback holds it too: two n×n buffers at once would pass the memory estimate.
        del L
        if failed == "cholesky":
            try:
                return _spectral_inplace(make_L(), n_clusters, seed, info, exact=True)
            except ArpackError:
                pass
        return _spectral_after_arpack_failed(make_L(), n_clusters, seed, info)
    finally:
        timings["spectral_s"] += time.perf_counter() - t1


def _spectral_after_arpack_failed(L, n_clusters, seed, info):
    """The reference spectral step, whose sklearn falls back to LOBPCG where ARPACK fails
    (degenerate affinities, e.g. a C that has not been trained); the labels are flagged."""
    info["spectral"] = "sklearn's (ARPACK did not converge; its LOBPCG fallback)"
    info["ill_posed"] = True
    return spectral(L, n_clusters, seed)


def _post_proC_fast(Cs, n_clusters, subspace_dim, power, variant, seed, info, timings):
    """post_proC on the thresholded sparse C by the fast route; fills timings."""
    t0 = time.perf_counter()
    C = _pretreat_sparse(Cs, variant)
    U = _svd_embedding_fast(C, n_clusters, subspace_dim, info, _arpack_rng(seed))
    if U is None:  # ill-determined subspace (or ARPACK failed): the reference svds
        info["svd"] = "reference svds (fallback)"
        info["ill_posed"] = True
        U = _svd_embedding(C.toarray(), n_clusters, subspace_dim, _arpack_rng(seed))
    del C
    timings["svd_s"] += time.perf_counter() - t0
    return _spectral_with_fallbacks(lambda: _affinity_inplace(U, power), n_clusters, seed, info,
                                    timings)


def cluster(C, n_clusters: int, thr: float, subspace_dim: int, power: float,
            variant: str = "mesc", seed: int | None = 0, return_timings: bool = False,
            method: str | None = None, info: dict | None = None):
    """thrC then post_proC: labels 0..K-1 of C.

    ``thr`` is the thrC ratio and ``power`` the post_proC exponent (both named ``alpha`` in the
    original scripts, pitfall 7). ``method``: "fast" (default), "strict" (fast, but where the
    spectral step is ill-posed L is recomputed by the reference route, so the labels are the
    reference's exactly) or "reference" (the released scripts' numerics); see the module
    docstring. With ``return_timings=True`` returns ``(labels, timings)``, timings =
    {"thrc_s", "svd_s" (pre-treatment + SVD + affinity), "spectral_s"} in seconds. A dict
    passed as ``info`` receives the route (``method``) and, on the fast and strict routes, which
    solvers ran, the gaps checked and ``ill_posed`` (where strict recomputes, ``svd``,
    ``spectral``, ``spectral_min_gap`` and ``discretize_margin`` are the recomputation's;
    ``svd_gap`` and ``ill_posed`` stay the fast route's).
    """
    method = check_post_method(method)
    _check_variant(variant)
    info = {} if info is None else info
    info["method"] = method
    C = _check_square(C, "thrC")
    _check_ratio(thr)
    K = _check_affinity_args(n_clusters, subspace_dim, power, C.shape[0])
    timings = {"thrc_s": 0.0, "svd_s": 0.0, "spectral_s": 0.0}
    t0 = time.perf_counter()
    if method == "reference":
        Cp = _thrC_reference(C, thr) if thr < 1 else C.copy()
        t1 = time.perf_counter()
        L = affinity(Cp, K, subspace_dim, power, variant)
        del Cp
        t2 = time.perf_counter()
        labels = spectral(L, K, seed)
        timings.update(thrc_s=t1 - t0, svd_s=t2 - t1, spectral_s=time.perf_counter() - t2)
    else:
        Cs = _thrC_sparse(C, thr)
        timings["thrc_s"] = time.perf_counter() - t0
        info["thrc_density"] = Cs.nnz / float(C.shape[0]) ** 2
        labels = _post_proC_fast(Cs, K, subspace_dim, power, variant, seed, info, timings)
        if method == "strict" and info.get("ill_posed"):
            info.update(fallback="reference affinity", svd="reference svds")
            labels = _spectral_with_fallbacks(
                lambda: affinity(thrC(C, thr), K, subspace_dim, power, variant), K, seed,
                info, timings, exact=True)
    if return_timings:
        return labels, timings
    return labels
