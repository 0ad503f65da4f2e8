"""Check the port against the released graph: same weights and settings, same C.

    python experiments/faithfulness.py --dataset orl --reg1 1 --reg2 0.2 --lr 1e-3 --epochs 100
    python experiments/faithfulness.py --dataset mnist --method our_wo_net --samples 500 --epochs 20

Fine-tunes twice from the same auto-encoder (the authors' TF1 checkpoint of the dataset unless
--tf1-checkpoint) with the same settings: by the port, through the path experiments/run.py
takes (pipeline.fine_tune, Keras fit), and by the released graph rebuilt with TF1 ops in a
tf.compat.v1 session (mesc_tf/released_graph.py). Prints how far apart the two C's are, and
the largest per-step relative difference of each loss term. With --against FILE.npy it also
compares both C's with a C saved by the authors' own graph (../shared/reference/ holds one for
the first command above). With --noise-floor it runs the released graph once more on the
images in another order: the same problem in exact arithmetic, so the distance between its two
C's is what float32 rounding alone does to C over these steps (Adam amplifies rounding where a
gradient is near 0), the yardstick for the port's distance.

Both sides read the same checkpoint tensors (weights.read_tf1_checkpoint), images and settings,
so the port-vs-graph figures check the model, the losses and Adam, not the converter or the
loaders: --against (the authors' C) and tests/test_weights.py's reconstruction errors do.
"""

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout too

from experiments import common  # noqa: E402
from mesc_tf import cli, files, provenance  # noqa: E402
from mesc_tf.config import METHODS  # noqa: E402


