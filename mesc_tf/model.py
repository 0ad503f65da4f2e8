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

import keras
import tensorflow as tf

from mesc_tf import losses
from mesc_tf.config import Architecture, Settings, encoder_sizes
from mesc_tf.errors import MescError


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


def _serializable(cls):
    return keras.saving.register_keras_serializable(package="mesc_tf")(cls)


@_serializable
class ConvAutoEncoder(keras.Model):
    """The convolutional auto-encoder of DSC-Net / MESC-Net for one Architecture."""

    def __init__(self, arch: Architecture, kernel_initializer="he_normal", **kwargs):
        super().__init__(**kwargs)
        if isinstance(arch, dict):  # from_config
            arch = Architecture.from_dict(arch)
        self.arch = arch
        if kernel_initializer == "truncated_normal":  # tf.truncated_normal(stddev=0.1), TF1 style
            kernel_initializer = keras.initializers.TruncatedNormal(stddev=0.1)
        conv = dict(strides=2, padding="same", activation="relu",
                    kernel_initializer=kernel_initializer, bias_initializer="zeros")
        self.encoder_layers = [
            keras.layers.Conv2D(c, k, name=f"enc_{i}", **conv)
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
                output_padding=transposed_output_padding(sizes[i + 1], sizes[i]), **conv))
        self.latent_shape = (*sizes[-1], arch.channels[-1])

    def encode(self, x):
        # The convolutions take any size, and the decoder would return another than the input's.
        shape = tuple(x.shape)
        if len(shape) != 4 or shape[3] != 1 or (
                None not in shape[1:3] and shape[1:3] != tuple(self.arch.image_shape)):
            raise MescError(f"images of shape {shape[1:]} given to an auto-encoder made for "
                            f"{tuple(self.arch.image_shape)} images; give (n, "
                            f"{', '.join(map(str, self.arch.image_shape))}, 1) arrays")
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

    def build(self, input_shape=None):
        # By shape, layer by layer: keras.models.load_model builds a model before it assigns
        # the saved weights, and it has no input to call the model on.
        shape = (None, *self.arch.image_shape, 1)
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
                "kernel_initializer": keras.initializers.serialize(initializer)}


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

    def call(self, z):
        return tf.matmul(self.coef, z)

    def get_config(self):
        return {**super().get_config(), "n_samples": self.n_samples, "coef_init": self.coef_init}


@_serializable
class MESCNet(keras.Model):
    """Auto-encoder + self-expression, trained on the whole dataset as one batch.

    ``fit(x)`` with the dataset as a single repeated batch runs one Adam step per epoch; the
    loss terms are logged as ``recon`` (with its ``recon_scale``, which the released graphs
    build into the term), ``reg`` and ``selfexp`` (without reg1, reg2) and ``loss``.
    """

    def __init__(self, autoencoder: ConvAutoEncoder, n_samples: int, settings: Settings,
                 **kwargs):
        super().__init__(**kwargs)
        if isinstance(autoencoder, dict):  # from_config
            autoencoder = keras.saving.deserialize_keras_object(autoencoder)
        if isinstance(settings, dict):
            settings = Settings(**settings)
        self.autoencoder = autoencoder
        self.settings = settings
        self.self_expression = SelfExpression(n_samples, settings.coef_init, name="self_expression")
        self._regularizer = losses.REGULARIZERS[settings.regularizer]

    @property
    def coef(self):
        return self.self_expression.coef

    def build(self, input_shape=None):  # keras.models.load_model, before the saved weights
        self.autoencoder.build()

    def get_config(self):
        return {**super().get_config(),
                "autoencoder": keras.saving.serialize_keras_object(self.autoencoder),
                "n_samples": self.self_expression.n_samples, "settings": self.settings.to_dict()}

    def call(self, x):
        """Returns (x_r, Z, C·Z) with Z the flattened latent codes (n × p)."""
        z_hat = self.autoencoder.encode(x)
        z = tf.reshape(z_hat, (tf.shape(z_hat)[0], -1))
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
        x_rec, z, cz = self(x, training=True)
        terms = {
            "recon": losses.reconstruction(x, x_rec, s.recon_scale),
            "reg": self._regularizer(self.coef),
            "selfexp": losses.self_expression(z, cz),
        }
        terms["loss"] = terms["recon"] + s.reg1 * terms["reg"] + s.reg2 * terms["selfexp"]
        return terms

    def train_step(self, data):
        x, _, _ = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            terms = self.compute_terms(x)
        grads = tape.gradient(terms["loss"], self.trainable_variables)
        # Update only once every gradient and every logged term exists. Otherwise TF may run
        # C's update while an op still holds a read of C (the backward pass's Cᵀ·∂L/∂(CZ), or a
        # forward op that only the logged terms need, such as the entropy's row sums); the
        # update then copies C first (copy-on-write): one more n×n buffer and copy per step
        # (400 MB for MNIST). TF 2.20 did so in 13 of 16 runs of
        # test_adam_updates_coef_in_place when only the gradients were awaited.
        gated = tf.tuple(list(grads) + tf.nest.flatten(terms))
        grads, terms = gated[:len(grads)], tf.nest.pack_sequence_as(terms, gated[len(grads):])
        self.optimizer.apply(grads, self.trainable_variables)
        # Logged values are those before this step's update, like the original's fetches.
        return terms

    def test_step(self, data):
        x, _, _ = keras.utils.unpack_x_y_sample_weight(data)
        return self.compute_terms(x)


@_serializable
class PretrainNet(keras.Model):
    """The auto-encoder alone, trained on ½Σ(x_r − x)² like every released pretraining graph.

    Logs ``recon`` (the loss) and ``rel_err`` = ‖x_r − x‖/‖x‖, the stopping criterion, both
    of the weights before the step's update (as Keras logs a training step). So the weights
    EarlyStopping keeps are one update past the error it counts as best; pipeline.pretrain
    measures the error of the weights it returns again.
    """

    def __init__(self, autoencoder: ConvAutoEncoder, **kwargs):
        super().__init__(**kwargs)
        if isinstance(autoencoder, dict):  # from_config
            autoencoder = keras.saving.deserialize_keras_object(autoencoder)
        self.autoencoder = autoencoder

    def build(self, input_shape=None):  # keras.models.load_model, before the saved weights
        self.autoencoder.build()

    def call(self, x):
        return self.autoencoder(x)

    def get_config(self):
        return {**super().get_config(),
                "autoencoder": keras.saving.serialize_keras_object(self.autoencoder)}

    def train_step(self, data):
        x, _, _ = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            recon = losses.reconstruction(x, self(x, training=True), 0.5)
        grads = tape.gradient(recon, self.trainable_variables)
        self.optimizer.apply(grads, self.trainable_variables)
        return {"recon": recon, "rel_err": tf.sqrt(2.0 * recon / tf.reduce_sum(tf.square(x)))}
