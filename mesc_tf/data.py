"""Benchmark datasets: one small loader per dataset, plus the input checks the estimator reuses.

Every file name, variable, reshape order, pixel scale and label rule below follows
reference-facts §1.1 and pitfalls 1 and 9 of §4 (which orientation and scale the pretrained
auto-encoders expect). Images come back as float32 ``(n, h, w, 1)`` in the pixel scale fed to
the network, and labels as int64 ``1..K`` (``gnd - min + 1``, as the reference scripts do).

The data folder is, in order of precedence: the ``data_dir`` argument (CLI ``--data-dir``),
the ``MESC_DATA_DIR`` environment variable, then ``data/`` in the current directory.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from mesc_tf.config import get_config, is_whole
from mesc_tf.errors import MescError, MescWarning, one_line
from mesc_tf.files import as_path, is_file, permission_denied, sha256_of

ENV_VAR = "MESC_DATA_DIR"
DEFAULT_DATA_DIR = "data"
_HOW_TO_GET = (
    f"put the benchmark files there (see the README, 'Data') or point to them with "
    f"--data-dir DIR (data_dir= in Python) or {ENV_VAR}=DIR"
)


@dataclass(frozen=True, eq=False)
class Dataset:
    """A loaded benchmark: images ``x`` float32 (n, h, w, 1), labels ``y`` int64 in 1..K."""

    name: str
    x: np.ndarray = field(repr=False)
    y: np.ndarray = field(repr=False)
    n_clusters: int
    source: tuple[Path, ...]  # the file(s) read
    # SHA-256 of each file read, by its path in the data folder (as the data folder's SOURCES.md
    # lists them), taken by load_dataset as it loads: what the run records say the numbers came
    # from, and what resuming and reusing finished runs compare.
    file_hashes: dict[str, str] | None = field(default=None, repr=False)

    @property
    def n_samples(self) -> int:
        return int(self.x.shape[0])


def data_change(recorded, now: dict) -> str | None:
    """None where ``now`` (a :attr:`Dataset.file_hashes`) equals what a record or checkpoint
    holds, else which files differ, for an error line."""
    if recorded == now:
        return None
    if not isinstance(recorded, dict):
        return f"recorded {recorded!r}, now {now}"
    short = lambda h: f"{h[:12]}…" if isinstance(h, str) else "none"  # noqa: E731
    return "; ".join(f"{name}: sha256 {short(recorded.get(name))} then, {short(now.get(name))} now"
                     for name in sorted(set(recorded) | set(now))
                     if recorded.get(name) != now.get(name))


# ---------------------------------------------------------------------------------------------
# Where the data lives


def _choose_data_dir(data_dir=None) -> tuple[Path, str]:
    """The data folder and a few words on how it was chosen (for error messages)."""
    if os.environ.get(ENV_VAR):
        path, how = Path(os.environ[ENV_VAR]), f"from {ENV_VAR}"
    else:
        path, how = Path(DEFAULT_DATA_DIR), "the default data/ in the current directory"
    path = path.expanduser().absolute()
    if data_dir is not None and str(data_dir) != "":
        given = as_path(data_dir, "data_dir").expanduser().absolute()
        # Commands that resolve the folder once and hand it on (sweep and table workers) pass
        # the environment's or the default folder back in: name where it really came from.
        if given != path:
            path, how = given, "given by --data-dir or data_dir="
    return path, how


def find_data_dir(data_dir=None) -> Path:
    """The data folder: ``data_dir`` (``--data-dir``), else ``$MESC_DATA_DIR``, else ``./data``."""
    return _choose_data_dir(data_dir)[0]


class MissingDataError(MescError):
    """A dataset's file is not in the data folder (as opposed to a file that is there but bad)."""


@dataclass(frozen=True)
class _Root:
    path: Path
    how: str

    def find(self, dataset: str, *names: str) -> Path:
        """The first of ``names`` (relative to the data folder) that is a file."""
        for name in names:
            if is_file(self.path / name):
                return self.path / name
        looked = " or ".join(str(self.path / n) for n in names)
        gone = ("" if self.path.is_dir() else ", which is a file, not a folder"
                if self.path.exists() else ", which does not exist")
        raise MissingDataError(
            f"{dataset} data file not found: looked for {looked} (data folder {self.how}{gone}); "
            f"{_HOW_TO_GET}"
        )


# ---------------------------------------------------------------------------------------------
# Shared readers and checks


