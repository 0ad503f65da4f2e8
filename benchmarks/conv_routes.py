"""Time each auto-encoder layer as Keras runs it and as reformulations of it (issue 6).

    python benchmarks/conv_routes.py --datasets orl,coil20,eyaleb,mnist

The auto-encoder takes most of a fine-tuning step on ORL, EYaleB and MNIST (README
"Performance"), and TensorFlow's CPU kernels for stride-2 convolutions with 1-30 channels run
far below the machine's matmul rate. The routes timed against Keras' layers:

* encoder, ``space_to_depth`` (stride-1 route; oneDNN usually serves stride 1 better): pad as
  TF's 'SAME' does, fold each 2×2 block into channels, then a stride-1 'VALID' conv with the
  kernel zero-padded to even size and folded the same way (⌈k/2⌉² taps of 4·C_in channels);
* decoder, ``sub_pixel`` (stride-1 route): the transposed conv (the adjoint of the encoder's
  conv) as one stride-1 forward conv that computes the four output parities as 4·C_out channels
  from the zero-padded input with the flipped, folded kernel, then ``depth_to_space`` and a
  crop;
* decoder, ``col2im``: the transposed conv's forward pass as one matmul, Y·W → every kernel
  tap's contribution, then the taps summed onto the output grid by parity (col2im), compiled by
  XLA; its backward pass is TensorFlow's own (a conv and a filter gradient, as TF differentiates
  Conv2DTranspose). Only the summation order of the output differs from Keras'.

It also times the whole auto-encoder's forward and backward pass as Keras runs it and with its
output layer (one channel, where TF's transposed-conv kernel is slowest) by ``col2im``.

For each layer, at the dataset's size (``n`` images of its activations, random values), this
times a compiled forward and backward pass (conv, bias, ReLU; gradients of the kernel, the bias
and, except for the first encoder layer whose input is data, the input) each way, the median
of ``--repeats`` calls, and reports how far each route's outputs and gradients are from
Keras' (``max_rel_diff``, the largest relative difference; no threshold: the tests check the
routes' agreement, tests/test_bench.py and test_bench_routes.py). Weights are seeded
he_normal; times do not depend on them.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mesc_tf import cli  # noqa: E402
from mesc_tf.config import DATASETS, encoder_sizes, get_config  # noqa: E402
from mesc_tf.files import atomic_write_text  # noqa: E402

# Folders made for --json, removed if the run then fails (cli.main_guard).
CLEANUP = []


def parse_args(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="orl,coil20,eyaleb,mnist",
                   help="comma-separated (default orl,coil20,eyaleb,mnist)")
    p.add_argument("--n", type=cli.at_least(1),
                   help="images per batch (default: the dataset's size)")
    p.add_argument("--repeats", type=cli.at_least(1), default=15,
                   help="timed calls per route (default 15)")
    p.add_argument("--jit", action="store_true", help="compile every timed route with XLA")
    p.add_argument("--seed", type=cli.seed_arg, default=0)
    p.add_argument("--json", help="also write the figures here")
    p.add_argument("--force", action="store_true", help="overwrite an existing --json file")
    args = p.parse_args(argv)
    # case-blind as bench.py's; once each: the report keeps one entry per dataset
    args.datasets = list(dict.fromkeys(d.strip().lower() for d in args.datasets.split(",")
                                       if d.strip()))
    unknown = [d for d in args.datasets if d not in DATASETS]
    if unknown or not args.datasets:
        p.error(f"--datasets: unknown {', '.join(unknown) or '(none given)'}; choose from "
                f"{', '.join(DATASETS)}")
    return args


def same_pads(size_in, size_out, k):
    """TF's 'SAME' stride-2 padding (before, after) of an input of size_in giving size_out."""
    total = max((size_out - 1) * 2 + k - size_in, 0)
    return total // 2, total - total // 2


def fold_kernel(w):
    """(k, k, a, b) → (⌈k/2⌉, ⌈k/2⌉, 2, 2, a, b): tap 2q + r of each axis as (q, r)."""
    import tensorflow as tf

    k = w.shape[0]
    kq = (k + 1) // 2
    w = tf.pad(w, [[0, 2 * kq - k], [0, 2 * kq - k], [0, 0], [0, 0]])
    w = tf.reshape(w, (kq, 2, kq, 2, *w.shape[2:]))
    return tf.transpose(w, (0, 2, 1, 3, 4, 5))


