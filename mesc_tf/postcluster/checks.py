"""Input checks shared by the post-clustering routes: one MescError line naming the step,
the problem and what to do."""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from mesc_tf.config import VARIANTS
from mesc_tf.errors import MescError, MescWarning, one_line


def check_square(C, where: str, name: str = "C") -> np.ndarray:
    """C as a finite square 2-D float array (integers become float64, float16 float32: the
    released code's C is float32, and thrC's blocks assume sums at least that precise).
    ``name``: "C" (a self-expression matrix) or "L" (an affinity), for the messages."""
    what, hint = (("self-expression coefficient matrix",
                   "training probably diverged, lower the learning rate or the regulariser weights")
                  if name == "C"
                  else ("affinity matrix", "pass an affinity with entries in [0, 1]"))
    if sp.issparse(C):
        raise MescError(f"{where}: {name} is a scipy.sparse matrix; pass a dense array "
                        f"({name}.toarray())")
    try:
        C = np.asarray(C)
    except (TypeError, ValueError) as e:  # ragged nested lists
        raise MescError(f"{where}: {name} is not an array of numbers ({one_line(e)})") from None
    if C.ndim != 2 or C.shape[0] != C.shape[1] or C.shape[0] < 2:
        raise MescError(f"{where}: {name} must be a square n×n matrix with n >= 2, got shape "
                        f"{C.shape}; pass the {what}")
    if "float" in C.dtype.name and not np.issubdtype(C.dtype, np.floating):
        C = C.astype(np.float32)  # ml_dtypes' bfloat16 or float8 (a TF tensor's)
    if not np.issubdtype(C.dtype, np.floating):
        if not (np.issubdtype(C.dtype, np.integer) or C.dtype == bool):
            raise MescError(f"{where}: {name} must be numeric, got dtype {C.dtype}; "
                            "pass a float matrix")
        C = C.astype(np.float64)
    elif C.dtype.itemsize < 4:
        C = C.astype(np.float32)
    lo, hi = np.min(C), np.max(C)  # NaN propagates; no n×n temporary, unlike np.isfinite
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise MescError(f"{where}: {name} contains NaN or inf; {hint}")
    # thrC sums each column in C's dtype and the SVD squares C in float64: neither may
    # overflow (past that the fast thrC parts from the reference's, or the SVD fails in numpy).
    big, n = float(max(-lo, hi)), C.shape[0]
    own_max, f64_max = float(np.finfo(C.dtype).max), float(np.finfo(np.float64).max)
    if 2 * n * big >= own_max or n * big * big >= f64_max:
        raise MescError(f"{where}: {name}'s entries are too large (up to {big:.3g} in magnitude): "
                        f"its column sums or {name}ᵀ{name} would overflow; {hint}")
    return C


def warn_if_unlinked(C, thr):
    """Warn where thrC's C (dense or sparse) has no nonzero entry off its diagonal: it links no
    two samples, so any labelling fits it equally (each route still returns one). A warning,
    not an error, so that a long run keeps its other results. The warning points at
    cluster's caller."""
    nonzero = np.count_nonzero(C.data if sp.issparse(C) else C)
    if nonzero > np.count_nonzero(C.diagonal()):
        return
    kept = "" if thr >= 1 else f" after thrC (thr {thr:g})"
    warnings.warn(f"post-clustering: C has no nonzero entry off its diagonal{kept}, so it links "
                  "no two samples and the labels are arbitrary; fine-tune longer, or check "
                  "that C is a self-expression matrix", MescWarning, stacklevel=3)


def _as_float(value) -> float | None:
    """value as a float where it is a real number (not a string, nor a bool: True would pass
    for 1); None otherwise."""
    if isinstance(value, (str, bytes, bool, np.bool_)):
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int past float's range
        return None


def _shown(value) -> str:
    """value for a message: strings quoted, so "3" is not taken for 3."""
    return repr(value) if isinstance(value, (str, bytes)) else str(value)


def check_clusters(n_clusters, n: int, where: str) -> int:
    k = _as_float(n_clusters)
    if k is None or not k.is_integer() or not 1 <= k <= n:
        raise MescError(f"{where}: n_clusters must be a whole number between 1 and n={n}, "
                        f"got {_shown(n_clusters)}; check the dataset's number of classes")
    return int(k)


def check_ratio(ratio) -> float:
    """thrC's ratio ρ (``thr``) as a Python float: a Decimal or a tensor passes the check but
    not thrC's arithmetic."""
    r = _as_float(ratio)
    if r is None or not np.isfinite(r) or r < 0:
        raise MescError(f"thrC: thr (the ratio ρ) must be a finite number >= 0, got "
                        f"{_shown(ratio)}; use e.g. 0.03-0.2 (1 or more keeps C unchanged)")
    return r


def check_variant(variant):
    if variant not in VARIANTS:
        raise MescError(f"unknown post_proC variant {variant!r}; "
                        f"choose one of {', '.join(VARIANTS)}")


def affinity_top(L, power, top=None) -> float:
    """The largest entry of the affinity before its normalisation (``top``, where the caller
    has it); a MescError where it is zero (no structure) or not finite (an entry of U·Uᵀ at
    1 + rounding, raised to a power past ~1e18, overflows, and the normalisation would leave
    NaNs)."""
    top = float(L.max() if top is None else top)
    if not np.isfinite(top):
        raise MescError(f"post_proC: the affinity overflowed at power {_shown(power)} (entries "
                        "of U·Uᵀ near 1, raised to it, pass the float64 range); use a smaller "
                        "power (the configured ones are 1 to 16)")
    if not top > 0:
        raise MescError("post_proC: the affinity matrix is all zero (C carries no structure); "
                        "check that training produced a non-zero C")
    return top


def check_affinity_args(n_clusters, subspace_dim, power, n) -> tuple[int, int, float]:
    """(K, d, power) as Python numbers, checked (a tensor or a Decimal passes the check but not
    the arithmetic)."""
    K = check_clusters(n_clusters, n, "post_proC")
    d = _as_float(subspace_dim)
    if d is None or not d.is_integer() or d < 1:
        raise MescError("post_proC: subspace_dim must be a whole number >= 1, "
                        f"got {_shown(subspace_dim)}; the benchmarks use 3-32")
    p = _as_float(power)
    if p is None or not np.isfinite(p) or p <= 0:
        raise MescError(f"post_proC: power must be a finite number > 0, got {_shown(power)}; "
                        "the benchmarks use 1-16")
    return K, int(d), p
