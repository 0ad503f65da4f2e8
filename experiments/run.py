"""Fine-tune MESC-Net (or a DSC-Net baseline) on one benchmark and cluster it.

    python experiments/run.py --dataset orl
    python experiments/run.py --dataset coil20 --method dsc_l2 --seed 3

Loads the dataset and the auto-encoder (pretrained/<dataset>.h5 unless --weights,
--tf1-checkpoint or --no-pretrain), fine-tunes with the dataset's settings from
mesc_tf/config.py (those of the main table's row --method, MESC-Net by default; any of them
overridable), runs the shared post-clustering, prints ACC/NMI/PUR/ARI/F1 and writes
results.json into the run directory.
"""

import shlex
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout too

from mesc_tf import cli, files, memory, provenance, sources  # noqa: E402
from mesc_tf.config import METHODS, POST_FIELDS, POST_METHODS  # noqa: E402
from mesc_tf.errors import MescError  # noqa: E402
from mesc_tf.files import read_backup_state  # noqa: E402


def parse_args(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_dataset_arg(p)
    p.add_argument("--method", choices=METHODS, default="our",
                   help="the settings of a row of the main table: our (MESC-Net, default), "
                   "our_wo_net (its loss on the coupled graph), dsc_l1, dsc_l2 (DSC-Net)")
    cli.add_settings_args(p)
    p.add_argument("--seed", type=cli.seed_arg, default=0,
                   help="seed of every random source (default 0)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--weights", help="auto-encoder .h5 (default: pretrained/<dataset>.h5, or "
                     "$MESC_PRETRAINED_DIR/<dataset>.h5 if that is set)")
    src.add_argument("--tf1-checkpoint", metavar="PREFIX", help="original TF1 checkpoint "
                     "prefix, or 'original' for the authors' checkpoint of the dataset")
    src.add_argument("--no-pretrain", action="store_true", help="start from he_normal weights")
    p.add_argument("--post-method", choices=POST_METHODS, default=POST_METHODS[0],
                   help="post-clustering route: fast (default), strict (the released code's "
                   "labels where fast's may differ), reference (the released numerics)")
    p.add_argument("--save-coef", metavar="PATH", help="save C after the last step (.npy, float32)")
    p.add_argument("--out", help="run directory (default: runs/<dataset>-...-<time>)")
    p.add_argument("--force", action="store_true", help="overwrite a finished run in --out")
    p.add_argument("--checkpoint-every", type=cli.at_least(1), metavar="N",
                   help="save the full training state every N steps into <out>/checkpoint "
                   "(kept after the run, so that --resume --epochs M can extend it; C and "
                   "Adam's slots: 12 n² bytes)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out (a "
                   "finished one: cluster its C again and rewrite its results)")
    p.add_argument("--tensorboard", action="store_true", help="write TensorBoard logs to <out>/tb")
    p.add_argument("--jit", action="store_true", help="compile the step with XLA (without "
                   "TF's op determinism: on a GPU, reruns may differ in the last bits)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    if args.resume and not args.out:
        p.error("--resume needs --out DIR, the directory of the run to resume")
    if args.tf1_checkpoint:  # 'original' → the path, for the records as well
        from mesc_tf.weights import tf1_prefix

        args.tf1_checkpoint = tf1_prefix(args.dataset, args.tf1_checkpoint)
    return args


def main(argv=None, cleanup=None):
    args = parse_args(argv)
    from mesc_tf import data, pipeline
    from mesc_tf.config import get_config, method_settings
    from mesc_tf.metrics import f1_unmapped

    cfg = get_config(args.dataset)
    settings = cli.settings_from_args(method_settings(args.dataset, args.method), args)
    t0 = time.perf_counter()
    ds = data.load_dataset(args.dataset, args.data_dir)
    load_s = time.perf_counter() - t0
    memory.check_memory(len(ds.x), cfg.arch, settings.subspace_dim * ds.n_clusters + 1,
                        args.post_method)
    out, made = cli.prepare_out_dir(
        args.out, f"{args.dataset}-{settings.framework}-{settings.regularizer}-seed{args.seed}",
        force=args.force, resume=args.resume)
    if cleanup is not None:
        cleanup.extend(made)
    tb = out / "tb" if args.tensorboard else None
    if tb is not None and tb.exists():
        cli.writable_dir(tb, "--out DIR (its tb/ is not a writable folder)")
    backup = out / "checkpoint" if (args.checkpoint_every or args.resume) else None
    # For the Ctrl-C line: a run folder made under runs/ must be named to resume it.
    _checkpointing[:] = [backup, "--resume" if args.out else
                         f"--resume --out {shlex.quote(str(out))}"]
    saved = _check_checkpoint(args, out, settings, ds.file_hashes)
    before = read_backup_state(backup) if args.resume else None  # the steps kept, their seconds
    if args.resume and args.checkpoint_every is None:  # keep saving as the first run did
        args.checkpoint_every = saved.get("checkpoint_every")
    if args.save_coef:
        made = cli.prepare_out_file(args.save_coef, force=args.force or args.resume,
                                    what="--save-coef file")
        if cleanup is not None:
            cleanup.extend(made)

    weights = _weights_file(args)
    # h5py only, before TF's start-up lines; a missing default file is resolve_autoencoder's to
    # explain (it says how to make one).
    if weights and (args.weights or weights.exists()):
        from mesc_tf.weights import check_autoencoder_file

        check_autoencoder_file(weights, cfg.arch)
    # Paths and hashes, also before TF: a missing pretrained/<dataset>.h5 or TF1 checkpoint.
    spec = sources.resolve_autoencoder(args.dataset, args.weights, args.tf1_checkpoint,
                                       args.no_pretrain)
    if args.resume and saved.get("autoencoder_sha256") not in (None, spec.sha256):
        # The checkpoint holds the auto-encoder the run started from; results.json would
        # record the new file's hash for a training that did not start from it.
        raise MescError(f"{spec.describe()}: the file changed since the checkpoint in "
                        f"{out / 'checkpoint'} was made from it; put that file back to resume, "
                        "or drop --resume and pass --force to start over from this one")
    from mesc_tf.training import configure_runtime  # TensorFlow: only once the input is checked

    configure_runtime(args.seed, deterministic=not args.jit)  # Keras: no XLA under determinism
    ae, ae_source = spec.load(cfg.arch), spec.describe()

    # Every input is checked: only now replace an unfinished run's checkpoint (--force) and
    # write into the run directory.
    if args.force and not args.resume:
        shutil.rmtree(out / "checkpoint", ignore_errors=True)
    if tb is not None:
        cli.writable_dir(tb, "--out DIR (its tb/ is not a writable folder)")
    if backup is not None and not args.resume:
        backup.mkdir(parents=True, exist_ok=True)
        files.write_json(backup / "run.json", {**_run_identity(args, settings),
                                             "checkpoint_every": args.checkpoint_every,
                                             "autoencoder_sha256": spec.sha256,
                                             "data_files": ds.file_hashes})
    print(f"{args.dataset}: {len(ds.x)} images {ds.x.shape[1:3]}, {ds.n_clusters} clusters; "
          f"auto-encoder: {ae_source}")
    print("settings:", settings.to_dict())
    result = pipeline.run(
        ds.x, ds.y, ds.n_clusters, settings, ae, seed=args.seed, verbose=0 if args.quiet else 1,
        log_dir=out / "tb" if args.tensorboard else None, backup_dir=backup,
        checkpoint_every=args.checkpoint_every, jit_compile=args.jit,
        post_method=args.post_method)
    if args.save_coef:
        files.save_npy(args.save_coef, result["coef"])
    m = result["metrics"]
    timings = {"load_s": load_s, **result["timings"]}
    final = {k: float(v[-1]) for k, v in result["history"].items() if len(v)}
    if before is not None:
        timings["train_s"] += before["seconds"]  # every process's training time of the steps
        if not final:  # no step ran here (a finished run clustered again): the checkpoint's
            final = read_backup_state(backup).get("logs", {})
    print("  ".join(f"{k.upper()} {v:.4f}" for k, v in m.items()))
    note = pipeline.empty_clusters_note(result["postcluster"], ds.n_clusters)
    if note:
        print("note:", note)
    files.write_json(out / "results.json", {
        "dataset": args.dataset, "n_samples": len(ds.x), "n_clusters": ds.n_clusters,
        # SHA-256 by file, as the data folder's SOURCES.md; None: resumed from a checkpoint
        # that does not record the data it started from.
        "data_files": saved.get("data_files") if args.resume else ds.file_hashes,
        "seed": args.seed, "method": args.method, "settings": settings.to_dict(),
        "autoencoder": ae_source,
        "autoencoder_id": spec.ident,  # kind and content hash, as the sweep records keep it
        "resumed_at_step": before["epoch"] if before is not None else None,
        "metrics": m, "f1_unmapped": f1_unmapped(ds.y, result["labels"]),
        "timings": timings, "postcluster": result["postcluster"],
        "final_losses": final,
        "command": provenance.command("experiments/run.py", argv),
        "versions": provenance.versions(),
        "machine": provenance.machine(),  # other CPUs and BLAS kernels round C differently
        # Each image's cluster, 0..K-1 in the data's order (not matched to the classes).
        "labels": result["labels"].tolist(),
    })
    print(f"results: {out / 'results.json'}")
    return result


def _weights_file(args):
    """The .h5 the run starts from: --weights, else pretrained/<dataset>.h5 unless
    --tf1-checkpoint or --no-pretrain (then None)."""
    if args.weights:
        return Path(args.weights)
    return None if args.tf1_checkpoint or args.no_pretrain else sources.pretrained_path(
        args.dataset)


def _run_identity(args, settings):
    """What a checkpoint must agree on to be resumed: not --epochs (it may grow), nor the
    post-clustering settings (they act on the C that training gives), nor the seed unless
    training started from fresh weights (see _check_checkpoint)."""
    s = settings.to_dict()
    for name in ("epochs", *POST_FIELDS):
        s.pop(name)
    absolute = lambda p: str(Path(p).absolute()) if p else None  # noqa: E731
    return {"dataset": args.dataset, "seed": args.seed, "weights": absolute(_weights_file(args)),
            "tf1_checkpoint": absolute(args.tf1_checkpoint),
            "no_pretrain": bool(args.no_pretrain), **s}


def _check_checkpoint(args, out, settings, data_files):
    """--resume needs a matching checkpoint (options and data files); an unfinished one is not
    silently reused.

    Returns what the first run recorded in checkpoint/run.json ({} if nothing).
    """
    import json

    ckpt = out / "checkpoint"
    state = ckpt / "state.json"
    if not args.resume:  # with --force, main deletes it once every input is checked
        if state.exists() and not args.force:
            raise MescError(f"{out} holds the checkpoint of an unfinished run; pass --resume "
                            "to continue it, --force to start over, or another --out")
        return {}
    if not state.exists():
        if (ckpt / "run.json").exists():  # killed before its first checkpoint, or --epochs 0
            # A finished run there (results.json) refuses a rerun without --force.
            again = ("drop --resume and pass --force to start over"
                     if (out / "results.json").exists() else "rerun the command without --resume")
            raise MescError(f"nothing to resume in {out}: its run saved no checkpoint (it stopped "
                            f"before its first, or took no step: --epochs 0); {again}")
        raise MescError(f"nothing to resume in {out} (no checkpoint/state.json); start the run "
                        "with --checkpoint-every N")
    epoch = read_backup_state(ckpt)["epoch"]
    try:
        saved = json.loads((ckpt / "run.json").read_text()) if (ckpt / "run.json").exists() else {}
        if not isinstance(saved, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        raise MescError(f"cannot read the checkpoint in {ckpt} ({e}); pass --force instead of "
                        "--resume to start over") from None
    if saved:
        now = json.loads(json.dumps(_run_identity(args, settings)))
        # From pretrained weights (C starts at a constant) the seed only seeds the clustering.
        free = set() if args.no_pretrain else {"seed"}
        diff = sorted(k for k in now if k not in free and saved.get(k) != now[k])
        if diff:
            changed = ", ".join(f"{k}: {saved.get(k)} now {now.get(k)}" for k in diff)
            raise MescError(f"the checkpoint in {ckpt} was made with other options ({changed}); "
                            "resume with the same options, or drop --resume and pass --force "
                            "to start over")
    # C's rows are the samples the run started from (older checkpoints do not record them).
    cli.check_resumable(ckpt, saved.get("data_files"), data_files, epoch, settings.epochs,
                        "--epochs")
    return saved


_checkpointing = [None, "--resume"]  # the checkpoint folder and how to resume, for Ctrl-C

if __name__ == "__main__":
    _cleanup = []
    cli.main_guard(lambda: main(cleanup=_cleanup), _cleanup,
                   interrupted=lambda: cli.training_interrupted(*_checkpointing))
