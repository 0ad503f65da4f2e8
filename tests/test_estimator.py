"""The scikit-learn estimator (issue 8): parameter interface, input checks, clustering a small
union-of-subspaces image set, and equality with the command-line code path."""

import copy
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.ndimage import gaussian_filter
from sklearn.base import clone
from sklearn.utils import estimator_checks

import mesc_tf
from mesc_tf import MESCClustering, memory, pipeline, save_autoencoder, sources
from mesc_tf.config import Architecture, Pretrain, Settings, get_config
from mesc_tf.errors import MescError
from mesc_tf.estimator import default_architecture
from mesc_tf.metrics import accuracy
from scripts import load_script  # tests/scripts.py

ROOT = Path(__file__).resolve().parents[1]

# Settings for 3 clusters × 30 images of 16×16: a short pretraining and fine-tuning, and
# post-clustering suited to few images per cluster (thrC keeps the entries holding 20% of each
# column's mass, SVD rank 3·3+1 = 10, power 1). When developed, seeds 0, 1, 2 (data and
# random_state) gave ACC 1.0, 0.98, 0.98.
SMALL = dict(pretrain_steps=100, epochs=30, thr=0.2, subspace_dim=3, power=1.0)
SMALL_SETTINGS = Settings(epochs=30, thr=0.2, subspace_dim=3, power=1.0)
SEED = 0


def union_of_subspaces(n_clusters=3, per_cluster=30, size=16, dim=3, seed=0):
    """Images that are nonnegative combinations of ``dim`` random smooth nonnegative basis
    images per cluster (smoothed Gaussian noise, positive part, peak 1); pixels in [0, ~1]."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for k in range(n_clusters):
        basis = np.stack([np.maximum(gaussian_filter(rng.standard_normal((size, size)), 2.0,
                                                     mode="wrap"), 0) for _ in range(dim)])
        basis /= basis.max(axis=(1, 2), keepdims=True)
        coef = rng.random((per_cluster, dim))
        xs.append(np.einsum("nd,dhw->nhw", coef, basis) * (2.0 / dim))
        ys.append(np.full(per_cluster, k))
    return np.concatenate(xs).astype(np.float32), np.concatenate(ys)


@pytest.fixture(scope="module")
def images():
    return union_of_subspaces(seed=SEED)


@pytest.fixture(scope="module")
def fitted(images):
    """The estimator fitted (fit_predict) on the synthetic images, pretraining on them."""
    x, _ = images
    est = MESCClustering(3, random_state=SEED, **SMALL)
    est.fit_predict_labels = est.fit_predict(x)  # kept for the test, not an estimator attribute
    return est


# --- parameter interface (no fitting) -------------------------------------------------------


def test_constructor_stores_arguments_unchanged():
    kernels, weights, shape = [5, 3], Path("some/ae.h5"), (16, 16)
    est = MESCClustering(7, framework="coupled", regularizer="l1", reg1=2.5, reg2="not checked",
                         kernels=kernels, channels=None, weights=weights, image_shape=shape,
                         random_state=None, pretrain_steps=-3, verbose=2)
    p = est.get_params()
    assert p["n_clusters"] == 7 and p["framework"] == "coupled" and p["regularizer"] == "l1"
    assert p["reg1"] == 2.5 and p["reg2"] == "not checked" and p["pretrain_steps"] == -3
    assert p["kernels"] is kernels and p["weights"] is weights and p["image_shape"] is shape
    assert p["random_state"] is None and p["verbose"] == 2
    # Defaults are the released MESC settings and the project's pretraining schedule.
    d = MESCClustering(3).get_params()
    assert {k: d[k] for k in Settings().to_dict()} == Settings().to_dict()
    assert (d["pretrain_lr"], d["pretrain_steps"], d["pretrain_patience"],
            d["pretrain_min_delta"]) == (Pretrain.lr, Pretrain.max_steps, Pretrain.patience,
                                         Pretrain.min_delta)
    assert d["weights"] is None and d["kernels"] is None and d["random_state"] == 0
    assert not [k for k in vars(MESCClustering(3)) if k.endswith("_")]


def test_clone_keeps_params_and_drops_fit(fitted):
    est = MESCClustering(4, lr=3e-4, kernels=(3, 3), channels=(8, 16), random_state=5)
    twin = clone(est)
    assert twin is not est and twin.get_params() == est.get_params()
    refit = clone(fitted)
    assert refit.get_params() == fitted.get_params()
    assert not hasattr(refit, "labels_") and not hasattr(refit, "encoder_")


def test_get_set_params_round_trip():
    est = MESCClustering(3)
    new = dict(n_clusters=5, framework="coupled", regularizer="l2", reg1=1.0, reg2=30.0,
               epochs=12, thr=0.1, weights="x.h5", kernels=3, channels=(4, 8), random_state=9)
    assert est.set_params(**new) is est
    assert {k: est.get_params()[k] for k in new} == new
    again = MESCClustering(**est.get_params())
    assert again.get_params() == est.get_params()
    with pytest.raises(ValueError, match="Invalid parameter"):
        est.set_params(n_cluster=3)
    assert "n_clusters=5" in repr(est) and "framework='coupled'" in repr(est)


# scikit-learn's generic checks that apply without fitting: most others fit 2-D tabular data,
# which an image estimator rejects by design (see the README).
APPLICABLE_CHECKS = ["check_estimator_cloneable", "check_estimator_repr",
                     "check_no_attributes_set_in_init", "check_get_params_invariance",
                     "check_set_params", "check_parameters_default_constructible",
                     "check_do_not_raise_errors_in_init_or_set_params", "check_mixin_order",
                     "check_valid_tag_types", "check_estimator_tags_renamed"]


@pytest.mark.parametrize("check", APPLICABLE_CHECKS)
def test_sklearn_basic_checks(check):
    getattr(estimator_checks, check)("MESCClustering", MESCClustering(3))


def test_tags_say_clusterer_of_images():
    tags = MESCClustering(3).__sklearn_tags__()
    assert tags.estimator_type == "clusterer"
    assert tags.input_tags.three_d_array and not tags.input_tags.two_d_array


def test_package_exports():
    assert set(mesc_tf.__all__) == {"MESCClustering", "MescError", "MescWarning", "get_config",
                                    "load_autoencoder", "load_dataset", "save_autoencoder"}
    assert all(hasattr(mesc_tf, name) for name in mesc_tf.__all__)
    with pytest.raises(ImportError, match="MESCClustering .*mesc_tf.model.MESCNet"):
        from mesc_tf import MESCNet  # noqa: F401
    assert "MESCClustering" in dir(mesc_tf)
    assert not hasattr(mesc_tf, "nope")
    with pytest.raises(AttributeError, match="module 'mesc_tf' has no attribute 'nope'"):
        mesc_tf.nope  # noqa: B018


_IMPORT_PROBE = """
import ctypes, os
calls = []
class Libc:
    def __init__(self, name):
        pass
    def mallopt(self, *args):
        calls.append(list(args))
