"""Post-clustering of a self-expression matrix C: thrC, then post_proC (reference-facts §3.1-§3.2).

Shared by every experiment (MESC and DSC variants). The steps follow the released code exactly,
including the orientation of C (reference-facts §4 pitfall 6: thrC works on columns and MESC takes
the left singular vectors of the unsymmetrised C, so C and Cᵀ give different results) and the
per-variant diagonal handling (pitfall 7). Nondeterminism (pitfall 5): the SVD start vector is
fixed by the reference and the spectral step is seeded here, so a run is repeatable for a given C.

Pipeline: ``cluster`` = ``thrC`` → ``affinity`` (pre-treat, truncated SVD, affinity L) →
``spectral``. ``post_proC`` is the last two steps, as in the original scripts.
"""

from __future__ import annotations

import time

import numpy as np
from scipy.sparse.linalg import ArpackError, svds
from sklearn.cluster import SpectralClustering
from sklearn.preprocessing import normalize

from mesc_tf.config import VARIANTS
from mesc_tf.errors import MescError


def _check_square(C, where: str) -> np.ndarray:
    """C as a finite square 2-D float array (integers become float64; float32 stays float32)."""
    C = np.asarray(C)
    if C.ndim != 2 or C.shape[0] != C.shape[1] or C.shape[0] < 2:
        raise MescError(f"{where}: C must be a square n×n matrix with n >= 2, got shape {C.shape}; "
                        "pass the self-expression coefficient matrix")
    if not np.issubdtype(C.dtype, np.floating):
        if not (np.issubdtype(C.dtype, np.integer) or C.dtype == bool):
            raise MescError(f"{where}: C must be numeric, got dtype {C.dtype}; pass a float matrix")
        C = C.astype(np.float64)
    if not np.all(np.isfinite(C)):
        raise MescError(f"{where}: C contains NaN or inf; training probably diverged, "
                        "lower the learning rate or the regulariser weights")
    return C


def _check_clusters(n_clusters, n: int, where: str) -> int:
    if int(n_clusters) != n_clusters or not 1 <= n_clusters <= n:
        raise MescError(f"{where}: n_clusters must be a whole number between 1 and n={n}, "
                        f"got {n_clusters}; check the dataset's number of classes")
    return int(n_clusters)


def thrC(C, ratio: float) -> np.ndarray:
    """Column-wise thresholding of reference-facts §3.1, vectorised over columns.

    For each column, keep the t+1 largest-magnitude entries (signs kept), where t is the first
    sorted position at which the running sum of magnitudes is strictly greater than
    ``ratio`` × the column's L1 norm; zero the rest. ``ratio >= 1`` returns a copy of C.
    A column whose running sum never passes the bar (all zero, or ratio within float rounding
    of 1) is kept whole, so an all-zero column stays zero; the original indexes past the end
    there. The dtype is kept.
    """
    C = _check_square(C, "thrC")
    if not np.isfinite(ratio) or ratio < 0:
        raise MescError(f"thrC: ratio must be a finite number >= 0, got {ratio}; "
                        "use e.g. 0.03-0.2 (1 or more keeps C unchanged)")
    if ratio >= 1:
        return C.copy()
    # Same calls as the reference so that ties sort (and are kept) identically.
    S = np.abs(np.sort(-np.abs(C), axis=0))
    Ind = np.argsort(-np.abs(C), axis=0)
    # The reference sums each column as a 1-D array (pairwise summation); summing the rows of
    # the contiguous transpose reproduces those bits, np.sum(S, axis=0) would not.
    cL1 = np.sum(np.ascontiguousarray(S.T), axis=1).astype(np.float64)
    csum = np.cumsum(S, axis=0)  # sequential, in C's dtype, like the reference's running sum
    hit = csum > ratio * cL1
    # First hit per column; a column without a hit keeps everything (see the docstring).
    t = np.where(hit.any(axis=0), hit.argmax(axis=0), C.shape[0] - 1)
    keep_sorted = np.arange(C.shape[0])[:, None] <= t[None, :]
    keep = np.zeros(C.shape, dtype=bool)
    np.put_along_axis(keep, Ind, keep_sorted, axis=0)
    return np.where(keep, C, C.dtype.type(0))


