"""Shared pieces of the command-line scripts in ``experiments/``.

Bad input ends in one line on stderr (``error: what, where, what to do``) and exit status 2,
never a traceback; a run that was started and fails leaves nothing half-written. The project's
warnings (MescWarning) are one ``warning:`` line each, and the run goes on.
"""

import argparse
import contextlib
import datetime
import os
import shutil
import signal
import sys
import tempfile
import threading
import warnings
from pathlib import Path

from mesc_tf.config import DATASETS, FRAMEWORKS, REGULARIZERS, VARIANTS, check_seed
from mesc_tf.errors import MescError, MescWarning, one_line


class _ListOnce(argparse._StoreAction):
    """A list option (nargs '+' or '*') given twice is refused: argparse would keep the last
    list and drop the first without a word (``--seeds 0 --seeds 1`` ran seed 1 only)."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = vars(namespace).setdefault(_GIVEN, set())
        if self in given:
            raise argparse.ArgumentError(self, "given twice; list all its values after one "
                                         f"{option_string}")
        given.add(self)
        super().__call__(parser, namespace, values, option_string)


_GIVEN = "_list_options_given"  # _ListOnce's record on the namespace, removed after parsing


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors (argparse prints the usage block first) that also refuses
    an empty path, which would otherwise mean the current folder or the default file, and a
    list option given twice (``action="extend"`` where repeating it should add values)."""

    PATH_OPTIONS = ("out", "weights", "tf1_checkpoint", "save_coef", "init", "tensorboard",
                    "data_dir", "coef_cache", "json", "coef", "against", "tf1_dir", "dir")

    def __init__(self, *args, **kwargs):
        # No prefixes of options: `--epoch 20` would otherwise be --epochs, past the Makefile's
        # checks of ARGS (which spell options in full) and with the last value winning.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"error: {message}; see {self.prog} --help\n")

    def parse_known_args(self, args=None, namespace=None):
        for action in self._actions:  # those of argument groups too
            if (type(action) is argparse._StoreAction and action.option_strings
                    and action.nargs in ("+", "*")):
                action.__class__ = _ListOnce
        ns, rest = super().parse_known_args(args, namespace)
        vars(ns).pop(_GIVEN, None)
        return ns, rest

    def parse_args(self, args=None, namespace=None):
        ns = super().parse_args(args, namespace)
        for name in self.PATH_OPTIONS:
            value = getattr(ns, name, None)
            if value == "" or (isinstance(value, list) and "" in value):
                self.error(f"--{name.replace('_', '-')} is empty; give a path")
        return ns


def seed_arg(text) -> int:
    """argparse type of a seed: a whole number NumPy can be seeded with."""
    try:
        return check_seed(text, "a seed")
    except MescError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def at_least(low):
    """argparse type of a whole number >= low; its error names the option and the value."""

    def whole(text) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {low}, got {text!r}") \
                from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    return whole


def add_settings_args(p, post=True):
    """Options that override a dataset's settings (config.Settings); None keeps the config.
    ``post=False``: the fine-tuning settings only (a script that does not cluster)."""
    p = p.add_argument_group(f"fine-tuning{' and clustering' if post else ''} settings "
                             "(default: the dataset's, mesc_tf/config.py)")
    p.add_argument("--framework", choices=FRAMEWORKS, help="decoupled (MESC) or coupled (DSC-Net)")
    p.add_argument("--regularizer", choices=REGULARIZERS, help="regulariser on C")
    p.add_argument("--reg1", type=float, help="weight of the regulariser (code constant)")
    p.add_argument("--reg2", type=float, help="weight of ½Σ(Z−CZ)² (code constant)")
    p.add_argument("--lr", type=float, help="Adam learning rate")
    p.add_argument("--epochs", type=int, help="full-batch fine-tuning steps")
    p.add_argument("--coef-init", type=float, help="initial value of every entry of C")
    p.add_argument("--recon-scale", type=float, help="weight of the reconstruction term (DSC-Net's "
                   "½ on ORL and EYaleB: 0.5)")
    if not post:
        p.set_defaults(thr=None, subspace_dim=None, power=None, variant=None)
        return
    p.add_argument("--thr", type=float, help="thrC ratio ρ")
    p.add_argument("--subspace-dim", type=int, help="post_proC d (SVD rank d·K+1)")
    p.add_argument("--power", type=float, help="post_proC exponent")
    p.add_argument("--variant", choices=VARIANTS, help="post_proC pre-treatment of C")


