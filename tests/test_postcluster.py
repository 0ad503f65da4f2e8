"""Post-clustering (reference-facts §3.1-§3.2): thrC equals the column loop; block recovery."""

import warnings

import numpy as np
import pytest

from mesc_tf.errors import MescError, MescWarning
from mesc_tf.metrics import accuracy
from mesc_tf.postcluster import thrc as pc_thrc
from mesc_tf.postcluster import affinity, cluster, post_proC, pretreat, spectral, thrC
from synthetic import noisy_blocks as _blocks  # tests/synthetic.py


def thrC_loop(C, ro):
    """The column-by-column definition of §3.1 (the reference's loop), as NumPy 1.x ran it:
    its ``csum = 0`` then ``csum + S[t, i]`` summed in float64 (NumPy 2 keeps float32)."""
    if ro >= 1:
        return C
    n = C.shape[1]
    Cp = np.zeros((n, n))
    S = np.abs(np.sort(-np.abs(C), axis=0))
    Ind = np.argsort(-np.abs(C), axis=0)
    for i in range(n):
        cL1 = np.sum(S[:, i]).astype(float)
        csum, t = np.float64(0), 0
        while True:
            csum = csum + S[t, i]
            if csum > ro * cL1:
                Cp[Ind[0:t + 1, i], i] = C[Ind[0:t + 1, i], i]
                break
            t += 1
    return Cp


def _matrices():
    rng = np.random.default_rng(0)
    yield rng.standard_normal((40, 40))
    yield rng.standard_normal((30, 30)).astype(np.float32)
    yield rng.integers(-3, 4, (35, 35)).astype(np.float64)  # many ties
    yield rng.integers(-2, 3, (25, 25)).astype(np.float32)
    yield np.abs(rng.standard_normal((20, 20))) * 1e-4


@pytest.mark.parametrize("ratio", [0.01, 0.2, 0.5, 0.99, 1.0])
def test_thrC_matches_loop(ratio):
    for C in _matrices():
        C[:, 3] = 0  # an all-zero column, where the loop would fail
        nonzero = np.abs(C).sum(axis=0) > 0
        got = thrC(C, ratio)
        assert got.dtype == C.dtype
        # The loop fails on all-zero columns; compare column by column on the others.
        Cz = C.copy()
        Cz[:, ~nonzero] = 1.0  # any non-zero filler: columns are independent
        ref = thrC_loop(Cz, ratio)
        np.testing.assert_array_equal(got[:, nonzero], ref[:, nonzero])
        assert not got[:, ~nonzero].any()
        if ratio < 1:  # the reference route's vectorised thrC, against the loop too
            np.testing.assert_array_equal(pc_thrc.thrC_reference(C, ratio)[:, nonzero],
                                          ref[:, nonzero])


def test_thrC_keeps_input_and_ratio_one_copies():
    C = np.random.default_rng(1).standard_normal((10, 10))
    C0 = C.copy()
    out = thrC(C, 1.0)
    assert out is not C and np.array_equal(out, C0)
    c32 = np.random.default_rng(0).random((3, 3)).astype(np.float32)
    c32[:, 0] = [1.0, 4e-8, 4e-8]  # its float32 sum rounds to 1.0: ratio 1 still keeps all
    np.testing.assert_array_equal(thrC(c32, 1.0), c32)
    thrC(C, 0.1)
    assert np.array_equal(C, C0)


