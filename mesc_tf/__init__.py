"""MESC-Net and DSC-Net in TensorFlow 2 / Keras 3.

The public entry points: :class:`MESCClustering` (the scikit-learn estimator),
:func:`load_dataset`, :func:`get_config`, :func:`load_autoencoder`, :func:`save_autoencoder`,
and the error and warning types :class:`MescError` and :class:`MescWarning`. Everything else
lives in the submodules (``mesc_tf.model``, ``mesc_tf.pipeline``, ``mesc_tf.postcluster``, ...).
TensorFlow is imported on first use, and scikit-learn when MESCClustering is first asked for,
so the command-line scripts start fast.

Importing the package sets two process-wide memory options before TensorFlow allocates
anything (so that MNIST-10k runs end to end in ≤ 4 GB; each is skipped if already set):

* ``TF_ONEDNN_USE_SYSTEM_ALLOCATOR=1``: oneDNN builds of TensorFlow (the Linux x86 wheels)
  otherwise keep every freed CPU tensor in a pool that never shrinks, so the n×n
  temporaries of fine-tuning (400 MB each for MNIST) stay resident under post-clustering;
  with malloc they go back to the system.
* one glibc malloc arena (``MALLOC_ARENA_MAX=1``, set through ``mallopt``): with an arena
  per TensorFlow thread, freed mid-size activations stay cached in each.
"""

import os as _os

_os.environ.setdefault("TF_ONEDNN_USE_SYSTEM_ALLOCATOR", "1")


def _limit_malloc_arenas(count=1):
    if "MALLOC_ARENA_MAX" in _os.environ:
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-8, count)  # M_ARENA_MAX; glibc only
    except (OSError, AttributeError):
        pass


_limit_malloc_arenas()

from mesc_tf.config import get_config  # noqa: E402  (after the memory options)
from mesc_tf.data import load_dataset  # noqa: E402
from mesc_tf.errors import MescError, MescWarning  # noqa: E402
from mesc_tf.weights import load_autoencoder, save_autoencoder  # noqa: E402

__all__ = ["MESCClustering", "MescError", "MescWarning", "get_config", "load_autoencoder",
           "load_dataset", "save_autoencoder"]
__version__ = "0.1.0"


def __getattr__(name):
    if name == "MESCClustering":
        from mesc_tf.estimator import MESCClustering

        globals()[name] = MESCClustering
        return MESCClustering
    if name == "MESCNet":
        # Two things are called MESC-Net here; make the user say which. ImportError, because
        # `from mesc_tf import MESCNet` replaces an AttributeError's message with its own (so
        # hasattr(mesc_tf, "MESCNet") raises this too, for this one name).
        raise ImportError(
            "mesc_tf has no MESCNet: use mesc_tf.MESCClustering for the scikit-learn estimator "
            "(fit / fit_predict on images) or mesc_tf.model.MESCNet for the Keras model",
            name=name, path=__file__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
