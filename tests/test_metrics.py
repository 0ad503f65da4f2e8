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