def test_thrC_running_sum_is_float64_as_the_released_code_ran():
    """A float32 column of 1 and 64 magnitudes just under 2⁻²⁴: a float32 running sum stays at
    1.0 (1 + x rounds back to 1) and never passes a bar just above 1; the float64 sum of the
    released code's NumPy 1.x passes it after 33 of them, keeping 34 entries."""
    n = 65
    small = 2.0**-24 * (1 - np.arange(1, n) * 2.0**-20)  # distinct, exact in float32
    rng = np.random.default_rng(0)
    C = rng.random((n, n)).astype(np.float32)
    C[:, 0] = np.concatenate([[1.0], small])[rng.permutation(n)]
    assert np.float32(1) + np.float32(small[0]) == 1  # float32 sums would stall
    ratio = (1 + 2.0**-19) / float(np.sum(np.sort(C[:, 0])[::-1]))
    got = thrC(C, ratio)
    assert np.count_nonzero(got[:, 0]) == 34
    np.testing.assert_array_equal(got, thrC_loop(C, ratio))


def test_thrC_bar_uses_the_columns_own_float32_l1_sum():
    """The bar is ratio × the column's L1 sum in its own dtype (§3.1, the loop's np.sum): for
    float32 [1, e, e, e] with e = 2⁻²⁴ that sum rounds to 1.0, so at ratio 1/(1 + 1.5e) the
    first entry already passes it and only it is kept; a float64 L1 (1 + 3e) keeps three."""
    e = np.float32(2.0**-24)
    C = np.random.default_rng(0).random((4, 4)).astype(np.float32)
    C[:, 0] = [e, 1, e, e]
    ratio = 1 / (1 + 1.5 * float(e))
    for got in (thrC(C, ratio), pc_thrc.thrC_reference(C, ratio)):
        np.testing.assert_array_equal(got, thrC_loop(C, ratio))
        assert np.count_nonzero(got[:, 0]) == 1


def test_thrC_bar_straddled_by_float32_rounding_either_way():
    """Random float32 columns whose own-dtype L1 sum is below, then above, the float64 one; the
    ratio puts a running-sum value between the two bars, so a float64 bar would stop one entry
    late (the next sum is far above it) or early (the previous far below). Both must be caught
    and redone as the reference (the loop of §3.1) does."""
    n, k = 40, 13
    C = np.random.default_rng(7).random((n, n)).astype(np.float32)
    S = np.abs(np.sort(-np.abs(C), axis=0))
    l32 = np.array([np.sum(S[:, i]) for i in range(n)], np.float64)  # 1-D: pairwise
    l64 = np.sum(S.astype(np.float64), axis=0)
    for below in (True, False):
        j = int(np.flatnonzero((l32 < l64) if below else (l32 > l64))[0])
        csum = np.cumsum(S[:, j], dtype=np.float64)[k]
        ratio = csum / (0.5 * (l32[j] + l64[j]))
        assert (ratio * l32[j] < csum) == below and (csum < ratio * l64[j]) == below
        want = thrC_loop(C, ratio)
        assert np.count_nonzero(want[:, j]) == (k + 1 if below else k + 2)
        np.testing.assert_array_equal(thrC(C, ratio), want)
        np.testing.assert_array_equal(pc_thrc.thrC_reference(C, ratio), want)


def test_thrC_column_that_never_passes_the_bar_is_kept_whole():
    """Ratio 1 − 2⁻⁵³ on a float64 column [1, 16 × 2⁻⁵³]: the running sum stays at 1.0 but the
    pairwise L1 sum is 1 + 14·2⁻⁵³, so no position passes the bar. The loop would index past
    the end; thrC (both forms) keeps the column whole, as ratio ≥ 1 would, not only its top."""
    n = 17
    C = np.random.default_rng(1).random((n, n))
    C[:, 0] = np.r_[1.0, np.full(n - 1, 2.0**-53)]
    ratio = 1 - 2.0**-53
    for got in (thrC(C, ratio), pc_thrc.thrC_reference(C, ratio),
                pc_thrc.thrC_sparse(C, ratio).toarray()):
        np.testing.assert_array_equal(got[:, 0], C[:, 0])


