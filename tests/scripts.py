"""The command-line scripts as modules, for the tests: experiments/ and benchmarks/ are folders
of scripts, not packages."""

import importlib.util
import signal
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def load_script(path, name=None):
    """The script at ``path`` (from the repository root, e.g. "experiments/run.py") as a fresh
    module named ``name`` (default: after its file), not run as ``__main__``."""
    path = REPO / path
    spec = importlib.util.spec_from_file_location(name or f"_script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def signals_default():
    """preexec_fn: Ctrl-C and SIGTERM as a terminal leaves them, whatever the test runner
    ignores (a shell's `make test &` starts it with SIGINT ignored, and an ignored signal stays
    ignored through main_guard): a test that signals a script then tests what it says."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
