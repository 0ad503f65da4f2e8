"""Many settings, few trainings: the engine of ``experiments/sweep.py`` and
``experiments/table.py``.

A *trial* is one (Settings, seed) pair on one dataset with one auto-encoder: fine-tune, cluster,
score. Trials are not run one by one; they are grouped so that each fine-tuning is done once:

* **Post-clustering settings and seeds share one C.** Fine-tuning from a pretrained auto-encoder
  is deterministic (C starts at the constant ``coef_init``, full-batch Adam has no randomness,
  op determinism is on), so every trial that differs only in the post-clustering fields
  (:data:`mesc_tf.config.POST_FIELDS`: thr, subspace_dim, power, variant) or in the seed
  (which only seeds the spectral clustering) is clustered from the same trained C. Only with
  ``--no-pretrain`` does the seed change the training (he_normal initialisation), and then each
  seed is trained once.
* **Step counts share one run.** Adam's learning rate is constant, so the C after 50 steps of a
  200-step run is the C of a 50-step run. ``epochs=50,100,200`` is one 200-step run with a
  Keras callback (:func:`coef_snapshots`) copying C after steps 50 and 100.

So a training *group* is one value of the training fields other than ``epochs``
(:data:`mesc_tf.config.TRAIN_FIELDS`), trained for the largest requested step count; all its
trials are then clustered in the same process. Groups run in parallel worker processes (joblib,
loky backend: each worker imports TensorFlow once and runs many groups; with more than one job
every worker is limited to ``threads`` TF and BLAS threads so that the jobs do not fight for the
cores).

With a C cache (``coef_cache``, a folder) each trained C is also kept on disk under a key of
everything it depends on (:func:`coef_cache_key`), and a later group whose C's are all there
skips the fine-tuning: post-clustering sweeps on a long training then cost only the clustering.

Every finished trial is appended to a JSON-lines file as one line (``append_jsonl``: file lock,
one write, flush and fsync), so a kill loses only the trials still running. A trial's key is its
dataset, the content hash of its auto-encoder, its full Settings and its seed; a rerun skips
every trial whose key is already in the file (``done_keys``), so an interrupted sweep resumes.
The auto-encoder is resolved and hashed in the parent process and loaded in the workers
(:mod:`mesc_tf.sources`); training and clustering are the pipeline's own
(``pipeline.fine_tune``, ``pipeline.cluster``, ``metrics.evaluate``): nothing is re-implemented.
"""

from __future__ import annotations

import dataclasses
import datetime
import fcntl
import gc
import hashlib
import itertools
import json
import os
import re
import signal
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mesc_tf import memory
from mesc_tf.config import TRAIN_FIELDS, Settings, check_seed
from mesc_tf.errors import MescError, one_line
from mesc_tf.files import size_text
from mesc_tf.sources import AutoencoderSpec, autoencoder_hash

_DEFAULTS = Settings()
FIELD_TYPES = {f.name: type(getattr(_DEFAULTS, f.name)) for f in dataclasses.fields(Settings)}


# ---------------------------------------------------------------------------------------------
# Parsing: grids and seeds


def parse_value(field: str, text: str):
    """``text`` as a value of the Settings field ``field``: of its type (whole numbers for its
    int fields), finite, and one that Settings takes. MescError (one line) otherwise."""
    kind = FIELD_TYPES[field]
    text = text.strip()
    if kind is str:
        if not text:  # from --set FIELD= (a grid refuses empty values first)
            raise MescError(f"empty value for {field}")
        value = text
    else:
        try:
            value = float(text)
        except ValueError:
            raise MescError(f"{field} value {text!r} is not a number") from None
        if not np.isfinite(value):
            raise MescError(f"{field} value {text!r} must be finite")
        if kind is int:
            if value != int(value):
                raise MescError(f"{field} takes whole numbers, got {text!r}")
            value = int(value)
    try:
        Settings().replace(**{field: value})
    except MescError as e:
        raise MescError(f"{field}={value}: {e}") from None
    return value