ctypes.CDLL = Libc
import mesc_tf
print(calls, os.environ["TF_ONEDNN_USE_SYSTEM_ALLOCATOR"], "MESCClustering" in dir(mesc_tf))
"""


@pytest.mark.parametrize("env,want", [
    ({}, "[[-8, 1]] 1 True"),  # M_ARENA_MAX = -8 in glibc's malloc.h
    ({"MALLOC_ARENA_MAX": "4", "TF_ONEDNN_USE_SYSTEM_ALLOCATOR": "0"}, "[] 0 True")])
def test_package_import_sets_the_memory_options_unless_already_set(env, want):
    """Importing mesc_tf (in a fresh process, glibc's mallopt recorded): one malloc arena and
    oneDNN on the system allocator, each left as the user set it; and dir() names the lazy
    MESCClustering before it is first used."""
    import os
    import subprocess
    import sys

    base = {k: v for k, v in os.environ.items()
            if k not in ("MALLOC_ARENA_MAX", "TF_ONEDNN_USE_SYSTEM_ALLOCATOR")}
    proc = subprocess.run([sys.executable, "-c", _IMPORT_PROBE], capture_output=True, text=True,
                          env={**base, "PYTHONPATH": str(ROOT), **env}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == want


def test_default_architecture():
    assert default_architecture((16, 16)) == Architecture((16, 16), (5, 3, 3), (10, 20, 30))
    assert default_architecture((48, 42)).kernels == (5, 3, 3)
    assert default_architecture((12, 20)) == Architecture((12, 20), (3,), (15,))


def test_architecture_from_parameters():
    arch = MESCClustering(2, kernels=3, channels=(4, 8))._architecture((10, 10))
    assert arch == Architecture((10, 10), (3, 3), (4, 8))
    with pytest.raises(ValueError, match="both kernels and channels"):
        MESCClustering(2, kernels=(3,))._architecture((10, 10))
    with pytest.raises(ValueError, match="as many kernels as channels"):
        MESCClustering(2, kernels=(3, 3), channels=(4, 8, 16))._architecture((10, 10))


# --- input validation (every error comes before any training) -------------------------------


def bad_fits():
    x = np.random.default_rng(0).random((6, 8, 8)).astype(np.float32)
    nan = x.copy()
    nan[2, 3, 3] = np.nan
    yield "2-D", MESCClustering(2), x.reshape(6, 64), "2-D .*image_shape"
    yield "2-D wrong size", MESCClustering(2, image_shape=(8, 9)), x.reshape(6, 64), "64 values"
    yield "1-D", MESCClustering(2), x.ravel(), "shape"
    yield "5-D", MESCClustering(2), x[..., None, None], "shape"
    yield ("3 channels", MESCClustering(2), np.repeat(x[..., None], 3, axis=3),
           r"shape .*colour images: make them grey first, e\.g\. x\.mean\(axis=-1\)")
    yield "channels first", MESCClustering(2), x[:, None], r"channels first: pass x\[:, 0\]"
    yield ("a generator", MESCClustering(2), (image for image in x),
           "got one generator, not an array of images")
    yield "identical", MESCClustering(2), np.repeat(x[:1], 6, 0), "all 6 images are the same"
    yield "NaN", MESCClustering(2), nan, "NaN"
    yield "inf", MESCClustering(2), np.where(nan != nan, np.inf, x), "infinite"
    yield "strings", MESCClustering(2), x.astype(str), "numbers"
    yield "all zero", MESCClustering(2), np.zeros_like(x), "every pixel of every image is 0"
    yield "empty", MESCClustering(2), x[:0], "shape"
    yield "n < n_clusters", MESCClustering(7), x, "6 images for 7 clusters"
    yield "n_clusters 0", MESCClustering(0), x, "n_clusters"
    yield "n_clusters float", MESCClustering(2.5), x, "n_clusters"
    yield "n_clusters None", MESCClustering(None), x, "n_clusters"
    yield "framework", MESCClustering(2, framework="mixed"), x, "framework"
    yield "regularizer", MESCClustering(2, regularizer="l3"), x, "regularizer"
    yield "variant", MESCClustering(2, variant="x"), x, "variant"
    yield "coef_init inf", MESCClustering(2, coef_init=np.inf), x, "coef_init"
    yield "recon_scale -1", MESCClustering(2, recon_scale=-1.0), x, "recon_scale"
    yield "lr", MESCClustering(2, lr=-1), x, "lr"
    yield "power inf", MESCClustering(2, power=np.inf), x, r"power \(--power\) must be a finite"
    yield "epochs inf", MESCClustering(2, epochs=np.inf), x, "must be a whole number >= 0, got inf"
    yield "epochs 2.5", MESCClustering(2, epochs=2.5), x, "must be a whole number >= 0, got 2.5"
    yield "even kernel", MESCClustering(2, kernels=4, channels=3), x, "must be odd"
    yield "channels 0", MESCClustering(2, kernels=3, channels=0), x, "channels"
    yield "pretrain_lr inf", MESCClustering(2, pretrain_lr=np.inf), x, "pretrain_lr must be a"
    yield "reg2 type", MESCClustering(2, reg2="big"), x, "reg2 .* must be a number, got 'big'"
    yield ("reg1 array", MESCClustering(2, reg1=np.array([1.0, 2.0])), x,
           r"reg1 .* must be a number, got array\(\[1\., 2\.\]\)")
    yield "lr bool", MESCClustering(2, lr=True), x, "lr .* must be a number, got True"
    yield "verbose", MESCClustering(2, verbose="x"), x, "verbose must be a whole .*got 'x'"
    yield "verbose -1", MESCClustering(2, verbose=-1), x, "verbose must be a whole .*got -1"
    yield "verbose 1.5", MESCClustering(2, verbose=1.5), x, "verbose must be a whole .*got 1.5"
    yield "pretrain_steps", MESCClustering(2, pretrain_steps=-1), x, "pretrain_steps"
    yield "random_state", MESCClustering(2, random_state="seed"), x, "random_state"
    yield "random_state < 0", MESCClustering(2, random_state=-1), x, "from 0 to 4294967295"
    yield ("image_shape", MESCClustering(2, image_shape=(8, 9)), x,
           r"images are 8x8 but image_shape is \(8, 9\); give images of that size, or "
           r"image_shape=\(8, 8\) or None")
    yield "weights file", MESCClustering(2, weights="/nonexistent/ae.h5"), x, "not found"
    yield "weights int", MESCClustering(2, weights=3), x, "weights must be the path .*got 3"
    yield "weights empty", MESCClustering(2, weights=""), x, "weights must be the path .*got ''"
    yield ("post_method", MESCClustering(2, post_method="exact"), x,
           "unknown post-clustering method 'exact'")


@pytest.mark.parametrize("case", list(bad_fits()), ids=lambda c: c[0])
def test_bad_input_raises_value_error(case, monkeypatch):
    _, est, x, message = case

    def training(*args, **kwargs):
        raise AssertionError("bad input reached training")

    monkeypatch.setattr(pipeline, "pretrain", training)
    monkeypatch.setattr(pipeline, "run", training)
    with pytest.raises(ValueError, match=message) as info:
        est.fit(x)
    assert isinstance(info.value, MescError)
    assert not hasattr(est, "labels_")


def test_weights_for_other_image_size_is_refused(tmp_path, images):
    """The messages name what the user gave (the weights file; kernels and channels), not an
    architecture they never chose nor "this dataset"."""
    from mesc_tf.model import ConvAutoEncoder

    path = save_autoencoder(ConvAutoEncoder(Architecture((32, 32), (3,), (15,))).build_for_input(),
                            tmp_path / "ae32.h5")
    with pytest.raises(ValueError, match=(
            "16x16 but the auto-encoder in .*ae32.h5 was made for 32x32 images; give images "
            r"of that size, or weights made for 16x16 images \(None pretrains on X\)")):
        MESCClustering(3, weights=path).fit(images[0])
    with pytest.raises(ValueError, match=r"images have shape \(12, 2, 16, 16, 1\); pass"):
        MESCClustering(3, weights=path).fit(np.zeros((12, 2, 16, 16, 1)))  # not a size error
    for kernels, channels in (((5, 3, 3), (10, 20, 30)), (3, 15)):  # the file's, other images
        with pytest.raises(ValueError, match=(
                r"differ from the auto-encoder in .*ae32.h5 \(kernels \(3,\) / channels "
                r"\(15,\), 32x32 images\); leave kernels and channels out")):
            MESCClustering(3, weights=path, kernels=kernels, channels=channels).fit(images[0])


# --- fitting ---------------------------------------------------------------------------------


def test_fit_predict_clusters_union_of_subspaces(fitted, images):
    """fit_predict's labels are a separate fit's labels_ (fit_predict returns labels_ itself,
    so comparing the two of one fit could not fail)."""
    x, y = images
    np.testing.assert_array_equal(fitted.fit_predict_labels, clone(fitted).fit(x).labels_)
    assert accuracy(y, fitted.labels_) >= 0.9


def test_fitted_attributes(fitted, images):
    x, _ = images
    n = len(x)
    assert fitted.labels_.shape == (n,) and fitted.labels_.dtype == np.int64
    assert set(fitted.labels_) == {0, 1, 2}
    assert fitted.coef_.shape == (n, n) and fitted.coef_.dtype == np.float32
    assert fitted.architecture_ == default_architecture((16, 16))
    assert fitted.image_shape_ == (16, 16) and fitted.n_features_in_ == 256
    assert fitted.n_iter_ == SMALL["epochs"] and len(fitted.history_["loss"]) == SMALL["epochs"]
    assert set(fitted.history_) >= {"loss", "recon", "reg", "selfexp"}
    assert fitted.settings_ == SMALL_SETTINGS
    assert fitted.pretrain_info_["steps"] <= SMALL["pretrain_steps"]
    assert fitted.weights_source_.startswith("pretrained on X")
    assert {"pretrain_s", "train_s", "post_s"} <= set(fitted.timings_)
    info = fitted.postcluster_info_
    assert info["method"] == "fast" and info["clusters_found"] == 3
    assert isinstance(info["ill_posed"], bool) and info["svd"] == "dense eigh of CᵀC"
    codes = fitted.encode(x)
    assert codes.shape == (n, 2 * 2 * 30) and codes.dtype == np.float32
    ae = fitted.encoder_
    np.testing.assert_array_equal(codes, ae.encode(x[..., None]).numpy().reshape(n, -1))
    # 2-D rows with image_shape are the same images.
    flat = clone(fitted).set_params(image_shape=(16, 16))
    np.testing.assert_array_equal(flat._validate_images(x.reshape(n, 256)), x[..., None])


def test_encode_takes_any_finite_batch(fitted, images):
    """encode is inference: blank images and object arrays of numbers are encoded (the
    all-zero check is fit's), batch_size is checked, and a warning points at the caller."""
    x, _ = images
    assert fitted.encode(np.zeros((1, 16, 16))).shape == (1, 120)
    np.testing.assert_array_equal(fitted.encode(x[:2].astype(object)), fitted.encode(x[:2]))
    for size in (0, -1, 1.5):
        with pytest.raises(MescError, match=f"batch_size must be a whole number >= 1, got {size}"):
            fitted.encode(x[:2], batch_size=size)
    with pytest.warns(UserWarning, match="negative") as caught:
        fitted.encode(-x[:2])
    assert caught[0].filename == __file__
    with pytest.raises(MescError, match="images are 12x12 but this estimator was fitted on "
                       "16x16 images; encode images of the size fit saw"):
        fitted.encode(np.zeros((2, 12, 12)))


@pytest.mark.filterwarnings("ignore::UserWarning")  # a constant C: clusters left empty
def test_history_has_its_keys_after_zero_epochs(images):
    est = MESCClustering(3, epochs=0, pretrain_steps=0, thr=0.2, subspace_dim=3, power=1.0)
    est.fit(images[0])
    assert est.n_iter_ == 0
    assert {k: len(v) for k, v in est.history_.items()} == dict.fromkeys(
        ("loss", "recon", "reg", "selfexp"), 0)


def test_fit_warns_when_clusters_are_left_empty(images, monkeypatch):
    real = pipeline.postcluster.cluster

    def merge_two_clusters(*args, **kwargs):  # as sklearn's discretize can leave one empty
        labels, timings = real(*args, **kwargs)
        return np.minimum(labels, 1), timings

    monkeypatch.setattr(pipeline.postcluster, "cluster", merge_two_clusters)
    est = MESCClustering(3, epochs=2, pretrain_steps=0, thr=0.2, subspace_dim=3, power=1.0)
    with pytest.warns(UserWarning, match="left 1 of the 3 clusters empty"):
        est.fit(images[0])
    assert est.postcluster_info_["clusters_found"] == 2


@pytest.mark.parametrize("method", ["fit", "fit_predict"])
def test_fit_warnings_point_at_the_callers_line(images, monkeypatch, method):
    """Negative pixels and empty clusters: both warnings name the line that called fit or
    fit_predict (ClusterMixin's fit_predict, which calls fit, named sklearn/base.py)."""
    real = pipeline.postcluster.cluster

    def merge_two_clusters(*args, **kwargs):
        labels, timings = real(*args, **kwargs)
        return np.minimum(labels, 1), timings

    monkeypatch.setattr(pipeline.postcluster, "cluster", merge_two_clusters)
    est = MESCClustering(3, epochs=2, pretrain_steps=0, thr=0.2, subspace_dim=3, power=1.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        getattr(est, method)(images[0] - 0.1)
    where = {("negative" if "negative" in str(w.message) else "empty"): Path(w.filename).name
             for w in caught if issubclass(w.category, mesc_tf.MescWarning)
             and ("negative" in str(w.message) or "clusters empty" in str(w.message))}
    assert where == {"negative": Path(__file__).name, "empty": Path(__file__).name}


def test_random_state_none_draws_a_seed_from_numpy(images, monkeypatch):
    """None seeds from NumPy's global generator (scikit-learn's meaning), also where
    pretraining takes minibatches, whose order needs a seed."""
    monkeypatch.setattr(memory, "pretrain_batch_size", lambda n, arch, requested=None: 20)
    seeds, pretrain = [], pipeline.pretrain  # the seed that orders the minibatches

    def spy(*args, **kwargs):
        seeds.append(kwargs.get("seed"))
        return pretrain(*args, **kwargs)

    monkeypatch.setattr(pipeline, "pretrain", spy)

    def coef(global_seed, random_state=None):
        np.random.seed(global_seed)
        est = MESCClustering(3, random_state=random_state, pretrain_steps=3, epochs=2, thr=0.2,
                             subspace_dim=3, power=1.0)
        est.fit(images[0])
        assert est.labels_.shape == (90,)
        return est.coef_

    seven = coef(7)
    np.testing.assert_array_equal(seven, coef(7))
    assert not np.array_equal(seven, coef(8))  # the seed does come from NumPy
    drawn = int(np.random.RandomState(7).randint(2**31 - 1))  # what sklearn's None means
    np.testing.assert_array_equal(seven, coef(0, random_state=drawn))
    assert seeds[0] == seeds[1] == seeds[3] == drawn != seeds[2]


def test_negative_pixels_warn(images):
    with pytest.warns(UserWarning, match=r"50% of the pixels are negative.*ReLU"):
        MESCClustering(3)._validate_images(np.where(np.arange(8)[:, None] < 4, -1.0, 1.0)[None]
                                           .repeat(3, 0))


def test_pickle_and_deepcopy_keep_the_fit(fitted, images):
    x, _ = images
    for twin in (pickle.loads(pickle.dumps(fitted)), copy.deepcopy(fitted)):
        np.testing.assert_array_equal(twin.labels_, fitted.labels_)
        np.testing.assert_array_equal(twin.coef_, fitted.coef_)
        assert twin.autoencoder_ is not fitted.autoencoder_
        np.testing.assert_array_equal(twin.encode(x), fitted.encode(x))
        assert twin.get_params() == fitted.get_params()
    assert fitted.encoder_ is fitted.autoencoder_  # its former name still reads it
    # A pickle made when the attribute was called encoder_ loads as autoencoder_.
    state = fitted.__getstate__()
    state["encoder_"] = state.pop("autoencoder_")
    old = MESCClustering.__new__(MESCClustering)
    old.__setstate__(state)
    np.testing.assert_array_equal(old.encode(x), fitted.encode(x))


# --- the same results as the command-line code path -----------------------------------------


def _pretrain_then_run(x, settings, seed, tmp_path):
    """experiments/pretrain.py then experiments/run.py --weights, on an array: the same calls
    in the same order (seed, pretrain, save .h5; seed, load, fine-tune + cluster)."""
    from mesc_tf import pipeline
    from mesc_tf.training import configure_runtime

    arch = default_architecture(x.shape[1:3])
    configure_runtime(seed)
    ae, _ = pipeline.pretrain(x, arch, Pretrain(max_steps=SMALL["pretrain_steps"]), verbose=0)
    path = save_autoencoder(ae, tmp_path / "synthetic.h5")
    configure_runtime(seed)
    ae = sources.get_autoencoder(arch, weights=path)[0]
    return pipeline.run(x, None, 3, settings, ae, seed=seed, verbose=0), path


def test_same_results_as_cli_path(fitted, images, tmp_path):
    x, _ = images
    cli_result, path = _pretrain_then_run(x[..., None], SMALL_SETTINGS, SEED, tmp_path)
    # Pretraining inside fit = pretrain.py + run.py.
    np.testing.assert_array_equal(fitted.coef_, cli_result["coef"])
    np.testing.assert_array_equal(fitted.labels_, cli_result["labels"])
    # weights= starts from the same .h5 as run.py --weights; (n, h, w, 1) input = (n, h, w).
    est = MESCClustering(3, weights=path, random_state=SEED, **SMALL)
    labels = est.fit_predict(x[..., None])
    assert est.pretrain_info_ is None and est.weights_source_ == f"weights {path}"
    np.testing.assert_array_equal(est.coef_, cli_result["coef"])
    np.testing.assert_array_equal(labels, cli_result["labels"])
    for k, v in cli_result["history"].items():
        np.testing.assert_array_equal(est.history_[k], v)


def test_every_setting_reaches_fine_tuning_and_clustering(images, tmp_path):
    """Each fine-tuning and clustering parameter, at a value other than its default, is the one
    used: settings_ holds them all, and C and the labels are pipeline.run's with them."""
    from dataclasses import fields

    from mesc_tf.model import ConvAutoEncoder
    from mesc_tf.training import configure_runtime

    x, _ = images
    values = dict(framework="coupled", regularizer="l2", reg1=0.5, reg2=2.0, lr=2e-4, epochs=5,
                  coef_init=1e-3, recon_scale=0.5, thr=0.3, subspace_dim=4, power=2.0,
                  variant="dsc")
    assert set(values) == {f.name for f in fields(Settings)}
    default = Settings()
    assert all(getattr(default, k) != v for k, v in values.items())
    arch = default_architecture(x.shape[1:3])
    configure_runtime(SEED)
    path = save_autoencoder(ConvAutoEncoder(arch).build_for_input(), tmp_path / "start.h5")
    est = MESCClustering(3, weights=path, random_state=SEED, **values).fit(x)
    assert est.settings_ == Settings(**values)
    configure_runtime(SEED)
    ae = sources.get_autoencoder(arch, weights=path)[0]
    want = pipeline.run(x[..., None], None, 3, Settings(**values), ae, seed=SEED, verbose=0)
    np.testing.assert_array_equal(est.coef_, want["coef"])
    np.testing.assert_array_equal(est.labels_, want["labels"])


def _load_script(name):
    return load_script(f"experiments/{name}.py", f"_est_{name}")


def test_same_results_as_run_py_on_toy(shared_data, tmp_path, monkeypatch, capsys):
    """experiments/run.py --dataset toy --weights W == MESCClustering(weights=W) on the toy
    images from the project's loader, with the toy settings (a few steps only)."""
    from mesc_tf.data import load_dataset
    from mesc_tf.model import ConvAutoEncoder
    from mesc_tf.training import configure_runtime

    cfg = get_config("toy")
    configure_runtime(1)
    weights = save_autoencoder(ConvAutoEncoder(cfg.arch).build_for_input(), tmp_path / "toy.h5")
    monkeypatch.setenv("MESC_DATA_DIR", str(shared_data))
    argv = ["--dataset", "toy", "--weights", str(weights), "--epochs", "5", "--seed", "2",
            "--quiet", "--out", str(tmp_path / "run")]
    result = _load_script("run").main(argv)
    capsys.readouterr()
    s = cfg.mesc
    est = MESCClustering(cfg.n_clusters, weights=weights, epochs=5, random_state=2,
                         thr=s.thr, subspace_dim=s.subspace_dim, power=s.power,
                         variant=s.variant, reg1=s.reg1, reg2=s.reg2, lr=s.lr)
    labels = est.fit_predict(load_dataset("toy").x)
    assert est.settings_ == s.replace(epochs=5)
    np.testing.assert_array_equal(est.coef_, result["coef"])
    np.testing.assert_array_equal(labels, result["labels"])


def test_readme_estimator_example_prints_what_it_says(readme_example, capsys, tmp_path):
    """The README's estimator example runs as written and prints the accuracy its comment
    states (the run is deterministic on CPU); an auto-encoder pretrained by pipeline.pretrain
    and saved gives the estimator's own pretraining's labels."""
    import re

    capsys.readouterr()
    code, scope = readme_example("## Your own images",
                                 replace={"runs/own_ae.h5": str(tmp_path / "own_ae.h5")})
    printed = capsys.readouterr().out.splitlines()
    assert printed[1] == "(216, 216) (216, 3840)"
    claimed = re.search(r"# (0\.\d+) with these settings and seed 0", code)[1]
    assert f"{float(printed[2]):.3f}" == claimed
    assert printed[3] == printed[2] and "# 0.989 again" in code
    # Part 4: the post-clustering settings tried on coef_, the defaults' first.
    claimed = re.search(r"# (\S+), (\S+), (\S+)\n", code).groups()
    assert [line.split()[-1] for line in printed[4:]] == list(claimed)
    assert printed[4].startswith("0.03 12 8.0 ")
    # The same labels, not only the same accuracy: the example's first estimator again.
    first = MESCClustering(3, pretrain_steps=100, epochs=30, thr=0.2, subspace_dim=3, power=1.0)
    np.testing.assert_array_equal(first.fit_predict(scope["images"]), scope["est"].labels_)


def test_fits_in_a_loop_do_not_warn_of_retracing():
    """Each fit compiles a new model's step, which TF reports as retracing after a few fits
    (a loop or a grid search); that warning is dropped, other TF warnings still show."""
    import logging

    import tensorflow as tf

    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    tf.get_logger().addHandler(handler)
    try:
        x, _ = union_of_subspaces(per_cluster=4)
        with warnings.catch_warnings():  # 2 steps may not separate the 3 groups: not this test's
            warnings.filterwarnings("ignore", "MESCClustering: spectral clustering left")
            for seed in range(4):
                MESCClustering(3, pretrain_steps=2, epochs=2, random_state=seed).fit(x)
        tf.get_logger().warning("another warning")
    finally:
        tf.get_logger().removeHandler(handler)
    assert not [m for m in seen if "retracing" in m], seen
    assert "another warning" in seen


def test_post_method_reaches_the_post_clustering():
    """post_method='reference' (or 'strict') is the route fit runs, not only a checked value."""
    x, _ = union_of_subspaces(seed=0)
    params = dict(epochs=2, pretrain_steps=0, thr=0.2, subspace_dim=3, power=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # clusters may be left empty
        ref = MESCClustering(3, post_method="reference", **params).fit(x)
        fast = MESCClustering(3, **params).fit(x)
    assert ref.postcluster_info_["method"] == "reference"
    assert fast.postcluster_info_["method"] == "fast"
    np.testing.assert_array_equal(ref.coef_, fast.coef_)


def test_an_int_channels_is_repeated_to_the_kernels_length():
    """channels=8 with kernels=(3, 5): one 8-channel layer per kernel."""
    arch = MESCClustering(2, kernels=(3, 5), channels=8)._architecture((10, 10))
    assert arch == Architecture((10, 10), (3, 5), (8, 8))


def test_pretrain_steps_zero_fine_tunes_from_the_seeded_initialisation():
    """pretrain_steps=0 is run.py --no-pretrain: no pretraining runs, pretrain_info_ is None,
    the source says so, and the auto-encoder (epochs=0: untouched) is the he_normal draw of
    random_state's seed."""
    from mesc_tf.model import ConvAutoEncoder
    from mesc_tf.training import configure_runtime

    x, _ = union_of_subspaces(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        est = MESCClustering(3, epochs=0, pretrain_steps=0, thr=0.2, subspace_dim=3,
                             power=1.0).fit(x)
    assert est.pretrain_info_ is None and est.timings_["pretrain_s"] == 0.0
    assert est.weights_source_ == "he_normal initialisation (no pretraining)"
    for seed, same in ((0, True), (1, False)):
        configure_runtime(seed)
        fresh = ConvAutoEncoder(default_architecture(x.shape[1:3])).build_for_input()
        assert all(np.array_equal(a, b) for a, b in zip(
            est.autoencoder_.get_weights(), fresh.get_weights(), strict=True)) is same


@pytest.mark.parametrize("shape", [(0, 16), (16, 0)])
def test_image_shape_with_a_zero_side_is_refused_by_name(shape):
    """image_shape needs two sides >= 1; a 0 is refused naming image_shape."""
    x = np.random.default_rng(0).random((6, 0)).astype(np.float32)
    with pytest.raises(MescError, match="image_shape must be"):
        MESCClustering(2, image_shape=shape).fit(x)


def test_save_autoencoder_of_the_estimator_names_encoder_(fitted, tmp_path):
    """save_autoencoder(est) is refused pointing at est.encoder_ (fitted) or at fit
    (unfitted), and writes nothing; save_autoencoder(est.encoder_) is the way."""
    with pytest.raises(MescError, match=r"got MESCClustering \(a fitted MESCClustering's "
                       r"fine-tuned auto-encoder is its \.encoder_\)"):
        save_autoencoder(fitted, tmp_path / "ae.h5")
    with pytest.raises(MescError, match=r"an unfitted MESCClustering: fit it, then save"):
        save_autoencoder(MESCClustering(3), tmp_path / "ae.h5")
    assert not list(tmp_path.iterdir())
    assert save_autoencoder(fitted.encoder_, tmp_path / "ae.h5").is_file()


# --- review of session 65: a researcher's own images ----------------------------------------


def test_a_pretraining_that_never_improves_warns_and_says_so(images):
    """pretrain_lr 1.0 blows the first step up: the start was kept, silently, and
    weights_source_ still read 'pretrained on X (N steps ...)'."""
    with pytest.warns(mesc_tf.MescWarning, match="pretraining never improved on its starting "
                      "weights .*which were kept; try a lower pretrain_lr than 1") as caught:
        est = MESCClustering(3, pretrain_lr=1.0, pretrain_steps=20, pretrain_patience=5,
                             epochs=2, thr=0.2, subspace_dim=3, power=1.0).fit(images[0])
    assert est.pretrain_info_["best_step"] == 0
    assert "none better than the start, which was kept" in est.weights_source_
    assert {Path(w.filename).name for w in caught
            if issubclass(w.category, mesc_tf.MescWarning)} == {Path(__file__).name}


def test_a_pretraining_no_better_than_zeros_warns(images, monkeypatch):
    real = pipeline.pretrain

    def flat(*args, **kwargs):  # as 1x1 images, or images scaled by 1e-6, end
        ae, info = real(*args, **kwargs)
        return ae, {**info, "relative_error": 0.9996}

    monkeypatch.setattr(pipeline, "pretrain", flat)
    with pytest.warns(mesc_tf.MescWarning, match="reconstructs the images no better than zeros "
                      r"\(relative error 0\.9996\); check the images' scale"):
        MESCClustering(3, pretrain_steps=2, epochs=1, thr=0.2, subspace_dim=3,
                       power=1.0).fit(images[0])


def test_verbose_names_each_stage(images, capsys):
    """verbose 1 or more (scikit-learn's ints; 2 was refused): a line before pretraining,
    before fine-tuning (the two progress bars looked alike) and after clustering."""
    for verbose in (1, 2, np.bool_(True)):
        MESCClustering(3, pretrain_steps=2, epochs=2, thr=0.2, subspace_dim=3, power=1.0,
                       verbose=verbose, post_method=None).fit(images[0])  # None: the fast route
        out = capsys.readouterr().out
        for line in ("MESCClustering: pretraining the auto-encoder on 90 images (at most 2 "
                     "steps)", "MESCClustering: fine-tuning on 90 images (16, 16), 3 clusters "
                     "(2 steps)", "clusters found ("):
            assert line in out
        assert out.count("step 2/2") == 2  # pretraining's and fine-tuning's


def test_warnings_from_inside_the_fit_point_at_the_caller_in_one_line(images, monkeypatch):
    """thrC's warning pointed at pipeline.py, and scikit-learn's eigensolver warnings spread
    over several lines, twice when raised twice: each is raised once more at fit's caller."""
    real = pipeline.run

    def noisy(*args, **kwargs):
        for _ in range(2):
            warnings.warn("Exited at iteration 2000 with accuracies\n[1.2e-06\n 3.4e-07]",
                          UserWarning, stacklevel=1)
        warnings.warn("post-clustering: C has no nonzero entry", mesc_tf.MescWarning,
                      stacklevel=1)
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "run", noisy)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        MESCClustering(3, pretrain_steps=2, epochs=1, thr=0.2, subspace_dim=3,
                       power=1.0).fit(images[0])
    seen = [(w.category, str(w.message), Path(w.filename).name) for w in caught]
    assert seen == [
        (UserWarning, "Exited at iteration 2000 with accuracies [1.2e-06 3.4e-07]",
         Path(__file__).name),
        (mesc_tf.MescWarning, "post-clustering: C has no nonzero entry", Path(__file__).name)]


def test_warnings_from_inside_a_fit_that_fails_are_not_lost(images, monkeypatch):
    """Recorded inside and raised again only after a normal return, a warning that explains
    the failure (thrC's, before an overflow) was lost."""
    def failing(*args, **kwargs):
        warnings.warn("post-clustering: C has no nonzero entry", mesc_tf.MescWarning,
                      stacklevel=1)
        raise MescError("post_proC: the affinity overflowed")

    monkeypatch.setattr(pipeline, "run", failing)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(MescError, match="affinity overflowed"):
            MESCClustering(3, pretrain_steps=2, epochs=1).fit(images[0])
    assert [(str(w.message), Path(w.filename).name) for w in caught] == [
        ("post-clustering: C has no nonzero entry", Path(__file__).name)]
