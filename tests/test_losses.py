"""Loss terms against numpy, and one training step against the hand-derived gradient and Adam
update of reference-facts §2.4 and pitfall 3."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from mesc_tf import losses
from mesc_tf.config import Architecture, Settings
from mesc_tf.model import ConvAutoEncoder, MESCNet
from mesc_tf.training import ADAM_EPSILON, fit_steps, full_batch

pytestmark = pytest.mark.usefixtures("runtime")

LN_CLIP = math.log(1e-12)

# One entry in every regime of the clipped log: 0, negative, ≤ 1e-12, inside (1e-12, 1), ≥ 1.
C_KNOWN = np.array([[0.0, -0.5, 1e-13, 1e-12],
                    [3e-12, 0.25, 0.999, 1.0],
                    [1.5, 2.0, 1e-4, 0.5],
                    [-2e-3, 0.1, 0.7, 1e-6]], np.float64)


def entropy_by_cases(c):
    """½ Σ c·ln(clip(c)) written case by case: c·ln(1e-12) at or below the clip, c·ln c
    inside, 0 at or above 1 (ln 1 = 0)."""
    low, high = c <= 1e-12, c >= 1.0
    inside = np.where(low | high, 1.0, c)
    return 0.5 * np.sum(np.where(low, c * LN_CLIP, np.where(high, 0.0, c * np.log(inside))))


def as_tf(a):
    return tf.constant(a, tf.float32)


def test_entropy_every_regime():
    c = C_KNOWN.astype(np.float32).astype(np.float64)  # the values the float32 op sees
    got = float(losses.entropy(as_tf(C_KNOWN)))
    np.testing.assert_allclose(got, entropy_by_cases(c), rtol=1e-6)
    # Negative entries count linearly with ln(1e-12): -0.5 → +0.5·0.5·27.63.
    np.testing.assert_allclose(float(losses.entropy(as_tf([[-0.5]]))), 0.25 * -LN_CLIP, rtol=1e-6)
    assert float(losses.entropy(as_tf([[2.0, 1.0]]))) == 0.0
    np.testing.assert_allclose(float(losses.entropy(as_tf([[0.5]]))), 0.25 * math.log(0.5),
                               rtol=1e-6)


def test_entropy_gradient_passes_the_clip_bounds():
    """At C = 1 and C = 1e-12 the gradient is autodiff's of the released C·ln clip(C): clip
    passes its gradient at both bounds (½(ln 1 + 1) and ½(ln 1e-12 + 1))."""
    c = tf.Variable(np.array([[1.0, 1e-12, 0.5, 2.0, -0.5]], np.float32))
    with tf.GradientTape() as tape:
        got = tape.gradient(losses.entropy(c), c).numpy()
    with tf.GradientTape() as tape:
        released = 0.5 * tf.reduce_sum(c * tf.math.log(tf.clip_by_value(c, 1e-12, 1.0)))
    np.testing.assert_allclose(got, tape.gradient(released, c).numpy(), rtol=1e-5)
    np.testing.assert_allclose(got[0, :2], [0.5, 0.5 * (math.log(1e-12) + 1)], rtol=1e-5)


def test_other_regularisers():
    c = C_KNOWN
    np.testing.assert_allclose(float(losses.l1(as_tf(c))), np.abs(c).sum(), rtol=1e-6)
    np.testing.assert_allclose(float(losses.l2(as_tf(c))), np.square(c).sum(), rtol=1e-6)
    np.testing.assert_allclose(float(losses.nuclear(as_tf(c))),
                               np.linalg.svd(c, compute_uv=False).sum(), rtol=1e-5)
    assert set(losses.REGULARIZERS) == {"entropy", "l1", "l2", "nuclear"}


def test_reconstruction_and_self_expression_constants():
    rng = np.random.default_rng(0)
    x, xr = rng.random((3, 4, 4, 1)), rng.random((3, 4, 4, 1))
    sse = np.square(xr - x).sum()
    np.testing.assert_allclose(float(losses.reconstruction(as_tf(x), as_tf(xr))), sse, rtol=1e-5)
    np.testing.assert_allclose(float(losses.reconstruction(as_tf(x), as_tf(xr), 0.5)), 0.5 * sse,
                               rtol=1e-5)
    z, c = rng.random((5, 7)), rng.random((5, 5))
    np.testing.assert_allclose(float(losses.self_expression(as_tf(z), as_tf(c @ z))),
                               0.5 * np.square(z - c @ z).sum(), rtol=1e-5)


# --- one step of a tiny MESC-Net -------------------------------------------------------------

TINY = Architecture(image_shape=(8, 8), kernels=(3,), channels=(2,))
N = 6
SETTINGS = Settings(framework="decoupled", regularizer="entropy", reg1=0.7, reg2=0.3, lr=1e-3,
                    epochs=1, coef_init=1e-4)


def tiny_model(settings=SETTINGS, seed=3):
    """he_normal auto-encoder on random images, C set to entries in every regime."""
    rng = np.random.default_rng(seed)
    x = rng.random((N, *TINY.image_shape, 1)).astype(np.float32)
    keras.utils.set_random_seed(seed)
    model = MESCNet(ConvAutoEncoder(TINY).build_for_input(), N, settings)
    model(x)
    c0 = rng.choice([-0.3, 0.0, 1e-13, 1e-5, 0.02, 0.4, 0.9, 1.7], size=(N, N))
    model.coef.assign(c0.astype(np.float32))
    return model, x


def hand_coef_gradient(model, x, s):
    """∂L/∂C = reg1·½(ln C + 1)[1e-12<C<1] + reg1·½·ln(1e-12)[C≤1e-12]
    − reg2·(Z − CZ)Zᵀ (decoupled: the reconstruction does not reach C)."""
    c = model.coef.numpy().astype(np.float64)
    z = model(x)[1].numpy().astype(np.float64)
    inside = (c > 1e-12) & (c < 1.0)
    g_reg = np.where(inside, 0.5 * (np.log(np.where(inside, c, 1.0)) + 1.0), 0.0)
    g_reg += np.where(c <= 1e-12, 0.5 * LN_CLIP, 0.0)
    return s.reg1 * g_reg - s.reg2 * (z - c @ z) @ z.T


def test_gradient_wrt_coef_matches_hand_formula():
    model, x = tiny_model()
    with tf.GradientTape() as tape:
        loss = model.compute_terms(x)["loss"]
    got = tape.gradient(loss, model.coef).numpy()
    want = hand_coef_gradient(model, x, SETTINGS)
    assert np.abs(want).min() > 1e-3  # every entry carries a real gradient
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def adam_hand(c, g, m, v, t, lr, b1=0.9, b2=0.999):
    """One TF1/Keras Adam step t (1-based) in float64, bias-corrected, ε-hat form."""
    m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
    alpha = lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    return c - alpha * m / (np.sqrt(v) + ADAM_EPSILON), m, v


def test_adam_steps_match_hand_update():
    """Keras Adam (ε 1e-8) updates C by the rule of TF1's AdamOptimizer. The first step is
    sign-like (every entry moves by lr); the second checks the moment bookkeeping."""
    model, x = tiny_model()
    c0 = model.coef.numpy().astype(np.float64)
    g1 = hand_coef_gradient(model, x, SETTINGS)
    history, _ = fit_steps(model, x, epochs=1, lr=SETTINGS.lr, verbose=0)
    assert ADAM_EPSILON == 1e-8 and model.optimizer.epsilon == 1e-8
    c1, m, v = adam_hand(c0, g1, 0.0, 0.0, 1, SETTINGS.lr)
    np.testing.assert_allclose(model.coef.numpy(), c1, rtol=0, atol=SETTINGS.lr * 1e-4)
    np.testing.assert_allclose(np.abs(c1 - c0), SETTINGS.lr, rtol=1e-3)
    assert set(history) == {"loss", "recon", "reg", "selfexp"}

    g2 = hand_coef_gradient(model, x, SETTINGS)  # at the updated C and auto-encoder
    c2, _, _ = adam_hand(model.coef.numpy().astype(np.float64), g2, m, v, 2, SETTINGS.lr)
    # One more step with the same optimizer state (fit_steps would make a new Adam).
    model.fit(full_batch(x), epochs=1, steps_per_epoch=1, verbose=0, shuffle=False)
    step = np.abs(c2 - c1)
    assert step.max() - step.min() > 0.1 * SETTINGS.lr  # no longer sign-like
    np.testing.assert_allclose(model.coef.numpy(), c2, rtol=0, atol=SETTINGS.lr * 1e-3)


def test_evaluate_gives_the_loss_terms_without_training():
    """MESCNet.test_step: keras' evaluate() reports the loss terms and changes nothing."""
    model, x = tiny_model()
    model.compile(optimizer="adam")
    before = [w.numpy() for w in model.weights]
    logs = model.evaluate(full_batch(x), steps=1, return_dict=True, verbose=0)
    want = {k: float(v) for k, v in model.compute_terms(x).items()}
    assert {k: float(v) for k, v in logs.items()} == pytest.approx(want, rel=1e-6)
    for a, b in zip(before, model.weights):
        np.testing.assert_array_equal(a, b.numpy())