def parse_grid(spec) -> dict[str, list]:
    """``'reg1=0.5,1 thr=0.1,0.2'`` (or a list of such tokens) → {field: [values...]}.

    Fields are :class:`~mesc_tf.config.Settings` fields; values are converted to the field's type
    and de-duplicated in order. Raises MescError (one line) for anything malformed.
    """
    tokens = spec.split() if isinstance(spec, str) else [t for s in spec for t in str(s).split()]
    grid: dict[str, list] = {}
    for token in tokens:
        field, eq, values = token.partition("=")
        field = field.strip().replace("-", "_")
        if not eq or not field:
            raise MescError(f"grid: {token!r} is not FIELD=V1,V2,...; write e.g. "
                            "'reg1=0.5,1 thr=0.1,0.2'")
        if field not in FIELD_TYPES:
            raise MescError(f"grid: unknown field {field!r}; choose from "
                            f"{', '.join(FIELD_TYPES)}")
        if field in grid:
            raise MescError(f"grid: {field} is given twice; list all its values once, "
                            f"e.g. {field}=1,2,3")
        if not values.strip():
            raise MescError(f"grid: no values for {field}; write e.g. {field}=1,2")
        if any(not v.strip() for v in values.split(",")):
            raise MescError(f"grid: an empty value in {token!r}; write e.g. {field}=1,2")
        try:  # each value on its own, before any training
            parsed = [parse_value(field, v) for v in values.split(",")]
        except MescError as e:
            raise MescError(f"grid: {e}; write e.g. {field}=V1,V2") from None
        grid[field] = list(dict.fromkeys(parsed))
    return grid


def expand_grid(base: Settings, grid: dict[str, list]) -> list[Settings]:
    """Every combination of the grid's values applied to ``base`` (validated by Settings)."""
    fields = list(grid)
    return [base.replace(**dict(zip(fields, combo)))
            for combo in itertools.product(*(grid[f] for f in fields))]


MAX_RANGE = 100_000  # values one 'lo-hi' may expand to (a larger one is a typo)


def parse_seeds(spec) -> list[int]:
    """'0,1,2' or '0-4' (or a list of such) → [0, 1, 2]; de-duplicated, order kept; each a
    seed NumPy takes (config.check_seed), written in ASCII digits; no empty item ('0,,1')."""
    out = []
    for text in ([spec] if isinstance(spec, str) else [str(s) for s in spec]):
        items = text.split(",")
        if len(items) > 1 and any(not item.strip() for item in items):
            raise MescError(f"--seeds: an empty value in {text!r}; write e.g. 0,1,2")
        for tok in (t for item in items for t in item.split()):
            lo, dash, hi = tok.partition("-")
            ends = [lo, hi] if dash and lo else [tok]
            if not all(re.fullmatch(r"-?[0-9]+", e) for e in ends):  # not int()'s '+1', '٣'
                raise MescError(f"--seeds: {tok!r} is not a whole number or a range like 0-4")
            out.extend(_seed_range(tok, [check_seed(int(e), "--seeds: a seed") for e in ends]))
    if not out:
        raise MescError("--seeds: give at least one value, e.g. 0,1,2")
    return list(dict.fromkeys(out))


def _seed_range(tok, ends) -> range:
    """The seeds of one item of --seeds: a seed, or a range lo-hi (checked)."""
    if ends[-1] < ends[0]:
        raise MescError(f"--seeds: {tok!r} is an empty range; write the smaller end first")
    if ends[-1] - ends[0] >= MAX_RANGE:
        raise MescError(f"--seeds: {tok!r} spans more than {MAX_RANGE} values")
    return range(ends[0], ends[-1] + 1)


def seeds_text(seeds) -> str:
    """Seeds as parse_seeds reads them, runs compacted: [0, 1, 2, 5] → '0-2,5'."""
    runs: list[list[int]] = []
    for s in sorted(set(seeds)):
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in runs) or "none"


def normalized(settings: Settings) -> dict:
    """Settings as a dict with every value in its field's type (stable keys and JSON)."""
    return {k: FIELD_TYPES[k](v) for k, v in settings.to_dict().items()}


# ---------------------------------------------------------------------------------------------
# The results file


def _typed(settings: dict) -> dict:
    """A record's settings with every value in its field's type (a file may hold 1 for 1.0)."""
    return {k: FIELD_TYPES[k](settings[k]) for k in FIELD_TYPES}


def trial_key(dataset: str, ae_ident: str, settings, seed: int) -> str:
    s = _typed(settings if isinstance(settings, dict) else normalized(settings))
    return json.dumps({"dataset": dataset, "autoencoder": autoencoder_hash(ae_ident),
                       "settings": s, "seed": int(seed)}, sort_keys=True)


def record_key(rec: dict) -> str:
    return trial_key(rec["dataset"], rec["autoencoder_id"], rec["settings"], rec["seed"])


def archive_paths(path) -> list[Path]:
    """The archive parts read before a results file: ``orl.jsonl`` → ``orl.part1.jsonl``,
    ``orl.part2.jsonl``, … in numeric order."""
    path = Path(path)
    parts = []
    for p in path.parent.glob(f"{path.stem}.part*{path.suffix}"):
        number = p.name[len(path.stem) + len(".part"):len(p.name) - len(path.suffix)]
        if number.isdigit():
            parts.append((int(number), p))
    return [p for _, p in sorted(parts)]


