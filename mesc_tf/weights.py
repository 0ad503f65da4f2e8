"""Auto-encoder weights on disk: the project's ``.h5`` format and the authors' TF1 checkpoints.

``.h5`` layout (h5py): root attributes ``format`` = "mesc-tf-autoencoder", ``version``,
``architecture`` (JSON: image_shape, kernels, channels) and ``metadata`` (JSON: dataset,
pixels, steps, seed, errors, library versions, ...); one group per layer
(``enc_0`` …, ``dec_0`` …) holding ``kernel`` and ``bias`` in Keras layout. Loading checks the
architecture and every shape and names the first mismatch.

TF1 checkpoints (reference-facts §1.3, pitfall 11): kernels are ``enc_w{i}`` / ``dec_w{j}``
(``dec_w0`` is the deepest decoder layer), biases are the unnamed ``Variable``, ``Variable_1``,
… in creation order, encoder first. Both kernel layouts are Keras' own: no flip, no transpose.
"""

import json
import os
import re
from pathlib import Path

import numpy as np

from mesc_tf.config import Architecture
from mesc_tf.errors import MescError, one_line
from mesc_tf.files import (as_path, atomic_file, is_file, json_default, make_parent,
                           permission_denied)

FORMAT = "mesc-tf-autoencoder"
VERSION = 1

# The authors' released checkpoints (reference-facts §1.3), relative to the folder that holds
# dscnet/ and mesc/ (default_tf1_dir). Toy has none of its own: it is COIL20's auto-encoder.
ORIGINAL_CHECKPOINTS = {
    "orl": "dscnet/ORL/model-335-32x32-orl.ckpt",
    "coil20": "dscnet/COIL20/model.ckpt",
    "toy": "dscnet/COIL20/model.ckpt",
    "coil40": "mesc/COIL40/model-32x32-coil40.ckpt",
    "coil100": "dscnet/COIL100/model50.ckpt",
    "eyaleb": "dscnet/EYaleB/model-102030-48x42-yaleb.ckpt",
    "usps": "mesc/USPS/myusps.ckpt",
    "mnist": "mesc/MNIST10000/model-mnist.ckpt",
}


def default_tf1_dir() -> Path:
    """$MESC_TF1_DIR, else ../shared/pretrained-tf1 beside the checkout."""
    # Empty counts as unset, as for MESC_DATA_DIR and MESC_PRETRAINED_DIR.
    return Path(os.environ.get("MESC_TF1_DIR")
                or Path(__file__).resolve().parents[2] / "shared" / "pretrained-tf1")


def tf1_prefix(dataset: str, value: str) -> str:
    """A --tf1-checkpoint value for ``dataset`` as a checkpoint prefix: the value itself, the
    prefix of a checkpoint file named instead (.index, .meta, .data-*), or for "original" the
    authors' checkpoint of that dataset (ORIGINAL_CHECKPOINTS under default_tf1_dir)."""
    if value != "original":
        return _strip_checkpoint_suffix(value)
    dataset = dataset.lower() if isinstance(dataset, str) else dataset  # as get_config
    if dataset not in ORIGINAL_CHECKPOINTS:  # get_autoencoder(arch, tf1_checkpoint="original")
        raise MescError(f"'original' names the authors' checkpoint of a dataset, but the dataset "
                        f"is {dataset!r}; give one of {', '.join(ORIGINAL_CHECKPOINTS)}, or a "
                        "checkpoint prefix")
    prefix = default_tf1_dir() / ORIGINAL_CHECKPOINTS[dataset]
    # Checked here, where "original" is still known: the callers see only the prefix.
    if not is_file(f"{prefix}.index"):
        where = ("has no " + ORIGINAL_CHECKPOINTS[dataset] + ".index"
                 if default_tf1_dir().is_dir() else "does not exist")
        raise MescError(f"the authors' {dataset} checkpoint is not there: {default_tf1_dir()} "
                        f"{where}; set MESC_TF1_DIR to the folder that holds their dscnet/ and "
                        "mesc/ folders")
    return str(prefix)


def _strip_checkpoint_suffix(path) -> str:
    """A file of a TF1 checkpoint named instead of its prefix: the prefix."""
    return re.sub(r"\.(index|meta|data-\d+-of-\d+)$", "", str(path))


def require_h5(path, how="make one with experiments/pretrain.py or "
                          "mesc_tf.save_autoencoder") -> Path:
    """``path`` as a Path if it is a file, else one MescError: not found or a folder, and
    ``how`` to get one."""
    path = as_path(path, "auto-encoder file")
    if not is_file(path):
        found = "is a folder" if path.is_dir() else "not found"
        raise MescError(f"auto-encoder file {path} {found}; give an existing .h5 file ({how})")
    return path