def conv_space_to_depth(x, w):
    """Conv2D(strides=2, padding='same') of x by the (k, k, c_in, c_out) kernel w."""
    import tensorflow as tf

    k, kq = w.shape[0], (w.shape[0] + 1) // 2
    pads = []
    for size in x.shape[1:3]:
        out = (size + 1) // 2
        before, _ = same_pads(size, out, k)
        pads.append([before, 2 * (out - 1 + kq) - size - before])  # even length for the fold
    x = tf.nn.space_to_depth(tf.pad(x, [[0, 0], *pads, [0, 0]]), 2)
    folded = tf.reshape(fold_kernel(w), (kq, kq, 4 * w.shape[2], w.shape[3]))
    return tf.nn.conv2d(x, folded, 1, "VALID")


def conv_transpose_sub_pixel(y, w, out_size):
    """Conv2DTranspose(strides=2, padding='same') of y to out_size by the (k, k, c_out, c_in)
    kernel w: output position 2m + r sums y[m − q]·w[2q + r] over q, one parity r at a time."""
    import tensorflow as tf

    k, kq = w.shape[0], (w.shape[0] + 1) // 2
    c_out, c_in = w.shape[2], w.shape[3]
    folded = tf.reverse(fold_kernel(w), [0, 1])  # (q_h, q_w, r_h, r_w, c_out, c_in), q flipped
    folded = tf.reshape(tf.transpose(folded, (0, 1, 5, 2, 3, 4)), (kq, kq, c_in, 4 * c_out))
    y = tf.pad(y, [[0, 0], [kq - 1, kq - 1], [kq - 1, kq - 1], [0, 0]])
    full = tf.nn.depth_to_space(tf.nn.conv2d(y, folded, 1, "VALID"), 2)
    top, _ = same_pads(out_size[0], y.shape[1] - 2 * (kq - 1), k)
    left, _ = same_pads(out_size[1], y.shape[2] - 2 * (kq - 1), k)
    return full[:, top:top + out_size[0], left:left + out_size[1], :]