def test_thrC_sparse_stores_no_explicit_zeros():
    """thrC_sparse drops the zeros it keeps (an all-zero column is kept whole): its stored
    entries are exactly thrC's non-zeros."""
    C = np.random.default_rng(2).standard_normal((30, 30))
    C[:, 3] = 0
    C[::4, 5] = 0
    for ratio in (0.2, 0.9):
        Cs = pc_thrc.thrC_sparse(C, ratio)
        assert Cs.nnz == np.count_nonzero(thrC(C, ratio))
        np.testing.assert_array_equal(Cs.toarray(), thrC(C, ratio))


def test_thrC_returns_C_order_for_any_layout():
    """The reference's Cp = np.zeros((N, N)) is C-ordered whatever C is; the SVD downstream
    rounds by layout, so a Fortran-ordered C must give the same array."""
    C = np.random.default_rng(2).standard_normal((30, 30)).astype(np.float32)
    got = thrC(np.asfortranarray(C), 0.2)
    assert got.flags.c_contiguous
    np.testing.assert_array_equal(got, thrC(C, 0.2))


def test_bad_inputs():
    with pytest.raises(MescError, match=r"thrC: C must be a square n×n matrix .* shape \(3, 4\)"):
        thrC(np.ones((3, 4)), 0.1)
    with pytest.raises(MescError, match="thrC: C contains NaN or inf"):
        thrC(np.array([[1.0, np.nan], [0.0, 1.0]]), 0.1)
    with pytest.raises(MescError,
                       match="n_clusters must be a whole number between 1 and n=5, got 6"):
        post_proC(np.eye(5), 6, 1, 1.0)
    with pytest.raises(MescError, match="unknown post_proC variant 'nope'"):
        pretreat(np.eye(3), "nope")
    with pytest.raises(MescError, match=r"square n×n matrix with n >= 2, got shape \(1, 1\)"):
        cluster(np.ones((1, 1)), 1, 0.2, 1, 1.0)
    with pytest.raises(MescError, match="subspace_dim must be a whole number >= 1, got 0"):
        cluster(np.eye(5), 2, 0.2, 0, 1.0)
    # A bool is not a number here (True passed for 1, as Settings already refused it).
    with pytest.raises(MescError, match="subspace_dim must be a whole number >= 1, got True"):
        cluster(np.eye(5), 2, 0.2, True, 1.0)
    with pytest.raises(MescError, match="n_clusters must be a whole number between 1 and n=5, "
                                        "got True"):
        post_proC(np.eye(5), True, 1, 1.0)
    # The seed and info are checked before thrC and the SVD run, not inside NumPy or sklearn.
    for method in ("fast", "reference"):
        for seed in (-1, 2**40, 2.5, "a"):
            with pytest.raises(MescError, match="seed must be a whole number from 0 to"):
                cluster(np.eye(5), 2, 0.2, 1, 1.0, seed=seed, method=method)
    with pytest.raises(MescError, match=r"info must be a dict .*, got \[\]"):
        cluster(np.eye(5), 2, 0.2, 1, 1.0, info=[])


def test_integer_and_boolean_C_are_taken_as_float64():
    """Whole numbers become float64, not float32 (2²⁴ + 1 has no float32), and a boolean C is a
    0/1 matrix, not an error."""
    C = np.array([[2**24 + 1, 1], [3, 2**24 + 3]])
    out = thrC(C, 1.0)
    assert out.dtype == np.float64 and np.array_equal(out, C)
    B = _blocks()[0] > 0.3
    np.testing.assert_array_equal(cluster(B, 4, 0.2, 3, 4.0),
                                  cluster(np.float64(B), 4, 0.2, 3, 4.0))