def _open_h5(path):
    import h5py

    path = require_h5(path)
    try:
        return h5py.File(path, "r")
    except OSError as e:
        if permission_denied(path, e):  # not the file's fault: do not re-create it
            raise MescError(f"cannot read auto-encoder file {path}: permission denied; make it "
                            "readable to this user, or give another file") from None
        raise MescError(f"cannot read auto-encoder file {path} ({e}); it is not a valid .h5 "
                        "file: re-create it with experiments/pretrain.py (a Keras .keras file "
                        "loads with keras.models.load_model)") from None


def save_autoencoder(autoencoder, path, metadata=None):
    """Write the auto-encoder's weights, architecture and metadata to ``path`` atomically.

    Everything is checked before the file is opened: a refused call writes nothing."""
    import h5py

    path = as_path(path, "save_autoencoder's path")
    if path.is_dir():  # else the whole file is written, then its rename fails
        raise MescError(f"save_autoencoder's path {path} is a folder; give a file name, e.g. "
                        f"{path / 'autoencoder.h5'}")
    layers = _saved_layers(autoencoder)
    if metadata is not None and not isinstance(metadata, dict):
        raise MescError(f"save_autoencoder's metadata must be a dict or None, got "
                        f"{type(metadata).__name__}")
    try:
        metadata = json.dumps(metadata or {}, default=json_default)
    except (TypeError, ValueError) as e:
        raise MescError(f"save_autoencoder's metadata cannot be written as JSON ({e}); give "
                        "numbers, strings, lists and dicts") from None
    make_parent(path)
    with atomic_file(path, "w+b") as raw, h5py.File(raw, "w") as f:
        f.attrs["format"] = FORMAT
        f.attrs["version"] = VERSION
        f.attrs["architecture"] = json.dumps(autoencoder.arch.to_dict())
        f.attrs["metadata"] = metadata
        for name, (kernel, bias) in layers.items():
            g = f.create_group(name)
            g.create_dataset("kernel", data=kernel)
            g.create_dataset("bias", data=bias)
    return path


def _saved_layers(autoencoder) -> dict:
    """{layer name: (kernel, bias)} of a built ConvAutoEncoder as float32, all finite (the
    loader refuses anything else, so nothing else is written)."""
    from mesc_tf.model import ConvAutoEncoder

    if not isinstance(autoencoder, ConvAutoEncoder):
        from mesc_tf.estimator import MESCClustering  # only on this error path (sklearn)

        inner = getattr(autoencoder, "autoencoder", None)
        hint = (" (this model's auto-encoder is its .autoencoder)"
                if isinstance(inner, ConvAutoEncoder) else "")
        if isinstance(autoencoder, MESCClustering):
            hint = (" (a fitted MESCClustering's fine-tuned auto-encoder is its .encoder_)"
                    if hasattr(autoencoder, "encoder_") else
                    " (an unfitted MESCClustering: fit it, then save its .encoder_)")
        raise MescError(f"save_autoencoder needs a mesc_tf.model.ConvAutoEncoder, got "
                        f"{type(autoencoder).__name__}{hint}")
    if not all(layer.built for layer in autoencoder.named_layers):
        raise MescError("save_autoencoder got an auto-encoder with no weights yet; build it "
                        "first (ConvAutoEncoder(arch).build_for_input())")
    layers = {layer.name: (np.asarray(layer.kernel.numpy(), np.float32),
                           np.asarray(layer.bias.numpy(), np.float32))
              for layer in autoencoder.named_layers}
    if not all(np.isfinite(w).all() for pair in layers.values() for w in pair):
        raise MescError("save_autoencoder got weights holding NaN or infinite values (a "
                        "diverged training); they would not load: lower the learning rate "
                        "and train again")
    return layers


def read_autoencoder_file(path):
    """(Architecture, metadata dict, {layer: (kernel, bias)}) from a project .h5 file."""
    with _open_h5(path) as f:
        try:
            return _read_open_file(f, path)
        except (RuntimeError, OSError, KeyError) as e:  # h5py, on damaged internals
            raise MescError(f"{path} is damaged ({one_line(e)}); re-create it with "
                            "experiments/pretrain.py") from None


