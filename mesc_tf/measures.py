"""Measures of an auto-encoder over a dataset, in batches: the relative reconstruction error,
the latent codes, each channel's activity (and so the dead ones), the hidden layers' mean
activations, and the rescaling of the weights those means guide (pretrained/HISTORY.md).
"""

import numpy as np
import tensorflow as tf

from mesc_tf.errors import MescError


def relative_error(autoencoder, x, batch_size=2048):
    """‖x_r − x‖ / ‖x‖ over the whole set (the figure of reference-facts §1.3)."""
    num = den = 0.0
    for i in range(0, len(x), batch_size):
        xb = tf.convert_to_tensor(x[i:i + batch_size], tf.float32)
        num += float(tf.reduce_sum(tf.square(autoencoder(xb) - xb)))
        den += float(tf.reduce_sum(tf.square(xb)))
    return float(np.sqrt(num / den))


def latent_codes(autoencoder, x, batch_size=2048) -> np.ndarray:
    """The encoder's output for every image of ``x``, flattened: (n, latent_dim) float32."""
    parts = []
    for i in range(0, len(x), batch_size):
        z = autoencoder.encode(tf.convert_to_tensor(x[i:i + batch_size], tf.float32))
        parts.append(np.asarray(z).reshape(len(z), -1))
    return np.concatenate(parts)


def _layer_outputs(layers, x, batch_size):
    """(k, output of layers[k]) for each batch of ``x`` run through ``layers`` in order."""
    for i in range(0, len(x), batch_size):
        h = tf.convert_to_tensor(x[i:i + batch_size], tf.float32)
        for k, layer in enumerate(layers):
            h = layer(h)
            yield k, h


def channel_activity(autoencoder, x, batch_size=2048) -> dict[str, np.ndarray]:
    """For every layer (enc_0 … dec_{L-1}), the fraction of positions (images × pixels) of
    ``x`` at which each channel's output is positive, i.e. its ReLU on.

    A channel at 0 gets no gradient and stays dead. On non-negative pixels a first-layer channel
    whose pre-activation starts negative everywhere never fires (pretrained/HISTORY.md, ORL)."""
    layers = autoencoder.named_layers
    on = [np.zeros(layer.filters) for layer in layers]
    positions = np.zeros(len(layers))
    for k, h in _layer_outputs(layers, x, batch_size):
        on[k] += tf.reduce_sum(tf.cast(h > 0, tf.float32), axis=(0, 1, 2)).numpy()
        positions[k] += int(np.prod(h.shape[:3]))
    return {layer.name: on[k] / positions[k] for k, layer in enumerate(layers)}


def dead_channels(autoencoder, x, batch_size=2048) -> list[int]:
    """Latent channels that are 0 (ReLU off) for every image of ``x``: they carry nothing into
    the self-expression. Long pretraining killed some in ours (pretrained/HISTORY.md)."""
    latent = channel_activity(autoencoder, x, batch_size)[autoencoder.encoder_layers[-1].name]
    return [int(c) for c in np.flatnonzero(latent == 0)]


def hidden_activation_means(autoencoder, x, batch_size=2048) -> np.ndarray:
    """Mean |activation| over ``x`` of every layer but the output layer, in order."""
    layers = autoencoder.named_layers[:-1]
    sums, counts = np.zeros(len(layers)), np.zeros(len(layers))
    for k, h in _layer_outputs(layers, x, batch_size):
        sums[k] += float(tf.reduce_sum(tf.abs(h)))
        counts[k] += int(tf.size(h))
    return sums / counts


def rescale_activations(autoencoder, x, target, batch_size=2048) -> list[float]:
    """Rescale the weights so that every hidden layer's mean |activation| on ``x`` is
    ``target`` (a number, or one per hidden layer in order: enc_0 … dec_1 for 3 layers),
    leaving every reconstruction as it was. Returns the factor of each hidden layer.

    ReLU is positively homogeneous: a layer's kernel and bias times a > 0 give its output
    times a, and the next kernel divided by a undoes that. The function stays, fine-tuning
    does not: the self-expression term grows with the codes' square and Adam moves every
    weight by about the learning rate whatever its size (pretrained/HISTORY.md, EYaleB).
    A layer that outputs 0 for every image cannot reach ``target``; it takes the factor of the
    layer before it (any factor keeps it 0), so a finished pretraining is never refused here.
    """
    n_hidden = len(autoencoder.named_layers) - 1
    targets = np.ravel(np.asarray(target, float))
    targets = np.full(n_hidden, targets[0]) if len(targets) == 1 else targets
    if len(targets) != n_hidden:
        raise MescError(f"the activation scale needs one value or {n_hidden} (one per hidden "
                        f"layer), got {len(targets)}")
    if not all(0 < t < float("inf") for t in targets):
        raise MescError(f"the activation scale must be finite and > 0, got {target}")
    layers = autoencoder.named_layers
    factors, previous = [], 1.0
    for t, mean in zip(targets, hidden_activation_means(autoencoder, x, batch_size)):
        previous = float(t / mean) if mean > 0 else previous
        factors.append(previous)
    previous = 1.0
    for layer, factor in zip(layers, [*factors, 1.0]):  # the output layer keeps its scale
        layer.kernel.assign(layer.kernel * (factor / previous))
        layer.bias.assign(layer.bias * factor)
        previous = factor
    return factors
