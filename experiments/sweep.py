"""Sweep a grid of settings on one dataset, in parallel, resumable, one JSON line per trial.

    python experiments/sweep.py --dataset orl --seeds 0,1,2 --jobs 2 \\
        --grid 'reg1=0.5,1,2 reg2=0.1,0.2 epochs=50,100,200 thr=0.1,0.2'
    python experiments/sweep.py --dataset orl --grid reg1=1,2 --summary-only

The grid is the Cartesian product of FIELD=V1,V2,... over any Settings field (reg1, reg2, lr,
epochs, thr, subspace_dim, power, coef_init, recon_scale, variant, framework, regularizer),
applied to the dataset's --method settings from mesc_tf/config.py; every combination is run
with every seed. Results go to --out (default experiments/results/sweeps/<dataset>.jsonl), one
line per finished trial (settings, seed, metrics, timings), flushed and fsynced; rerunning the
same command skips the trials already in the file, so a killed sweep resumes where it was
(a file holding trials of the dataset made from other data files is refused).
Records in the file's archive parts (<out stem>.partN.jsonl, see mesc_tf.sweep.read_records)
count too.

Efficiencies (mesc_tf/sweep.py): fine-tuning from a pretrained auto-encoder is deterministic
(C starts at a constant), so each setting of the training fields is trained ONCE and the
post-clustering settings (thr, subspace_dim, power, variant) and the seeds are all clustered from
that C; and the step counts are swept in one run: epochs=50,100,200 is one 200-step run with a
Keras callback copying C after steps 50 and 100. Training groups run in --jobs joblib (loky)
worker processes, each importing TF once and limited to --threads-per-job threads. With
--coef-cache DIR the trained C's are kept on disk, so that a later sweep of the post-clustering
settings or seeds on the same training (same data files and auto-encoder by content, training
fields, step count, TensorFlow version, threads per job and machine) reads C instead of
fine-tuning again.

At the end the best settings by median ACC over the seeds are printed, with mean ± std.
"""

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # also for the worker processes

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout too

from experiments import common  # noqa: E402
from mesc_tf import cli, sources  # noqa: E402
from mesc_tf.config import METHODS  # noqa: E402

DEFAULT_OUT = common.RESULTS_DIR / "sweeps"  # in the checkout, wherever the command runs


