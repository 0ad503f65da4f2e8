"""Clustering metrics as computed by MESC at its evaluation step (reference-facts §3.3).

ACC uses best_map (Hungarian matching with the ``munkres`` package, as the originals do). NMI,
ARI and purity do not depend on the cluster numbering. ``f1`` is micro-F1 on the *mapped*
predictions (for single-label data it equals ACC); ``f1_unmapped`` reproduces the value MESC
printed, which depends on the arbitrary cluster ids. sklearn's NMI default changed in 0.22
(pitfall 15); 'arithmetic' is used unless asked otherwise (the paper's formula is 'max').
"""

from __future__ import annotations

import numpy as np
from munkres import Munkres
from sklearn.metrics import adjusted_rand_score, f1_score, normalized_mutual_info_score
from sklearn.metrics.cluster import contingency_matrix

from mesc_tf.errors import MescError, one_line


def _labels(y, name: str) -> np.ndarray:
    """y as a 1-D int64 array; an (n, 1) or (1, n) array (e.g. gnd from a .mat file) is flattened.
    Whole-number floats and bools are taken; values outside int64's range are refused (the cast
    would wrap them, merging classes)."""
    try:
        y = np.asarray(y)
    except (TypeError, ValueError) as e:  # ragged nested lists
        raise MescError(f"{name} is not an array of labels ({one_line(e)})") from None
    if y.ndim == 2 and 1 in y.shape:
        y = y.ravel()
    if y.ndim != 1 or y.size == 0:
        raise MescError(f"{name} must be a non-empty 1-D array of labels, got shape {y.shape}")
    whole = (np.issubdtype(y.dtype, np.integer) or y.dtype == bool or
             (np.issubdtype(y.dtype, np.floating) and np.all(np.isfinite(y)) and
              np.all(y == np.round(y))))
    if not whole:
        raise MescError(f"{name} must hold whole-number labels, got dtype {y.dtype}; "
                        "pass integer class / cluster ids")
    if ((y.dtype.kind == "u" and y.max() > np.iinfo(np.int64).max) or
            (y.dtype.kind == "f" and not (-2.0**63 <= y.min() and y.max() < 2.0**63))):
        raise MescError(f"{name} holds labels outside the int64 range ({y.min()}..{y.max()}); "
                        "renumber them, e.g. with np.unique(y, return_inverse=True)[1]")
    return y.astype(np.int64)


def _pair(y_true, y_pred):
    y_true, y_pred = _labels(y_true, "y_true"), _labels(y_pred, "y_pred")
    if y_true.shape != y_pred.shape:
        raise MescError(f"y_true and y_pred differ in length ({y_true.size} vs {y_pred.size}); "
                        "pass one predicted label per sample")
    return y_true, y_pred


def labels_for(y, n: int) -> np.ndarray:
    """``y`` as :func:`evaluate` takes it, checked to hold one label per sample of ``n``."""
    y = _labels(y, "y")
    if y.size != n:
        raise MescError(f"y has {y.size} labels for {n} samples; pass one label per sample "
                        "(or None)")
    return y


def best_map(y_true, y_pred) -> np.ndarray:
    """Relabel each predicted cluster with its Hungarian-matched ground-truth label.

    As in the reference: contingency G[i, j] = #(gt = class i, pred = cluster j), padded to a
    square max(#classes, #clusters) matrix, Munkres on -Gᵀ. Clusters matched to no class (more
    clusters than classes, where the original fails) get labels no class has (above
    max(y_true) where int64 has room), so they always count as errors.
    """
    y_true, y_pred = _pair(y_true, y_pred)
    classes, gt_idx = np.unique(y_true, return_inverse=True)
    clusters, pr_idx = np.unique(y_pred, return_inverse=True)
    k = max(classes.size, clusters.size)
    G = np.zeros((k, k))
    np.add.at(G, (gt_idx, pr_idx), 1.0)
    match = dict(Munkres().compute((-G.T).tolist()))  # cluster index -> class index
    top = int(classes.max())
    if top + k < 2**63:
        extra = top + 1 + np.arange(k)
    else:  # no room above int64's largest label: the smallest unused ones
        extra = np.setdiff1d(np.arange(classes.size + k), classes)
    new = np.array([classes[match[j]] if match[j] < classes.size else extra[j]
                    for j in range(clusters.size)], dtype=np.int64)
    return new[pr_idx]


def accuracy(y_true, y_pred) -> float:
    """ACC = 1 − missrate after best_map."""
    y_true, y_pred = _pair(y_true, y_pred)
    return float(np.mean(best_map(y_true, y_pred) == y_true))


def nmi(y_true, y_pred, average_method: str = "arithmetic") -> float:
    """sklearn NMI (numbering-independent); 'arithmetic' is sklearn's default since 0.22."""
    methods = ("arithmetic", "geometric", "min", "max")
    if average_method not in methods:
        raise MescError(f"nmi: average_method must be one of {', '.join(methods)}, got "
                        f"{average_method!r}")
    y_true, y_pred = _pair(y_true, y_pred)
    return float(normalized_mutual_info_score(y_true, y_pred, average_method=average_method))


def purity(y_true, y_pred) -> float:
    """Σ over predicted clusters of the largest class count in it, divided by n."""
    y_true, y_pred = _pair(y_true, y_pred)
    G = contingency_matrix(y_true, y_pred)  # rows: classes, columns: clusters
    return float(G.max(axis=0).sum() / y_true.size)


def ari(y_true, y_pred) -> float:
    """sklearn adjusted Rand index."""
    y_true, y_pred = _pair(y_true, y_pred)
    return float(adjusted_rand_score(y_true, y_pred))


def f1(y_true, y_pred) -> float:
    """Micro-F1 on the best_map-mapped predictions (equals ACC for single-label data)."""
    y_true, y_pred = _pair(y_true, y_pred)
    return float(f1_score(y_true, best_map(y_true, y_pred), average="micro"))


def f1_unmapped(y_true, y_pred) -> float:
    """MESC's printed F1: micro-F1 of gt renumbered 1..K against the raw spectral labels + 1.

    ``y_pred`` must be the 0-based labels of :func:`mesc_tf.postcluster.spectral`. MESC shifts
    gt to ``gt − min + 1``, the same as renumbering for consecutive labels (every dataset's).
    The value depends on the arbitrary cluster numbering, so it is only for matching the
    original output.
    """
    y_true, y_pred = _pair(y_true, y_pred)
    gt = np.unique(y_true, return_inverse=True)[1] + 1
    return float(f1_score(gt, y_pred + 1, average="micro"))


def evaluate(y_true, y_pred) -> dict:
    """All metrics as floats: {"acc", "nmi", "pur", "ari", "f1"} (f1 on mapped predictions)."""
    y_true, y_pred = _pair(y_true, y_pred)
    mapped = best_map(y_true, y_pred)  # once: Munkres is pure Python, O(K³)
    return {"acc": float(np.mean(mapped == y_true)), "nmi": nmi(y_true, y_pred),
            "pur": purity(y_true, y_pred), "ari": ari(y_true, y_pred),
            "f1": float(f1_score(y_true, mapped, average="micro"))}