def _check_readable(path: Path, e: Exception):
    """A MescError where reading ``path`` failed for want of permission."""
    if permission_denied(path, e):
        raise MescError(f"cannot read {path}: permission denied; make it readable to this user, "
                        "or point --data-dir at a readable copy") from None


def _read_mat(path: Path) -> dict[str, np.ndarray]:
    """All variables of a .mat file, MATLAB v5 (scipy) or v7.3 (HDF5, via h5py)."""
    import h5py
    import scipy.io

    try:
        if h5py.is_hdf5(path):
            # v7.3 writes MATLAB's column-major arrays with the axes reversed: .T restores the
            # MATLAB shape, so fea is (n, pixels) and Y is (2016, 64, 38) in both layouts.
            with h5py.File(path, "r") as f:
                # A sparse variable is a group (data, ir, jc); the loaders read fea, gnd, Y.
                sparse = [k for k, v in f.items()
                          if k in ("fea", "gnd", "Y") and "MATLAB_sparse" in v.attrs]
                if sparse:
                    raise MescError(f"{path} stores {', '.join(sparse)} as a sparse matrix in "
                                    "MATLAB v7.3 format; save it dense (full()) or with -v7")
                return {k: np.asarray(v[()]).T for k, v in f.items() if isinstance(v, h5py.Dataset)}
        mat = scipy.io.loadmat(str(path))
        # A variable MATLAB stored sparse comes back as a scipy.sparse matrix: make it dense.
        return {k: v.toarray() if hasattr(v, "toarray") else v for k, v in mat.items()
                if not k.startswith("__")}
    except MescError:
        raise
    except Exception as e:  # scipy and h5py raise many types (ValueError, OSError, zlib, ...)
        _check_readable(path, e)
        raise MescError(
            f"cannot read {path} ({one_line(e)}); the file is corrupt or not a MATLAB .mat "
            f"file: fetch it again"
        ) from e


def _var(mat: dict, name: str, path: Path) -> np.ndarray:
    if name not in mat:
        found = ", ".join(sorted(mat)) or "none"
        raise MescError(
            f"{path} has no variable {name!r} (found: {found}); use the original file named "
            f"in the README"
        )
    return np.asarray(mat[name])


def _fea_gnd(path: Path, dataset: str) -> tuple[np.ndarray, np.ndarray]:
    """``fea`` as images (n, h, w) and ``gnd`` as a flat vector, from a fea/gnd .mat file."""
    mat = _read_mat(path)
    fea, gnd = _var(mat, "fea", path), _var(mat, "gnd", path).ravel()
    h, w = get_config(dataset).arch.image_shape
    if fea.dtype.kind not in "biuf":  # a cell array, complex or text: before any range check
        raise MescError(f"{path}: fea must hold real numbers, got dtype {fea.dtype}; this is "
                        f"not the {dataset} file, check the data folder")
    if fea.ndim != 2 or h * w not in fea.shape:
        raise MescError(
            f"{path}: fea has shape {fea.shape} but {dataset} images are {h}x{w} = {h * w} "
            f"pixels per row; this is not the {dataset} file, check the data folder"
        )
    if fea.shape[1] != h * w:  # stored one sample per column (e.g. written by h5py directly)
        fea = fea.T
    if fea.shape[0] == 0:
        raise MescError(f"{path}: fea holds no samples; this is not the {dataset} file, check "
                        "the data folder")
    if gnd.size != fea.shape[0]:
        raise MescError(
            f"{path}: gnd has {gnd.size} labels but fea has {fea.shape[0]} samples; the file "
            f"is inconsistent: fetch it again"
        )
    if gnd.dtype.kind not in "iuf" or not np.all(np.isfinite(gnd)) or np.any(gnd != np.round(gnd)):
        raise MescError(f"{path}: gnd must hold whole-number labels; fetch the file again")
    # Row-major (C order) reshape, no transpose, exactly as the reference scripts do.
    return fea.reshape(-1, h, w), gnd.astype(np.int64)


def _relabel(gnd: np.ndarray) -> np.ndarray:
    """gnd - min + 1, the reference scripts' label rule (pitfall 9)."""
    return gnd - gnd.min() + 1


