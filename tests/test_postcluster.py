"""Post-clustering (reference-facts §3.1-§3.2): thrC equals the column loop; block recovery."""

import numpy as np
import pytest

from mesc_tf.errors import MescError
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
    cases += [("thr", v, "ratio must be a finite number") for v in (None, "0.2", float("nan"))]
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
    # 'dsc' keeps an all-zero C all zero: no affinity to cluster ('mesc' sets diag := 1).
    with pytest.raises(MescError, match="affinity matrix is all zero"):
        cluster(np.zeros((20, 20), np.float32), 2, 0.2, 2, 1.0, "dsc", method=method)


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
