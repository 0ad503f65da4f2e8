"""Synthetic stand-ins for the shared files: dataset .mat files and TF1 checkpoints laid out as
the authors' were. Tests that only need a file of the right form use these, so they run (and
are seen to pass) on a machine without ../shared. Also a C with a clear answer for
post-clustering (:func:`noisy_blocks`, used by benchmarks/spectral_sklearn.py too)."""

import numpy as np
import scipy.io

from mesc_tf.config import get_config
from mesc_tf.weights import ORIGINAL_CHECKPOINTS


def noisy_blocks(seed=0, sizes=(12, 15, 10, 13)):
    """A C of noisy diagonal blocks (noise 1 % of the in-block values), shuffled, and its
    labels."""
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(len(sizes)), sizes)
    C = 0.01 * np.abs(rng.standard_normal((y.size, y.size)))
    same = y[:, None] == y[None, :]
    C[same] += rng.uniform(0.5, 1.0, same.sum())
    perm = rng.permutation(y.size)
    return C[np.ix_(perm, perm)].astype(np.float32), y[perm]


def write_fea_gnd(path, n_classes, per_class, pixels=1024, dtype=np.uint8, seed=0, scale=1,
                  **extra):
    """A ``fea``/``gnd`` .mat file (the ORL/COIL/USPS layout) of random pixels 0..255 times
    ``scale`` (COIL20's [0, 1]: 1 / 255)."""
    rng = np.random.default_rng(seed)
    fea = (rng.integers(0, 256, size=(n_classes * per_class, pixels)) * scale).astype(dtype)
    gnd = np.repeat(np.arange(1, n_classes + 1), per_class)[:, None].astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    scipy.io.savemat(str(path), {"fea": fea, "gnd": gnd, **extra})
    return fea, gnd


def write_tf1_checkpoint(prefix, arch, drop=()):
    """A TF1-style checkpoint (enc_w*, dec_w*, Variable*) for ``arch``, without ``drop``."""
    import tensorflow as tf

    from mesc_tf.model import ConvAutoEncoder

    ae = ConvAutoEncoder(arch).build_for_input()
    n = len(arch.kernels)
    tensors = {f"enc_w{i}": ae.encoder_layers[i].kernel for i in range(n)}
    tensors.update({f"dec_w{j}": ae.decoder_layers[j].kernel for j in range(n)})
    biases = [layer.bias for layer in ae.named_layers]
    tensors.update({("Variable" if k == 0 else f"Variable_{k}"): b for k, b in enumerate(biases)})
    names = [k for k in tensors if k not in drop]
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.convert_to_tensor(tensors[k]) for k in names])
    return prefix


def write_tf1_dir(root):
    """Every dataset's checkpoint at its place under ``root`` (as ORIGINAL_CHECKPOINTS lays
    them out), with random weights of its architecture. Returns {dataset: prefix}."""
    prefixes = {}
    for name, rel in ORIGINAL_CHECKPOINTS.items():
        prefix = root / rel
        if not prefix.parent.is_dir():  # Toy shares COIL20's checkpoint
            prefix.parent.mkdir(parents=True)
            write_tf1_checkpoint(prefix, get_config(name).arch)
        prefixes[name] = prefix
    return prefixes


def write_data_dir(root):
    """ORL (40 × 10 images) and COIL20 (20 × 72, hence Toy) of random pixels, named and shaped
    as the real files. Returns ``root``."""
    write_fea_gnd(root / "ORL_32x32.mat", 40, 10)
    write_fea_gnd(root / "COIL20.mat", 20, 72, dtype=np.float64, scale=1 / 255)
    return root
