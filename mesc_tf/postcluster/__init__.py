"""Post-clustering of a self-expression matrix C: thrC, then post_proC (reference-facts §3.1-§3.2).

Shared by every experiment (MESC and DSC variants). The steps follow the released code exactly,
including the orientation of C (reference-facts §4 pitfall 6: thrC works on columns and MESC takes
the left singular vectors of the unsymmetrised C, so C and Cᵀ give different results) and the
per-variant diagonal handling (pitfall 7). Nondeterminism (pitfall 5): the SVD start vector is
fixed by the reference and the spectral step is seeded here. ARPACK asks for a random vector
when its Krylov space becomes invariant (near-uniform C's, e.g. after a few steps); SciPy (1.17
here) draws it from OS entropy unless eigsh is given ``rng``. The fast route gives every eigsh
call a generator seeded with ``seed`` (``arpack_rng``; where it hands the step to sklearn,
flagged ill-posed, sklearn's own calls have none), so its labels are repeatable for a
given C and seed; the reference route, through svds and sklearn, is not on such C's.

Pipeline: ``cluster`` = ``thrC`` → ``affinity`` (pre-treat, truncated SVD, affinity L) →
``spectral``. ``post_proC`` is the last two steps, as in the original scripts.

Three methods (``cluster(..., method=...)``, :data:`mesc_tf.config.POST_METHODS`; the default
is "fast"):

* ``"reference"``: the definition, as the released scripts run it: dense float64 pre-treatment,
  ``scipy.sparse.linalg.svds`` (ARPACK on CᵀC, v0 of ones), the affinity by the script's
  formulas, and sklearn's ``SpectralClustering`` (ARPACK shift-invert on the dense Laplacian,
  then ``discretize``). ``post_proC``, ``affinity`` and ``spectral`` are this route.
* ``"fast"``: the same mathematics with cheaper numerics and, for the affinity and spectral
  steps, one n×n float64 buffer instead of a dozen (measured against the reference route:
  README, "Performance"):

  - thrC column block by column block (``thrC_blocks``): only each column's largest
    magnitudes are sorted, the running sum is the reference's bit for bit, and a column
    whose running sum passes near the bar (or ties at the threshold value) is redone exactly
    as the reference does. The result equals the reference's; it stays sparse (CSC).
  - The rank-r SVD: svds takes the top-r eigenvectors V of CᵀC from ARPACK, then the SVD of
    C·V. Only the eigen-solver changes: a dense LAPACK ``eigh`` of CᵀC for n ≤
    ``DENSE_SVD_MAX_N`` (r is 10-30 % of n there, where ARPACK needs hundreds of restarts),
    else PROPACK's Lanczos bidiagonalisation of the sparse thresholded C, asked for
    ``SVD_PROPACK_EXTRA`` triplets more than needed, each pair's residual checked; where its
    basis would not fit (``SVD_PROPACK_MAX_SHARE``), it fails or a residual is too large,
    ARPACK on the sparse CᵀC with a smaller Lanczos basis (``SVD_NCV_FACTOR``).
    The affinity depends on the top-r subspace only (signs and rotations inside it cancel in
    U·diag(σ)·Uᵀ), so it agrees with svds' to rounding (~1e-13) if σ_r and σ_{r+1} are
    apart; the gap is checked (``SVD_GAP_MIN``) and svds itself is used when it is not.
  - The affinity is formed in place (syrk, clip, power, scale; exactly symmetric), in memory
    mapped with its pages in place (``_zeroed_buffer``); its elementwise passes, and the
    Laplacian's, run by row ranges in threads (``_by_rows``), each entry's operations as one
    whole-array pass would do them.
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
``spectral_min_gap`` (the smallest gap between the K + 1 smallest Laplacian eigenvalues, the
K used and the next; below ``SPECTRAL_GAP_MIN`` ARPACK returns an arbitrary basis of a repeated
eigenspace, e.g. for a graph with several components, or power 8 making between-cluster weights
~1e-20, and where λ_{K+1} ties λ_K, even the K-dimensional space is arbitrary) and
``discretize_margin`` (how far ``discretize``'s discrete decisions were from flipping, see
``_discretize_margin``; sklearn's seeding can leave clusters empty, after which its rotation is
arbitrary). ``ill_posed`` is set when either is below its bound; when a sample's row of U·√σ
is rounding noise (``embedding_norm_ratio`` below ``EMBEDDING_NORM_MIN``: the rank-r subspace
misses that sample, and step 5 scales the noise to a unit row); when a sample's degree in the
affinity graph is too (``degree_rounding`` above ``DEGREE_ROUNDING_MAX``: its U·Uᵀ entries
with the others are all near zero, and the Laplacian's √degree scaling of it is arbitrary, or
all negative, and its row of the spectral embedding is noise that discretize scales to a unit
row);
at a power below 1, when entries of U·Uᵀ near zero make the affinity move by more than
``AFFINITY_ROUNDING_MAX`` with that rounding (``affinity_rounding``, see
``fast._power_rounding``); where the fast route falls back to the reference's svds (an
ill-determined rank-r subspace) or to sklearn's LOBPCG (below); and where sklearn's step
runs unchecked (K ≥ n − 1, or scikit-learn < 1.9). In that regime the reference's own labels
change with floating-point noise: on the trained COIL20 C (repeated eigenvalues) and on the
released ORL C (empty clusters in discretize), running the reference route with 1 instead of 2
BLAS threads, or on an L perturbed by 1e-13, renumbers or moves 64-336 labels and moves ACC by
up to 3 points. The fast route's labels there are as valid as the reference's, only not the
same digits; ``"strict"`` reproduces them at the reference's cost.
Where ARPACK's shift-invert does not converge at all (an untrained, near-constant C), both
routes hand the affinity to sklearn's own step, which falls back to LOBPCG; the fast and strict
routes flag it in ``info``.

Modules: ``thrc`` (thrC, both forms), ``reference`` (the released scripts' post_proC),
``fast`` (the fast route and its tuning constants), ``checks`` (the input checks); ``cluster``
below runs the routes.

LAPACK's symmetric eigensolver runs with ``fast.EIGH_THREADS`` (1) OpenBLAS threads: its
tridiagonal reduction is memory-bound BLAS-2 with a sync per column, and 2 threads on a busy
2-core machine were 8x slower than 1. BLAS-3 work (products, LU, Cholesky) keeps the library
default, which does not depend on the load, so neither do the results.
"""

