"""Smoke tests of the paper-figure commands in experiments/ (ablation, toy_affinity,
sensitivity, convergence, tsne, confusion): each runs on a tiny subset (3 classes × 8 images,
3 fine-tuning steps, --no-pretrain or a TF1 checkpoint), writes its JSON, Markdown and
non-empty PNGs, resumes instead of recomputing, and refuses to mix requests."""

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scripts import load_script  # tests/scripts.py

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SMOKE = ["--smoke", "--quiet"]


@pytest.fixture
def data_env(shared_data, monkeypatch, runtime):
    monkeypatch.setenv("MESC_DATA_DIR", str(shared_data))
    monkeypatch.setattr(sys, "argv", ["test"])
    return shared_data


def check_png(path):
    import matplotlib.image as mpimg
    import numpy as np

    path = Path(path)
    assert path.is_file(), path
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 5000
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
    assert float(np.std(img[..., :3])) > 0.01  # not a blank picture


def check_outputs(out, name, pngs):
    summary = json.loads((out / f"{name}.json").read_text())
    assert summary["experiment"] == name and "request" in summary and "versions" in summary
    assert (out / f"{name}.md").read_text().startswith("# ")
    for p in pngs:
        check_png(out / p)
    return summary


def test_ablation_resumes_and_guards(data_env, tf1_ckpts, tmp_path):
    from experiments import ablation
    from mesc_tf.errors import MescError

    from mesc_tf.config import get_config
    from mesc_tf.weights import convert_tf1_checkpoint

    # A pretrained .h5 whose metadata says pretraining took 12.5 s (toy = COIL20's AE).
    h5 = convert_tf1_checkpoint(tf1_ckpts["coil20"], get_config("toy").arch.image_shape,
                                tmp_path / "toy.h5", {"seconds": 12.5})
    out = tmp_path / "ablation"
    argv = [*SMOKE, "--datasets", "toy", "--rows", "1", "8", "--out", str(out),
            "--weights", f"toy={h5}"]
    summary = ablation.main(argv)
    rows = summary["toy"]["rows"]
    assert set(rows) == {1, 8}
    assert rows[1]["pretrained"] and not rows[8]["pretrained"]
    assert 0 <= rows[1]["acc_mean"] <= 1 and rows[8]["total_s"] > 0
    # The paper's time for pretrained rows includes pretraining (from the .h5 metadata).
    assert rows[1]["pretrain_s"] == 12.5 and rows[1]["total_complete"]
    assert rows[1]["total_s"] == pytest.approx(12.5 + rows[1]["finetune_s"] + rows[1]["post_s"])
    assert rows[8]["pretrain_s"] is None
    saved = check_outputs(out, "ablation", ["ablation.png"])
    assert saved["paper"]["orl"]["1"][0] == 90.25
    md = (out / "ablation.md").read_text()
    assert "paper ORL ACC" in md and "| 8 | ✗ | ✗ | ✗ |" in md
    assert len(list((out / "runs").glob("*.json"))) == 2
    before = (out / "runs" / "toy-row1-seed0.json").stat().st_mtime_ns
    # Same request: everything is reused, nothing recomputed.
    ablation.main(argv)
    assert (out / "runs" / "toy-row1-seed0.json").stat().st_mtime_ns == before
    # Another request on the same folder is refused, not silently mixed in.
    with pytest.raises(MescError, match="another request"):
        ablation.main([*argv, "--epochs", "2"])
    # With --force the summary is rebuilt, but a run made with other settings is still refused.
    with pytest.raises(MescError, match="other options"):
        ablation.main([*argv, "--epochs", "2", "--force"])
    # So is one made from another auto-encoder at the same path (re-pretrained in place) ...
    convert_tf1_checkpoint(tf1_ckpts["coil20"], (32, 32), h5, {"seconds": 13.5})
    with pytest.raises(MescError, match="autoencoder_sha256"):
        ablation.main([*argv, "--force"])
    # ... which --redo recomputes.
    assert ablation.main([*argv, "--redo"])["toy"]["rows"][1]["pretrain_s"] == 13.5


def test_ablation_rows_take_the_papers_settings():
    """Rows 1, 3 and 7 are the main table's Our, Our w/o Net and DSC-Net-L2 (the paper's are);
    each row without pretraining takes its pretrained row's settings."""
    from experiments import ablation
    from mesc_tf.config import method_settings

    args = ablation.parse_args(["--datasets", "orl"])
    rows = {i: ablation.row_settings("orl", i, args) for i in ablation.ROWS}
    assert rows[1] == rows[2] == method_settings("orl", "our")
    assert rows[3] == rows[4] == method_settings("orl", "our_wo_net")
    assert rows[7] == rows[8] == method_settings("orl", "dsc_l2")
    assert rows[5] == rows[6] == method_settings("orl", "dsc_l2").replace(framework="decoupled")
    old = ablation.parse_args(["--datasets", "orl", "--coupled-settings", "our"])
    assert ablation.row_settings("orl", 3, old) == method_settings("orl", "our").replace(
        framework="coupled")


def test_toy_affinity_statistics():
    """The figure's numbers on a hand-computed case: |C| min-max normalised, per-block variance,
    cosine similarity to the ideal block matrix."""
    from experiments.toy_affinity import block_stats, cosine, ideal_matrix, normalised

    y = np.array([0, 0, 1, 1])
    C = np.array([[0, 2, 0, 0], [-4, 0, 0, 0], [0, 0, 0, 1], [0, 0, 3, 0]], np.float32)
    A = normalised(C)  # |C| / 4
    np.testing.assert_allclose(A, np.abs(C) / 4)
    blocks, off = block_stats(A, y)
    assert [b["variance"] for b in blocks] == pytest.approx([0.171875, 0.09375])
    assert [b["mean"] for b in blocks] == pytest.approx([0.375, 0.25]) and off == 0
    # (0.5 + 1 + 0.25 + 0.75) / (‖A‖ · ‖ideal‖), ‖A‖² = 1.875, ‖ideal‖² = 8
    assert cosine(A, ideal_matrix(y)) == pytest.approx(2.5 / np.sqrt(1.875 * 8))
    assert cosine(ideal_matrix(y), ideal_matrix(y)) == pytest.approx(1.0)


def test_toy_affinity(data_env, tmp_path):
    from experiments import toy_affinity

    assert toy_affinity.parse_args([]).methods == ["dsc_l1", "dsc_l2", "dsc_nuclear", "our"]
    out = tmp_path / "toy"
    summary = toy_affinity.main([*SMOKE, "--no-pretrain", "--methods", "dsc_nuclear", "our",
                                 "--out", str(out)])
    methods = summary["toy"]["methods"]
    assert [methods[m]["settings"]["regularizer"] for m in methods] == ["nuclear", "entropy"]
    for r in methods.values():
        assert 0 < r["cosine_to_ideal"] <= 1
        assert len(r["blocks"]) == 3 and all(b["size"] == 8 for b in r["blocks"])
        assert all(0 <= b["variance"] <= 0.25 for b in r["blocks"])
    check_outputs(out, "toy_affinity", ["toy_affinity.png", "toy_cosine.png"])
    assert len(list((out / "runs").glob("*.npy"))) == 2
    # A run's C that cannot be read (cut off, written by something else) is recomputed, as an
    # unreadable record is, not a traceback (tsne.py keeps its codes the same way).
    (out / "runs" / "toy-our.npy").write_text("not an array\n")
    again = toy_affinity.main([*SMOKE, "--no-pretrain", "--methods", "dsc_nuclear", "our",
                               "--out", str(out)])
    assert again["toy"]["methods"]["our"]["cosine_to_ideal"] == pytest.approx(
        methods["our"]["cosine_to_ideal"])
    assert np.load(out / "runs" / "toy-our.npy").shape == (24, 24)


def test_sensitivity(data_env, tmp_path):
    from experiments import sensitivity

    out = tmp_path / "sens"
    summary = sensitivity.main([*SMOKE, "--no-pretrain", "--datasets", "orl", "--lambda1", "0.2",
                                "--lambda2", "0.02", "2", "--out", str(out)])
    s = summary["orl"]
    assert len(s["acc_mean"]) == 1 and len(s["acc_mean"][0]) == 2
    assert [(c["reg1"], c["reg2"]) for c in s["cells"]] == [(0.8, 0.08), (0.8, 8.0)]
    saved = check_outputs(out, "sensitivity", ["sensitivity.png"])
    assert "4·λ1" in saved["conversion"]


def test_convergence_skips_missing_data(data_env, tmp_path):
    from experiments import convergence

    out = tmp_path / "conv"
    datasets = ["toy"] + ([] if (data_env / "COIL100.mat").exists() else ["coil100"])
    summary = convergence.main([*SMOKE, "--no-pretrain", "--datasets", *datasets,
                                "--out", str(out)])
    s = summary["toy"]
    assert s["steps"] == 3 and set(s["curves"]) == {"loss", "recon", "reg", "selfexp"}
    total = [r + e + z for r, e, z in zip(s["curves"]["recon"], s["curves"]["reg"],
                                          s["curves"]["selfexp"])]
    assert total == pytest.approx(s["curves"]["loss"], rel=1e-4)
    saved = check_outputs(out, "convergence", ["convergence.png"])
    if "coil100" in datasets:
        assert "coil100" in saved["skipped"]


def test_convergence_titles_name_the_terms_that_were_run(monkeypatch, tmp_path):
    """--set recon_scale=0.5 or regularizer=l2 changes what the reconstruction and reg curves
    are: the titles say so, not the default Σ(x_r − x)² and entropy."""
    from experiments import common, convergence

    shown = {}
    monkeypatch.setattr(common, "save_figure", lambda fig, path: shown.setdefault(
        "titles", [ax.get_title() for ax in fig.axes]))
    curves = {k: [3.0, 2.0, 1.0] for k, _ in convergence.TERMS}
    row = {"steps": 3, "curves": curves}
    summary = {"orl": {**row, "settings": {"reg1": 1, "reg2": 1, "recon_scale": 1.0,
                                           "regularizer": "entropy"}},
               "coil20": {**row, "settings": {"reg1": 1, "reg2": 1, "recon_scale": 0.5,
                                              "regularizer": "l2"}}}
    convergence.figure(summary, tmp_path / "c.png")
    assert shown["titles"][:4] == [t for _, t in convergence.TERMS]
    assert "0.5" in shown["titles"][5] and "l2" in shown["titles"][6], shown["titles"]


# The smoke run's untrained auto-encoder and few steps leave C without an off-diagonal link,
# which the run rightly warns of; this test checks the figure and its scores, not the labels.
@pytest.mark.filterwarnings("ignore:post-clustering. C has no nonzero entry off its diagonal")
def test_tsne(data_env, tmp_path):
    from experiments import tsne

    assert tsne.parse_args([]).methods == ["dsc_l1", "dsc_l2", "our"]
    out = tmp_path / "tsne"
    summary = tsne.main([*SMOKE, "--no-pretrain", "--methods", "our", "--seeds", "0,1",
                         "--out", str(out)])
    panels = summary["mnist"]["panels"]
    assert [p["method"] for p in panels] == ["truth", "our"]
    for p in panels:
        assert 0 <= p["homogeneity"] <= 1 and 0 <= p["completeness"] <= 1
    check_outputs(out, "tsne", ["mnist_tsne.png"])
    # The scores are sklearn's for the labels the run kept, on the images it clustered.
    from sklearn.metrics import completeness_score, homogeneity_score

    from experiments import common

    y = common.load_data("mnist", tsne.parse_args([*SMOKE])).y
    kept = json.loads((out / "runs" / "mnist-our.json").read_text())["result"]["clusterings"]
    ours = panels[1]
    assert [c["seed"] for c in kept] == [s["seed"] for s in ours["per_seed"]] == [0, 1]
    for c, s in zip(kept, ours["per_seed"]):
        assert len(c["labels"]) == len(y) == 24
        assert c["postcluster"]["clusters_found"] == len(set(c["labels"]))  # what ran, kept
        assert s["homogeneity"] == pytest.approx(homogeneity_score(y, c["labels"]), abs=1e-12)
        assert s["completeness"] == pytest.approx(completeness_score(y, c["labels"]), abs=1e-12)
    assert ours["homogeneity"] == pytest.approx(
        np.mean([s["homogeneity"] for s in ours["per_seed"]]))


def test_confusion(data_env, tmp_path, capsys):
    from experiments import confusion

    assert confusion.parse_args([]).methods == ["dsc_l1", "dsc_l2", "dsc_nuclear", "our"]
    out = tmp_path / "conf"
    summary = confusion.main([*SMOKE, "--no-pretrain", "--methods", "dsc_l1", "our",
                              "--set", "dsc_l1.reg1=2", "--out", str(out)])
    methods = summary["coil20"]["methods"]
    assert list(methods) == ["dsc_l1", "our"]
    spec = {m: json.loads((out / "runs" / f"coil20-{m}.json").read_text())["spec"]["settings"]
            for m in methods}
    assert spec["dsc_l1"]["reg1"] == 2.0 and spec["our"]["reg1"] == 1.0  # --set on one method
    assert spec["dsc_l1"]["epochs"] == spec["our"]["epochs"] == 3  # --smoke
    for r in methods.values():
        s = r["per_seed"][0]
        M = s["confusion"]
        assert len(M) == 3 and sum(map(sum, M)) == 24
        assert sum(M[i][i] for i in range(3)) / 24 == pytest.approx(s["metrics"]["acc"])
    check_outputs(out, "confusion", ["coil20_confusion.png"])
    printed = capsys.readouterr().out  # every file written is listed, then the markdown
    assert "2 run(s) computed, 0 reused" in printed
    for name in ("confusion.json", "confusion.md", "coil20_confusion.png"):
        assert f"wrote {out / name}" in printed
    assert printed.rstrip().endswith((out / "confusion.md").read_text().rstrip())