def settings_from_args(base, args):
    return base.replace(framework=args.framework, regularizer=args.regularizer, reg1=args.reg1,
                        reg2=args.reg2, lr=args.lr, epochs=args.epochs,
                        coef_init=args.coef_init, recon_scale=args.recon_scale, thr=args.thr,
                        subspace_dim=args.subspace_dim, power=args.power, variant=args.variant)


def add_dataset_arg(p):
    p.add_argument("--dataset", required=True, type=str.lower, choices=list(DATASETS),
                   help="benchmark dataset")
    p.add_argument("--data-dir", help="folder holding the dataset files "
                   "(default: $MESC_DATA_DIR, then ./data)")


def prepare_out_dir(out, default_name, *, force=False, resume=False):
    """Create (or reuse, with --resume/--force) a run directory, checking it is writable.

    A directory that already holds results.json is refused unless ``force`` or ``resume``.
    Returns (path, made): what a failed run removes (main_guard's cleanup list), the directory
    if this call made it and, as :class:`IfEmpty`, the parents it made.
    """
    if out is None:  # a new directory per run, even for runs started in the same second
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        for i in range(1, 10000):
            out = Path("runs") / (f"{default_name}-{stamp}" + (f"-{i}" if i > 1 else ""))
            parents = _missing_parents(out)  # runs/ on the first run
            try:
                out.mkdir(parents=True)  # atomic: two runs never get the same directory
            except FileExistsError:
                continue
            except OSError:
                break  # reported below
            try:
                return writable_dir(out), [out, *parents]
            except MescError:
                shutil.rmtree(out, ignore_errors=True)
                raise
    out = Path(out)
    if (out / "results.json").exists() and not (force or resume):
        raise MescError(f"{out} already holds a finished run (results.json); choose another --out, "
                        "or pass --force to overwrite it")
    made = [] if out.exists() else [out, *_missing_parents(out)]
    try:
        return writable_dir(out), made
    except MescError:
        _remove(made)
        raise


class IfEmpty:
    """A cleanup entry for a folder made as a parent of an output: removed only if empty (a
    concurrent run may be using it by then)."""

    def __init__(self, path):
        self.path = Path(path)


class WithCheckpoint:
    """A cleanup entry for a folder that goes with a checkpoint (TensorBoard logs, which a
    resumed run appends to): removed only where ``checkpoint`` holds no state.json by then."""

    def __init__(self, path, checkpoint):
        self.path, self.checkpoint = Path(path), Path(checkpoint)


def _missing_parents(path):
    """IfEmpty entries of ``path``'s missing parent folders, deepest first."""
    return [IfEmpty(p) for p in Path(path).parents if not p.exists()]


def new_folder(path, checkpoint) -> list:
    """The cleanup entries of a folder about to be made for a run's logs: it (as
    :class:`WithCheckpoint`) and its missing parents; nothing if it exists."""
    path = Path(path)
    return [] if path.exists() else [WithCheckpoint(path, checkpoint), *_missing_parents(path)]


def _cause(folder, e: OSError) -> str:
    """Why ``folder`` could not be made or written into: the file standing where it or a
    parent should be (the OS says "File exists" or "Not a directory"), else the OS's reason."""
    try:
        first = next((p for p in (folder, *folder.parents) if p.exists()), None)
        in_the_way = first is not None and not first.is_dir()
    except OSError:  # a parent we may not look into: the OS's reason says it
        in_the_way = False
    return f"{first} is a file" if in_the_way else e.strerror


