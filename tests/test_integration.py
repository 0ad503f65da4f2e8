"""End to end: images → auto-encoder → fine-tuning → post-clustering → metrics.

* A synthetic union of subspaces that MESC-Net must cluster almost perfectly.
* A short ORL run through the command line, as a user runs it.
"""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.sparse.linalg import ArpackError

from mesc_tf import pipeline, postcluster, sources
from mesc_tf.postcluster import reference as pc_ref
from mesc_tf.config import Architecture, Settings, get_config
from mesc_tf.errors import MescError
from mesc_tf.metrics import accuracy
from mesc_tf.model import ConvAutoEncoder
from mesc_tf.weights import read_tf1_checkpoint, save_autoencoder
from scripts import load_script  # tests/scripts.py

REPO = Path(__file__).resolve().parents[1]


def smooth_basis(rng, n_basis, size):
    """Non-negative smooth images: each a sum of three random Gaussian blobs, max 1."""
    yy, xx = np.mgrid[0:size, 0:size] / size
    images = []
    for _ in range(n_basis):
        img = np.zeros((size, size))
        for _ in range(3):
            (cy, cx), width = rng.random(2), 0.1 + 0.15 * rng.random()
            img += np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * width ** 2))
        images.append(img / img.max())
    return np.stack(images)


def union_of_subspaces(seed, n_clusters=4, per_cluster=30, dim=3, size=16):
    """Each cluster: non-negative combinations of its own ``dim`` smooth basis images."""
    rng = np.random.default_rng(seed)
    x = np.concatenate([np.einsum("nd,dhw->nhw", rng.random((per_cluster, dim)),
                                  smooth_basis(rng, dim, size)) for _ in range(n_clusters)])
    y = np.repeat(np.arange(1, n_clusters + 1), per_cluster)
    return x[..., None].astype(np.float32), y


TINY = Architecture(image_shape=(16, 16), kernels=(3,), channels=(8,))
# MESC-Net (decoupled, entropy) with a faster lr than the paper's 1e-4 so that 100 steps do;
# ACC 1.0 on seeds 0-4 while this was written. r = 4·4 + 1 = 17 of n = 120.
SYNTH = Settings(framework="decoupled", regularizer="entropy", reg1=1.0, reg2=1.0, lr=1e-3,
                 epochs=100, coef_init=1e-4, thr=0.2, subspace_dim=4, power=4.0, variant="mesc")


def test_synthetic_union_of_subspaces(seed=0):
    """From he_normal weights (the paper's 'without pretraining' start) to ACC >= 0.9; the
    same pipeline with C left at its constant start does not get there."""
    from mesc_tf.training import configure_runtime

    configure_runtime(seed)
    x, y = union_of_subspaces(seed)
    ae, source = sources.get_autoencoder(TINY, no_pretrain=True)
    assert "he_normal" in source
    result = pipeline.run(x, y, 4, SYNTH, ae, seed=seed, verbose=0)
    assert result["metrics"]["acc"] >= 0.9, result["metrics"]
    assert result["timings"]["steps"] == SYNTH.epochs
    assert result["history"]["loss"][-1] < result["history"]["loss"][0]
    post = result["postcluster"]
    assert post["method"] == "fast" and post["clusters_found"] == 4
    assert isinstance(post["ill_posed"], bool) and post["spectral_min_gap"] > 0
    assert pipeline.empty_clusters_note(post, 4) is None
    untrained, _ = pipeline.cluster(np.full((len(x), len(x)), SYNTH.coef_init, np.float32), 4,
                                    SYNTH, seed=seed)
    assert accuracy(y, untrained) < 0.7


def test_postcluster_info_is_json_and_names_empty_clusters():
    """One cluster: the eigengap is infinite, stored as null; the note counts empty clusters."""
    from mesc_tf.training import configure_runtime

    configure_runtime(0)
    x, y = union_of_subspaces(0, n_clusters=1)
    ae, _ = sources.get_autoencoder(TINY, no_pretrain=True)
    post = pipeline.run(x, y, 1, SYNTH.replace(epochs=2), ae, verbose=0)["postcluster"]
    assert post["spectral_min_gap"] is None and post["clusters_found"] == 1
    json.dumps(post, allow_nan=False)
    assert "left 2 of the 3 clusters empty (the labels use 1)" in pipeline.empty_clusters_note(
        post, 3)
    with pytest.raises(MescError, match="unknown post-clustering method 'exact'"):
        pipeline.run(x, y, 1, SYNTH, ae, post_method="exact")