def test_confusion_counts():
    import numpy as np

    from experiments import confusion

    y = np.array([1, 1, 2, 2, 3, 3])
    M, recall, precision = confusion.confusion(y, np.array([5, 5, 7, 9, 9, 9]), 3)
    assert M.tolist() == [[2, 0, 0], [0, 1, 1], [0, 0, 2]]
    assert recall.tolist() == [1.0, 0.5, 1.0]
    assert precision.tolist() == pytest.approx([1.0, 1.0, 2 / 3])


def test_confusion_ticks_name_digit_classes_by_their_digit(monkeypatch, tmp_path):
    """USPS's and MNIST's labels 1..10 are the digits 0..9: the chart's ticks say the digit,
    as the t-SNE legend does; other datasets keep their labels."""
    from experiments import common, confusion

    shown = []
    monkeypatch.setattr(common, "save_figure", lambda fig, path: shown.append(
        [[t.get_text() for t in labels()][:3] for labels in (fig.axes[0].get_xticklabels,
                                                              fig.axes[0].get_yticklabels)]))
    seed = {"seed": 0, "metrics": {"acc": 0.83}, "confusion": [[2, 0, 0], [0, 1, 1], [0, 0, 2]],
            "recall": [1.0, 0.5, 1.0], "precision": [1.0, 1.0, 0.67]}
    for name in ("usps", "coil20"):
        confusion.figure(name, {"our": {"title": "t", "per_seed": [seed]}}, tmp_path / "c.png")
    assert shown == [[["0", "1", "2"]] * 2, [["1", "2", "3"]] * 2]


