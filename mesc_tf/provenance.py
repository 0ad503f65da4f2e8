"""What a result was made with: the code's revision, the library versions and the machine.
Every results file records these (run.py, the experiments, sweeps, tables, benchmarks)."""

import os
import sys
from pathlib import Path


def command(script: str, argv=None) -> str:
    """The command line that reruns a script: ``script`` (its path from the repository root)
    and ``argv``, the arguments its main was given (None: this process's, ``sys.argv[1:]``),
    shlex-quoted so that a path with a space is pasted back as one argument."""
    import shlex

    return shlex.join([script, *(sys.argv[1:] if argv is None else map(str, argv))])


def code_revision() -> str:
    """The git commit of this checkout ('-dirty' with uncommitted changes), else 'unknown':
    also where the package is installed inside some other git repository (a virtualenv kept in
    one), whose commit says nothing about this code."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel",
                              "--short=12", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    lines = rev.stdout.splitlines()
    if rev.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != root:
        return "unknown"
    return lines[1].strip() + ("-dirty" if dirty.stdout.strip() else "")


# Each library's distribution, whose metadata gives its version without importing it.
_DISTRIBUTIONS = {"tensorflow": "tensorflow", "keras": "keras", "numpy": "numpy",
                  "scipy": "scipy", "sklearn": "scikit-learn", "h5py": "h5py"}


def _version(module: str) -> str:
    """A library's version: its ``__version__`` where it is imported, else its installed
    metadata (importing TensorFlow takes seconds, which a script that does not use it, such as
    bench.py's parent, should not spend to record a number); a module installed under another
    distribution name (tensorflow-cpu, say) is imported."""
    import importlib
    from importlib import metadata

    if module not in sys.modules:
        try:
            return metadata.version(_DISTRIBUTIONS[module])
        except metadata.PackageNotFoundError:
            pass
    return importlib.import_module(module).__version__


def versions() -> dict:
    """This package (with its revision), Python and the libraries whose numbers it depends on."""
    from mesc_tf import __version__

    return {"mesc_tf": f"{__version__} ({code_revision()})", "python": sys.version.split()[0],
            **{module: _version(module) for module in _DISTRIBUTIONS}}


def machine() -> dict:
    """The machine a result was measured on: usable cores, the CPU model and BLAS's kernels."""
    import platform

    import scipy.linalg  # noqa: F401  (loads SciPy's BLAS, so that threadpoolctl sees it)
    from threadpoolctl import threadpool_info

    cpu = ""
    try:  # platform.processor() is empty on Linux
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name")), "")
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    # The kernels BLAS picked for this CPU: ill-posed spectral steps (ORL) move with them.
    blas = sorted({f"{i['internal_api']} {i['version']} {i.get('architecture') or '?'}"
                   for i in threadpool_info() if i["user_api"] == "blas"})
    return {"cores": cores, "cpu": cpu or platform.processor(), "platform": platform.platform(),
            "blas": blas}
