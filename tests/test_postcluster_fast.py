"""The fast post-clustering route equals the reference route (issue 6).

Every piece of ``postcluster``'s fast route is checked against the released scripts' numerics
(the reference route) on small, realistic C's: block-diagonal + noise, as trained
self-expression matrices are, thresholded by thrC. Labels must be identical for a fixed seed
wherever the problem is well-posed; where it is not (numerically repeated Laplacian
eigenvalues, e.g. a disconnected affinity graph), the fast route must say so, and
``method="strict"`` must give the reference's labels.
"""

import functools
import mmap
import warnings

import numpy as np
import pytest
import scipy.linalg
from scipy.sparse.linalg import LinearOperator, eigsh
from sklearn.metrics import adjusted_rand_score
from sklearn.preprocessing import normalize

from mesc_tf import postcluster as pc
from mesc_tf import sources
from mesc_tf.postcluster import fast as pc_fast
from mesc_tf.postcluster import reference as pc_ref
from mesc_tf.postcluster import thrc as pc_thrc
from mesc_tf.errors import MescError
from mesc_tf.metrics import accuracy


def trained_like(seed=0, sizes=(30, 40, 25, 35, 30), noise=0.2, dtype=np.float32):
    """Block-diagonal + noise with heavy-tailed in-block weights, rows/columns shuffled."""
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(len(sizes)), sizes)
    n = y.size
    C = noise * np.abs(rng.standard_normal((n, n)))
    same = y[:, None] == y[None, :]
    C[same] += rng.uniform(0.5, 1.0, same.sum()) * rng.random(same.sum()) ** 3
    C -= 0.01 * rng.random((n, n))  # a few negative entries, as entropy-trained C's have
    perm = rng.permutation(n)
    return C[np.ix_(perm, perm)].astype(dtype), y[perm]


def mesc_like(n=120, seed=0, steps=127, lr=1e-4):
    """All entries near 1e-4 + T·lr·drift, as after MESC fine-tuning: dense, similar sizes."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, n)
    same = (y[:, None] == y[None, :]).astype(np.float32)
    C = 1e-4 + steps * lr * (0.3 + 0.05 * rng.standard_normal((n, n))
                             + same * rng.random((n, n)) ** 12)
    return C.astype(np.float32), y


# --- thrC ------------------------------------------------------------------------------------


@pytest.mark.parametrize("ratio", [0.01, 0.04, 0.2, 0.7, 1.0, 1.5])
def test_thrC_blocked_equals_reference(ratio):
    for C in (trained_like(1)[0], mesc_like()[0], trained_like(2, dtype=np.float64)[0]):
        want = pc_thrc.thrC_reference(C, ratio) if ratio < 1 else C
        got = pc.thrC(C, ratio)
        assert got.dtype == C.dtype
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(pc_thrc.thrC_sparse(C, ratio).toarray(), want)


def test_thrC_ties_at_the_threshold_follow_argsort():
    """A constant C ties every column at its threshold: the reference keeps the entries its
    argsort lists first; so must the fast thrC (bit for bit, signs included)."""
    rng = np.random.default_rng(3)
    C = np.full((64, 64), 1e-4, np.float32)
    C[:, ::3] *= -1  # equal magnitudes, mixed signs
    C[:5, :5] = rng.random((5, 5))
    for ratio in (0.03, 0.1, 0.5):
        want = pc_thrc.thrC_reference(C, ratio)
        got = pc.thrC(C, ratio)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_thrC_small_blocks(monkeypatch, workers):
    """Several column blocks, run by 1-3 threads (block size and threads are bounds on memory
    and time, not on the result), with columns whose sort needs more than the first block's m."""
    monkeypatch.setattr(pc_thrc, "_THRC_BLOCK_BYTES", 4 * 150 * 7)  # 7 columns per block
    monkeypatch.setattr(pc_thrc, "worker_threads", lambda: workers)
    C, _ = trained_like(4)
    C[:, 60:] = np.abs(C[:, 60:]) ** 0.01  # near-flat columns: t far past the first block's
    for ratio in (0.05, 0.6):
        np.testing.assert_array_equal(pc.thrC(C, ratio), pc_thrc.thrC_reference(C, ratio))
        np.testing.assert_array_equal(pc_thrc.thrC_sparse(C, ratio).toarray(),
                                      pc_thrc.thrC_reference(C, ratio))


