"""Keras models that mirror the original TF graphs (reference-facts §1.2, §2.1–2.3).

* :class:`ConvAutoEncoder`: stride-2 'same' Conv2D + ReLU encoder, mirrored Conv2DTranspose +
  ReLU decoder (ReLU on the reconstruction too), he_normal kernels by default
  (``kernel_initializer``), zero biases.
* :class:`SelfExpression`: the n×n coefficient matrix C; its output is C·Z.
* :class:`MESCNet`: auto-encoder + self-expression, trained full batch by ``fit()``; its
  ``train_step`` holds the MESC / DSC-Net loss. ``framework='decoupled'`` (MESC) feeds the
  decoder Ẑ, ``'coupled'`` (DSC-Net) feeds it reshape(C·Z).

Layer names follow the TF1 checkpoints: ``enc_0`` … ``enc_{L-1}`` from the input down, and
``dec_0`` … ``dec_{L-1}`` from the latent code up (``dec_0`` is the deepest decoder layer).

Each class has a Keras config (registered as ``mesc_tf>ClassName``), so ``model.save("x.keras")``
and ``keras.models.load_model`` work once this module is imported. The project's own ``.h5``
auto-encoder files (:mod:`mesc_tf.weights`) stay the format of ``pretrained/``.
"""

import inspect
import warnings

import keras
import numpy as np
import tensorflow as tf

from mesc_tf import losses
from mesc_tf.config import Architecture, Settings, encoder_sizes, is_whole
from mesc_tf.errors import MescError, MescWarning


def transposed_output_padding(size_in, size_out):
    """output_padding a stride-2 'same' Conv2DTranspose needs to map size_in to size_out.

    Keras' default gives 2·in; TF1 took the size from the mirrored encoder activation, which
    is 2·in − 1 for odd sizes (EYaleB 6×6 → 12×11, MNIST 4 → 7). With an odd kernel the output
    is 2·in − 1 + output_padding. None (the default) where both sides are already 2·in.
    """
    pads = tuple(o - 2 * i + 1 for i, o in zip(size_in, size_out))
    if any(p not in (0, 1) for p in pads):
        raise ValueError(f"cannot map {size_in} to {size_out} with a stride-2 transposed conv")
    return None if all(p == 1 for p in pads) else pads


def _own_initializer(initializer, index):
    """``initializer`` for the layer numbered ``index``. A Keras initializer object draws from
    a seed fixed when it is made, so one object shared by the layers drew the same values for
    each (every decoder kernel was its mirrored encoder kernel): each layer gets its own copy,
    with a seed of its own, or, where the object was given a whole-number seed, that seed plus
    the layer's index (reproducible, and still one draw per layer)."""
    if isinstance(initializer, str) and initializer == "truncated_normal":
        return keras.initializers.TruncatedNormal(stddev=0.1)  # tf.truncated_normal, TF1 style
    if isinstance(initializer, keras.initializers.Initializer):
        config = initializer.get_config()
        if is_whole(config.get("seed")):
            config["seed"] += index
        return type(initializer).from_config(config)
    return initializer


def _serializable(cls):
    return keras.saving.register_keras_serializable(package="mesc_tf")(cls)


def _require_float32(model):
    """The models run in float32, the released graphs' precision: under a mixed policy the loss
    would mix float16 and float32 tensors, and C's entropy needs float32's range anyway."""
    for policy, fix in ((keras.config.dtype_policy(), "call keras.config.set_dtype_policy("
                         "'float32') before making the model"),
                        (model.dtype_policy, "make it without dtype= (or with dtype='float32')")):
        if policy.name != "float32":
            raise MescError(f"{type(model).__name__} runs in float32 (the released graphs' "
                            f"precision), but its dtype policy is {policy.name!r}: {fix}")


def _named(method, args, kwargs) -> dict:
    """The arguments of Keras' ``method`` as given, positional ones too, by name: what the
    overrides below check before passing them on (a TypeError where Keras would raise one)."""
    named = dict(inspect.signature(method).bind(None, *args, **kwargs).arguments)
    named.pop("self")
    named.update(named.pop("kwargs", {}))
    return named


def _is_array(x):
    """An in-memory array (NumPy, TF tensor, ...), for which fit and co. take batch_size."""
    return x is not None and hasattr(x, "shape") and not isinstance(x, tf.data.Dataset)


