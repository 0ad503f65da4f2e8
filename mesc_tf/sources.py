"""Which auto-encoder a run starts from, in one place: the options (a TF1 checkpoint, an .h5
file, a fresh he_normal one, or the project's ``pretrained/<dataset>.h5``), their precedence,
the content hash that run records and sweep keys store, and the loading.

Sweeps resolve and hash in the parent process and load in the workers, so resolving
(:func:`resolve_autoencoder`, cheap: paths and a hash) and loading
(:meth:`AutoencoderSpec.load`, TensorFlow) are separate steps; :func:`get_autoencoder` does both.
"""

import glob
import os
from dataclasses import dataclass
from pathlib import Path

from mesc_tf.config import Architecture
from mesc_tf.errors import MescError
from mesc_tf.files import as_path, is_file, sha256_of


def pretrained_path(dataset: str) -> Path:
    """The project's own auto-encoder for ``dataset``, which run.py reads and pretrain.py
    writes by default: ``$MESC_PRETRAINED_DIR/<dataset>.h5``, else the checkout's pretrained/."""
    folder = os.environ.get("MESC_PRETRAINED_DIR")
    folder = Path(folder) if folder else Path(__file__).resolve().parents[1] / "pretrained"
    return folder / f"{dataset.lower()}.h5"  # "ORL" as "orl", as get_config reads it


def require_pretrained(dataset: str, options="--weights, --tf1-checkpoint or --no-pretrain"):
    """:func:`pretrained_path` if that file exists, else one MescError that says how to make it
    or which ``options`` to pass instead."""
    path = pretrained_path(dataset)
    if is_file(path):
        return path
    name, env, where = path.stem, os.environ.get("MESC_PRETRAINED_DIR"), ""
    if (Path(__file__).resolve().parents[1] / "experiments" / "pretrain.py").is_file():
        how = f"; make it with `make pretrain-{name}` (experiments/pretrain.py --dataset {name})"
        where = "" if env else ", or set MESC_PRETRAINED_DIR to a folder of them"
    elif env:  # `pip install .`: the package without the checkout's scripts and pretrained/
        how = f"; make it with experiments/pretrain.py --dataset {name} in a checkout"
    else:
        how = (": an installed copy of mesc_tf has no pretrained/ folder; set "
               "MESC_PRETRAINED_DIR to a checkout's pretrained/")
    raise MescError(f"no pretrained auto-encoder at {path}{how}, or pass {options}{where}")


@dataclass(frozen=True)
class AutoencoderSpec:
    """Where a run's auto-encoder comes from; ``ident`` (kind + content hash) is stored in the
    records, its hash part (:func:`autoencoder_hash`) is in the keys."""

    kind: str  # "pretrained" | "weights" | "tf1" | "none"
    path: str | None = None
    sha256: str | None = None

    @property
    def ident(self) -> str:
        return "none" if self.kind == "none" else f"{self.kind}:{self.sha256[:16]}"

    @property
    def deterministic(self) -> bool:
        """Whether fine-tuning is the same for every seed (weights given, C constant)."""
        return self.kind != "none"

    def describe(self) -> str:
        return {"pretrained": f"pretrained {self.path}", "weights": f"weights {self.path}",
                "tf1": f"TF1 checkpoint {self.path}",
                "none": "he_normal initialisation (no pretraining)"}[self.kind]

    def load(self, arch: Architecture):
        """A new auto-encoder for ``arch`` (fine-tuning changes it in place); "none" draws
        he_normal weights from TF's seed (configure_runtime)."""
        from mesc_tf.model import ConvAutoEncoder
        from mesc_tf.weights import load_autoencoder, load_tf1_checkpoint

        if self.kind == "tf1":
            return load_tf1_checkpoint(self.path, arch)
        if self.kind == "none":
            return ConvAutoEncoder(arch).build_for_input()
        return load_autoencoder(self.path, arch)[0]


def autoencoder_hash(ident: str) -> str:
    """The content part of an ``ident`` ("pretrained:523d..." → "523d...", "none" → "none"):
    what keys compare, so that a file counts the same whether it was named by --weights or
    taken as the default."""
    return ident.rpartition(":")[2]


def resolve_autoencoder(dataset=None, weights=None, tf1_checkpoint=None, no_pretrain=False,
                        per_dataset=False, arch=None, no_pretrain_option=True) -> AutoencoderSpec:
    """The AutoencoderSpec for these options, in this precedence: ``tf1_checkpoint`` (a prefix,
    or "original" for the authors' checkpoint of ``dataset``), ``weights`` (.h5), ``no_pretrain``,
    then ``pretrained/<dataset>.h5``. ``per_dataset``: the command's --weights/--tf1-checkpoint
    take NAME=PATH (the experiments, several datasets at once), so the messages spell them so;
    ``no_pretrain_option``: whether the command has --no-pretrain to suggest. Given ``arch``,
    an .h5 file must hold that architecture (checked with h5py, before any training)."""
    w, t = ((f"--weights {dataset}=PATH", f"--tf1-checkpoint {dataset}=PREFIX") if per_dataset
            else ("--weights PATH", "--tf1-checkpoint PREFIX"))

    if tf1_checkpoint:
        from mesc_tf.weights import tf1_prefix

        prefix = Path(tf1_prefix(dataset, tf1_checkpoint)).expanduser().absolute()
        index = Path(f"{prefix}.index")
        data = sorted(prefix.parent.glob(f"{glob.escape(prefix.name)}.data-*"))
        if not is_file(index) or not data:
            # ("original" without its .index was refused by tf1_prefix.)
            raise MescError(f"TF1 checkpoint {prefix} not found (need {index.name} and "
                            f"{prefix.name}.data-*); give the prefix without .index/.data")
        return AutoencoderSpec("tf1", str(prefix), sha256_of([index, *data]))
    if weights:
        from mesc_tf.weights import require_h5

        # The experiments take NAME=PATH; elsewhere (run.py, the estimator) the path is the
        # user's own, and the hint is how to make a file.
        path = require_h5(as_path(weights, "weights").expanduser().absolute(),
                          *([w] if per_dataset else []))
        return _checked(AutoencoderSpec("weights", str(path), sha256_of([path])), arch)
    if no_pretrain:
        return AutoencoderSpec("none")
    if not dataset:
        raise MescError("an auto-encoder needs one of dataset=, weights=, tf1_checkpoint= or "
                        "no_pretrain=True to say which one")
    options = f"{w}, {t} or --no-pretrain" if no_pretrain_option else f"{w} or {t}"
    path = require_pretrained(dataset, options)
    return _checked(AutoencoderSpec("pretrained", str(path.absolute()), sha256_of([path])), arch)


def _checked(spec: AutoencoderSpec, arch) -> AutoencoderSpec:
    """``spec``, its .h5 file's architecture checked against ``arch`` where that is given."""
    if arch is not None:
        from mesc_tf.weights import check_autoencoder_file

        check_autoencoder_file(spec.path, arch)
    return spec


def get_autoencoder(arch: Architecture, *, dataset=None, weights=None, tf1_checkpoint=None,
                    no_pretrain=False):
    """The auto-encoder to fine-tune (:func:`resolve_autoencoder`'s options and precedence)
    and a line saying where its weights came from."""
    spec = resolve_autoencoder(dataset, weights, tf1_checkpoint, no_pretrain)
    return spec.load(arch), spec.describe()