def test_thrC_uses_the_blas_thread_count():
    """thrC's threads follow BLAS's limit, which --jobs workers set to 1."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        assert pc_thrc.worker_threads() == 1


# --- post_proC pieces ------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["mesc", "dsc", "dsc_diag"])
def test_sparse_pretreatment_equals_dense(variant):
    C, _ = trained_like(5)
    Cs = pc_thrc.thrC_sparse(C, 0.1)
    got = pc_fast._pretreat_sparse(Cs, variant).toarray()
    np.testing.assert_array_equal(got, pc.pretreat(Cs.toarray(), variant))


def _propack_on_small_c(monkeypatch):
    """The SVD's PROPACK route on the small C's here: its size rule keeps it for large n."""
    monkeypatch.setattr(pc_fast, "DENSE_SVD_MAX_N", 0)
    monkeypatch.setattr(pc_fast, "SVD_PROPACK_MAX_SHARE", 1.0)
    monkeypatch.setattr(pc_fast, "SVD_PROPACK_KMAX_FACTOR", 3)


@pytest.mark.parametrize("solver", ["dense", "ARPACK", "PROPACK"])
def test_svd_embedding_gives_the_reference_affinity(monkeypatch, solver):
    """Each eigen-solver of the fast route's SVD: a dense eigh of CᵀC (n up to
    DENSE_SVD_MAX_N), PROPACK, and ARPACK on the sparse CᵀC (where PROPACK is not used)."""
    monkeypatch.setattr(pc_fast, "DENSE_SVD_MAX_N", 4096 if solver == "dense" else 0)
    if solver == "PROPACK":
        _propack_on_small_c(monkeypatch)
    C, _ = trained_like(6)
    Cs = pc_fast._pretreat_sparse(pc_thrc.thrC_sparse(C, 0.1), "mesc")
    info = {}
    U = pc_fast._svd_embedding_fast(Cs, 5, 4, info)
    assert U is not None and info["svd_gap"] >= pc_fast.SVD_GAP_MIN
    assert solver in info["svd"]
    U_ref = pc_ref.svd_embedding(Cs.toarray(), 5, 4)
    np.testing.assert_allclose(U @ U.T, U_ref @ U_ref.T, atol=1e-10)
    L = pc_fast._affinity_inplace(U, 3.5)
    assert L.flags.c_contiguous and np.array_equal(L, L.T) and L.max() == 1.0
    np.testing.assert_allclose(L, pc_ref.affinity_from_embedding(U_ref, 3.5), atol=1e-10)


@pytest.mark.parametrize("populate", [True, False])  # Linux's MAP_POPULATE, or np.zeros
def test_affinity_buffer_is_zeroed_and_gives_the_same_bits(monkeypatch, populate):
    """The affinity's pre-populated buffer is zeros in Fortran order, and the affinity built in
    it is the one built in a fresh np.zeros buffer (the fallback where MAP_POPULATE is absent)."""
    U = normalize(np.random.default_rng(3).standard_normal((300, 12)))
    expected = pc_fast._affinity_inplace(U, 3.5)
    if not populate:
        monkeypatch.delattr(pc_fast.mmap, "MAP_POPULATE", raising=False)
    elif not hasattr(pc_fast.mmap, "MAP_POPULATE"):
        pytest.skip("no MAP_POPULATE on this platform")
    buffer = pc_fast._zeroed_buffer(300)
    assert buffer.shape == (300, 300) and buffer.flags.f_contiguous and buffer.flags.writeable
    owner = buffer
    while isinstance(owner, np.ndarray) and owner.base is not None:
        owner = owner.base
    assert isinstance(getattr(owner, "obj", owner), mmap.mmap) == populate  # via a memoryview
    assert not buffer.any()
    L = pc_fast._affinity_inplace(U, 3.5)
    assert L.flags.c_contiguous and np.array_equal(L, expected)


def _affinity_and_laplacian_plainly(U, power):
    """The affinity, M = D^-½·A·D^-½ and the shifted Laplacian as whole-array NumPy steps, as
    the fast route computed them before its passes ran by rows in threads."""
    Z = scipy.linalg.blas.dsyrk(1.0, U, trans=0, lower=0)  # the upper triangle of U·Uᵀ
    L = np.maximum(np.triu(Z) + np.triu(Z, 1).T, 0.0)
    if power in (2, 4, 8, 16):
        for _ in range(int(power).bit_length() - 1):
            L = L * L
    else:
        L = np.power(L, power)
    L = L / L.max()
    M = L.copy()
    np.fill_diagonal(M, 0)
    w = M.sum(axis=0)
    w = np.where(w == 0, 1, np.sqrt(w))
    M = M / w[:, np.newaxis] / w
    S = -M
    np.fill_diagonal(S, 1)
    S.flat[:: len(S) + 1] -= pc_fast._SIGMA
    return L, M, w, S.T  # the shift returns its buffer's Fortran view (M: symmetric to rounding)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("power", [16.0, 3.5, 1.0])
def test_affinity_passes_give_the_same_bits_by_rows_in_threads(monkeypatch, threads, power):
    """The affinity's and the Laplacian's elementwise passes, split into row ranges run in
    threads and into sub-blocks of a few rows, give the bits of whole-array NumPy steps."""
    monkeypatch.setattr(pc_fast, "_THREADED_MIN_ENTRIES", 0)
    monkeypatch.setattr(pc_fast, "_CACHE_BLOCK_BYTES", 8 * 301 * 7)  # 7 rows per sub-block
    monkeypatch.setattr(pc_fast, "worker_threads", lambda: threads)
    U = normalize(np.random.default_rng(4).standard_normal((301, 12)))
    L_want, M_want, w_want, S_want = _affinity_and_laplacian_plainly(U, power)
    L = pc_fast._affinity_inplace(U, power)
    assert L.flags.c_contiguous and np.array_equal(L, L_want) and L.max() == 1.0
    w = pc_fast._normalised_adjacency_inplace(L)
    assert np.array_equal(w, w_want) and np.array_equal(L, M_want)
    S = pc_fast._shift_inplace(L)
    assert S.flags.f_contiguous and np.array_equal(S, S_want)


def test_no_memory_for_the_affinity_is_one_clear_error(monkeypatch):
    if not hasattr(pc_fast.mmap, "MAP_POPULATE"):
        pytest.skip("no MAP_POPULATE on this platform")

    def refuse(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(pc_fast.mmap, "mmap", refuse)
    with pytest.raises(MescError, match=r"no memory for the 300×300 affinity matrix .*free memory"):
        pc_fast._affinity_inplace(normalize(np.ones((300, 4))), 2.0)


def test_ill_determined_subspace_is_detected():
    """Equal singular values across the rank-r cut: no fast SVD, the reference svds is used."""
    n, u = 60, (np.arange(60) % 2).astype(float)
    Cs = pc_thrc.thrC_sparse(np.eye(n) + 0.01 * np.outer(u, u), 1.0)
    Cs = pc_fast._pretreat_sparse(Cs, "mesc")
    info = {}
    assert pc_fast._svd_embedding_fast(Cs, 5, 3, info) is None
    info = {}
    labels = pc.cluster(np.eye(n) + 0.01 * np.outer(u, u), 5, 1.0, 3, 1.0, info=info)
    assert info["svd"].startswith("reference") and info["ill_posed"] and labels.shape == (n,)


@pytest.mark.parametrize("power", [1.0, 8.0])
def test_inplace_spectral_step_is_sklearns(power):
    """Given the same L, the in-place spectral step returns sklearn's labels bit for bit, in
    well-posed and ill-posed cases alike (it is the same algorithm)."""
    for noise in (0.2, 0.0):
        C, _ = trained_like(7, noise=noise)
        L = pc.affinity(pc.thrC(C, 0.1), 5, 4, power, "mesc")
        for seed in (0, 1, 5):
            want = pc.spectral(L, 5, seed)
            got = pc_fast._spectral_inplace(L.copy(), 5, seed, {})
            np.testing.assert_array_equal(got, want)


def test_an_older_sklearn_gets_its_own_spectral_step(monkeypatch):
    """Before scikit-learn 1.9 sklearn's shift-invert was another (benchmarks/README.md, session
    44), which the in-place step does not reproduce: there the fast route runs sklearn's step,
    flagged, so that strict recomputes the reference's affinity and gives its labels."""
    C, _ = trained_like(3)
    L = pc.affinity(pc.thrC(C, 0.2), 5, 4, 4.0, "mesc")
    monkeypatch.setattr(pc_fast, "_SKLEARN_SIGMA_BELOW_ZERO", False)
    monkeypatch.setattr(pc_fast, "_spectral_inplace", None)  # must not be called
    info, timings = {}, {"svd_s": 0.0, "spectral_s": 0.0}
    got = pc_fast.spectral_with_fallbacks(lambda: L.copy(), 5, 2, info, timings)
    np.testing.assert_array_equal(got, pc.spectral(L, 5, 2))
    assert info["spectral"].startswith("sklearn's (scikit-learn") and info["ill_posed"]
    info = {}
    strict = pc.cluster(C, 5, 0.2, 4, 4.0, seed=2, method="strict", info=info)
    assert info["ill_posed"] and info["svd"] == "reference svds"
    np.testing.assert_array_equal(strict, pc.cluster(C, 5, 0.2, 4, 4.0, seed=2,
                                                     method="reference"))