def validate_images(x, y=None, n_clusters=None, image_shape=None, where="input",
                    training=True, stacklevel=3, size_hint=None, warn_negative=True):
    """Check an image array (and labels) and return it as float32 ``(n, h, w, 1)``.

    ``x`` may be ``(n, h, w)`` or ``(n, h, w, 1)``. Raises :class:`MescError` for a non-numeric
    or wrongly shaped array, images of another size than ``image_shape``, NaN/inf values or
    values beyond float32's range, (where ``training``) images that are all zero or, with more
    than one cluster, all the same, a label count that is not one per image, (given
    ``n_clusters``) one that is not a whole number >= 1, fewer than 2 images or than
    ``n_clusters``, or labels whose number of distinct classes is not ``n_clusters``; warns of
    negative pixels (unless ``warn_negative`` is False), ``stacklevel`` frames up. ``where``
    names the data in messages; ``size_hint(h, w)``, where given, words what fixed
    ``image_shape`` and what to do for images of another size h×w (default: the architecture).
    """
    given = x
    try:
        x = np.asarray(x)
    except ValueError as e:  # a ragged list: images of different sizes
        raise MescError(f"{where}: images are not one array ({one_line(e)}); pass images of "
                        "one size as (n, height, width) or (n, height, width, 1)") from None
    if x.dtype.kind == "O":  # e.g. a list of arrays of different dtypes: numbers if they convert
        try:
            x = x.astype(np.float64)
        except (TypeError, ValueError):
            pass
        except OverflowError:  # Python ints beyond float64's range
            raise MescError(f"{where}: images hold values beyond float32's range (magnitude "
                            "over 3.4e38); rescale them, e.g. to [0, 1]") from None
    if x.ndim == 0:  # a generator, say, which NumPy wraps as one object
        raise MescError(f"{where}: got one {type(given).__name__}, not an array of images; "
                        "pass them as an array (n, height, width), e.g. np.stack(list(...))")
    if x.dtype.kind not in "biuf":
        raise MescError(
            f"{where}: images must be numbers, got dtype {x.dtype}; pass a numeric array"
        )
    if x.ndim == 4 and x.shape[-1] == 1:
        x = x[..., 0]
    if x.ndim != 3 or 0 in x.shape:  # no image, or images with no pixel
        hint = ("; colour images: make them grey first, e.g. x.mean(axis=-1)"
                if x.ndim == 4 and x.shape[-1] in (3, 4) else
                "; channels first: pass x[:, 0]" if x.ndim == 4 and x.shape[1] == 1 else "")
        raise MescError(
            f"{where}: images have shape {x.shape}; pass one or more grey images as "
            f"(n, height, width) or (n, height, width, 1){hint}"
        )
    n = x.shape[0]
    if image_shape is not None and tuple(x.shape[1:]) != tuple(image_shape):
        (h, w), (eh, ew) = x.shape[1:], image_shape
        hint = size_hint(h, w) if size_hint else (
            f"the architecture expects {eh}x{ew}; resize the images or use an architecture "
            f"with image_shape ({h}, {w})")
        raise MescError(f"{where}: images are {h}x{w} but {hint}")
    bad = int(np.count_nonzero(~np.isfinite(x))) if x.dtype.kind == "f" else 0
    if bad:
        raise MescError(
            f"{where}: images hold {bad} NaN or infinite values; remove or fill them first"
        )
    with np.errstate(over="ignore"):  # reported below
        x = x.astype(np.float32, copy=False)  # no second copy of float32 images
    if not np.isfinite(x).all():  # float64 values that overflow float32
        raise MescError(
            f"{where}: images hold values beyond float32's range (magnitude over 3.4e38); "
            f"rescale them, e.g. to [0, 1]"
        )
    if y is not None:
        y = np.asarray(y).ravel()
        if y.size != n:
            raise MescError(
                f"{where}: {y.size} labels for {n} images; give exactly one label per image"
            )
    if n_clusters is not None:
        whole = is_whole(n_clusters) or (isinstance(n_clusters, (float, np.floating))
                                         and float(n_clusters).is_integer())
        if not whole or n_clusters < 1:  # not a bool, a string or 2.5
            raise MescError(f"{where}: n_clusters must be a whole number >= 1, got "
                            f"{n_clusters!r}")
        k = int(n_clusters)
        if n < k:
            raise MescError(
                f"{where}: {n} images for {k} clusters; need at least one image per cluster "
                f"(lower n_clusters or add images)"
            )
        if n < 2:  # self-expression writes each image through the others
            raise MescError(f"{where}: {n} image; clustering needs at least 2")
        if y is not None and np.unique(y).size != k:
            raise MescError(
                f"{where}: labels hold {np.unique(y).size} distinct classes but n_clusters is "
                f"{k}; every class needs at least one image (an empty class, or a wrong n_clusters)"
            )
    if training and not np.any(x):  # the relative reconstruction error would divide by 0
        raise MescError(f"{where}: every pixel of every image is 0; there is nothing to "
                        "reconstruct or cluster")
    if training and n_clusters is not None and int(n_clusters) > 1 and (x == x[0]).all():
        raise MescError(f"{where}: all {n} images are the same; there is nothing to tell the "
                        "clusters apart by (C, and so the labels, would be arbitrary)")
    negative = np.count_nonzero(x < 0) if warn_negative else 0
    if negative:  # e.g. standardised images: the decoder's last ReLU cannot reach them
        warnings.warn(f"{where}: {100 * negative / x.size:.3g}% of the pixels are negative, but "
                      "the auto-encoder ends in a ReLU (as the released code's does) and "
                      "reconstructs only values >= 0; shift the images to be non-negative, "
                      "e.g. scale them to [0, 1]", MescWarning, stacklevel=stacklevel)
    return x[..., None]