_KIND_NAMES = {int: "a whole number", float: "a number", str: "a string"}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def record_problem(rec) -> str | None:
    """What keeps a parsed JSON line from being a trial record (the keys and types that
    resuming and the summaries read), or None for a record."""
    if not isinstance(rec, dict):
        return "not a JSON object"
    missing = [k for k in ("dataset", "autoencoder_id", "seed", "settings", "metrics", "error",
                           "timings") if k not in rec]
    if missing:
        return f"no {', '.join(missing)}"
    for key in ("dataset", "autoencoder_id"):
        if not isinstance(rec[key], str):
            return f"{key} is not a string"
    if not isinstance(rec["seed"], int) or isinstance(rec["seed"], bool) or rec["seed"] < 0:
        return "seed is not a whole number >= 0"
    if not isinstance(rec["settings"], dict):
        return "settings is not an object"
    for field, kind in FIELD_TYPES.items():
        if field not in rec["settings"]:
            return f"settings has no {field}"
        value = rec["settings"][field]
        ok = isinstance(value, str) if kind is str else _number(value) and (
            kind is float or isinstance(value, int))  # an int field: no 2.0
        if not ok:
            return f"settings.{field} is not {_KIND_NAMES[kind]}"
    if not (rec["error"] is None or isinstance(rec["error"], str)):
        return "error is neither null nor a string"
    if not isinstance(rec["timings"], dict):
        return "timings is not an object"
    if rec["metrics"] is not None:
        if not isinstance(rec["metrics"], dict):
            return "metrics is neither null nor an object"
        for m in ("acc", "nmi"):
            if not _number(rec["metrics"].get(m)):
                return f"metrics.{m} is not a number"
    return None


def read_records(path) -> tuple[list[dict], list[tuple[Path, int]]]:
    """The trial records of a JSON-lines file and its unreadable (torn) lines as (file, line
    number) pairs. A torn line (a kill in the middle of a write) is one that starts as every
    record does (``{"``) but does not parse as JSON; any other line that is not a trial record
    (:func:`record_problem`, or not JSON at all) is a MescError
    naming it: the line to fix where the file holds trial records too (an edit, a merge), else
    a file that is something else.

    Records in its archive parts (``archive_paths``) come first. Sweeps append to the plain
    file only; renaming a finished file to the next part (``mv orl.jsonl orl.part3.jsonl``)
    archives it, which keeps each file in the repository small.
    """
    path = Path(path)
    records, torn = [], []
    for source in (*archive_paths(path), path):
        if not source.exists():
            continue
        if source.is_dir():
            raise MescError(f"the sweep results {source} is a folder; pass the path of a "
                            ".jsonl file as --out")
        try:
            with open(source, encoding="utf-8") as f:
                lines = f.readlines()
        except (OSError, UnicodeDecodeError) as e:
            raise MescError(f"cannot read the sweep results {source}: {e}; restore the file "
                            "(e.g. git checkout) or pass another --out") from e
        first, bad = len(records), None  # bad: the first line that is not a trial record
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                problem = record_problem(rec)
            except ValueError:
                if line.startswith('{"'):  # a torn record starts as every record does
                    torn.append((source, number))
                    continue
                problem = "not JSON"
            if problem:
                bad = bad or (number, problem)
            else:
                records.append(rec)
        if bad and len(records) > first:  # trial records and a bad line (an edit, a merge)
            raise MescError(f"{source}, line {bad[0]}: not a trial record ({bad[1]}); fix or "
                            "delete that line, or pass another --out FILE")
        if bad:
            raise MescError(f"{source} is not a file of sweep results (line {bad[0]}: "
                            f"{bad[1]}); pass another --out FILE")
    return records, torn


def torn_notes(torn) -> list[str]:
    """One line per file for read_records' torn lines: where they are and what becomes of
    them (skipped; the trial they held is missing from the file, so a sweep runs it again)."""
    by_file: dict[Path, list[int]] = {}
    for source, number in torn:
        by_file.setdefault(source, []).append(number)
    notes = []
    for source, numbers in by_file.items():
        shown = ", ".join(map(str, numbers[:10])) + (
            f" and {len(numbers) - 10} more" if len(numbers) > 10 else "")
        notes.append(f"note: {source}: line{'s' if len(numbers) > 1 else ''} {shown} unreadable "
                     "(torn by a kill), skipped; a trial missing from the file is run again")
    return notes


def done_keys(records, retry_errors=False) -> set[str]:
    return {record_key(r) for r in records if not (retry_errors and r.get("error"))}