# --- the whole route ---------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["mesc", "dsc", "dsc_diag"])
@pytest.mark.parametrize("power", [1.0, 3.5, 8.0])
def test_fast_route_equals_reference_when_well_posed(variant, power):
    for seed in range(3):
        C, y = trained_like(seed)
        info = {}
        fast, times = pc.cluster(C, 5, 0.2, 4, power, variant, seed=seed, return_timings=True,
                                 info=info)
        ref = pc.cluster(C, 5, 0.2, 4, power, variant, seed=seed, method="reference")
        assert not info["ill_posed"], info
        np.testing.assert_array_equal(fast, ref)
        assert set(times) == {"thrc_s", "svd_s", "spectral_s"}
        assert accuracy(y, fast) > 0.9


@pytest.mark.parametrize("power", [1.0, 8.0])
@pytest.mark.parametrize("solver", ["Lanczos", "Cholesky"])
def test_large_n_routes_equal_reference(monkeypatch, power, solver):
    """The routes above n = 4096 (ARPACK on the sparse CᵀC for the SVD; for the spectral step
    Lanczos on D^-1/2·A·D^-1/2 when allowed, or the Cholesky shift-invert when Lanczos runs out
    of products), forced on small problems."""
    monkeypatch.setattr(pc_fast, "DENSE_SVD_MAX_N", 0)
    monkeypatch.setattr(pc_fast, "SI_LU_MAX_N", 0)
    if solver == "Cholesky":  # as if Lanczos had not converged
        monkeypatch.setattr(pc_fast, "_lanczos_smallest", lambda *args: None)
    monkeypatch.setattr(pc_fast, "LANCZOS_MAX_PRODUCTS", 600)  # tried first (off by default)
    for seed in range(3):
        C, _ = trained_like(seed)
        info = {}
        fast = pc.cluster(C, 5, 0.2, 4, power, "mesc", seed=seed, info=info)
        assert "ARPACK" in info["svd"] and solver in info["spectral"] and not info["ill_posed"]
        np.testing.assert_array_equal(
            fast, pc.cluster(C, 5, 0.2, 4, power, "mesc", seed=seed, method="reference"))


def test_fast_route_on_a_mesc_like_C():
    C, y = mesc_like(n=160, seed=2)
    for power in (1.0, 8.0):
        info = {}
        fast = pc.cluster(C, 4, 0.04, 12, power, "mesc", seed=0, info=info)
        ref = pc.cluster(C, 4, 0.04, 12, power, "mesc", seed=0, method="reference")
        assert not info["ill_posed"], power  # else the fast route's labels need not be ref's
        np.testing.assert_array_equal(fast, ref)


def test_fine_tuned_toy_C_fast_equals_reference(shared_data, runtime):
    """A real C: the Toy set (216 COIL20 images) fine-tuned 20 steps from the shipped
    auto-encoder through pipeline.fine_tune, clustered with four post-clustering settings and
    three seeds. Where the fast route does not flag the problem, its labels must be the
    reference's (by the dense eigh and the in-place LU); where it does, strict's must be. The
    flag is a conservative bound, so nearly every case must take the fast route unflagged."""
    from mesc_tf import pipeline
    from mesc_tf.config import get_config
    from mesc_tf.data import load_dataset

    cfg = get_config("toy")
    ds = load_dataset("toy", shared_data)
    ae, _ = sources.get_autoencoder(cfg.arch, dataset="toy")
    model, _, _ = pipeline.fine_tune(ds.x, cfg.mesc.replace(epochs=20), ae, verbose=0)
    C, s, unflagged = model.coef.numpy(), cfg.mesc, 0
    for thr, d, power in ((s.thr, s.subspace_dim, s.power), (0.04, 12, 8.0), (0.1, 4, 1.0),
                          (0.2, 4, 3.5)):
        for seed in range(3):
            info = {}
            labels = pc.cluster(C, 3, thr, d, power, s.variant, seed=seed, info=info)
            assert "dense eigh" in info["svd"] and "LU" in info["spectral"]
            if info["ill_posed"]:
                labels = pc.cluster(C, 3, thr, d, power, s.variant, seed=seed, method="strict")
            unflagged += not info["ill_posed"]
            np.testing.assert_array_equal(
                labels, pc.cluster(C, 3, thr, d, power, s.variant, seed=seed, method="reference"))
    assert unflagged >= 10


def test_discretize_margin_replays_sklearn():
    """_discretize_margin must make sklearn's decisions (it certifies them)."""
    from sklearn.cluster._spectral import discretize

    rng = np.random.default_rng(0)
    for n, k in ((60, 3), (200, 8), (150, 12)):
        for seed in range(3):
            vectors = rng.standard_normal((n, k)) + 3 * np.eye(k)[rng.integers(0, k, n)]
            want = discretize(vectors, random_state=np.random.RandomState(seed))
            got, margin = pc_fast._discretize_margin(vectors, np.random.RandomState(seed))
            np.testing.assert_array_equal(got, want)
            assert margin >= 0


def test_discretize_margin_counts_one_empty_cluster(monkeypatch):
    """An empty cluster makes discretize's K×K matrix singular, and the sign of its null
    direction in the next rotation is rounding's choice. The margin used to count only a
    second empty cluster (S[-2]), which let labels through unflagged that moved with the BLAS
    thread count (the released ORL C, seeds 0 and 3). Every run that meets an empty cluster,
    one or more, must now be below the bound."""
    svd, empties = np.linalg.svd, []

    def counting_svd(a, *args, **kwargs):
        out = svd(a, *args, **kwargs)
        empties.append(int((out[1] <= 1e-12 * out[1][0]).sum()))
        return out

    monkeypatch.setattr(np.linalg, "svd", counting_svd)
    rng, seen = np.random.default_rng(0), set()
    for n, k in ((150, 12), (200, 20)):
        for seed in range(6):
            vectors = rng.standard_normal((n, k)) + 3 * np.eye(k)[rng.integers(0, k, n)]
            empties.clear()
            _, margin = pc_fast._discretize_margin(vectors, np.random.RandomState(seed))
            seen.add(max(empties))
            if max(empties):
                assert margin < pc_fast.DISCRETIZE_MARGIN_MIN, (n, k, seed, empties)
    assert {0, 1} <= seen  # runs without an empty cluster and runs with exactly one


def test_released_orl_C_is_flagged_and_strict_matches(shared_reference):
    """The released graph's ORL C (reference/README.md): sklearn's discretize leaves clusters
    empty there and its rotation is then arbitrary, so the reference's own labels move with
    rounding. The fast route must flag it; strict must give the reference's labels."""
    C = np.load(shared_reference / "orl_decoupled_entropy_C100.npy")
    # DSC-Net's ORL post-clustering with MESC's diagonal-to-1 (the ORL config until session 11).
    args = (C, 40, 0.2, 3, 1.0, "mesc")
    info = {}
    pc.cluster(*args, seed=0, info=info)
    assert info["ill_posed"] and info["discretize_margin"] < pc_fast.DISCRETIZE_MARGIN_MIN
    np.testing.assert_array_equal(pc.cluster(*args, seed=0, method="strict"),
                                  pc.cluster(*args, seed=0, method="reference"))