def parse_args(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_dataset_arg(p)
    p.add_argument("--grid", nargs="+", action="extend", default=[], metavar="FIELD=V1,V2",
                   help="grid, e.g. 'reg1=0.5,1,2 reg2=0.1,0.2 epochs=100,200 thr=0.1,0.2' "
                   "(one quoted string, several arguments or several --grid); empty: the "
                   "method's settings")
    p.add_argument("--method", choices=METHODS,
                   help="settings the grid starts from (config.method_settings; default our); "
                   "with --summary-only and no --grid, the trials swept from it")
    common.add_seeds_arg(p, (0,), "seeds of the clustering (and, with --no-pretrain, of the "
                         "he_normal start)")
    p.add_argument("--jobs", type=cli.at_least(1), default=min(2, os.cpu_count() or 1),
                   help="parallel worker processes (default: 2, or 1 on a 1-core machine)")
    p.add_argument("--threads-per-job", type=cli.at_least(1),
                   help="TF/BLAS threads per worker (default 1 when --jobs > 1, else TF's own)")
    p.add_argument("--out", help="results file, JSON lines "
                   "(default experiments/results/sweeps/<dataset>.jsonl)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--weights", help="auto-encoder .h5 (default: pretrained/<dataset>.h5, or "
                     "$MESC_PRETRAINED_DIR/<dataset>.h5 if that is set)")
    src.add_argument("--tf1-checkpoint", metavar="PREFIX", help="original TF1 checkpoint "
                     "prefix, or 'original' for the authors' checkpoint of the dataset")
    src.add_argument("--no-pretrain", action="store_true",
                     help="he_normal auto-encoder (then each seed is trained separately)")
    p.add_argument("--coef-cache", metavar="DIR",
                   help="keep each trained C in DIR (n×n float32 .npy, 23 MB for EYaleB, 400 MB "
                   "for MNIST) and reuse it: a later sweep of thr, subspace_dim, power, variant "
                   "or seeds on the same training skips the fine-tuning")
    p.add_argument("--top", type=cli.at_least(1), default=10,
                   help="rows of the final summary (default 10)")
    p.add_argument("--retry-errors", action="store_true",
                   help="rerun trials whose line records a clustering error")
    p.add_argument("--dry-run", action="store_true",
                   help="print how many trainings and trials would run, run nothing")
    p.add_argument("--summary-only", action="store_true",
                   help="run nothing; summarise the file (the grid's trials if --grid is given; "
                   "every seed in the file unless --seeds is given)")
    args = p.parse_args(argv)
    if args.dry_run and args.summary_only:
        p.error("--dry-run and --summary-only both run nothing; give one of them")
    from mesc_tf import sweep
    from mesc_tf.errors import MescError

    try:  # a bad grid is a usage error: one line, exit status 2
        args.grid = sweep.parse_grid(args.grid)
    except MescError as e:
        p.error(str(e))
    args.seeds_given, args.method_given = args.seeds is not None, args.method is not None
    args.seeds = common.seeds_of(args.seeds, (0,))
    args.method = args.method or "our"
    if args.coef_cache:  # checked now, made by the first C stored in it
        try:
            common.check_writable_dir(args.coef_cache, "--coef-cache DIR")
        except MescError as e:
            p.error(f"--coef-cache: {e}")
    if args.threads_per_job is None and args.jobs > 1:
        args.threads_per_job = 1
    args.out = Path(args.out) if args.out else DEFAULT_OUT / f"{args.dataset}.jsonl"
    return args


def _check_writable(out):
    """Fail before any training if the results file cannot be appended to; leaves nothing
    behind (the first record makes the file and its folder: sweep.append_jsonl)."""
    from mesc_tf.errors import MescError

    common.check_writable_dir(out.parent, "--out FILE")
    if out.exists():
        try:
            with open(out, "a"):
                pass
        except OSError as e:
            raise MescError(f"cannot write the sweep results {out} ({e.strerror}); pass a "
                            "writable --out FILE") from None


def _check_data_files(args, records):
    """Trials of the results file were made from these data files (by SHA-256), else the sweep
    would mix them with trials of other images under the same keys. Records from before the
    files were recorded have none. Returns the data files' hashes (the C cache's keys hold
    them)."""
    from mesc_tf.data import ENV_VAR, data_change, load_dataset
    from mesc_tf.errors import MescError

    now = load_dataset(args.dataset, args.data_dir).file_hashes
    other = [r for r in records if r["dataset"] == args.dataset
             and r.get("data_files") not in (None, now)]
    if other:
        raise MescError(f"{args.out}: {len(other)} of its {args.dataset} trials were made from "
                        f"other data files ({data_change(other[0]['data_files'], now)}); give "
                        f"this sweep another --out FILE, or point --data-dir or {ENV_VAR} at "
                        "the data they came from")
    return now


def main(argv=None):
    args = parse_args(argv)
    from mesc_tf import sweep
    from mesc_tf.config import get_config, method_settings
    from mesc_tf.data import find_data_dir

    # A mistyped name: nothing to summarize (records only in archive parts do count).
    if args.summary_only and not args.out.is_file() and not sweep.archive_paths(args.out):
        from mesc_tf.errors import MescError

        raise MescError(f"no sweep results at {args.out} to summarize; give the --out FILE of "
                        "an earlier sweep")
    records, torn = sweep.read_records(args.out)
    for note in sweep.torn_notes(torn):
        print(note)
    settings = sweep.expand_grid(method_settings(args.dataset, args.method), args.grid)
    ae = sources.resolve_autoencoder(args.dataset, args.weights, args.tf1_checkpoint,
                                     args.no_pretrain, arch=get_config(args.dataset).arch)
    if args.summary_only:
        return _summarize_file(args, records, ae, settings)
    data_files = _check_data_files(args, records)
    done = sweep.done_keys(records, retry_errors=args.retry_errors)
    groups, skipped = sweep.plan(settings, args.seeds, ae, args.dataset, done)
    n_trials = sum(len(g.trials) for g in groups)
    cached = [sweep.group_in_cache(g, args.coef_cache, args.dataset, ae, args.threads_per_job,
                                   data_files) for g in groups]  # their C's are read, not trained
    steps = sum(g.train.epochs for g, c in zip(groups, cached) if not c)
    read_from = " + ".join(str(f) for f in (*sweep.archive_paths(args.out), args.out) if f.exists())
    print(f"{args.dataset} ({args.method}), auto-encoder: {ae.describe()}")
    print(f"{len(settings)} settings x {len(args.seeds)} seeds = "
          f"{len(settings) * len(args.seeds)} trials: {skipped} already in "
          f"{read_from or args.out}, {n_trials} to run in {len(groups) - sum(cached)} "
          f"trainings ({steps} steps in all)"
          + (f" and {sum(cached)} with every C in the --coef-cache {args.coef_cache} (read, "
             "not trained)" if any(cached) else "") + f", --jobs {args.jobs}")
    if args.dry_run:
        return 0
    if groups:
        # Groups whose C's are all in the cache only cluster: less than a training needs.
        sweep.memory_check(args.dataset, min(args.jobs, len(groups)),
                           max(len(g.steps) for g in groups), trains=not all(cached))
        _check_writable(args.out)
        start = time.perf_counter()
        for i, res in enumerate(sweep.run_groups(
                groups, jobs=args.jobs, threads=args.threads_per_job, dataset=args.dataset,
                data_dir=find_data_dir(args.data_dir), ae=ae, method=args.method,
                out=args.out, coef_cache=args.coef_cache), 1):
            recs = res["records"]
            accs = [r["metrics"]["acc"] for r in recs if r["metrics"]]
            best = f"best ACC {100 * max(accs):.2f}" if accs else "no ACC"
            failed = sum(1 for r in recs if r["error"])
            trained = ("C from the cache" if res["coef_cache"] == "read"
                       else f"{res['steps_run']} steps in {res['train_s']:.1f} s")
            print(f"[{i}/{len(groups)}] {trained}, "
                  f"{len(recs)} trials ({failed} failed), {best}; "
                  f"{time.perf_counter() - start:.0f} s elapsed", flush=True)
            if res.get("coef_cache") == "not written":  # the trials are kept all the same
                print(f"warning: its C's are not in the --coef-cache: "
                      f"{res.get('coef_cache_error')}", file=sys.stderr, flush=True)
    records, _ = sweep.read_records(args.out)
    rows = sweep.summarize(records, _trial_keys(args.dataset, ae, settings, args.seeds))
    print(f"\nbest settings by median ACC over seeds {args.seeds} (ACC/NMI in %; {args.out}):")
    print(sweep.format_summary(rows, args.top, grid=args.grid, seeds=args.seeds))
    return 0


def _summarize_file(args, records, ae, settings):
    """--summary-only: rank the file's trials of --dataset and this auto-encoder (the same file
    counts whether it was named by --weights or taken as the default), of the grid's
    ``settings`` if --grid is given, over every recorded seed unless --seeds."""
    from mesc_tf import sweep

    same = sources.autoencoder_hash(ae.ident)
    mine = [r for r in records if r["dataset"] == args.dataset
            and sources.autoencoder_hash(r["autoencoder_id"]) == same]
    # Every seed recorded unless --seeds (the default seed 0 would hide the others).
    seeds = args.seeds if args.seeds_given else sorted({r["seed"] for r in mine})
    chosen = [r for r in mine if r["seed"] in set(seeds)
              and (args.grid or not args.method_given or r.get("method") == args.method)]
    keys = _trial_keys(args.dataset, ae, settings, seeds) if args.grid else None
    rows = sweep.summarize(chosen, keys)
    absent = set(seeds) - {s for r in rows for s in r["seeds"]}  # asked for, not in any row
    print(f"{len(mine)} of the file's records come from {ae.describe()}; the summary "
          f"covers seeds {sweep.seeds_text(seeds)}"
          + ("" if args.seeds_given else " (every seed recorded)")
          + (f"; seeds without a finished trial: {sweep.seeds_text(absent)}"
             if absent and rows else ""))
    print(sweep.format_summary(rows, args.top, grid=args.grid, seeds=seeds))
    return 0


def _trial_keys(dataset, ae, settings, seeds) -> set[str]:
    from mesc_tf import sweep

    return {sweep.trial_key(dataset, ae.ident, s, seed) for s in settings for seed in seeds}


if __name__ == "__main__":
    cli.main_guard(main, interrupted=lambda: "interrupted; finished trials are kept in the "
                   "results file: rerun the same command to run the others")