def _read_open_file(f, path):
    """read_autoencoder_file's checks and reads on the open file."""
    import h5py

    # np.ndim: a damaged or hand-edited attribute may be an array, whose == is one per element
    if np.ndim(f.attrs.get("format")) != 0 or f.attrs.get("format") != FORMAT:
        raise MescError(f"{path} is not a mesc-tf auto-encoder file (no format={FORMAT!r} "
                        "attribute); give a file of experiments/pretrain.py or "
                        "save_autoencoder (a TF1 checkpoint converts with "
                        "mesc_tf.weights.convert_tf1_checkpoint, or run.py --tf1-checkpoint)")
    version = f.attrs.get("version")
    if np.ndim(version) != 0 or version != VERSION:
        shown = "none" if version is None else np.asarray(version).tolist()
        raise MescError(f"{path} has format version {shown}, but this mesc-tf reads "
                        f"version {VERSION}; use the mesc-tf that wrote it, or re-create it "
                        "with experiments/pretrain.py")
    for name, item in f.items():
        if not isinstance(item, h5py.Group) or set(item) != {"kernel", "bias"}:
            raise MescError(f"{path} is damaged: {name!r} is not a layer holding just a "
                            "kernel and a bias; re-create it with experiments/pretrain.py")
    try:
        arch = Architecture.from_dict(json.loads(f.attrs["architecture"]))
        metadata = json.loads(f.attrs.get("metadata", "{}"))
        weights = {name: (np.asarray(f[name]["kernel"]), np.asarray(f[name]["bias"]))
                   for name in f.keys()}
    except (KeyError, ValueError, TypeError, MescError) as e:  # MescError: Architecture's
        raise MescError(f"{path} is damaged ({e}); re-create it with "
                        "experiments/pretrain.py") from None
    if not isinstance(metadata, dict):  # save_autoencoder writes a dict, and callers .get() it
        raise MescError(f"{path} is damaged (its metadata is a {type(metadata).__name__}, not a "
                        "dict); re-create it with experiments/pretrain.py")
    return arch, metadata, weights


def assign_weights(autoencoder, weights, source):
    """Copy {layer name: (kernel, bias)} into a built auto-encoder, checking every shape and
    value first (a refused file leaves the model as it was)."""
    expected = {layer.name for layer in autoencoder.named_layers}
    if set(weights) != expected:
        raise MescError(f"{source} holds layers {sorted(weights)} but the architecture "
                        f"{autoencoder.arch.to_dict()} needs {sorted(expected)}; use weights "
                        "made for this dataset's architecture")
    pairs = [(f"{source}: layer {layer.name} {kind}", var, np.asarray(value))
             for layer in autoencoder.named_layers
             for kind, var, value in zip(("kernel", "bias"), (layer.kernel, layer.bias),
                                         weights[layer.name])]
    for what, var, value in pairs:
        if tuple(var.shape) != tuple(value.shape):
            raise MescError(f"{what} has shape {tuple(value.shape)} but the model needs "
                            f"{tuple(var.shape)}; use weights made for this architecture")
        if value.dtype.kind not in "iuf" or not np.isfinite(value).all():
            raise MescError(f"{what} holds NaN, infinite or non-numeric values; the weights "
                            "are damaged or come from a diverged training: re-create them "
                            "(experiments/pretrain.py)")
    for _, var, value in pairs:
        var.assign(value)


def autoencoder_with(arch: Architecture, weights, source):
    """A built ConvAutoEncoder for ``arch`` holding ``weights`` (checked by assign_weights)."""
    from mesc_tf.model import ConvAutoEncoder

    ae = ConvAutoEncoder(arch).build_for_input()
    assign_weights(ae, weights, source)
    return ae


def check_autoencoder_file(path, arch: Architecture | None = None):
    """:func:`read_autoencoder_file`, and its architecture must equal ``arch`` if given.
    h5py only: scripts check a file with it before TensorFlow loads (and logs)."""
    if arch is not None and not isinstance(arch, Architecture):  # its to_dict() below
        raise MescError(f"arch must be a mesc_tf.config.Architecture or None, got "
                        f"{type(arch).__name__} {arch!r}; build one with Architecture(image_shape, "
                        "kernels, channels) or Architecture.from_dict, or leave it out")
    file_arch, metadata, weights = read_autoencoder_file(path)
    if arch is not None and file_arch != arch:
        raise MescError(f"{path} holds an auto-encoder for {file_arch.to_dict()} but this "
                        f"dataset needs {arch.to_dict()}; give an auto-encoder made for this "
                        "dataset")
    return file_arch, metadata, weights


def load_autoencoder(path, arch: Architecture | None = None):
    """Build a :class:`~mesc_tf.model.ConvAutoEncoder` from a project ``.h5`` file.

    If ``arch`` is given, the file's architecture must equal it. Returns (autoencoder, metadata).
    """
    file_arch, metadata, weights = check_autoencoder_file(path, arch)
    return autoencoder_with(file_arch, weights, path), metadata