def test_ill_posed_spectra_are_flagged_and_strict_gives_the_reference():
    """Exactly block-diagonal after thrC: the affinity graph falls apart into components, the
    Laplacian's smallest eigenvalue repeats and ARPACK's basis for it is arbitrary. The fast
    route flags it (its partition is still the reference's, numbered differently at most);
    method="strict" recomputes L the reference's way and matches the labels exactly."""
    C, y = trained_like(0, noise=0.0)
    for power in (1.0, 8.0):
        info = {}
        fast = pc.cluster(C, 5, 0.2, 4, power, "mesc", seed=3, info=info)
        assert info["ill_posed"] and info["spectral_min_gap"] < pc_fast.SPECTRAL_GAP_MIN
        ref = pc.cluster(C, 5, 0.2, 4, power, "mesc", seed=3, method="reference")
        assert adjusted_rand_score(ref, fast) == 1.0
        info = {}
        strict = pc.cluster(C, 5, 0.2, 4, power, "mesc", seed=3, method="strict", info=info)
        assert info["fallback"] == "reference affinity"
        np.testing.assert_array_equal(strict, ref)


def test_next_eigenvalue_tied_with_the_kth_is_flagged_and_strict_gives_the_reference():
    """Three alike clusters split into K = 2: λ₂ = λ₃, so ARPACK's second eigenvector is any
    vector of their plane and rounding picks it. The gaps among the K = 2 used (λ₂ − λ₁ ≈
    0.14) do not show it; the gap to λ_{K+1} does. It went unflagged, with labels other than
    the reference's."""
    y = np.repeat(np.arange(3), 30)
    L = np.where(y[:, None] == y[None, :], 1.0, 0.05)
    info = {}
    pc_fast._spectral_inplace(L, 2, 0, info)
    assert info["ill_posed"] and info["spectral_min_gap"] < pc_fast.SPECTRAL_GAP_MIN
    # C invariant under a cyclic shift of its three blocks: the same tie, through cluster().
    m, rng = 30, np.random.default_rng(2)
    B = [np.eye(m) + rng.random((m, m)), 0.2 * rng.random((m, m)), 0.2 * rng.random((m, m))]
    C = np.block([[B[(j - i) % 3] for j in range(3)] for i in range(3)])
    args = (C, 2, 1.0, 3, 1.0, "dsc")
    info = {}
    pc.cluster(*args, info=info)
    assert info["ill_posed"] and info["spectral_min_gap"] < pc_fast.SPECTRAL_GAP_MIN
    np.testing.assert_array_equal(pc.cluster(*args, method="strict"),
                                  pc.cluster(*args, method="reference"))


def _one_large_entry_per_column(seed, n=40):
    """(C, K, thr, d, power, variant): one large entry per column over small noise."""
    rng = np.random.default_rng(seed)
    C = 0.01 * rng.random((n, n))
    C[rng.permutation(n), np.arange(n)] = 1 + rng.random(n)
    return C, 2, 0.03, 1, 1.0, "mesc"


def test_the_row_norms_alone_can_flag_a_spectral_step(monkeypatch):
    """A C (the test below's kind, another draw) that only the row-norm check flags: without it
    the fast route would call the step well-posed, and its labels differ from the reference's,
    which strict then returns."""
    from sklearn.metrics import adjusted_rand_score

    args = _one_large_entry_per_column(178)
    info = {}
    pc.cluster(*args, info=info)
    assert info["ill_posed"] and info["embedding_norm_ratio"] < pc_fast.EMBEDDING_NORM_MIN
    np.testing.assert_array_equal(pc.cluster(*args, method="strict"),
                                  pc.cluster(*args, method="reference"))
    monkeypatch.setattr(pc_fast, "EMBEDDING_NORM_MIN", 0.0)
    info = {}
    pc.cluster(*args, info=info)
    assert not info["ill_posed"], info  # no other check flags this C
    assert adjusted_rand_score(pc.cluster(*args), pc.cluster(*args, method="reference")) < 0.9


def test_samples_outside_the_rank_r_subspace_are_flagged_and_strict_gives_the_reference():
    """One large entry per column over small noise: after thrC a few samples are (nearly)
    orthogonal to the rank-r subspace, their rows of U·√σ are rounding noise, and step 5 makes
    them unit rows in arbitrary directions, on either route. No gap shows it; the row norms
    do, and method="strict" then returns the reference's labels."""
    args = _one_large_entry_per_column(5)
    info = {}
    pc.cluster(*args, info=info)
    assert info["embedding_norm_ratio"] < 1e-12 and info["ill_posed"]
    assert info["svd_gap"] >= pc_fast.SVD_GAP_MIN  # the subspace itself is well determined
    np.testing.assert_array_equal(pc.cluster(*args, method="strict"),
                                  pc.cluster(*args, method="reference"))
    info = {}
    blocks, _ = trained_like(0)
    pc.cluster(blocks, 5, 0.2, 4, 1.0, info=info)
    assert info["embedding_norm_ratio"] > pc_fast.EMBEDDING_NORM_MIN


@pytest.mark.filterwarnings("ignore:k >= N:RuntimeWarning")  # sklearn, on these tiny sizes
@pytest.mark.parametrize("method", ["fast", "strict"])
def test_as_many_clusters_as_samples_or_one_fewer(method):
    """Tiny problems (K ≥ n − 1) go to sklearn's spectral step on every route; nothing
    certifies the fast route's labels there, so it flags them (info has its usual keys), and
    strict recomputes the reference's affinity. Both give the reference route's labels here."""
    rng = np.random.default_rng(0)
    C = rng.random((12, 12)).astype(np.float32)
    for k in (11, 12):
        info = {}
        labels = pc.cluster(C, k, 0.5, 1, 1.0, seed=0, method=method, info=info)
        assert info["ill_posed"] is True and info["spectral"] == "sklearn's (K >= n - 1)"
        assert (info.get("fallback") == "reference affinity") == (method == "strict")
        assert labels.shape == (12,) and len(np.unique(labels)) <= k
        np.testing.assert_array_equal(labels, pc.cluster(C, k, 0.5, 1, 1.0, seed=0,
                                                         method="reference"))


def test_rank_clipped_to_n_minus_1_takes_the_dense_route():
    """r = d·K + 1 clipped to n − 1 (tiny problems, smoke runs): the dense eigh has all n
    eigenpairs, so the subspace's gap is checked as usual instead of flagging a fallback."""
    C = np.random.default_rng(0).random((6, 6))
    info = {}
    labels = pc.cluster(C, 4, 0.5, 1, 1.0, seed=0, info=info)
    assert info["svd"] == "dense eigh of CᵀC" and not info["ill_posed"]
    np.testing.assert_array_equal(labels, pc.cluster(C, 4, 0.5, 1, 1.0, seed=0,
                                                     method="reference"))


def test_method_is_checked():
    C, _ = trained_like(0)
    with pytest.raises(MescError, match="method"):
        pc.cluster(C, 5, 0.2, 4, 1.0, method="quick")


