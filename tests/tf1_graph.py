"""An independent oracle: the released MESC/DSC fine-tuning graph, written the TF1 way.

Built from reference-facts §2.2–2.6 with ``tf.compat.v1`` ops (placeholders, raw
conv2d / conv2d_transpose with explicit output shapes, ``AdamOptimizer``) in a graph session,
so it shares no code with the Keras port. Tests compare the port's C after T steps with it.
"""

import numpy as np
import tensorflow as tf

v1 = tf.compat.v1


def finetune_tf1(x, weights, *, framework, regularizer, reg1, reg2, lr, steps, coef_init,
                 recon_scale=1.0):
    """Run ``steps`` Adam updates of the released graph. Returns (C, per-step losses)."""
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
        coef = tf.Variable(coef_init * np.ones((n, n), np.float32), name="Coef")
        cz = tf.matmul(coef, z)
        act = tf.reshape(cz, z_hat.shape) if framework == "coupled" else z_hat
        for j in range(n_layers):
            k, b = weights[f"dec_{j}"]
            out_shape = shapes[n_layers - 1 - j]
            act = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d_transpose(
                act, tf.Variable(k), out_shape, [1, 2, 2, 1], "SAME"), tf.Variable(b)))
        recon = recon_scale * tf.reduce_sum(tf.pow(act - xin, 2.0))
        if regularizer == "entropy":
            reg = 0.5 * tf.reduce_sum(coef * tf.math.log(tf.clip_by_value(coef, 1e-12, 1.0)))
        elif regularizer == "l2":
            reg = tf.reduce_sum(tf.pow(coef, 2.0))
        else:
            reg = tf.reduce_sum(tf.abs(coef))
        selfexp = 0.5 * tf.reduce_sum(tf.pow(z - cz, 2.0))
        loss = recon + reg1 * reg + reg2 * selfexp
        train = v1.train.AdamOptimizer(lr).minimize(loss)  # β 0.9/0.999, ε 1e-8
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            history = []
            for _ in range(steps):
                # The fetched loss is the forward pass the update's gradients come from.
                history.append(sess.run([loss, train], {xin: x})[0])
            return sess.run(coef), np.asarray(history)