def test_adam_is_tf1_adam_bit_for_bit():
    """FusedAdam and TF1's AdamOptimizer, fed the same gradients, keep the same variable bit for
    bit over 3000 steps: past where pow(β2, t) first differs from TF1's running product (step
    3) and past where β1ᵗ runs out of the table (step 165)."""
    from mesc_tf.training import adam, tf1_beta_powers

    steps, lr = 3000, 1e-3
    rng = np.random.default_rng(0)
    scales = 10.0 ** rng.uniform(-6, 2, (1, 64))  # gradients from tiny to large, per entry
    grads = (rng.standard_normal((steps, 64)) * scales).astype(np.float32)
    start = rng.standard_normal(64).astype(np.float32)

    v1 = tf.compat.v1
    with tf.Graph().as_default(), v1.Session() as sess:
        var = v1.Variable(start)
        g = v1.placeholder(tf.float32, (64,))
        train = v1.train.AdamOptimizer(lr).apply_gradients([(g, var)])
        sess.run(v1.global_variables_initializer())
        for grad in grads:
            sess.run(train, {g: grad})
        want = sess.run(var)

    port = tf.Variable(start)
    optimizer = adam(lr)

    @tf.function
    def run(all_grads):
        for grad in all_grads:
            optimizer.apply_gradients([(grad, port)])

    run(tf.constant(grads))
    np.testing.assert_array_equal(port.numpy(), want)
    b2 = tf1_beta_powers(0.999)
    assert b2[-1] <= 2.0**-25 < b2[-2] and np.float32(1) - b2[-1] == 1


def test_logged_terms_are_before_the_update():
    """History holds the loss of the weights the step started from (as the original fetched)."""
    model, x = tiny_model()
    before = {k: float(v) for k, v in model.compute_terms(x).items()}
    history, _ = fit_steps(model, x, epochs=1, lr=SETTINGS.lr, verbose=0)
    for k, v in before.items():
        np.testing.assert_allclose(history[k][0], v, rtol=1e-5)
    np.testing.assert_allclose(
        before["loss"], before["recon"] + SETTINGS.reg1 * before["reg"]
        + SETTINGS.reg2 * before["selfexp"], rtol=1e-6)