def pretreat(C, variant: str = "mesc") -> np.ndarray:
    """Step 1 of §3.2 in float64: 'mesc' diag := 1 (no symmetrisation), 'dsc' ½(C+Cᵀ),
    'dsc_diag' ½(C+Cᵀ) then diag := 1."""
    if variant not in VARIANTS:
        raise MescError(f"unknown post_proC variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    C = _check_square(C, "post_proC").astype(np.float64)  # astype copies: C is never modified
    if variant in ("dsc", "dsc_diag"):
        C = 0.5 * (C + C.T)
    if variant in ("mesc", "dsc_diag"):
        np.fill_diagonal(C, 1.0)  # the original comment: makes sparse C numerically stabler
    return C


def _svd_embedding(C: np.ndarray, n_clusters: int, subspace_dim: int) -> np.ndarray:
    """Steps 2-5: rank-r left singular vectors scaled by √σ, rows L2-normalised."""
    n = C.shape[0]
    # svds (ARPACK) needs r < n; DSC ORL applies this clip, elsewhere it never binds.
    r = min(int(subspace_dim) * n_clusters + 1, n - 1)
    # v0 of ones as in the reference: ARPACK's start vector is otherwise random.
    try:
        U, s, _ = svds(C, r, v0=np.ones(n))
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
        raise MescError("post_proC: the affinity matrix is all zero (C carries no structure); "
                        "check that training produced a non-zero C")
    L = L / top
    return 0.5 * (L + L.T)


def _check_affinity_args(n_clusters, subspace_dim, power, n):
    K = _check_clusters(n_clusters, n, "post_proC")
    if int(subspace_dim) != subspace_dim or subspace_dim < 1:
        raise MescError(f"post_proC: subspace_dim must be a whole number >= 1, got {subspace_dim}")
    if not np.isfinite(power) or power <= 0:
        raise MescError(f"post_proC: power must be a finite number > 0, got {power}")
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
    L = _check_square(L, "spectral")
    K = _check_clusters(n_clusters, L.shape[0], "spectral")
    model = SpectralClustering(n_clusters=K, eigen_solver="arpack", affinity="precomputed",
                               assign_labels="discretize", random_state=seed)
    return model.fit(L).labels_.astype(np.int64)


def post_proC(C, n_clusters: int, subspace_dim: int, power: float, variant: str = "mesc",
              seed: int | None = 0) -> np.ndarray:
    """The reference post_proC (§3.2): labels 0..K-1 of the (already thresholded) C."""
    return spectral(affinity(C, n_clusters, subspace_dim, power, variant), n_clusters, seed)


def cluster(C, n_clusters: int, thr: float, subspace_dim: int, power: float,
            variant: str = "mesc", seed: int | None = 0, return_timings: bool = False):
    """thrC then post_proC: labels 0..K-1 of C.

    ``thr`` is the thrC ratio and ``power`` the post_proC exponent (both named ``alpha`` in the
    original scripts, pitfall 7). With ``return_timings=True`` returns ``(labels, timings)``,
    timings = {"thrc_s", "svd_s" (pre-treatment + SVD + affinity), "spectral_s"} in seconds.
    """
    t0 = time.perf_counter()
    Cp = thrC(C, thr)
    t1 = time.perf_counter()
    L = affinity(Cp, n_clusters, subspace_dim, power, variant)
    t2 = time.perf_counter()
    labels = spectral(L, n_clusters, seed)
    t3 = time.perf_counter()
    if return_timings:
        return labels, {"thrc_s": t1 - t0, "svd_s": t2 - t1, "spectral_s": t3 - t2}
    return labels