def parse_args(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_dataset_arg(p)
    p.add_argument("--method", choices=METHODS, default="our",
                   help="the settings preset of a table row (default: our, MESC-Net)")
    cli.add_settings_args(p, post=False)
    p.add_argument("--tf1-checkpoint", default="original", metavar="PREFIX",
                   help="TF1 checkpoint prefix (default: the authors' one of the dataset)")
    p.add_argument("--samples", type=cli.at_least(2), metavar="N",
                   help="use N images instead of all: every (len // N)-th from the first, "
                        "which covers the first (len // N)·N images (the whole set where N "
                        "divides it; the first N above len/2)")
    p.add_argument("--against", metavar="FILE.npy",
                   help="also compare both C's with this C (n×n, e.g. from the authors' graph)")
    p.add_argument("--noise-floor", action="store_true", help="also run the released graph "
                   "on the images in another order, to measure what rounding alone does to C")
    p.add_argument("--json", metavar="FILE", help="write the figures to FILE")
    p.add_argument("--force", action="store_true", help="overwrite an existing --json file")
    args = p.parse_args(argv)
    from mesc_tf.weights import tf1_prefix

    args.tf1_checkpoint = tf1_prefix(args.dataset, args.tf1_checkpoint)
    return args


def relative(a, b) -> float:
    """‖a − b‖ / ‖b‖ (Frobenius): 0 where both are 0 (C not moved by either side, as with
    reg1 = reg2 = 0 decoupled), inf where only ``a`` is not."""
    import numpy as np

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    diff, scale = np.linalg.norm(a - b), np.linalg.norm(b)
    if scale == 0:
        return 0.0 if diff == 0 else np.inf
    return float(diff / scale)


def largest_step_difference(port, graph) -> float:
    """max over steps of |port − graph| / |graph| for one loss term (0 where both are 0, as
    Σ C² is at a C started at 0)."""
    import numpy as np

    port, graph = np.asarray(port, np.float64), np.asarray(graph, np.float64)
    diff = np.abs(port - graph)
    scale = np.abs(graph)
    ratio = np.divide(diff, scale, out=np.where(diff > 0, np.inf, 0.0), where=scale > 0)
    return float(ratio.max()) if len(ratio) else 0.0


def reordered_run(x, weights, settings, seed=0):
    """The released graph on the images in a random order, its C put back in the original
    order: the same C as in the original order but for rounding (sums run in another order)."""
    import numpy as np

    from mesc_tf import released_graph

    order = np.random.default_rng(seed).permutation(len(x))
    c, history, _ = released_graph.finetune(x[order], weights, settings)
    back = np.empty_like(c)
    back[np.ix_(order, order)] = c
    return back, history


def load_against(path, n):
    import numpy as np

    from mesc_tf.errors import MescError

    try:
        c = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        # NumPy takes any file that is not .npy or .npz for a pickle; a .npy of Python objects
        # needs one too.
        why = ("an empty file" if isinstance(e, EOFError)
               else "an array of Python objects, not numbers" if "Object arrays" in str(e)
               else "not a .npy file" if "pickle" in str(e) else " ".join(str(e).split()))
        raise MescError(f"cannot read --against {path} ({why}); give a .npy file holding an "
                        "n×n C") from None
    if not isinstance(c, np.ndarray):
        raise MescError(f"--against {path} is not a .npy array (an .npz archive?); give a .npy "
                        "file holding an n×n C")
    if c.shape != (n, n):
        raise MescError(f"--against {path} holds an array of shape {c.shape}, not the "
                        f"{n}×{n} C of the {n} images used; check --dataset and --samples")
    if c.dtype.kind not in "fiu" or not np.isfinite(c).all():  # else: a traceback, or nan
        what = "entries that are not finite" if c.dtype.kind in "fiu" else f"{c.dtype} entries"
        raise MescError(f"--against {path} holds {what}; give a .npy file holding an n×n C of "
                        "real numbers")
    return c


def main(argv=None, cleanup=None):
    """``cleanup``: filled with the folders made for --json, for main_guard to remove on an
    error (see :func:`run`)."""
    args = parse_args(argv)
    import gc

    import numpy as np

    from mesc_tf import data, pipeline, released_graph
    from mesc_tf.config import get_config, method_settings
    from mesc_tf.errors import MescError
    from mesc_tf.config import TRAIN_FIELDS

    cfg = get_config(args.dataset)
    settings = cli.settings_from_args(method_settings(args.dataset, args.method), args)
    released_graph.check(settings)
    if settings.epochs < 1:
        raise MescError(f"--epochs {settings.epochs}: with no step there is nothing to compare; "
                        "give 1 or more")
    ds = data.load_dataset(args.dataset, args.data_dir)
    x = ds.x
    if args.samples is not None:
        if args.samples > len(x):
            raise MescError(f"--samples {args.samples} is more than the {len(x)} images of "
                            f"{args.dataset}; give at most {len(x)}")
        x = x[:: len(x) // args.samples][: args.samples]
    against = load_against(args.against, len(x)) if args.against else None
    if args.json:
        made = cli.prepare_out_file(args.json, force=args.force, what="--json file")
        if cleanup is not None:
            cleanup.extend(made)

    from mesc_tf.training import configure_runtime  # TensorFlow: only once the input is checked
    from mesc_tf.weights import load_tf1_checkpoint, read_tf1_checkpoint

    configure_runtime(0)
    autoencoder = load_tf1_checkpoint(args.tf1_checkpoint, cfg.arch)  # checks the architecture
    weights = read_tf1_checkpoint(args.tf1_checkpoint, cfg.arch.image_shape)[1]
    checkpoint = cli.display_path(args.tf1_checkpoint, REPO)
    print(f"{args.dataset}: {len(x)} images, {common.METHODS[args.method]} "
          f"({settings.framework}, {settings.regularizer}), {settings.epochs} steps from "
          f"{checkpoint}")
    training = {k: settings.to_dict()[k] for k in TRAIN_FIELDS}  # all that C depends on
    print("settings:", training)
    start = time.perf_counter()
    model, port_history, _ = pipeline.fine_tune(x, settings, autoencoder, verbose=0)
    port_c, port_s = model.coef.numpy(), time.perf_counter() - start
    del model, autoencoder
    gc.collect()
    start = time.perf_counter()
    graph_c, graph_history, _ = released_graph.finetune(x, weights, settings)
    graph_s = time.perf_counter() - start

    c0 = np.float32(settings.coef_init)
    figures = {
        "c": relative(port_c, graph_c),
        "c_change": relative(port_c - c0, graph_c - c0),
        "steps": {k: largest_step_difference(port_history[k], graph_history[k])
                  for k in released_graph.TERMS},
        "seconds": {"port": port_s, "released_graph": graph_s},
    }
    print(f"C, port vs released graph: relative difference {figures['c']:.2e} "
          f"(its change from the start: {figures['c_change']:.2e})")
    print("per-step loss terms, largest relative difference: "
          + ", ".join(f"{k} {v:.2e}" for k, v in figures["steps"].items()))
    if args.noise_floor:
        c2, history2 = reordered_run(x, weights, settings)
        figures["noise_floor"] = {
            "c": relative(c2, graph_c), "c_change": relative(c2 - c0, graph_c - c0),
            "steps": {k: largest_step_difference(history2[k], graph_history[k])
                      for k in released_graph.TERMS}}
        print(f"C, released graph vs itself on the images in another order (rounding alone): "
              f"{figures['noise_floor']['c']:.2e} (its change from the start: "
              f"{figures['noise_floor']['c_change']:.2e})")
    if against is not None:
        figures["against"] = {"file": str(args.against), "port": relative(port_c, against),
                              "released_graph": relative(graph_c, against)}
        print(f"C against {args.against}: port {figures['against']['port']:.2e}, released "
              f"graph {figures['against']['released_graph']:.2e}")
    print(f"seconds: port {port_s:.1f}, released graph {graph_s:.1f}")
    if args.json:
        files.write_json(args.json, {
            "dataset": args.dataset, "n_samples": len(x), "data_files": ds.file_hashes,
            "method": args.method,
            "settings": training, "tf1_checkpoint": checkpoint,
            **figures, "command": provenance.command("experiments/faithfulness.py", argv),
            "versions": provenance.versions()})
        print(f"figures: {args.json}")
    return figures


def run(argv=None):
    """The command: main with one-line errors, leaving no folder behind after one."""
    cleanup = []
    return cli.main_guard(lambda: main(argv, cleanup), cleanup,
                          interrupted=lambda: "interrupted; nothing was written")


if __name__ == "__main__":
    run()
