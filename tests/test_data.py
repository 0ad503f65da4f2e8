"""Tests for mesc_tf.data: synthetic files in tmp_path, plus the real files when present."""

import gzip
import hashlib
import os
import re
import warnings

import h5py
import numpy as np
import pytest
import scipy.io

from mesc_tf.config import DATASETS
from mesc_tf.data import LOADERS, find_data_dir, load_dataset, validate_images
from mesc_tf.errors import MescError

from conftest import SHARED  # tests/conftest.py

REAL = SHARED / "data"
needs_real = pytest.mark.skipif(not REAL.is_dir() and os.environ.get("MESC_REQUIRE_SHARED") != "1",
                                reason=f"real data not found at {REAL}")


# --- synthetic file writers ------------------------------------------------------------------


def savemat(path, **variables):
    scipy.io.savemat(str(path), variables)


def save_v73(path, **variables):
    """A MATLAB v7.3-style file: HDF5 with every array's axes reversed."""
    with h5py.File(path, "w") as f:
        for k, v in variables.items():
            f[k] = np.asarray(v).T


def fea_gnd(n_classes, per_class, pixels=1024, seed=0, dtype=np.uint8, first_label=1):
    rng = np.random.default_rng(seed)
    fea = rng.integers(0, 256, size=(n_classes * per_class, pixels)).astype(dtype)
    gnd = np.repeat(np.arange(first_label, first_label + n_classes), per_class)[:, None]
    return fea, gnd.astype(np.uint8)


def write_idx(path, arr, magic, compress=True):
    arr = np.asarray(arr, np.uint8)
    dims = b"".join(d.to_bytes(4, "big") for d in arr.shape)
    raw = magic.to_bytes(4, "big") + dims + arr.tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(raw) if compress else raw)


