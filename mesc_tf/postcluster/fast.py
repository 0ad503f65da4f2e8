"""post_proC by the fast route: the reference's mathematics with cheaper numerics (the
package docstring says what changes and when the labels can differ), and its tuning constants."""

from __future__ import annotations

import functools
import inspect
import mmap
import re
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.sparse.linalg import ArpackError, LinearOperator, eigsh, svds
import sklearn
from sklearn.preprocessing import normalize
from threadpoolctl import threadpool_limits

from mesc_tf.errors import MescError
from mesc_tf.postcluster.checks import affinity_top
from mesc_tf.postcluster.reference import arpack_rng, rank, spectral, svd_embedding
from mesc_tf.postcluster.thrc import worker_threads


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
# The same test for λ_{K+1}, which only the gap check uses: λ within 1e-7·(λ − σ) ≤ 2e-7, a
# fifth of SPECTRAL_GAP_MIN (~1e-12 on trained-like C's). Where its Ritz pair has not passed it,
# ARPACK finds λ_{K+1} on the deflated S⁻¹ (``_next_eigenvalue``).
NEXT_TOL = 1e-7
# Up to this n the SVD uses a dense eigh of CᵀC (O(n³), but no ARPACK restarts).
DENSE_SVD_MAX_N = 4096
# Above it (where PROPACK, below, does not serve), ARPACK's Lanczos basis for the k = r + 1
# eigenvectors of CᵀC: SVD_NCV_FACTOR·k vectors (at least k + 20) where that is fewer than eigsh's
# 2k + 1. On the trained MNIST C (k 322), 400-500 vectors took 6.8-7.2 s against 8.5 s (as many
# products, less work per restart), 350 took 10 s; the same labels (benchmarks/README.md,
# session 26).
SVD_NCV_FACTOR = 4 / 3
# Before ARPACK, PROPACK (svds(solver="propack"): Lanczos bidiagonalisation of C with partial
# reorthogonalisation), asked for SVD_PROPACK_EXTRA triplets more than the k = r + 1 needed: the
# trailing ones converge last, so the k leading ones come out converged. On the trained MNIST C
# (k 322) their residuals were 8e-13·σ₁² (1.4e-8 with none more), and the rank-r subspace agreed
# with ARPACK's to a sine of 4e-12 and with svds' to 6e-12, as ARPACK's with svds' does (5e-12);
# 7.1-8.8 s (with the residual test) against ARPACK's 16-17 s, the same labels; on USPS's, 8.7 s
# against 13.9 s, sines of 1.2-1.7e-11 among the three, the same labels
# (benchmarks/svd_solvers.py; benchmarks/README.md, session 62). Its Lanczos basis may grow to
# SVD_PROPACK_KMAX_FACTOR times the triplets (MNIST used over 1000 for 342). It runs only where
# that is at most SVD_PROPACK_MAX_SHARE·n, so that its work space (2n + 5·kmax floats per basis
# vector) stays under the n² floats of the affinity, which come later. Where it fails, or returns
# a pair whose residual ‖CᵀCv − θv‖ passes SVD_RESIDUAL_MAX·σ₁² (its convergence test is on the
# values), ARPACK runs.
SVD_PROPACK_EXTRA = 20
SVD_PROPACK_KMAX_FACTOR = 6
SVD_PROPACK_MAX_SHARE = 0.25
SVD_RESIDUAL_MAX = 1e-10
# (σ_r² − σ_{r+1}²) / σ_1² below this: the rank-r subspace is ill-determined; use svds.
SVD_GAP_MIN = 1e-6
# Two of the r + 1 eigenvalues of CᵀC found (by ARPACK or PROPACK) this close (relative to σ_1²):
# a multiple eigenvalue, of which the solver may have missed copies, so its gap proves nothing;
# use svds. Distinct values of a trained C's spectrum (spacing ~1e-3 of σ_1²) are this close with
# odds ~1e-7.
SVD_REPEAT_MAX = 1e-12
# Smallest row norm of U·√σ over the largest. A sample the rank-r subspace (nearly) misses has
# a row of rounding noise, which step 5 scales to norm 1: its affinities are then arbitrary on
# every route. 15 trained C's (ORL, COIL20, EYaleB, USPS and MNIST cells of the main table)
# give 0.006-0.36; such samples give ~1e-15.
EMBEDDING_NORM_MIN = 1e-6
# How far U·Uᵀ may differ between the routes (the affinities agree to ~1e-13 at powers >= 1),
# and how far that may move an affinity entry at a power below 1 (``_power_rounding``): 1e5
# times that rounding, still 100 times below the gap and margin bounds, which sit 1e7 above it.
# A C block-diagonal after thrC passes it from power 2/3 up; on noisy C's (n 160-2000) power
# 0.5 gives 1e-10 to 3e-9.
Z_ROUNDING = 1e-12
AFFINITY_ROUNDING_MAX = 1e-8
# Largest relative rounding of a sample's degree (``_degree_rounding``), as the margin bound.
DEGREE_ROUNDING_MAX = 1e-6
# Smallest gap between the K + 1 smallest Laplacian eigenvalues for a well-posed spectral step.
SPECTRAL_GAP_MIN = 1e-6
# Smallest margin of discretize's discrete decisions (see _discretize_margin) for labels that
# do not depend on rounding-level differences in the embedding.
DISCRETIZE_MARGIN_MIN = 1e-6
# The elementwise passes over the n×n affinity run by row ranges in ``worker_threads()``
# threads, each range by sub-blocks of about this many bytes, small enough to stay in a core's
# cache while the steps of one pass (the clip and the squarings) run over them.
_CACHE_BLOCK_BYTES = 1 << 20
# Below this many entries one thread does the pass: starting threads and asking threadpoolctl
# for their count (~2 ms) would cost more than they save. ORL's affinity has 0.16 million
# entries, EYaleB's 5.9 (a random embedding of its size: 0.15 s with threads, 0.17 s without),
# MNIST's 100 (its trained C: 1.0 s with, 1.55 s without).
_THREADED_MIN_ENTRIES = 1 << 22
# sklearn's spectral_embedding: eigsh(laplacian, k, sigma=-1e-5, which="LM", tol=0, v0=v0).
_SIGMA = -1e-5
# Since scikit-learn 1.9; before, eigsh(−laplacian, sigma=1.0), whose labels the in-place step
# does not reproduce (the same eigenvectors only in exact arithmetic). setup.py requires 1.9;
# with an older sklearn installed all the same, the fast route runs sklearn's own step, flagged
# ill-posed (its affinity is the fast route's, which the old shift-invert may not forgive).
_SKLEARN_VERSION = tuple(map(int, re.match(r"(\d+)\.(\d+)", sklearn.__version__).groups()))
_SKLEARN_SIGMA_BELOW_ZERO = _SKLEARN_VERSION >= (1, 9)
# svds' seed keyword: ``rng`` since SciPy 1.15, ``random_state`` before.
_SVDS_RNG = "rng" if "rng" in inspect.signature(svds).parameters else "random_state"


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


