"""Time each auto-encoder layer as Keras runs it and as a stride-1 reformulation (issue 6).

    python benchmarks/conv_routes.py --datasets orl,coil20,eyaleb,mnist

The auto-encoder takes most of a fine-tuning step on ORL, EYaleB and MNIST (README
"Performance"), and TensorFlow's CPU kernels for stride-2 convolutions with 1-30 channels run
far below the machine's matmul rate. A stride-2 convolution can be rewritten with stride-1
ones, which oneDNN usually serves better:

* encoder, ``space_to_depth``: pad as TF's 'SAME' does, fold each 2×2 block into channels,
  then a stride-1 'VALID' conv with the kernel zero-padded to even size and folded the same way
  (⌈k/2⌉² taps of 4·C_in channels);
* decoder, ``sub_pixel``: the transposed conv (the adjoint of the encoder's conv) as one
  stride-1 forward conv that computes the four output parities as 4·C_out channels from the
  zero-padded input with the flipped, folded kernel, then ``depth_to_space`` and a crop.

For each layer, at the dataset's size (``n`` images of its activations, random values), this
times a compiled forward and backward pass (conv, bias, ReLU; gradients of the kernel, the bias
and, except for the first encoder layer whose input is data, the input) both ways, the median
of ``--repeats`` calls, and checks that outputs and gradients agree. Weights are seeded
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


def parse_args(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="orl,coil20,eyaleb,mnist",
                   help="comma-separated (default orl,coil20,eyaleb,mnist)")
    p.add_argument("--n", type=int, help="images per batch (default: the dataset's size)")
    p.add_argument("--repeats", type=int, default=15, help="timed calls per route (default 15)")
    p.add_argument("--jit", action="store_true", help="compile both routes with XLA")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args(argv)
    args.datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    unknown = [d for d in args.datasets if d not in DATASETS]
    if unknown or not args.datasets:
        p.error(f"--datasets: unknown {', '.join(unknown) or '(none given)'}; choose from "
                f"{', '.join(DATASETS)}")
    if args.n is not None and args.n < 1:
        p.error(f"--n must be >= 1, got {args.n}")
    if args.repeats < 1:
        p.error(f"--repeats must be >= 1, got {args.repeats}")
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


def time_layer(layer, x, out_size, input_grad, repeats, jit):
    """Median ms of forward + backward by Keras and by the stride-1 route, and their largest
    relative difference over the output and the gradients."""
    import keras
    import tensorflow as tf

    x = tf.constant(x)
    decoder = isinstance(layer, keras.layers.Conv2DTranspose)

    def keras_route(inp):
        return layer(inp)

    def stride1_route(inp):
        if decoder:
            z = conv_transpose_sub_pixel(inp, layer.kernel, out_size)
        else:
            z = conv_space_to_depth(inp, layer.kernel)
        return tf.nn.relu(z + layer.bias)

    def compiled(route):
        @tf.function(jit_compile=jit)
        def step():  # the gradients only: returning the output would time its copy too
            with tf.GradientTape() as tape:
                if input_grad:
                    tape.watch(x)
                loss = 0.5 * tf.reduce_sum(tf.square(route(x)))
            return tape.gradient(loss, [layer.kernel, layer.bias] + ([x] if input_grad else []))
        return step

    results, times = [], []
    for route in (keras_route, stride1_route):
        step = compiled(route)
        results.append([route(x).numpy()] + [t.numpy() for t in step()])
        step()
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            step()[0].numpy()
            samples.append(time.perf_counter() - t0)
        times.append(1e3 * float(np.median(samples)))
    rel = max(float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-30))
              for a, b in zip(*results))
    return times[0], times[1], rel


def main(argv=None):
    args = parse_args(argv)
    from mesc_tf.training import configure_runtime

    configure_runtime(deterministic=False)
    report = {"jit": args.jit, "repeats": args.repeats, "datasets": {}}
    print("layer | input → output | Keras ms | stride-1 ms | stride-1 ÷ Keras | max rel. diff")
    for name in args.datasets:
        n = args.n or get_config(name).n_samples
        rows, totals = [], [0.0, 0.0]
        for label, layer, x, out_size, input_grad in layer_cases(name, n, args.seed):
            ms_keras, ms_stride1, rel = time_layer(layer, x, out_size, input_grad,
                                                   args.repeats, args.jit)
            totals[0] += ms_keras
            totals[1] += ms_stride1
            shape = f"{tuple(x.shape[1:])} → {tuple(out_size)}×{layer.filters}"
            rows.append({"layer": label, "shape": shape, "keras_ms": ms_keras,
                         "stride1_ms": ms_stride1, "max_rel_diff": rel})
            print(f"{name} {label} | {shape} | {ms_keras:.1f} | {ms_stride1:.1f} | "
                  f"{ms_stride1 / ms_keras:.2f} | {rel:.1e}", flush=True)
        print(f"{name} all layers (n = {n}) | | {totals[0]:.1f} | {totals[1]:.1f} | "
              f"{totals[1] / totals[0]:.2f} |")
        report["datasets"][name] = {"n": n, "layers": rows, "keras_ms": totals[0],
                                    "stride1_ms": totals[1]}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(cli.main_guard(main))
