"""Speed and memory benchmark of fine-tuning and post-clustering (issue 6).

    python benchmarks/bench.py --e2e --json runs/bench/results.json --force  # `make bench`
    python benchmarks/bench.py --datasets orl,coil20 --repeats 5 --post fast --no-original

Each dataset runs in its own subprocess, so that its peak RSS (``ru_maxrss``) is its own.
Per dataset it measures, in that one process:

* ``step_ms``: milliseconds per fine-tuning step through the real path (``pipeline.fine_tune``
  → ``keras.Model.fit``, one epoch = one full-batch Adam step), the median of ``--repeats``
  steps after ``--warmup``, with ``jit_compile`` off and on (``--jit``); the ratios below take
  the default, off (``ratio_mode``);
* ``original_step_ms``: the same for the released MESC graph (TF1 ops in a ``tf.compat.v1``
  session, ``mesc_tf.released_graph``), fetching the loss and C with every update as the
  released script does (reference-facts §2.6), same settings (its weights: the auto-encoder's
  after our timed steps);
* ``floor_ms``: the three n×n by n×p products a step cannot avoid (C·Z forward, dC = G·Zᵀ and
  dZ = Cᵀ·G) in one ``tf.function``;
* ``autoencoder_ms``: the auto-encoder's forward and backward pass alone (see
  :func:`autoencoder_ms`), the other large part of a step;
* ``post``: post-clustering seconds split into thrC / SVD (+ affinity) / spectral for each
  ``--post`` method ("fast", the default route; "strict"; "reference", the released scripts'
  numerics), whether their labels are identical and whether the fast route flagged the
  problem as ill-posed (see mesc_tf/postcluster/__init__.py);
* ``peak_rss_gib_fine_tune``, ``peak_rss_gib``: the process's peak RSS (GiB) after our
  fine-tuning, and after the floor, the auto-encoder timing and the fast post-clustering,
  before the reference route (with the default ``--post`` order) and the original graph run
  (they need more: ``peak_rss_gib_all``).

The post-clustering C is the one fine-tuned in the timing runs (warm-up + timed steps, last
``--jit`` mode) from the dataset's auto-encoder (``pretrained/<dataset>.h5``, else the original
TF1 checkpoint if found, else he_normal), or ``--coef DIR``'s ``<dataset>.npy`` where it exists.
Real data is used when the dataset files are found (their SHA-256 in ``data_files``), otherwise
random images of the right shape.
``--e2e`` first runs ``experiments/run.py --dataset mnist`` end to end (127 steps, all 10000
images) in a subprocess and reports its peak RSS; MNIST's post-clustering then uses that run's
trained C.
The report records whether TensorFlow's BFC pool was on (``tf_cpu_allocator``; set
``TF_CPU_ALLOCATOR_USE_BFC=true`` before the command, README "Performance").
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DATASETS = ("orl", "coil20", "eyaleb", "mnist")
# The released MESC graph on this 2-core CPU, as issue 6 states it.
ISSUE = {
    "orl": {"step_ms": 28.0},
    "coil20": {"step_ms": 400.0, "post_s": 8.0},
    "eyaleb": {"step_ms": 710.0, "post_s": 28.0},
    "mnist": {"step_ms": 3600.0, "post_s": 104.0, "peak_rss_gb": 11.0},
}
# (warm-up, timed) steps per dataset: MNIST steps take seconds.
DEFAULT_STEPS = {"orl": (5, 20), "coil20": (3, 10), "eyaleb": (3, 8), "mnist": (2, 5)}
# Folders made for --json, removed if the run then fails (cli.main_guard).
CLEANUP = []


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _timed_ms(fn, warmup, repeats):
    """Median milliseconds of ``fn().numpy()`` over ``repeats`` calls after ``warmup``."""
    times = []
    for i in range(warmup + repeats):
        t = time.perf_counter()
        fn().numpy()
        if i >= warmup:
            times.append(time.perf_counter() - t)
    return _median_ms(times)


def _median_ms(times_s):
    return round(1000 * statistics.median(times_s), 2)


def _tf1_checkpoint(name):
    """The authors' checkpoint of ``name`` (reference-facts §1.3) if it is on disk."""
    from mesc_tf.weights import ORIGINAL_CHECKPOINTS, default_tf1_dir

    prefix = (default_tf1_dir() / ORIGINAL_CHECKPOINTS[name] if name in ORIGINAL_CHECKPOINTS
              else None)
    return prefix if prefix is not None and Path(f"{prefix}.index").is_file() else None


