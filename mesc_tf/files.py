"""Atomic file writes: readers (and a resumed run) never see half a file."""

import contextlib
import os
import tempfile
from pathlib import Path


def default_file_mode():
    """The mode open() would give a new file (0666 minus the umask); mkstemp gives 0600."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def atomic_file(path, mode="w"):
    """Yield a temporary file beside ``path``; on success flush, fsync and rename it to path."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, default_file_mode())
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def atomic_write_text(path, text):
    with atomic_file(path, "w") as f:
        f.write(text)