def writable_dir(out, option="--out DIR") -> Path:
    """``out``, created if missing and checked by writing a file into it; a MescError that
    names it and ``option`` otherwise (before a long run, not after)."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=out, prefix=".write-test-")
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        why = "it is a file" if out.is_file() else _cause(out, e)
        raise MescError(f"output directory {out} is not writable ({why}); "
                        f"pass a writable {option}") from None
    return out


def prepare_out_file(path, *, force=False, what="output file"):
    """Check before a long run that ``path`` can be written at its end.

    An existing file is refused unless ``force``. Missing parent folders are created (and a
    write is tried there). Returns the folders created, for main_guard's cleanup list.
    """
    path = Path(path)
    if path.is_dir():
        raise MescError(f"{what} {path} is a directory; give a file name")
    if path.exists() and not force:
        raise MescError(f"{what} {path} already exists; choose another name, or pass --force "
                        "to overwrite it")
    made = _missing_parents(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path.parent, prefix=".write-test-")
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        _remove(made)
        raise MescError(f"cannot write {what} {path} ({_cause(path.parent, e)}); give a path in a "
                        "writable folder") from None
    return made


def display_path(path, root) -> str:
    """``path`` for a table: relative to ``root`` when it lies in it or beside it
    (``../shared/...``), else absolute."""
    path = Path(path).absolute()
    rel = os.path.relpath(path, Path(root).absolute())
    return str(path) if rel.startswith(os.pardir + os.sep + os.pardir) else rel


INTERRUPTED = "interrupted; what was finished is kept"


def training_interrupted(checkpoint_dir, resume="--resume") -> str:
    """The Ctrl-C line of a training script: what its checkpoint folder (None: the run saves
    none) holds by then, and how to go on (``resume``: the options to add, e.g. with the run
    folder a run made for itself)."""
    if checkpoint_dir is None:
        return ("interrupted; nothing was kept: rerun the command (with --checkpoint-every N a "
                "long run can be resumed)")
    if (Path(checkpoint_dir) / "state.json").exists():
        return (f"interrupted; the last checkpoint is kept: rerun the same command with "
                f"{resume} to continue from it")
    return ("interrupted before the first checkpoint; nothing was kept: rerun the command "
            "without --resume")


def check_resumable(ckpt, recorded_files, data_files, step, limit, limit_flag):
    """What every --resume checks against its checkpoint in ``ckpt``: the data files it started
    from (``recorded_files``; None where its record predates them) and its ``step`` against
    this command's ``limit`` of steps (``limit_flag``, e.g. "--epochs")."""
    from mesc_tf.data import ENV_VAR, data_change

    changed = recorded_files and data_change(recorded_files, data_files)
    if changed:
        raise MescError(f"the data changed since the checkpoint in {ckpt} was made ({changed}); "
                        f"point --data-dir or {ENV_VAR} at the data it started from to resume, "
                        "or drop --resume and pass --force to start over")
    if step > limit:
        raise MescError(f"the checkpoint in {ckpt} is at step {step}, past {limit_flag} {limit}; "
                        f"resume with {limit_flag} {step} or more")


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a batch system's time limit), handled as Ctrl-C."""


