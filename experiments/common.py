"""Shared pieces of the paper-figure experiments (ablation, toy_affinity, sensitivity,
convergence, tsne, confusion; faithfulness.py takes its method names, table.py, sweep.py and
compare_autoencoders.py its --seeds and output folder): options, data subsets, auto-encoder
sources, resumable run records, method presets and matplotlib helpers.

Every experiment writes under ``experiments/results/<name>/`` (``--out`` to change it;
``--smoke`` runs go to ``experiments/results/smoke/<name>/``):

* ``runs/<key>.json`` (and sometimes ``runs/<key>.npy``): one finished unit of work (one
  fine-tuning and its clusterings). It holds the exact spec it was made with (dataset, subset,
  data files' SHA-256, settings, auto-encoder, seeds, ...). A rerun reuses records whose spec
  matches (a record from before the data files were recorded matches without them), so an
  interrupted experiment continues where it stopped; a record made with a different spec, or
  by another experiment on the same ``--out``, is refused (use another ``--out`` or ``--redo``),
  never silently replaced or misread.
* ``<name>.json``, ``<name>.md`` and ``*.png``: the summary, rebuilt from the run records. It
  remembers the request (datasets, seeds, options) it was built for, and names each dataset's
  data files (``data_files``: None for runs recorded before them); a different request on the
  same folder is refused unless ``--force``.

Settings are the presets of mesc_tf/config.py (see :func:`preset`); ``--epochs`` and
``--set [SCOPE.]FIELD=VALUE`` override them for every run or for one method / ablation row, and
the overrides are part of each run's recorded spec.

Training and clustering go through :mod:`mesc_tf.pipeline` (the one code path); nothing here
re-implements them.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np  # noqa: E402

from mesc_tf import cli, files, provenance, sources, sweep  # noqa: E402
from mesc_tf.config import DATASETS, get_config, method_settings  # noqa: E402
from mesc_tf.errors import MescError, one_line  # noqa: E402

RESULTS_DIR = REPO / "experiments" / "results"

# What --smoke shrinks a run to, unless the option is given explicitly.
SMOKE = {"classes": 3, "per_class": 8, "epochs": 3, "seeds": [0]}

# Method presets of the figures: the paper's table rows (config.method_settings) plus DSC-Net
# with the nuclear norm (the toy figure and the COIL20 confusion matrices), which is the
# DSC-Net-L2 preset with the regulariser ‖C‖_* in place of Σ C².
METHODS = {
    "our": "MESC-Net",
    "our_wo_net": "MESC-Net w/o Net",
    "dsc_l1": "DSC-Net-L1",
    "dsc_l2": "DSC-Net-L2",
    "dsc_nuclear": "DSC-Net-Nuclear",
}


def preset(dataset: str, method: str):
    """Settings of one method preset on one dataset (see METHODS)."""
    if method == "dsc_nuclear":
        return method_settings(dataset, "dsc_l2").replace(regularizer="nuclear")
    if method not in METHODS:
        raise MescError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    return method_settings(dataset, method)


# ---------------------------------------------------------------------------------------------
# Options


def seeds_arg(text) -> list[int]:
    """argparse type of one --seeds token: a seed, 0,1,2 or 0-4 (sweep.parse_seeds)."""
    import argparse

    try:
        return sweep.parse_seeds(text)
    except MescError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--seeds: ")) from None


def add_seeds_arg(p, default, what="seeds of the clustering"):
    """--seeds as every experiment takes it (0 1 2, 0,1,2, 0-2 or a mix); read it with
    :func:`seeds_of`."""
    p.add_argument("--seeds", nargs="+", type=seeds_arg, default=None, metavar="S",
                   help=f"{what}: 0 1 2, 0,1,2 or 0-2; default {' '.join(map(str, default))}")


def seeds_of(groups, default) -> list[int]:
    """The seeds of an add_seeds_arg option, each once, in order; ``default`` if not given."""
    if groups is None:
        return list(default)
    return list(dict.fromkeys(s for group in groups for s in group))


def _is_path(value, key) -> bool:
    """Whether ``value``, which holds an '=' after ``key``, is a bare path: one that exists (a
    TF1 checkpoint by its prefix, whose files end in .index) or whose folder part comes before
    the '=' (no dataset name holds a '/')."""
    return "/" in key or any(Path(value + end).exists() for end in ("", ".index"))


def per_dataset(values, option, bare=True) -> dict:
    """A repeatable [DATASET=]PATH option as {dataset: PATH}, a bare PATH (for every dataset;
    refused unless ``bare``) under None. Bad entries, and two paths for one dataset (or two bare
    ones), raise one-line MescErrors."""
    out = {}
    for v in values or []:
        key, sep, rest = v.partition("=")
        if sep and key.lower() in DATASETS:
            if not rest:
                raise MescError(f"{option} {v}: no path after '='; give {key.lower()}=PATH")
            key = key.lower()
        elif sep and not _is_path(v, key):
            raise MescError(f"{option} {v}: {key!r} is not a dataset; use DATASET=PATH with one "
                            f"of {', '.join(DATASETS)}")
        elif not bare:
            raise MescError(f"{option} {v}: give DATASET=PATH, e.g. orl={v}")
        else:
            key, rest = None, v
        if out.get(key, rest) != rest:
            which = f"for {key}" if key else "without DATASET="
            raise MescError(f"{option} is given twice {which} ({out[key]} and {rest}); "
                            "give one path per dataset")
        out[key] = rest
    return out


def check_one_source(weights: dict, tf1: dict, datasets):
    """Refuse a dataset that --weights and --tf1-checkpoint (per_dataset's dicts) both reach:
    one auto-encoder source per dataset, not a silent precedence."""
    both = [d for d in datasets if {d, None} & set(weights) and {d, None} & set(tf1)]
    if both:
        raise MescError(f"give --weights or --tf1-checkpoint for a dataset, not both "
                        f"({', '.join(both)})")


class _Parser(cli.ArgumentParser):
    """Keeps the arguments main was given as ``args.argv`` (None: the command line's), for the
    command its summary records."""

    def parse_args(self, args=None, namespace=None):
        ns = super().parse_args(args, namespace)
        ns.argv = None if args is None else [str(a) for a in args]
        return ns


def parser(name: str, doc: str, *, datasets, seeds=(0, 1, 2), methods=None):
    """The options every experiment shares. ``doc`` is the script's docstring."""
    p = _Parser(prog=f"experiments/{name}.py", description=doc.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", type=str.lower, choices=list(DATASETS),
                   default=list(datasets), metavar="NAME",
                   help=f"datasets (default: {' '.join(datasets)}; any of {', '.join(DATASETS)})")
    add_seeds_arg(p, seeds, "seeds of the clustering (with --no-pretrain the first also seeds "
                  "the he_normal start; the ablation seeds one start per seed)")
    p.set_defaults(default_seeds=list(seeds))
    if methods is not None:
        p.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(methods),
                       metavar="M", help=f"method presets (default: {' '.join(methods)}; any of "
                       f"{', '.join(METHODS)})")
    p.add_argument("--epochs", type=cli.at_least(0),
                   help="fine-tuning steps for every run (default: each method's setting in "
                   "mesc_tf/config.py)")
    p.add_argument("--set", action="append", default=[], metavar="[SCOPE.]FIELD=VALUE",
                   help="override one setting of mesc_tf/config.Settings (reg1, reg2, lr, thr, "
                        "...) for every run, or only for one SCOPE (a method, e.g. "
                        "dsc_l1.reg1=10; an ablation row, e.g. row5.reg2=1); repeatable")
    p.add_argument("--data-dir", help="folder holding the dataset files "
                   "(default: $MESC_DATA_DIR, then ./data)")
    p.add_argument("--classes", type=cli.at_least(1), metavar="K",
                   help="keep only the first K classes of each dataset (a smaller problem)")
    p.add_argument("--per-class", type=cli.at_least(1), metavar="M",
                   help="keep only the first M samples of each kept class")
    p.add_argument("--weights", action="append", default=[], metavar="[DATASET=]PATH",
                   help="auto-encoder .h5 (default: pretrained/<dataset>.h5, or "
                        "$MESC_PRETRAINED_DIR/<dataset>.h5 if that is set); repeat as "
                        "DATASET=PATH for several datasets")
    p.add_argument("--tf1-checkpoint", action="append", default=[],
                   metavar="[DATASET=]PREFIX", help="original TF1 checkpoint prefix instead "
                   "of the .h5; repeat as DATASET=PREFIX for several datasets; PREFIX "
                   "'original' is the authors' checkpoint of that dataset "
                   "(mesc_tf.weights.ORIGINAL_CHECKPOINTS under $MESC_TF1_DIR, default "
                   "../shared/pretrained-tf1)")
    p.add_argument("--no-pretrain", action="store_true",
                   help="fine-tune from seeded he_normal weights (no pretrained auto-encoder)")
    p.add_argument("--smoke", action="store_true",
                   help=f"a tiny run to check the command: --classes {SMOKE['classes']} "
                        f"--per-class {SMOKE['per_class']} --epochs {SMOKE['epochs']} --seeds 0 "
                        "unless given, output under experiments/results/smoke/")
    p.add_argument("--out", help=f"output folder (default: experiments/results/{name})")
    p.add_argument("--force", action="store_true",
                   help="rebuild the summary even if it was made for another request")
    p.add_argument("--redo", action="store_true",
                   help="recompute finished runs instead of reusing them (implies --force; "
                        "an interrupted --redo run: the same command keeps the runs it made)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(experiment=name)
    return p


def finish_args(p, args, scopes=None, fixed=()):
    """Apply --smoke, check the shared options and resolve the output folder. ``scopes``: the
    names --set may address (default: the --methods run, or "our" for a script without
    --methods); ``fixed``: the Settings fields the script sets itself, which --set may not."""
    if scopes is None:
        scopes = (list(dict.fromkeys(args.methods)) if getattr(args, "methods", None) is not None
                  else ["our"])
    args.overrides = _parse_sets(p, args.set, list(scopes), fixed)
    sets_epochs = [f"{s}.epochs" if s else "epochs" for s, f, _ in args.overrides
                   if f == "epochs"]
    if sets_epochs and args.epochs is not None:  # configure() would let --epochs win silently
        p.error(f"--epochs and --set {sets_epochs[0]}=... both give the number of steps; give "
                "one of them")
    if args.smoke:
        for k in ("classes", "per_class", "epochs"):
            if getattr(args, k) is None and not (k == "epochs" and sets_epochs):
                setattr(args, k, SMOKE[k])
    args.seeds = seeds_of(args.seeds, SMOKE["seeds"] if args.smoke else args.default_seeds)
    args.datasets = list(dict.fromkeys(args.datasets))
    if args.no_pretrain and (args.weights or args.tf1_checkpoint):
        p.error("--no-pretrain cannot be combined with --weights or --tf1-checkpoint")
    try:
        check_one_source(per_dataset(args.weights, "--weights"),
                         per_dataset(args.tf1_checkpoint, "--tf1-checkpoint"), args.datasets)
    except MescError as e:
        p.error(str(e))
    if getattr(args, "methods", None) is not None:
        args.methods = list(dict.fromkeys(args.methods))
    if args.redo:
        args.force = True
    if args.out is None:
        base = RESULTS_DIR / "smoke" if args.smoke else RESULTS_DIR
        args.out = base / args.experiment
    args.out = Path(args.out)
    return args


def _parse_sets(p, items, scopes, fixed=()):
    """--set entries as [(scope or None, field, typed value)]; bad ones end in p.error.
    ``fixed``: the fields the script sets itself (its axes), which --set may not change."""
    from mesc_tf.sweep import FIELD_TYPES, parse_value

    out = []
    for item in items:
        key, eq, raw = item.partition("=")
        scope, _, field = key.rpartition(".")
        field = field.strip().replace("-", "_")  # coef-init as --grid and the options spell it
        if not eq or field not in FIELD_TYPES:
            p.error(f"--set {item}: expected [SCOPE.]FIELD=VALUE with FIELD one of "
                    f"{', '.join(sorted(FIELD_TYPES))}")
        if field in fixed:
            p.error(f"--set {item}: this script sets {field} itself; see its own options")
        if scope and scope not in scopes:
            p.error(f"--set {item}: unknown scope {scope!r} for this run; use one of "
                    f"{', '.join(scopes)}")
        if any(s == (scope or None) and f == field for s, f, _ in out):  # not a silent last-wins
            p.error(f"--set {item}: {key.strip()} is given twice; give each setting once")
        try:  # the same checks as the command line's options, before any output exists
            value = parse_value(field, raw)
        except MescError as e:
            p.error(f"--set {item}: {e}")
        out.append((scope or None, field, value))
    return out


def configure(settings, args, scope=None):
    """A preset with the --set overrides (global, then those for ``scope``) and --epochs."""
    changes = {f: v for s, f, v in args.overrides if s is None}
    changes.update({f: v for s, f, v in args.overrides if s is not None and s == scope})
    return settings.replace(**changes).replace(epochs=args.epochs)


# ---------------------------------------------------------------------------------------------
# Data


@dataclass(frozen=True, eq=False)
class Data:
    name: str
    x: np.ndarray
    y: np.ndarray  # 1..K
    n_clusters: int
    subset: dict  # {"classes": K or None, "per_class": M or None}
    files: dict | None = None  # data.Dataset.file_hashes of the files read

    @property
    def n(self) -> int:
        return int(len(self.x))


def load_data(name: str, args) -> Data:
    """A dataset, optionally cut to its first ``--classes`` classes and ``--per-class`` samples
    per class (file order kept), labels renumbered 1..K. A missing file raises
    ``data.MissingDataError``."""
    from mesc_tf import data, memory

    ds = data.load_dataset(name, args.data_dir)
    x, y = ds.x, ds.y
    classes, per_class = args.classes, args.per_class
    if classes is not None or per_class is not None:
        kept = np.unique(y)[:classes] if classes is not None else np.unique(y)
        keep = np.zeros(len(y), bool)
        for c in kept:
            idx = np.flatnonzero(y == c)
            keep[idx[:per_class] if per_class is not None else idx] = True
        x, y = x[keep], y[keep]
        y = np.searchsorted(kept, y) + 1
        if len(x) < 2:
            raise MescError(f"{name}: the subset --classes {classes} --per-class {per_class} "
                            "leaves fewer than 2 samples; keep more")
    memory.check_memory(len(x), get_config(name).arch)
    return Data(name, x, y.astype(np.int64), int(len(np.unique(y))),
                {"classes": classes, "per_class": per_class}, ds.file_hashes)


# Datasets whose classes are the digits 0..9: their labels 1..10 are digit + 1 (mesc_tf/data.py
# adds 1 to MNIST's digits; USPS.mat's gnd is digit + 1 already, the data folder's SOURCES.md).
DIGIT_DATASETS = ("mnist", "usps")


def class_names(dataset: str, k: int) -> list[str]:
    """The names of the labels 1..k of ``dataset`` in figures: the digit where its classes are
    digits (a --classes subset keeps the first classes, so label j is still digit j − 1), else
    the label."""
    first = 0 if dataset in DIGIT_DATASETS else 1
    return [str(first + j) for j in range(k)]


def load_all(args) -> dict:
    """{name: Data} of every --datasets entry, loaded before any training: a missing data file
    ends the run before the datasets listed ahead of it are trained and drawn."""
    return {name: load_data(name, args) for name in args.datasets}


def order_by_class(d: Data) -> Data:
    """The same data with samples sorted by label (stable), for block pictures of C."""
    idx = np.argsort(d.y, kind="stable")
    return Data(d.name, d.x[idx], d.y[idx], d.n_clusters, d.subset, d.files)


# ---------------------------------------------------------------------------------------------
# Auto-encoder sources


def _per_dataset(values, dataset, option):
    """The value of a repeatable [DATASET=]VALUE option for one dataset (None if not given)."""
    found = per_dataset(values, option)
    return found.get(dataset) or found.get(None)  # a bare path applies to every dataset


def _rel(path) -> str:
    # Part of the run records' specs (through the labels): changing it orphans finished runs.
    path = Path(path).absolute()
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def display_label(label: str) -> str:
    """An auto-encoder label for a table: its path as ``cli.display_path`` writes it
    (``tf1:../shared/...``), without touching the label kept in the run records."""
    kind, sep, path = label.partition(":")
    if not sep or kind not in ("tf1", "h5"):
        return label
    return f"{kind}:{cli.display_path(path if Path(path).is_absolute() else REPO / path, REPO)}"


def ae_source(args, dataset: str, pretrained=True) -> dict:
    """Where the auto-encoder of ``dataset`` comes from, as keyword arguments of
    sources.get_autoencoder plus a short ``label`` and the ``sha256`` of its content for the
    records (None where there is no file; check_sources says so before any training)."""
    if not pretrained or args.no_pretrain:
        return {"no_pretrain": True, "label": "he_normal (no pretraining)", "sha256": None}
    tf1 = _per_dataset(args.tf1_checkpoint, dataset, "--tf1-checkpoint")
    if tf1:
        from mesc_tf.weights import tf1_prefix

        tf1 = tf1_prefix(dataset, tf1)
        return {"tf1_checkpoint": tf1, "label": f"tf1:{_rel(tf1)}",
                "sha256": _content_hash(dataset, tf1_checkpoint=tf1)}
    weights = _per_dataset(args.weights, dataset, "--weights")
    if weights:
        return {"weights": weights, "label": f"h5:{_rel(weights)}",
                "sha256": _content_hash(dataset, weights=weights)}
    return {"weights": None, "label": f"h5:{_rel(sources.pretrained_path(dataset))}",
            "default": True, "sha256": _content_hash(dataset)}


def _content_hash(dataset, **source):
    try:
        return sources.resolve_autoencoder(dataset, **source).sha256[:16]
    except MescError:
        return None


def ae_spec(src: dict) -> dict:
    """The auto-encoder part of a run record's spec: the label and the content hash, so that a
    finished run is not reused after pretrained/<dataset>.h5 was replaced."""
    return {"autoencoder": src["label"], "autoencoder_sha256": src["sha256"]}


def check_sources(args, datasets, no_pretrain_option=True):
    """Fail early (before any training) if an auto-encoder file is missing, or holds another
    architecture than its dataset's. ``no_pretrain_option``: whether the script takes
    --no-pretrain (the error names it as a way out)."""
    from mesc_tf.config import get_config

    for name in datasets:
        try:
            src = ae_source(args, name)  # "original": the authors' checkpoint must be there
            sources.resolve_autoencoder(name, weights=src.get("weights"),
                                        tf1_checkpoint=src.get("tf1_checkpoint"),
                                        no_pretrain=src.get("no_pretrain", False),
                                        per_dataset=True, arch=get_config(name).arch,
                                        no_pretrain_option=no_pretrain_option)
        except MescError as e:
            raise MescError(f"{name}: {e}") from None


def autoencoder_for_run(name: str, src: dict, seed: int):
    """(auto-encoder, pretraining seconds or None) for one run; seeds the runtime first so that
    a he_normal start is reproducible. A new auto-encoder per run: fine-tuning changes it."""
    from mesc_tf.training import configure_runtime

    configure_runtime(seed)
    cfg = get_config(name)
    weights = src.get("weights")
    if src.get("default"):
        weights = sources.pretrained_path(name)
    ae, _ = sources.get_autoencoder(cfg.arch, dataset=name, weights=weights,
                                    tf1_checkpoint=src.get("tf1_checkpoint"),
                                    no_pretrain=src.get("no_pretrain", False))
    pretrain_s = None
    if weights:
        from mesc_tf.weights import read_autoencoder_file

        pretrain_s = pretraining_seconds(read_autoencoder_file(weights)[1])
    return ae, pretrain_s


def pretraining_seconds(meta: dict):
    """Seconds of pretraining behind an .h5, all stages: a file continued with
    `pretrain.py --init` keeps the earlier stage's metadata under 'init'. None if unknown."""
    if not meta or meta.get("seconds") is None:
        return None
    earlier = (meta.get("init") or {}).get("metadata")
    rest = pretraining_seconds(earlier) if earlier else 0.0
    return None if rest is None else float(meta["seconds"]) + rest


# ---------------------------------------------------------------------------------------------
# Training and clustering (thin wrappers over mesc_tf.pipeline)


@dataclass
class Trained:
    """What the experiments keep of one fine-tuning (the model itself is freed)."""
    coef: np.ndarray
    history: dict
    finetune_s: float
    pretrain_s: float | None
    steps: int
    extra: object = None


def train(d: Data, settings, src: dict, args, seed: int, inspect=None) -> Trained:
    """Fine-tune a fresh copy of the run's auto-encoder (``src``, seeded by ``seed``) on the
    whole of d.x through pipeline.fine_tune, then free the model. ``inspect(model)``, if given,
    runs on the trained model first (e.g. to encode the data); its value is ``extra``."""
    from mesc_tf import pipeline

    ae, pre_s = autoencoder_for_run(d.name, src, seed)
    model, history, ft_s = pipeline.fine_tune(d.x, settings, ae, verbose=0 if args.quiet else 1)
    out = Trained(model.coef.numpy(), history, ft_s, pre_s,
                  int(model.optimizer.iterations.numpy()),
                  inspect(model) if inspect is not None else None)
    del model, ae
    release()
    return out


def data_spec(d: Data) -> dict:
    """The data part of a run record's spec: the dataset, its subset and the SHA-256 of each
    file read, so that a finished run is not reused on other data."""
    return {"dataset": d.name, "subset": d.subset, "n": d.n, "data_files": d.files}


def method_spec(d: Data, method: str, settings, src: dict, args) -> dict:
    """The run-record spec of one method preset fine-tuned once and clustered with args.seeds."""
    return {**data_spec(d), "method": method, "settings": settings.to_dict(), **ae_spec(src),
            "seeds": args.seeds}


def cluster_seeds(coef, d: Data, settings, seeds, keep_labels=False) -> list[dict]:
    """pipeline.cluster with each seed, scored against d.y, with what post-clustering did
    (solvers, ill-posed spectral steps, clusters found)."""
    from mesc_tf import pipeline
    from mesc_tf.metrics import evaluate

    out = []
    for seed in seeds:
        t0 = time.perf_counter()
        info = {}
        labels, timings = pipeline.cluster(coef, d.n_clusters, settings, seed=seed, info=info)
        rec = {"seed": seed, "metrics": evaluate(d.y, labels), "postcluster": info,
               "post_s": time.perf_counter() - t0, **timings}
        if keep_labels:
            rec["labels"] = labels.tolist()
        out.append(rec)
    return out


def release():
    """Free the models of a finished unit (C is n×n)."""
    import keras

    keras.backend.clear_session()
    gc.collect()


def mean_std(values):
    """Mean and sample standard deviation (ddof 1; std None for one value) of the values that
    are not None, by sweep.stats (as main_table.md and the sweeps); (None, None) for none."""
    kept = [v for v in values if v is not None]
    if not kept:
        return None, None
    st = sweep.stats(kept)
    return st["mean"], st["std"]


def acc_nmi(clusterings) -> dict:
    """acc_mean, acc_std, nmi_mean and nmi_std (mean_std) over a run's seeds' clusterings."""
    out = {}
    for metric in ("acc", "nmi"):
        out[f"{metric}_mean"], out[f"{metric}_std"] = mean_std(
            [c["metrics"][metric] for c in clusterings])
    return out


def pm(mean, std, scale=100.0, digits=2):
    """'mean ± std' (× scale), 'mean' for a single seed (std None), or '–'."""
    if mean is None:
        return "–"
    if std is None:
        return f"{mean * scale:.{digits}f}"
    return f"{mean * scale:.{digits}f} ± {std * scale:.{digits}f}"


# ---------------------------------------------------------------------------------------------
# Results folder: resumable run records and a guarded summary


def _norm(obj):
    from mesc_tf.files import json_default

    return json.loads(json.dumps(obj, default=json_default))


def _without_data_files(spec):
    """``spec`` less its data files, also in the specs it holds (t-SNE's fit_spec)."""
    return {k: _without_data_files(v) if isinstance(v, dict) else v
            for k, v in spec.items() if k != "data_files"}


class Continuation:
    """How an interrupted --force / --redo run goes on: the same command again keeps what it
    had recomputed. ``path`` (one per request, so that runs of other requests on the same
    folder, side by side or later, neither continue nor end it) lists the work the run has
    finished, rewritten after each piece; a rerun of the same request with the option, at the
    same commit, recomputes only the rest; the run that completes removes it. Delete the file
    to recompute everything again."""

    PREFIX = ".recomputing-"

    def __init__(self, folder, active: bool, request: dict):
        digest = hashlib.sha256(json.dumps(_norm(request), sort_keys=True).encode()).hexdigest()
        self.path = Path(folder) / f"{self.PREFIX}{digest[:12]}.json"
        self.active = active
        self.began = time.strftime("%Y-%m-%d %H:%M:%S")
        self.finished: list[str] = []
        self.resumed = False
        # The code's commit (its tree is dirty whenever a table is being rewritten): work of
        # another commit is recomputed.
        self.commit = provenance.code_revision().removesuffix("-dirty") if active else None
        if active and self.path.is_file():
            try:
                state = json.loads(self.path.read_text())
                if state["commit"] == self.commit:
                    self.began = str(state["began"])
                    self.finished = list(map(str, state["finished"]))
                    self.resumed = True
            except (OSError, ValueError, KeyError, TypeError):
                pass  # unreadable (not ours): recompute everything
        self._kept = set(self.finished)

    def keeps(self, key: str) -> bool:
        """Whether finished work ``key`` counts as done: always without the option; with it,
        only what the interrupted run being continued finished."""
        return not self.active or key in self._kept

    def note(self, key: str):
        """After each piece of work recorded: add it to the file."""
        if self.active:
            self.finished.append(key)
            files.write_json(self.path, {"began": self.began, "commit": self.commit,
                                         "finished": self.finished})

    def done(self):
        """The run completed: a rerun with the option recomputes everything again."""
        if self.active:
            self.path.unlink(missing_ok=True)

    def describe(self, what) -> str:
        """The line a continued run prints (``what``: "run(s)", "cell(s)")."""
        return (f"continuing the recomputation begun {self.began}: what it finished is kept "
                f"({len(self._kept)} {what}; delete {self.path} to recompute that too)")


class Results:
    """The output folder of one experiment (see the module docstring)."""

    def __init__(self, args, request: dict, figures=()):
        """``figures``: the names of the PNGs the summary will have (those known up front)."""
        self.args = args
        self.dir = Path(args.out)
        self.runs = self.dir / "runs"
        self.request = _norm(request)
        check_writable_dir(self.runs)  # made by the first record: an error before leaves none
        self.summary_path = self.dir / f"{args.experiment}.json"
        check_not_folders([self.summary_path, self.summary_path.with_suffix(".md")], "summary")
        check_not_folders([self.dir / f for f in figures], "figure")
        if self.summary_path.exists() and not args.force:
            try:
                old = json.loads(self.summary_path.read_text())
            except (OSError, ValueError) as e:  # cut off, say: the run records are intact
                raise MescError(f"cannot read the summary {self.summary_path} ({one_line(e)}); "
                                "pass --force to rebuild it from the finished runs in "
                                f"{self.runs}, or choose another --out") from None
            old = old.get("request") if isinstance(old, dict) else None  # else: not ours
            if isinstance(old, dict):  # made before request_of left other datasets' paths out
                with contextlib.suppress(MescError, TypeError, AttributeError):
                    old = {**{k: v for k, v in old.items()
                              if k not in ("weights", "tf1_checkpoint")},
                           **_used_sources(old, old.get("datasets") or [])}
            if old != self.request:
                raise MescError(
                    f"{self.summary_path} was made for another request "
                    f"({_diff(old, self.request)}); choose another --out, or pass --force to "
                    "rebuild the summary for this one")
        self.reused = 0
        self.computed = 0
        self.data_files = {}  # {dataset: its runs' data files (None: recorded before them)}
        self.continuation = Continuation(self.runs, bool(args.redo), self.request)
        if self.continuation.resumed:
            print(self.continuation.describe("run(s)"))

    def path(self, key: str, suffix=".json") -> Path:
        return self.runs / f"{key}{suffix}"

    def get(self, key: str, spec: dict):
        """The finished record of ``key`` if it was made with ``spec`` (None: compute it)."""
        path = self.path(key)
        if not path.exists() or not self.continuation.keeps(key):
            return None
        try:
            rec = json.loads(path.read_text())
        except ValueError:
            return None  # unreadable (cannot happen with atomic writes): recompute
        if not isinstance(rec, dict):
            return None  # not a record (a file written by something else): recompute
        made_by = rec.get("experiment", self.args.experiment)  # records before it: not known
        if made_by != self.args.experiment:  # tsne, confusion and toy_affinity share keys
            raise MescError(f"{path} is a run of experiments/{made_by}.py, not of "
                            f"{self.args.experiment}.py; give each experiment its own --out")
        want = _norm(spec)
        if isinstance(rec.get("spec"), dict) and "data_files" not in rec["spec"]:
            want = _without_data_files(want)  # a record from before the data files were recorded
        if rec.get("spec") != want:
            if self.args.redo:  # a continued --redo given other options: recompute it
                return None
            raise MescError(f"{path} holds a finished run made with other options "
                            f"({_diff(rec.get('spec'), want)}); choose another --out, or "
                            "pass --redo to recompute it")
        self.reused += 1
        self._note_data(rec["spec"])
        return rec

    def _note_data(self, spec):
        """Keep the data files of a run's spec, for the summary."""
        if isinstance(spec, dict) and "dataset" in spec and not self.data_files.get(
                spec["dataset"]):
            self.data_files[spec["dataset"]] = spec.get("data_files")

    def get_with_array(self, key: str, spec: dict):
        """(record, array) of ``key``'s finished run made with ``spec`` (:meth:`get`) and its
        runs/<key>.npy; (None, None) where either is missing or unreadable (cut off or written
        by something else; cannot happen with atomic writes): recompute it. Counted as reused
        only when both are there."""
        reused = self.reused
        rec = self.get(key, spec)
        if rec is None:
            return None, None
        try:
            return rec, np.load(self.path(key, ".npy"), allow_pickle=False)
        except (OSError, ValueError, EOFError):
            self.reused = reused  # computed again, not reused
            return None, None

    def put(self, key: str, spec: dict, result: dict, array=None) -> dict:
        """Record ``key``'s run, and ``array`` as runs/<key>.npy. The old record is removed
        before the array is written: a run stopped between the writes leaves no record of
        other options beside the new array."""
        rec = {"key": key, "experiment": self.args.experiment, "spec": _norm(spec),
               "result": _norm(result)}
        self.runs.mkdir(parents=True, exist_ok=True)
        if array is not None:
            self.path(key).unlink(missing_ok=True)
            files.save_npy(self.path(key, ".npy"), array)
        files.write_json(self.path(key), rec)
        self.continuation.note(key)
        self.computed += 1
        self._note_data(rec["spec"])
        return rec

    def finish(self, summary: dict, markdown: str, figures=()):
        """Write the summary JSON and the markdown (``markdown``, then the line naming the command
        that made it), list every file written, print the markdown."""
        from mesc_tf.files import atomic_write_text

        # The arguments main was given (parser(): None for the command line's).
        command = provenance.command(f"experiments/{self.args.experiment}.py",
                                     getattr(self.args, "argv", None))
        self.dir.mkdir(parents=True, exist_ok=True)
        files.write_json(self.summary_path, {
            "experiment": self.args.experiment, "request": self.request,
            "data_files": self.data_files, **summary, "command": command,
            "versions": provenance.versions(), "machine": provenance.machine()})
        md = self.dir / f"{self.args.experiment}.md"
        markdown += f"Command: `python {command}`\n"
        atomic_write_text(md, markdown)
        self.continuation.done()
        print(f"{self.computed} run(s) computed, {self.reused} reused from {self.runs}")
        for path in [self.summary_path, md, *figures]:
            print(f"wrote {_rel(path)}")
        print(markdown)


def check_not_folders(paths, what):
    """Refuse a folder where an output file (``what``: "summary", "figure") will be written:
    before any run, not by a failed write after every run (--force included)."""
    for path in paths:
        if Path(path).is_dir():
            raise MescError(f"{path} is a folder, where this experiment writes its {what}; "
                            "move it away or choose another --out")


def check_writable_dir(folder, option="--out DIR"):
    """cli.writable_dir, leaving nothing behind: the folders it makes for the test are removed
    again (the first file written makes them for good)."""
    folder = Path(folder).absolute()
    made = [p for p in (folder, *folder.parents) if not p.exists()]  # deepest first
    try:
        cli.writable_dir(folder, option)
    finally:
        for p in made:
            with contextlib.suppress(OSError):
                p.rmdir()


def _diff(old, new) -> str:
    if not isinstance(old, dict) or not isinstance(new, dict):
        return "unreadable"
    shown = "; ".join(f"{k}: {json.dumps(a)[:60]} vs {json.dumps(b)[:60]}"
                      for k, a, b in _differences(old, new)[:3])
    return shown or "same"


def _differences(old, new, prefix=""):
    """[(dotted key, old value, new value)] where two dicts differ, down into nested dicts."""
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append((f"{prefix}{k}", a, b))
    return out


def _used_sources(options: dict, datasets) -> dict:
    """The --weights and --tf1-checkpoint entries of ``options`` that reach ``datasets`` (a
    bare path reaches all), under their keys; none where none does."""
    out = {}
    for k, option in (("weights", "--weights"), ("tf1_checkpoint", "--tf1-checkpoint")):
        used = [v for v in options.get(k) or []
                if {None, *datasets} & set(per_dataset([v], option))]
        if used:
            out[k] = used
    return out


def request_of(args, **extra) -> dict:
    """The options that shape the outputs (for the summary's guard). An auto-encoder path for a
    dataset the run does not make (the Makefile's ORL checkpoint for `make toy`) is left out:
    the bare command makes the same summary."""
    req = {k: getattr(args, k, None) for k in
           ("datasets", "seeds", "epochs", "classes", "per_class", "methods", "set")}
    req.update(_used_sources(vars(args), args.datasets))
    if getattr(args, "no_pretrain", None):
        req["no_pretrain"] = True
    req.update(extra)
    return req


def run_main(main, argv=None, kept="finished runs are kept"):
    """Entry point: one-line errors (cli.main_guard); an interrupted run says what is kept and
    how to go on (finished work is reused: Results)."""
    return cli.main_guard(lambda: main(argv), interrupted=lambda: (
        f"interrupted; {kept}: rerun the same command to continue"))


# ---------------------------------------------------------------------------------------------
# Figures


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path, dpi=120):
    """Save a figure as PNG atomically (temporary file + rename) and close it."""
    from mesc_tf.files import atomic_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_file(path, "wb") as f:
            fig.savefig(f, dpi=dpi, bbox_inches="tight", format="png")
    finally:
        pyplot().close(fig)
    return path


def annotated_heatmap(ax, M, *, xticks, yticks, text=None, cmap="viridis", vmin=None, vmax=None,
                      fontsize=8):
    """imshow of M with a label in each cell (``text[i][j]``, default the value)."""
    M = np.asarray(M, np.float64)
    im = ax.imshow(M, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(M.shape[1]), [str(t) for t in xticks])
    ax.set_yticks(range(M.shape[0]), [str(t) for t in yticks])
    lo = np.nanmin(M) if vmin is None else vmin
    hi = np.nanmax(M) if vmax is None else vmax
    for i in range(M.shape[0]):
        for j in range(M.shape[1]):
            label = text[i][j] if text is not None else f"{M[i, j]:.2f}"
            if not label:
                continue
            v = M[i, j]
            frac = 0.5 if not np.isfinite(v) or hi <= lo else (v - lo) / (hi - lo)
            ax.text(j, i, label, ha="center", va="center", fontsize=fontsize,
                    color="black" if frac > 0.6 else "white")
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return im