def _propack_eigenpairs(Cs, Ct, k: int, rng=None):
    """The k leading eigenpairs (θ ascending, V) of CᵀC from PROPACK (``SVD_PROPACK_EXTRA``),
    or (None, None) where it does not run, fails or returns a pair that has not converged.
    ``rng``: the generator of its start vector (default: seeded with 0)."""
    n = Cs.shape[0]
    asked = k + SVD_PROPACK_EXTRA
    kmax = SVD_PROPACK_KMAX_FACTOR * asked
    if kmax > SVD_PROPACK_MAX_SHARE * n:
        return None, None
    seeded = {_SVDS_RNG: rng if rng is not None else np.random.default_rng(0)}
    try:
        _, s, vt = svds(Cs, k=asked, solver="propack", maxiter=kmax, **seeded)
    except (ValueError, np.linalg.LinAlgError):  # not converged in kmax steps; unavailable
        return None, None
    top = np.argsort(s)[-k:]  # ascending, as eigsh returns them
    w, V = s[top] ** 2, vt[top].T
    if not w[-1] > 0:
        return None, None
    if not _relative_residual(Cs, Ct, w, V) <= SVD_RESIDUAL_MAX:
        return None, None
    return w, V


def _relative_residual(Cs, Ct, w, V) -> float:
    """The largest ‖CᵀCv − θv‖ over the eigenpairs (θ ascending, V), over the largest θ."""
    return float(np.linalg.norm(Ct @ (Cs @ V) - V * w, axis=0).max() / w[-1])