@pytest.mark.parametrize("change, message", [
    ({"seed": -1}, "seed must be a whole number from 0 to 4294967295, got -1"),
    ({"n_clusters": 500}, "run: n_clusters must be a whole number between 1 and n="),
    ({"y": slice(3)}, "y has 3 labels for"),
])
def test_run_checks_its_arguments_before_the_fine_tuning(monkeypatch, change, message):
    """A bad seed, number of clusters or label vector failed only once the fine-tuning (and,
    for y, the post-clustering) had run."""
    x, y = union_of_subspaces(0)
    ae, _ = sources.get_autoencoder(TINY, no_pretrain=True)

    def no_fine_tuning(*args, **kwargs):
        raise AssertionError("fine-tuned before the arguments were checked")

    monkeypatch.setattr(pipeline, "fine_tune", no_fine_tuning)
    args = {"seed": 0, "n_clusters": 4, "y": slice(None), **change}
    with pytest.raises(MescError, match=re.escape(message)):
        pipeline.run(x, y[args["y"]], args["n_clusters"], SYNTH, ae, seed=args["seed"],
                     verbose=0)


def test_get_autoencoder_needs_a_source():
    with pytest.raises(MescError, match="needs one of dataset=, weights=, tf1_checkpoint= or "
                                        "no_pretrain=True"):
        sources.get_autoencoder(TINY)
    # "original" needs the dataset whose checkpoint it names (it was a KeyError).
    with pytest.raises(MescError, match="'original' names the authors' checkpoint of a dataset, "
                                        "but the dataset is None"):
        sources.get_autoencoder(TINY, tf1_checkpoint="original")


def test_lapack_fallback_gives_the_arpack_affinity(monkeypatch):
    """Where ARPACK works, the fallback path computes the same affinity. ARPACK can stop with
    error 3 on a C with many equal singular values (it did on ORL after 30 steps at lr 1e-4),
    depending on its unseeded restart vectors, so the failure is forced here."""
    rng = np.random.default_rng(0)
    blocks = np.kron(np.eye(3), np.ones((10, 10)))
    C = blocks * rng.random((30, 30)) + 0.01 * rng.random((30, 30))
    want = postcluster.affinity(C, 3, 3, 2.0, "mesc")

    def failing_svds(*args, **kwargs):
        raise ArpackError(3)

    monkeypatch.setattr(pc_ref, "svds", failing_svds)
    np.testing.assert_allclose(postcluster.affinity(C, 3, 3, 2.0, "mesc"), want, atol=1e-8)
    # The kind of C that made ARPACK fail: a valid affinity all the same.
    u = (np.arange(60) % 2).astype(float)
    L = postcluster.affinity(np.eye(60) + 0.01 * np.outer(u, u), 5, 3, 1.0, "mesc")
    assert L.shape == (60, 60) and np.all(np.isfinite(L)) and L.max() == 1.0