def append_jsonl(path, record: dict):
    """Append one JSON line, atomically with respect to other writers, and fsync it.

    A line torn by an earlier kill (no final newline) is closed first, so it stays one bad line
    that :func:`read_records` skips instead of corrupting this one.
    """
    from mesc_tf.files import json_default

    data = (json.dumps(record, default=json_default, sort_keys=True) + "\n").encode()
    Path(path).parent.mkdir(parents=True, exist_ok=True)  # the first record makes the folder
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size:
            with open(path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    data = b"\n" + data
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)  # releases the lock


# ---------------------------------------------------------------------------------------------
# Planning: trials → training groups


@dataclass(frozen=True)
class Trial:
    settings: Settings
    seed: int


@dataclass(frozen=True)
class Group:
    """One fine-tuning (``train``, run for ``train.epochs`` steps) and the trials it serves."""

    train: Settings
    trials: tuple[Trial, ...]
    init_seed: int  # seeds the runtime before the auto-encoder is built (matters only for "none")
    tag: object = None  # the caller's label, returned with the result (and the records' method)

    @property
    def steps(self) -> list[int]:
        return sorted({t.settings.epochs for t in self.trials})


def plan(settings_list, seeds, ae: AutoencoderSpec, dataset: str, done=frozenset()):
    """Group the pending trials by training. Returns (groups, number of trials already done)."""
    groups: dict[tuple, list[Trial]] = {}
    skipped = 0
    for s in settings_list:
        for seed in seeds:
            if trial_key(dataset, ae.ident, s, seed) in done:
                skipped += 1
                continue
            train = tuple(getattr(s, f) for f in TRAIN_FIELDS if f != "epochs")
            gkey = train if ae.deterministic else (*train, seed)
            groups.setdefault(gkey, []).append(Trial(s, int(seed)))
    out = []
    for trials in groups.values():
        first = trials[0]
        steps = max(t.settings.epochs for t in trials)
        out.append(Group(first.settings.replace(epochs=steps), tuple(trials),
                         0 if ae.deterministic else first.seed))
    return out, skipped


# ---------------------------------------------------------------------------------------------
# Workers


_DATA_CACHE: dict = {}
_THREADS_DONE = False


def _limit_threads(threads):
    """Limit this process' TF thread pools (before TF starts; once it has, they stay as they
    are and a RuntimeWarning says so where their size differs)."""
    global _THREADS_DONE
    if not threads or _THREADS_DONE:
        return
    _THREADS_DONE = True
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(int(threads))
        tf.config.threading.set_inter_op_parallelism_threads(int(threads))
    except RuntimeError:  # TF already initialised in this process (e.g. the jobs=1 parent)
        if tf.config.threading.get_intra_op_parallelism_threads() != int(threads):
            warnings.warn(f"TensorFlow had started before the limit of {threads} thread(s) per "
                          "job: it applies to BLAS only here", RuntimeWarning, stacklevel=2)


def _dataset(dataset, data_dir):
    from mesc_tf import data

    key = (dataset, str(data_dir))
    if key not in _DATA_CACHE:
        _DATA_CACHE.clear()  # one dataset per worker at a time
        _DATA_CACHE[key] = data.load_dataset(dataset, data_dir)
    return _DATA_CACHE[key]


