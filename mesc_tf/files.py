"""Atomic file writes (text, JSON, .npy): readers (and a resumed run) never see half a file.
Also the reader of the state.json those writes leave in a training checkpoint, the JSON
encoding of NumPy values and paths, and the check of path arguments (no TensorFlow needed)."""

import contextlib
import errno
import hashlib
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

from mesc_tf.errors import MescError, one_line


def as_path(value, what) -> Path:
    """``value`` (a str or os.PathLike) as a Path; one MescError for anything else."""
    if not isinstance(value, (str, os.PathLike)):
        raise MescError(f"{what} must be a path (a str or pathlib.Path), got "
                        f"{type(value).__name__} {value!r}")
    return Path(value)


def sha256_of(paths) -> str:
    """SHA-256 of the files' bytes, one after the other; a file that cannot be read is one
    MescError."""
    h = hashlib.sha256()
    for p in paths:
        try:
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        except OSError as e:
            raise MescError(f"cannot read {p} ({one_line(e)}); make it readable to this user, "
                            "or give a readable copy") from None
    return h.hexdigest()


def is_file(path) -> bool:
    """``Path(path).is_file()``, with a folder that cannot be searched (EACCES, which pathlib
    re-raises) one MescError instead of a traceback."""
    try:
        return Path(path).is_file()
    except OSError as e:
        raise MescError(f"cannot look for {path} ({one_line(e)}); make its folder readable "
                        "to this user, or use another one") from None


def json_default(o):
    """``json.dumps(default=...)`` for NumPy scalars and arrays and paths."""
    import numpy as np

    if isinstance(o, np.generic):  # np.int64, np.float32, np.bool_, ...
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def default_file_mode():
    """The mode open() would give a new file (0666 minus the umask); mkstemp gives 0600."""
    return 0o666 & ~_umask()


def _umask() -> int:
    # Linux says it in /proc (since 4.7). os.umask can only read it by setting it, which for
    # that moment gives files that other threads create mode 0666.
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0)
    os.umask(umask)
    return umask


def size_text(n_bytes) -> str:
    """A byte count for messages: '12.3 MiB', '2.0 GiB'."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{int(n_bytes)} bytes"


def permission_denied(path, e: Exception) -> bool:
    """Whether reading ``path`` failed (with ``e``) for want of permission: not the file's
    fault, so not "corrupt: fetch it again"."""
    return (isinstance(e, PermissionError) or getattr(e, "errno", None) in (errno.EACCES,
                                                                              errno.EPERM)
            or not os.access(path, os.R_OK))


def write_error(path, e: OSError) -> MescError:
    """A failed write of ``path`` as one MescError: the file, the cause, what to do."""
    # NumPy's tofile reports a short write as "N requested and M written", without an errno.
    short_write = e.errno is None and " requested and " in str(e) and "written" in str(e)
    full = e.errno in (errno.ENOSPC, errno.EDQUOT) or short_write
    hint = ("the disk is full: free space there or write elsewhere" if full
            else "check that its folder exists and is writable, or write elsewhere")
    return MescError(f"cannot write {path} ({one_line(e)}); {hint}")


def make_parent(path):
    """Create the folder of ``path`` (a file to be written) if missing; a MescError naming
    ``path`` where that fails (a file in the way, no permission)."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise write_error(path, e) from None


def check_free_space(path, n_bytes, what):
    """MescError unless the file system of ``path`` (a file to be written) has ``n_bytes``
    free: before writers whose failure on a full disk is not clean (h5py's)."""
    folder = Path(path).parent
    try:
        free = shutil.disk_usage(folder).free
    except OSError:  # the folder's own error comes with the write
        return
    if free < n_bytes:
        raise MescError(f"no space for {what} {path}: it needs about {size_text(n_bytes)} and "
                        f"{size_text(free)} is free there; free space or write elsewhere")


@contextlib.contextmanager
def atomic_file(path, mode="w"):
    """Yield a temporary file beside ``path``; on success flush, fsync and rename it to path.
    A write that fails (a full disk) is a MescError naming ``path``; nothing is left."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as e:  # name the folder, not mkstemp's temporary file
        raise write_error(path, OSError(e.errno, e.strerror, str(path.parent))) from None
    try:
        with os.fdopen(fd, mode) as f:  # first, so that f closes the descriptor whatever fails
            os.fchmod(f.fileno(), default_file_mode())
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        raise write_error(path, e) from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


@contextlib.contextmanager
def locked(path):
    """An exclusive advisory lock on ``path`` (created if missing) for the block: runs side by
    side that merge into one results file take turns."""
    import fcntl

    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def atomic_write_text(path, text):
    with atomic_file(path, "w") as f:
        f.write(text)


def write_json(path, obj):
    """Write JSON atomically (NumPy values and paths included)."""
    atomic_write_text(path, json.dumps(obj, indent=2, default=json_default) + "\n")


def save_npy(path, array):
    """Save a float32 .npy atomically (its folder made if missing)."""
    import numpy as np

    path = Path(path)
    make_parent(path)
    with atomic_file(path, "wb") as f:
        np.save(f, np.asarray(array, np.float32))


def read_backup_state(backup_dir) -> dict:
    """A backup's state.json, checked: its "weights" file name, "epoch" (int), "seconds"
    (float: training seconds of the steps in the backup; 0 where an older backup has no such
    key) and the rest as saved. A damaged file is one MescError that says to start over."""
    path = Path(backup_dir) / "state.json"
    try:
        state = json.loads(path.read_text())
        state = {**state, "weights": str(state["weights"]), "epoch": int(state["epoch"]),
                 "seconds": float(state.get("seconds", 0.0))}
        if state["epoch"] < 0:
            raise ValueError(f"epoch {state['epoch']} is negative")
        if not math.isfinite(state["seconds"]):
            raise ValueError(f"seconds {state['seconds']} is not finite")
        return state
    except (OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError) as e:
        raise MescError(f"cannot read the checkpoint {path} ({one_line(e)}); delete "
                        f"{backup_dir} (or pass --force without --resume) to start over") from None