def test_lanczos_gives_up_beyond_its_product_budget(monkeypatch):
    """Without convergence within LANCZOS_MAX_PRODUCTS the spectral step must fall back (None);
    with enough products it returns the Laplacian's smallest eigenpairs, ascending."""
    rng = np.random.default_rng(0)
    A = rng.random((300, 300))
    M = np.ascontiguousarray((A + A.T) / 600)
    np.fill_diagonal(M, 0)
    v0 = rng.uniform(-1, 1, 300)
    monkeypatch.setattr(pc_fast, "LANCZOS_MAX_PRODUCTS", 1)
    info = {}
    assert pc_fast._lanczos_smallest(M.copy(), 5, v0, info) is None
    assert info["lanczos_products"] == 30 + 25  # the basis of 30, then one restart (K = 5)
    monkeypatch.setattr(pc_fast, "LANCZOS_MAX_PRODUCTS", 10000)
    lam, vectors = pc_fast._lanczos_smallest(M.copy(), 5, v0, info)
    assert 30 <= info["lanczos_products"] <= 10000
    expected = np.linalg.eigvalsh(np.eye(300) - M)[:5]
    np.testing.assert_allclose(lam, expected, atol=1e-10)
    laplacian = np.eye(300) - M
    np.testing.assert_allclose(laplacian @ vectors, vectors * lam, atol=1e-10)
    np.testing.assert_allclose(vectors.T @ vectors, np.eye(5), atol=1e-10)


def test_cholesky_route_goes_first_by_default(monkeypatch):
    """With the default LANCZOS_MAX_PRODUCTS (0) the large-n spectral step never runs Lanczos."""
    monkeypatch.setattr(pc_fast, "SI_LU_MAX_N", 0)
    monkeypatch.setattr(pc_fast, "_lanczos_smallest", lambda *args: pytest.fail("Lanczos ran"))
    C, _ = trained_like(1)
    info = {}
    fast = pc.cluster(C, 5, 0.2, 4, 1.0, "mesc", seed=1, info=info)
    assert "Cholesky" in info["spectral"] and "lanczos_products" not in info
    assert info["spectral"].startswith("block shift-invert") and info["block_si_solves"] >= 2
    np.testing.assert_array_equal(
        fast, pc.cluster(C, 5, 0.2, 4, 1.0, "mesc", seed=1, method="reference"))


def test_cholesky_failure_rebuilds_the_affinity_and_takes_lu(monkeypatch):
    """A shifted Laplacian that is not positive definite in floating point: the Cholesky
    factorisation has overwritten L, so the affinity is built again and factored by LU."""
    monkeypatch.setattr(pc_fast, "SI_LU_MAX_N", 0)

    def not_positive_definite(*args, **kwargs):
        raise np.linalg.LinAlgError("not positive definite")

    monkeypatch.setattr(scipy.linalg, "cho_factor", not_positive_definite)
    C, _ = trained_like(1)
    info = {}
    fast = pc.cluster(C, 5, 0.2, 4, 1.0, "mesc", seed=1, info=info)
    assert info["spectral"] == "sklearn's ARPACK shift-invert (LU), in place"
    np.testing.assert_array_equal(
        fast, pc.cluster(C, 5, 0.2, 4, 1.0, "mesc", seed=1, method="reference"))


def _shifted_laplacian(n=300, seed=0):
    """A normalised graph Laplacian of 4 noisy blocks, shifted as sklearn's shift-invert."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, n)
    A = rng.random((n, n)) * np.where(y[:, None] == y[None, :], 1.0, 0.05)
    A = (A + A.T) / 2
    np.fill_diagonal(A, 0)
    d = 1 / np.sqrt(A.sum(axis=0))
    return np.eye(n) - d[:, None] * A * d[None, :] - pc_fast._SIGMA * np.eye(n)


def _solver(S):
    """S⁻¹·X by a Cholesky factor, as the spectral step's large-n route applies it."""
    return functools.partial(scipy.linalg.cho_solve, scipy.linalg.cho_factor(S))


def test_block_shift_invert_equals_arpack():
    """The block Lanczos gives ARPACK's shift-invert eigenpairs (sklearn's call), ascending."""
    S = _shifted_laplacian()
    n, K = S.shape[0], 4  # the four blocks' eigenvalues, 0 and 0.16-0.19; the rest from 0.93
    solve = _solver(S)
    v0 = np.random.default_rng(1).uniform(-1, 1, n)
    info = {}
    lam, vectors, following = pc_fast._block_shift_invert(solve, n, K, v0, 0, info)
    want, want_vectors = eigsh(LinearOperator((n, n), matvec=lambda x: x, dtype=float), k=K,
                               sigma=pc_fast._SIGMA, which="LM", tol=0, v0=v0,
                               OPinv=LinearOperator((n, n), matvec=solve, dtype=float))
    assert 2 <= info["block_si_solves"] <= 256 // 6
    np.testing.assert_allclose(lam, want, rtol=0, atol=1e-12)
    assert np.all(np.diff(lam) > 0)
    np.testing.assert_allclose(np.abs(np.sum(vectors * want_vectors, axis=0)), 1, atol=1e-10)
    laplacian = S + pc_fast._SIGMA * np.eye(n)
    np.testing.assert_allclose(laplacian @ vectors, vectors * lam, atol=1e-10)
    # λ_{K+1} too, for the gap check, where its Ritz pair has converged (not here: None)
    assert following is None


def test_block_shift_invert_gives_the_next_eigenvalue_where_converged(monkeypatch):
    """The Cholesky route's gap check takes λ_{K+1} from the block Lanczos where its Ritz pair
    has converged, without ARPACK's single-vector solves (``_next_eigenvalue``)."""
    monkeypatch.setattr(pc_fast, "SI_LU_MAX_N", 10)
    monkeypatch.setattr(pc_fast, "_next_eigenvalue", None)  # not called
    C, _ = trained_like(0)
    L = pc_ref.affinity(pc.thrC(C, 0.1), 5, 4, 1.0, "mesc")
    A = L - np.diag(np.diag(L))
    d = 1 / np.sqrt(A.sum(axis=0))
    lam = np.linalg.eigvalsh(np.eye(len(L)) - d[:, None] * A * d[None, :])[:6]
    info = {}
    pc_fast._spectral_inplace(L, 5, 0, info)
    assert info["spectral"].startswith("block shift-invert")
    assert info["spectral_min_gap"] == pytest.approx(np.diff(lam).min(), abs=1e-9)


