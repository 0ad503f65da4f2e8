"""MESC-Net and DSC-Net in TensorFlow 2 / Keras 3.

The public entry points: :class:`MESCClustering` (the scikit-learn estimator),
:func:`load_dataset`, :func:`get_config`, :func:`load_autoencoder` and
:func:`save_autoencoder`. Everything else lives in the submodules (``mesc_tf.model``,
``mesc_tf.pipeline``, ``mesc_tf.postcluster``, ...). TensorFlow is imported on first use, and
scikit-learn when MESCClustering is first asked for, so the command-line scripts start fast.
"""

from mesc_tf.config import get_config
from mesc_tf.data import load_dataset
from mesc_tf.errors import MescError
from mesc_tf.weights import load_autoencoder, save_autoencoder

__all__ = ["MESCClustering", "MescError", "get_config", "load_autoencoder", "load_dataset",
           "save_autoencoder"]
__version__ = "0.1.0"


def __getattr__(name):
    if name == "MESCClustering":
        from mesc_tf.estimator import MESCClustering

        globals()[name] = MESCClustering
        return MESCClustering
    if name == "MESCNet":
        # Two things are called MESC-Net here; make the user say which.
        raise ImportError(
            "mesc_tf has no MESCNet: use mesc_tf.MESCClustering for the scikit-learn estimator "
            "(fit / fit_predict on images) or mesc_tf.model.MESCNet for the Keras model",
            name=name, path=__file__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