def _col2im_stride2(taps, out_size, pad):
    """Σ over taps (kh, kw) of taps[:, i, j, kh, kw] placed at output (2i + kh, 2j + kw) − pad.

    taps: (n, h, w, k, k, c). Output parity (a, b) receives the taps with kh ≡ a, kw ≡ b
    (mod 2), shifted by (kh // 2, kw // 2); the four parities are then interleaved."""
    import tensorflow as tf

    _, h, w, k, _, c = taps.shape
    hh, ww = h + (k - 1) // 2, w + (k - 1) // 2
    rows = []
    for a in range(2):
        cols = []
        for b in range(2):
            acc = tf.zeros((tf.shape(taps)[0], hh, ww, c), taps.dtype)  # none for k = 1, b = 1
            for kh in range(a, k, 2):
                for kw in range(b, k, 2):
                    acc += tf.pad(taps[:, :, :, kh, kw, :],
                                  [[0, 0], [kh // 2, hh - h - kh // 2],
                                   [kw // 2, ww - w - kw // 2], [0, 0]])
            cols.append(acc)
        rows.append(tf.stack(cols, axis=3))
    full = tf.reshape(tf.stack(rows, axis=2), (-1, 2 * hh, 2 * ww, c))
    return full[:, pad[0]:pad[0] + out_size[0], pad[1]:pad[1] + out_size[1], :]


def conv_transpose_col2im(y, w, out_size):
    """Conv2DTranspose(strides=2, padding='same') of y to out_size by the (k, k, c_out, c_in)
    kernel w: the forward pass by a matmul and col2im under XLA, the backward pass by TF's
    kernels."""
    import tensorflow as tf

    out_size = tuple(int(s) for s in out_size)

    @tf.function(jit_compile=True, autograph=False)
    def forward(y, w):
        _, h, wd, c_in = y.shape
        k, _, c_out, _ = w.shape
        pad = tuple(same_pads(o, s, k)[0] for o, s in zip(out_size, (h, wd)))
        taps = tf.matmul(tf.reshape(y, (-1, c_in)),
                         tf.reshape(tf.transpose(w, (3, 0, 1, 2)), (c_in, -1)))
        return _col2im_stride2(tf.reshape(taps, (-1, h, wd, k, k, c_out)), out_size, pad)

    @tf.custom_gradient
    def op(y, w):
        def grad(d_out):  # as TF's gradient of Conv2DBackpropInput
            d_y = tf.nn.conv2d(d_out, w, strides=2, padding="SAME")
            d_w = tf.raw_ops.Conv2DBackpropFilter(input=d_out, filter_sizes=tf.shape(w),
                                                  out_backprop=y, strides=[1, 2, 2, 1],
                                                  padding="SAME")
            return d_y, d_w
        return forward(y, w), grad

    return op(y, tf.convert_to_tensor(w))


def layer_cases(name, n, seed):
    """(label, layer, input, output size, whether the input needs a gradient) per layer."""
    import keras

    from mesc_tf.model import ConvAutoEncoder

    keras.utils.set_random_seed(seed)
    arch = get_config(name).arch
    ae = ConvAutoEncoder(arch).build_for_input()
    sizes = encoder_sizes(arch)
    rng = np.random.default_rng(seed)
    cases, depth = [], len(arch.kernels)
    for i, layer in enumerate(ae.encoder_layers):
        channels = 1 if i == 0 else arch.channels[i - 1]
        x = rng.uniform(0, 1, (n, *sizes[i], channels)).astype(np.float32)
        cases.append((layer.name, layer, x, sizes[i + 1], i > 0))
    for j, layer in enumerate(ae.decoder_layers):
        y = rng.uniform(0, 1, (n, *sizes[depth - j], arch.channels[depth - 1 - j]))
        cases.append((layer.name, layer, y.astype(np.float32), sizes[depth - 1 - j], True))
    return cases


def _median_ms(step, repeats):
    step()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()[0].numpy()
        samples.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(samples))


def _max_rel(results):
    """Largest difference of each route's output and gradients from the first route's,
    relative to the first route's largest entry."""
    return max(float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-30))
               for other in results[1:] for a, b in zip(results[0], other))


def time_layer(layer, x, out_size, input_grad, repeats, jit):
    """{route: median ms of forward + backward} (Keras, stride-1 and, for a decoder layer,
    col2im) and the routes' largest relative difference from Keras over output and gradients."""
    import keras
    import tensorflow as tf

    x = tf.constant(x)
    decoder = isinstance(layer, keras.layers.Conv2DTranspose)
    def bias_relu(product):
        return lambda inp: tf.nn.relu(product(inp, layer.kernel) + layer.bias)

    routes = {"keras": layer}
    if decoder:
        routes["stride1"] = bias_relu(lambda y, w: conv_transpose_sub_pixel(y, w, out_size))
        routes["col2im"] = bias_relu(lambda y, w: conv_transpose_col2im(y, w, out_size))
    else:
        routes["stride1"] = bias_relu(conv_space_to_depth)

    def compiled(route):
        @tf.function(jit_compile=jit)
        def step():  # the gradients only: returning the output would time its copy too
            with tf.GradientTape() as tape:
                if input_grad:
                    tape.watch(x)
                loss = 0.5 * tf.reduce_sum(tf.square(route(x)))
            return tape.gradient(loss, [layer.kernel, layer.bias] + ([x] if input_grad else []))
        return step

    results, times = [], {}
    for name, route in routes.items():
        step = compiled(route)
        results.append([route(x).numpy()] + [t.numpy() for t in step()])
        times[name] = _median_ms(step, repeats)
    return times, _max_rel(results)


def time_autoencoder(name, n, seed, repeats, jit):
    """Median ms of the auto-encoder's forward and backward pass on n random images (½Σ(x_r −
    x)², kernel and bias gradients), by Keras and with the output layer by col2im, and their
    largest relative difference."""
    import keras
    import tensorflow as tf

    from mesc_tf.model import ConvAutoEncoder

    keras.utils.set_random_seed(seed)
    arch = get_config(name).arch
    ae = ConvAutoEncoder(arch).build_for_input()
    x = tf.constant(np.random.default_rng(seed).uniform(0, 1, (n, *arch.image_shape, 1)),
                    tf.float32)
    last = ae.decoder_layers[-1]

    def col2im_output(inp):
        h = ae.encode(inp)
        for layer in ae.decoder_layers[:-1]:
            h = layer(h)
        return tf.nn.relu(conv_transpose_col2im(h, last.kernel, arch.image_shape) + last.bias)

    results, times = [], {}
    for route_name, route in (("keras", ae), ("col2im_output", col2im_output)):
        @tf.function(jit_compile=jit)
        def step(route=route):
            with tf.GradientTape() as tape:
                loss = 0.5 * tf.reduce_sum(tf.square(route(x) - x))
            return tape.gradient(loss, ae.trainable_variables)
        results.append([t.numpy() for t in step()])
        times[route_name] = _median_ms(step, repeats)
    return times, _max_rel(results)


def main(argv=None):
    args = parse_args(argv)
    if args.json:  # before the work, not after (nor in parse_args: a parse makes nothing)
        CLEANUP.extend(cli.prepare_out_file(args.json, force=args.force, what="--json file"))
    from mesc_tf import provenance
    from mesc_tf.training import configure_runtime

    configure_runtime(deterministic=False)
    # What bench.py's report records of the run: the command, the machine, the versions.
    report = {"command": provenance.command("benchmarks/conv_routes.py", argv),
              "machine": provenance.machine(), "jit": args.jit, "repeats": args.repeats,
              "seed": args.seed, "datasets": {}}
    print("layer | input → output | Keras ms | stride-1 ms | col2im ms | stride-1 ÷ Keras | "
          "col2im ÷ Keras | max rel. diff")
    for name in args.datasets:
        n = args.n or get_config(name).n_samples
        rows, totals = [], {"keras": 0.0, "stride1": 0.0}
        for label, layer, x, out_size, input_grad in layer_cases(name, n, args.seed):
            times, rel = time_layer(layer, x, out_size, input_grad, args.repeats, args.jit)
            for route in totals:
                totals[route] += times[route]
            shape = f"{tuple(x.shape[1:])} → {tuple(out_size)}×{layer.filters}"
            col2im = times.get("col2im")
            rows.append({"layer": label, "shape": shape, "keras_ms": times["keras"],
                         "stride1_ms": times["stride1"], "col2im_ms": col2im,
                         "max_rel_diff": rel})
            col2im_ms, col2im_ratio = ("-", "-") if col2im is None else (
                f"{col2im:.1f}", f"{col2im / times['keras']:.2f}")
            print(f"{name} {label} | {shape} | {times['keras']:.1f} | {times['stride1']:.1f} | "
                  f"{col2im_ms} | {times['stride1'] / times['keras']:.2f} | {col2im_ratio} | "
                  f"{rel:.1e}", flush=True)
        print(f"{name} all layers (n = {n}) | | {totals['keras']:.1f} | {totals['stride1']:.1f} "
              f"| | {totals['stride1'] / totals['keras']:.2f} | |")
        ae_times, ae_rel = time_autoencoder(name, n, args.seed, args.repeats, args.jit)
        print(f"{name} auto-encoder, Keras / output layer by col2im (n = {n}) | | "
              f"{ae_times['keras']:.1f} | | {ae_times['col2im_output']:.1f} | | "
              f"{ae_times['col2im_output'] / ae_times['keras']:.2f} | {ae_rel:.1e}", flush=True)
        report["datasets"][name] = {"n": n, "layers": rows, "keras_ms": totals["keras"],
                                    "stride1_ms": totals["stride1"],
                                    "autoencoder_keras_ms": ae_times["keras"],
                                    "autoencoder_col2im_output_ms": ae_times["col2im_output"],
                                    "autoencoder_max_rel_diff": ae_rel}
    report["versions"] = provenance.versions()
    if args.json:
        atomic_write_text(args.json, json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(cli.main_guard(main, CLEANUP))