def _image_shape_problem(arch, shape):
    """Why images of ``shape`` (with their batch axis; None where unknown) do not fit an
    auto-encoder for ``arch``, or None. The convolutions would take any size, and the decoder
    return another than the input's."""
    if shape is None:  # unknown rank (a retraced step): the convolutions check at run time
        return None
    shape, expected = tuple(shape), tuple(arch.image_shape)
    example = f"(n, {', '.join(map(str, expected))}, 1)"
    if len(shape) == 3 and shape[1:] == expected:
        return (f"images of shape {shape[1:]} have no channel axis; give x[..., None], an "
                f"{example} array")
    if len(shape) != 4 or shape[3] not in (None, 1) or (
            None not in shape[1:3] and shape[1:3] != expected):
        return (f"images of shape {shape[1:]} given to an auto-encoder made for {expected} "
                f"images; give {example} arrays")
    return None


def _static_shape(x):
    """``x``'s shape as a tuple (None where unknown), or None for an unknown rank."""
    try:
        return tuple(x.shape)
    except ValueError:  # TensorShape of unknown rank
        return None


def _as_images(model, x):
    """``x`` for a model's __call__: a list of images as one tensor, as ``encode`` takes it (the
    shape checks needed its shape), a dict refused."""
    if hasattr(x, "shape"):
        return x
    if isinstance(x, dict):
        raise MescError(f"{type(model).__name__} takes its images as one array (n, h, w, 1), "
                        "got a dict")
    return tf.convert_to_tensor(x)


def _check_images(model, x):
    """What fit, evaluate and predict refuse at once, before Keras traces a step (an error in
    the trace would come wrapped in Keras' lines): images in a dict or list (Keras' errors
    then blamed the shapes), images of a shape the auto-encoder does not take, and NaN or inf
    pixels (they made the auto-encoder's weights NaN, but a decoupled model's C stayed finite
    and clustered without a word)."""
    name = type(model).__name__
    if isinstance(x, (dict, list, tuple)):
        raise MescError(f"{name} takes its images as one array (n, h, w, 1) or a dataset of "
                        f"such batches, got a {type(x).__name__}")
    if isinstance(x, tf.data.Dataset):
        spec = x.element_spec
        spec = spec[0] if isinstance(spec, tuple) else spec  # (x, y, ...) batches
        if not isinstance(spec, tf.TensorSpec):
            raise MescError(f"the dataset given to {name} yields a {type(spec).__name__}; make "
                            "it yield image batches (n, h, w, 1), or (images, labels)")
        if spec.shape.rank is None:
            raise MescError(f"the dataset given to {name} yields tensors of unknown shape; give "
                            "its batches a shape, e.g. from_generator's output_signature="
                            "tf.TensorSpec((None, h, w, 1), tf.float32)")
        problem = _image_shape_problem(model.autoencoder.arch, _static_shape(spec))
        if problem:
            raise MescError(f"the dataset given to {name} yields {problem}")
    if _is_array(x):
        problem = _image_shape_problem(model.autoencoder.arch, _static_shape(x))
        if problem:
            raise MescError(problem)
        pixels = np.asarray(x)
        if pixels.dtype.kind == "f" and not np.isfinite(pixels).all():
            raise MescError(f"the images given to {name} hold NaN or inf pixels; clean or drop "
                            "those images first")


def _check_save_path(model, filepath):
    """Keras writes a .h5 or .hdf5 path in its legacy HDF5 format, which does not load these
    models back (load_model does not know the class, and with custom_objects fails on the
    weights or the optimizer): refused, before anything is written."""
    if str(filepath).lower().endswith((".h5", ".hdf5")):
        own = (" (an auto-encoder in the project's .h5 format, as pretrained/: "
               "mesc_tf.save_autoencoder)" if isinstance(model, ConvAutoEncoder) else "")
        raise MescError(f"Keras' legacy HDF5 format does not load a {type(model).__name__} "
                        f"back: save it as .keras{own}, or its weights with save_weights "
                        "(a .weights.h5 file)")


def _holds_optimizer_state(filepath) -> bool:
    """Whether a Keras ``.weights.h5`` file holds an optimizer's variables (False where it
    cannot tell: another format, or a file Keras will refuse itself)."""
    import h5py

    if not str(filepath).endswith(".weights.h5"):
        return False
    try:
        with h5py.File(filepath, "r") as f:
            group = f.get("optimizer/vars")
            return isinstance(group, h5py.Group) and len(group) > 0
    except (OSError, ValueError):
        return False


def _op_determinism() -> bool:
    from tensorflow.python.framework.config import is_op_determinism_enabled  # no public getter

    return is_op_determinism_enabled()