def test_orl_short_run_from_the_command_line(tf1_ckpts, shared_data, tmp_path,
                                             tensorboard_scalars):
    """experiments/run.py in a subprocess on the shared ORL data and the DSC ORL checkpoint,
    30 steps (lr 5e-3 so that 30 steps are enough for ACC ≈ 0.6)."""
    out = tmp_path / "run"
    env = {**os.environ, "MESC_DATA_DIR": str(shared_data), "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run(
        [sys.executable, str(REPO / "experiments" / "run.py"), "--dataset", "orl",
         "--tf1-checkpoint", str(tf1_ckpts["orl"]), "--epochs", "30", "--lr", "5e-3",
         "--reg2", "0.2", "--seed", "0", "--out", str(out), "--save-coef", str(tmp_path / "C.npy"),
         "--post-method", "strict", "--tensorboard", "--quiet"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ACC" in proc.stdout and str(out / "results.json") in proc.stdout

    saved = json.loads((out / "results.json").read_text())
    assert set(saved["metrics"]) == {"acc", "nmi", "pur", "ari", "f1"}
    assert saved["metrics"]["acc"] > 0.5
    assert all(0 <= v <= 1 for v in saved["metrics"].values())
    # The released script's F1 (unmatched labels), from the saved C's labels.
    from mesc_tf import data, pipeline
    from mesc_tf.config import Settings
    from mesc_tf.metrics import evaluate, f1_unmapped

    labels, _ = pipeline.cluster(np.load(tmp_path / "C.npy"), 40, Settings(**saved["settings"]),
                                 seed=0, post_method="strict")
    y = data.load_dataset("orl", shared_data).y
    assert saved["f1_unmapped"] == f1_unmapped(y, labels)
    # Each image's cluster, as scored.
    assert saved["labels"] == labels.tolist()
    assert evaluate(y, np.array(saved["labels"])) == saved["metrics"]
    assert (saved["dataset"], saved["n_samples"], saved["n_clusters"], saved["seed"]) == (
        "orl", 400, 40, 0)
    assert saved["settings"]["epochs"] == 30 == saved["timings"]["steps"]
    assert saved["settings"]["lr"] == 5e-3 and saved["settings"]["reg2"] == 0.2
    assert saved["settings"]["framework"] == "decoupled"
    assert "TF1 checkpoint" in saved["autoencoder"]
    from mesc_tf.sources import resolve_autoencoder

    ident = resolve_autoencoder("orl", tf1_checkpoint=tf1_ckpts["orl"]).ident
    assert saved["autoencoder_id"] == ident and ident.startswith("tf1:")  # the content's hash
    assert set(saved["final_losses"]) == {"loss", "recon", "reg", "selfexp"}
    assert set(saved["machine"]) == {"cores", "cpu", "platform", "blas"}
    assert saved["machine"]["blas"]  # the BLAS kernels, which move ill-posed labels
    post = saved["postcluster"]
    assert post["method"] == "strict" and isinstance(post["ill_posed"], bool)
    assert 1 <= post["clusters_found"] <= 40
    assert np.load(tmp_path / "C.npy").shape == (400, 400)
    # --tensorboard: every loss term of every step, as Keras' callback writes them.
    logged = tensorboard_scalars(out / "tb")["train"]
    for tag in ("epoch_loss", "epoch_recon", "epoch_reg", "epoch_selfexp"):
        assert logged[tag] == list(range(30)), tag


def test_run_py_takes_a_table_rows_settings(shared_data, tmp_path, monkeypatch, capsys):
    """--method gives the settings of a row of the main table (here DSC-Net-L2's, with its ½
    on the reconstruction), which the other options still override."""

    from mesc_tf.config import method_settings

    run = load_script("experiments/run.py", "run_cli")
    monkeypatch.setenv("MESC_DATA_DIR", str(shared_data))
    out = tmp_path / "run"
    argv = ["--dataset", "toy", "--method", "dsc_l2", "--epochs", "2", "--recon-scale", "0.25",
            "--quiet", "--out", str(out)]
    run.main(argv)
    saved = json.loads((out / "results.json").read_text())
    # The command main was given (from Python too), as the other scripts record theirs.
    assert saved["command"] == shlex.join(["experiments/run.py", *argv])
    want = method_settings("toy", "dsc_l2").replace(epochs=2, recon_scale=0.25)
    assert saved["method"] == "dsc_l2" and saved["settings"] == want.to_dict()
    assert want.framework == "coupled" and want.regularizer == "l2"
    assert "settings: " + str(want.to_dict()) in capsys.readouterr().out


def test_run_clusters_with_the_settings_and_the_seed(monkeypatch):
    """pipeline.run passes its seed and the settings' thr, d, power and variant to the
    post-clustering. From pretrained weights the seed only seeds the clustering: without it every
    seed gives one result."""
    from mesc_tf import postcluster

    seen = {}
    real = postcluster.cluster

    def spy(coef, n_clusters, **kwargs):
        seen.update(kwargs)
        return real(coef, n_clusters, **kwargs)

    monkeypatch.setattr(postcluster, "cluster", spy)
    x = np.random.default_rng(0).random((12, 16, 16, 1)).astype(np.float32)
    s = Settings(framework="decoupled", regularizer="entropy", reg1=1.0, reg2=1.0, lr=1e-3,
                 epochs=1, coef_init=1e-4, thr=0.2, subspace_dim=2, power=3.0, variant="dsc")
    ae = ConvAutoEncoder(Architecture((16, 16), (3,), (4,))).build_for_input()
    pipeline.run(x, None, 3, s, ae, seed=7, verbose=0)
    assert {k: seen[k] for k in ("thr", "subspace_dim", "power", "variant", "seed")} == dict(
        thr=0.2, subspace_dim=2, power=3.0, variant="dsc", seed=7)


def test_get_autoencoder_takes_the_tf1_checkpoint_before_weights(synthetic_tf1, tmp_path):
    """The documented precedence: tf1_checkpoint, then weights."""
    arch = get_config("orl").arch
    other = save_autoencoder(ConvAutoEncoder(arch).build_for_input(), tmp_path / "w.h5")
    ae, source = sources.get_autoencoder(arch, weights=other,
                                         tf1_checkpoint=synthetic_tf1["orl"])
    assert source.startswith("TF1 checkpoint")
    _, weights = read_tf1_checkpoint(synthetic_tf1["orl"], arch.image_shape)
    np.testing.assert_array_equal(ae.get_layer("enc_0").kernel.numpy(), weights["enc_0"][0])