def _svd_embedding_fast(Cs, n_clusters: int, subspace_dim: int, info: dict,
                        arpack_kw=None):
    """Steps 2-5 as svds computes them, with another eigen-solver for CᵀC (see the package
    docstring, mesc_tf.postcluster). Returns the embedding, or None where the rank-r subspace
    is ill-determined."""
    n = Cs.shape[0]
    r = rank(n_clusters, subspace_dim, n)  # r + 1 <= n: the dense route takes all n pairs
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
        k = r + 1
        w, V = _propack_eigenpairs(Cs, Ct, k, (arpack_kw or {}).get("rng"))
        if w is not None:
            info["svd"] = "PROPACK on sparse C"
        else:
            op = LinearOperator((n, n), dtype=np.float64, matvec=lambda x: Ct @ (Cs @ x),
                                matmat=lambda X: Ct @ (Cs @ X))
            try:
                ncv = min(n, max(2 * k + 1, 20), max(int(SVD_NCV_FACTOR * k), k + 20))
                w, V = eigsh(op, k=k, tol=0, v0=np.ones(n), ncv=ncv, **(arpack_kw or {}))
            except ArpackError:
                return None
            info["svd"] = "ARPACK on sparse CᵀC"
        # A value found more than once: CᵀC has a multiple eigenvalue there, whose copies
        # single-vector Lanczos (either solver) finds only by rounding, so it may have skipped
        # some and returned smaller ones (ARPACK: 6 of 13 copies of 1 found, and a false gap of
        # 5e-3). Where it found one copy only, nothing here shows it: the check (ARPACK on CᵀC
        # beside the r + 1 vectors) cost 2 s of MNIST's 27 s on session 57's VM, and a multiple
        # eigenvalue needs a degenerate C (identical blocks, say), where svds' own Lanczos is as
        # arbitrary.
        if np.min(np.diff(w)) <= SVD_REPEAT_MAX * w[-1]:
            info["svd_gap"] = 0.0
            return None
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


def _by_rows(m: np.ndarray, step) -> list:
    """``step(r0, r1)`` over row ranges that cover the n×n buffer ``m``, in ``worker_threads()``
    threads (NumPy's ufuncs release the GIL); their results, in row order. For the elementwise
    passes over the affinity: memory-bound, ~1.6× faster on 2 cores than one ufunc call, and
    exact, as no entry depends on how the rows are split."""
    n = m.shape[0]
    threads = worker_threads() if m.size >= _THREADED_MIN_ENTRIES else 1
    if threads <= 1:
        return [step(0, n)]
    edges = np.linspace(0, n, 4 * threads + 1).astype(int)  # a few ranges per thread
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(step, edges[:-1], edges[1:]))