from __future__ import annotations

import time

from mesc_tf.config import check_post_method, check_seed
from mesc_tf.errors import MescError
from mesc_tf.postcluster.checks import (check_affinity_args, check_ratio, check_square,
                                        check_variant, warn_if_unlinked)
from mesc_tf.postcluster.fast import post_proC_fast, spectral_with_fallbacks
from mesc_tf.postcluster.reference import affinity, post_proC, pretreat, spectral
from mesc_tf.postcluster.thrc import thrC, thrC_reference, thrC_sparse

__all__ = ["affinity", "cluster", "post_proC", "pretreat", "spectral", "thrC"]


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
    ``svd_gap`` and ``ill_posed`` stay the fast route's). It is emptied first: a flag of an
    earlier call must not carry over to this one.
    """
    method = check_post_method(method)
    check_variant(variant)
    if seed is not None:  # here, not after thrC and the SVD have run
        seed = check_seed(seed)
    if info is not None and not isinstance(info, dict):
        raise MescError(f"info must be a dict (it receives the solvers used), got {info!r}")
    info = {} if info is None else info
    info.clear()
    info["method"] = method
    C = check_square(C, "thrC")
    thr = check_ratio(thr)
    K, subspace_dim, power = check_affinity_args(n_clusters, subspace_dim, power, C.shape[0])
    timings = {"thrc_s": 0.0, "svd_s": 0.0, "spectral_s": 0.0}
    t0 = time.perf_counter()
    if method == "reference":
        Cp = thrC_reference(C, thr) if thr < 1 else C.copy()
        t1 = time.perf_counter()
        warn_if_unlinked(Cp, thr)
        L = affinity(Cp, K, subspace_dim, power, variant)
        del Cp
        t2 = time.perf_counter()
        labels = spectral(L, K, seed)
        timings.update(thrc_s=t1 - t0, svd_s=t2 - t1, spectral_s=time.perf_counter() - t2)
    else:
        Cs = thrC_sparse(C, thr)
        timings["thrc_s"] = time.perf_counter() - t0
        info["thrc_density"] = Cs.nnz / float(C.shape[0]) ** 2
        warn_if_unlinked(Cs, thr)
        labels = post_proC_fast(Cs, K, subspace_dim, power, variant, seed, info, timings)
        if method == "strict" and info.get("ill_posed"):
            info.update(fallback="reference affinity", svd="reference svds")
            labels = spectral_with_fallbacks(
                lambda: affinity(thrC(C, thr), K, subspace_dim, power, variant), K, seed,
                info, timings, exact=True)
    if return_timings:
        return labels, timings
    return labels
