"""Pretrain the convolutional auto-encoder of one dataset and save it as .h5.

    python experiments/pretrain.py --dataset orl            # writes pretrained/orl.h5

Full-batch Adam on ½Σ(x_r − x)² from a seeded start (the dataset's initializer, or
--initializer; he_normal unless mesc_tf/config.py says otherwise); with
--batch-size, or where the whole set's activations do not fit in memory, minibatches in a
seeded order. Stops when the relative reconstruction error has not improved by --min-delta for
--patience steps, when it reaches --target, or after --max-steps; keeps the best weights;
then, with --activation-scale, rescales them without changing any reconstruction. Defaults
per dataset are in mesc_tf/config.py.
"""

import argparse
import dataclasses
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout too

from mesc_tf import cli, memory, provenance, sources  # noqa: E402
from mesc_tf.config import INITIALIZERS, get_config, pretrain_problem  # noqa: E402


def scale_arg(text):
    """argparse type of --activation-scale: one number >= 0 (0: off), or several > 0."""
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or numbers separated by commas, "
                                         f"got {text!r}") from None
    if not all(0 <= v < float("inf") for v in values) or (len(values) > 1 and 0 in values):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, or finite numbers > 0 "
                                         f"(one per hidden layer), got {text!r}")
    return values[0] if len(values) == 1 else tuple(values)


# Pretraining runs thousands of steps (MNIST's take seconds each): checkpoints are on by default.
# A checkpoint of these auto-encoders is well under a megabyte and takes milliseconds.
CHECKPOINT_EVERY = 100