def autoencoder_source(name):
    """Keyword arguments for sources.get_autoencoder: shipped .h5, TF1 checkpoint, he_normal."""
    from mesc_tf import sources

    if sources.pretrained_path(name).is_file():
        return {"dataset": name}
    prefix = _tf1_checkpoint(name)
    return {"tf1_checkpoint": str(prefix)} if prefix else {"no_pretrain": True}


def load_or_random(name, seed=0):
    """(x, y, "real", the data files' SHA-256) if the dataset's files are found, else random
    images of the right shape, (x, y, "random", None); a file that is there but bad is an
    error."""
    import numpy as np

    from mesc_tf import data
    from mesc_tf.config import get_config

    cfg = get_config(name)
    try:
        ds = data.load_dataset(name)
        return ds.x, ds.y, "real", ds.file_hashes
    except data.MissingDataError:
        rng = np.random.default_rng(seed)
        x = rng.uniform(0, 255, (cfg.n_samples, *cfg.arch.image_shape, 1)).astype(np.float32)
        y = np.arange(cfg.n_samples) % cfg.n_clusters + 1
        return x, y, "random", None


def ours_steps(x, cfg, jit, steps, seed):
    """Fine-tune ``steps`` steps through pipeline.fine_tune; (model, per-step wall times)."""
    import keras

    from mesc_tf import pipeline, sources
    from mesc_tf.training import configure_runtime

    class StepTimer(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.t = [time.perf_counter()]

        def on_epoch_end(self, epoch, logs=None):
            self.t.append(time.perf_counter())

    # Keras refuses XLA under op determinism; CPU kernels are deterministic either way.
    configure_runtime(seed, deterministic=not jit)
    ae, _ = sources.get_autoencoder(cfg.arch, **autoencoder_source(cfg.name))
    timer = StepTimer()
    model, _, _ = pipeline.fine_tune(x, cfg.mesc.replace(epochs=steps), ae, verbose=0,
                                     jit_compile=jit, callbacks=[timer])
    return model, [b - a for a, b in zip(timer.t, timer.t[1:])]


def autoencoder_ms(ae, x, warmup, repeats):
    """The auto-encoder's share of a step: its forward pass and the gradient of its weights
    from the reconstruction and from a linear function of Z (standing in for the
    self-expression's gradient), in one tf.function."""
    import tensorflow as tf

    x = tf.convert_to_tensor(x, tf.float32)
    g = tf.random.uniform((x.shape[0], *ae.latent_shape))

    @tf.function
    def forward_backward():
        with tf.GradientTape() as tape:
            z = ae.encode(x)
            loss = tf.reduce_sum(tf.square(ae.decode(z) - x)) + tf.reduce_sum(z * g)
        grads = tape.gradient(loss, ae.trainable_variables)
        return tf.add_n([tf.reduce_sum(gr) for gr in grads])

    return _timed_ms(forward_backward, warmup, repeats)


def floor_ms(n, p, warmup, repeats):
    """The three n×n by n×p products of a step (C·Z, G·Zᵀ, Cᵀ·G), in one tf.function."""
    import tensorflow as tf

    C = tf.Variable(tf.random.uniform((n, n)))
    Z = tf.random.uniform((n, p))
    G = tf.random.uniform((n, p))

    @tf.function
    def products():
        cz = tf.matmul(C, Z)
        dc = tf.matmul(G, Z, transpose_b=True)
        dz = tf.matmul(C, G, transpose_a=True)
        # One element of each back to the host: every product is computed, nothing large copied.
        return cz[0, 0] + dc[0, 0] + dz[0, 0]

    return _timed_ms(products, warmup, repeats)


def post(C, y, cfg, method, seed):
    """One post-clustering run: (labels, figures)."""
    from mesc_tf import postcluster
    from mesc_tf.metrics import accuracy

    s, info = cfg.mesc, {}
    t = time.perf_counter()
    labels, split = postcluster.cluster(C, cfg.n_clusters, thr=s.thr, subspace_dim=s.subspace_dim,
                                        power=s.power, variant=s.variant, seed=seed,
                                        return_timings=True, method=method, info=info)
    out = {"total_s": round(time.perf_counter() - t, 3),
           **{k: round(v, 3) for k, v in split.items()},
           "acc": round(float(accuracy(y, labels)), 4)}
    if method != "reference":
        out["ill_posed"] = bool(info.get("ill_posed"))
        out["routes"] = {k: info[k] for k in ("svd", "spectral", "fallback") if k in info}
    return labels, out


def one_dataset(name, args):
    """Everything for one dataset, in this process. Returns a JSON-able dict."""
    import gc

    import numpy as np

    from mesc_tf.config import get_config

    cfg = get_config(name)
    x, y, source, data_files = load_or_random(name, args.seed)
    warmup, repeats = DEFAULT_STEPS[name]
    warmup = args.warmup if args.warmup is not None else warmup
    repeats = args.repeats or repeats
    res = {"dataset": name, "n": len(x), "data": source, "data_files": data_files,
           "warmup": warmup, "repeats": repeats,
           "autoencoder": autoencoder_source(name), "step_ms": {}, "steps_ms_all": {}}
    model = None
    for jit in args.jit:
        del model
        gc.collect()
        model, times = ours_steps(x, cfg, jit == "on", warmup + repeats, args.seed)
        res["step_ms"][jit] = _median_ms(times[warmup:])
        res["steps_ms_all"][jit] = [round(1000 * t, 1) for t in times]
    res["jit_faster"] = min(res["step_ms"], key=res["step_ms"].get)
    # The ratios take the default mode (XLA off) where it ran, whichever was faster.
    res["ratio_mode"] = "off" if "off" in res["step_ms"] else "on"
    res["peak_rss_gib_fine_tune"] = round(_peak_rss_gib(), 3)
    res["p"] = p = int(np.prod(model.autoencoder.latent_shape))
    res["floor_ms"] = floor_ms(len(x), p, 1, max(repeats, 3))
    ae = model.autoencoder
    res["autoencoder_ms"] = autoencoder_ms(ae, x, 1, max(repeats, 3))
    if args.coef_file:
        C, res["coef"] = np.load(args.coef_file), args.coef_file
    else:
        C, res["coef"] = model.coef.numpy(), f"after {warmup + repeats} steps"
    del model
    gc.collect()
    res["post"], labels = {}, {}
    for method in args.post:
        labels[method], res["post"][method] = post(C, y, cfg, method, args.seed)
        if method == "fast":
            res["peak_rss_gib"] = round(_peak_rss_gib(), 3)
    if "fast" in labels:
        for other in set(labels) - {"fast"}:
            res[f"labels_fast_equal_{other}"] = bool(np.array_equal(labels["fast"], labels[other]))
    if "strict" in labels and "reference" in labels:
        res["labels_strict_equal_reference"] = bool(np.array_equal(labels["strict"],
                                                                   labels["reference"]))
    res.setdefault("peak_rss_gib", round(_peak_rss_gib(), 3))
    del C
    gc.collect()
    if args.original:  # last: its peak RSS (MNIST ~11 GB) would hide ours
        from mesc_tf import released_graph
        from mesc_tf.training import configure_runtime

        configure_runtime(args.seed)  # as for our XLA-off steps, whatever --jit ran last

        weights = {layer.name: (layer.kernel.numpy(), layer.bias.numpy())
                   for layer in ae.named_layers}
        times = released_graph.finetune(x, weights, cfg.mesc, warmup + repeats)[2]
        res["original_step_ms"] = _median_ms(times[warmup:])
        res["original_steps_ms_all"] = [round(1000 * t, 1) for t in times]
    res["peak_rss_gib_all"] = round(_peak_rss_gib(), 3)
    return res


def _ignore_interrupts():
    """In a child, before exec: SIGINT and SIGTERM ignored (Python and main_guard keep that)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _run_child(cmd):
    """Run ``cmd`` (a dataset's bench.py, --e2e's run.py) to its end; os.wait4's (exit status,
    rusage). The child ignores Ctrl-C and SIGTERM: bench.py, which gets them too, kills it and
    says in one line what the benchmark kept; the child's own line would be a second one
    (run.py's would say what a training run keeps). It stays in bench.py's process group, so
    that a closed terminal (SIGHUP) still ends it. Both signals are deferred while it starts
    (cli.interrupts_deferred; a signal mask does not hold them off here, where OpenBLAS has
    threads): one that came before Popen returned would leave the child running with no one to
    kill it."""
    from mesc_tf import cli

    proc = None
    try:
        with cli.interrupts_deferred():
            proc = subprocess.Popen(cmd, preexec_fn=_ignore_interrupts)
        _, status, usage = os.wait4(proc.pid, 0)
    except BaseException:  # Ctrl-C or SIGTERM: the child must not go on alone
        if proc is not None:
            proc.kill()
            proc.wait()
        raise
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4, not by Popen
    return proc.returncode, usage


def _failure(exit_status, original=True):
    """What a child's exit status says: one a signal ended printed no error line. The one the
    OOM killer is likeliest to end is MNIST's, with the released graph's ~11 GB (``original``)."""
    if exit_status >= 0:
        return f"exit status {exit_status}"
    try:
        name = signal.Signals(-exit_status).name
    except ValueError:
        name = f"signal {-exit_status}"
    if -exit_status != signal.SIGKILL:
        return f"killed by {name}"
    return f"killed by {name} (out of memory? the kernel's OOM killer sends it" + (
        "; --no-original leaves out the released graph, which needs the most)" if original
        else ")")


def end_to_end(dataset, epochs, coef_path, out_dir):
    """experiments/run.py on the whole dataset in a subprocess; its peak RSS, timings, metrics."""
    src = autoencoder_source(dataset)
    ae_args = (["--tf1-checkpoint", src["tf1_checkpoint"]] if "tf1_checkpoint" in src
               else ["--no-pretrain"] if "no_pretrain" in src else [])
    cmd = [sys.executable, str(ROOT / "experiments" / "run.py"), "--dataset", dataset, *ae_args,
           "--quiet", "--save-coef", str(coef_path), "--out", str(out_dir), "--force"]
    if epochs is not None:
        cmd += ["--epochs", str(epochs)]
    t = time.perf_counter()
    exit_status, usage = _run_child(cmd)
    wall = time.perf_counter() - t
    res = {"dataset": dataset, "command": shlex.join(cmd[1:]),
           "exit_status": exit_status, "wall_s": round(wall, 1),
           "peak_rss_gib": round(usage.ru_maxrss / 2**20, 3)}
    results = Path(out_dir) / "results.json"
    if results.is_file():
        run = json.loads(results.read_text())
        res["timings"] = {k: round(v, 3) if isinstance(v, float) else v
                          for k, v in run.get("timings", {}).items()}
        res["metrics"] = run.get("metrics")
    return res


def table(results):
    """One line per dataset: step times (ours with XLA off and on, released graph, floor,
    auto-encoder), post-clustering, RSS. The ratios take ours with XLA off, the default. A
    dataset that ran on random images (its files not found) is starred, with a note below."""
    head = (f"{'dataset':8}{'n':>6} {'ours ms off/on':>15} {'orig ms':>8} {'ratio':>6} "
            f"{'floor ms':>8} {'/floor':>6} {'AE ms':>7}  {'post fast s thrC/SVD/spec':>27}  "
            f"{'strict s':>8} {'ref s':>7} {'same':>5} {'RSS GiB':>7}")
    lines = [head]

    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    for r in results:
        if "error" in r:
            lines.append(f"{r['dataset']:8}error: {r['error']}")
            continue
        name = r["dataset"] + ("*" if r.get("data") == "random" else "")
        ours = r["step_ms"][r["ratio_mode"]]
        steps = "/".join(f(r["step_ms"].get(m), ".1f") for m in ("off", "on"))
        orig, fl = r.get("original_step_ms"), r.get("floor_ms")
        fast, strict, ref = (r["post"].get(m) for m in ("fast", "strict", "reference"))
        fast_txt = (f"{fast['total_s']:.2f} = {fast['thrc_s']:.2f}/{fast['svd_s']:.2f}/"
                    f"{fast['spectral_s']:.2f}") if fast else "-"
        same = r.get("labels_fast_equal_reference")
        lines.append(
            f"{name:8}{r['n']:>6} {steps:>15} {f(orig, '.1f'):>8} "
            f"{f(ours / orig if orig else None, '.2f'):>6} {f(fl, '.1f'):>8} "
            f"{f(ours / fl if fl else None, '.2f'):>6} {f(r.get('autoencoder_ms'), '.1f'):>7}  "
            f"{fast_txt:>27}  "
            f"{f(strict and strict['total_s'], '.2f'):>8} {f(ref and ref['total_s'], '.2f'):>7} "
            f"{'-' if same is None else 'yes' if same else 'no':>5} {r['peak_rss_gib']:>7.2f}")
    if any(r.get("data") == "random" for r in results):
        lines.append("* random images of the dataset's shape (its files were not found): the "
                     "step times hold, the post-clustering is of a C fitted to noise")
    return "\n".join(lines)


def _csv(choices):
    def parse(text):
        items = [s.strip().lower() for s in text.split(",") if s.strip()]
        bad = [s for s in items if s not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(choices)}")
        return list(dict.fromkeys(items))  # once each: orl,orl would time ORL twice
    return parse


def parse_args(argv=None):
    from mesc_tf import cli

    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])  # one-line errors
    p.add_argument("--datasets", type=_csv(DATASETS), default=list(DATASETS),
                   help=f"comma-separated (default {','.join(DATASETS)})")
    p.add_argument("--repeats", type=cli.at_least(1),
                   help="timed fine-tuning steps (default per dataset)")
    p.add_argument("--warmup", type=cli.at_least(0),
                   help="untimed first steps (default per dataset)")
    p.add_argument("--jit", type=_csv(("off", "on")), default=["off", "on"],
                   help="jit_compile modes to time (default off,on)")
    p.add_argument("--post", type=_csv(("fast", "strict", "reference")),
                   default=["fast", "reference"],
                   help="post-clustering methods to time: fast, strict, reference "
                        "(default fast,reference)")
    p.add_argument("--no-original", dest="original", action="store_false",
                   help="do not time the released graph")
    p.add_argument("--coef", metavar="DIR", help="post-cluster DIR/<dataset>.npy where it exists")
    p.add_argument("--e2e", action="store_true",
                   help="first run MNIST-10k end to end (experiments/run.py) and report its "
                   "peak RSS")
    p.add_argument("--e2e-epochs", type=cli.at_least(1),
                   help="fine-tuning steps of the --e2e run (default 127)")
    p.add_argument("--seed", type=cli.seed_arg, default=0)
    p.add_argument("--json", help="write all figures here")
    p.add_argument("--force", action="store_true",
                   help="overwrite an existing --json file (the committed ones are cited)")
    # Internal: one dataset in this process, post-clustering the C in --coef-file if given.
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--coef-file", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.e2e_epochs is not None and not args.e2e:
        p.error("--e2e-epochs needs --e2e (the end-to-end run it sets)")
    if args.coef is not None and not Path(args.coef).is_dir():
        why = "a file, not a folder" if Path(args.coef).exists() else "no such folder"
        p.error(f"--coef {args.coef}: {why}; give the folder of the saved C's "
                "(<dataset>.npy, from experiments/run.py --save-coef)")
    if args.coef is not None:  # before the runs: a child would fail after its timings
        for name in args.datasets:
            if not (args.e2e and name == "mnist"):  # --e2e's C replaces that one
                _check_coef_file(p, Path(args.coef) / f"{name}.npy", name)
    return args


def _check_coef_file(p, path, name):
    """``path`` (where it exists) must hold the n×n C of ``name``; read its header only."""
    import numpy as np

    from mesc_tf.config import get_config

    if not path.exists():
        return
    n = get_config(name).n_samples
    try:
        shape = getattr(np.load(path, mmap_mode="r", allow_pickle=False), "shape", None)
    except (OSError, ValueError, EOFError):  # not a .npy file (an .npz has no shape)
        shape = None
    if shape != (n, n):
        what = "not a .npy array" if shape is None else f"shape {shape}, not ({n}, {n})"
        p.error(f"--coef: {path} is not {name}'s C ({what}); save it with experiments/run.py "
                f"--dataset {name} --save-coef {path} --force, or remove it")


def _child_argv(args):
    argv = ["--jit", ",".join(args.jit), "--post", ",".join(args.post), "--seed", str(args.seed)]
    for flag in ("repeats", "warmup"):
        if getattr(args, flag) is not None:
            argv += [f"--{flag}", str(getattr(args, flag))]
    if not args.original:
        argv.append("--no-original")
    return argv


def main(argv=None):
    args = parse_args(argv)
    if args.one:
        Path(args.json).write_text(json.dumps(one_dataset(args.one, args)))
        return 0
    from mesc_tf import cli, memory, provenance
    from mesc_tf.files import atomic_write_text

    if args.json:  # before the long runs, not after
        CLEANUP.extend(cli.prepare_out_file(args.json, force=args.force, what="--json file"))
    load_before = os.getloadavg()
    report = {"command": provenance.command("benchmarks/bench.py", argv),
              "machine": provenance.machine(),
              "tf_cpu_allocator": "bfc" if memory.bfc_allocator() else "default",
              "issue_original": ISSUE, "results": []}
    with tempfile.TemporaryDirectory() as tmp:
        coefs = ({name: Path(args.coef) / f"{name}.npy" for name in args.datasets} if args.coef
                 else {})
        if args.e2e:
            coefs["mnist"] = Path(tmp) / "mnist.npy"
            e2e = end_to_end("mnist", args.e2e_epochs, coefs["mnist"], Path(tmp) / "e2e")
            report["end_to_end"] = e2e
            print(json.dumps(e2e), flush=True)
        for name in args.datasets:
            out = Path(tmp) / f"{name}.json"
            cmd = [sys.executable, str(Path(__file__).resolve()), *_child_argv(args),
                   "--one", name, "--json", str(out)]
            if name in coefs and coefs[name].is_file():
                cmd += ["--coef-file", str(coefs[name])]
            t = time.perf_counter()
            exit_status, _ = _run_child(cmd)
            if exit_status != 0 or not out.exists():
                error = _failure(exit_status, args.original)
                report["results"].append({"dataset": name, "error": error})
                continue
            res = json.loads(out.read_text())
            res["wall_s"] = round(time.perf_counter() - t, 1)
            report["results"].append(res)
            print(json.dumps(res), flush=True)
    report["load_average"] = {"before": load_before, "after": os.getloadavg()}
    report["versions"] = provenance.versions()
    print()
    print(table(report["results"]))
    if "end_to_end" in report:
        e = report["end_to_end"]
        print(f"end to end ({e['dataset']}, {e['command']}): exit {e['exit_status']}, "
              f"{e['wall_s']} s, peak RSS {e['peak_rss_gib']:.2f} GiB")
    print(f"load average before {load_before[0]:.1f}, "
          f"after {report['load_average']['after'][0]:.1f} on {os.cpu_count()} CPUs")
    if args.json:
        atomic_write_text(args.json, json.dumps(report, indent=1) + "\n")
    failed = [r["dataset"] for r in report["results"] if "error" in r]
    if report.get("end_to_end", {}).get("exit_status", 0) != 0:
        failed.append("end to end")
    if failed:
        CLEANUP.clear()  # the report holds the other figures and the failures
        from mesc_tf.errors import MescError

        raise MescError(f"{len(failed)} benchmark(s) failed ({', '.join(failed)}); their errors "
                        "are printed above" + (f", the other figures are in {args.json}"
                                               if args.json else ""))
    return 0


if __name__ == "__main__":
    from mesc_tf import cli

    cli.main_guard(main, CLEANUP, interrupted=lambda: "interrupted; only the figures printed "
                   "above were kept (--json is written at the end)")