def test_reference_route_passes_its_settings_on(monkeypatch):
    """cluster(method="reference") is thrC_reference (skipped where thr >= 1), affinity with
    the variant, then spectral with the seed; ``info`` names the route, each step's seconds
    are its own, and ``import *`` gives the six public names."""
    from types import SimpleNamespace

    import mesc_tf.postcluster as pc

    calls = []

    def spy(name):
        real = getattr(pc, name)

        def recorded(*args):
            calls.append((name, args[1:]))
            return real(*args)

        monkeypatch.setattr(pc, name, recorded)

    for name in ("thrC_reference", "affinity", "spectral"):
        spy(name)
    C, _ = _blocks()
    clock = iter([0.0, 1.0, 3.0, 6.0])
    monkeypatch.setattr(pc, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    info = {}
    _, timings = cluster(C, 4, 0.2, 3, 4.0, "dsc", seed=5, method="reference",
                         return_timings=True, info=info)
    assert info == {"method": "reference"}
    assert calls == [("thrC_reference", (0.2,)), ("affinity", (4, 3, 4.0, "dsc")),
                     ("spectral", (4, 5))]
    assert timings == {"thrc_s": 1.0, "svd_s": 2.0, "spectral_s": 3.0}
    calls.clear()
    monkeypatch.setattr(pc, "time", SimpleNamespace(perf_counter=lambda: 0.0))
    cluster(C, 4, 1.0, 3, 4.0, method="reference")
    assert [name for name, _ in calls] == ["affinity", "spectral"]
    names = {}
    exec("from mesc_tf.postcluster import *", names)
    assert set(names) - {"__builtins__"} == {"affinity", "cluster", "post_proC", "pretreat",
                                             "spectral", "thrC"}


@pytest.mark.parametrize("method", ["fast", "strict", "reference"])
def test_settings_that_are_not_numbers_are_one_clear_error(method):
    """NaN, inf, None or a string as n_clusters, subspace_dim, thr or power: a MescError naming
    the setting, not numpy's or int()'s error."""
    C = np.abs(np.random.default_rng(0).standard_normal((10, 10)))
    good = dict(n_clusters=2, thr=0.2, subspace_dim=2, power=1.0)
    cases = [("n_clusters", v, "n_clusters must be a whole number") for v in
             (float("nan"), float("inf"), None, "3", 2.5)]
    cases += [("subspace_dim", v, "subspace_dim must be a whole number") for v in
              (float("nan"), None, "2")]
    cases += [("thr", v, r"thr \(the ratio ρ\) must be a finite number")
              for v in (None, "0.2", float("nan"))]
    cases += [("power", v, "power must be a finite number") for v in (None, "8", float("inf"))]
    for name, value, message in cases:
        with pytest.raises(MescError, match=message):
            cluster(C, **{**good, name: value}, method=method)
    with pytest.raises(MescError, match="got '3'"):  # a string is shown as one
        cluster(C, **{**good, "n_clusters": "3"}, method=method)


def test_C_that_is_not_a_dense_numeric_array_is_one_clear_error():
    import scipy.sparse as sp

    with pytest.raises(MescError, match=r"thrC: C is a scipy.sparse matrix; .*C.toarray\(\)"):
        cluster(sp.csr_array(np.eye(5)), 2, 0.2, 1, 1.0)
    with pytest.raises(MescError, match="thrC: C is not an array of numbers"):
        thrC([[1.0, 2.0], [3.0]], 0.2)


@pytest.mark.parametrize("method", ["fast", "strict", "reference"])
def test_C_whose_sums_overflow_is_one_clear_error(method):
    """Finite entries whose column sums (float32: thrC's bar) or squares (the SVD's CᵀC in
    float64) overflow: the fast thrC parted from the reference there, and the routes then
    failed inside numpy or sklearn (IndexError, ValueError)."""
    # 2e37: ten of them sum to 2e38, within a factor 2 of float32's 3.4e38 (the bound's room).
    for C in (np.full((10, 10), 3e38, np.float32), np.full((10, 10), 1e200),
              np.full((10, 10), 2e37, np.float32)):
        with pytest.raises(MescError, match="thrC: C's entries are too large"):
            cluster(C, 2, 0.5, 1, 1.0, method=method)
        with pytest.raises(MescError, match="C's entries are too large"):
            thrC(C, 0.5)


def test_spectral_checks_its_affinity():
    with pytest.raises(MescError, match="spectral: the affinity L has negative entries"):
        spectral(-np.ones((5, 5)), 2)  # sklearn: "Input contains NaN"
    with pytest.raises(MescError, match="spectral: L contains NaN or inf; pass an affinity"):
        spectral(np.full((5, 5), np.nan), 2)
    with pytest.raises(MescError, match="spectral: L must be a square .* affinity matrix"):
        spectral(np.ones((5, 4)), 2)


@pytest.mark.parametrize("method", ["fast", "strict", "reference"])
def test_one_cluster_and_all_zero_C(method):
    C, _ = _blocks()
    np.testing.assert_array_equal(cluster(C, 1, 0.2, 3, 4.0, method=method), 0)
    # 'dsc' keeps an all-zero C all zero: no affinity to cluster ('mesc' sets diag := 1). The
    # warning that C links no two samples comes first.
    with pytest.raises(MescError, match="affinity matrix is all zero"), \
            pytest.warns(MescWarning, match="links no two samples"):
        cluster(np.zeros((20, 20), np.float32), 2, 0.2, 2, 1.0, "dsc", method=method)


@pytest.mark.parametrize("method", ["fast", "strict", "reference"])
def test_C_that_links_no_two_samples_is_warned_about(method):
    """A diagonal C (or one whose off-diagonal thrC drops) says nothing about clusters: every
    route still labels it, with a warning that points at the caller. A C with links does not
    warn, not even where its diagonal is zero."""
    C, _ = _blocks()
    np.fill_diagonal(C, 0.0)
    for unlinked, thr in [(np.eye(20), 0.2), (np.diag(np.arange(1.0, 21.0)), 1.0),
                          (C + 1e3 * np.eye(len(C)), 0.2)]:
        with pytest.warns(UserWarning, match="no nonzero entry off its diagonal") as record:
            labels = cluster(unlinked, 2, thr, 2, 1.0, method=method)
        assert record[0].filename == __file__ and labels.shape == (len(unlinked),)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cluster(C, 2, 0.2, 2, 1.0, method=method)


def test_float16_C_is_taken_as_float32():
    C16 = np.random.default_rng(0).standard_normal((60, 60)).astype(np.float16)
    C32 = C16.astype(np.float32)
    out = thrC(C16, 0.2)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, thrC(C32, 0.2))
    np.testing.assert_array_equal(cluster(np.abs(C16), 3, 0.2, 2, 1.0),
                                  cluster(np.abs(C32), 3, 0.2, 2, 1.0))