def _check_ends(model, x, steps, what="steps"):
    """A dataset that repeats forever (``training.full_batch``) makes an epoch, an
    ``evaluate`` or a ``predict`` that never ends unless ``steps`` bounds it: Keras would
    run it until it ran out. Refused with one line instead of hanging."""
    if (isinstance(x, tf.data.Dataset) and steps is None
            and int(x.cardinality()) == int(tf.data.INFINITE_CARDINALITY)):
        raise MescError(f"the dataset given to {type(model).__name__} repeats forever (as "
                        f"full_batch(x) does), so this call would never end: pass {what}=1 "
                        "(one step), or give the array itself")


def _shuffled(dataset) -> bool:
    """Whether a tf.data pipeline has a shuffle step (through its private ``_inputs``; False
    where TF changes that)."""
    stack = [dataset]
    while stack:
        d = stack.pop()
        if "Shuffle" in type(d).__name__:
            return True
        stack.extend(getattr(d, "_inputs", lambda: [])())
    return False


@_serializable
class ConvAutoEncoder(keras.Model):
    """The convolutional auto-encoder of DSC-Net / MESC-Net for one Architecture."""

    def __init__(self, arch: Architecture, kernel_initializer="he_normal", **kwargs):
        super().__init__(**kwargs)
        _require_float32(self)
        if isinstance(arch, dict):  # from_config
            arch = Architecture.from_dict(arch)
        if not isinstance(arch, Architecture):  # else an AttributeError below
            raise MescError(f"ConvAutoEncoder needs a mesc_tf.config.Architecture, got a "
                            f"{type(arch).__name__}; a dataset's is get_config(name).arch, or "
                            "build one with Architecture(image_shape, kernels, channels)")
        self.arch = arch
        if isinstance(kernel_initializer, dict):  # from_config: else one seed for every layer
            kernel_initializer = keras.initializers.deserialize(kernel_initializer)
        conv = dict(strides=2, padding="same", activation="relu", bias_initializer="zeros")
        self.encoder_layers = [
            keras.layers.Conv2D(c, k, name=f"enc_{i}", **conv,
                                kernel_initializer=_own_initializer(kernel_initializer, i))
            for i, (k, c) in enumerate(zip(arch.kernels, arch.channels))
        ]
        sizes = encoder_sizes(arch)
        n_layers = len(arch.kernels)
        self.decoder_layers = []
        for j in range(n_layers):  # j = 0 is the deepest layer, mirroring encoder layer L-1-j
            i = n_layers - 1 - j
            filters = arch.channels[i - 1] if i > 0 else 1
            self.decoder_layers.append(keras.layers.Conv2DTranspose(
                filters, arch.kernels[i], name=f"dec_{j}",
                output_padding=transposed_output_padding(sizes[i + 1], sizes[i]), **conv,
                kernel_initializer=_own_initializer(kernel_initializer, n_layers + j)))
        self.latent_shape = (*sizes[-1], arch.channels[-1])
        if not self.trainable:  # trainable=False (a config's): the layers made since too
            for layer in self.named_layers:
                layer.trainable = False

    def __call__(self, x, *args, **kwargs):
        # Checked before Keras' __call__, which would wrap the error in lines of its own.
        x = _as_images(self, x)
        self._check_shape(x)
        return super().__call__(x, *args, **kwargs)

    def _check_shape(self, x):
        problem = _image_shape_problem(self.arch, _static_shape(x))
        if problem:
            raise MescError(problem)

    def save(self, filepath, *args, **kwargs):
        _check_save_path(self, filepath)
        return super().save(filepath, *args, **kwargs)

    def encode(self, x):
        if not hasattr(x, "shape"):  # a list of images, say
            x = tf.convert_to_tensor(x)
        self._check_shape(x)
        x = tf.cast(x, self.compute_dtype)  # uint8 pixels, say; no op for float32
        for layer in self.encoder_layers:
            x = layer(x)
        return x

    def decode(self, z):
        for layer in self.decoder_layers:
            z = layer(z)
        return z

    def call(self, x):
        return self.decode(self.encode(x))

    def build_for_input(self):
        """Create the weights (a forward pass on one zero image)."""
        self(tf.zeros((1, *self.arch.image_shape, 1)))
        return self

    @property
    def input_batch_shape(self):
        """(None, h, w, 1): what the models build for. Given to ``build``, Keras records it,
        and ``export`` takes its signature from there (without, it said the model had "never
        called", called or not)."""
        return (None, *self.arch.image_shape, 1)

    def build(self, input_shape=None):
        # By shape, layer by layer: keras.models.load_model builds a model before it assigns
        # the saved weights, and it has no input to call the model on.
        shape = self.input_batch_shape
        for layer in self.named_layers:
            if not layer.built:
                layer.build(shape)
            shape = layer.compute_output_shape(shape)

    @property
    def named_layers(self):
        return self.encoder_layers + self.decoder_layers

    def get_config(self):
        initializer = self.encoder_layers[0].kernel_initializer
        return {**super().get_config(), "arch": self.arch.to_dict(),
                "kernel_initializer": keras.initializers.serialize(initializer),
                # Layers frozen one by one (e.g. the encoder): load_model and clone_model
                # make the layers anew.
                "frozen_layers": [layer.name for layer in self.named_layers
                                  if not layer.trainable]}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        frozen = config.pop("frozen_layers", [])
        model = cls(**config)
        for layer in model.named_layers:
            if layer.name in frozen:
                layer.trainable = False
        return model