def parse_args(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_dataset_arg(p)
    p.add_argument("--seed", type=cli.seed_arg,
                   help="seed of the initialisation and of the minibatch order (default 0)")
    p.add_argument("--init", metavar="H5", help="continue training this .h5 auto-encoder "
                   "instead of starting from fresh weights (with --max-steps 0: only "
                   "rescale it)")
    p.add_argument("--out", help="output .h5 (default: pretrained/<dataset>.h5, or "
                   "$MESC_PRETRAINED_DIR/<dataset>.h5 if that is set)")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    p.add_argument("--checkpoint-every", type=cli.at_least(0), metavar="N",
                   help="save the training state every N steps, for --resume (default "
                   f"{CHECKPOINT_EVERY}, or as the resumed run did; 0: none)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted pretraining")
    p.add_argument("--tensorboard", metavar="DIR", help="write TensorBoard logs to DIR")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    s = p.add_argument_group("schedule (default: the dataset's, mesc_tf/config.py)")
    s.add_argument("--lr", type=float, help="Adam learning rate")
    s.add_argument("--batch-size", type=int, metavar="B",
                   help="images per step, all of them if B is at least their number (where "
                   "none is configured: all, unless their activations do not fit in memory)")
    s.add_argument("--max-steps", type=int, help="upper bound on steps")
    s.add_argument("--patience", type=int, help="steps without improvement before stopping")
    s.add_argument("--min-delta", type=float, help="improvement of the relative error that counts")
    s.add_argument("--lr-patience", type=int,
                   help="halve the learning rate after this many steps without improvement")
    s.add_argument("--target", type=float,
                   help="stop as soon as the relative error is at most this (0 = never)")
    s.add_argument("--initializer", choices=INITIALIZERS,
                   help="kernel initializer of a fresh auto-encoder (truncated_normal: "
                   "tf.truncated_normal(stddev=0.1), as TF1 scripts wrote it)")
    s.add_argument("--activation-scale", type=scale_arg, metavar="S",
                   help="finally rescale the weights so that every hidden layer's mean "
                   "|activation| is S, or S1,S2,... one per hidden layer (enc_0 ... dec_1 for 3 "
                   "layers); reconstructions do not change (0 = off)")
    args = p.parse_args(argv)
    if args.max_steps == 0 and not args.init:
        p.error("--max-steps 0 trains nothing: give --init H5 to rescale that auto-encoder")
    for name in ("lr", "max_steps", "batch_size", "patience", "min_delta", "lr_patience",
                 "target"):
        value = getattr(args, name)
        need = value is not None and pretrain_problem(name, value)
        if need:
            p.error(f"--{name.replace('_', '-')} must be {need}, got {value}")
    if isinstance(args.activation_scale, tuple):
        n_hidden = 2 * len(get_config(args.dataset).arch.channels) - 1
        if len(args.activation_scale) != n_hidden:
            p.error(f"--activation-scale needs one value or {n_hidden} ({args.dataset} has "
                    f"{n_hidden} hidden layers), got {len(args.activation_scale)}")
    return args


def _resumed_run(args, ckpt, schedule, ds):
    """What the checkpoint's run fixed, from its run.json, checked against this command's
    options and data: (recorded, the backup state, seed, batch size, schedule). The batch size
    and seed fix the order of minibatches, so a resumed run must keep them; an option that
    contradicts the checkpoint (it restores the weights, and the learning rate they had reached)
    is refused, and so are other data files.
    """
    from mesc_tf.errors import MescError
    from mesc_tf.files import read_backup_state

    run_file = ckpt / "run.json"
    try:  # no run.json: a checkpoint from before minibatches, so full batch, start unknown
        raw = json.loads(run_file.read_text()) if run_file.exists() else {}
        recorded = {k: raw.get(k) for k in ("batch_size", "seed", "lr", "initializer",
                                            "init", "dataset", "checkpoint_every",
                                            "data_files")}
        known = set(raw)  # a key set to None: the whole set, no --init, no initializer
        ok = {"batch_size": lambda v: not pretrain_problem("batch_size", v),
              "seed": lambda v: isinstance(v, int) and v >= 0,
              "lr": lambda v: not pretrain_problem("lr", v),
              "initializer": lambda v: v in INITIALIZERS, "init": lambda v: isinstance(v, str),
              "dataset": lambda v: isinstance(v, str),
              "checkpoint_every": lambda v: isinstance(v, int) and v >= 1,
              "data_files": lambda v: isinstance(v, dict)}
        if not all(recorded[k] is None or ok[k](recorded[k]) for k in recorded):
            raise ValueError
    except (ValueError, AttributeError):
        raise MescError(f"cannot read {run_file}, the batch size, seed and start of the "
                        f"checkpoint's run; delete {ckpt} (or pass --force without --resume) "
                        "to start over") from None
    if recorded["dataset"] not in (None, args.dataset):  # None: an older run.json
        raise MescError(f"the checkpoint {ckpt} pretrains {recorded['dataset']}, not "
                        f"{args.dataset}; resume it with --dataset {recorded['dataset']}, or "
                        "pass --force without --resume to start over")
    before = read_backup_state(ckpt)  # the steps kept and their seconds
    step = before["epoch"]
    cli.check_resumable(ckpt, recorded["data_files"], ds.file_hashes, step, schedule.max_steps,
                        "--max-steps")
    if args.checkpoint_every is None:  # keep saving as the interrupted run did
        args.checkpoint_every = recorded["checkpoint_every"] or CHECKPOINT_EVERY
    for name in ("batch_size", "seed", "lr", "initializer", "init"):
        shown = given = getattr(args, name)
        kept = recorded[name]
        # None where the key is missing: an older run.json, which did not record it.
        if given is None or (kept is None and name not in known):
            continue
        if name == "batch_size" and given >= len(ds.x):
            given = None  # the whole set, recorded as None
        if name == "init" and kept is not None:
            given, kept = Path(given).resolve(), Path(kept).resolve()
        if given != kept:
            was = kept if kept is not None else {
                "batch_size": "full batch", "init": "fresh start (no --init)"}.get(name, "none")
            raise MescError(f"--{name.replace('_', '-')} {shown} differs from the {was} the "
                            f"checkpoint {ckpt} was made with; resume without it")
    seed = recorded["seed"] if recorded["seed"] is not None else args.seed or 0
    batch_size = recorded["batch_size"]
    # The schedule the checkpoint's run started with (the rate also bounds its halving).
    schedule = schedule.replace(**{k: recorded[k] for k in ("lr", "initializer")
                                   if recorded[k] is not None})
    return recorded, before, seed, batch_size, schedule


def _metadata(args, cfg, ds, schedule, recorded, seed, batch_size, info, init_meta,
              resumed_at, seconds, argv=None) -> dict:
    """What the .h5 file records about the run that made it (``argv``: main's, None for
    the command line's)."""
    return {
        "dataset": args.dataset, "architecture": cfg.arch.to_dict(), "pixels": cfg.pixels,
        "n_samples": len(ds.x),
        # SHA-256 by file, as the data folder's SOURCES.md: the run's, as its checkpoint's
        # run.json recorded them (None where it predates that).
        "data_files": recorded["data_files"],
        "seed": seed,
        # The run's start: first rate (final_lr: its last) and initializer; after a resume, as
        # the checkpoint's run.json recorded them (None where it predates that).
        "lr": recorded["lr"],
        "batch_size": batch_size,  # None: the whole set every step
        "max_steps": schedule.max_steps, "patience": schedule.patience,
        "min_delta": schedule.min_delta, "lr_patience": schedule.lr_patience,
        "target": schedule.target,
        "initializer": recorded["initializer"],
        "steps": info["steps"], "best_step": info["best_step"], "final_lr": info["final_lr"],
        # On a resume, the command is this process's; the steps before it ran with the
        # options of the process that wrote the checkpoint.
        "resumed_at_step": resumed_at,
        # A warm start: the steps above come on top of the initial file's (after a resume,
        # its path only).
        "init": {"path": recorded["init"], "metadata": init_meta} if recorded["init"] else None,
        "activation_scale": schedule.activation_scale,
        "activation_factors": info["activation_factors"],
        "relative_error": info["relative_error"], "dead_channels": info["dead_channels"],
        # Per layer, the fraction of positions at which each channel is on (ReLU > 0).
        "channel_activity": info["channel_activity"],
        # This process's seconds plus the recorded training time of the steps it resumed.
        "seconds": seconds,
        "command": "python " + provenance.command("experiments/pretrain.py", argv),
        "versions": provenance.versions(),
        "machine": provenance.machine(),  # other CPUs and BLAS kernels round differently
    }


def _report(info, out, schedule, init):
    """The closing lines: steps, error, dead or rarely active channels, the file written."""
    rare = {name: [c for c, a in enumerate(act) if a < 0.01]
            for name, act in info["channel_activity"].items()}
    rare = ", ".join(f"{name} {cs}" for name, cs in rare.items() if cs) or "none"
    print(f"steps {info['steps']} (best {info['best_step']}), relative reconstruction error "
          f"{info['relative_error']:.5f}, dead latent channels {info['dead_channels'] or 'none'}, "
          f"channels on at < 1 % of positions: {rare}; wrote {out}")
    if info["steps"] and not info["best_step"]:
        print("note: no step improved on the starting weights, so they were kept; "
              + (f"a converged --init may need a lower --lr than {schedule.lr:g}" if init
                 else f"try a lower --lr than {schedule.lr:g}"))


def main(argv=None, cleanup=None):
    args = parse_args(argv)
    from mesc_tf import data, pipeline
    from mesc_tf.errors import MescError
    from mesc_tf.weights import check_autoencoder_file

    cfg = get_config(args.dataset)
    schedule = cfg.pretrain.replace(lr=args.lr, max_steps=args.max_steps,
                                    patience=args.patience, min_delta=args.min_delta,
                                    lr_patience=args.lr_patience, initializer=args.initializer)
    # Given explicitly, 0 switches a configured target or scale off.
    if args.target is not None:
        schedule = dataclasses.replace(schedule, target=args.target or None)
    if args.activation_scale is not None:
        schedule = dataclasses.replace(schedule, activation_scale=args.activation_scale or None)
    if not (schedule.max_steps or schedule.activation_scale):
        raise MescError(f"--max-steps 0 with no activation scale (none configured for "
                        f"{args.dataset}) would only copy {args.init}; give --activation-scale S")
    out = Path(args.out) if args.out else sources.pretrained_path(args.dataset)
    ckpt = out.with_name(out.stem + ".checkpoint")
    if ckpt == out:
        raise MescError(f"--out {out}: <name>.checkpoint is the name of the output's checkpoint "
                        f"folder; name the output e.g. {out.with_suffix('.h5')}")
    # Before the (long) training: refuse to replace a result, and check it can be written.
    made = cli.prepare_out_file(out, force=args.force, what="output")
    if cleanup is not None:
        cleanup.extend(made)
    if args.checkpoint_every is None and not args.resume:
        args.checkpoint_every = CHECKPOINT_EVERY
    backup = ckpt if (args.checkpoint_every or args.resume) else None
    _checkpointing[0] = backup
    if args.resume and not (ckpt / "state.json").exists():
        raise MescError(f"nothing to resume at {ckpt}: no checkpoint was saved there (a run "
                        "stopped before its first, or ran with --checkpoint-every 0); run the "
                        "command without --resume")
    if not args.resume and (ckpt / "state.json").exists() and not args.force:
        raise MescError(f"{ckpt} holds the checkpoint of an unfinished pretraining; pass "
                        "--resume to continue it or --force to start over")
    if args.init:  # before TensorFlow loads: its start-up lines would bury the error
        check_autoencoder_file(args.init, cfg.arch)
    ds = data.load_dataset(args.dataset, args.data_dir)
    # The batch size and seed fix the order of minibatches; a resumed run must keep them. The
    # run's start (initializer or --init file, first rate) is recorded beside them for the
    # resumed file's metadata.
    run_file = ckpt / "run.json"
    if args.resume:  # checks the checkpoint against the options and data; writes nothing
        recorded, before, seed, batch_size, schedule = _resumed_run(args, ckpt, schedule, ds)
    else:
        before = None
        seed = args.seed or 0
        requested = args.batch_size if args.batch_size is not None else schedule.batch_size
        batch_size = memory.pretrain_batch_size(len(ds.x), cfg.arch, requested)
        if batch_size is not None and requested is None:
            print(f"the activations of all {len(ds.x)} images do not fit in the available "
                  f"memory: {batch_size} images per step")
        recorded = {"batch_size": batch_size, "seed": seed, "lr": schedule.lr,
                    "initializer": None if args.init else schedule.initializer,
                    "init": args.init, "dataset": args.dataset,
                    "checkpoint_every": args.checkpoint_every, "data_files": ds.file_hashes}
    # The input is checked: only now make folders, and replace an unfinished checkpoint.
    if args.tensorboard:
        if cleanup is not None:  # its logs stay only beside a checkpoint a resume continues
            cleanup.extend(cli.new_folder(args.tensorboard, ckpt))
        cli.writable_dir(args.tensorboard, "--tensorboard DIR")
    if not args.resume:
        if args.force:
            shutil.rmtree(ckpt, ignore_errors=True)
        if backup is not None:
            if not ckpt.exists() and cleanup is not None:
                cleanup.append(ckpt)  # removed on failure unless it holds a checkpoint by then
            ckpt.mkdir(parents=True, exist_ok=True)
            run_file.write_text(json.dumps(recorded))
    schedule = dataclasses.replace(schedule, batch_size=batch_size or len(ds.x))  # as decided
    from mesc_tf.training import configure_runtime  # TensorFlow: once the input is checked
    from mesc_tf.weights import load_autoencoder, save_autoencoder

    configure_runtime(seed)
    shown = str(schedule)
    if args.init:  # the initializer plays no part: the weights come from the file
        shown = shown.replace(f"initializer={schedule.initializer!r}", f"init={args.init!r}")
    print(f"pretraining {args.dataset}: {len(ds.x)} images, architecture {cfg.arch.to_dict()}, "
          f"{shown}")
    resumed_at = before["epoch"] if before else None
    earlier_s = before["seconds"] if before else 0.0  # the steps kept from before
    start = time.perf_counter()
    init, init_meta = load_autoencoder(args.init, cfg.arch) if args.init else (None, None)
    try:
        ae, info = pipeline.pretrain(ds.x, cfg.arch, schedule, init=init,
                                     verbose=0 if args.quiet else 1,
                                     log_dir=args.tensorboard, backup_dir=backup,
                                     checkpoint_every=args.checkpoint_every, seed=seed)
    except pipeline.Diverged:
        if backup is not None:  # its best weights diverged too: nothing to resume
            shutil.rmtree(backup, ignore_errors=True)
        raise
    if info["relative_error"] >= 1:  # an auto-encoder that outputs 0 scores 1
        print(f"warning: relative reconstruction error {info['relative_error']:.4g} >= 1: this "
              "auto-encoder reconstructs nothing; train longer or lower --lr", file=sys.stderr)
    seconds = time.perf_counter() - start + earlier_s  # with the steps it resumed
    meta = _metadata(args, cfg, ds, schedule, recorded, seed, batch_size, info,
                     init_meta, resumed_at, seconds, argv)
    save_autoencoder(ae, out, meta)
    if backup is not None:  # the result is safe; its checkpoint would only be stale now
        shutil.rmtree(backup, ignore_errors=True)
    _report(info, out, schedule, args.init)
    return meta


_checkpointing = [None]  # the checkpoint folder, for the Ctrl-C line

if __name__ == "__main__":
    _cleanup = []
    cli.main_guard(lambda: main(cleanup=_cleanup), _cleanup,
                   interrupted=lambda: cli.training_interrupted(_checkpointing[0]))