def test_pretreat_variants():
    C = np.arange(9, dtype=np.float32).reshape(3, 3)
    m = pretreat(C, "mesc")
    assert m.dtype == np.float64 and not np.allclose(m, m.T)  # no symmetrisation
    np.testing.assert_array_equal(np.diag(m), 1)
    np.testing.assert_array_equal(m - np.diag(np.diag(m)), C - np.diag(np.diag(C)))
    d = pretreat(C, "dsc")
    np.testing.assert_array_equal(d, 0.5 * (C + C.T))
    dd = pretreat(C, "dsc_diag")
    np.testing.assert_array_equal(np.diag(dd), 1)
    assert np.allclose(dd, dd.T)
    assert C[0, 0] == 0  # input untouched


@pytest.mark.parametrize("variant", ["mesc", "dsc", "dsc_diag"])
def test_block_diagonal_recovered(variant):
    C, y = _blocks()
    L = affinity(C, 4, 3, 4.0, variant)
    assert L.dtype == np.float64 and np.allclose(L, L.T) and L.max() <= 1.0
    labels = cluster(C, 4, 0.2, 3, 4.0, variant, seed=0)
    assert set(labels) == {0, 1, 2, 3}
    assert accuracy(y, labels) == 1.0


def test_same_seed_same_labels_and_timings():
    C, y = _blocks(seed=2)
    a, times = cluster(C, 4, 0.1, 3, 8.0, "mesc", seed=3, return_timings=True)
    b = cluster(C, 4, 0.1, 3, 8.0, "mesc", seed=3)
    np.testing.assert_array_equal(a, b)
    # These exact blocks make an ill-posed spectral step (power 8: repeated eigenvalues), where
    # only method="strict" promises the reference's numbering (tests/test_postcluster_fast.py).
    strict = cluster(C, 4, 0.1, 3, 8.0, "mesc", seed=3, method="strict")
    np.testing.assert_array_equal(strict, post_proC(thrC(C, 0.1), 4, 3, 8.0, "mesc", seed=3))
    assert set(times) == {"thrc_s", "svd_s", "spectral_s"} and min(times.values()) >= 0