@pytest.mark.parametrize("script,args,message", [
    ("ablation", ["--rows", "9"], "invalid choice"),
    ("sensitivity", ["--lambda1", "-1"], "must be >= 0"),
    ("toy_affinity", ["--no-pretrain", "--weights", "x.h5"], "cannot be combined"),
    ("confusion", ["--set", "nope.reg1=1"], "unknown scope"),
    # A scope this run never makes would be recorded and ignored.
    ("toy_affinity", ["--methods", "our", "--set", "dsc_l1.reg1=10"],
     "unknown scope 'dsc_l1' for this run; use one of our"),
    ("sensitivity", ["--set", "dsc_l1.lr=1e-3"], "unknown scope 'dsc_l1' for this run"),
    ("convergence", ["--set", "dsc_l2.lr=1e-3"], "unknown scope 'dsc_l2' for this run"),
    ("tsne", ["--set", "reg1=abc"], "is not a number"),
    ("ablation", ["--set", "row1.lr=0"], "(--lr) must be a finite number > 0"),
    ("ablation", ["--set", "row1.lr=inf"], "lr value 'inf' must be finite"),
    # A row not in --rows: its --set would change nothing. (--out: nothing runs if it passed.)
    ("ablation", ["--rows", "1", "2", "--set", "row5.lr=1e-3", "--out", "/dev/null/a"],
     "unknown scope 'row5' for this run; use one of row1, row2"),
    ("convergence", ["--set", "epochs=1.5"], "takes whole numbers"),
    ("convergence", ["--set", "subspace_dim=inf"], "must be finite"),
    ("sensitivity", ["--set", "our.reg2=7"], "sets reg2 itself"),
    # The rows' own axes: the table would label a coupled row "Dec ✓".
    ("ablation", ["--set", "framework=coupled"], "sets framework itself"),
    ("ablation", ["--rows", "1", "--set", "row1.regularizer=l2"], "sets regularizer itself"),
    ("sensitivity", ["--set", "variant=foo"], "unknown variant 'foo'"),
    # --epochs won over --set epochs= silently (for every scope).
    ("confusion", ["--set", "dsc_l1.epochs=50", "--epochs", "100"],
     "--epochs and --set dsc_l1.epochs=... both give the number of steps; give one of them"),
    ("confusion", ["--seeds", "-1"], "from 0 to 4294967295"),
    ("faithfulness", ["--dataset", "orl", "--samples", "1"], "--samples: must be >= 2, got 1"),
    ("faithfulness", ["--dataset", "orl", "--thr", "0.1"], "unrecognized arguments: --thr"),
    # No prefixes: `make faithfulness ARGS="--epoch 20"` passed the Makefile's check of ARGS
    # (full names) and compared a 20-step C with the authors' 100-step one.
    ("faithfulness", ["--dataset", "orl", "--epoch", "20"], "unrecognized arguments: --epoch"),
    ("tsne", ["--perplexity", "nan"], "--perplexity must be a finite number > 0"),
    ("faithfulness", ["--dataset", "orl", "--json", ""], "--json is empty"),
])
def test_bad_options_one_line(script, args, message):
    r = subprocess.run([sys.executable, str(REPO / "experiments" / f"{script}.py"), *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.startswith("error:") and message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_compare_autoencoders_smoke(data_env, tf1_ckpts, tmp_path, monkeypatch, capsys):
    from experiments import compare_autoencoders
    from mesc_tf.errors import MescError

    tf1_dir = tf1_ckpts["coil20"].parents[2]  # .../pretrained-tf1
    out = tmp_path / "ae"
    summary = compare_autoencoders.main(["--datasets", "toy", "--seeds", "0-0", "--max-epochs",
                                         "2", "--tf1-dir", str(tf1_dir), "--out", str(out)])
    err = summary["toy"]["relative_error"]
    assert 0 < err["ours"] < 0.01 and 0 < err["original"] < 0.01  # both fit the Toy objects
    r = summary["toy"]["methods"]["our"]
    assert len(r["ours"]["acc"]) == len(r["original"]["acc"]) == 1
    md = (out / "autoencoders.md").read_text()
    assert md.startswith("# Our auto-encoders") and "| toy | our | 0 (smoke) |" in md
    assert "SMOKE TEST ROWS (fine-tuning capped by --max-epochs): toy/our;" in md
    codes = summary["toy"]["codes"]  # the codes clustered without fine-tuning
    assert codes["ours"]["mean_abs_code"] > 0 and codes["original"]["lsr"]["seeds"] == [0]
    lsr_acc = {k: dict(zip(c["lsr"]["rel_lambda"], c["lsr"]["acc"])) for k, c in codes.items()}
    assert lsr_acc["ours"][0.1] == lsr_acc["original"][0.1] == [1.0]  # 3 objects, well apart
    assert "## The codes before fine-tuning" in md and "| toy | " in md.split("## The codes")[1]
    assert not list(out.glob(".diagnostics-*")) and not list(out.glob(".recomputing*"))
    # A rerun with the same auto-encoders, seeds and settings keeps the diagnostics; other
    # seeds (or --force) compute them again.
    def recomputed(*args, **kwargs):
        raise AssertionError("diagnostics recomputed")

    real = compare_autoencoders.autoencoder_diagnostics
    monkeypatch.setattr(compare_autoencoders, "autoencoder_diagnostics", recomputed)
    again = compare_autoencoders.main(["--datasets", "toy", "--seeds", "0", "--max-epochs", "2",
                                       "--tf1-dir", str(tf1_dir), "--out", str(out)])
    assert again["toy"]["codes"] == codes and again["toy"]["relative_error"] == err
    for other in (["--seeds", "1"], ["--seeds", "0", "--force"]):
        with pytest.raises(AssertionError, match="diagnostics recomputed"):
            compare_autoencoders.main(["--datasets", "toy", *other, "--max-epochs", "2",
                                       "--tf1-dir", str(tf1_dir), "--out", str(out)])
    monkeypatch.setattr(compare_autoencoders, "autoencoder_diagnostics", real)
    summary = json.loads((out / "autoencoders.json").read_text())
    # A later run on other datasets keeps this row (here: an edited copy stands for one).
    summary["coil20"] = summary.pop("toy")
    (out / "autoencoders.json").write_text(json.dumps(summary))
    compare_autoencoders.main(["--datasets", "toy", "--seeds", "0", "--max-epochs", "2",
                               "--tf1-dir", str(tf1_dir), "--out", str(out)])
    assert list(json.loads((out / "autoencoders.json").read_text())) == ["coil20", "toy"]
    md = (out / "autoencoders.md").read_text()
    assert "| coil20 | our |" in md and "| toy | our |" in md and "Datasets here: coil20 toy" in md
    # ... and a run with another method keeps the dataset's earlier method rows.
    summary = compare_autoencoders.main(["--datasets", "toy", "--methods", "dsc_l2", "--seeds", "0",
                                         "--max-epochs", "2", "--tf1-dir", str(tf1_dir),
                                         "--out", str(out)])
    assert sorted(summary["toy"]["methods"]) == ["dsc_l2", "our"]
    # An unreadable summary stops the command before any training.
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "autoencoders.json").write_text("{not json")
    with pytest.raises(MescError, match="cannot read"):
        compare_autoencoders.main(["--datasets", "toy", "--seeds", "0", "--max-epochs", "2",
                                   "--tf1-dir", str(tf1_dir), "--out", str(bad)])
    assert [f.name for f in bad.iterdir()] == ["autoencoders.json"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:  # a missing checkpoint folder: one clear error
        compare_autoencoders.parse_args(["--datasets", "toy", "--tf1-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: no original checkpoint for toy at {tmp_path}/dscnet/COIL20/")


def test_closed_form_coef_is_lsr_and_separates_independent_subspaces():
    from experiments.compare_autoencoders import closed_form_coef
    from mesc_tf.postcluster import cluster

    rng = np.random.default_rng(0)
    # 3 independent 4-dimensional subspaces of R^40, 30 points each, shuffled.
    z = np.concatenate([rng.normal(size=(30, 4)) @ rng.normal(size=(4, 40)) for _ in range(3)])
    truth = np.repeat(np.arange(3), 30)
    order = rng.permutation(90)
    z, truth = z[order], truth[order]
    coef = closed_form_coef(z, rel_lambda=0.01)
    k = z @ z.T
    lam = 0.01 * np.trace(k) / len(z)
    expected = np.linalg.solve(k + lam * np.eye(len(z)), k)
    np.fill_diagonal(expected, 0.0)
    np.testing.assert_allclose(coef, expected, atol=1e-5)
    same = truth[:, None] == truth[None, :]
    # Nearly block diagonal: λ > 0 leaks a little across independent, non-orthogonal subspaces.
    assert np.abs(coef[~same]).mean() < 0.01 * np.abs(coef[same]).mean()
    labels = cluster(coef, 3, thr=1.0, subspace_dim=4, power=1.0)
    assert len(set(zip(labels, truth))) == 3  # one label per subspace


def test_pretraining_seconds_sums_every_stage():
    from experiments.common import pretraining_seconds

    # pretrain.py --init stores the earlier file's metadata under 'init' (pretrained/coil20.h5).
    two_stages = {"seconds": 600.0, "init": {"path": "a.h5", "metadata": {"seconds": 2400.0}}}
    assert pretraining_seconds(two_stages) == 3000.0
    assert pretraining_seconds({"seconds": 12.5}) == 12.5
    assert pretraining_seconds({"seconds": 1.0, "init": {"metadata": {}}}) == 1.0
    assert pretraining_seconds({}) is None
    assert pretraining_seconds({"seconds": 5.0, "init": {"metadata": {"steps": 3}}}) is None


def test_tf1_checkpoint_original_names_the_authors_checkpoint(monkeypatch, tmp_path,
                                                              synthetic_tf1_dir):
    from argparse import Namespace

    from experiments import run
    from experiments.common import ae_source, check_sources
    from mesc_tf import sources
    from mesc_tf.errors import MescError
    from mesc_tf.weights import ORIGINAL_CHECKPOINTS

    monkeypatch.setenv("MESC_TF1_DIR", str(synthetic_tf1_dir))
    args = Namespace(tf1_checkpoint=["eyaleb=original"], weights=[], no_pretrain=False)
    src = ae_source(args, "eyaleb")
    assert src["tf1_checkpoint"] == str(synthetic_tf1_dir / ORIGINAL_CHECKPOINTS["eyaleb"])
    assert "tf1_checkpoint" not in ae_source(args, "orl")  # other datasets keep their default
    check_sources(args, ["eyaleb"])
    parsed = run.parse_args(["--dataset", "eyaleb", "--tf1-checkpoint", "original"])
    assert parsed.tf1_checkpoint == str(synthetic_tf1_dir / ORIGINAL_CHECKPOINTS["eyaleb"])
    # A folder without that checkpoint, or none at all: every command (run.py, and table.py,
    # sweep.py and the experiments through sources.resolve_autoencoder and ae_source) says
    # where it looked and to set MESC_TF1_DIR, not "give the prefix", which the user did not.
    for folder, where in ((tmp_path, f"{tmp_path} has no dscnet/EYaleB/model-102030"),
                          (tmp_path / "nope", f"{tmp_path / 'nope'} does not exist")):
        monkeypatch.setenv("MESC_TF1_DIR", str(folder))
        message = (f"the authors' eyaleb checkpoint is not there: {re.escape(where)}.*; set "
                   "MESC_TF1_DIR to the folder that holds their dscnet/ and mesc/ folders$")
        with pytest.raises(MescError, match=message):
            sources.resolve_autoencoder("eyaleb", tf1_checkpoint="original")
        with pytest.raises(MescError, match=message):
            ae_source(args, "eyaleb")
        with pytest.raises(MescError, match=message):
            run.parse_args(["--dataset", "eyaleb", "--tf1-checkpoint", "original"])


def test_spread_is_the_sample_std_and_always_shown_for_several_seeds():
    from experiments.common import mean_std, pm

    assert pm(*mean_std([0.9, 0.9, 0.9])) == "90.00 ± 0.00"  # identical seeds still show ±
    assert pm(*mean_std([0.8])) == "80.00"                    # one seed: no spread to show
    mean, std = mean_std([0.8, 0.9, None])
    assert mean == pytest.approx(0.85) and std == pytest.approx(0.1 / np.sqrt(2))  # ddof 1
    assert pm(*mean_std([])) == "–"


def test_mean_std_is_sweeps_stats():
    """The experiments' mean ± std is sweep.stats' (main_table.md, sweeps), None entries (a
    failed seed) left out."""
    from experiments import common
    from mesc_tf import sweep

    for values in ([0.8], [0.8, 0.9, 0.7], [0.1, 0.2, 0.30000000000000004, 0.7]):
        st = sweep.stats(values)
        assert common.mean_std([*values, None]) == (st["mean"], st["std"])


def test_display_label_shortens_paths_beside_the_repo():
    from experiments.common import REPO as root, display_label

    beside = root.parent / "shared" / "pretrained-tf1" / "x.ckpt"
    assert display_label(f"tf1:{beside}") == "tf1:../shared/pretrained-tf1/x.ckpt"
    assert display_label("h5:pretrained/orl.h5") == "h5:pretrained/orl.h5"
    assert display_label("he_normal (no pretraining)") == "he_normal (no pretraining)"


def test_figure_scripts_take_the_seed_forms_of_table_and_sweep():
    from experiments import ablation

    for argv, seeds in ((["--seeds", "0-2"], [0, 1, 2]), (["--seeds", "0", "1"], [0, 1]),
                        (["--seeds", "0,3", "1", "3"], [0, 3, 1]), ([], [0, 1, 2])):
        assert ablation.parse_args(argv).seeds == seeds


@pytest.mark.parametrize("script,argv,message", [
    ("convergence", ["--epochs", "0"], "0 fine-tuning steps make no curve"),
    ("convergence", ["--set", "epochs=0"], "0 fine-tuning steps make no curve"),
    ("convergence", ["--set", "our.epochs=0"], "0 fine-tuning steps make no curve"),
    ("sensitivity", ["--lambda1", "nan"], "must be >= 0 and finite"),
    ("sensitivity", ["--lambda2", "1", "inf"], "must be >= 0 and finite"),
    ("sensitivity", ["--lambda1", "0.1234561", "0.1234562"], "are both 0.123456"),
    ("tsne", ["--weights", "toy="], "--weights toy=: no path after '='"),
    ("ablation", ["--tf1-checkpoint", "toy="], "--tf1-checkpoint toy=: no path after '='"),
    ("ablation", ["--no-pretrain"], "the ablation has its own non-pretrained rows"),
    ("sensitivity", ["--lambda2", "1e308"], "must be >= 0 and finite, 4·λ included"),
    ("tsne", ["--perplexity", "0"], "--perplexity must be a finite number > 0"),
    ("toy_affinity", ["--no-pretrain", "--tf1-checkpoint", "x"], "cannot be combined"),
    ("tsne", ["--weights", "a.h5", "--weights", "b.h5"], "--weights is given twice without"),
    ("ablation", ["--weights", "toy=a.h5", "--tf1-checkpoint", "b"], "not both (toy)"),
    ("confusion", ["--weights", "a.h5", "--tf1-checkpoint", "toy=b"], "not both (toy)"),
])
def test_bad_values_are_refused_before_any_output(script, argv, message, capsys, tmp_path):
    import importlib

    mod = importlib.import_module(f"experiments.{script}")
    with pytest.raises(SystemExit) as e:
        mod.parse_args(["--datasets", "toy", "--out", str(tmp_path / "out"), *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and err.count("\n") == 1, err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("script, extra", [
    ("toy_affinity", ["--no-pretrain"]), ("tsne", ["--no-pretrain"]),
    ("confusion", ["--no-pretrain"]), ("ablation", ["--rows", "2"]),
    ("sensitivity", ["--no-pretrain"])])
def test_a_missing_data_file_is_refused_before_the_datasets_ahead_of_it_run(
        script, extra, shared_data, runtime, tmp_path, monkeypatch, capsys):
    """--datasets toy orl without ORL's file: one error line before toy is trained and drawn,
    not after (figures beside no summary); convergence skips such a dataset instead."""
    import importlib

    from experiments import common

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "COIL20.mat").symlink_to(shared_data / "COIL20.mat")  # toy's; ORL's missing
    monkeypatch.setattr(sys, "argv", ["test"])
    out = tmp_path / "out"
    mod = importlib.import_module(f"experiments.{script}")
    with pytest.raises(SystemExit) as e:
        common.run_main(mod.main, [*SMOKE, *extra, "--datasets", "toy", "orl",
                                   "--data-dir", str(data_dir), "--out", str(out)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "orl data file not found" in err and err.count("\n") == 1, err
    assert not out.exists()


def test_the_recorded_command_can_be_run_again(tmp_path, monkeypatch):
    """A path with a space is quoted in the summary's command and the markdown's line, as
    run.py and pretrain.py record theirs (shlex.join), so that pasting it reruns the run."""
    import argparse

    from experiments.common import Results

    out = tmp_path / "my results"
    monkeypatch.setattr(sys, "argv", ["x.py", "--out", str(out), "--set", "reg1=2"])
    args = argparse.Namespace(out=out, experiment="toy_affinity", force=False, redo=False)
    Results(args, {}).finish({}, "# t\n\n")
    want = ["experiments/toy_affinity.py", "--out", str(out), "--set", "reg1=2"]
    assert shlex.split(json.loads((out / "toy_affinity.json").read_text())["command"]) == want
    md = (out / "toy_affinity.md").read_text()
    assert md.startswith("# t\n\nCommand: `python ") and md.endswith("`\n")
    line = md.splitlines()[-1]
    assert shlex.split(line.removeprefix("Command: `python ").removesuffix("`")) == want


def test_a_summary_records_the_arguments_main_was_given(fake_train, tmp_path, monkeypatch):
    """main(argv) called from Python (a notebook, another script) records argv, not the calling
    process's command line, in the summary and its markdown."""
    from experiments import toy_affinity

    monkeypatch.setattr(sys, "argv", ["jupyter", "--some-kernel-option"])
    out = tmp_path / "toy"
    argv = [*SMOKE, "--no-pretrain", "--datasets", "mnist", "--methods", "our", "--out", str(out)]
    toy_affinity.main(argv)
    want = shlex.join(["experiments/toy_affinity.py", *argv])
    assert json.loads((out / "toy_affinity.json").read_text())["command"] == want
    assert (out / "toy_affinity.md").read_text().endswith(f"Command: `python {want}`\n")


def test_a_refused_record_names_the_settings_that_differ():
    from experiments.common import _diff

    old = {"dataset": "orl", "settings": {"reg1": 0.49, **{f"f{i}": i for i in range(30)}},
           "seeds": [0]}
    new = {**old, "settings": {**old["settings"], "reg1": 0.5}}
    assert _diff(old, new) == "settings.reg1: 0.49 vs 0.5"
    assert _diff(old, {**new, "seeds": [1]}) == "seeds: [0] vs [1]; settings.reg1: 0.49 vs 0.5"


def test_a_run_stopped_between_its_array_and_its_record_is_recomputed(tmp_path, monkeypatch):
    """tsne.py and toy_affinity.py wrote runs/<key>.npy, then its record: a --redo with other
    options stopped between the two left the old record beside the new array, which a run with
    the old options then reused as its own."""
    import argparse

    from experiments.common import Results
    from mesc_tf import files

    args = argparse.Namespace(out=str(tmp_path), experiment="tsne", force=False, redo=False)
    results = Results(args, {"datasets": ["orl"]})
    results.put("orl-x", {"dataset": "orl", "seed": 0}, {}, array=np.zeros(3))

    def stopped(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(files, "write_json", stopped)  # stopped after the new array
    with pytest.raises(KeyboardInterrupt):
        Results(argparse.Namespace(**{**vars(args), "redo": True}), {"datasets": ["orl"]}).put(
            "orl-x", {"dataset": "orl", "seed": 1}, {}, array=np.ones(3))
    assert results.get("orl-x", {"dataset": "orl", "seed": 0}) is None  # recomputed


def test_a_record_without_its_array_counts_as_computed_not_reused(tmp_path):
    """A run whose record is there but whose .npy is not is computed again: the closing line
    counted it both as reused and as computed."""
    import argparse

    from experiments.common import Results

    args = argparse.Namespace(out=str(tmp_path), experiment="tsne", force=False, redo=False)
    spec = {"dataset": "orl", "seed": 0}
    Results(args, {"datasets": ["orl"]}).put("orl-x", spec, {}, array=np.arange(3.0))
    results = Results(args, {"datasets": ["orl"]})
    rec, array = results.get_with_array("orl-x", spec)
    assert rec["spec"] == spec and array.tolist() == [0, 1, 2] and results.reused == 1
    (tmp_path / "runs" / "orl-x.npy").unlink()
    results = Results(args, {"datasets": ["orl"]})
    assert results.get_with_array("orl-x", spec) == (None, None)
    results.put("orl-x", spec, {}, array=np.arange(3.0))
    assert (results.reused, results.computed) == (0, 1)


def test_json_that_is_not_ours_is_an_error_line_or_recomputed(tmp_path):
    """A summary or run record that is valid JSON but not an object: the summary is refused
    with one line, the record is recomputed (no AttributeError traceback)."""
    import argparse

    from experiments.common import Results
    from mesc_tf.errors import MescError

    args = argparse.Namespace(out=str(tmp_path), experiment="sensitivity", force=False,
                              redo=False)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "orl-a.json").write_text("[1]")
    assert Results(args, {"datasets": ["orl"]}).get("orl-a", {"dataset": "orl"}) is None
    (tmp_path / "sensitivity.json").write_text("[]")
    with pytest.raises(MescError, match="was made for another request"):
        Results(args, {"datasets": ["orl"]})


def test_a_cut_off_summary_says_force_rebuilds_it_from_the_runs(tmp_path):
    """A summary cut off (a copy, a full disk elsewhere) is not 'made for another request':
    the error says it cannot be read and that --force rebuilds it from the kept run records."""
    import argparse

    from experiments.common import Results
    from mesc_tf.errors import MescError

    args = argparse.Namespace(out=str(tmp_path), experiment="sensitivity", force=False,
                              redo=False)
    (tmp_path / "sensitivity.json").write_text('{"request": {"datasets": ["or')
    with pytest.raises(MescError, match=r"cannot read the summary .*sensitivity.json "
                       r"\(JSONDecodeError.*--force to rebuild it from the finished runs"):
        Results(args, {"datasets": ["orl"]})
    assert Results(argparse.Namespace(**{**vars(args), "force": True}), {"datasets": ["orl"]})


@pytest.mark.parametrize("name", ["toy_affinity.json", "toy_affinity.md"])
@pytest.mark.parametrize("force", [False, True])
def test_a_folder_where_the_summary_goes_is_refused_before_the_runs(name, force, tmp_path):
    """Not 'pass --force to rebuild it', then a failed write after every run."""
    import argparse

    from experiments.common import Results
    from mesc_tf.errors import MescError

    (tmp_path / name).mkdir()
    args = argparse.Namespace(out=str(tmp_path), experiment="toy_affinity", force=force,
                              redo=False)
    with pytest.raises(MescError, match=f"{name} is a folder, .* choose another --out"):
        Results(args, {"datasets": ["toy"]})


def test_an_error_before_the_first_run_leaves_no_output_folder(tmp_path):
    from experiments import ablation
    from mesc_tf.errors import MescError

    out = tmp_path / "new" / "ablation"
    with pytest.raises(MescError, match="data file not found"):
        ablation.main(["--datasets", "toy", "--rows", "2", "--data-dir", str(tmp_path / "none"),
                       "--epochs", "2", "--seeds", "0", "--quiet", "--out", str(out)])
    assert not list(tmp_path.iterdir())


# --- what the figure scripts do with the runs (training faked: these check the bookkeeping) ----


@pytest.fixture
def fake_train(data_env, monkeypatch):
    """common.train replaced by a stand-in that returns at once: C is the ideal block matrix of
    the labels (every clustering is right), the history is ``history`` (per dataset name), and
    the pretraining time 12.5 s for a pretrained source. ``calls`` lists (dataset,
    regulariser, framework, seed, labels) per training; a training where ``interrupt(calls)``
    is true is stopped by a Ctrl-C."""
    from types import SimpleNamespace

    from experiments import common

    state = SimpleNamespace(calls=[], history={}, bad=lambda settings: False, data=data_env,
                            interrupt=lambda calls: False)

    def train(d, settings, src, args, seed, inspect=None):
        state.calls.append((d.name, settings.regularizer, settings.framework, seed, d.y.tolist()))
        if state.interrupt(state.calls):
            raise KeyboardInterrupt
        coef = (d.y[:, None] == d.y[None, :]).astype(np.float32)
        if state.bad(settings):
            coef[0, 0] = np.nan
        loss = state.history.get(d.name, [3.0, 2.0, 1.0])
        history = {"loss": loss, "recon": loss, "reg": [0.0] * len(loss),
                   "selfexp": [0.0] * len(loss)}
        extra = None if inspect is None else np.eye(d.n, 4, dtype=np.float32) + d.y[:, None]
        return common.Trained(coef, history, 1.0, None if src.get("no_pretrain") else 12.5,
                              len(loss), extra)

    monkeypatch.setattr(common, "train", train)
    return state


def test_ablation_fine_tunes_a_pretrained_row_once_and_the_others_per_seed(fake_train,
                                                                          tmp_path):
    from experiments import ablation
    from mesc_tf.errors import MescError

    out = tmp_path / "abl"
    argv = [*SMOKE, "--datasets", "toy", "--rows", "8", "1", "1", "--seeds", "0", "1",
            "--out", str(out)]
    rows = ablation.main(argv)["toy"]["rows"]
    # Rows in the paper's order, each once; row 1 (pretrained) trained once for both seeds.
    assert [c[1:4] for c in fake_train.calls] == [("entropy", "decoupled", 0),
                                                  ("l2", "coupled", 0), ("l2", "coupled", 1)]
    assert list(rows) == [1, 8] and rows[1]["seeds"] == rows[8]["seeds"] == [0, 1]
    runs = {f.stem: json.loads(f.read_text())["result"] for f in (out / "runs").glob("*.json")}
    assert runs["toy-row1-seed1"]["finetune_shared_across_seeds"] is True
    assert runs["toy-row8-seed1"]["finetune_shared_across_seeds"] is False
    assert rows[1]["total_complete"] and rows[8]["total_complete"]
    md = (out / "ablation.md").read_text()
    r1, r8 = rows[1], rows[8]
    assert (f"| {r1['total_s']:.1f} ({12.5:.1f} + {r1['total_s'] - 12.5:.1f}) |" in md)
    assert f"| 8 | ✗ | ✗ | ✗ | 100.00 ± 0.00 | 100.00 ± 0.00 | {r8['total_s']:.1f} |" in md
    # Other rows on the same folder: another request.
    with pytest.raises(MescError, match="another request"):
        ablation.main([*SMOKE, "--datasets", "toy", "--rows", "8", "--seeds", "0", "1", "--out",
                       str(out)])
    # Rows without pretraining need no auto-encoder file.
    summary = ablation.main([*SMOKE, "--datasets", "toy", "--rows", "8", "--weights",
                             f"toy={tmp_path / 'missing.h5'}", "--out", str(tmp_path / "b")])
    assert summary["toy"]["rows"][8]["acc_mean"] == 1.0


def test_an_interrupted_redo_goes_on_with_the_same_command(fake_train, tmp_path, capsys):
    """Ctrl-C during `--redo` says "rerun the same command": that rerun keeps the runs the
    --redo made and recomputes only the rest (it recomputed all of them); once it completes,
    --redo recomputes every run again."""
    from experiments import ablation

    out = tmp_path / "abl"
    argv = [*SMOKE, "--datasets", "toy", "--rows", "2", "8", "--seeds", "0", "--out", str(out)]
    ablation.main(argv)
    def marker():  # the one file of a continued recomputation, if any
        found = list((out / "runs").glob(".recomputing-*.json"))
        return found[0] if found else out / "none"

    assert len(fake_train.calls) == 2 and not marker().exists()
    fake_train.calls.clear()
    fake_train.interrupt = lambda calls: len(calls) == 2  # row 8, after row 2 was recorded
    with pytest.raises(KeyboardInterrupt):
        ablation.main([*argv, "--redo"])
    assert [c[2] for c in fake_train.calls] == ["decoupled", "coupled"] and marker().exists()
    fake_train.calls.clear()
    fake_train.interrupt = lambda calls: False
    capsys.readouterr()
    ablation.main([*argv, "--redo"])
    printed = capsys.readouterr().out
    assert [c[2] for c in fake_train.calls] == ["coupled"] and not marker().exists()
    assert "what it finished is kept (1 run(s); delete" in printed
    assert "1 run(s) computed, 1 reused" in printed
    fake_train.calls.clear()
    ablation.main([*argv, "--redo"])
    assert len(fake_train.calls) == 2
    # After a stop, --redo with other options is another request: it does not continue the
    # stopped one, recomputes every run (not refused with "pass --redo" for the runs made with
    # the others), and leaves the stopped one's file for its own command.
    fake_train.calls.clear()
    fake_train.interrupt = lambda calls: len(calls) == 2
    with pytest.raises(KeyboardInterrupt):
        ablation.main([*argv, "--redo"])
    stopped = marker()
    fake_train.interrupt = lambda calls: False
    fake_train.calls.clear()
    capsys.readouterr()
    ablation.main([*argv, "--redo", "--epochs", "7"])
    assert len(fake_train.calls) == 2 and "continuing" not in capsys.readouterr().out
    assert stopped.exists()


@pytest.mark.parametrize("script, png", [("toy_affinity", "toy_affinity.png"),
                                         ("tsne", "toy_tsne.png"),
                                         ("confusion", "toy_confusion.png")])
def test_figures_are_drawn_once_every_dataset_has_run(script, png, fake_train, tmp_path):
    """Stopped during its second dataset, a figure script has drawn none of the first's
    figures: they would be newer than the summary beside them (another run's)."""
    import importlib

    mod = importlib.import_module(f"experiments.{script}")
    fake_train.interrupt = lambda calls: calls[-1][0] == "orl"
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        mod.main([*SMOKE, "--no-pretrain", "--datasets", "toy", "orl", "--methods", "our",
                  "--out", str(out)])
    assert fake_train.calls[0][0] == "toy" and (out / "runs").is_dir()
    assert not list(out.glob("*.png")) and not (out / png).exists()


def test_figure_scripts_cluster_with_each_seed(data_env, monkeypatch):
    """The per-seed scores of the figure scripts are each seed's clustering, not seed 0's."""
    from experiments import common
    from mesc_tf import pipeline

    seeds = []
    monkeypatch.setattr(pipeline, "cluster", lambda coef, k, s, seed, info: (
        seeds.append(seed) or (np.arange(len(coef)) % k, {})))
    d = common.Data("toy", np.zeros((6, 2, 2, 1)), np.repeat([1, 2], 3), 2, None, None)
    out = common.cluster_seeds(np.eye(6), d, common.preset("toy", "our"), [0, 3])
    assert seeds == [0, 3] and [r["seed"] for r in out] == [0, 3]


def test_ablation_rows_and_paper_columns():
    """The paper's row flags (odd rows pretrained, 1-4 ME, 1, 2, 5, 6 decoupled), the
    Frobenius rows with MESC-Net's settings, and the COIL100 paper columns."""
    from argparse import Namespace

    from experiments import ablation
    from mesc_tf.config import method_settings

    assert [i for i, r in ablation.ROWS.items() if r[2]] == [1, 3, 5, 7]
    assert [i for i, r in ablation.ROWS.items() if r[0]] == [1, 2, 3, 4]
    assert [i for i, r in ablation.ROWS.items() if r[1]] == [1, 2, 5, 6]
    args = ablation.parse_args(["--datasets", "orl", "--frobenius-settings", "mesc"])
    our_l2 = method_settings("orl", "our").replace(regularizer="l2")
    assert ablation.row_settings("orl", 6, args) == our_l2
    assert ablation.row_settings("orl", 7, args) == our_l2.replace(framework="coupled")
    row = {"pretrained": False, "total_s": 2.0, "pretrain_s": None, "acc_mean": 0.5,
           "acc_std": None, "nmi_mean": 0.5, "nmi_std": None}
    md = ablation.markdown({"coil100": {"n": 10, "n_clusters": 2, "rows": {2: row}}},
                           Namespace(rows=[2], seeds=[0], coupled_settings="our_wo_net",
                                     frobenius_settings="dsc"))
    assert "paper COIL100 ACC" in md and "| 86.00 | 92.42 | 13.27 | 69.57 | 90.31 | 2973.28 |" in md


def test_sensitivity_defaults_and_limits():
    from experiments import sensitivity

    args = sensitivity.parse_args([])
    assert args.lambda1 == [0.02, 0.2, 2.0] and args.lambda2 == [0.02, 0.2, 2.0, 30.0]
    smoke = sensitivity.parse_args(["--smoke"])
    assert smoke.lambda1 == [0.02, 2.0] and smoke.lambda2 == [0.02, 30.0]
    assert sensitivity.parse_args(["--lambda1", "0", "1"]).lambda1 == [0.0, 1.0]  # >= 0


def test_sensitivity_cells_seeds_and_diverged_runs(fake_train, tmp_path):
    """Each cell trains with reg = 4·λ; a diverged C is recorded, not clustered; every seed's
    clustering lands in its own slot; the records and the summary know their seeds."""
    from experiments import sensitivity
    from mesc_tf.config import get_config, paper_lambdas
    from mesc_tf.errors import MescError

    fake_train.bad = lambda settings: settings.reg2 == 8.0  # λ2 = 2 diverges
    out = tmp_path / "sens"
    argv = [*SMOKE, "--datasets", "orl", "--lambda1", "0.2", "--lambda2", "0.02", "2",
            "--seeds", "0", "1", "--out", str(out)]
    s = sensitivity.main(argv)["orl"]
    spec = json.loads((out / "runs" / "orl-l1_0.2-l2_0.02.json").read_text())["spec"]
    assert (spec["settings"]["reg1"], spec["settings"]["reg2"]) == (0.8, 0.08)
    assert s["acc_mean"] == [[1.0, None]] and s["acc_std"] == [[0.0, None]]
    assert s["cells"][1]["error"] == "C has NaN/inf (training diverged)"
    cfg = get_config("orl").mesc
    assert tuple(s["config_lambdas"]) == paper_lambdas(cfg.reg1, cfg.reg2) == (0.125, 1.0)
    md = (out / "sensitivity.md").read_text()
    assert "λ1 = 0.125, λ2 = 1)" in md and "| 0.2 | 100.00 ± 0.00 | – |" in md
    # Other λ: another request; other seeds (even with --force): the records are refused, not
    # reused without the new seeds' clusterings.
    at = argv.index("--lambda1")
    with pytest.raises(MescError, match="another request"):
        sensitivity.main([*argv[:at + 1], "2", *argv[at + 2:]])
    at = argv.index("--seeds")
    with pytest.raises(MescError, match=r"other options \(seeds: \[0, 1\] vs \[0, 1, 2\]"):
        sensitivity.main([*argv[:at + 3], "2", *argv[at + 3:], "--force"])


def test_sensitivity_statistics_and_single_seed_markdown():
    from argparse import Namespace

    from experiments import sensitivity

    a = np.array([[[0.8, 0.9], [np.nan, np.nan]]])
    mean, std = sensitivity.stats(a)
    assert mean[0, 0] == pytest.approx(0.85) and std[0, 0] == pytest.approx(0.1 / np.sqrt(2))
    assert sensitivity.nan_to_none(mean) == [[pytest.approx(0.85), None]]
    summary = {"toy": {"n": 24, "acc_mean": [[0.8]], "acc_std": [[None]],
                       "config_lambdas": [0.25, 0.25]}}
    md = sensitivity.markdown(summary, Namespace(seeds=[0], lambda1=[0.2], lambda2=[0.02]))
    assert "| 0.2 | 80.00 |" in md  # one seed: no spread


def test_convergence_summary_figures(fake_train, tmp_path):
    """first loss, 'rises in steps 2-6' and a one-step curve, from a given history."""
    from experiments import convergence

    fake_train.history = {"toy": [1.5, 1.0, 1.0, 1.0, 1.0, 2.0, 0.5], "orl": [3.0]}
    summary = convergence.main([*SMOKE, "--no-pretrain", "--datasets", "toy", "orl",
                                "--out", str(tmp_path / "conv")])
    toy, orl = summary["toy"], summary["orl"]
    assert toy["first_loss"] == 1.5 and toy["last_loss"] == 0.5
    assert toy["rises_at_start"] is True  # step 6 (2.0) is above the first loss
    assert orl["steps"] == 1 and orl["rises_at_start"] is False
    assert toy["steps_to_within_1pct"] == 7 and orl["steps_to_within_1pct"] == 1


def test_convergence_markdown_says_which_seeds_its_acc_is_over(fake_train, tmp_path):
    """The table's ACC/NMI '±' is over the clustering seeds, as the other figures say."""
    from experiments import convergence

    convergence.main([*SMOKE, "--no-pretrain", "--datasets", "toy", "--seeds", "0", "3",
                      "--out", str(tmp_path / "conv")])
    md = (tmp_path / "conv" / "convergence.md").read_text()
    assert "seeds 0 3, mean ± std (ddof 1)" in md


def test_convergence_steps_to_within():
    from experiments.convergence import steps_to_within

    assert steps_to_within([10.0, 5.0, 1.0, 1.05, 1.0], 0.01) == 3  # from step 3 on
    assert steps_to_within([2.0, 2.0], 0.01) == 1
    assert steps_to_within([], 0.01) is None


def test_convergence_missing_data(fake_train, tmp_path, monkeypatch):
    """A dataset without data is skipped (its auto-encoder not asked for, a row saying so);
    none at all is an error."""
    from experiments import common, convergence
    from mesc_tf.errors import MescError

    checked = []
    monkeypatch.setattr(common, "check_sources", lambda args, names: checked.extend(names))
    data = tmp_path / "data"  # COIL20 (hence toy) only
    data.mkdir()
    (data / "COIL20.mat").symlink_to(fake_train.data / "COIL20.mat")
    out = tmp_path / "conv"
    summary = convergence.main([*SMOKE, "--datasets", "toy", "orl", "--data-dir", str(data),
                                "--out", str(out)])
    assert list(summary) == ["toy"] and checked == ["toy"]
    assert "| orl | skipped: data not found |" in (out / "convergence.md").read_text()
    (data / "COIL20.mat").unlink()
    with pytest.raises(MescError, match="no dataset could be loaded"):
        convergence.main([*SMOKE, "--datasets", "toy", "--data-dir", str(data),
                          "--out", str(tmp_path / "none")])


def test_confusion_counts_without_a_predicted_class_and_markdown():
    """A class no cluster was matched to has precision 0 (not NaN, which JSON cannot hold); the
    table lists the classes (1-based) with recall below 50%, or '–'."""
    from argparse import Namespace

    from experiments import confusion

    y = np.array([1, 1, 2, 2, 3, 3])
    M, recall, precision = confusion.confusion(y, np.array([5, 5, 5, 5, 9, 9]), 3)
    assert np.isfinite(precision).all() and np.isfinite(recall).all()
    assert sorted(precision.tolist()) == [0.0, 0.5, 1.0]
    assert confusion.parse_args([]).seeds == [0]  # the paper's figure: one clustering

    def method(title, recall):
        return {"title": title, "acc_mean": 0.5, "acc_std": None, "nmi_mean": 0.5,
                "nmi_std": None, "per_seed": [{"recall": recall}]}

    md = confusion.markdown({"coil20": {"n": 6, "n_clusters": 3, "methods": {
        "dsc_l1": method("A", [1.0, 0.5, 0.25]), "our": method("B", [1.0, 0.5, 0.5])}}},
        Namespace(seeds=[0]))
    assert "| A | 50.00 | 50.00 | 3 |" in md and "| B | 50.00 | 50.00 | – |" in md


def test_tsne_defaults_resume_and_request(fake_train, tmp_path, monkeypatch):
    """5000 t-SNE points by default (all with --smoke, and never more than the images); a
    deleted .npy is computed again; an embedding made with another perplexity is not reused."""
    from experiments import tsne
    from mesc_tf.errors import MescError

    assert tsne.parse_args([]).tsne_samples == 5000
    assert tsne.parse_args(["--smoke"]).tsne_samples is None
    real, embedded = tsne.tsne, []
    monkeypatch.setattr(tsne, "tsne", lambda f, seed, p: embedded.append(p) or real(f, seed, p))
    out = tmp_path / "tsne"
    argv = [*SMOKE, "--no-pretrain", "--methods", "our", "--tsne-samples", "30",
            "--out", str(out)]
    assert tsne.main(argv)["mnist"]["tsne_points"] == 24
    assert len(fake_train.calls) == 1 and embedded == [30.0, 30.0]
    (out / "runs" / "mnist-our.npy").unlink()
    (out / "runs" / "mnist-tsne-our.npy").unlink()
    tsne.main(argv)
    assert len(fake_train.calls) == 2 and embedded == [30.0] * 3
    with pytest.raises(MescError, match=r"other options \(perplexity: 30.0 vs 5.0\)"):
        tsne.main([*argv, "--perplexity", "5", "--force"])  # not the old embedding


def test_tsne_reuses_records_from_before_the_data_files(fake_train, tmp_path, monkeypatch):
    """t-SNE records made before the data files were recorded (none in the spec, nor in the
    fine-tuning's spec an embedding holds as fit_spec) are reused, not refused."""
    from experiments import tsne

    embedded = []
    monkeypatch.setattr(tsne, "tsne", lambda f, seed, p: embedded.append(p) or np.zeros(
        (len(f), 2)))
    out = tmp_path / "tsne"
    argv = [*SMOKE, "--no-pretrain", "--methods", "our", "--out", str(out)]
    tsne.main(argv)
    assert len(fake_train.calls) == 1 and len(embedded) == 2

    def strip(spec):
        spec.pop("data_files")
        for inner in spec.values():
            if isinstance(inner, dict) and "data_files" in inner:
                strip(inner)

    for record in (out / "runs").glob("*.json"):
        rec = json.loads(record.read_text())
        strip(rec["spec"])
        record.write_text(json.dumps(rec))
    tsne.main(argv)
    assert len(fake_train.calls) == 1 and len(embedded) == 2


def test_toy_affinity_normalisation_edge_cases():
    import warnings

    from experiments.toy_affinity import block_stats, cosine, ideal_matrix, normalised

    C = np.array([[2.0, -1.0], [0.0, 4.0]])
    np.testing.assert_allclose(normalised(C), [[0.5, 0.25], [0.0, 1.0]])  # diagonal kept
    np.testing.assert_allclose(normalised(C, zero_diagonal=True), [[0.0, 1.0], [0.0, 0.0]])
    assert normalised(np.full((3, 3), 0.2)).tolist() == [[0.0] * 3] * 3  # constant: no NaN
    y = np.array([1, 1, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no NaN from an empty mean or a 0/0
        assert block_stats(np.ones((3, 3)), y)[1] == 0.0  # one class: no off-diagonal entries
        assert cosine(np.zeros((3, 3)), ideal_matrix(y)) == 0.0


def test_toy_affinity_orders_by_class_resumes_and_guards(fake_train, tmp_path):
    """The samples are ordered by class (MNIST's file order is not), a deleted C is computed
    again, and another picture of C (--signed) is another request."""
    from argparse import Namespace

    from experiments import toy_affinity
    from mesc_tf.errors import MescError

    out = tmp_path / "toy"
    argv = [*SMOKE, "--no-pretrain", "--datasets", "mnist", "--methods", "our",
            "--out", str(out)]
    toy_affinity.main(argv)
    y = fake_train.calls[0][-1]
    assert y == sorted(y) and len(set(y)) == 3
    (out / "runs" / "mnist-our.npy").unlink()
    toy_affinity.main(argv)
    assert len(fake_train.calls) == 2
    with pytest.raises(MescError, match="another request"):
        toy_affinity.main([*argv, "--signed"])
    # "mean in blocks" weighs each block by its number of entries.
    blocks = [{"size": 1, "mean": 1.0, "variance": 0.0}, {"size": 3, "mean": 0.0, "variance": 0.0}]
    r = {"blocks": blocks, "settings": {"regularizer": "entropy", "framework": "decoupled"},
         "cosine_to_ideal": 0.5, "offdiag_mean": 0.0, "acc_mean": 1.0, "acc_std": None,
         "nmi_mean": 1.0, "nmi_std": None}
    md = toy_affinity.markdown({"toy": {"n": 4, "methods": {"our": r}}},
                               Namespace(signed=False, zero_diagonal=False, seeds=[0]))
    assert "| 0.00000 | 0.00000 | 0.1000 | 0.0000 |" in md


def test_finished_runs_are_not_reused_on_other_data(fake_train, tmp_path):
    """A run record names the SHA-256 of each data file it was made from: after a file changed
    the record is refused (not reused for other data), and a record from before data files were
    recorded is reused as before."""
    import gzip
    import hashlib

    from experiments import toy_affinity
    from mesc_tf.errors import MescError

    data_dir = tmp_path / "data"
    shutil.copytree(fake_train.data / "mnist", data_dir / "mnist")
    out = tmp_path / "toy"
    argv = [*SMOKE, "--no-pretrain", "--datasets", "mnist", "--methods", "our",
            "--data-dir", str(data_dir), "--out", str(out)]
    toy_affinity.main(argv)
    record = out / "runs" / "mnist-our.json"
    labels = data_dir / "mnist" / "t10k-labels-idx1-ubyte.gz"
    spec = json.loads(record.read_text())["spec"]
    assert spec["data_files"]["mnist/t10k-labels-idx1-ubyte.gz"] == hashlib.sha256(
        labels.read_bytes()).hexdigest()
    labels.write_bytes(gzip.compress(gzip.decompress(labels.read_bytes()), compresslevel=1))
    with pytest.raises(MescError, match=r"other options \(data_files\.mnist/t10k-labels"):
        toy_affinity.main(argv)
    rec = json.loads(record.read_text())
    del rec["spec"]["data_files"]
    record.write_text(json.dumps(rec))
    toy_affinity.main(argv)
    assert len(fake_train.calls) == 1


def test_experiment_summaries_name_the_data_files(fake_train, tmp_path):
    """The summary JSON (the file committed under experiments/results) names each dataset's
    data files by SHA-256, as its run records do; a run reused from before they were recorded
    gives None (not known)."""
    from experiments import toy_affinity
    from mesc_tf.data import load_dataset

    out = tmp_path / "toy"
    argv = [*SMOKE, "--no-pretrain", "--datasets", "mnist", "--methods", "our", "--out",
            str(out)]
    toy_affinity.main(argv)
    summary = json.loads((out / "toy_affinity.json").read_text())
    assert summary["data_files"] == {"mnist": load_dataset("mnist").file_hashes}
    record = out / "runs" / "mnist-our.json"
    rec = json.loads(record.read_text())
    del rec["spec"]["data_files"]
    record.write_text(json.dumps(rec))
    toy_affinity.main(argv)
    assert json.loads((out / "toy_affinity.json").read_text())["data_files"] == {"mnist": None}


def test_compare_autoencoders_names_are_case_blind_and_default_to_our(tf1_ckpts):
    from experiments import compare_autoencoders

    args = compare_autoencoders.parse_args(["--datasets", "TOY", "--tf1-dir",
                                            str(tf1_ckpts["coil20"].parents[2])])
    assert args.datasets == ["toy"] and args.methods == ["our"]


def _ae_row(acc, nmi, max_epochs=None):
    return {"acc": acc, "nmi": nmi, "seeds": [0, 1, 2], "max_epochs": max_epochs}


def test_compare_autoencoders_md_medians_ratio_and_verdict():
    """Medians are the headline (the mean beside them), the ratio is ours / original, 'ours ≥
    original' needs both medians ≥, and a row with either side capped is flagged smoke."""
    from experiments.compare_autoencoders import render_md

    lsr = {"rel_lambda": [0.01, 0.1, 1.0], "acc": [[0.1, 0.8, 0.9]] * 3, "nmi": [[0.5] * 3] * 3}
    codes = {k: {"mean_abs_code": 1.0, "lsr": lsr} for k in ("ours", "original")}
    methods = {"our": {"ours": _ae_row([0.1, 0.8, 0.9], [0.5, 0.6, 0.7]),
                       "original": _ae_row([0.8, 0.8, 0.8], [0.6, 0.6, 0.6], max_epochs=2)},
               "dsc_l1": {"ours": _ae_row([0.1, 0.7, 0.9], [0.9, 0.9, 0.9]),
                          "original": _ae_row([0.8, 0.8, 0.8], [0.1, 0.1, 0.1])}}
    md = render_md({"toy": {"relative_error": {"ours": 0.002, "original": 0.004},
                            "methods": methods, "codes": codes}})
    assert "SMOKE TEST ROWS (fine-tuning capped by --max-epochs): toy/our;" in md
    our = next(line for line in md.splitlines() if line.startswith("| toy | our |"))
    assert our.split(" | ")[4:8] == ["0.0040", "0.50", "80.00 (60.00 ± 43.59)",
                                     "80.00 (80.00 ± 0.00)"]
    assert our.endswith("| yes |")  # equal medians count
    dsc = next(line for line in md.splitlines() if line.startswith("| toy | dsc_l1 |"))
    assert dsc.endswith("| no |")  # NMI higher, ACC lower
    codes_md = md.split("## The codes before fine-tuning")[1]
    lsr_row = next(line for line in codes_md.splitlines() if line.startswith("| toy |"))
    assert lsr_row.split(" | ")[3] == "80.00 / 80.00 / 80.00"
    assert our.split(" | ")[2] == "0,1,2 (smoke)"
    # A seed that failed on one side only: each side's seeds, since the medians differ in them.
    methods["dsc_l1"]["original"]["seeds"] = [0, 2]
    md = render_md({"toy": {"relative_error": {"ours": 0.002, "original": 0.004},
                            "methods": methods}})
    dsc = next(line for line in md.splitlines() if line.startswith("| toy | dsc_l1 |"))
    assert dsc.split(" | ")[2] == "ours 0,1,2; original 0,2"


def test_compare_autoencoders_passes_its_options_to_both_tables(tf1_ckpts, shared_data,
                                                                 tmp_path, monkeypatch):
    """--force, --jobs, --max-epochs and the seeds reach both table runs; the original side
    runs from the original checkpoint; each dataset's row is saved as soon as it is done, and
    the same --force command after a stop recomputes neither the tables nor that row."""
    import importlib

    from experiments import compare_autoencoders
    from mesc_tf.weights import ORIGINAL_CHECKPOINTS

    table = importlib.import_module("table")  # experiments/table.py, as compare_... imports it

    tf1_dir = tf1_ckpts["coil20"].parents[2]
    calls = []

    def fake_table(argv):
        calls.append(argv)
        row = {"acc": [0.5], "nmi": [0.5], "seeds": [0], "max_epochs": 2}
        return {d: {"our": row} for d in ("toy", "coil20")}

    diagnosed, stop = [], ["coil20"]

    def fake_diagnostics(dataset, data_dir, tf1_prefix, seeds, done=None, save=None):
        diagnosed.append(dataset)
        if dataset in stop:
            raise RuntimeError("stopped in coil20's diagnostics")
        return {k: {"relative_error": 0.01, "mean_abs_code": 1.0, "lsr": {}}
                for k in ("ours", "original")}

    monkeypatch.setattr(table, "main", fake_table)
    monkeypatch.setattr(compare_autoencoders, "autoencoder_diagnostics", fake_diagnostics)
    monkeypatch.setattr(compare_autoencoders, "render_md", lambda summary: "")
    out = tmp_path / "ae"
    out.mkdir()  # the real table runs make it (out/ours)
    with pytest.raises(RuntimeError, match="coil20"):
        compare_autoencoders.main(["--datasets", "toy", "coil20", "--seeds", "0", "--jobs", "3",
                                   "--max-epochs", "2", "--force", "--tf1-dir", str(tf1_dir),
                                   "--data-dir", str(shared_data), "--out", str(out)])
    ours, original = calls
    for argv in calls:
        assert "--force" in argv and argv[argv.index("--jobs") + 1] == "3"
        assert argv[argv.index("--max-epochs") + 1] == "2"
        assert argv[argv.index("--seeds") + 1] == "0"
    assert "--tf1-checkpoint" not in ours and ours[ours.index("--out") + 1] == str(out / "ours")
    assert [a for a in original if a.startswith("toy=")] == [
        f"toy={tf1_dir / ORIGINAL_CHECKPOINTS['toy']}"]
    assert list(json.loads((out / "autoencoders.json").read_text())) == ["toy"]
    calls.clear()
    diagnosed.clear()
    stop.clear()
    argv = ["--datasets", "toy", "coil20", "--seeds", "0", "--max-epochs", "2", "--force",
            "--tf1-dir", str(tf1_dir), "--data-dir", str(shared_data), "--out", str(out)]
    compare_autoencoders.main(argv)
    assert len(calls) == 2 and not [a for a in calls if "--force" in a]
    assert diagnosed == ["coil20"] and not list(out.glob(".recomputing-*"))
    calls.clear()
    diagnosed.clear()
    compare_autoencoders.main(argv)  # completed: --force recomputes everything again
    assert all("--force" in a for a in calls) and diagnosed == ["toy", "coil20"]


def test_compare_autoencoders_redoes_diagnostics_on_other_data(tf1_ckpts, shared_data,
                                                               tmp_path, monkeypatch):
    """The diagnostics (reconstruction errors, LSR scores) are kept only for the data files
    they were computed from (by SHA-256), and each row names its cells' data files."""
    import importlib

    import scipy.io

    from experiments import compare_autoencoders

    table = importlib.import_module("table")  # experiments/table.py, as compare_... imports it
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    coil = data_dir / "COIL20.mat"
    coil.write_bytes((shared_data / "COIL20.mat").read_bytes())
    files = {"COIL20.mat": "0" * 64}
    monkeypatch.setattr(table, "main", lambda argv: {"toy": {"our": {
        "acc": [0.5], "nmi": [0.5], "seeds": [0], "max_epochs": 2, "data_files": files}}})
    computed = []
    monkeypatch.setattr(compare_autoencoders, "autoencoder_diagnostics", lambda *a, **k: (
        computed.append(a) or {k: {"relative_error": 0.01, "mean_abs_code": 1.0, "lsr": {}}
                               for k in ("ours", "original")}))
    monkeypatch.setattr(compare_autoencoders, "render_md", lambda summary: "")
    (tmp_path / "ae").mkdir()  # the real table runs make it (ae/ours)
    argv = ["--datasets", "toy", "--seeds", "0", "--max-epochs", "2", "--data-dir",
            str(data_dir), "--tf1-dir", str(tf1_ckpts["coil20"].parents[2]), "--out",
            str(tmp_path / "ae")]
    summary = compare_autoencoders.main(argv)
    assert summary["toy"]["methods"]["our"]["ours"]["data_files"] == files
    compare_autoencoders.main(argv)
    assert len(computed) == 1  # same data: kept
    mat = scipy.io.loadmat(str(coil))
    scipy.io.savemat(str(coil), {"fea": mat["fea"] * 0.5, "gnd": mat["gnd"]})
    compare_autoencoders.main(argv)
    assert len(computed) == 2


def test_compare_autoencoders_keeps_the_rows_a_run_beside_it_wrote(tf1_ckpts, shared_data,
                                                                   tmp_path, monkeypatch):
    """Two compare-ae runs side by side (make compare-ae DATASETS=orl and DATASETS=toy): the
    one that finishes last merges into autoencoders.json as it is then, not as it was when it
    started, and under the lock table.py takes for main_table.json."""
    import importlib

    from experiments import compare_autoencoders

    table = importlib.import_module("table")  # experiments/table.py, as compare_... imports it
    out = tmp_path / "ae"
    out.mkdir()
    (out / "autoencoders.json").write_text("{}")

    def fake_table(argv):  # the long runs; meanwhile the other run writes its ORL row
        other = json.loads((out / "autoencoders.json").read_text())
        other["orl"] = {"methods": {}, "relative_error": {}, "codes": {}}
        (out / "autoencoders.json").write_text(json.dumps(other))
        return {"toy": {"our": {"acc": [0.5], "nmi": [0.5], "seeds": [0], "max_epochs": 2}}}

    monkeypatch.setattr(table, "main", fake_table)
    monkeypatch.setattr(compare_autoencoders, "autoencoder_diagnostics", lambda *a, **_: {
        k: {"relative_error": 0.01, "mean_abs_code": 1.0, "lsr": {}} for k in ("ours", "original")})
    monkeypatch.setattr(compare_autoencoders, "render_md", lambda summary: "")
    summary = compare_autoencoders.main([
        "--datasets", "toy", "--seeds", "0", "--max-epochs", "2", "--data-dir", str(shared_data),
        "--tf1-dir", str(tf1_ckpts["coil20"].parents[2]), "--out", str(out)])
    assert sorted(json.loads((out / "autoencoders.json").read_text())) == ["orl", "toy"]
    assert sorted(summary) == ["orl", "toy"] and (out / ".autoencoders.lock").exists()


def test_compare_autoencoders_diagnostics_key_follows_the_checkpoint_and_post_settings(
        tf1_ckpts, synthetic_tf1, monkeypatch):
    """Kept diagnostics are redone when the original checkpoint or the post-clustering
    settings they were clustered with change."""
    from types import SimpleNamespace

    from experiments.compare_autoencoders import diagnostics_key
    from mesc_tf import config

    key = diagnostics_key("toy", tf1_ckpts["coil20"], [0])
    assert diagnostics_key("toy", synthetic_tf1["coil20"], [0])["original"] != key["original"]
    real = config.get_config("toy")
    monkeypatch.setattr(config, "get_config",
                        lambda d: SimpleNamespace(mesc=real.mesc.replace(thr=real.mesc.thr / 2)))
    assert diagnostics_key("toy", tf1_ckpts["coil20"], [0]) != key


def test_per_dataset_paths_take_any_case_and_the_datasets_own_path_first(tmp_path):
    """--weights / --tf1-checkpoint: DATASET= in any case, an existing path holding '=' is a
    bare path (not a bad dataset name), and a dataset's own path beats the bare one."""
    from experiments.common import _per_dataset, per_dataset
    from mesc_tf.errors import MescError

    odd = tmp_path / "ae=v2.h5"
    odd.write_text("")
    assert per_dataset(["ORL=x.h5", str(odd)], "--weights") == {"orl": "x.h5", None: str(odd)}
    # a TF1 checkpoint by its prefix (only prefix.index exists), and a folder holding '='
    prefix = tmp_path / "run=3" / "model.ckpt"
    prefix.parent.mkdir()
    (tmp_path / "run=3" / "model.ckpt.index").write_text("")
    assert per_dataset([str(prefix)], "--tf1-checkpoint") == {None: str(prefix)}
    assert per_dataset(["runs/lr=1e-3/ae.h5"], "--weights") == {None: "runs/lr=1e-3/ae.h5"}
    with pytest.raises(MescError, match="'orll' is not a dataset"):
        per_dataset(["orll=x.h5"], "--weights")
    for values in (["all.h5", "orl=x.h5"], ["orl=x.h5", "all.h5"]):
        assert _per_dataset(values, "orl", "--weights") == "x.h5"
        assert _per_dataset(values, "coil20", "--weights") == "all.h5"
    # The same path twice is one path; two different ones for a dataset are refused.
    assert per_dataset(["orl=x.h5", "ORL=x.h5", "a.h5", "a.h5"], "--weights") == {
        "orl": "x.h5", None: "a.h5"}
    for values, which in ((["orl=x.h5", "ORL=y.h5"], "for orl (x.h5 and y.h5)"),
                          (["a.h5", "b.h5"], "without DATASET= (a.h5 and b.h5)")):
        with pytest.raises(MescError, match=re.escape(f"--weights is given twice {which}")):
            per_dataset(values, "--weights")


def test_smoke_fills_in_only_the_options_not_given():
    """--smoke: 3 classes × 8 images, 3 steps, seed 0 unless given, output under
    results/smoke/; --redo implies --force; a dataset or method named twice runs once."""
    from experiments import ablation, common, confusion

    args = ablation.parse_args(["--smoke", "--epochs", "5", "--classes", "2"])
    assert (args.classes, args.per_class, args.epochs, args.seeds) == (2, 8, 5, [0])
    assert args.out == common.RESULTS_DIR / "smoke" / "ablation"
    assert ablation.parse_args([]).out == common.RESULTS_DIR / "ablation"
    args = ablation.parse_args(["--datasets", "orl", "ORL", "coil20", "orl", "--redo"])
    assert args.datasets == ["orl", "coil20"] and args.force
    args = confusion.parse_args(["--methods", "our", "dsc_l1", "our"])
    assert args.methods == ["our", "dsc_l1"]


def test_a_scoped_set_beats_a_global_one_and_epochs_sets_every_run():
    """(--epochs together with --set epochs= is refused: test_bad_options_one_line.)"""
    from experiments import common, confusion

    args = confusion.parse_args(["--set", "dsc_l1.reg1=2", "--set", "reg1=5", "--epochs", "4"])
    l1 = common.configure(common.preset("coil20", "dsc_l1"), args, "dsc_l1")
    our = common.configure(common.preset("coil20", "our"), args, "our")
    assert (l1.reg1, our.reg1, l1.epochs, our.epochs) == (2.0, 5.0, 4, 4)
    args = confusion.parse_args(["--set", "epochs=7", "--set", "dsc_l1.epochs=9"])
    l1 = common.configure(common.preset("coil20", "dsc_l1"), args, "dsc_l1")
    our = common.configure(common.preset("coil20", "our"), args, "our")
    assert (l1.epochs, our.epochs) == (9, 7)


def test_the_same_set_given_twice_is_refused(capsys):
    """--set reg1=1 --set reg1=2 kept the last without a word (as --grid and --seeds refuse a
    repeat); a scoped and a global one for the same field stay allowed (the scoped wins)."""
    from experiments import confusion

    for argv in (["--set", "reg1=1", "--set", "reg1=2"],
                 ["--set", "dsc_l1.coef_init=0", "--set", "dsc_l1.coef-init=0"]):
        with pytest.raises(SystemExit) as e:
            confusion.parse_args(argv)
        assert e.value.code == 2 and "is given twice" in capsys.readouterr().err
    confusion.parse_args(["--set", "reg1=1", "--set", "dsc_l1.reg1=2"])


def test_set_takes_a_field_spelt_with_hyphens_as_grid_does():
    """--set coef-init=... is --set coef_init=... (the options and --grid spell it so)."""
    from experiments import common, confusion

    args = confusion.parse_args(["--set", "coef-init=0.001", "--set", "our.recon-scale=2"])
    our = common.configure(common.preset("coil20", "our"), args, "our")
    assert (our.coef_init, our.recon_scale) == (0.001, 2.0)


def test_subset_keeps_the_first_classes_and_samples_in_file_order(synthetic_data):
    """--classes K --per-class M: the first K classes, the first M images of each (file
    order), labels 1..K; --classes alone keeps whole classes; fewer than 2 images is refused."""
    from argparse import Namespace

    from experiments.common import load_data
    from mesc_tf.data import load_dataset
    from mesc_tf.errors import MescError

    full = load_dataset("orl", synthetic_data)  # 40 classes × 10 images, in class order
    d = load_data("orl", Namespace(data_dir=synthetic_data, classes=2, per_class=3))
    np.testing.assert_array_equal(d.x, full.x[[0, 1, 2, 10, 11, 12]])
    assert d.y.tolist() == [1, 1, 1, 2, 2, 2] and d.n_clusters == 2
    assert d.subset == {"classes": 2, "per_class": 3}
    d = load_data("orl", Namespace(data_dir=synthetic_data, classes=3, per_class=None))
    assert d.n == 30 and d.y.tolist() == [1] * 10 + [2] * 10 + [3] * 10
    with pytest.raises(MescError, match="leaves fewer than 2 samples"):
        load_data("orl", Namespace(data_dir=synthetic_data, classes=1, per_class=1))


def test_summary_guard_covers_every_option_that_shapes_it(tmp_path):
    """The summary remembers --classes, --weights and the script's own axes (extra): a
    request that differs in any of them is refused on the same folder."""
    from experiments import ablation, common
    from mesc_tf.errors import MescError

    def request(*argv, rows=(1,)):
        args = ablation.parse_args(["--datasets", "orl", "--out", str(tmp_path), *argv])
        return args, common.request_of(args, rows=list(rows))

    args, req = request()
    (tmp_path / "ablation.json").write_text(json.dumps({"request": common._norm(req)}))
    common.Results(args, req)  # the same request: taken
    for argv, rows in ((["--classes", "2"], (1,)), (["--weights", "orl=w.h5"], (1,)),
                       (["--weights", "w.h5"], (1,)), ([], (1, 2))):
        other, req = request(*argv, rows=rows)
        with pytest.raises(MescError, match="another request"):
            common.Results(other, req)
    # A path for a dataset the run does not make shapes nothing (`make toy` passes ORL's) ...
    common.Results(*request("--tf1-checkpoint", "COIL20=x", "--weights", "eyaleb=w.h5"))
    # ... also in a summary written before it was left out (the committed ablation's).
    args, req = request("--tf1-checkpoint", "orl=x")
    (tmp_path / "ablation.json").write_text(json.dumps({"request": common._norm(
        {**req, "tf1_checkpoint": ["orl=x", "eyaleb=y"]})}))
    common.Results(args, req)
    with pytest.raises(MescError, match="another request"):
        common.Results(*request("--tf1-checkpoint", "orl=z"))
    assert request("--tf1-checkpoint", "orl=x", "--tf1-checkpoint", "coil20=y")[1][
        "tf1_checkpoint"] == ["orl=x"]


def test_run_records_count_what_was_reused_and_tell_seeds_apart(tmp_path):
    """A record is reused (and counted) for the same spec; the spec of a method run holds its
    seeds, so a record made with other seeds is refused, not reused."""
    import argparse

    from experiments import common
    from mesc_tf.config import method_settings
    from mesc_tf.errors import MescError

    args = argparse.Namespace(out=str(tmp_path), experiment="confusion", force=False,
                              redo=False, seeds=[0])
    d = common.Data("toy", np.zeros((4, 2)), np.array([1, 1, 2, 2]), 2, {})
    src = {"label": "he_normal (no pretraining)", "sha256": None}
    spec = common.method_spec(d, "our", method_settings("toy", "our"), src, args)
    results = common.Results(args, {})
    results.put("toy-our", spec, {"acc": 1.0})
    assert results.get("toy-our", spec)["result"] == {"acc": 1.0}
    assert (results.computed, results.reused) == (1, 1)
    args.seeds = [0, 1]
    spec = common.method_spec(d, "our", method_settings("toy", "our"), src, args)
    with pytest.raises(MescError, match=r"seeds: \[0\] vs \[0, 1\]"):
        results.get("toy-our", spec)


def test_a_record_of_another_experiment_on_a_shared_out_is_refused(tmp_path):
    """tsne.py, confusion.py and toy_affinity.py key a method run alike (<dataset>-<method>,
    the same method_spec): on one --out, confusion took tsne's record (KeyError traceback) and
    toy_affinity its latent codes as C. The record names its experiment; another's is refused."""
    import argparse

    from experiments import common
    from mesc_tf.config import method_settings
    from mesc_tf.errors import MescError

    def results(experiment):
        return common.Results(argparse.Namespace(out=str(tmp_path), experiment=experiment,
                                                 force=False, redo=False, seeds=[0]), {})

    d = common.Data("toy", np.zeros((4, 2)), np.array([1, 1, 2, 2]), 2, {})
    src = {"label": "he_normal (no pretraining)", "sha256": None}
    spec = common.method_spec(d, "our", method_settings("toy", "our"), src,
                              argparse.Namespace(seeds=[0]))
    results("tsne").put("toy-our", spec, {"finetune_s": 1.0})
    assert results("tsne").get("toy-our", spec)["result"] == {"finetune_s": 1.0}
    for other in ("confusion", "toy_affinity"):
        with pytest.raises(MescError, match=r"is a run of experiments/tsne\.py, not of "
                           rf"{other}\.py; give each experiment its own --out"):
            results(other).get("toy-our", spec)


def test_check_sources_names_the_dataset_and_labels_show_short_paths(monkeypatch, tmp_path):
    from argparse import Namespace

    from experiments.common import REPO as root, check_sources, display_label
    from mesc_tf.errors import MescError

    monkeypatch.setenv("MESC_TF1_DIR", str(tmp_path))
    args = Namespace(tf1_checkpoint=["coil20=original"], weights=[], no_pretrain=False)
    with pytest.raises(MescError, match="^coil20: the authors' coil20 checkpoint is not there"):
        check_sources(args, ["coil20"])
    args = Namespace(tf1_checkpoint=[f"coil20={tmp_path / 'nope.ckpt'}"], weights=[],
                     no_pretrain=False)
    with pytest.raises(MescError, match="^coil20: .*nope.ckpt not found"):
        check_sources(args, ["coil20"])
    # A file of another dataset's architecture, before any training (it was found at loading).
    from mesc_tf.config import get_config
    from mesc_tf.model import ConvAutoEncoder
    from mesc_tf.weights import save_autoencoder

    orl = save_autoencoder(ConvAutoEncoder(get_config("orl").arch).build_for_input(),
                           tmp_path / "orl.h5")
    args = Namespace(tf1_checkpoint=[], weights=[f"coil20={orl}"], no_pretrain=False)
    with pytest.raises(MescError, match="^coil20: .*orl.h5 holds an auto-encoder for"):
        check_sources(args, ["coil20"])
    beside = root.parent / "shared" / "ae.h5"
    assert display_label(f"h5:{beside}") == "h5:../shared/ae.h5"
    # A missing default auto-encoder: --no-pretrain is named only where the script takes it
    # (ablation refuses it).
    args = Namespace(tf1_checkpoint=[], weights=[], no_pretrain=False)
    for option, named in ((True, True), (False, False)):
        with pytest.raises(MescError, match="^coil40: ") as e:
            check_sources(args, ["coil40"], no_pretrain_option=option)
        assert ("--no-pretrain" in str(e.value)) == named, str(e.value)


def test_the_default_autoencoder_reports_its_pretraining_time(monkeypatch, tmp_path):
    """No --weights: pretrained/<dataset>.h5 (here under MESC_PRETRAINED_DIR), whose metadata
    gives the pretraining seconds that the ablation adds to the pretrained rows' time."""
    from argparse import Namespace

    from experiments.common import ae_source, autoencoder_for_run
    from mesc_tf.config import get_config
    from mesc_tf.model import ConvAutoEncoder
    from mesc_tf.weights import save_autoencoder

    monkeypatch.setenv("MESC_PRETRAINED_DIR", str(tmp_path))
    save_autoencoder(ConvAutoEncoder(get_config("toy").arch).build_for_input(),
                     tmp_path / "toy.h5", {"seconds": 7.5})
    src = ae_source(Namespace(tf1_checkpoint=[], weights=[], no_pretrain=False), "toy")
    assert src["sha256"] is not None
    assert autoencoder_for_run("toy", src, 0)[1] == 7.5


def test_rows_without_pretraining_ignore_the_given_autoencoder():
    """The ablation's even rows (pretrained=False) start from he_normal weights whatever
    --weights / --tf1-checkpoint say; those options are for the pretrained rows."""
    from argparse import Namespace

    from experiments.common import ae_source

    args = Namespace(tf1_checkpoint=["toy=x.ckpt"], weights=["toy=w.h5"], no_pretrain=False)
    assert ae_source(args, "toy", pretrained=False) == {
        "no_pretrain": True, "label": "he_normal (no pretraining)", "sha256": None}
    assert ae_source(args, "toy")["label"].startswith("tf1:")


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_every_make_target_passes_options_its_script_takes(synthetic_tf1_dir, monkeypatch):
    """Each Makefile target's command (``make -n``) names a script whose parser accepts the
    options the Makefile gives it, so that renaming an option cannot break `make table` or
    `make faithfulness` unnoticed. Only the parsers run; nothing trains. (Parsers that check
    the authors' checkpoints are there find random ones: a clone without ../shared.)"""
    monkeypatch.setenv("MESC_TF1_DIR", str(synthetic_tf1_dir))
    import shlex

    import os

    # Under `make test` the parent's MAKEFLAGS and MAKELEVEL would add "Entering directory" lines.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    database = subprocess.run(["make", "-pnq", "help"], cwd=REPO, capture_output=True,
                              text=True, env=env).stdout
    targets = next(line for line in database.splitlines()
                   if line.startswith(".PHONY:")).split()[1:]
    skipped = {"help", "install", "test", "figures"}  # figures: the targets below, in turn
    assert {"bench", "table", "faithfulness", "orl", "pretrain-toy", "tsne"} <= set(targets)
    for target in [t for t in targets if t not in skipped]:
        extra = ["DATASET=toy"] if target == "run" else []
        out = subprocess.run(["make", "-n", "--no-print-directory", target, "PYTHON=python",
                              *extra], cwd=REPO, capture_output=True, text=True, check=True,
                             env=env).stdout
        lines = out.replace("\\\n", " ").splitlines()
        assert len(lines) == 1, (target, lines)
        python, script, *argv = shlex.split(lines[0])
        assert python == "python" and (REPO / script).is_file(), (target, lines[0])
        module = load_script(script, f"make_{target.replace('-', '_')}")
        try:
            module.parse_args(argv)
        except SystemExit as e:
            pytest.fail(f"make {target}: {script} refuses {argv} (exit {e.code})")


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_gives_orl_the_authors_auto_encoder_unless_args_name_another():
    """`make table ARGS="--weights orl=F"` used to pass both sources (refused as "not both"),
    and `make run` without DATASET= reached argparse as "expected one argument"."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}

    def make(*args):
        return subprocess.run(["make", "-n", "--no-print-directory", *args], cwd=REPO,
                              capture_output=True, text=True, env=env)

    assert "--tf1-checkpoint orl=original" in make("table").stdout
    other = make("sensitivity", "ARGS=--weights coil20=x.h5").stdout  # not ORL's source
    assert "--tf1-checkpoint orl=original" in other
    for args in ("--weights orl=x.h5", "--weights ORL=x.h5", "--tf1-checkpoint orl=p",
                 "--no-pretrain --smoke",
                 # a bare path is every dataset's, ORL's too: with orl=original as well, the
                 # script refused "--weights or --tf1-checkpoint for a dataset, not both"
                 "--datasets orl --weights x.h5", "--weights=x.h5", "--tf1-checkpoint p"):
        assert "orl=original" not in make("ablation", f"ARGS={args}").stdout, args
    assert "orl=original" in make("ablation", "ARGS=--weights=coil20=x.h5 --smoke").stdout
    assert "orl=original" not in make("table", "AUTHORS_AE=").stdout
    # --seeds in ARGS replaces SEEDS: a list option given twice is refused (cli._ListOnce).
    line = make("table", "ARGS=--seeds 0").stdout
    assert line.count("--seeds") == 1 and "--seeds 0" in line
    assert make("table").stdout.count("--seeds 0,1,2,3,4") == 1
    refused = make("run")
    assert refused.returncode != 0 and "make run needs DATASET=<name>" in refused.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_faithfulness_says_when_it_runs_without_the_authors_c(tmp_path):
    """Without ../shared/reference (or $MESC_SHARED_DIR/reference) the run compares the port
    only with the rebuilt graph, which reads the same weights and images: `make faithfulness`
    says so on stderr instead of dropping --against unseen."""
    import os

    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MESC_SHARED_DIR")}
    (tmp_path / "repo").mkdir()
    shutil.copy(REPO / "Makefile", tmp_path / "repo")

    def make(*args, shared=None):
        return subprocess.run(["make", "-n", "--no-print-directory", "faithfulness",
                               "PYTHON=python", *args], cwd=tmp_path / "repo",
                              capture_output=True, text=True, check=True,
                              env={**env, "MESC_SHARED_DIR": shared} if shared else env)

    elsewhere = tmp_path / "elsewhere" / "reference"  # a shared folder not beside the checkout
    elsewhere.mkdir(parents=True)
    (elsewhere / "orl_decoupled_entropy_C100.npy").write_bytes(b"")
    named = make(shared=str(elsewhere.parent))
    assert f"--against {elsewhere}/orl_decoupled_entropy_C100.npy" in named.stdout
    assert "without --against" not in named.stderr

    alone = make()
    assert "--against" not in alone.stdout and "running without --against" in alone.stderr
    own = make("ARGS=--against C.npy")  # the user's own reference C: nothing is left out
    assert "--against C.npy" in own.stdout and "without --against" not in own.stderr
    reference = tmp_path / "shared" / "reference"
    reference.mkdir(parents=True)
    (reference / "orl_decoupled_entropy_C100.npy").write_bytes(b"")
    found = make()
    assert "--against ../shared/reference/orl_decoupled_entropy_C100.npy" in found.stdout
    assert "without --against" not in found.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_faithfulness_with_other_settings_leaves_the_authors_c_out(tmp_path):
    """The authors' C is after 100 steps of the target's settings: `make faithfulness
    ARGS="--epochs 20"` compared a 20-step C with it (0.6 apart, as if the port were wrong).
    ARGS that change the settings now leave --against out and say so on stderr."""
    import os

    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MESC_SHARED_DIR")}
    (tmp_path / "repo").mkdir()
    shutil.copy(REPO / "Makefile", tmp_path / "repo")
    (tmp_path / "shared" / "reference").mkdir(parents=True)
    (tmp_path / "shared" / "reference" / "orl_decoupled_entropy_C100.npy").write_bytes(b"")

    def make(args):
        return subprocess.run(["make", "-n", "--no-print-directory", "faithfulness",
                               "PYTHON=python", f"ARGS={args}"], cwd=tmp_path / "repo",
                              capture_output=True, text=True, check=True, env=env)

    for args in ("--epochs 20", "--epochs=20", "--reg2 1 --lr 1e-4", "--samples 40",
                 "--method our_wo_net", "--tf1-checkpoint p"):
        run = make(args)
        assert "--against" not in run.stdout, args
        assert "running without --against" in run.stderr and args.split()[0][:7] in run.stderr
    kept = make("--json f.json --force")  # the same settings: the authors' C is compared
    assert "--against ../shared/reference/orl_decoupled_entropy_C100.npy" in kept.stdout
    assert "without --against" not in kept.stderr
    own = make("--epochs 20 --against C.npy")  # the user's own C, once
    assert own.stdout.count("--against") == 1 and "without --against" not in own.stderr


# argparse's own refusals: an option or value the script no longer takes. A file the command
# names but this machine lacks (a /tmp folder of some session) is refused too, but is not drift.
_SYNTAX_ERRORS = ("unrecognized arguments", "invalid choice", "invalid", "expected one argument",
                  "the following arguments are required", "not allowed with", "ambiguous option",
                  "expected a number")
# Placeholders the documents write for a value, by the option they follow.
_PLACEHOLDER_VALUES = {"--dataset": "orl", "--datasets": "orl", "--method": "our",
                       "--methods": "our", "--seed": "0", "--lr": "1e-3", "--max-steps": "10",
                       "--activation-scale": "1.0"}


def _documented_commands():
    """(where, script, argv) of every `python experiments/X.py ...` or `python benchmarks/X.py
    ...` written in the documents or in a script's usage lines."""
    import shlex

    pattern = re.compile(r"python3? ((?:experiments|benchmarks)/\w+\.py)((?: [^`|;&#\n]*)?)")
    files = {REPO / "README.md", *REPO.glob("benchmarks/*.md"), *REPO.glob("pretrained/*.md"),
             *REPO.glob("experiments/results/**/*.md"), *REPO.glob("experiments/*.py"),
             *REPO.glob("benchmarks/*.py")}
    for path in sorted(files):
        name = str(path.relative_to(REPO))
        text = re.sub(r"\\+\n", " ", path.read_text())  # continued lines
        if name.endswith(".md"):  # code blocks line by line; a `span` may wrap over lines
            blocks = re.findall(r"^```.*?\n(.*?)^```", text, flags=re.S | re.M)
            prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
            spans = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]
            lines = "\n".join(blocks).splitlines() + spans
        else:  # a script's usage lines, not the commands its messages build
            lines = [line for line in text.splitlines()
                     if re.match(r"\s+python3? (experiments|benchmarks)/", line)]
        for m in pattern.finditer("\n".join(lines)):
            rest = re.sub(r"\.\.\.|…|\[|\]", " ", m.group(2))  # "D ... [--methods M ...]"
            rest = re.split(r"\s(?:then|and|or|with|for|on)\s|, |\)|\. ", rest)[0]
            argv = shlex.split(rest)
            argv = [_PLACEHOLDER_VALUES.get(argv[i - 1], a) if i and re.fullmatch(r"[A-Z]+", a)
                    else a for i, a in enumerate(argv)]
            yield name, m.group(1), argv


def test_documented_commands_parse(synthetic_tf1_dir, monkeypatch):
    """Every command the documents and usage lines give for a script is one its parser takes:
    renaming an option or a value leaves no stale command for a reader to copy. Placeholders
    (D, M, S ...) are given a value; files the commands name need not exist here (the authors'
    checkpoints: random ones in their places)."""
    monkeypatch.setenv("MESC_TF1_DIR", str(synthetic_tf1_dir))
    import io
    from contextlib import redirect_stderr

    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))  # xla_step imports bench
    modules, checked, failures = {}, 0, []
    for where, script, argv in _documented_commands():
        assert (REPO / script).is_file(), f"{where}: {script} does not exist"
        if script not in modules:
            modules[script] = load_script(script, "doc_" + Path(script).stem)
        parse = getattr(modules[script], "parse_args", None)
        if parse is None:  # a script without options
            assert not argv, f"{where}: {script} takes no options, the document gives {argv}"
            continue
        err = io.StringIO()
        try:
            with redirect_stderr(err):
                parse(argv)
        except SystemExit as e:
            if e.code and any(s in err.getvalue() for s in _SYNTAX_ERRORS):
                failures.append(f"{where}: {script} {argv}: {err.getvalue().strip()}")
        checked += 1
    assert checked > 150, checked  # the extraction still finds the documents' commands
    assert not failures, "\n".join(failures)


def test_readme_layout_names_every_module_and_script():
    """The README's Layout block is the map a newcomer reads: a module or script added without
    a line there (as benchmarks/svd_solvers.py was) is missing from it."""
    text = (REPO / "README.md").read_text()
    block = re.search(r"^## Layout\n.*?^```\n(.*?)^```", text, flags=re.S | re.M).group(1)
    files = [*REPO.glob("mesc_tf/**/*.py"), *REPO.glob("experiments/*.py"),
             *REPO.glob("benchmarks/*.py")]
    named = {f.name for f in files if f.name != "__init__.py"}
    assert len(named) >= 35, sorted(named)  # the globs still find the code
    assert not sorted(n for n in named if n not in block)


def test_the_sdist_holds_the_package_and_no_tests_without_their_helpers(tmp_path):
    """Every module of the package is in the sdist, and no data, weights or results. Newer
    setuptools (`python -m build`'s isolated one; not 65 here) add tests/test_*.py by
    themselves, without the conftest.py, scripts.py and synthetic.py they import: MANIFEST.in
    prunes tests/."""
    import subprocess
    import sys
    import tarfile

    build = tmp_path / "src"
    shutil.copytree(REPO, build, ignore=shutil.ignore_patterns(
        ".git", "runs", "smoke", "*.egg-info", "build", "dist", "__pycache__", ".xla_steps"))
    subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path / "dist")],
                   cwd=build, check=True, capture_output=True)
    (sdist,) = (tmp_path / "dist").glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    modules = {str(p.relative_to(REPO)) for p in REPO.glob("mesc_tf/**/*.py")}
    assert len(modules) >= 20 and modules <= names
    assert not [n for n in names if n.startswith(("tests", "experiments", "pretrained"))
                or n.endswith((".h5", ".mat", ".npy", ".json"))]


def test_an_interrupted_figure_script_says_how_to_go_on(capsys):
    """The figure scripts reuse their finished runs, so Ctrl-C's line says to rerun."""
    from experiments.common import run_main

    def interrupted(argv):
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as e:
        run_main(interrupted, [])
    assert e.value.code == 130 and capsys.readouterr().err == (
        "error: interrupted; finished runs are kept: rerun the same command to continue\n")


def test_an_interrupted_compare_autoencoders_says_to_rerun_the_same_command(capsys):
    """Interrupted during its tables, compare_autoencoders.py has written no autoencoders.json
    row: its line said the finished rows were kept there and to rerun naming the other
    datasets. The tables' cells are what is kept, and the same command reuses them."""
    from experiments import compare_autoencoders
    from experiments.common import run_main

    def interrupted(argv):
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as e:
        run_main(interrupted, [], kept=compare_autoencoders.KEPT)
    assert e.value.code == 130 and capsys.readouterr().err == (
        "error: interrupted; finished cells and diagnostics are kept under --out: rerun the "
        "same command to continue\n")


def test_diagnostics_stopped_part_way_go_on_from_the_last_lambda(monkeypatch, tmp_path):
    """MNIST's diagnostics are 30 clusterings of about a minute: a stop keeps each λ's, and the
    next call computes only the rest (the result equal to one uninterrupted call's)."""
    from types import SimpleNamespace

    from experiments import compare_autoencoders as ca
    from mesc_tf import data, measures, pipeline, weights

    y = np.repeat([1, 2], 3)
    clustered = []

    def cluster(coef, k, s, seed):
        clustered.append(seed)
        if len(clustered) == stop_at[0]:
            raise KeyboardInterrupt
        return y - 1, {}

    stop_at = [None]
    monkeypatch.setattr(data, "load_dataset", lambda *a: SimpleNamespace(x=np.ones((6, 1)), y=y,
                                                                         n_clusters=2))
    monkeypatch.setattr(weights, "load_autoencoder", lambda *a: (None, {}))
    monkeypatch.setattr(weights, "load_tf1_checkpoint", lambda *a: None)
    monkeypatch.setattr(ca.sources, "pretrained_path", lambda d: "x.h5")
    monkeypatch.setattr(measures, "latent_codes", lambda ae, x: np.arange(12.0).reshape(6, 2))
    monkeypatch.setattr(measures, "relative_error", lambda ae, x: 0.1)
    monkeypatch.setattr(pipeline, "cluster", cluster)
    whole = ca.autoencoder_diagnostics("toy", None, None, [0, 1])
    assert len(clustered) == 12  # 2 auto-encoders × 3 λ × 2 seeds
    saved = []
    clustered.clear()
    stop_at[0] = 10  # in the original's third λ
    with pytest.raises(KeyboardInterrupt):
        ca.autoencoder_diagnostics("toy", None, None, [0, 1],
                                   save=lambda out: saved.append(json.loads(json.dumps(out))))
    assert len(saved) == 4 and len(saved[-1]["original"]["lsr"]["acc"]) == 1
    clustered.clear()
    stop_at[0] = None
    assert ca.autoencoder_diagnostics("toy", None, None, [0, 1], saved[-1]) == whole
    assert len(clustered) == 4


NO_AE = ["--datasets", "toy", "--no-pretrain"]


@pytest.mark.parametrize("script,argv,png", [
    ("ablation", ["--datasets", "toy", "--rows", "8"], "ablation.png"),
    ("confusion", [*NO_AE, "--methods", "our"], "toy_confusion.png"),
    ("convergence", NO_AE, "convergence.png"),
    ("sensitivity", [*NO_AE, "--lambda1", "1", "--lambda2", "1"], "sensitivity.png"),
    ("toy_affinity", [*NO_AE, "--methods", "our"], "toy_affinity.png"),
    ("toy_affinity", [*NO_AE, "--methods", "our"], "toy_cosine.png"),
    ("tsne", [*NO_AE, "--methods", "our"], "toy_tsne.png"),
])
def test_a_folder_where_a_figure_goes_is_refused_before_any_training(script, argv, png,
                                                                     fake_train, tmp_path):
    """Not a failed save_figure after every run."""
    import importlib

    from mesc_tf.errors import MescError

    module = importlib.import_module(f"experiments.{script}")
    (tmp_path / png).mkdir()
    with pytest.raises(MescError, match=f"{png} is a folder, where this experiment writes .*"
                                        "choose another --out"):
        module.main([*SMOKE, *argv, "--out", str(tmp_path)])
    assert fake_train.calls == []


@pytest.mark.parametrize("name,names", [("mnist", "0 1 2"), ("usps", "0 1 2"),
                                        ("coil20", "1 2 3")])
def test_the_tsne_legend_names_digits_by_the_digit(name, names, monkeypatch, tmp_path):
    """USPS's and MNIST's labels 1..10 are the digits 0..9 (mesc_tf/data.py); other datasets'
    classes are numbered 1..K."""
    from argparse import Namespace

    from experiments import common, tsne

    shown = []
    monkeypatch.setattr(common, "save_figure", lambda fig, path: shown.append(
        [t.get_text() for t in fig.legends[0].get_texts()]))
    d = common.Data(name, np.zeros((3, 2, 2, 1)), np.array([1, 2, 3]), 3, {})
    panel = {"emb": np.zeros((3, 2)), "colors": d.y, "title": "t", "homogeneity": 1.0,
             "completeness": 1.0}
    tsne.figure(name, d, 3, [panel], Namespace(color_by="truth"), tmp_path / "t.png")
    assert shown == [names.split()]


def test_confusion_markdown_names_digit_classes_by_their_digit():
    """The table's classes with low recall are named as the chart's ticks and the printed
    worst class name them: USPS's label 1 is the digit 0."""
    from argparse import Namespace

    from experiments import confusion

    method = {"title": "A", "acc_mean": 0.5, "acc_std": None, "nmi_mean": 0.5, "nmi_std": None,
              "per_seed": [{"recall": [0.25, 1.0, 0.5]}]}
    for name, low in (("usps", "0"), ("coil20", "1")):
        md = confusion.markdown({name: {"n": 6, "n_clusters": 3, "methods": {"our": method}}},
                                Namespace(seeds=[0]))
        assert f"| A | 50.00 | 50.00 | {low} |" in md


def test_compare_autoencoders_row_whose_seeds_all_failed_shows_a_dash():
    """A cell with no scored seed (every clustering failed) reads '–', as in main_table.md,
    not 'nan', and its row is not counted as ours ≥ original."""
    import warnings

    from experiments import compare_autoencoders

    def cell(acc):
        return {"acc": acc, "nmi": acc, "seeds": [0, 1][:len(acc)], "max_epochs": None}

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy 'Mean of empty slice'
        md = compare_autoencoders.render_md({"orl": {
            "relative_error": {"ours": 0.1, "original": 0.1},
            "methods": {"our": {"ours": cell([]), "original": cell([0.5, 0.6])}}}})
    row = next(line for line in md.splitlines() if line.startswith("| orl"))
    assert "nan" not in row and row.count("| – |") == 2 and row.endswith("| no |")


def test_a_missing_default_autoencoder_names_mesc_pretrained_dir(monkeypatch, tmp_path):
    """The default folder is the checkout's pretrained/, which a non-editable install lacks:
    the error says how to point at one, unless MESC_PRETRAINED_DIR already does."""
    from mesc_tf import sources
    from mesc_tf.errors import MescError

    monkeypatch.delenv("MESC_PRETRAINED_DIR", raising=False)
    real_path = sources.pretrained_path
    monkeypatch.setattr(sources, "pretrained_path", lambda name: tmp_path / f"{name}.h5")
    with pytest.raises(MescError, match=r"make it with `make pretrain-orl` .*pass --weights, "
                       r"--tf1-checkpoint or --no-pretrain, or set MESC_PRETRAINED_DIR to a "
                       r"folder of them$"):
        sources.require_pretrained("orl")
    # Installed with `pip install .`: no checkout beside the package, so no make to suggest.
    monkeypatch.setattr(sources, "__file__", str(tmp_path / "site-packages/mesc_tf/sources.py"))
    with pytest.raises(MescError, match=r"an installed copy of mesc_tf has no pretrained/ "
                       r"folder; set MESC_PRETRAINED_DIR to a checkout's pretrained/, or pass "
                       r"--weights, --tf1-checkpoint or --no-pretrain$") as info:
        sources.require_pretrained("orl")
    assert "make" not in str(info.value)
    monkeypatch.setenv("MESC_PRETRAINED_DIR", str(tmp_path))
    monkeypatch.setattr(sources, "pretrained_path", real_path)
    with pytest.raises(MescError, match=r"make it with experiments/pretrain.py --dataset orl in "
                       r"a checkout, or pass --weights, --tf1-checkpoint or --no-pretrain$"):
        sources.require_pretrained("ORL")  # the file and the command in lower case
    monkeypatch.setattr(sources, "__file__", str(REPO / "mesc_tf" / "sources.py"))
    with pytest.raises(MescError, match=r"or pass --weights, --tf1-checkpoint or --no-pretrain$"):
        sources.require_pretrained("orl")


def test_set_epochs_is_not_overridden_by_smoke():
    """--smoke fills in its few steps only where no --set gives them (they replaced a --set
    epochs= silently, as --epochs did; that combination is now refused)."""
    from experiments import confusion
    from experiments.common import SMOKE, configure
    from mesc_tf.config import method_settings

    args = confusion.parse_args(["--smoke", "--set", "our.epochs=7"])
    assert configure(method_settings("orl", "our"), args, "our").epochs == 7
    assert confusion.parse_args(["--smoke"]).epochs == SMOKE["epochs"]


def test_orl_gap_prints_the_figures_of_both_autoencoders(synthetic_data, synthetic_tf1,
                                                         tmp_path, monkeypatch, capsys):
    """experiments/orl_gap.py (pretrained/HISTORY.md's session 64 figures) on random ORL-shaped
    data: one line per auto-encoder, then the grid's line (one setting here) and the best of
    each; a missing auto-encoder is one error line."""
    from mesc_tf import cli
    from mesc_tf.config import get_config
    from mesc_tf.model import ConvAutoEncoder
    from mesc_tf.training import configure_runtime
    from mesc_tf.weights import save_autoencoder

    mod = load_script("experiments/orl_gap.py")
    monkeypatch.setattr(mod, "THRS", (0.2,))
    monkeypatch.setattr(mod, "DIMS", (3,))
    monkeypatch.setattr(mod, "POWERS", (1.0,))
    configure_runtime(0)
    ours = save_autoencoder(ConvAutoEncoder(get_config("orl").arch).build_for_input(),
                            tmp_path / "ours.h5")
    base = ["--data-dir", str(synthetic_data), "--tf1-checkpoint", str(synthetic_tf1["orl"]),
            "--epochs", "2"]
    assert mod.main([*base, "--weights", str(ours)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("authors' (TF1 checkpoint ") and out[1].startswith("ours (")
    for line in out[:2]:
        assert re.search(r"code offset / spread [\d.]+ before, [\d.]+ after .*C row sums "
                         r"[\d.]+ ± [\d.]+.*top 1/3/9 in the subject [\d.]+/[\d.]+/[\d.]+ %; "
                         r"ACC [\d.]+ %$", line), line
    assert out[2].startswith("1 post-clustering settings") and "ours ahead at" in out[2]
    assert out[3].startswith("best of the grid, authors': ") and out[3].endswith("(0.2, 3, 1.0)")
    with pytest.raises(SystemExit) as e:
        cli.main_guard(lambda: mod.main([*base, "--weights", str(tmp_path / "none.h5")]))
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "none.h5 not found" in err
    # Another dataset's auto-encoder: refused before the authors' fine-tuning, not after.
    coil = save_autoencoder(ConvAutoEncoder(get_config("coil20").arch).build_for_input(),
                            tmp_path / "coil20.h5")
    with pytest.raises(SystemExit) as e:
        cli.main_guard(lambda: mod.main([*base, "--weights", str(coil)]))
    printed = capsys.readouterr()
    assert e.value.code == 2 and "holds an auto-encoder for" in printed.err and not printed.out