@contextlib.contextmanager
def interrupts_deferred():
    """Ctrl-C and SIGTERM that come during the block take effect as it ends (their handlers
    run then), not in the middle of it: for a step that must not be cut in two, such as
    starting worker processes that are killed on the way out only once they are registered.
    Python runs the handlers in the main thread even while it blocks the signals (another
    thread takes them), so the handlers are swapped, not the signal mask. Signals left to the
    system (ignored, default) and blocks outside the main thread are as they were."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came, saved, done = [], {}, False

    def hold(signum, frame):
        if done:  # a handler whose restore an earlier signal cut short
            return saved[signum](signum, frame)
        came.append(signum)

    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(sig)
            if callable(handler):
                saved[sig] = handler
                signal.signal(sig, hold)
        yield
    finally:
        done = True
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        if came:
            saved[came[0]](came[0], None)


def main_guard(main, cleanup=None, interrupted=lambda: INTERRUPTED):
    """Run ``main()``; turn user errors into one line and exit status 2.

    ``cleanup`` (a list of paths filled in by main) is removed when main fails, so that a
    failed run leaves nothing half-written behind; a folder that holds a training checkpoint
    (a ``state.json`` anywhere below it) is kept, so that ``--resume`` can continue. Anything
    else (a bug) keeps its traceback, after the same cleanup. ``interrupted()`` gives the
    line for Ctrl-C, and for SIGTERM (exit status 143; by default Python would die at once,
    leaving --jobs workers computing): what is kept and how to go on.
    """
    cleanup = cleanup if cleanup is not None else []
    # Set first in each except clause (CPython runs a handler at a call or a backward jump,
    # none of which comes before it): a Ctrl-C or SIGTERM that comes then (a second Ctrl-C) no
    # longer raises there, out of main_guard (a traceback, the cleanup half done, no line).
    ending = False

    def on_signal(signum, frame):
        if ending:
            return
        if signum == signal.SIGTERM:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one ends the process at once
            raise Terminated()
        raise KeyboardInterrupt()

    previous = {}
    # An ignored signal stays ignored: a parent that stops this process itself asked for it
    # (benchmarks/bench.py --e2e), as nohup does for SIGHUP.
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(sig) is not signal.SIG_IGN:
                previous[sig] = signal.signal(sig, on_signal)
    try:
        with warnings.catch_warnings():  # restores showwarning afterwards
            warnings.showwarning = _one_line_warning(warnings.showwarning)
            return main()
    except BrokenPipeError:  # stdout's reader ended (run.py | head): stop as SIGPIPE would
        ending = True
        _remove(cleanup)
        # Python's flush of stdout at exit would fail again, with an "Exception ignored" line
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        try:
            sys.stderr.write("error: the output's reader closed the pipe (e.g. | head); the "
                             "run stopped: send its output to a file to keep it running\n")
            sys.stderr.flush()
        except OSError:  # stderr went into the same pipe (2>&1 | head): no one to tell
            os.dup2(devnull, sys.stderr.fileno())
        sys.exit(141)
    except (MescError, OSError) as e:
        ending = True
        if isinstance(e, MescError) or not (e.strerror and e.filename):
            message = str(e)
        else:
            message = f"{e.strerror}: {e.filename}"
            if isinstance(e, (FileExistsError, NotADirectoryError)):
                message += " (a file stands where a folder is needed: move it, or choose " \
                           "another output path)"
        message = " ".join(message.split())  # always one line
        _remove(cleanup)
        sys.stderr.write(f"error: {message}\n")
        sys.exit(2)
    except KeyboardInterrupt as e:
        ending = True
        _remove(cleanup)
        if sys.stdout.isatty():  # end the progress bar's line
            sys.stdout.write("\n")
            sys.stdout.flush()
        sys.stderr.write(f"error: {interrupted()}\n")
        sys.exit(143 if isinstance(e, Terminated) else 130)
    except Exception as e:  # out of memory, in TF or (killed by the system) in a worker
        ending = True
        _remove(cleanup)
        if isinstance(e, MemoryError):  # NumPy's, for an array too large for the machine
            sys.stderr.write(f"error: out of memory ({one_line(e)}); use a smaller problem or a "
                             "machine with more memory\n")
            sys.exit(2)
        if type(e).__name__ == "ResourceExhaustedError":
            sys.stderr.write("error: out of memory while training; use a smaller problem or a "
                             "machine with more memory\n")
            sys.exit(2)
        if type(e).__name__ == "TerminatedWorkerError":  # joblib's, for --jobs
            sys.stderr.write("error: a --jobs worker process was killed (by the system when "
                             "memory runs out, or by hand); what was finished is kept: rerun "
                             "the same command, with fewer --jobs if memory ran out\n")
            sys.exit(2)
        raise
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # None: not set from Python
                signal.signal(sig, handler)


def _one_line_warning(show):
    """warnings.showwarning that prints a MescWarning as ``warning: <message>`` (its
    source line would only show the warnings.warn call) and hands others to ``show``."""

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, MescWarning):
            (file or sys.stderr).write(f"warning: {' '.join(str(message).split())}\n")
        else:
            show(message, category, filename, lineno, file, line)

    return showwarning


def _remove(paths):
    """Remove a failed run's outputs: files, folders (unless they hold a checkpoint), then the
    IfEmpty parent folders that are empty by then, deepest first."""
    for p in paths:
        if isinstance(p, IfEmpty):
            continue
        if isinstance(p, WithCheckpoint):
            if not (p.checkpoint / "state.json").exists():
                shutil.rmtree(p.path, ignore_errors=True)
            continue
        p = Path(p)
        if p.is_dir():
            if next(p.glob("**/state.json"), None) is None:  # keep resumable checkpoints
                shutil.rmtree(p, ignore_errors=True)
        elif p.exists():
            p.unlink()
    parents = {p.path for p in paths if isinstance(p, IfEmpty)}
    for p in sorted(parents, key=lambda p: len(p.parts), reverse=True):
        try:
            p.rmdir()
        except OSError:  # not empty (or gone)
            pass