def test_rank_is_d_times_k_plus_one_below_n():
    from mesc_tf.postcluster.reference import rank, svd_embedding

    assert rank(4, 3, 100) == 13 and rank(40, 3, 20) == 19
    C = np.abs(np.random.default_rng(0).standard_normal((30, 30)))
    assert svd_embedding(C, 4, 3).shape == (30, 13)


def test_rank_clipped_below_n():
    C, y = _blocks(sizes=(4, 4))  # d·K+1 = 17 > n-1 = 7
    labels = post_proC(C, 2, 8, 1.0, "dsc")
    assert accuracy(y, labels) == 1.0
    assert spectral(affinity(C, 2, 8, 1.0), 2).shape == (8,)


def test_svd_embedding_and_affinity_against_numpy():
    """Steps 3-7 of §3.2 from LAPACK's SVD, written out: U·diag(√σ) of the r leading triplets,
    rows L2-normalised; Z = UUᵀ with negatives set to 0; L = Z^power / max, symmetrised. The
    fast route shares svd_embedding with the reference, so only this pins it down."""
    from mesc_tf.postcluster.reference import affinity_from_embedding, svd_embedding

    rng = np.random.default_rng(3)
    C = rng.standard_normal((30, 30)) + 3 * np.eye(30)
    r = 2 * 3 + 1
    U, s, _ = np.linalg.svd(C)
    E = U[:, :r] * np.sqrt(s[:r])
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    got = svd_embedding(C, 3, 2)
    np.testing.assert_allclose(got @ got.T, E @ E.T, atol=1e-9)
    Z = np.maximum(E @ E.T, 0.0)
    assert (E @ E.T).min() < -0.1  # the zeroing of negatives matters here
    L = Z**3.5 / (Z**3.5).max()
    np.testing.assert_allclose(affinity_from_embedding(got, 3.5), 0.5 * (L + L.T), atol=1e-9)
    np.testing.assert_allclose(affinity(C, 3, 2, 3.5, "dsc"), affinity_from_embedding(
        svd_embedding(0.5 * (C + C.T), 3, 2), 3.5), atol=0)


def test_svd_embedding_is_the_released_lines_bit_for_bit():
    """The released lines, U = U[:, ::-1]; S = diag(√σ[::-1]); normalize(U.dot(S)), give a
    row-major array, and sklearn's row norms round by layout: the embedding must be that one to
    the last bit, not the same products on the reversed column view."""
    from scipy.sparse.linalg import svds
    from sklearn.preprocessing import normalize

    from mesc_tf.postcluster.reference import svd_embedding

    C = np.random.default_rng(0).random((300, 300)).astype(np.float32)
    U, s, _ = svds(C, 12, v0=np.ones(300))
    want = normalize(U[:, ::-1].dot(np.diag(np.sqrt(s[::-1]))), norm="l2", axis=1)
    np.testing.assert_array_equal(svd_embedding(C, 11, 1), want)