def _checked_scale(ds: Dataset, path: Path, what: str, autoencoders: str, top: int) -> Dataset:
    """``ds``, with a warning where its file is not in the scale its auto-encoders were trained
    on: raw 0..255 (``top`` 255: a file in [0, 1] or beyond 255 warns) or [0, 1] (``top`` 1).
    Called once ``_dataset`` has checked the file, so that a warning never precedes its error."""
    peak, scale = float(np.max(ds.x)), "0..255" if top == 255 else "[0, 1]"
    if top == 255 and peak <= 1.0:
        found, fix = "is in [0, 1]", "multiply by 255"
    elif peak > top:
        found = f"goes up to {peak:g}"
        fix = "rescale it to 0..255" if top == 255 else "divide by 255"
    else:
        return ds
    warnings.warn(f"{path}: {what} {found}, but {autoencoders} were trained on the standard "
                  f"file's {scale}; {fix} to use them", MescWarning, stacklevel=4)
    return ds


def _dataset(name: str, x, y, sources, n_clusters: int | None = None) -> Dataset:
    """Check the loaded arrays against the config and wrap them (labels must be exactly 1..K)."""
    cfg = get_config(name)
    k = cfg.n_clusters if n_clusters is None else n_clusters
    where = f"{name} data from {', '.join(str(s) for s in sources)}"
    classes = np.unique(y).size
    if np.size(y) == len(x) >= k and classes != k:  # no n_clusters to change, unlike own images
        raise MescError(f"{where}: labels hold {classes} distinct classes but {name} has {k}; "
                        f"this is not the expected {name} file (or a class has no images): give "
                        "the benchmark's file (README, 'Data')")
    x = validate_images(x, y, k, cfg.arch.image_shape, where=where)
    y = np.asarray(y, dtype=np.int64)
    empty = np.setdiff1d(np.arange(1, k + 1), y)
    if empty.size or y.min() < 1 or y.max() > k:
        raise MescError(
            f"{where}: labels run {y.min()}..{y.max()} with empty classes {empty[:10].tolist()}, "
            f"but {name} needs every class 1..{k}; this is not the expected {name} file"
        )
    return Dataset(name, x, y, k, tuple(Path(s) for s in sources))


# ---------------------------------------------------------------------------------------------
# One loader per dataset


def _load_orl(root: _Root) -> Dataset:
    path = root.find("orl", "ORL_32x32.mat")
    x, gnd = _fea_gnd(path, "orl")
    # Raw 0..255, no /255: the pretrained ORL AE fits raw pixels (rel. error 0.13; 33 with /255).
    # The row-major reshape transposes the faces, which is the orientation that AE expects.
    return _checked_scale(_dataset("orl", x, _relabel(gnd), [path]), path, "fea",
                          "the ORL auto-encoders (pretrained/orl.h5, the authors')", 255)


def _load_coil20(root: _Root) -> Dataset:
    path = root.find("coil20", "COIL20.mat")
    x, gnd = _fea_gnd(path, "coil20")
    return _checked_scale(_dataset("coil20", x, _relabel(gnd), [path]), path, "fea",
                          "the COIL20 auto-encoders (pretrained/coil20.h5, the authors')", 1)