def expect_error(match, fn, *args, **kwargs):
    with pytest.raises(MescError, match=match) as info:
        fn(*args, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


@pytest.fixture(scope="module")
def coil100(tmp_path_factory):
    """A synthetic COIL100.mat (7200 x 1024 uint8) in v5 and in v7.3 layout."""
    fea, gnd = fea_gnd(100, 72)
    v5, v73 = tmp_path_factory.mktemp("v5"), tmp_path_factory.mktemp("v73")
    savemat(v5 / "COIL100.mat", fea=fea, gnd=gnd)
    save_v73(v73 / "COIL100.mat", fea=fea, gnd=gnd)
    return fea, v5, v73


# --- data folder ----------------------------------------------------------------------------


def test_data_dir_precedence(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MESC_DATA_DIR", raising=False)
    assert find_data_dir() == tmp_path / "data"
    monkeypatch.setenv("MESC_DATA_DIR", str(tmp_path / "env"))
    assert find_data_dir() == tmp_path / "env"
    assert find_data_dir(tmp_path / "arg") == tmp_path / "arg"
    assert find_data_dir("rel") == tmp_path / "rel"
    # An empty MESC_DATA_DIR (`MESC_DATA_DIR= make ...`) is unset, not the current folder.
    monkeypatch.setenv("MESC_DATA_DIR", "")
    assert find_data_dir() == tmp_path / "data"
    assert "default data/" in expect_error("not found", load_dataset, "coil20")


def test_load_uses_env_then_argument(tmp_path, monkeypatch):
    fea, gnd = fea_gnd(40, 10)
    (tmp_path / "env").mkdir()
    savemat(tmp_path / "env" / "ORL_32x32.mat", fea=fea, gnd=gnd)
    monkeypatch.setenv("MESC_DATA_DIR", str(tmp_path / "env"))
    assert load_dataset("orl").source == (tmp_path / "env" / "ORL_32x32.mat",)
    msg = expect_error("not found", load_dataset, "orl", tmp_path / "nowhere")
    assert "--data-dir" in msg and "does not exist" in msg and str(tmp_path / "nowhere") in msg


def test_default_data_dir_missing_file_message(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MESC_DATA_DIR", raising=False)
    (tmp_path / "data").mkdir()
    msg = expect_error("coil20 data file not found", load_dataset, "coil20")
    assert str(tmp_path / "data" / "COIL20.mat") in msg
    assert "default data/" in msg and "--data-dir" in msg and "MESC_DATA_DIR" in msg
    # A command that resolved the folder and hands it on still names where it came from.
    assert "default data/" in expect_error("not found", load_dataset, "coil20", find_data_dir())
    monkeypatch.setenv("MESC_DATA_DIR", str(tmp_path / "data"))
    assert "from MESC_DATA_DIR" in expect_error("not found", load_dataset, "coil20")
    assert "from MESC_DATA_DIR" in expect_error("not found", load_dataset, "coil20",
                                                find_data_dir())


def test_every_dataset_has_a_loader():
    assert set(LOADERS) == set(DATASETS)
    expect_error("unknown dataset", load_dataset, "cifar")
    expect_error("only to eyaleb", load_dataset, "orl", n_subjects=3)


# --- loaders on synthetic files --------------------------------------------------------------


def test_orl_raw_row_major_and_relabel(tmp_path):
    fea, gnd = fea_gnd(40, 10, first_label=5)  # labels 5..44 -> 1..40 (gnd - min + 1)
    savemat(tmp_path / "ORL_32x32.mat", fea=fea, gnd=gnd)
    ds = load_dataset("orl", tmp_path)
    assert ds.x.shape == (400, 32, 32, 1) and ds.x.dtype == np.float32
    assert ds.y.dtype == np.int64 and ds.y.min() == 1 and ds.y.max() == 40 and ds.n_clusters == 40
    np.testing.assert_array_equal(ds.x[7, :, :, 0], fea[7].reshape(32, 32))  # no /255, no transpose


def test_coil40_coil100_from_coil100_mat(coil100):
    fea, v5, v73 = coil100
    c40, c100 = load_dataset("coil40", v5), load_dataset("coil100", v5)
    assert c40.x.shape == (2880, 32, 32, 1) and c100.x.shape == (7200, 32, 32, 1)
    assert np.unique(c40.y).size == 40 and np.unique(c100.y).size == 100
    assert (c40.n_clusters, c100.n_clusters) == (40, 100)
    np.testing.assert_array_equal(c40.x[-1, :, :, 0], fea[2879].reshape(32, 32))
    np.testing.assert_array_equal(c100.x[..., 0], fea.reshape(-1, 32, 32))


def test_v73_layout_gives_the_same_arrays(coil100):
    fea, v5, v73 = coil100
    a, b = load_dataset("coil40", v5), load_dataset("coil40", v73)
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.y, b.y)


def test_coil100_mat_in_unit_range_warns(tmp_path, coil100):
    """A COIL100.mat already scaled to [0, 1] loads, with a warning that the authors'
    auto-encoders want the standard file's 0..255."""
    fea, _, _ = coil100
    savemat(tmp_path / "COIL100.mat", fea=fea[:2880] / 255.0, gnd=np.repeat(np.arange(1, 41), 72))
    with pytest.warns(UserWarning, match=r"fea is in \[0, 1\].*multiply by 255"):
        assert load_dataset("coil40", tmp_path).x.max() <= 1


def test_coil40_needs_2880_rows(tmp_path):
    fea, gnd = fea_gnd(39, 72)
    savemat(tmp_path / "COIL100.mat", fea=fea, gnd=gnd)
    expect_error("needs the first 2880", load_dataset, "coil40", tmp_path)


@pytest.mark.parametrize("name", ["coil40", "coil100"])
def test_coil100_mat_with_more_than_7200_rows_is_refused(tmp_path, name):
    """COIL100 took the first 7200 rows of a longer file, the rest left out unseen."""
    fea, gnd = fea_gnd(101, 72)
    savemat(tmp_path / "COIL100.mat", fea=fea, gnd=gnd)
    expect_error("7272 rows, more than COIL100's 7200", load_dataset, name, tmp_path)


def test_coil20_and_toy(tmp_path):
    fea, gnd = fea_gnd(20, 4, dtype=np.float64)
    fea /= 255.0
    savemat(tmp_path / "COIL20.mat", fea=fea, gnd=gnd)
    ds = load_dataset("coil20", tmp_path)
    assert ds.x.shape == (80, 32, 32, 1) and ds.x.max() <= 1.0
    toy = load_dataset("toy", tmp_path)
    assert toy.x.shape == (12, 32, 32, 1) and toy.n_clusters == 3
    np.testing.assert_array_equal(toy.y, np.repeat([1, 2, 3], 4))
    np.testing.assert_allclose(toy.x[..., 0], fea[:12].reshape(-1, 32, 32).astype(np.float32))
    savemat(tmp_path / "COIL20.mat", fea=fea[12:], gnd=gnd[12:])  # objects 4..20 only
    expect_error("gnd numbers 17 objects 1..17 .* not COIL20's 1..20", load_dataset, "toy",
                 tmp_path)


def _yale_Y(n_img=3, n_subj=4):
    """Y (2016, n_img, n_subj) whose image (j, i) is known: I[r, c] = 1000*i + 10*j + r + 100*c."""
    r, c = np.mgrid[0:48, 0:42]
    Y = np.zeros((2016, n_img, n_subj))
    for i in range(n_subj):
        for j in range(n_img):
            Y[:, j, i] = (1000 * i + 10 * j + r + 100 * c).ravel(order="F")  # MATLAB I(:)
    return Y


@pytest.mark.filterwarnings("ignore:.*goes up to")  # _yale_Y's pixels encode their place
@pytest.mark.parametrize("writer", [savemat, save_v73])
def test_eyaleb_column_major_subject_major(tmp_path, writer):
    Y = _yale_Y()
    writer(tmp_path / "YaleBCrop025.mat", Y=Y)
    ds = load_dataset("eyaleb", tmp_path)
    assert ds.x.shape == (12, 48, 42, 1) and ds.n_clusters == 4
    np.testing.assert_array_equal(ds.y, np.repeat([1, 2, 3, 4], 3))
    r, c = np.mgrid[0:48, 0:42]
    for i, j in [(0, 0), (2, 1), (3, 2)]:
        np.testing.assert_array_equal(ds.x[3 * i + j, :, :, 0], 1000 * i + 10 * j + r + 100 * c)
    sub = load_dataset("eyaleb", tmp_path, n_subjects=2)
    assert sub.x.shape == (6, 48, 42, 1) and sub.n_clusters == 2
    np.testing.assert_array_equal(sub.x, ds.x[:6])
    for bad in (0, 5, 2.5, float("nan"), "3"):
        expect_error("n_subjects must be", load_dataset, "eyaleb", tmp_path, n_subjects=bad)


def test_eyaleb_wrong_Y_shape(tmp_path):
    savemat(tmp_path / "YaleBCrop025.mat", Y=np.zeros((2000, 3, 4)))
    expect_error(r"Y has shape \(2000, 3, 4\)", load_dataset, "eyaleb", tmp_path)


def test_usps_mapped_to_unit_interval(tmp_path):
    rng = np.random.default_rng(1)
    gnd = rng.permutation(np.repeat(np.arange(1, 11), 3))[:, None]  # not sorted by class
    fea = rng.uniform(-1, 1, size=(30, 256))
    fea[0, :2] = [-1, 1]
    savemat(tmp_path / "USPS.mat", fea=fea, gnd=gnd)
    ds = load_dataset("usps", tmp_path)
    assert ds.x.shape == (30, 16, 16, 1) and ds.x.min() == 0.0 and ds.x.max() == 1.0
    np.testing.assert_allclose(ds.x[5, :, :, 0], ((fea[5] + 1) / 2).reshape(16, 16), rtol=1e-6)
    np.testing.assert_array_equal(ds.y, gnd.ravel())  # file order kept
    savemat(tmp_path / "USPS.mat", fea=(fea + 1) / 2, gnd=gnd)  # already in [0, 1]
    expect_error(r"fea is in \[0, 1\], but usps reads the USPS.mat whose fea is in \[-1, 1\]",
                 load_dataset, "usps", tmp_path)
    # Another scale that has negative values (-255..255) is no [-1, 1] file either.
    savemat(tmp_path / "USPS.mat", fea=fea * 255, gnd=gnd)
    expect_error(r"fea is in \[-255, 255\], but usps reads the USPS.mat whose fea is in \[-1, 1\]",
                 load_dataset, "usps", tmp_path)


def test_usps_nan_is_named_as_such(tmp_path):
    """A NaN in USPS.mat's fea is reported as one, not as a scale "[nan, nan]"."""
    fea = np.random.default_rng(1).uniform(-1, 1, size=(20, 256))
    fea[3, 4] = np.nan
    savemat(tmp_path / "USPS.mat", fea=fea, gnd=np.repeat(np.arange(1, 11), 2)[:, None])
    msg = expect_error("1 NaN or infinite", load_dataset, "usps", tmp_path)
    assert str(tmp_path / "USPS.mat") in msg


@pytest.mark.parametrize("compress", [True, False])
def test_mnist_idx(tmp_path, compress):
    rng = np.random.default_rng(2)
    images = rng.integers(0, 256, size=(20, 28, 28))
    digits = np.tile(np.arange(10), 2)
    suffix = ".gz" if compress else ""
    write_idx(tmp_path / "mnist" / f"t10k-images-idx3-ubyte{suffix}", images, 2051, compress)
    write_idx(tmp_path / "mnist" / f"t10k-labels-idx1-ubyte{suffix}", digits, 2049, compress)
    ds = load_dataset("mnist", tmp_path)
    assert ds.x.shape == (20, 28, 28, 1)
    np.testing.assert_array_equal(ds.x[..., 0], images)  # raw, row-major, file order
    np.testing.assert_array_equal(ds.y, digits + 1)
    # What the run records name: each file read, by its path in the data folder, and its SHA-256.
    names = [f"mnist/t10k-{kind}-ubyte{suffix}" for kind in ("images-idx3", "labels-idx1")]
    assert ds.file_hashes == {n: hashlib.sha256((tmp_path / n).read_bytes()).hexdigest()
                              for n in names}


def test_file_hashes_are_of_the_files_as_loaded(tmp_path):
    """The hashes are taken when the data is loaded: a file replaced (or moved away) while a
    long run trains on the loaded images does not change what its records name."""
    path = tmp_path / "ORL_32x32.mat"
    fea = np.random.default_rng(3).integers(0, 256, size=(40, 1024)).astype(np.uint8)
    savemat(path, fea=fea, gnd=np.arange(1, 41)[:, None])
    first = hashlib.sha256(path.read_bytes()).hexdigest()
    ds = load_dataset("orl", tmp_path)
    path.unlink()
    assert ds.file_hashes == {"ORL_32x32.mat": first}


def test_mnist_errors(tmp_path):
    images, digits = np.zeros((10, 28, 28)), np.arange(10)
    img = tmp_path / "mnist" / "t10k-images-idx3-ubyte.gz"
    lab = tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz"
    write_idx(img, images, 2051)
    msg = expect_error("mnist data file not found", load_dataset, "mnist", tmp_path)
    assert "t10k-labels-idx1-ubyte.gz or " in msg  # both names are listed
    write_idx(lab, digits, 2051)  # wrong magic
    expect_error("magic number 2049", load_dataset, "mnist", tmp_path)
    write_idx(lab, digits[:9], 2049)
    expect_error("9 labels for 10 images", load_dataset, "mnist", tmp_path)
    raw = gzip.decompress(lab.read_bytes())
    lab.write_bytes(gzip.compress(raw[:-3]))  # truncated
    expect_error("truncated", load_dataset, "mnist", tmp_path)
    lab.write_bytes(b"not gzip at all")
    expect_error(f"cannot read {lab}", load_dataset, "mnist", tmp_path)
    write_idx(lab, digits, 2049)
    write_idx(img, np.zeros((10, 20, 20)), 2051)
    expect_error("images are 20x20 but the architecture expects 28x28",
                 load_dataset, "mnist", tmp_path)


# --- error cases on .mat files ---------------------------------------------------------------


def test_corrupt_mat(tmp_path):
    (tmp_path / "COIL20.mat").write_bytes(b"MATLAB 5.0 garbage" * 10)
    msg = expect_error("cannot read", load_dataset, "coil20", tmp_path)
    assert str(tmp_path / "COIL20.mat") in msg


@pytest.mark.parametrize("dataset", ["coil20", "mnist"])
def test_unreadable_data_file_is_not_called_corrupt(tmp_path, monkeypatch, dataset):
    """A data file this user may not read says permission denied, not "corrupt: fetch it
    again" (as root, chmod denies nothing: the readers and os.access stand in)."""
    import errno

    savemat(tmp_path / "COIL20.mat", **dict(zip(("fea", "gnd"), fea_gnd(20, 2))))
    write_idx(tmp_path / "mnist" / "t10k-images-idx3-ubyte.gz", np.zeros((10, 28, 28)), 2051)
    write_idx(tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz", np.arange(10), 2049)

    def denied(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(scipy.io, "loadmat", denied)
    monkeypatch.setattr(gzip, "open", denied)
    msg = expect_error("permission denied; make it readable", load_dataset, dataset, tmp_path)
    assert "corrupt" not in msg and "fetch it again" not in msg
    # Unreadable by its mode, whatever the reader raised.
    monkeypatch.setattr(scipy.io, "loadmat", lambda *a, **k: 1 / 0)
    monkeypatch.setattr(gzip, "open", lambda *a, **k: (_ for _ in ()).throw(EOFError()))
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    expect_error("permission denied", load_dataset, dataset, tmp_path)


def test_missing_variable_names_what_was_found(tmp_path):
    savemat(tmp_path / "COIL20.mat", X=np.zeros((4, 1024)), labels=np.ones((4, 1)))
    expect_error(r"no variable 'fea' \(found: X, labels\)", load_dataset, "coil20", tmp_path)


def test_wrong_pixel_count(tmp_path):
    fea, gnd = fea_gnd(20, 2, pixels=1000)
    savemat(tmp_path / "COIL20.mat", fea=fea, gnd=gnd)
    expect_error("1000.*32x32 = 1024", load_dataset, "coil20", tmp_path)


def test_nan_in_fea(tmp_path):
    fea, gnd = fea_gnd(20, 2, dtype=np.float64)
    fea[3, 5] = np.nan
    savemat(tmp_path / "COIL20.mat", fea=fea, gnd=gnd)
    expect_error("1 NaN or infinite", load_dataset, "coil20", tmp_path)


def test_label_count_mismatch(tmp_path):
    fea, gnd = fea_gnd(20, 2)
    savemat(tmp_path / "COIL20.mat", fea=fea, gnd=gnd[:-1])
    expect_error("39 labels but fea has 40 samples", load_dataset, "coil20", tmp_path)


def test_empty_class(tmp_path):
    fea, gnd = fea_gnd(20, 2)
    gnd[gnd == 20] = 19  # class 20 empty: 19 distinct classes
    savemat(tmp_path / "COIL20.mat", fea=fea, gnd=gnd)
    expect_error("19 distinct classes but coil20 has 20", load_dataset, "coil20", tmp_path)
    gnd[-2:] = 21  # 20 distinct values but a gap: 1..19, 21
    savemat(tmp_path / "COIL20.mat", fea=fea, gnd=gnd)
    expect_error(r"empty classes \[20\]", load_dataset, "coil20", tmp_path)


# --- validate_images on user arrays ----------------------------------------------------------


def test_validate_images():
    x = np.arange(2 * 4 * 5).reshape(2, 4, 5)
    out = validate_images(x)
    assert out.shape == (2, 4, 5, 1) and out.dtype == np.float32
    assert validate_images(out, y=[1, 2], n_clusters=2, image_shape=(4, 5)).shape == (2, 4, 5, 1)
    expect_error("mine: images have shape", validate_images, np.zeros((2, 4, 5, 3)), where="mine")
    expect_error("images are 4x5 but the architecture expects 32x32",
                 validate_images, x, image_shape=(32, 32))
    expect_error("NaN", validate_images, np.full((2, 4, 5), np.inf))
    big = np.full((2, 4, 5), 1e300)  # finite in float64, inf in float32
    expect_error("beyond float32's range", validate_images, big)
    huge = [[[10**400, 1]], [[1, 2]]]  # Python ints: an object array whose float64 overflows
    expect_error("X: images hold values beyond float32's range", validate_images, huge, where="X")
    expect_error("2 images for 3 clusters", validate_images, x, n_clusters=3)
    expect_error("3 labels for 2 images", validate_images, x, y=[1, 2, 3])
    expect_error("1 distinct classes", validate_images, x, y=[1, 1], n_clusters=2)
    expect_error("must be numbers", validate_images, np.array([["a"]]))
    expect_error("clustering needs at least 2", validate_images, np.ones((1, 4, 4)), n_clusters=1)
    with warnings.catch_warnings():  # zero pixels (every real dataset has them) are no warning
        warnings.simplefilter("error")
        validate_images(np.stack([np.zeros((4, 5)), np.ones((4, 5))]))


def test_fea_stored_one_sample_per_column_is_read_the_same(tmp_path):
    fea = np.random.default_rng(0).integers(0, 256, (400, 1024)).astype(np.uint8)
    gnd = np.repeat(np.arange(1, 41), 10)[:, None]
    scipy.io.savemat(str(tmp_path / "ORL_32x32.mat"), {"fea": fea.T, "gnd": gnd})
    np.testing.assert_array_equal(load_dataset("orl", tmp_path).x[7, :, :, 0],
                                  fea[7].reshape(32, 32))


# --- the real files (../shared/data beside the repo) -----------------------------------------


def counts(ds):
    return np.bincount(ds.y)[1:].tolist()


@needs_real
def test_real_orl_coil20_toy():
    orl = load_dataset("orl", REAL)
    assert orl.x.shape == (400, 32, 32, 1) and orl.x.max() > 200 and counts(orl) == [10] * 40
    fea = scipy.io.loadmat(str(REAL / "ORL_32x32.mat"))["fea"]
    np.testing.assert_array_equal(orl.x[0, :, :, 0], fea[0].reshape(32, 32))
    coil = load_dataset("coil20", REAL)
    assert coil.x.shape == (1440, 32, 32, 1) and 0 <= coil.x.min() and coil.x.max() <= 1
    assert counts(coil) == [72] * 20
    toy = load_dataset("toy", REAL)
    assert toy.x.shape == (216, 32, 32, 1) and counts(toy) == [72] * 3
    np.testing.assert_array_equal(toy.x, coil.x[:216])


@needs_real
def test_real_eyaleb():
    ds = load_dataset("eyaleb", REAL)
    assert ds.x.shape == (2432, 48, 42, 1) and counts(ds) == [64] * 38 and ds.x.max() > 200
    I = scipy.io.loadmat(str(REAL / "YaleBCrop025.mat"))["I"]  # upright 48x42 images
    for i, j in [(0, 0), (5, 17), (37, 63)]:
        np.testing.assert_array_equal(ds.x[64 * i + j, :, :, 0], I[:, :, j, i])
    assert load_dataset("eyaleb", REAL, n_subjects=10).x.shape == (640, 48, 42, 1)


@needs_real
def test_real_usps_mnist():
    # Class counts: those of the whole USPS set (7291 + 2007 images) and of the MNIST test set
    # as published; labels are the digits + 1, as the loaders give them.
    usps = load_dataset("usps", REAL)
    assert usps.x.shape == (9298, 16, 16, 1) and usps.x.min() >= 0 and usps.x.max() <= 1
    assert counts(usps) == [1553, 1269, 929, 824, 852, 716, 834, 792, 708, 821]
    mnist = load_dataset("mnist", REAL)
    assert mnist.x.shape == (10000, 28, 28, 1) and mnist.x.max() == 255
    assert counts(mnist) == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert mnist.y[:5].tolist() == [8, 3, 2, 1, 5]  # digits 7, 2, 1, 0, 4


# --- cases a mutation run found unchecked ----------------------------------------------------


def test_square_fea_is_read_by_rows(tmp_path):
    """As many samples as pixels (256 USPS images of 16x16): fea is read one image per row, as
    stored, not taken for a transposed file; gnd 0..9 become 1..10 (gnd - min + 1)."""
    rng = np.random.default_rng(3)
    fea = rng.uniform(-1, 1, size=(256, 256))
    gnd = (np.arange(256) % 10)[:, None]
    savemat(tmp_path / "USPS.mat", fea=fea, gnd=gnd)
    ds = load_dataset("usps", tmp_path)
    np.testing.assert_allclose(ds.x[5, :, :, 0], ((fea[5] + 1) / 2).reshape(16, 16), rtol=1e-6)
    np.testing.assert_array_equal(ds.y, gnd.ravel() + 1)


def test_fractional_labels_are_refused(tmp_path):
    """gnd 1.5 is no class: the file is refused, not truncated to class 1."""
    fea, gnd = fea_gnd(20, 2, dtype=np.float64)
    gnd = gnd.astype(np.float64)
    gnd[0] = 1.5
    savemat(tmp_path / "COIL20.mat", fea=fea / 255.0, gnd=gnd)
    expect_error("whole-number labels", load_dataset, "coil20", tmp_path)


def test_coil40_labels_follow_the_rows(tmp_path):
    """COIL40 is COIL100.mat's first 2880 rows with their own labels, in file order (a file
    whose rows are not sorted by object keeps each image with its label)."""
    fea, gnd = fea_gnd(100, 72)
    order = np.random.default_rng(4).permutation(2880)
    fea[:2880], gnd[:2880] = fea[order], gnd[order]
    savemat(tmp_path / "COIL100.mat", fea=fea, gnd=gnd)
    ds = load_dataset("coil40", tmp_path)
    np.testing.assert_array_equal(ds.y, gnd[:2880].ravel())
    np.testing.assert_array_equal(ds.x[9, :, :, 0], fea[9].reshape(32, 32))


def test_toy_labels_follow_the_configured_object_order(tmp_path, monkeypatch):
    """Toy labels are 1..3 in the order the config lists COIL20's objects, not by object id."""
    from mesc_tf.config import get_config

    fea, gnd = fea_gnd(20, 2, dtype=np.float64)
    savemat(tmp_path / "COIL20.mat", fea=fea / 255.0, gnd=gnd)
    monkeypatch.setitem(get_config("toy").extra, "coil20_objects", (3, 1, 2))
    toy = load_dataset("toy", tmp_path)
    np.testing.assert_array_equal(toy.y, [2, 2, 3, 3, 1, 1])  # objects 1, 1, 2, 2, 3, 3


def test_validate_images_edges():
    """No images, images of no pixel, n_clusters 0 or 2.5 are errors; an all-zero batch is fine
    when not training (encoding); negative pixels warn (the decoder's last ReLU cannot reach
    them)."""
    x = np.ones((3, 4, 5))
    expect_error("images have shape", validate_images, np.zeros((0, 4, 5)), training=False)
    # Images with no pixel: a shape error, not 'every pixel of every image is 0'.
    expect_error(r"images have shape \(6, 0, 16\)", validate_images, np.zeros((6, 0, 16)))
    expect_error("n_clusters must be a whole number >= 1", validate_images, x, n_clusters=0)
    expect_error("n_clusters must be a whole number >= 1", validate_images, x, n_clusters=2.5)
    # True passed for 1 cluster, and a string failed in int() with a bare ValueError.
    for k in (True, "abc"):
        expect_error(re.escape(f"n_clusters must be a whole number >= 1, got {k!r}"),
                     validate_images, x, n_clusters=k)
    assert validate_images(x * np.arange(1, 4)[:, None, None],
                           n_clusters=np.float64(2.0)).shape == (3, 4, 5, 1)
    # Identical images leave C, and so the labels, arbitrary; one cluster, or encoding, is fine.
    expect_error("all 3 images are the same; there is nothing to tell the clusters apart",
                 validate_images, x, n_clusters=2)
    assert validate_images(x, n_clusters=1).shape == validate_images(x, training=False).shape
    assert validate_images(np.zeros((2, 4, 5)), training=False).shape == (2, 4, 5, 1)
    with pytest.warns(UserWarning, match=r"50% of the pixels are negative"):
        validate_images(np.stack([-x[0], x[0]]))


def test_toy_picks_the_objects_coil20_numbers_so(tmp_path):
    """Toy's objects 1, 2, 3 are those the coil20 loader labels 1, 2, 3: a COIL20.mat whose gnd
    starts at 0 is relabelled (gnd - min + 1) before the objects are picked."""
    fea, gnd = fea_gnd(20, 2, dtype=np.float64, first_label=0)
    savemat(tmp_path / "COIL20.mat", fea=fea / 255.0, gnd=gnd)
    coil20, toy = load_dataset("coil20", tmp_path), load_dataset("toy", tmp_path)
    np.testing.assert_array_equal(toy.x, coil20.x[coil20.y <= 3])
    np.testing.assert_array_equal(toy.y, coil20.y[coil20.y <= 3])


def test_sparse_variables_are_read_as_dense(tmp_path):
    """A .mat whose fea MATLAB stored sparse loads as the dense file does (scipy returns a
    sparse matrix, which np.asarray turns into a 0-d object array: 'fea has shape ()')."""
    import scipy.sparse

    fea, gnd = fea_gnd(40, 10)
    savemat(tmp_path / "ORL_32x32.mat", fea=fea, gnd=gnd)
    dense = load_dataset("orl", tmp_path)
    savemat(tmp_path / "ORL_32x32.mat", fea=scipy.sparse.csc_matrix(fea.astype(np.float64)),
            gnd=gnd)
    np.testing.assert_array_equal(load_dataset("orl", tmp_path).x, dense.x)


def test_coil40_from_a_coil100_mat_not_sorted_by_object(tmp_path):
    """A COIL100.mat whose rows are not sorted by object has other objects than 1..40 in its
    first 2880 rows: the error says so, not 'a wrong n_clusters', which coil40 cannot change."""
    fea, gnd = fea_gnd(100, 72)
    savemat(tmp_path / "COIL100.mat", fea=fea, gnd=np.tile(np.arange(1, 101), 72)[:, None])
    msg = expect_error("the first 2880 rows hold 100 objects", load_dataset, "coil40", tmp_path)
    assert "sorted by object" in msg and "n_clusters" not in msg
    # COIL100 takes every row: 99 objects is another file, which no sorting would mend.
    savemat(tmp_path / "COIL100.mat", fea=fea, gnd=np.minimum(gnd, 99))
    msg = expect_error("labels hold 99 distinct classes but coil100 has 100", load_dataset,
                       "coil100", tmp_path)
    assert "sorted" not in msg


@pytest.mark.parametrize("name", ["orl", "eyaleb"])
def test_raw_pixel_datasets_in_unit_range_warn(tmp_path, name):
    """ORL and EYaleB are fed raw 0..255, the scale of their auto-encoders (the authors' ORL one
    reconstructs x/255 with relative error 33): a file already scaled to [0, 1] loads, with the
    warning COIL100.mat gets."""
    if name == "orl":
        fea, gnd = fea_gnd(40, 2)
        savemat(tmp_path / "ORL_32x32.mat", fea=fea / 255.0, gnd=gnd)
    else:
        savemat(tmp_path / "YaleBCrop025.mat", Y=_yale_Y() / _yale_Y().max())
    with pytest.warns(UserWarning, match=r"in \[0, 1\].*0\.\.255.*multiply by 255"):
        assert load_dataset(name, tmp_path).x.max() <= 1


@pytest.mark.parametrize("name", ["coil20", "toy"])
def test_coil20_mat_in_0_255_warns(tmp_path, name):
    """COIL20 (and Toy) are fed as stored, in [0, 1], the scale of their auto-encoders: a
    COIL20.mat in 0..255 loads, with a warning that names the file and says to divide by 255."""
    fea, gnd = fea_gnd(20, 2, dtype=np.float64)
    savemat(tmp_path / "COIL20.mat", fea=fea, gnd=gnd)
    with pytest.warns(UserWarning, match=r"COIL20.mat: fea goes up to 255, .*\[0, 1\]; divide "
                      "by 255"):
        assert load_dataset(name, tmp_path).x.max() == 255
    savemat(tmp_path / "COIL20.mat", fea=fea / 255, gnd=gnd)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_dataset(name, tmp_path)


@pytest.mark.parametrize("name", ["orl", "coil40", "eyaleb"])
def test_raw_pixel_datasets_beyond_255_warn(tmp_path, name):
    """A file of a dataset fed raw 0..255 whose values go beyond 255 (here 0..65025) loads, with
    a warning that names the file and the scale its auto-encoders expect."""
    if name == "eyaleb":
        fn, Y = "YaleBCrop025.mat", _yale_Y()
        savemat(tmp_path / fn, Y=Y / Y.max() * 255 ** 2)
    else:
        fn, (fea, gnd) = (("ORL_32x32.mat", fea_gnd(40, 2)) if name == "orl" else
                          ("COIL100.mat", fea_gnd(40, 72)))
        fea[0, 0] = 255
        savemat(tmp_path / fn, fea=fea.astype(np.float64) * 255, gnd=gnd)
    with pytest.warns(UserWarning, match=fn + r": \w+ goes up to 65025, .*0\.\.255; rescale"):
        assert load_dataset(name, tmp_path).x.max() == 255 ** 2


@pytest.mark.parametrize("damage,message", [("inf", "1 NaN or infinite"),
                                            ("labels", "labels")])
def test_a_bad_file_is_an_error_not_a_scale_warning_first(tmp_path, damage, message):
    """An inf among ORL's pixels, or a [0, 1] file with 39 classes, is the one error line that
    names it, without a scale warning before it ('goes up to inf', 'is in [0, 1]'): the scale
    is judged once the file passed its checks."""
    fea, gnd = fea_gnd(40, 2)
    fea = fea.astype(np.float64)
    if damage == "inf":
        fea[0, 0] = np.inf
    else:
        fea, gnd = fea / 255, np.minimum(gnd, 39)
    savemat(tmp_path / "ORL_32x32.mat", fea=fea, gnd=gnd)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        expect_error(message, load_dataset, "orl", tmp_path)


def test_benchmark_with_another_class_count_names_the_file_not_n_clusters(tmp_path):
    """COIL20.mat saved as ORL_32x32.mat: the error says the file is not ORL's; it does not
    suggest changing n_clusters, which no benchmark command takes."""
    fea, gnd = fea_gnd(20, 20)
    savemat(tmp_path / "ORL_32x32.mat", fea=fea, gnd=gnd)
    msg = expect_error("labels hold 20 distinct classes but orl has 40", load_dataset, "orl",
                       tmp_path)
    assert "not the expected orl file" in msg and "n_clusters" not in msg
    assert msg.endswith("give the benchmark's file (README, 'Data')")  # what to do


# --- review of session 65: inputs that gave a traceback or a wrong message -------------------


def test_a_data_folder_that_cannot_be_searched_is_one_error(tmp_path, monkeypatch):
    """A folder without search permission (pathlib re-raises EACCES from is_file) is one
    MescError naming the path, not a PermissionError traceback (as root, chmod denies nothing:
    is_file stands in)."""
    import errno
    import pathlib

    def denied(self, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(pathlib.Path, "is_file", denied)
    msg = expect_error("cannot look for .*Permission denied.*make its folder readable",
                       load_dataset, "coil20", tmp_path / "locked")
    assert str(tmp_path / "locked") in msg


@pytest.mark.parametrize("dataset,file,fea", [
    ("usps", "USPS.mat", np.full((30, 256), 0.5 + 1j)),
    ("usps", "USPS.mat", np.array([[np.array([[0.5]])] * 256] * 30, dtype=object)),
    ("coil20", "COIL20.mat", np.full((40, 1024), 0.5 + 1j))])
def test_fea_that_is_not_real_numbers_is_refused_before_its_range_is_read(
        tmp_path, dataset, file, fea):
    """A complex or cell-array fea: USPS's range check ran first (a TypeError traceback from a
    cell array; a complex one loaded with its imaginary part dropped)."""
    gnd = np.repeat(np.arange(1, 11 if dataset == "usps" else 21), 3 if dataset == "usps" else 2)
    savemat(tmp_path / file, fea=fea, gnd=gnd[:, None])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning on the way
        expect_error(f"fea must hold real numbers, got dtype {fea.dtype}", load_dataset, dataset,
                     tmp_path)


@pytest.mark.parametrize("shape", [(64, 0), (0, 38)])
def test_eyaleb_y_without_images_is_called_so(tmp_path, shape):
    """Y of shape (2016, 64, 0) said "n_subjects must be a whole number in 1..0, got None",
    an option the user never passed."""
    save_v73(tmp_path / "YaleBCrop025.mat", Y=np.zeros((2016, *shape)))
    msg = expect_error(r"Y has shape \(2016, \d+, \d+\), no image", load_dataset, "eyaleb",
                       tmp_path)
    assert "n_subjects" not in msg


def test_v73_sparse_variable_is_named_not_called_missing(tmp_path):
    """MATLAB v7.3 stores a sparse matrix as a group (data, ir, jc): the loader said the file
    had no 'fea'."""
    fea, gnd = fea_gnd(20, 2)
    with h5py.File(tmp_path / "COIL20.mat", "w") as f:
        g = f.create_group("fea")
        g.attrs["MATLAB_sparse"] = 1024
        g["data"], g["ir"], g["jc"] = np.ones(3), np.arange(3), np.zeros(41, np.int64)
        f["gnd"] = gnd.T
    msg = expect_error("stores fea as a sparse matrix in MATLAB v7.3 format", load_dataset,
                       "coil20", tmp_path)
    assert "no variable" not in msg and "corrupt" not in msg
    # A sparse variable the loader does not read is no reason to refuse the file.
    with h5py.File(tmp_path / "COIL20.mat", "w") as f:
        f["fea"], f["gnd"] = (fea / 255.0).T, gnd.T
        f.create_group("W").attrs["MATLAB_sparse"] = 4
    assert load_dataset("coil20", tmp_path).x.shape == (40, 32, 32, 1)


def test_validate_images_refuses_a_ragged_list_in_one_line():
    expect_error("input: images are not one array", validate_images,
                 [np.zeros((4, 5)), np.zeros((4, 6))])