def coef_snapshots(steps):
    """A Keras callback that copies C (as float32 numpy) after each step count in ``steps``.

    ``callback.coefs[s]`` is C after ``s`` full-batch steps and ``callback.seconds[s]`` the
    training time until then; step 0 (C before training) is taken at the start of fit.
    """
    import keras

    class CoefSnapshots(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.steps = sorted({int(s) for s in steps})
            self.coefs, self.seconds = {}, {}

        def _take(self, step):
            self.coefs[step] = np.array(self.model.coef.numpy(), dtype=np.float32, copy=True)
            self.seconds[step] = time.perf_counter() - self._t0

        def on_train_begin(self, logs=None):
            self._t0 = time.perf_counter()
            if 0 in self.steps:
                self._take(0)

        def on_epoch_end(self, epoch, logs=None):
            if epoch + 1 in self.steps:
                self._take(epoch + 1)

    return CoefSnapshots()


# ---------------------------------------------------------------------------------------------
# The C cache: trained C's kept on disk, so a later sweep of post-clustering settings (or seeds)
# on the same training skips the fine-tuning. Training is deterministic for a given machine and
# thread count, so the key holds those too: their rounding moves C's last bits. So do the
# TensorFlow and Keras versions, and this package's code that loads the data and the
# auto-encoder and runs the step.
_TRAINING_MODULES = ("data.py", "weights.py", "model.py", "losses.py", "training.py")


def _training_code() -> str:
    """SHA-256 (16 hex digits) of the modules a trained C depends on (_TRAINING_MODULES)."""
    digest = hashlib.sha256()
    for name in _TRAINING_MODULES:
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()[:16]


def coef_cache_key(dataset: str, ae_ident: str, train: Settings, steps: int,
                   init_seed: int = 0, threads: int | None = None, data_files=None) -> str:
    """The cache key (JSON) of C after ``steps`` steps of ``train``'s fine-tuning with
    ``threads`` TF threads (None: TF's own count) on this machine, from the data files
    ``data_files`` (data.Dataset.file_hashes: a C of other images is another entry), with these
    TensorFlow and Keras versions and this training code (:func:`_training_code`)."""
    import keras
    import tensorflow as tf

    from mesc_tf.provenance import machine

    fields = {f: FIELD_TYPES[f](getattr(train, f)) for f in TRAIN_FIELDS if f != "epochs"}
    here = {k: v for k, v in machine().items() if k != "platform"}
    return json.dumps({"dataset": dataset, "autoencoder": autoencoder_hash(ae_ident),
                       "data": data_files, "train": fields, "steps": int(steps),
                       "init_seed": int(init_seed),
                       "tensorflow": tf.__version__, "keras": keras.__version__,
                       "code": _training_code(), "threads": threads, "machine": here},
                      sort_keys=True)


def _cache_paths(cache_dir, key):
    name = hashlib.sha256(key.encode()).hexdigest()[:32]
    return Path(cache_dir) / f"{name}.npy", Path(cache_dir) / f"{name}.json"


def _cache_entry(cache_dir, key, n=None):
    """(C memory-mapped, its metadata) stored under ``key``, or None if absent, unreadable, not
    a square float32 matrix or (``n`` given) not n×n. Only the .npy header is read here."""
    npy, meta = _cache_paths(cache_dir, key)
    try:
        info = json.loads(meta.read_text(encoding="utf-8"))
        if not isinstance(info, dict) or info.get("key") != key:
            return None
        coef = np.load(npy, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError):  # EOFError: an empty .npy
        return None
    square = coef.ndim == 2 and coef.shape[0] == coef.shape[1] and coef.dtype == np.float32
    return (coef, info) if square and (n is None or coef.shape[0] == n) else None


def cache_load(cache_dir, key, n):
    """(C, seconds it took to train) from the cache, or None if absent, unreadable or not n×n."""
    entry = _cache_entry(cache_dir, key, n)
    if entry is None:
        return None
    try:
        coef = np.array(entry[0])  # read it all now, not through the map
    except OSError:
        return None
    return coef, float(entry[1].get("train_s", 0.0))


def cache_has(cache_dir, key) -> bool:
    """Whether the cache holds a C under ``key`` (for the plan a sweep prints before training,
    --dry-run's): what cache_load would read, short of checking its size against the data."""
    return _cache_entry(cache_dir, key) is not None


def group_in_cache(group: Group, cache_dir, dataset, ae: AutoencoderSpec, threads=None,
                   data_files=None) -> bool:
    """Whether run_group will read every C of ``group`` from ``cache_dir`` (None: no cache)
    instead of fine-tuning: the same keys as _trained_coefs."""
    return bool(cache_dir) and all(
        cache_has(cache_dir, coef_cache_key(dataset, ae.ident, group.train, s, group.init_seed,
                                            threads, data_files)) for s in group.steps)


def cache_store(cache_dir, key, coef, train_s):
    """Write C, then its key, each atomically: a reader never sees a half-written entry."""
    from mesc_tf.files import atomic_write_text, save_npy

    npy, meta = _cache_paths(cache_dir, key)
    save_npy(npy, coef)
    atomic_write_text(meta, json.dumps({"key": key, "train_s": train_s}, sort_keys=True))


# Clustering failures that are a result of the settings (ARPACK not converging, a C without
# structure, more clusters than samples, ...): recorded in the trial's line instead of
# stopping the sweep.
_CLUSTER_ERRORS = (MescError, ArithmeticError, ValueError, RuntimeError, np.linalg.LinAlgError)


@dataclass
class _Trained:
    """A group's C's, one per step count (``snaps``), and how they were had."""
    snaps: object  # coef_snapshots: .coefs and .seconds by step count
    load_s: float
    train_s: float
    steps_run: int
    cache_use: str | None  # "read", "written", "not written" or None (no cache)
    cache_error: str | None = None  # why it was not written


def run_group(group: Group, *, dataset, data_dir, ae: AutoencoderSpec, method=None, out=None,
              threads=None, verbose=0, coef_cache=None, parent_pid=None):
    """Fine-tune once and cluster every trial of ``group``; the worker side of a sweep.

    Each trial's record is appended to ``out`` (JSON lines) as soon as it is scored, when
    ``out`` is given. With ``coef_cache`` (a folder) the trained C's are read from it when all
    of the group's step counts are there (no training then) and written to it otherwise.
    Returns {"records": [...], "seconds": wall time of the whole group, "train_s", "load_s",
    "steps_run": fine-tuning steps taken (0 when every C came from the cache), "tag": the
    group's, "coef_cache": "read", "written", "not written" or None, "coef_cache_error": why
    it was not written, or None}. ``parent_pid``: in a
    worker, the sweep's process; once it is gone (killed), nothing more is trained or written.
    """
    _check_parent(parent_pid)
    _limit_threads(threads)
    from mesc_tf.provenance import code_revision

    start = time.perf_counter()
    ds = _dataset(dataset, data_dir)
    trained = _trained_coefs(group, ds, dataset, ae, threads, verbose, coef_cache, start)
    records, code = [], code_revision()  # records match without it; see README, "Sweeps"
    for trial in sorted(group.trials, key=lambda t: (t.settings.epochs, t.seed)):
        rec = _scored_trial(trial, group, trained, ds, dataset, ae, method, code)
        _check_parent(parent_pid)
        if out is not None:
            append_jsonl(out, rec)
        records.append(rec)
    return {"records": records, "seconds": time.perf_counter() - start,
            "train_s": trained.train_s, "load_s": trained.load_s,
            "steps_run": trained.steps_run, "tag": group.tag, "coef_cache": trained.cache_use,
            "coef_cache_error": trained.cache_error}


def _check_parent(parent_pid):
    """Stop a worker whose sweep was killed (SIGKILL leaves loky's workers running: they
    would go on through the queued groups and append records the rerun also makes)."""
    if parent_pid is not None and os.getppid() != parent_pid:
        raise RuntimeError(f"the sweep process {parent_pid} is gone; this worker stops")


def _trained_coefs(group, ds, dataset, ae, threads, verbose, coef_cache, start) -> _Trained:
    """The C after each of the group's step counts: from the cache where it holds them all,
    else by one fine-tuning (then stored in the cache, if one is given)."""
    from mesc_tf import pipeline
    from mesc_tf.config import get_config
    from mesc_tf.training import configure_runtime

    n, steps = len(ds.x), group.steps
    keys = {s: coef_cache_key(dataset, ae.ident, group.train, s, group.init_seed, threads,
                              ds.file_hashes) for s in steps} if coef_cache else {}
    cached = {s: cache_load(coef_cache, k, n) for s, k in keys.items()}
    snaps = coef_snapshots(steps)
    if keys and all(cached.values()):  # no training
        for s, (coef, seconds) in cached.items():
            snaps.coefs[s], snaps.seconds[s] = coef, seconds
        return _Trained(snaps, time.perf_counter() - start, 0.0, 0, "read")
    cfg = get_config(dataset)
    need = training_memory(n, cfg.arch, len(steps))
    have, available = memory.available_text()
    if need > have:  # memory_check passed, but other processes have taken memory since
        raise MescError(f"{dataset}: training with {len(steps)} snapshots of C needs about "
                        f"{size_text(need)} but {available}; sweep fewer epochs values at "
                        "once, or fewer --jobs")
    configure_runtime(group.init_seed)
    autoencoder = ae.load(cfg.arch)
    load_s = time.perf_counter() - start
    model, _history, train_s = pipeline.fine_tune(ds.x, group.train, autoencoder,
                                                  verbose=verbose, callbacks=[snaps])
    steps_run = int(model.optimizer.iterations.numpy())
    # Free the model before clustering (a long-lived worker trains many). Not
    # keras.backend.clear_session(): in-process (jobs=1) it would also drop the caller's seed.
    del model, autoencoder
    gc.collect()
    cache_use = cache_error = None
    if keys:
        cache_use = "written"
        try:
            for s, k in keys.items():
                cache_store(coef_cache, k, snaps.coefs[s], snaps.seconds[s])
        except (OSError, MescError) as e:  # a full disk must not cost the trials their C
            cache_use, cache_error = "not written", str(e)  # (files' writers raise MescError)
    return _Trained(snaps, load_s, train_s, steps_run, cache_use, cache_error)


def _scored_trial(trial, group, trained, ds, dataset, ae, method, code) -> dict:
    """One trial's record: its C (the snapshot at its step count) clustered with its seed."""
    from mesc_tf import pipeline
    from mesc_tf.metrics import evaluate, nmi

    s = trial.settings
    rec = {
        "dataset": dataset, "method": method or group.tag, "seed": trial.seed,
        "settings": normalized(s), "autoencoder": ae.describe(),
        "autoencoder_id": ae.ident, "n_samples": len(ds.x), "data_files": ds.file_hashes,
        "code": code, "metrics": None,
        "error": None,
        "shared_training": {"steps_run": trained.steps_run, "snapshots": group.steps,
                            "trials": len(group.trials),
                            **({"coef_cache": trained.cache_use} if trained.cache_use else {})},
    }
    t0 = time.perf_counter()
    try:
        info = {}
        labels, post_timings = pipeline.cluster(trained.snaps.coefs[s.epochs], ds.n_clusters, s,
                                                seed=trial.seed, info=info)
        rec["metrics"] = {**evaluate(ds.y, labels), "nmi_max": nmi(ds.y, labels, "max")}
        rec["postcluster"] = info
    except _CLUSTER_ERRORS as e:
        post_timings = {}
        rec["error"] = one_line(e)
    rec["timings"] = {"train_s": trained.snaps.seconds.get(s.epochs, 0.0),
                      "train_run_s": trained.train_s, "steps": s.epochs,
                      "post_s": time.perf_counter() - t0, **post_timings}
    rec["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    return rec


def _in_parent(jobs, n_groups, threads) -> bool:
    """Whether run_groups runs its groups in this process. A thread limit with --jobs above 1
    needs a fresh worker even for one group: TensorFlow's pools cannot shrink once started."""
    return jobs <= 1 or (n_groups <= 1 and not threads)


def run_groups(groups, *, jobs=1, threads=None, **kwargs):
    """Run groups (in ``jobs`` loky worker processes when > 1); yields results as they finish.
    ``threads`` limits TensorFlow's and BLAS's threads for each group."""
    if _in_parent(jobs, len(groups), threads):
        from threadpoolctl import threadpool_limits

        for g in groups:
            with threadpool_limits(limits=int(threads) if threads else None, user_api="blas"):
                result = run_group(g, threads=threads, **kwargs)
            yield result
        return
    from multiprocessing import resource_tracker

    from joblib import Parallel, delayed

    from mesc_tf.cli import interrupts_deferred

    backend = {"inner_max_num_threads": int(threads)} if threads else {}
    parallel = Parallel(n_jobs=jobs, backend="loky", return_as="generator_unordered",
                        **backend)
    results = None
    try:
        # Starts the workers: a Ctrl-C or SIGTERM between a worker's fork and its registration
        # would leave it out of those joblib kills on the way out (it went on alone).
        with interrupts_deferred():
            # They start with Ctrl-C blocked (fork and exec keep the mask), as this process
            # stops them: else each printed a KeyboardInterrupt traceback from its imports.
            # multiprocessing's resource tracker first: starting it unblocks SIGINT (CPython's).
            resource_tracker.ensure_running()
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                results = parallel(delayed(run_group)(g, threads=threads,
                                                      parent_pid=os.getpid(), **kwargs)
                                   for g in groups)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for result in results:  # not yield from, which closes results before the finally
            yield result
    except BaseException:  # Ctrl-C, SIGTERM, a failed group: the workers are killed below
        _quiet_loky_manager_key_error()
        raise
    finally:
        if results is not None:  # stops the workers now, even where this frame lives on
            with warnings.catch_warnings():  # joblib's note that it cancelled their groups
                warnings.filterwarnings("ignore", category=UserWarning, module=r"joblib\.")
                results.close()


def _quiet_loky_manager_key_error():
    """Drop the KeyError that loky's manager thread can raise (``pending_work_items[work_id]``)
    when the workers are killed while one starts: threading printed its traceback under the
    run's one error line, though the run stopped as it should. Other errors keep theirs."""
    previous = threading.excepthook
    if getattr(previous, "quiets_loky", False):
        return

    def hook(args):
        if not (args.exc_type is KeyError and args.thread is not None
                and args.thread.name == "ExecutorManagerThread"):
            previous(args)

    hook.quiets_loky = True
    threading.excepthook = hook


def training_memory(n, arch, n_snapshots):
    """Bytes one training of a group needs: a run's estimate plus 4n² for every snapshot of C
    (one per epochs value of the group) but one."""
    return memory.memory_estimate(n, arch) + 4 * n * n * max(n_snapshots - 1, 0)


def memory_check(dataset, n_jobs, n_snapshots, trains=True):
    """Refuse a parallel run whose workers together would not fit in memory. ``trains``
    False: every group reads its C's from the cache and only clusters them."""
    from mesc_tf.config import get_config

    cfg = get_config(dataset)
    n = cfg.n_samples
    each = (training_memory(n, cfg.arch, n_snapshots) if trains else
            memory.clustering_estimate(n) + 4 * n * n * max(n_snapshots - 1, 0))
    need = n_jobs * each
    have, available = memory.available_text()
    if need > have:
        raise MescError(f"{n_jobs} jobs on {dataset} need about {size_text(need)} but "
                        f"{available}; use fewer --jobs or fewer epochs values")


# ---------------------------------------------------------------------------------------------
# Summaries


def stats(values) -> dict:
    """median, mean and sample std (ddof=1; None for one value: no spread to show) of a list
    of numbers."""
    v = np.asarray(values, np.float64)
    return {"median": float(np.median(v)), "mean": float(v.mean()),
            "std": float(v.std(ddof=1)) if v.size > 1 else None, "n": int(v.size)}


def _mean_std(stat) -> str:
    text = f"{100 * stat['mean']:.2f}"
    return text if stat["std"] is None else f"{text} ± {100 * stat['std']:.2f}"


def summarize(records, keys=None) -> list[dict]:
    """Per setting (over seeds): ACC/NMI stats, best first by median ACC, ties broken by
    median NMI, then mean ACC, then the settings (in field order). Settings with fewer
    finished seeds than the most any has (a file holding several seed sets, or failed trials)
    come after the others.

    ``keys`` restricts to those trial keys (e.g. the current grid). Failed trials are counted
    in ``errors`` and left out of the statistics.
    """
    # One record per trial: the first that succeeded, else the first (a trial retried with
    # --retry-errors, or written twice by workers of a killed sweep, counts once).
    chosen: dict[str, dict] = {}
    for r in records:
        k = record_key(r)
        if keys is None or k in keys:
            if k not in chosen or (chosen[k].get("error") and not r.get("error")):
                chosen[k] = r
    rows: dict[str, dict] = {}
    for r in chosen.values():
        settings = _typed(r["settings"])  # one row per setting, as record_key counts them
        skey = json.dumps({"ae": autoencoder_hash(r["autoencoder_id"]), "s": settings},
                          sort_keys=True)
        row = rows.setdefault(skey, {"settings": settings, "autoencoder_id":
                                     r["autoencoder_id"], "seeds": [], "acc": [], "nmi": [],
                                     "errors": 0})
        if r.get("error") or not r.get("metrics"):
            row["errors"] += 1
            continue
        row["seeds"].append(r["seed"])
        row["acc"].append(r["metrics"]["acc"])
        row["nmi"].append(r["metrics"]["nmi"])
    out = []
    for row in rows.values():
        if row["acc"]:
            row["acc_stats"], row["nmi_stats"] = stats(row["acc"]), stats(row["nmi"])
        out.append(row)
    most = max((len(r["seeds"]) for r in out), default=0)
    # Exact ties last by the settings, not by the order the file holds them (--jobs workers
    # append in the order they finish).
    out.sort(key=lambda r: (len(r["seeds"]) < most,
                            *(-r[f"{m}_stats"][s] if r["acc"] else 1
                              for m, s in (("acc", "median"), ("nmi", "median"), ("acc", "mean"))),
                            *(r["settings"][f] for f in FIELD_TYPES),
                            autoencoder_hash(r["autoencoder_id"])))
    return out


def _value_text(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def format_summary(rows, top=10, fields=None, grid=(), seeds=None) -> str:
    """A plain-text table of the best ``top`` rows; ``fields`` are the settings to show
    (default: those that vary among the rows). Where none varies (one row), the ``grid``'s
    fields are shown, or without a grid every setting in a line above the table: the reader
    always sees which setting a row is. ``seeds``: the seeds asked for; a row over fewer
    finished seeds shows 'k of n' in the seeds column, not k alone."""
    if not rows:
        return "no finished trials"
    above = []
    if fields is None:  # the fields that vary
        fields = [f for f in FIELD_TYPES if len({json.dumps(r["settings"][f]) for r in rows}) > 1]
        if not fields and grid:
            fields = [f for f in FIELD_TYPES if f in grid]
        elif not fields:
            above = ["settings: " + " ".join(f"{f}={_value_text(v)}"
                                             for f, v in rows[0]["settings"].items())]
    head = ["rank", *fields, "ACC median", "ACC mean ± std", "NMI median", "NMI mean ± std",
            "seeds", "failed"]
    lines = []
    for i, r in enumerate(rows[:top], 1):
        vals = [str(i)] + [_value_text(r["settings"][f]) for f in fields]
        if r["acc"]:
            a, m = r["acc_stats"], r["nmi_stats"]
            vals += [f"{100 * a['median']:.2f}", _mean_std(a), f"{100 * m['median']:.2f}",
                     _mean_std(m)]
        else:
            vals += ["-"] * 4
        done = len(r["seeds"])
        asked = len(set(seeds)) if seeds is not None else done
        vals += [str(done) if done >= asked else f"{done} of {asked}", str(r["errors"])]
        lines.append(vals)
    widths = [max(len(x) for x in col) for col in zip(head, *lines)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    return "\n".join([*above, fmt.format(*head)] + [fmt.format(*v) for v in lines])