def _load_coil(root: _Root, name: str) -> Dataset:
    """COIL40 = the first 40 objects x 72 views of COIL100.mat; COIL100 = all of it."""
    path = root.find(name, "COIL100.mat")
    x, gnd = _fea_gnd(path, name)
    n = get_config(name).n_samples
    if x.shape[0] < n:
        raise MescError(
            f"{path}: fea has {x.shape[0]} rows but {name} needs the first {n} (72 views per "
            f"object); use the full 7200-row COIL100.mat"
        )
    if x.shape[0] > get_config("coil100").n_samples:  # not COIL100.mat: no rows left out unseen
        raise MescError(
            f"{path}: fea has {x.shape[0]} rows, more than COIL100's 7200 (100 objects x 72 "
            f"views); give the standard COIL100.mat"
        )
    # As stored: the standard file's uint8 0..255, the scale the authors' COIL40 and COIL100
    # auto-encoders reconstruct (tests/test_weights.py, test_coil100_checkpoints_expect_raw_pixels).
    k = get_config(name).n_clusters
    # Only where rows are left out (COIL40): a whole file of other objects is _dataset's error.
    if x.shape[0] > n and np.unique(gnd[:n]).size != k:
        raise MescError(
            f"{path}: the first {n} rows hold {np.unique(gnd[:n]).size} objects, but {name} is "
            f"objects 1..{k} x 72 views; the rows must be sorted by object, as in the standard "
            f"COIL100.mat (README, 'Data'): give that file"
        )
    return _checked_scale(_dataset(name, x[:n], _relabel(gnd[:n]), [path]), path, "fea",
                          "the authors' COIL40/COIL100 auto-encoders (--tf1-checkpoint original)",
                          255)


def _load_coil40(root: _Root) -> Dataset:
    return _load_coil(root, "coil40")


def _load_coil100(root: _Root) -> Dataset:
    return _load_coil(root, "coil100")


def _load_eyaleb(root: _Root, n_subjects: int | None = None) -> Dataset:
    """Subject-major images of the first ``n_subjects`` subjects (default all 38)."""
    path = root.find("eyaleb", "YaleBCrop025.mat")
    Y = _var(_read_mat(path), "Y", path)  # pixels x image-per-subject x subject
    h, w = get_config("eyaleb").arch.image_shape
    if Y.ndim != 3 or Y.shape[0] != h * w:
        raise MescError(
            f"{path}: Y has shape {Y.shape} but eyaleb needs (2016, images per subject, "
            f"subjects) with {h}x{w} = {h * w} pixels per image; this is not YaleBCrop025.mat"
        )
    n_img, n_subj = Y.shape[1:]
    if not n_img or not n_subj:
        raise MescError(f"{path}: Y has shape {Y.shape}, no image; this is not YaleBCrop025.mat, "
                        "check the data folder")
    k = n_subj if n_subjects is None else n_subjects
    if not (is_whole(k) and 1 <= k <= n_subj):
        raise MescError(
            f"eyaleb: n_subjects must be a whole number in 1..{n_subj}, got {n_subjects!r}"
        )
    k = int(k)
    # Column (j, i) = Y[:, j, i], ordered subject by subject.
    cols = np.transpose(Y[:, :, :k], (2, 1, 0)).reshape(k * n_img, h * w)
    # DSC reshapes each column row-major to 42x48 and transposes: a column-major 48x42 reshape,
    # i.e. the upright MATLAB image. Raw 0..255 (the pretrained AE: 0.039; /255 gives 0.534).
    x = cols.reshape(-1, w, h).transpose(0, 2, 1)
    y = np.repeat(np.arange(k), n_img) + 1  # subject index i (0-based) - min + 1
    return _checked_scale(_dataset("eyaleb", x, y, [path], n_clusters=k), path, "Y",
                          "the EYaleB auto-encoders (pretrained/eyaleb.h5, the authors')", 255)


def _load_usps(root: _Root) -> Dataset:
    path = root.find("usps", "USPS.mat")
    x, gnd = _fea_gnd(path, "usps")
    finite = x[np.isfinite(x)]  # NaN or inf: _dataset's error names them
    # Already mapped ((x + 1) / 2 would squeeze it), or another scale (0..255, -255..255).
    if finite.size and not -1 <= finite.min() < 0 <= finite.max() <= 1:
        raise MescError(f"{path}: fea is in [{finite.min():g}, {finite.max():g}], but "
                        "usps reads the USPS.mat whose fea is in [-1, 1] (the data folder's "
                        "SOURCES.md); give that file")
    # fea is in [-1, 1]; the pretrained USPS AE fits [0, 1] best (0.219 vs 0.953 as stored).
    # File order is kept (train then test, not sorted by class).
    return _dataset("usps", (x.astype(np.float64) + 1.0) / 2.0, _relabel(gnd), [path])


