"""The released fine-tuning graph, rebuilt the TF1 way: the yardstick the port is checked against.

Built from reference-facts §2.2–2.6 with ``tf.compat.v1`` ops (placeholders, raw conv2d /
conv2d_transpose with explicit output shapes, ``AdamOptimizer``) in a graph session, as the
authors' scripts run it. It shares no code with the Keras port (``model``, ``losses``,
``training``), so the port's C can be compared with it (tests/test_faithfulness.py,
experiments/faithfulness.py) and the port's step timed against it (benchmarks/bench.py).
"""

import time

import numpy as np

from mesc_tf.errors import MescError

TERMS = ("loss", "recon", "reg", "selfexp")
REGULARIZERS = ("entropy", "l1", "l2")  # those of the released scripts


def check(settings):
    """A MescError unless the released graphs have ``settings``' regulariser."""
    if settings.regularizer not in REGULARIZERS:
        raise MescError(f"the released graphs have no {settings.regularizer!r} regulariser; "
                        f"use one of {', '.join(REGULARIZERS)}")


def finetune(x, weights, settings, steps=None):
    """Run ``steps`` (default ``settings.epochs``) full-batch Adam updates of the released graph.

    ``weights``: {"enc_0": (kernel, bias), …, "dec_{L-1}": …}, as ``weights.read_tf1_checkpoint``
    returns them; ``settings``: a ``config.Settings`` (framework, regularizer, reg1, reg2, lr,
    coef_init, recon_scale). Every update fetches the loss terms and C with it, as the released
    script does. Returns (C after the last update, {term: per-step values of the forward pass
    each update's gradients come from}, per-step seconds).
    """
    import tensorflow as tf  # here: check() runs before TensorFlow starts

    v1 = tf.compat.v1
    check(settings)
    s = settings
    steps = s.epochs if steps is None else int(steps)
    x = np.asarray(x, np.float32)
    n, h, w, _ = x.shape
    n_layers = len(weights) // 2
    graph = tf.Graph()
    with graph.as_default():
        xin = v1.placeholder(tf.float32, [n, h, w, 1])
        act, shapes = xin, []
        for i in range(n_layers):
            k, b = weights[f"enc_{i}"]
            shapes.append(act.shape.as_list())
            act = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(
                act, tf.Variable(k), [1, 2, 2, 1], "SAME"), tf.Variable(b)))
        z_hat = act
        z = tf.reshape(z_hat, [n, -1])
        coef = tf.Variable(s.coef_init * np.ones((n, n), np.float32), name="Coef")
        cz = tf.matmul(coef, z)
        act = tf.reshape(cz, z_hat.shape) if s.framework == "coupled" else z_hat
        for j in range(n_layers):
            k, b = weights[f"dec_{j}"]
            act = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d_transpose(
                act, tf.Variable(k), shapes[n_layers - 1 - j], [1, 2, 2, 1], "SAME"),
                tf.Variable(b)))
        recon = s.recon_scale * tf.reduce_sum(tf.pow(act - xin, 2.0))
        if s.regularizer == "entropy":
            reg = 0.5 * tf.reduce_sum(coef * tf.math.log(tf.clip_by_value(coef, 1e-12, 1.0)))
        elif s.regularizer == "l2":
            reg = tf.reduce_sum(tf.pow(coef, 2.0))
        else:
            reg = tf.reduce_sum(tf.abs(coef))
        selfexp = 0.5 * tf.reduce_sum(tf.pow(z - cz, 2.0))
        loss = recon + s.reg1 * reg + s.reg2 * selfexp
        train = v1.train.AdamOptimizer(s.lr).minimize(loss)  # β 0.9 / 0.999, ε 1e-8
        fetches = [loss, recon, reg, selfexp, coef, train]
        history, seconds = [], []
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            for _ in range(steps):
                start = time.perf_counter()
                history.append(sess.run(fetches, {xin: x})[:4])
                seconds.append(time.perf_counter() - start)
            c = sess.run(coef)
    values = np.asarray(history, np.float64).reshape(steps, len(TERMS))
    return c, dict(zip(TERMS, values.T)), seconds