def test_block_shift_invert_on_an_invariant_krylov_space():
    """Three complete graphs: S has six distinct eigenvalues, so the block Krylov space becomes
    invariant (a breakdown) within a few blocks. The route still returns an orthonormal basis of
    the triple eigenvalue 0 (a repeated eigenvalue: the caller flags such a problem)."""
    sizes = (20, 25, 30)
    A = scipy.linalg.block_diag(*[np.ones((s, s)) - np.eye(s) for s in sizes])
    d = 1 / np.sqrt(A.sum(axis=0))
    n = A.shape[0]
    laplacian = np.eye(n) - d[:, None] * A * d[None, :]
    info = {}
    solve = _solver(laplacian - pc_fast._SIGMA * np.eye(n))
    lam, vectors, _ = pc_fast._block_shift_invert(solve, n, 3, np.ones(n), 0, info)
    assert info["block_si_solves"] <= 3
    np.testing.assert_allclose(lam, 0, atol=1e-12)
    np.testing.assert_allclose(vectors.T @ vectors, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(laplacian @ vectors, 0, atol=1e-10)


def test_block_shift_invert_hands_over_to_arpack(monkeypatch):
    """Without convergence within BLOCK_SI_MAX_VECTORS the block route returns None, and the
    spectral step runs ARPACK's shift-invert as sklearn's: the reference's labels either way."""
    solve = _solver(_shifted_laplacian())
    monkeypatch.setattr(pc_fast, "BLOCK_SI_TOL", 0.0)  # never met
    info = {}
    assert pc_fast._block_shift_invert(solve, 300, 4, np.ones(300), 0, info) is None
    assert info["block_si_solves"] == 256 // 6
    # Room for fewer than BLOCK_SI_MIN_BLOCKS blocks (K = 15: 11 blocks of 22): not tried.
    assert pc_fast._block_shift_invert(solve, 300, 15, np.ones(300), 0, info) is None
    assert info["block_si_solves"] == 0
    monkeypatch.setattr(pc_fast, "SI_LU_MAX_N", 0)
    C, _ = trained_like(2)
    ref = pc.cluster(C, 5, 0.2, 4, 1.0, "mesc", seed=2, method="reference")
    for limit in (0, 256):  # 0: ARPACK at once; 256 with a tolerance never met: after the cap
        monkeypatch.setattr(pc_fast, "BLOCK_SI_MAX_VECTORS", limit)
        info = {}
        np.testing.assert_array_equal(pc.cluster(C, 5, 0.2, 4, 1.0, "mesc", seed=2, info=info), ref)
        assert info["spectral"].startswith("ARPACK shift-invert") and not info["ill_posed"]


def test_arpack_failure_falls_back_as_sklearn_does(monkeypatch):
    """Where ARPACK's shift-invert does not converge (a C that was never trained gives such a
    degenerate affinity), sklearn falls back to LOBPCG; the fast and strict routes hand that
    case to sklearn too instead of raising, and flag it."""
    from scipy.sparse.linalg import ArpackNoConvergence

    C, y = trained_like(1)
    ref = pc.cluster(C, 5, 0.2, 4, 2.0, "mesc", seed=0, method="reference")
    real = pc_fast.eigsh

    def failing(*args, **kwargs):
        if "sigma" in kwargs:  # the fast spectral step's shift-invert, not the SVD's
            raise ArpackNoConvergence("no convergence", np.zeros(0), np.zeros((0, 0)))
        return real(*args, **kwargs)

    monkeypatch.setattr(pc_fast, "eigsh", failing)
    for method in ("fast", "strict"):
        info = {}
        labels = pc.cluster(C, 5, 0.2, 4, 2.0, "mesc", seed=0, method=method, info=info)
        assert info["ill_posed"] and "ARPACK did not converge" in info["spectral"], info
        np.testing.assert_array_equal(labels, ref)


def test_seeded_svds_is_svds_bit_for_bit():
    """The fast route's svds fallback runs svds' own steps, only with seeded ARPACK restarts:
    where ARPACK needs no restart vector, it is svds to the last bit."""
    from scipy.sparse.linalg import svds

    C = trained_like(2)[0].astype(np.float64)
    n = C.shape[0]
    ref = svds(C, 16, v0=np.ones(n))
    got = pc_ref.svds_seeded(C, 16, np.ones(n), pc_ref.arpack_rng(0))
    for a, b in zip(ref, got):
        np.testing.assert_array_equal(a, b)


# The identity links no two samples, which the run rightly warns of (tested in
# test_postcluster.py); here only the repeatability counts.
@pytest.mark.filterwarnings("ignore:post-clustering. C has no nonzero entry off its diagonal")
@pytest.mark.parametrize("C", [np.eye(120), np.full((120, 120), 1 / 120)],
                         ids=["identity", "uniform"])
def test_fast_route_repeats_on_degenerate_C(C):
    """On C's whose Krylov spaces turn invariant (untrained or collapsed ones), ARPACK asks for
    random restart vectors, which SciPy draws from OS entropy unless eigsh is given a generator;
    the fast route seeds them, so a fixed seed gives the same labels every call."""
    runs = [pc.cluster(C.astype(np.float32), 6, 0.2, 3, 1.0, "dsc", seed=0) for _ in range(3)]
    for labels in runs[1:]:
        np.testing.assert_array_equal(labels, runs[0])


@pytest.mark.parametrize("power", [0.5, 0.25])
def test_powers_below_one_give_the_reference_affinity_and_labels(power):
    """post_proC's exponent may be any positive number (Settings allows power > 0): the in-place
    affinity must raise to powers below 1 too, not only above."""
    U = normalize(np.random.default_rng(3).standard_normal((200, 12)))
    np.testing.assert_allclose(pc_fast._affinity_inplace(U, power),
                               pc_ref.affinity_from_embedding(U, power), atol=1e-12)
    C, _ = trained_like(1)
    info = {}
    fast = pc.cluster(C, 5, 0.2, 4, power, "mesc", seed=1, info=info)
    ref = pc.cluster(C, 5, 0.2, 4, power, "mesc", seed=1, method="reference")
    # Well-posed here (affinity rounding 1.6e-9 at power 0.25, under the 1e-8 bound): the
    # labels must be the reference's, not merely flagged.
    assert not info["ill_posed"], info
    np.testing.assert_array_equal(fast, ref)


def test_power_below_one_on_rounding_level_entries_is_flagged_and_strict_gives_the_reference():
    """A C block-diagonal after thrC: U·Uᵀ between blocks is zero in exact arithmetic, rounding
    noise of either sign on each route; power 0.05 turns it into 0 or ~0.2, so the routes
    cluster different graphs (ARI 0.46 here) while every gap and margin looks fine. It went
    unflagged; a noisy C at power 0.9 stays unflagged."""
    C, _ = trained_like(0, noise=0.0, dtype=np.float64)
    args = (C, 5, 0.2, 4, 0.05, "mesc")
    info = {}
    pc.cluster(*args, seed=0, info=info)
    assert info["ill_posed"] and info["affinity_rounding"] > pc_fast.AFFINITY_ROUNDING_MAX
    np.testing.assert_array_equal(pc.cluster(*args, seed=0, method="strict"),
                                  pc.cluster(*args, seed=0, method="reference"))
    info = {}
    pc.cluster(trained_like(0)[0], 5, 0.1, 4, 0.9, "mesc", seed=0, info=info)
    assert info["affinity_rounding"] < pc_fast.AFFINITY_ROUNDING_MAX and not info["ill_posed"]


def test_sample_linked_only_by_rounding_is_flagged():
    """A sparse random C: one sample's U·Uᵀ entries with the others are all rounding noise, so
    its degree is too (~1e-23) and the Laplacian's √degree scaling of it is arbitrary: the
    reference's own labels move when L moves by 1e-15 (so do they from run to run, with svds'
    random restarts). The fast route's labels differed from the reference's with every gap and
    margin clear (ill_posed False); the degree's rounding flags it. Trained-like C's stay far
    below the bound."""
    rng = np.random.default_rng(4)
    C = rng.standard_normal((32, 32)) * (rng.random((32, 32)) < 0.05)
    args = (C, 6, 0.5, 5, 1.5, "dsc_diag")
    info = {}
    pc.cluster(*args, info=info)
    assert info["ill_posed"] and not info["degree_rounding"] <= pc_fast.DEGREE_ROUNDING_MAX
    assert info["spectral_min_gap"] > 1e-3 and info["discretize_margin"] > 1e-4
    L = pc.affinity(pc.thrC(C, 0.5), 6, 5, 1.5, "dsc_diag")
    moved = []  # one draw of the noise can leave the labels as they were (a CI run's did)
    for s in range(4):
        noise = 1e-15 * np.random.default_rng(s).random(L.shape)
        moved.append(adjusted_rand_score(pc.spectral(L, 6), pc.spectral(L + noise + noise.T, 6)))
    assert min(moved) < 1, moved
    info = {}
    pc.cluster(trained_like(0)[0], 5, 0.1, 4, 16.0, info=info)
    assert info["degree_rounding"] < 1e-10


@pytest.mark.filterwarnings("ignore:Graph is not fully connected")
def test_sample_isolated_in_the_affinity_is_flagged_and_strict_gives_the_reference():
    """Sample 0's row of C is minus a multiple of the others' sum, so its U·Uᵀ entries with
    every other sample are negative (≤ −0.3): degree 0 in the affinity graph. Its row of the
    spectral embedding is then rounding noise, which discretize scales to a unit row: its label
    moved between the routes (seeds 1-3), with every gap and margin clear."""
    C, _ = trained_like(2)
    C = C.astype(np.float64)
    C[0] = -0.05 * C[1:].sum(axis=0)
    for seed in range(4):
        info = {}
        pc.cluster(C, 5, 1.0, 4, 2.0, seed=seed, info=info)
        assert info["ill_posed"] and info["degree_rounding"] == np.inf, info
        np.testing.assert_array_equal(
            pc.cluster(C, 5, 1.0, 4, 2.0, seed=seed, method="strict"),
            pc.cluster(C, 5, 1.0, 4, 2.0, seed=seed, method="reference"))


@pytest.mark.filterwarnings("ignore:Graph is not fully connected")
def test_isolated_sample_in_the_affinity_is_sklearns():
    """A sample with no positive affinity to any other (its row of U·Uᵀ is ≤ 0 off the
    diagonal) is an isolated node: csgraph's Laplacian gives it degree 1, not 0 (a 0 would divide
    by zero and fill L with NaN). The in-place step must still return sklearn's labels."""
    C, _ = trained_like(2)
    L = pc.affinity(pc.thrC(C, 0.2), 5, 4, 2.0, "mesc")
    L[0, 1:] = 0.0
    L[1:, 0] = 0.0
    for seed in (0, 1):
        want = pc.spectral(L, 5, seed)
        got = pc_fast._spectral_inplace(L.copy(), 5, seed, {})
        np.testing.assert_array_equal(got, want)


@pytest.mark.filterwarnings("ignore:Graph is not fully connected")
def test_isolated_sample_on_the_lanczos_route_is_no_error(monkeypatch):
    """Lanczos on D^-1/2·A·D^-1/2 leaves an isolated sample's row of the eigenvectors exactly
    zero, on which discretize failed (LinAlgError after 30 restarts): the Cholesky
    shift-invert takes over, and with its blocks off (ARPACK as sklearn's) gives
    sklearn's labels but the isolated sample's (rounding noise on either route)."""
    monkeypatch.setattr(pc_fast, "SI_LU_MAX_N", 0)
    monkeypatch.setattr(pc_fast, "LANCZOS_MAX_PRODUCTS", 600)
    monkeypatch.setattr(pc_fast, "BLOCK_SI_MAX_VECTORS", 0)
    C, _ = trained_like(2)
    L = pc.affinity(pc.thrC(C, 0.2), 5, 4, 2.0, "mesc")
    L[0, 1:] = 0.0
    L[1:, 0] = 0.0
    info = {}
    got = pc_fast._spectral_inplace(L.copy(), 5, 0, info)
    assert info["lanczos_products"] > 0 and "Cholesky" in info["spectral"]
    np.testing.assert_array_equal(got[1:], pc.spectral(L, 5, 0)[1:])


def test_strict_recomputes_with_the_lu_above_the_cholesky_size(monkeypatch):
    """Above SI_LU_MAX_N the fast route's spectral step takes a Cholesky factor (labels equal
    sklearn's to rounding only); strict's recomputation must take sklearn's LU there too, as
    documented, so that its labels are the reference's bit for bit."""
    monkeypatch.setattr(pc_fast, "SI_LU_MAX_N", 0)
    C, _ = trained_like(0, noise=0.0)  # block-diagonal after thrC: ill-posed, strict recomputes
    info = {}
    strict = pc.cluster(C, 5, 0.2, 4, 1.0, "mesc", seed=3, method="strict", info=info)
    assert info["fallback"] == "reference affinity"
    assert info["spectral"] == "sklearn's ARPACK shift-invert (LU), in place"
    np.testing.assert_array_equal(
        strict, pc.cluster(C, 5, 0.2, 4, 1.0, "mesc", seed=3, method="reference"))


def test_svd_fallback_is_flagged_and_strict_gives_the_reference(monkeypatch):
    """Where the fast SVD gives up (ill-determined rank-r subspace, ARPACK failure) and the
    reference svds runs instead, the labels are flagged ill_posed whatever the spectral step
    finds, so that strict recomputes."""
    monkeypatch.setattr(pc_fast, "_svd_embedding_fast", lambda *args, **kwargs: None)
    C, _ = trained_like(0)  # well-posed: the spectral step alone would not flag it
    info = {}
    pc.cluster(C, 5, 0.2, 4, 1.0, "mesc", seed=0, info=info)
    assert info["svd"] == "reference svds (fallback)" and info["ill_posed"] is True
    info = {}
    strict = pc.cluster(C, 5, 0.2, 4, 1.0, "mesc", seed=0, method="strict", info=info)
    assert info["fallback"] == "reference affinity"
    np.testing.assert_array_equal(
        strict, pc.cluster(C, 5, 0.2, 4, 1.0, "mesc", seed=0, method="reference"))


def test_rank_n_minus_1_above_the_dense_size_falls_back_to_svds(monkeypatch):
    """Above DENSE_SVD_MAX_N ARPACK needs k = r + 1 < n; with r clipped to n − 1
    (d·K + 1 ≥ n − 1) it cannot run, and the reference svds (k = r < n) must be used instead of
    eigsh raising."""
    monkeypatch.setattr(pc_fast, "DENSE_SVD_MAX_N", 0)
    C = np.random.default_rng(0).random((12, 12))
    info = {}
    labels = pc.cluster(C, 4, 0.5, 3, 1.0, seed=0, info=info)  # r = min(13, 11) = 11
    assert info["svd"] == "reference svds (fallback)" and info["ill_posed"]
    assert labels.shape == (12,)


@pytest.mark.parametrize("solver,copies", [("ARPACK", 50), ("PROPACK", 300)])
def test_multiple_singular_value_at_the_rank_above_the_dense_size_falls_back_to_svds(
        monkeypatch, solver, copies):
    """C = blocks ⊕ 5·I ('dsc'): CᵀC has the eigenvalue 25 fifty (or 300) times, straddling
    r = 25. Single-vector Lanczos (ARPACK's; PROPACK's bidiagonalisation) finds copies of a
    multiple eigenvalue only by rounding: ARPACK skipped some and went on to smaller
    eigenvalues, so σ_r² − σ_{r+1}² looked far from 0 and the ill-determined subspace passed
    the gap check. A value found twice now sends it to svds, flagged."""
    monkeypatch.setattr(pc_fast, "DENSE_SVD_MAX_N", 10)
    if solver == "PROPACK":  # its basis fits (n 330)
        _propack_on_small_c(monkeypatch)
    rng = np.random.default_rng(0)
    A = np.abs(rng.standard_normal((30, 30))) + 3 * scipy.linalg.block_diag(
        np.ones((15, 15)), np.ones((15, 15)))
    C = scipy.linalg.block_diag(A, 5 * np.eye(copies))
    Cs = pc_fast._pretreat_sparse(pc_thrc.thrC_sparse(C, 1.0), "dsc")
    info = {}
    assert pc_fast._svd_embedding_fast(Cs, 3, 8, info) is None
    assert info["svd"].startswith(solver) and info["svd_gap"] < pc_fast.SVD_GAP_MIN
    info = {}
    pc.cluster(C, 3, 1.0, 8, 1.0, "dsc", info=info)
    assert info["svd"] == "reference svds (fallback)" and info["ill_posed"]


@pytest.mark.parametrize("method", ["fast", "strict", "reference"])
def test_thrC_ratio_zero_is_taken(method):
    """ratio 0 is a valid thrC setting (each column keeps its largest entry; the check says
    ">= 0"): cluster() runs on it instead of refusing it."""
    C, _ = trained_like(0)
    labels = pc.cluster(C, 5, 0.0, 4, 1.0, "mesc", seed=0, method=method)
    assert labels.shape == (C.shape[0],)
    np.testing.assert_array_equal(pc.thrC(C, 0.0) != 0, pc.thrC(C, 1e-9) != 0)


@pytest.mark.parametrize("method", ["fast", "strict", "reference"])
def test_power_zero_is_one_clear_error(method):
    """power 0 makes every affinity 1 (Z⁰): refused like a negative power, by name."""
    C, _ = trained_like(0)
    with pytest.raises(MescError, match="power must be a finite number > 0, got 0"):
        pc.cluster(C, 5, 0.2, 4, 0, "mesc", method=method)


@pytest.mark.parametrize("method", ["fast", "strict", "reference"])
def test_a_power_that_overflows_the_affinity_is_one_clear_error(method):
    """A finite power past ~1e18 raises entries of U·Uᵀ at 1 + rounding to inf, and the
    normalisation left NaNs that clustered to arbitrary labels (exit 0): now refused, without
    NumPy's overflow warning."""
    C, _ = trained_like(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(MescError, match=r"affinity overflowed at power 1e\+300.*smaller"):
            pc.cluster(C, 5, 0.2, 4, 1e300, "mesc", method=method)


@pytest.mark.parametrize("power", [1.0, 8.0])
def test_propack_route_labels_equal_reference(monkeypatch, power):
    """The SVD by PROPACK (above DENSE_SVD_MAX_N where its basis fits), then the rest of the
    fast route: the reference's labels, certified."""
    _propack_on_small_c(monkeypatch)
    for seed in range(3):
        C, _ = trained_like(seed)
        info = {}
        fast = pc.cluster(C, 5, 0.2, 4, power, "mesc", seed=seed, info=info)
        assert info["svd"] == "PROPACK on sparse C" and not info["ill_posed"]
        np.testing.assert_array_equal(
            fast, pc.cluster(C, 5, 0.2, 4, power, "mesc", seed=seed, method="reference"))


def test_propack_is_seeded_and_its_failures_go_to_arpack(monkeypatch):
    """The same seed gives the same bits; where PROPACK raises (not converged within its
    basis, or unavailable) or returns a pair far from converged (its test is on the values),
    ARPACK computes the SVD and the labels are still the reference's."""
    _propack_on_small_c(monkeypatch)
    C, _ = trained_like(1)
    Cs = pc_fast._pretreat_sparse(pc_thrc.thrC_sparse(C, 0.2), "mesc")
    kw = pc_ref.arpack_rng(3)
    first = pc_fast._svd_embedding_fast(Cs, 5, 4, {}, pc_ref.arpack_rng(3))
    np.testing.assert_array_equal(first, pc_fast._svd_embedding_fast(Cs, 5, 4, {}, kw))
    reference = pc.cluster(C, 5, 0.2, 4, 8.0, "mesc", seed=0, method="reference")
    real = pc_fast.svds

    def fails(*args, **kwargs):
        raise np.linalg.LinAlgError("k=26 singular triplets did not converge")

    def unconverged(*args, **kwargs):
        u, s, vt = real(*args, **kwargs)
        return u, s, vt + 1e-6 * np.random.default_rng(0).standard_normal(vt.shape)

    for fake in (fails, unconverged):
        monkeypatch.setattr(pc_fast, "svds", fake)
        info = {}
        labels = pc.cluster(C, 5, 0.2, 4, 8.0, "mesc", seed=0, info=info)
        assert info["svd"] == "ARPACK on sparse CᵀC" and not info["ill_posed"], fake
        np.testing.assert_array_equal(labels, reference)


def test_an_info_dict_used_again_does_not_carry_an_earlier_flag():
    """cluster() kept what a dict already held: an ill_posed True (and the strict route's
    fallback) of an earlier C stayed set for a well-posed one, and strict recomputed it."""
    C, _ = trained_like(1)
    info = {}
    pc.cluster(np.full((160, 160), 1e-4, np.float32), 5, 0.2, 4, 2.0, "mesc", seed=0,
               info=info, method="strict")
    assert info["ill_posed"] and "fallback" in info  # a constant C: no structure
    labels = pc.cluster(C, 5, 0.2, 4, 2.0, "mesc", seed=0, info=info, method="strict")
    fresh = {}
    again = pc.cluster(C, 5, 0.2, 4, 2.0, "mesc", seed=0, info=fresh, method="strict")
    assert info == fresh and not info["ill_posed"] and "fallback" not in info
    np.testing.assert_array_equal(labels, again)