def test_svds_starts_from_a_vector_of_ones(monkeypatch):
    """§3.2 step 3: svds with v0 = ones (ARPACK's start is otherwise random: bits and the
    signs of U change from call to call)."""
    from mesc_tf.postcluster import reference as pc_ref

    seen = []

    def spy(C, r, **kw):
        seen.append(kw.get("v0"))
        return real(C, r, **kw)

    real = pc_ref.svds
    monkeypatch.setattr(pc_ref, "svds", spy)
    C = np.abs(np.random.default_rng(4).standard_normal((25, 25)))
    pc_ref.svd_embedding(C, 3, 2)
    assert len(seen) == 1 and seen[0] is not None
    np.testing.assert_array_equal(seen[0], np.ones(25))


def test_spectral_is_sklearns_discretize_arpack():
    """§3.2 step 8: SpectralClustering(K, arpack, precomputed, 'discretize') with the seed as
    random_state, labels as sklearn gives them (numbering included)."""
    from sklearn.cluster import SpectralClustering

    rng = np.random.default_rng(6)
    X = rng.standard_normal((60, 4))
    L = np.exp(-np.square(X[:, None] - X[None]).sum(-1))  # no clear clusters: methods differ
    for seed in (0, 1):
        want = SpectralClustering(4, eigen_solver="arpack", affinity="precomputed",
                                  assign_labels="discretize", random_state=seed).fit(L).labels_
        np.testing.assert_array_equal(spectral(L, 4, seed), want)
        kmeans = SpectralClustering(4, eigen_solver="arpack", affinity="precomputed",
                                    assign_labels="kmeans", random_state=seed).fit(L).labels_
        assert not np.array_equal(kmeans, want)


def test_post_proC_passes_its_seed_to_the_spectral_step():
    """post_proC(seed=s) is spectral(affinity(C), K, s): on a C without clear clusters the
    discretisation's random rotation, hence the labels, depend on the seed."""
    C = np.abs(np.random.default_rng(8).standard_normal((60, 60)))
    L = affinity(C, 4, 2, 2.0)
    for seed in (1, 2):
        got = post_proC(C, 4, 2, 2.0, seed=seed)
        np.testing.assert_array_equal(got, spectral(L, 4, seed))
        assert not np.array_equal(got, spectral(L, 4, 0))


def test_thrC_more_rows_than_one_copy_tile():
    """thrC copies C's columns into rows tile by tile (256 rows a tile): n = 300 takes two
    tiles, and every row must reach the result (the loop of §3.1 on the same C)."""
    C = np.random.default_rng(9).standard_normal((300, 300)).astype(np.float32)
    want = thrC_loop(C, 0.3)
    np.testing.assert_array_equal(thrC(C, 0.3), want)
    np.testing.assert_array_equal(pc_thrc.thrC_sparse(C, 0.3).toarray(), want)


def test_arpack_rng_is_the_seeds_own_generator():
    """The fast route's eigsh restarts draw from a generator seeded with ``seed`` itself (the
    package docstring), so a run is repeatable under its stated seed; no generator (SciPy's
    own entropy) for a seed that is not a whole number, e.g. None."""
    from mesc_tf.postcluster import reference as pc_ref

    if not pc_ref._EIGSH_TAKES_RNG:
        assert pc_ref.arpack_rng(3) == {}
        return
    for seed in (0, 3, np.int64(7)):
        got = pc_ref.arpack_rng(seed)["rng"].random(4)
        np.testing.assert_array_equal(got, np.random.default_rng(int(seed)).random(4))
    assert pc_ref.arpack_rng(None) == {} and pc_ref.arpack_rng(1.5) == {}