@_serializable
class SelfExpression(keras.layers.Layer):
    """Holds C (n×n) and returns C·Z: row i of C holds the coefficients of sample i."""

    def __init__(self, n_samples, coef_init=1e-4, **kwargs):
        super().__init__(**kwargs)
        self.n_samples = int(n_samples)
        self.coef_init = float(coef_init)
        self.coef = self.add_weight(
            name="coef", shape=(self.n_samples, self.n_samples),
            initializer=keras.initializers.Constant(coef_init), trainable=True)
        self.built = True  # C is all there is

    def call(self, z):
        return tf.matmul(self.coef, z)

    def get_config(self):
        return {**super().get_config(), "n_samples": self.n_samples, "coef_init": self.coef_init}


class _OwnLossModel(keras.Model):
    """What MESCNet and PretrainNet share as Keras models. The loss is their own
    (``train_step``), so compile takes no loss or metrics and training no sample weights; the
    images come as one array or a dataset, without NaN or inf; one epoch is one step, which
    Keras' batch-level backups and partial executions would break. They run in float32 and are
    built on construction (the auto-encoder builds by shape), so BackupAndRestore,
    ``save_weights`` and ``summary`` work before the first call, and ``load_weights`` restores
    Adam's state too (once compiled; before, it warns)."""

    def __init__(self, autoencoder, **kwargs):
        super().__init__(**kwargs)
        _require_float32(self)
        if isinstance(autoencoder, dict):  # from_config
            autoencoder = keras.saving.deserialize_keras_object(autoencoder)
        if not isinstance(autoencoder, ConvAutoEncoder):  # else an AttributeError below
            hint = (" (load_autoencoder returns (autoencoder, metadata): ae, _ = "
                    "load_autoencoder(...))" if isinstance(autoencoder, tuple) else
                    " (this model's auto-encoder is its .autoencoder)"
                    if isinstance(getattr(autoencoder, "autoencoder", None), ConvAutoEncoder)
                    else "")
            raise MescError(f"{type(self).__name__} needs a mesc_tf.model.ConvAutoEncoder, got "
                            f"{type(autoencoder).__name__}{hint}")
        self.autoencoder = autoencoder

    def build(self, input_shape=None):
        self.autoencoder.build(self.autoencoder.input_batch_shape)

    def get_config(self):
        return {**super().get_config(),
                "autoencoder": keras.saving.serialize_keras_object(self.autoencoder)}

    def save(self, filepath, *args, **kwargs):
        _check_save_path(self, filepath)
        return super().save(filepath, *args, **kwargs)

    def compile(self, *args, **kwargs):
        named = _named(keras.Model.compile, args, kwargs)
        own = ("loss", "loss_weights", "metrics", "weighted_metrics")
        given = [k for k in own if named.get(k)]
        if given:
            raise MescError(f"{type(self).__name__} trains on its own loss and logs its terms; "
                            f"compile takes no {', '.join(given)}")
        # An empty list asks for nothing, but Keras would make a metric that is never built.
        named.update({k: None for k in own if k in named})
        if named.get("jit_compile") is True and _op_determinism():
            raise MescError("jit_compile=True under TF's op determinism, where Keras compiles "
                            "nothing with XLA: call mesc_tf.training.configure_runtime("
                            "deterministic=False) first")
        super().compile(**named)

    def compile_from_config(self, config):
        # Keras' own skips the compile of a model that overrides compile (load_model).
        config = keras.saving.deserialize_keras_object(config)
        if config.get("jit_compile") is True and _op_determinism():
            warnings.warn(f"this {type(self).__name__} was compiled with jit_compile=True; under "
                          "op determinism it runs without XLA", MescWarning, stacklevel=2)
            config["jit_compile"] = False
        self.compile(**config)
        self._build_optimizer()

    def __call__(self, x, *args, **kwargs):
        x = _as_images(self, x)
        self._check_input(x)  # before Keras' __call__ wraps the error
        return super().__call__(x, *args, **kwargs)

    def _check_input(self, x):
        self.autoencoder._check_shape(x)

    def _build_optimizer(self):
        """Make Adam's slots now, not in the first traced step: a trace that fails (an error
        raised in the step) would count as the step function's first call, and every later
        fit would then fail to create them."""
        optimizer = getattr(self, "optimizer", None)
        if optimizer is not None and not optimizer.built:
            optimizer.build(self.trainable_variables)

    def load_weights(self, filepath, *args, **kwargs):
        # Keras skips the file's optimizer state (Adam's slots and step count) while the
        # optimizer is unbuilt, as it is before the first step: build it first.
        self._build_optimizer()
        if getattr(self, "optimizer", None) is None and _holds_optimizer_state(filepath):
            # Keras then loads the weights alone, without a word: a model compiled after it
            # would go on with a fresh Adam, not the saved one.
            warnings.warn(f"{filepath} holds Adam's state, but this {type(self).__name__} has no "
                          "optimizer yet, so only its weights are loaded: compile it first to "
                          "restore Adam's state too", MescWarning, stacklevel=2)
        return super().load_weights(filepath, *args, **kwargs)

    def fit(self, *args, **kwargs):
        named = _named(keras.Model.fit, args, kwargs)
        _check_images(self, named.get("x"))
        self._refuse_weights(named)
        for cb in named.get("callbacks") or ():
            if isinstance(cb, keras.callbacks.ModelCheckpoint) and not cb.save_weights_only:
                _check_save_path(self, cb.filepath)  # before any step, not at its first save
            if isinstance(cb, keras.callbacks.BackupAndRestore) and cb.save_freq != "epoch":
                # Keras then saves the epoch in progress and runs it again on resuming: here
                # one epoch is one step, so the resumed run would take that step twice.
                raise MescError("BackupAndRestore with save_freq="
                                f"{cb.save_freq!r} would repeat a step on resuming; one epoch "
                                "is one step here, so use save_freq='epoch'")
        _check_ends(self, named.get("x"), named.get("steps_per_epoch"), "steps_per_epoch")
        _check_ends(self, named.get("validation_data"), named.get("validation_steps"),
                    "validation_steps")
        if not _is_array(named.get("x")):  # Keras ignores shuffle for a dataset, but warns
            named.setdefault("shuffle", False)  # if it is True
        self._check_whole_executions(named.get("steps_per_epoch"), "steps_per_epoch",
                                     " per epoch")
        self._build_optimizer()
        return super().fit(**named)

    def evaluate(self, *args, **kwargs):
        named = _named(keras.Model.evaluate, args, kwargs)
        _check_images(self, named.get("x"))
        self._refuse_weights(named)
        _check_ends(self, named.get("x"), named.get("steps"))
        self._check_whole_executions(named.get("steps"), "steps")
        return super().evaluate(**named)

    def predict(self, *args, **kwargs):
        named = _named(keras.Model.predict, args, kwargs)
        _check_images(self, named.get("x"))
        _check_ends(self, named.get("x"), named.get("steps"))
        self._check_whole_executions(named.get("steps"), "steps")
        return super().predict(**named)

    def _check_whole_executions(self, steps, what, where=""):
        """Keras runs whole executions: on a repeated dataset, steps_per_epoch 1 with
        steps_per_execution 3 made 3 steps per epoch, and predict's steps=1 gave 3n rows."""
        per_call = getattr(self, "steps_per_execution", 1)
        if steps and per_call > 1 and steps % per_call:
            ran = -(-steps // per_call) * per_call
            raise MescError(f"{what} {steps} is not a multiple of steps_per_execution "
                            f"{per_call}: Keras runs whole executions, {ran} steps{where} "
                            "here; make it a multiple")

    # The *_on_batch calls take one batch of arrays: checked as fit, evaluate and predict
    # check theirs (they ran on NaN pixels, and a batch of another size was a graph error).
    def train_on_batch(self, *args, **kwargs):
        named = _named(keras.Model.train_on_batch, args, kwargs)
        self._check_batch_images(named.get("x"))
        self._refuse_weights(named)
        self._build_optimizer()
        return super().train_on_batch(**named)

    def test_on_batch(self, *args, **kwargs):
        named = _named(keras.Model.test_on_batch, args, kwargs)
        self._check_batch_images(named.get("x"))
        self._refuse_weights(named)
        return super().test_on_batch(**named)

    def predict_on_batch(self, x):
        self._check_batch_images(x)
        return super().predict_on_batch(x)

    def _check_batch_images(self, x):
        _check_images(self, x)

    def _images(self, data):
        """The images of a batch as float32 (uint8 pixels, say), refusing sample weights."""
        x, _, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        if sample_weight is not None:
            raise self._weights_refused()
        return tf.cast(x, self.compute_dtype)

    def _refuse_weights(self, named):
        """Sample or class weights given to fit, evaluate or the *_on_batch calls, or in
        validation_data's (x, y, sample_weight): refused, as without labels Keras dropped some
        of them without a word."""
        validation = named.get("validation_data")
        if (named.get("sample_weight") is not None or named.get("class_weight") is not None
                or isinstance(validation, (tuple, list)) and len(validation) == 3
                and validation[2] is not None):
            raise self._weights_refused()

    def _weights_refused(self):
        return MescError(f"{type(self).__name__} weighs every sample alike; it takes no "
                         "sample_weight or class_weight")


@_serializable
class MESCNet(_OwnLossModel):
    """Auto-encoder + self-expression, trained on the whole dataset as one batch.

    ``fit(x)`` runs one Adam step per epoch on the n images of ``x`` as one batch, in their
    order (row i of C is sample i), so ``fit``, ``evaluate`` and ``predict`` take an array's
    batch_size as n and fit does not shuffle it; a dataset must yield the n images in order
    (``training.full_batch``, with ``steps_per_epoch=1``: it repeats forever). The settings
    are fixed at construction. The loss terms are logged as ``recon`` (with its
    ``recon_scale``, which the released graphs build into the term), ``reg`` and ``selfexp``
    (without reg1, reg2) and ``loss``.
    """

    def __init__(self, autoencoder: ConvAutoEncoder, n_samples: int, settings: Settings,
                 **kwargs):
        super().__init__(autoencoder, **kwargs)
        if not (is_whole(n_samples) and n_samples >= 1):
            raise MescError(f"n_samples must be a whole number >= 1 (the images C links), got "
                            f"{n_samples!r}")
        if isinstance(settings, dict):  # from_config
            settings = Settings(**settings)
        if not isinstance(settings, Settings):
            raise MescError(f"MESCNet's settings must be a mesc_tf.config.Settings (e.g. "
                            f"get_config(name).mesc), got {type(settings).__name__}")
        self._settings = settings
        self.self_expression = SelfExpression(n_samples, settings.coef_init, name="self_expression")
        self.build(self.autoencoder.input_batch_shape)

    @property
    def settings(self) -> Settings:
        """Read-only: a compiled step keeps the loss it was traced with."""
        return self._settings

    @property
    def coef(self):
        return self.self_expression.coef

    def get_config(self):
        return {**super().get_config(), "n_samples": self.self_expression.n_samples,
                "settings": self.settings.to_dict(),
                "coef_trainable": self.self_expression.trainable}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        coef_trainable = config.pop("coef_trainable", True)
        model = cls(**config)
        model.self_expression.trainable = coef_trainable  # before Adam's slots are made
        return model

    def _check_input(self, x):
        # A batch size known before the step (a dataset of another n's arrays, predict_on_batch,
        # a direct call) too, before Keras' __call__ wraps the error in lines of its own.
        super()._check_input(x)
        size = (_static_shape(x) or (None,))[0]
        if size is not None:
            self._refuse_batch(size)

    def call(self, x):
        """Returns (x_r, Z, C·Z) with Z the flattened latent codes (n × p)."""
        z_hat = self.autoencoder.encode(x)
        z = tf.reshape(z_hat, (tf.shape(z_hat)[0], -1))
        self._check_batch(z)
        cz = self.self_expression(z)
        if self.settings.framework == "coupled":
            x_rec = self.autoencoder.decode(tf.reshape(cz, tf.shape(z_hat)))
        else:  # decoupled: the decoder never sees C
            x_rec = self.autoencoder.decode(z_hat)
        return x_rec, z, cz

    def compute_terms(self, x):
        """The loss terms (reg and selfexp without reg1, reg2) and the weighted total, as in
        the released graph."""
        s = self.settings
        x = tf.cast(x, self.compute_dtype)
        x_rec, z, cz = self(x, training=True)
        terms = {
            "recon": losses.reconstruction(x, x_rec, s.recon_scale),
            "reg": losses.REGULARIZERS[s.regularizer](self.coef),
            "selfexp": losses.self_expression(z, cz),
        }
        terms["loss"] = terms["recon"] + s.reg1 * terms["reg"] + s.reg2 * terms["selfexp"]
        return terms

    def train_step(self, data):
        with tf.GradientTape() as tape:
            terms = self.compute_terms(self._images(data))
            # As Keras' own step: a LossScaleOptimizer divides the gradients by its factor.
            loss = self.optimizer.scale_loss(terms["loss"])
        grads = tape.gradient(loss, self.trainable_variables)
        # Update only once every gradient and every logged term exists. Otherwise TF may run
        # C's update while an op still holds a read of C (the backward pass's Cᵀ·∂L/∂(CZ), or a
        # forward op that only the logged terms need, such as the entropy's row sums); the
        # update then copies C first (copy-on-write): one more n×n buffer and copy per step
        # (400 MB for MNIST). TF 2.20 did so in 13 of 16 runs of
        # test_adam_updates_coef_in_place when only the gradients were awaited.
        gated = tf.tuple(list(grads) + tf.nest.flatten(terms))
        grads, terms = gated[:len(grads)], tf.nest.pack_sequence_as(terms, gated[len(grads):])
        # The step counter too: nothing else orders it after a step that fails (a dataset's
        # batch of the wrong size), which would count a step that changed nothing. Adam's
        # slots are made first: under XLA no variable can be made under control dependencies.
        self._build_optimizer()
        with tf.control_dependencies(gated):
            self.optimizer.apply(grads, self.trainable_variables)
        # Logged values are those before this step's update, like the original's fetches.
        return terms

    def test_step(self, data):
        return self.compute_terms(self._images(data))

    # fit, evaluate and predict are Keras' own, with the checks a full-batch model needs:
    # all n samples, in their order, as one batch.
    def fit(self, *args, **kwargs):
        named = _named(keras.Model.fit, args, kwargs)
        x = named.get("x")
        if _is_array(x):
            if named.get("shuffle"):
                raise MescError("MESCNet cannot shuffle its samples (row i of C is sample i); "
                                "fit with shuffle=False, its default here")
            if named.get("validation_split"):
                raise MescError("MESCNet trains on all its samples: validation_split would "
                                "hold some out; pass validation_data instead")
            if named.get("steps_per_epoch") not in (None, 1):
                raise MescError("an array is one step per epoch (all samples, one batch): "
                                "use epochs=, or full_batch(x) with steps_per_epoch")
            named["shuffle"] = False
            named["batch_size"] = self._full_batch(x, named.get("batch_size"))
        self._refuse_shuffled(x)
        validation = named.get("validation_data")
        self._refuse_shuffled(validation)  # its terms would pair sample i with another's row
        if isinstance(validation, (tuple, list)) and validation and _is_array(validation[0]):
            named["validation_batch_size"] = self._full_batch(
                validation[0], named.get("validation_batch_size"))
        return self._with_batch_check(super().fit, **named)

    def evaluate(self, *args, **kwargs):
        named = _named(keras.Model.evaluate, args, kwargs)
        if _is_array(named.get("x")):
            named["batch_size"] = self._full_batch(named["x"], named.get("batch_size"))
        self._refuse_shuffled(named.get("x"))
        return self._with_batch_check(super().evaluate, **named)

    def predict(self, *args, **kwargs):
        named = _named(keras.Model.predict, args, kwargs)
        if _is_array(named.get("x")):
            named["batch_size"] = self._full_batch(named["x"], named.get("batch_size"))
        self._refuse_shuffled(named.get("x"))
        return self._with_batch_check(super().predict, **named)

    @staticmethod
    def _refuse_shuffled(data):
        if isinstance(data, tf.data.Dataset) and _shuffled(data):
            raise MescError("the dataset given to MESCNet shuffles its images, but row i of C "
                            "is sample i: give the images in a fixed order (full_batch(x))")

    def _check_batch_images(self, x):
        super()._check_batch_images(x)
        if _is_array(x):
            self._full_batch(x, None)

    def _full_batch(self, x, batch_size):
        n = self.self_expression.n_samples
        if len(x) != n or batch_size not in (None, n):
            raise MescError(f"{self._batch_rule}; got {len(x)} samples with batch_size "
                            f"{batch_size}: give all {n}, in their order, with batch_size None "
                            "or n")
        return n

    @property
    def _batch_rule(self):
        return (f"this MESCNet is made for {self.self_expression.n_samples} samples, taken as "
                "one batch (row i of C is sample i)")

    def _with_batch_check(self, method, **named):
        """``method`` (Keras' fit, evaluate or predict), with the step's check of a dataset's
        batch size (an assertion, a graph error) said as one MescError. Under jit_compile XLA
        drops the assertion, and the error is XLA's own (a matrix size mismatch)."""
        try:
            return method(**named)
        except tf.errors.InvalidArgumentError as e:
            if self._batch_rule not in str(e):
                raise
            raise MescError(f"{self._batch_rule}, but the dataset gave a batch of another "
                            "size: make it yield all of them, in order, as one batch "
                            "(full_batch(x))") from None

    def _check_batch(self, z):
        n = self.self_expression.n_samples
        if z.shape[0] is None:  # known only when the step runs
            tf.debugging.assert_equal(tf.shape(z)[0], n, message=self._batch_rule)
        else:
            self._refuse_batch(z.shape[0])

    def _refuse_batch(self, size):
        if size != self.self_expression.n_samples:
            raise MescError(f"{self._batch_rule}; got a batch of {size}: give it all of them, "
                            "in order, as one batch")


@_serializable
class PretrainNet(_OwnLossModel):
    """The auto-encoder alone, trained on ½Σ(x_r − x)² like every released pretraining graph.

    Logs ``recon`` (the loss) and ``rel_err`` = ‖x_r − x‖/‖x‖, the stopping criterion, both
    of the weights before the step's update (as Keras logs a training step). So the weights
    EarlyStopping keeps are one update past the error it counts as best; pipeline.pretrain
    measures the error of the weights it returns again.
    """

    def __init__(self, autoencoder: ConvAutoEncoder, **kwargs):
        super().__init__(autoencoder, **kwargs)
        self.build(self.autoencoder.input_batch_shape)

    def call(self, x):
        return self.autoencoder(x)

    def compute_terms(self, x):
        x = tf.cast(x, self.compute_dtype)
        recon = losses.reconstruction(x, self(x, training=True), 0.5)
        return {"recon": recon, "rel_err": tf.sqrt(2.0 * recon / tf.reduce_sum(tf.square(x)))}

    def train_step(self, data):
        with tf.GradientTape() as tape:
            terms = self.compute_terms(self._images(data))
            loss = self.optimizer.scale_loss(terms["recon"])  # as in MESCNet.train_step
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply(grads, self.trainable_variables)
        return terms

    def test_step(self, data):
        return self.compute_terms(self._images(data))

    # An array is one batch, as for MESCNet: Keras' default of 32 made fit take several
    # shuffled steps per epoch and log, and evaluate return, the last batch's terms only.
    # Minibatches come as a dataset (training.minibatches), one batch per epoch.
    def fit(self, *args, **kwargs):
        named = _named(keras.Model.fit, args, kwargs)
        if _is_array(named.get("x")):
            named["batch_size"] = self._whole(named["x"], named.get("batch_size"), "fit")
            named["shuffle"] = False  # one batch: nothing to shuffle
        validation = named.get("validation_data")
        if isinstance(validation, (tuple, list)) and validation and _is_array(validation[0]):
            named["validation_batch_size"] = self._whole(
                validation[0], named.get("validation_batch_size"), "validation_data")
        return super().fit(**named)

    def evaluate(self, *args, **kwargs):
        named = _named(keras.Model.evaluate, args, kwargs)
        if _is_array(named.get("x")):
            named["batch_size"] = self._whole(named["x"], named.get("batch_size"), "evaluate")
        return super().evaluate(**named)

    @staticmethod
    def _whole(x, batch_size, where):
        if batch_size not in (None, len(x)):
            raise MescError(f"PretrainNet.{where} takes an array as one batch (its terms are "
                            f"the batch's, one step per epoch): batch_size None or {len(x)}, "
                            f"got {batch_size}; for minibatches give "
                            "mesc_tf.training.minibatches(x, batch_size) with steps_per_epoch=1")
        return len(x)