def read_tf1_checkpoint(prefix, image_shape):
    """(Architecture, {layer: (kernel, bias)}) from an original TF1 checkpoint prefix.

    A TF1 checkpoint holds kernels and biases but not the image size: ``image_shape`` gives it,
    (h, w), or an :class:`Architecture`, which the checkpoint's must then equal."""
    import tensorflow as tf

    expected = image_shape if isinstance(image_shape, Architecture) else None
    if expected is not None:
        image_shape = expected.image_shape

    prefix = _strip_checkpoint_suffix(prefix)
    try:
        reader = tf.train.load_checkpoint(prefix)
    except (ValueError, tf.errors.OpError) as e:
        raise MescError(f"cannot read TF1 checkpoint {prefix} ({one_line(e)}); give the prefix "
                        "without .index/.data, e.g. .../model-335-32x32-orl.ckpt") from None
    shapes = reader.get_variable_to_shape_map()
    n_layers = sum(1 for k in shapes if re.fullmatch(r"enc_w\d+", k))  # not enc_w0/Adam
    names = ([f"enc_w{i}" for i in range(n_layers)] + [f"dec_w{j}" for j in range(n_layers)]
             + ["Variable" if k == 0 else f"Variable_{k}" for k in range(2 * n_layers)])
    missing = [k for k in names if k not in shapes]
    if n_layers == 0 or missing:
        raise MescError(f"TF1 checkpoint {prefix} lacks tensors {missing or ['enc_w0']} "
                        f"(it has {sorted(shapes)}); it is not a DSC-Net/MESC auto-encoder")
    try:
        t = {k: reader.get_tensor(k) for k in names}
    except Exception as e:  # a missing or damaged .data file: OpError, IndexError, ...
        raise MescError(f"cannot read the tensors of TF1 checkpoint {prefix} ({one_line(e)}); "
                        "its .data file is missing or damaged: copy the checkpoint again") from None
    not_4d = [k for k in names[:2 * n_layers] if t[k].ndim != 4]
    if not_4d:
        raise MescError(f"TF1 checkpoint {prefix}: not 4-D convolution kernels: "
                        f"{', '.join(not_4d)}; it is not a DSC-Net/MESC auto-encoder")
    biases = [t[n] for n in names[2 * n_layers:]]
    weights = {f"enc_{i}": (t[f"enc_w{i}"], biases[i]) for i in range(n_layers)}
    weights.update({f"dec_{j}": (t[f"dec_w{j}"], biases[n_layers + j]) for j in range(n_layers)})
    arch = Architecture(image_shape=image_shape,  # checked there: tuple(32) was a TypeError
                        kernels=tuple(int(t[f"enc_w{i}"].shape[0]) for i in range(n_layers)),
                        channels=tuple(int(t[f"enc_w{i}"].shape[3]) for i in range(n_layers)))
    if expected is not None and arch != expected:
        raise MescError(f"TF1 checkpoint {prefix} is an auto-encoder with kernels "
                        f"{arch.kernels} and channels {arch.channels}, but this dataset needs "
                        f"{expected.kernels} / {expected.channels}; give a checkpoint made for "
                        "this dataset ('original': the authors')")
    return arch, weights


def load_tf1_checkpoint(prefix, arch: Architecture):
    """A ConvAutoEncoder for ``arch`` holding the weights of a TF1 checkpoint."""
    if not isinstance(arch, Architecture):  # the checkpoint must hold this architecture
        raise MescError(f"load_tf1_checkpoint's arch must be a mesc_tf.config.Architecture, got "
                        f"a {type(arch).__name__}; a dataset's is get_config(name).arch")
    return autoencoder_with(*read_tf1_checkpoint(prefix, arch), prefix)


def convert_tf1_checkpoint(prefix, image_shape, out_path, metadata=None):
    """Convert an original TF1 checkpoint to the project's .h5 format (``image_shape``: (h, w)
    or an Architecture, as :func:`read_tf1_checkpoint` takes it)."""
    if metadata is not None and not isinstance(metadata, dict):
        raise MescError(f"convert_tf1_checkpoint's metadata must be a dict or None, got "
                        f"{type(metadata).__name__}")
    arch, weights = read_tf1_checkpoint(prefix, image_shape)
    ae = autoencoder_with(arch, weights, prefix)
    meta = {"converted_from": str(prefix), **(metadata or {})}
    return save_autoencoder(ae, out_path, meta)