def _sub_blocks(m: np.ndarray, r0: int, r1: int):
    """Rows r0:r1 of m as views of about ``_CACHE_BLOCK_BYTES`` each."""
    rows = max(1, _CACHE_BLOCK_BYTES // (m.itemsize * m.shape[1]))
    for i in range(r0, r1, rows):
        yield m[i:min(r1, i + rows)]


def _clip_power(L: np.ndarray, power: float) -> float:
    """Z·(Z > 0) raised to ``power``, in place (L holds Z); returns the largest entry."""
    squarings = int(power).bit_length() - 1 if power in (2, 4, 8, 16) else None

    def rows(r0, r1):
        top = 0.0
        for b in _sub_blocks(L, r0, r1):
            np.maximum(b, 0.0, out=b)  # negative entries → 0
            if squarings is not None:  # repeated squaring: 2-3x faster than pow (within 2 ulp)
                for _ in range(squarings):
                    np.multiply(b, b, out=b)
            elif power != 1:
                with np.errstate(over="ignore"):  # affinity_top names an overflow
                    np.power(b, power, out=b)  # non-negative, so |Z^p| = Z^p
            top = np.maximum(top, b.max())  # NaN, should one appear, propagates
        return top

    return float(np.max(_by_rows(L, rows)))


def _affinity_inplace(U: np.ndarray, power: float, info: dict | None = None) -> np.ndarray:
    """Steps 6-7 in one n×n float64 buffer (C order), exactly symmetric. ``info`` receives
    ``degree_rounding`` (``_degree_rounding``), for a power below 1 ``affinity_rounding``
    (``_power_rounding``), and ``ill_posed`` where either is past its bound."""
    # U·Uᵀ, upper triangle, Fortran order
    Z = scipy.linalg.blas.dsyrk(1.0, U, beta=0.0, c=_zeroed_buffer(U.shape[0]), trans=0,
                                lower=0, overwrite_c=True)
    _mirror_upper(Z)
    L = Z.T  # symmetric: the C-ordered view holds the same matrix
    if info is not None:  # the routes' rounding of U·Uᵀ, as the steps below may magnify it
        info["degree_rounding"] = _degree_rounding(L, power)
        bad = not info["degree_rounding"] <= DEGREE_ROUNDING_MAX
        if power < 1:
            info["affinity_rounding"] = _power_rounding(L, power)
            bad = bad or info["affinity_rounding"] > AFFINITY_ROUNDING_MAX
        info["ill_posed"] = bool(info.get("ill_posed")) or bad
    top = affinity_top(L, power, _clip_power(L, power))
    _by_rows(L, lambda r0, r1: np.divide(L[r0:r1], top, out=L[r0:r1]))
    return L  # ½(L + Lᵀ) = L: already symmetric bit for bit


def _degree_rounding(Z, power: float) -> float:
    """The largest relative rounding of a sample's degree in the affinity graph,
    power · Z_ROUNDING / (its largest U·Uᵀ entry with another sample), the degree being led by
    that entry's power; inf where that entry is rounding noise (|entry| ≤ Z_ROUNDING) or
    negative. The Laplacian divides by √degree: a sample linked to no other but by noise
    (degree 1e-23 on a random 32×32 C) gets an arbitrary scale, which moves every label on
    either route. A sample whose entries are all negative is isolated (degree 0): its row of
    the spectral embedding is zero but for rounding, which discretize scales to a unit row, so
    its label differs between the routes too.
    """
    diagonal = Z.diagonal().copy()
    np.fill_diagonal(Z, -np.inf)
    low = float(Z.max(axis=1).min())
    np.fill_diagonal(Z, diagonal)
    return power * Z_ROUNDING / low if low > Z_ROUNDING else np.inf


def _power_rounding(Z, power: float) -> float:
    """How far the affinity max(Z, 0)^power (before the division by its max, 1 for unit rows)
    can move when Z moves by its rounding between the routes, ``Z_ROUNDING``: the most at the
    smallest entry above −Z_ROUNDING, as t ↦ t^power is concave for power < 1. An entry that
    is zero in exact arithmetic (samples whose embeddings are orthogonal, e.g. a C
    block-diagonal after thrC) is rounding noise of either sign, which a power of 0.05 turns
    into 0 or ~0.2: the routes then cluster different graphs, and no gap shows it."""
    low = float(np.min(Z, where=Z > -Z_ROUNDING, initial=np.inf))
    if not np.isfinite(low):
        return 0.0
    return float((low + Z_ROUNDING) ** power - max(low - Z_ROUNDING, 0.0) ** power)


def _mirror_upper(Z, block=512):
    """Copy the upper triangle of the square Z onto its lower triangle, in place, by
    ``block``-square tiles. Each task of ``_by_rows`` takes a range of rows: it reads their
    part of the upper triangle and writes its transpose, columns no other task writes."""
    n = Z.shape[0]

    def band(r0, r1):
        for i0 in range(r0, r1, block):
            i1 = min(r1, i0 + block)
            d = Z[i0:i1, i0:i1]
            d[...] = np.triu(d) + np.triu(d, 1).T
            for j0 in range(i1, n, block):
                j1 = min(n, j0 + block)
                Z[j0:j1, i0:i1] = Z[i0:i1, j0:j1].T

    _by_rows(Z, band)


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

    def rows(r0, r1):  # m is symmetric: row i of the transpose is column i of m
        np.divide(m[r0:r1], w[r0:r1, np.newaxis], out=m[r0:r1])
        np.divide(m[r0:r1], w, out=m[r0:r1])

    _by_rows(m, rows)
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
    _by_rows(m, lambda r0, r1: np.negative(m[r0:r1], out=m[r0:r1]))
    m.flat[:: n + 1] = 1  # csgraph sets 1 − isolated, then sklearn's _set_diag sets 1
    m.flat[:: n + 1] -= _SIGMA
    return m.T


def _discretize_margin(vectors, random_state, n_iter_max=20, max_svd_restarts=30):
    """sklearn's ``discretize`` (Yu & Shi's rotation search), step for step, also returning
    how far its discrete decisions were from flipping. Returns (labels, margin).

    The decisions: the rows that seed the rotation (``_seed_rotation``), each row's ``argmax``
    label in every iteration (``_argmax_margin``), the rotation taken from the SVD of the K×K
    label/embedding matrix (its smallest over largest singular value counts, see below)
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
            # matrix is well away from singular. An empty cluster makes it singular, and then
            # the null direction's term v·uᵀ takes a sign that rounding decides: one empty
            # cluster is enough (the released ORL C, seeds 0 and 3: 33 labels moved).
            margin = min(margin, float(S[-1] / S[0]) if S[0] > 0 else 0.0)
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
    eigenvectors), or None if ARPACK has not converged within ``LANCZOS_MAX_PRODUCTS`` or has
    left a sample's row of the eigenvectors exactly zero (an isolated sample: discretize, which
    scales rows to unit norm, would fail on it; shift-invert leaves rounding there, as
    sklearn's); ``info["lanczos_products"]`` counts the products either way.
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
    if not np.abs(vectors).max(axis=1).all():
        return None
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
    returns them, eigenvectors, λ_{K+1} where its Ritz pair has converged to ``NEXT_TOL``
    by then, else None), or None without convergence within ``BLOCK_SI_MAX_VECTORS``;
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
        # K + 1 Ritz pairs (b >= K + 2): the K wanted, and the next for the gap λ_{K+1} − λ_K
        theta, Y = scipy.linalg.eigh(H[:m, :m], subset_by_index=[m - K - 1, m - 1])
        for _ in range(2):
            W = W - _mul(Q[:, :m], _mul(Q[:, :m], W, trans_a=True))
        Q_next, R = _orth(W)
        residual = np.linalg.norm(R @ Y[m - b:], axis=0)
        if np.all(residual[1:] <= BLOCK_SI_TOL * theta[1:]):
            lam = 1.0 / theta[1:] + _SIGMA  # θ = 1 / (λ − σ)
            order = np.argsort(lam, kind="stable")
            following = 1.0 / theta[0] + _SIGMA if residual[0] <= NEXT_TOL * theta[0] else None
            return lam[order], _mul(Q[:, :m], Y[:, 1:][:, order]), following
        if m + b > cap:
            return None
        # Where a column of W lay (nearly) in span(Q), Q_next holds an arbitrary unit vector
        # there, not orthogonal to Q: one more projection keeps the basis orthonormal.
        Q_next -= _mul(Q[:, :m], _mul(Q[:, :m], Q_next, trans_a=True))
        Q[:, m:m + b] = _orth(Q_next)[0]


def _next_eigenvalue(apply, to_lambda, vectors, seed) -> float:
    """λ_{K+1}, the Laplacian's next eigenvalue after the K whose eigenvectors are the columns
    of ``vectors``: ARPACK on ``apply`` (S⁻¹, or M on the Lanczos route) restricted to their
    orthogonal complement, whose largest eigenvalue ``to_lambda`` maps to λ_{K+1}. Where
    λ_{K+1} ties λ_K the K-th eigenvector is an arbitrary vector of their common eigenspace,
    which no gap among the K themselves shows. NaN where ARPACK does not converge."""
    n = vectors.shape[0]

    def deflated(x):
        x = np.ravel(x)
        x = x - vectors @ (vectors.T @ x)
        y = apply(x)
        return y - vectors @ (vectors.T @ y)

    rng = np.random.default_rng(seed if isinstance(seed, (int, np.integer)) else None)
    v0 = rng.standard_normal(n)
    v0 -= vectors @ (vectors.T @ v0)
    op = LinearOperator((n, n), dtype=np.float64, matvec=deflated)
    try:
        top = eigsh(op, k=1, which="LA", tol=1e-8, v0=v0, return_eigenvectors=False,
                    **arpack_rng(seed))
    except ArpackError:  # ArpackNoConvergence included
        return np.nan
    return float(to_lambda(top[0]))


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
    arpack_kw = arpack_rng(seed)
    found = (_lanczos_smallest(L, K, v0, info, arpack_kw)
             if large and LANCZOS_MAX_PRODUCTS > 0 else None)
    solve = following = None  # following: λ_{K+1}, where the block route has it
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
            if found is not None:
                found, following = found[:2], found[2]
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
    min_gap = np.inf
    if K > 1:  # one cluster: the labels are all 0 whatever the eigenvectors
        if following is None and solve is None:  # Lanczos: L holds M = I − laplacian
            following = _next_eigenvalue(functools.partial(scipy.linalg.blas.dsymv, 1.0, L.T),
                                         lambda mu: 1.0 - mu, vectors, seed)
        elif following is None:  # θ = 1 / (λ − σ)
            following = _next_eigenvalue(solve, lambda theta: 1.0 / theta + _SIGMA, vectors,
                                         seed)
        min_gap = float(np.min(np.diff(np.append(lam_sorted, following))))
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


def spectral_with_fallbacks(make_L, n_clusters, seed, info, timings, exact=False):
    """``_spectral_inplace`` on the affinity ``make_L()`` builds, with the retries: where the
    Cholesky factor fails (the shifted Laplacian is positive definite only in exact arithmetic)
    the LU on a new L, and where ARPACK does not converge sklearn's own step on a new L (its
    LOBPCG fallback, flagged). Tiny problems (K ≥ n − 1: the Krylov bases here hold at most
    n − 1 vectors, and ARPACK needs more than K) go to sklearn at once, flagged: no gap or
    margin certifies their labels; so does every problem under scikit-learn < 1.9
    (``_SKLEARN_SIGMA_BELOW_ZERO``). The first L's seconds count in ``timings["svd_s"]``, the
    rest (retries included) in ``timings["spectral_s"]``."""
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


def post_proC_fast(Cs, n_clusters, subspace_dim, power, variant, seed, info, timings):
    """post_proC on the thresholded sparse C by the fast route; fills timings."""
    t0 = time.perf_counter()
    C = _pretreat_sparse(Cs, variant)
    U = _svd_embedding_fast(C, n_clusters, subspace_dim, info, arpack_rng(seed))
    if U is None:  # ill-determined subspace (or ARPACK failed): the reference svds
        info["svd"] = "reference svds (fallback)"
        info["ill_posed"] = True
        U = svd_embedding(C.toarray(), n_clusters, subspace_dim, arpack_rng(seed))
    del C
    timings["svd_s"] += time.perf_counter() - t0
    return spectral_with_fallbacks(lambda: _affinity_inplace(U, power, info), n_clusters, seed,
                                   info, timings)
