"""The command-line scripts as modules, for the tests: experiments/ and benchmarks/ are folders
of scripts, not packages."""

import importlib.util
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