def _read_idx(path: Path, magic: int, ndim: int) -> np.ndarray:
    """A uint8 idx array (the MNIST format): big-endian magic, ndim sizes, then the bytes."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                raw = f.read()
        else:
            raw = path.read_bytes()
    except (OSError, EOFError, zlib.error) as e:
        _check_readable(path, e)
        raise MescError(
            f"cannot read {path} ({one_line(e)}); the file is corrupt: fetch it again"
        ) from e
    head = 4 * (1 + ndim)
    got = int.from_bytes(raw[:4], "big") if len(raw) >= 4 else None
    if len(raw) < head or got != magic:
        raise MescError(
            f"{path}: not an idx file with magic number {magic} (found {got}); use the MNIST "
            f"t10k idx files named in the README"
        )
    dims = [int.from_bytes(raw[4 * i + 4: 4 * i + 8], "big") for i in range(ndim)]
    if len(raw) - head != int(np.prod(dims)):
        raise MescError(
            f"{path}: the header announces {'x'.join(map(str, dims))} = {int(np.prod(dims))} bytes "
            f"but {len(raw) - head} follow; the file is truncated or corrupt: fetch it again"
        )
    return np.frombuffer(raw, np.uint8, offset=head).reshape(dims)


def _load_mnist(root: _Root) -> Dataset:
    images = root.find("mnist", "mnist/t10k-images-idx3-ubyte.gz", "mnist/t10k-images-idx3-ubyte")
    labels = root.find("mnist", "mnist/t10k-labels-idx1-ubyte.gz", "mnist/t10k-labels-idx1-ubyte")
    x, digits = _read_idx(images, 2051, 3), _read_idx(labels, 2049, 1)
    # Raw 0..255 in file order: on x/255 the pretrained MNIST AE outputs about 0.
    # Digits 0..9 become labels 1..10.
    return _dataset("mnist", x, digits.astype(np.int64) + 1, [images, labels])


def _load_toy(root: _Root) -> Dataset:
    """Three COIL20 objects (72 views each), relabelled 1..3 in the order the config lists them."""
    objects = np.asarray(get_config("toy").extra["coil20_objects"])
    path = root.find("toy", "COIL20.mat")
    x, gnd = _fea_gnd(path, "toy")
    gnd = _relabel(gnd)  # the object numbers the coil20 loader gives
    k = get_config("coil20").n_clusters
    if np.unique(gnd).size != k or gnd.max() != k:
        raise MescError(f"{path}: gnd numbers {np.unique(gnd).size} objects {gnd.min()}.."
                        f"{gnd.max()} (after gnd - min + 1), not COIL20's 1..{k}, so the Toy set "
                        f"(objects {objects.tolist()}) is unclear; give the COIL20.mat of the "
                        "benchmark")
    keep = np.isin(gnd, objects)
    y = np.argmax(gnd[keep, None] == objects[None, :], axis=1) + 1
    return _checked_scale(_dataset("toy", x[keep], y, [path], n_clusters=len(objects)), path,
                          "fea", "the Toy auto-encoders (pretrained/toy.h5, the authors' COIL20 "
                          "one)", 1)


LOADERS: dict[str, Callable[..., Dataset]] = {
    "orl": _load_orl,
    "coil20": _load_coil20,
    "coil40": _load_coil40,
    "coil100": _load_coil100,
    "eyaleb": _load_eyaleb,
    "usps": _load_usps,
    "mnist": _load_mnist,
    "toy": _load_toy,
}


def load_dataset(name: str, data_dir=None, *, n_subjects: int | None = None) -> Dataset:
    """Load one benchmark dataset (see :data:`LOADERS`) from the data folder.

    ``n_subjects`` (eyaleb only) keeps the first K subjects: the first of DSC-Net's
    39 − K blocks of K consecutive subjects (reference-facts §1.1).
    """
    cfg = get_config(name)  # MescError for an unknown name
    root = _Root(*_choose_data_dir(data_dir))
    if n_subjects is None:
        ds = LOADERS[cfg.name](root)
    elif cfg.name != "eyaleb":
        raise MescError(f"n_subjects applies only to eyaleb, not {cfg.name}; leave it out")
    else:
        ds = LOADERS[cfg.name](root, n_subjects=n_subjects)
    # Hashed now, not at the first record: a file replaced during a long run is not named.
    return dataclasses.replace(ds, file_hashes={
        p.relative_to(root.path).as_posix(): sha256_of([p]) for p in ds.source})
