"""Metrics (reference-facts §3.3)."""

import numpy as np
import pytest

from mesc_tf.errors import MescError
from mesc_tf.metrics import (accuracy, ari, best_map, evaluate, f1, f1_unmapped, nmi, purity)


def test_permuted_labels_are_perfect():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 6, 200) * 3 + 7  # labels need not be 0..K-1
    perm = rng.permutation(6)
    pred = perm[(y - 7) // 3]
    np.testing.assert_array_equal(best_map(y, pred), y)
    res = evaluate(y, pred)
    assert set(res) == {"acc", "nmi", "pur", "ari", "f1"}
    assert all(isinstance(v, float) for v in res.values())
    for key in res:
        assert res[key] == pytest.approx(1.0)


def test_hand_computed_example():
    # classes 1,1,1,2,2,2,3,3 ; clusters: {1: 1,1,2}, {0: 1,2,2}, {2: 3,3}
    y = np.array([1, 1, 1, 2, 2, 2, 3, 3])
    pred = np.array([1, 1, 0, 1, 0, 0, 2, 2])
    np.testing.assert_array_equal(best_map(y, pred), [1, 1, 2, 1, 2, 2, 3, 3])
    assert accuracy(y, pred) == pytest.approx(6 / 8)
    assert purity(y, pred) == pytest.approx((2 + 2 + 2) / 8)
    assert f1(y, pred) == pytest.approx(6 / 8)  # mapped micro-F1 = ACC
    # unmapped: gt stays 1..3, pred + 1 = 2,2,1,2,1,1,3,3 agrees at positions 2, 3, 6, 7
    assert f1_unmapped(y, pred) == pytest.approx(4 / 8)
    assert nmi(y, pred) == nmi(y, pred + 10)
    # both partitions have sizes 3, 3, 2: H = 11/4 ln2 − 3/4 ln3, MI = 13/4 ln2 − 3/2 ln3
    ln2, ln3 = np.log(2), np.log(3)
    assert nmi(y, pred) == pytest.approx((13 / 4 * ln2 - 1.5 * ln3) / (11 / 4 * ln2 - 0.75 * ln3))
    # pairs: 3 agree in both, 7 within a class, 7 within a cluster, 28 in all
    assert ari(y, pred) == pytest.approx((3 - 7 * 7 / 28) / (7 - 7 * 7 / 28))  # 5/21


def test_nmi_normalisations():
    """Unequal entropies, so the normalisations differ (pitfall 15: 'arithmetic' by default)."""
    y, pred = np.array([0, 0, 0, 1, 1, 1]), np.array([0, 0, 1, 1, 2, 2])
    mi, h_y, h_pred = 2 / 3 * np.log(2), np.log(2), np.log(3)
    assert nmi(y, pred) == pytest.approx(mi / ((h_y + h_pred) / 2))
    assert nmi(y, pred, "max") == pytest.approx(mi / h_pred)
    assert nmi(y, pred, "min") == pytest.approx(mi / h_y)


def test_mismatched_cluster_counts():
    y = np.array([0, 0, 0, 1, 1, 1])
    more = np.array([5, 5, 6, 7, 7, 7])  # 3 clusters, 2 classes
    mapped = best_map(y, more)
    np.testing.assert_array_equal(mapped[[0, 1, 3, 4, 5]], [0, 0, 1, 1, 1])
    assert mapped[2] not in (0, 1)  # the unmatched cluster counts as wrong
    assert accuracy(y, more) == pytest.approx(5 / 6)
    first = np.array([5, 6, 6, 7, 7])  # the unmatched cluster is the first: still wrong
    assert best_map([1, 0, 0, 1, 1], first)[0] not in (0, 1)
    assert accuracy([1, 0, 0, 1, 1], first) == pytest.approx(4 / 5)
    assert purity(y, more) == pytest.approx(1.0)
    fewer = np.zeros(6, dtype=int)  # 1 cluster, 2 classes
    assert accuracy(y, fewer) == pytest.approx(0.5)
    assert evaluate(y, fewer)["pur"] == pytest.approx(0.5)


def test_column_vector_and_float_labels():
    y = np.array([[1.0], [1.0], [2.0], [2.0]])  # gnd as loaded from a .mat file
    assert accuracy(y, [1, 1, 0, 0]) == 1.0
    # a (1, n) row as well: flattened, not refused or read as one sample of n labels
    assert accuracy(y.T, np.array([[1, 1, 0, 0]])) == 1.0
    assert nmi(y.T, [0, 0, 1, 1]) == pytest.approx(1.0)


def test_bad_input():
    with pytest.raises(MescError, match=r"differ in length \(3 vs 2\)"):
        accuracy([0, 1, 1], [0, 1])
    with pytest.raises(MescError, match="non-empty 1-D array"):
        evaluate([], [])
    with pytest.raises(MescError, match="whole-number labels"):
        nmi([0.5, 1.0], [0, 1])


def test_labels_beyond_int64_are_refused_not_wrapped():
    """1e20 and 2e20 both cast to int64's minimum: two classes became one (ACC 0.5, not 1)."""
    with pytest.raises(MescError, match=r"y_true holds labels outside the int64 range"):
        accuracy([1e20, 1e20, 2e20, 2e20], [0, 0, 1, 1])
    with pytest.raises(MescError, match=r"y_pred holds labels outside the int64 range"):
        accuracy([0, 0, 1, 1], np.array([2**64 - 1, 2**64 - 1, 0, 0], dtype=np.uint64))
    # int64's own extremes are fine, and an unmatched cluster still counts as wrong: its
    # fresh label used to wrap round to int64's minimum, here a class.
    lo, hi = -2**63, 2**63 - 1
    y = np.array([lo, lo, lo, hi, hi, hi])
    pred = np.array([0, 1, 1, 2, 2, 2])  # cluster 0 (one sample of class lo) is unmatched
    assert accuracy(y, pred) == pytest.approx(5 / 6)
    assert best_map(y, pred)[0] not in (lo, hi)


def test_bool_labels_and_ragged_input():
    assert accuracy(np.array([True, True, False, False]), [1, 1, 0, 0]) == 1.0
    with pytest.raises(MescError, match="y_true is not an array of labels"):
        accuracy([[0, 1], [1]], [0, 1])


def test_f1_unmapped_renumbers_gt_to_one_based():
    """MESC's printed F1 compares gt renumbered 1..K with spectral labels + 1 (§3.3): labels
    0..K-1 or 5, 6, 7 must give the same value as gt 1..K (sklearn's micro-F1 by hand)."""
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(4)
    y = rng.integers(0, 3, 40)
    pred = rng.integers(0, 3, 40)
    want = f1_score(y + 1, pred + 1, average="micro")  # = mean(y == pred)
    assert want == pytest.approx(np.mean(y == pred))
    assert f1_unmapped(y, pred) == pytest.approx(want)
    assert f1_unmapped(y + 5, pred) == pytest.approx(want)


def test_metrics_against_independent_definitions():
    """Random labelings with more, fewer and as many clusters as classes: ACC against scipy's
    linear_sum_assignment, purity against its loop, NMI / ARI against sklearn."""
    from scipy.optimize import linear_sum_assignment
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    rng = np.random.default_rng(5)
    for k_true, k_pred in ((4, 4), (3, 5), (5, 3)):
        y = rng.integers(0, k_true, 60) * 2 + 1
        pred = rng.integers(0, k_pred, 60) + 10
        classes, clusters = np.unique(y), np.unique(pred)
        G = np.array([[np.sum((y == a) & (pred == b)) for b in clusters] for a in classes])
        rows, cols = linear_sum_assignment(-G)
        assert accuracy(y, pred) == pytest.approx(G[rows, cols].sum() / y.size)
        pur = sum(max(np.sum((y == a) & (pred == b)) for a in classes) for b in clusters)
        res = evaluate(y, pred)
        assert res["pur"] == pytest.approx(pur / y.size) == purity(y, pred)
        assert res["nmi"] == pytest.approx(normalized_mutual_info_score(y, pred))
        assert res["ari"] == pytest.approx(adjusted_rand_score(y, pred))
        assert res["acc"] == pytest.approx(accuracy(y, pred)) == pytest.approx(res["f1"])