@pytest.mark.parametrize("seed", [-1, 1.5, "x"])
def test_reference_post_proC_and_spectral_check_the_seed_first(seed, monkeypatch):
    """As cluster() does: the project's one-line error before the SVD, not scikit-learn's
    InvalidParameterError after it."""
    from mesc_tf.postcluster import reference

    C = np.random.default_rng(0).random((30, 30))
    monkeypatch.setattr(reference, "svd_embedding", lambda *a, **k: pytest.fail("SVD ran"))
    for call in (lambda: reference.post_proC(C, 3, 4, 2.0, seed=seed),
                 lambda: reference.spectral(C + C.T, 3, seed=seed)):
        with pytest.raises(MescError, match="seed must be a whole number"):
            call()


# --- review of session 65: what users pass to cluster() directly -----------------------------


def test_settings_of_other_number_types_are_used_as_python_floats():
    """thr and power were checked as numbers but used as given: a tf.Tensor or a Decimal
    failed inside thrC or post_proC (AttributeError, TypeError), and an int past float's range
    was an OverflowError."""
    from decimal import Decimal

    import tensorflow as tf

    C, _ = _blocks(seed=1)
    for method in ("fast", "reference"):
        want = cluster(C, 4, thr=0.2, subspace_dim=3, power=2.0, method=method)
        for thr, d, power in ((tf.constant(0.2), 3, tf.constant(2.0)),
                              (Decimal("0.2"), 3.0, Decimal("2")),
                              (np.float64(0.2), np.int64(3), np.float32(2.0))):
            np.testing.assert_array_equal(
                cluster(C, 4, thr=thr, subspace_dim=d, power=power, method=method), want)
    np.testing.assert_array_equal(thrC(C, np.float64(0.2)), thrC(C, 0.2))
    for name in ("thr", "subspace_dim", "power"):
        kwargs = {"thr": 0.2, "subspace_dim": 3, "power": 2.0, name: 10**400}
        with pytest.raises(MescError, match=f"{name}.* must be a"):
            cluster(C, 4, **kwargs)


def test_a_bfloat16_c_is_read_as_float32():
    """A C cast to bfloat16 (TF, ml_dtypes) was refused as 'must be numeric, got dtype
    bfloat16; pass a float matrix'."""
    import tensorflow as tf

    C, _ = _blocks(seed=1)
    low = tf.cast(C, tf.bfloat16)
    np.testing.assert_array_equal(
        cluster(low, 4, thr=0.2, subspace_dim=3, power=2.0),
        cluster(tf.cast(low, tf.float32).numpy(), 4, thr=0.2, subspace_dim=3, power=2.0))


def test_pipeline_cluster_takes_settings_as_a_dict_and_names_a_sparse_c():
    """pipeline.cluster made a sparse C a 0-d array ('must be a square n×n matrix ... got
    shape ()') and failed on a dict of settings with an AttributeError."""
    import scipy.sparse as sp

    from mesc_tf import pipeline
    from mesc_tf.config import Settings

    C, _ = _blocks(seed=1)
    s = Settings(thr=0.2, subspace_dim=3, power=2.0)
    np.testing.assert_array_equal(pipeline.cluster(C, 4, s.to_dict())[0],
                                  pipeline.cluster(C, 4, s)[0])
    with pytest.raises(MescError, match=r"C is a scipy.sparse matrix; pass a dense array"):
        pipeline.cluster(sp.csr_array(C), 4, s)
    with pytest.raises(MescError, match="settings must be a mesc_tf.config.Settings .*got list"):
        pipeline.cluster(C, 4, [0.2, 3, 2.0])
    with pytest.raises(MescError, match="settings has no field 'extra'; its fields are "
                       "framework, regularizer"):
        pipeline.cluster(C, 4, {**s.to_dict(), "extra": 1})


def test_nmi_refuses_an_unknown_average_method():
    from mesc_tf.metrics import nmi

    with pytest.raises(MescError, match="average_method must be one of arithmetic, geometric, "
                       "min, max, got 'maximum'"):
        nmi([0, 1, 1], [1, 0, 0], average_method="maximum")
    assert nmi([0, 1, 1], [1, 0, 0], average_method="max") == 1.0
