"""post_proC as the released scripts run it (reference-facts §3.2): dense pre-treatment, svds,
the affinity by the scripts' formulas and sklearn's SpectralClustering. The definition that
the fast route is tested against."""

from __future__ import annotations

import inspect

import numpy as np
import scipy.linalg
from scipy.sparse.linalg import ArpackError, LinearOperator, aslinearoperator, eigsh, svds
from sklearn.cluster import SpectralClustering
from sklearn.preprocessing import normalize

from mesc_tf.config import check_seed
from mesc_tf.errors import MescError
from mesc_tf.postcluster.checks import (affinity_top, check_affinity_args, check_clusters,
                                        check_square, check_variant)


def pretreat(C, variant: str = "mesc") -> np.ndarray:
    """Step 1 of §3.2 in float64: 'mesc' diag := 1 (no symmetrisation), 'dsc' ½(C+Cᵀ),
    'dsc_diag' ½(C+Cᵀ) then diag := 1."""
    check_variant(variant)
    C = check_square(C, "post_proC").astype(np.float64)  # astype copies: C is never modified
    if variant in ("dsc", "dsc_diag"):
        C = 0.5 * (C + C.T)
    if variant in ("mesc", "dsc_diag"):
        np.fill_diagonal(C, 1.0)  # the original comment: makes sparse C numerically stabler
    return C


def rank(n_clusters, subspace_dim, n):
    # svds (ARPACK) needs r < n; DSC ORL applies this clip, elsewhere it never binds.
    return min(int(subspace_dim) * n_clusters + 1, n - 1)


# SciPy's eigsh takes ``rng`` since its ARPACK was rewritten in C; before, the restart
# vectors came from ARPACK's own LAPACK seed (the same sequence in every process).
_EIGSH_TAKES_RNG = "rng" in inspect.signature(eigsh).parameters


def arpack_rng(seed):
    """Keyword arguments giving eigsh a generator for ARPACK's restart vectors (the package
    docstring, mesc_tf.postcluster); none for a seed that is not a whole number (SciPy's
    default: OS entropy)."""
    if not _EIGSH_TAKES_RNG or not isinstance(seed, (int, np.integer)):
        return {}
    return {"rng": np.random.default_rng(int(seed))}


def svds_seeded(C: np.ndarray, r: int, v0: np.ndarray, arpack_kw: dict):
    """``svds(C, r, v0=v0)`` (its ARPACK path, step by step) with eigsh given ``arpack_kw``
    (``arpack_rng``): svds does not pass its own ``rng`` on to eigsh."""
    A = aslinearoperator(C)
    gram = LinearOperator(C.shape, dtype=C.dtype, matvec=lambda x: A.rmatvec(A.matvec(x)),
                          matmat=lambda X: A.rmatmat(A.matmat(X)))
    _, V = eigsh(gram, k=r, tol=0, v0=v0, **arpack_kw)
    V, _ = np.linalg.qr(V)
    u, s, vh = scipy.linalg.svd(A.matmat(V), full_matrices=False, overwrite_a=True)
    return u[:, ::-1], s[::-1], vh[::-1] @ V.T


def svd_embedding(C: np.ndarray, n_clusters: int, subspace_dim: int,
                   arpack_kw=None) -> np.ndarray:
    """Steps 2-5: rank-r left singular vectors scaled by √σ, rows L2-normalised.
    ``arpack_kw``: ``arpack_rng``'s keywords; None or empty runs svds itself (the reference)."""
    n = C.shape[0]
    r = rank(n_clusters, subspace_dim, n)
    # v0 of ones as in the reference: ARPACK's start vector is otherwise random.
    try:
        if not arpack_kw:
            U, s, _ = svds(C, r, v0=np.ones(n))
        else:
            U, s, _ = svds_seeded(C, r, np.ones(n), arpack_kw)
    except ArpackError:
        # ARPACK stops (e.g. error 3, "no shifts could be applied") on a C with many equal
        # singular values, such as ORL's after 30 steps at lr 1e-4. LAPACK's SVD gives the same
        # leading triplets (signs cancel in U·Uᵀ), in svds' ascending order.
        U, s, _ = np.linalg.svd(C, full_matrices=False)
        U, s = U[:, r - 1::-1], s[r - 1::-1]
    U, s = U[:, ::-1], s[::-1]  # scipy returns ascending singular values; the code reverses them
    # U.dot(diag(√s)) there: the same products, laid out by rows, which sets how sklearn's
    # row norms round (on the reversed view they differ in the last bit).
    return normalize(np.ascontiguousarray(U * np.sqrt(s)), norm="l2", axis=1)


def affinity_from_embedding(U: np.ndarray, power: float) -> np.ndarray:
    """Steps 6-7: L = |max(UUᵀ, 0)^power| / max, symmetrised."""
    Z = U @ U.T
    Z = Z * (Z > 0)
    with np.errstate(over="ignore"):  # affinity_top names an overflow
        L = np.abs(Z**power)
    L = L / affinity_top(L, power)
    return 0.5 * (L + L.T)


def affinity(C, n_clusters: int, subspace_dim: int, power: float,
             variant: str = "mesc") -> np.ndarray:
    """Steps 1-7 of reference-facts §3.2: the n×n symmetric affinity L (float64, max 1)."""
    C = pretreat(C, variant)
    K, subspace_dim, power = check_affinity_args(n_clusters, subspace_dim, power, C.shape[0])
    return affinity_from_embedding(svd_embedding(C, K, subspace_dim), power)


def spectral(L, n_clusters: int, seed: int | None = 0) -> np.ndarray:
    """Step 8 of §3.2: spectral clustering of the precomputed affinity L; labels 0..K-1.

    The originals leave random_state unset and fit twice (fit, then fit_predict), using the
    second labels. With a fixed seed both fits are identical, so one fit is enough; the
    original's +1 shift to 1..K is left to whoever needs it (see metrics.f1_unmapped).
    """
    L = check_square(L, "spectral", name="L")
    K = check_clusters(n_clusters, L.shape[0], "spectral")
    seed = None if seed is None else check_seed(seed)
    if L.min() < 0:  # sklearn would take square roots of negative degrees
        raise MescError("spectral: the affinity L has negative entries; pass a non-negative "
                        "matrix (affinity() builds one from C)")
    model = SpectralClustering(n_clusters=K, eigen_solver="arpack", affinity="precomputed",
                               assign_labels="discretize", random_state=seed)
    return model.fit(L).labels_.astype(np.int64)


def post_proC(C, n_clusters: int, subspace_dim: int, power: float, variant: str = "mesc",
              seed: int | None = 0) -> np.ndarray:
    """The reference post_proC (§3.2): labels 0..K-1 of the (already thresholded) C."""
    if seed is not None:  # here, not after the SVD
        check_seed(seed)
    return spectral(affinity(C, n_clusters, subspace_dim, power, variant), n_clusters, seed)
