"""Issue 7, reliability, through the command-line scripts.

* Bad input ends in exactly one stderr line ``error: ...``, exit status 2, no traceback and
  nothing written (no run directory, no .npy). Most cases call ``experiments/run.py`` /
  ``pretrain.py`` in-process through ``cli.main_guard`` (as ``__main__`` does); two real
  subprocesses prove the same without pytest around it.
* Resume: a run killed with SIGKILL after a checkpoint and resumed with ``--resume`` ends
  with exactly the C of an uninterrupted run; a resume of a finished run takes no step.
* Determinism: the same ``--seed`` twice gives the identical C and labels (he_normal start).
* Results are never lost: finished runs and existing files are refused without ``--force``,
  every run gets its own directory, files are replaced atomically.

Every input is synthetic (written to tmp dirs), so nothing here needs the shared data.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.io

from mesc_tf import cli
from mesc_tf.config import get_config
from mesc_tf.errors import MescError
from mesc_tf.files import read_backup_state, size_text
from synthetic import write_fea_gnd, write_tf1_checkpoint  # tests/synthetic.py
from scripts import load_script, signals_default  # tests/scripts.py

ROOT = Path(__file__).resolve().parents[1]


def _script(name):
    return load_script(f"experiments/{name}.py", f"_mesc_script_{name}")


RUN = _script("run")
PRETRAIN = _script("pretrain")


def invoke(script, argv, capsys):
    """Run a script's main as ``__main__`` does. Returns (exit status, stdout, stderr)."""
    cleanup = []
    capsys.readouterr()
    try:
        cli.main_guard(lambda: script.main([str(a) for a in argv], cleanup=cleanup), cleanup)
        code = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_error_line(err, *needles):
    """stderr holds exactly one line starting with 'error:', no traceback; returns it."""
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert err.rstrip().splitlines()[-1] == errors[0], err  # and it is the last word
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


# --- synthetic inputs --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Data folders and weight files, good and bad, shared by the error cases."""
    from mesc_tf.model import ConvAutoEncoder
    from mesc_tf.weights import save_autoencoder

    d = tmp_path_factory.mktemp("inputs")
    f = {"dir": d, "empty": d / "empty"}
    f["empty"].mkdir()
    write_fea_gnd(d / "orl" / "ORL_32x32.mat", 40, 3)  # a valid (small) ORL file
    write_fea_gnd(d / "coil20" / "COIL20.mat", 20, 12, dtype=np.float64, scale=1 / 255)  # toy
    (d / "corrupt_mat").mkdir()
    (d / "corrupt_mat" / "ORL_32x32.mat").write_bytes(b"MATLAB 5.0 MAT-file" + os.urandom(300))
    (d / "corrupt_v73").mkdir()  # an HDF5 (MATLAB v7.3) signature, then garbage
    (d / "corrupt_v73" / "ORL_32x32.mat").write_bytes(b"\x89HDF\r\n\x1a\n" + os.urandom(600))
    write_fea_gnd(d / "novar" / "ORL_32x32.mat", 40, 3)
    mat = scipy.io.loadmat(str(d / "novar" / "ORL_32x32.mat"))
    scipy.io.savemat(str(d / "novar" / "ORL_32x32.mat"), {"X": mat["fea"], "gnd": mat["gnd"]})
    write_fea_gnd(d / "size" / "ORL_32x32.mat", 40, 3, pixels=28 * 28)
    fea, gnd = write_fea_gnd(d / "nan" / "ORL_32x32.mat", 40, 3, dtype=np.float64)
    fea[5, 17] = np.nan
    scipy.io.savemat(str(d / "nan" / "ORL_32x32.mat"), {"fea": fea, "gnd": gnd})
    fea[5, 17] = np.inf
    write_fea_gnd(d / "inf" / "ORL_32x32.mat", 40, 3)
    scipy.io.savemat(str(d / "inf" / "ORL_32x32.mat"), {"fea": fea, "gnd": gnd})
    write_fea_gnd(d / "few" / "ORL_32x32.mat", 30, 1)  # 30 images for 40 clusters
    (d / "no_samples").mkdir()
    scipy.io.savemat(str(d / "no_samples" / "ORL_32x32.mat"),
                     {"fea": np.zeros((0, 1024)), "gnd": np.zeros((0, 1))})
    fea, gnd = write_fea_gnd(d / "emptyclass" / "ORL_32x32.mat", 40, 3)
    gnd[gnd == 7] = 8  # class 7 has no image
    scipy.io.savemat(str(d / "emptyclass" / "ORL_32x32.mat"), {"fea": fea, "gnd": gnd})
    # MNIST idx: a corrupt .gz and well-formed files whose images are 20x20, not 28x28.
    (d / "corrupt_idx" / "mnist").mkdir(parents=True)
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        (d / "corrupt_idx" / "mnist" / name).write_bytes(b"\x1f\x8b\x08\x00" + os.urandom(200))
    import gzip

    (d / "idx_size" / "mnist").mkdir(parents=True)
    imgs = np.zeros((20, 20, 20), np.uint8)
    raw = (2051).to_bytes(4, "big") + b"".join(s.to_bytes(4, "big") for s in imgs.shape)
    (d / "idx_size" / "mnist" / "t10k-images-idx3-ubyte.gz").write_bytes(
        gzip.compress(raw + imgs.tobytes()))
    labels = np.arange(20, dtype=np.uint8) % 10
    (d / "idx_size" / "mnist" / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(
        (2049).to_bytes(4, "big") + (20).to_bytes(4, "big") + labels.tobytes()))
    # Weights: an ORL auto-encoder .h5, a corrupt .h5, TF1 checkpoints incomplete and damaged.
    orl_arch = get_config("orl").arch
    f["orl_h5"] = save_autoencoder(ConvAutoEncoder(orl_arch).build_for_input(), d / "orl.h5")
    f["bad_h5"] = d / "bad.h5"
    f["bad_h5"].write_bytes(b"\x89HDF\r\n\x1a\n" + os.urandom(500))
    f["tf1_missing"] = write_tf1_checkpoint(d / "tf1_missing" / "model.ckpt", orl_arch,
                                            drop=("Variable_5",))
    f["tf1_orl"] = write_tf1_checkpoint(d / "tf1_orl" / "model.ckpt", orl_arch)
    f["tf1_damaged"] = write_tf1_checkpoint(d / "tf1_damaged" / "model.ckpt", orl_arch)
    data_file = next((d / "tf1_damaged").glob("model.ckpt.data-*"))
    data_file.write_bytes(data_file.read_bytes()[:40])
    f["a_file"] = d / "a_file"
    f["a_file"].write_text("not a directory\n")
    return f


# --- every bad input: one line, status 2, nothing written ---------------------------------------

# Every count option: (script, words before it, option, least value); cli.at_least checks them.
COUNTS = [
    ("experiments/run.py", [], "--checkpoint-every", 1),
    ("experiments/pretrain.py", [], "--checkpoint-every", 0),
    ("experiments/table.py", [], "--jobs", 1), ("experiments/table.py", [], "--max-epochs", 1),
    ("experiments/sweep.py", [], "--threads-per-job", 1), ("experiments/sweep.py", [], "--top", 1),
    ("experiments/compare_autoencoders.py", [], "--jobs", 1),
    ("experiments/faithfulness.py", [], "--samples", 2),
    ("experiments/tsne.py", [], "--tsne-samples", 5), ("experiments/tsne.py", [], "--epochs", 0),
    ("experiments/ablation.py", [], "--per-class", 1),
    ("benchmarks/bench.py", [], "--warmup", 0), ("benchmarks/conv_routes.py", [], "--n", 1),
    ("benchmarks/xla_step.py", ["export"], "--steps", 1),
    ("benchmarks/xla_step.py", ["time"], "--repeats", 1),
]


@pytest.mark.parametrize("script, before, option, low", COUNTS,
                         ids=[f"{s.split('/')[1]}{o}" for s, _, o, _ in COUNTS])
def test_count_options_take_whole_numbers_from_their_least(script, before, option, low, capsys,
                                                          monkeypatch):
    monkeypatch.syspath_prepend(str((ROOT / script).parent))  # xla_step imports bench
    module = load_script(script, f"_counts_{Path(script).stem}")
    for value, needle in [(low - 1, f"{option}: must be >= {low}, got {low - 1}"),
                          ("2.5", f"{option}: must be a whole number >= {low}, got '2.5'")]:
        with pytest.raises(SystemExit) as e:
            module.parse_args([*before, option, str(value)])
        assert e.value.code == 2
        assert_one_error_line(capsys.readouterr().err, needle)
    assert cli.at_least(low)(str(low)) == low


ORL = ["--dataset", "orl", "--no-pretrain", "--epochs", "2"]


def _data(name):
    return lambda f: ["--data-dir", f["dir"] / name]


# id -> (argv builder, substrings the error line must hold)
RUN_CASES = {
    "data-file-missing": (lambda f: [*ORL, "--data-dir", f["empty"]],
                          ["not found", "ORL_32x32.mat", "--data-dir", "MESC_DATA_DIR"]),
    "corrupt-mat": (lambda f: [*ORL, *_data("corrupt_mat")(f)], ["cannot read", "corrupt"]),
    "corrupt-mat-v7.3-hdf5": (lambda f: [*ORL, *_data("corrupt_v73")(f)], ["cannot read"]),
    "variable-absent": (lambda f: [*ORL, *_data("novar")(f)], ["no variable 'fea'"]),
    "image-size-mat": (lambda f: [*ORL, *_data("size")(f)], ["32x32"]),
    "corrupt-idx-gz": (lambda f: ["--dataset", "mnist", "--no-pretrain", *_data("corrupt_idx")(f)],
                       ["cannot read", "t10k-images-idx3-ubyte.gz"]),
    "image-size-idx": (lambda f: ["--dataset", "mnist", "--no-pretrain", *_data("idx_size")(f)],
                       ["20x20", "architecture expects 28x28"]),
    "nan-in-data": (lambda f: [*ORL, *_data("nan")(f)], ["NaN or infinite"]),
    "inf-in-data": (lambda f: [*ORL, *_data("inf")(f)], ["NaN or infinite"]),
    "fewer-samples-than-clusters": (lambda f: [*ORL, *_data("few")(f)],
                                    ["30 images for 40 clusters"]),
    "no-samples": (lambda f: [*ORL, *_data("no_samples")(f)], ["fea holds no samples"]),
    "empty-class": (lambda f: [*ORL, *_data("emptyclass")(f)], ["39 distinct classes"]),
    "corrupt-h5": (lambda f: ["--dataset", "orl", *_data("orl")(f), "--weights", f["bad_h5"]],
                   ["cannot read auto-encoder file", "bad.h5"]),
    "h5-wrong-architecture": (lambda f: ["--dataset", "coil20", *_data("coil20")(f),
                                         "--weights", f["orl_h5"]],
                              ["orl.h5", "holds an auto-encoder for", "needs"]),
    "missing-pretrained-h5": (lambda f: ["--dataset", "orl", *_data("orl")(f)],
                              ["no pretrained auto-encoder", "--tf1-checkpoint"]),
    "tf1-missing-tensors": (lambda f: ["--dataset", "orl", *_data("orl")(f),
                                       "--tf1-checkpoint", f["tf1_missing"]],
                            ["lacks tensors ['Variable_5']"]),
    "tf1-damaged-data": (lambda f: ["--dataset", "orl", *_data("orl")(f),
                                    "--tf1-checkpoint", f["tf1_damaged"]],
                         ["cannot read the tensors", "damaged"]),
    "tf1-not-found": (lambda f: ["--dataset", "orl", *_data("orl")(f),
                                 "--tf1-checkpoint", f["dir"] / "nope.ckpt"],
                      ["TF1 checkpoint", "nope.ckpt not found (need nope.ckpt.index"]),
    "tf1-wrong-architecture": (lambda f: ["--dataset", "coil20", *_data("coil20")(f),
                                          "--tf1-checkpoint", f["tf1_orl"]],
                               ["kernels (3, 3, 3)", "needs (3,)",
                                "give a checkpoint made for this dataset"]),
    "unknown-dataset": (lambda f: ["--dataset", "foo"], ["invalid choice: 'foo'", "--help"]),
    "unknown-framework": (lambda f: [*ORL, "--framework", "foo"], ["invalid choice: 'foo'"]),
    "unknown-post-method": (lambda f: [*ORL, "--post-method", "exact"],
                            ["--post-method", "invalid choice: 'exact'"]),
    "negative-epochs": (lambda f: ["--dataset", "orl", "--epochs", "-1", *_data("orl")(f)],
                        ["(--epochs) must be a whole number >= 0, got -1"]),
    "zero-lr": (lambda f: [*ORL, "--lr", "0", *_data("orl")(f)], ["(--lr) must be a finite"]),
    "nan-lr": (lambda f: [*ORL, "--lr", "nan", *_data("orl")(f)], ["(--lr) must be a finite"]),
    "inf-reg1": (lambda f: [*ORL, "--reg1", "inf", *_data("orl")(f)],
                 ["(--reg1) must be a finite"]),
    "inf-power": (lambda f: [*ORL, "--power", "inf", *_data("orl")(f)], ["(--power) must be"]),
    "inf-thr": (lambda f: [*ORL, "--thr", "inf", *_data("orl")(f)],
                ["(--thr) must be a finite number > 0"]),
    "nan-coef-init": (lambda f: [*ORL, "--coef-init", "nan", *_data("orl")(f)],
                      ["(--coef-init) must be a finite number", "got nan"]),
    # finite, but not in float32 (C's type): a traceback from Keras' cast
    "coef-init-past-float32": (lambda f: [*ORL, "--coef-init", "1e40", *_data("orl")(f)],
                               ["(--coef-init) must be a finite number of float32's range",
                                "got 1e+40"]),
    "non-number-epochs": (lambda f: ["--dataset", "orl", "--epochs", "ten"], ["invalid int"]),
    "negative-seed": (lambda f: [*ORL, "--seed", "-1"], ["--seed", "from 0 to 4294967295"]),
    "seed-too-large": (lambda f: [*ORL, "--seed", "4294967296"], ["got '4294967296'"]),
    "checkpoint-every-0": (lambda f: [*ORL, "--checkpoint-every", "0"], [">= 1"]),
    "out-not-writable": (lambda f: [*ORL, *_data("orl")(f), "--out", f["a_file"] / "sub"],
                         ["not writable", "a_file is a file)"]),
    "out-is-a-file": (lambda f: [*ORL, *_data("orl")(f), "--out", f["a_file"]],
                      ["output directory", "a_file is not writable (it is a file)"]),
    "weights-is-a-folder": (lambda f: ["--dataset", "orl", *_data("orl")(f), "--weights",
                                       f["empty"]],
                            ["auto-encoder file", "is a folder; give an existing .h5 file"]),
    "save-coef-not-writable": (lambda f: [*ORL, *_data("orl")(f), "--save-coef",
                                          f["a_file"] / "C.npy"],
                               ["cannot write --save-coef file", "a_file is a file)"]),
    "resume-without-checkpoint": (lambda f: [*ORL, *_data("orl")(f), "--resume"],
                                  ["nothing to resume", "--checkpoint-every"]),
    "resume-without-out": (lambda f: ["--dataset", "orl", "--resume"], ["--resume needs --out"]),
    "empty-out": (lambda f: [*ORL, "--out", ""], ["--out is empty"]),
    "empty-weights": (lambda f: ["--dataset", "orl", "--weights", ""], ["--weights is empty"]),
}


@pytest.mark.parametrize("case", list(RUN_CASES))
def test_run_bad_input(case, files, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MESC_PRETRAINED_DIR", str(files["empty"]))  # no pretrained/<ds>.h5
    build, needles = RUN_CASES[case]
    argv = list(build(files))
    out = tmp_path / "new" / "run"  # a failed run removes the parent it made too
    if "--out" not in argv and "--resume needs" not in needles[0]:
        argv += ["--out", out]
    if "--save-coef" not in argv:
        argv += ["--save-coef", out / "C.npy"]
    before = sorted(files["dir"].rglob("*"))
    code, stdout, err = invoke(RUN, argv, capsys)
    assert code == 2, (stdout, err)
    assert_one_error_line(err, *needles)
    assert not out.exists() and not list(tmp_path.rglob("*"))  # nothing written
    assert sorted(files["dir"].rglob("*")) == before
    assert files["a_file"].read_text() == "not a directory\n"


@pytest.mark.parametrize("case", ["missing-pretrained-h5", "tf1-not-found"])
def test_run_finds_a_missing_autoencoder_before_tensorflow(case, files, tmp_path, capsys,
                                                          monkeypatch):
    """A missing pretrained/<dataset>.h5 (make coil40: none is shipped) or TF1 checkpoint is
    the error line alone, not after seconds of TensorFlow's start-up lines."""
    from mesc_tf import training

    started = []
    monkeypatch.setattr(training, "configure_runtime", lambda *a, **k: started.append(a))
    monkeypatch.setenv("MESC_PRETRAINED_DIR", str(files["empty"]))
    build, needles = RUN_CASES[case]
    code, _, err = invoke(RUN, [*build(files), "--out", tmp_path / "r"], capsys)
    assert code == 2 and not started
    assert_one_error_line(err, *needles)


def test_problem_too_large_for_memory(files, tmp_path, capsys, monkeypatch):
    from mesc_tf import memory

    monkeypatch.setenv(memory.MEMORY_LIMIT_ENV, "1000")
    need = memory.memory_estimate(120, get_config("orl").arch)
    code, _, err = invoke(RUN, [*ORL, "--data-dir", files["dir"] / "orl", "--out", tmp_path / "r"],
                          capsys)
    assert code == 2
    assert_one_error_line(err, "120 samples needs about", size_text(need),
                          "1000 bytes is available (the cap MESC_MEMORY_LIMIT_BYTES sets)")
    assert not list(tmp_path.iterdir())
    for value in ("lots", "-1", "0"):
        monkeypatch.setenv(memory.MEMORY_LIMIT_ENV, value)
        code, _, err = invoke(RUN, [*ORL, "--data-dir", files["dir"] / "orl", "--out",
                                    tmp_path / "r"], capsys)
        assert code == 2
        assert_one_error_line(err, f"MESC_MEMORY_LIMIT_BYTES='{value}' is not a number of bytes")


def test_memory_check_counts_the_reference_post_clustering(files, tmp_path, capsys,
                                                          monkeypatch):
    """--post-method reference (and strict, which falls back to it) holds dense n² float64
    copies the fast route does not: a run that fits by the fast route's figure was let through
    and could be killed in post-clustering, with no error line."""
    from mesc_tf import memory

    arch = get_config("orl").arch
    fast_most = memory.memory_estimate(120, arch, 10**6)  # any rank: capped at n
    assert memory.memory_estimate(120, arch, 1, "reference") > fast_most
    monkeypatch.setenv(memory.MEMORY_LIMIT_ENV, str(fast_most))
    for method in ("reference", "strict"):
        code, _, err = invoke(RUN, [*ORL, "--data-dir", files["dir"] / "orl", "--out",
                                    tmp_path / "r", "--post-method", method], capsys)
        assert code == 2
        assert_one_error_line(err, "120 samples needs about",
                              f"(the {method} post-clustering's dense copies; the fast one "
                              "needs less)")
        assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("n,post_method", [(4000, "fast"), (2000, "reference"), (4500, "fast")])
def test_post_clustering_memory_estimate_covers_what_numpy_allocates(n, post_method):
    """NumPy's peak while a block-structured C is clustered (benchmarks/post_memory.py), with C
    itself, stays within the estimate's post-clustering part: the reference route holds 36.5 n²
    beyond C and the fast one 16.4 n² up to DENSE_SVD_MAX_N (its dense eigh), where 8 n² were
    counted for both before session 65; above it 6.2 n²."""
    from mesc_tf import memory
    from mesc_tf.config import Settings

    post_memory = load_script("benchmarks/post_memory.py", "post_memory")
    coef = post_memory.block_coef(n, 10)
    peak = post_memory.peak_beyond_coef(coef, 10, post_method)
    assert coef.nbytes + peak <= memory._post_bytes(n, Settings().subspace_dim * 10 + 1,
                                                    post_method)


def test_memory_limit_only_lowers_what_is_available(monkeypatch):
    """MESC_MEMORY_LIMIT_BYTES is a cap: above the machine's memory it changes nothing (it
    replaced the figure before, so a large value switched the check off)."""
    from mesc_tf import memory

    monkeypatch.setenv(memory.MEMORY_LIMIT_ENV, "1e15")
    assert memory.available_memory() < 10**15
    with pytest.raises(MescError, match="B is available; use a subset"):
        memory.check_memory(10**6, get_config("mnist").arch)  # ~4 TB, cap or no cap
    monkeypatch.setenv(memory.MEMORY_LIMIT_ENV, "1e6")
    assert memory.available_memory() == 10**6


def _fake_cgroup(monkeypatch, tmp_path, version, limit, usage, cache):
    """A cgroup tree under tmp_path: the process in /job/run, the limit set on /job."""
    from mesc_tf import memory

    names = {"v2": ("memory.max", "memory.current", "inactive_file", ""),
             "v1": ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file",
                    "memory")}[version]
    mount = tmp_path / names[3]
    (mount / "job" / "run").mkdir(parents=True)
    if version == "v2":  # the unified hierarchy's mark
        (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    for folder, lim in ((mount, "max" if version == "v2" else str(2**63 - 4096)),
                        (mount / "job", str(limit)), (mount / "job" / "run", "max")):
        (folder / names[0]).write_text(lim + "\n")
        (folder / names[1]).write_text(f"{usage}\n")
        (folder / "memory.stat").write_text(f"anon 5\n{names[2]} {cache}\nactive_file 7\n")
    line = "4:memory:/job/run" if version == "v1" else "0::/job/run"
    (tmp_path / "self-cgroup").write_text(f"9:pids:/\n{line}\n")
    monkeypatch.setattr(memory, "PROC_CGROUP", str(tmp_path / "self-cgroup"))
    monkeypatch.setattr(memory, "CGROUP_ROOT", str(tmp_path))


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_cgroup_limit_caps_the_available_memory(monkeypatch, tmp_path, version):
    """In a container MemAvailable is the host's: the memory cgroup's limit (set on a parent
    of the process's group here) less its usage, plus its inactive page cache the kernel
    reclaims first, is what the run may use; the error says so."""
    from mesc_tf import memory

    monkeypatch.delenv(memory.MEMORY_LIMIT_ENV, raising=False)
    _fake_cgroup(monkeypatch, tmp_path, version, limit=3 * 2**30, usage=2**30, cache=2**29)
    assert memory.cgroup_room() == 2 * 2**30 + 2**29
    assert memory.available_memory() == 2 * 2**30 + 2**29
    with pytest.raises(MescError, match="memory cgroup, e.g. a container's limit, leaves"):
        memory.check_memory(20000, get_config("mnist").arch)  # ~14 GiB
    monkeypatch.setenv(memory.MEMORY_LIMIT_ENV, "1e6")  # the lower of the two counts
    assert memory.available_memory() == 10**6


def test_no_cgroup_limit_leaves_the_machines_memory(monkeypatch, tmp_path):
    """'max' (v2) or v1's huge number is no limit; unreadable files change nothing."""
    from mesc_tf import memory

    _fake_cgroup(monkeypatch, tmp_path, "v2", limit="max", usage=2**30, cache=0)
    assert memory.cgroup_room() is None
    monkeypatch.setattr(memory, "PROC_CGROUP", str(tmp_path / "missing"))
    assert memory.cgroup_room() is None and memory.available_memory() > 0


def test_memory_estimate_counts_the_bfc_pool(monkeypatch):
    """With TF's BFC allocator the pool fine-tuning grew stays resident during post-clustering,
    so the two stages add up. MNIST-10k end to end measured 3.81 GiB without the pool and
    5.17 GiB with it (session 18; benchmarks/README.md, "Notes behind the README's table")."""
    from mesc_tf import memory

    arch = get_config("mnist").arch
    for value in ("false", "0", ""):
        monkeypatch.setenv(memory.BFC_ENV, value)
        assert not memory.bfc_allocator()
        assert 3.6 < memory.memory_estimate(10000, arch) / 2**30 < 4.0
    for value in ("true", "1", "True"):
        monkeypatch.setenv(memory.BFC_ENV, value)
        assert memory.bfc_allocator()
        assert 5.1 < memory.memory_estimate(10000, arch) / 2**30 < 5.5


def test_memory_estimate_covers_a_measured_peak():
    """COIL20, whose codes (p = 3840) outnumber its images: `/usr/bin/time -v python
    experiments/run.py --dataset coil20 --epochs 5 --quiet --out DIR` peaked at 1110 MiB
    (session 46), over the 1011 MiB estimated before the n × p terms were counted."""
    from mesc_tf import memory

    assert memory.memory_estimate(1440, get_config("coil20").arch) >= 1110 * 2**20
    # MNIST-10k end to end peaked at 3.36-3.89 GiB in session 20 (memory_estimate's docstring).
    assert memory.memory_estimate(10000, get_config("mnist").arch) >= 3.89 * 2**30


def test_a_sweep_training_counts_every_snapshot_of_c_but_one():
    from mesc_tf import memory, sweep

    arch, n = get_config("orl").arch, 400
    assert sweep.training_memory(n, arch, 1) == memory.memory_estimate(n, arch)
    assert sweep.training_memory(n, arch, 3) - sweep.training_memory(n, arch, 1) == 8 * n * n


def test_jit_with_the_nuclear_norm_is_refused():
    """XLA compiles the SVD into a loop hundreds of times slower on the CPU."""
    from mesc_tf import pipeline
    from mesc_tf.config import Settings

    with pytest.raises(MescError, match="--jit with the nuclear-norm regulariser.*without --jit"):
        pipeline.fine_tune(np.zeros((4, 32, 32, 1), np.float32), Settings(regularizer="nuclear"),
                           None, jit_compile=True)


def test_subprocess_errors_have_no_traceback(files, tmp_path):
    """The same contract without pytest around it: real processes, real stderr."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "MESC_DATA_DIR": str(files["dir"] / "orl")}
    out = tmp_path / "run"
    cases = [  # fails in argparse; in the data (before TensorFlow is loaded); after TensorFlow
        # is loaded and the run directory was made
        (["--dataset", "orl", "--framework", "foo"], "invalid choice"),
        (["--dataset", "orl", "--data-dir", str(files["dir"] / "nan"), "--out", str(out)],
         "NaN or infinite"),
        (["--dataset", "orl", "--tf1-checkpoint", str(files["tf1_missing"]), "--out", str(out),
          "--save-coef", str(out / "C.npy")], "lacks tensors"),
    ]
    for argv, needle in cases:
        p = subprocess.run([sys.executable, "experiments/run.py", *argv], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 2, p.stderr
        assert_one_error_line(p.stderr, needle)
        assert "Traceback" not in p.stdout
        assert not out.exists()


def test_main_guard_prints_the_projects_warnings_as_one_line(capsys):
    """A MescWarning is one 'warning:' line (not Python's file:line header and source line);
    other warnings keep Python's format; the run goes on; showwarning is restored after."""
    import warnings

    from mesc_tf.errors import MescWarning

    before = warnings.showwarning

    def main():
        warnings.warn("C links\n no two samples", MescWarning, stacklevel=2)
        warnings.warn("someone else's", UserWarning, stacklevel=2)
        return "done"

    with pytest.warns(UserWarning) as record:  # where Python's own display goes in pytest
        assert cli.main_guard(main) == "done"
    assert capsys.readouterr().err == "warning: C links no two samples\n"
    assert [str(w.message) for w in record] == ["someone else's"]
    assert warnings.showwarning is before


@pytest.mark.parametrize("shared", [False, True])
def test_a_closed_output_pipe_stops_the_run_with_one_line(tmp_path, shared):
    """run.py | head: stdout's reader goes, so the run stops as SIGPIPE would (141) with one
    line, its outputs removed, and no 'Exception ignored' from Python's flush at exit. With
    2>&1 | head (``shared``) the line has nowhere to go: still 141 (a failed write of it made
    the exit status 1)."""
    out = tmp_path / "out"
    code = ("import pathlib, sys; from mesc_tf import cli\n"
            f"out = pathlib.Path({str(out)!r}); out.mkdir()\n"
            "def main():\n"
            "    for _ in range(10**6): print('x' * 100)\n"
            "cli.main_guard(main, [out])\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if shared else subprocess.PIPE, text=True)
    proc.stdout.readline()
    proc.stdout.close()
    err = "" if shared else proc.stderr.read()
    assert proc.wait(timeout=60) == 141
    assert not out.exists()
    if not shared:
        assert err == ("error: the output's reader closed the pipe (e.g. | head); the run "
                       "stopped: send its output to a file to keep it running\n")


def test_a_file_where_a_folder_goes_says_what_to_do(tmp_path, capsys):
    """A file standing where a run makes its checkpoint folder gave "error: File exists: PATH"
    alone."""
    (tmp_path / "checkpoint").write_text("")

    def main():
        (tmp_path / "checkpoint").mkdir()

    with pytest.raises(SystemExit) as e:
        cli.main_guard(main)
    assert e.value.code == 2
    assert capsys.readouterr().err == (f"error: File exists: {tmp_path / 'checkpoint'} (a file "
                                       "stands where a folder is needed: move it, or choose "
                                       "another output path)\n")

    def below():  # a file where a folder of the path is: NotADirectoryError
        (tmp_path / "checkpoint" / "x.json").write_text("")

    with pytest.raises(SystemExit) as e:
        cli.main_guard(below)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert "(a file stands where a folder is needed: move it, or choose" in err, err


def test_main_guard_cleanup(tmp_path, capsys):
    """A failed run's own directory goes, unless it holds a checkpoint to --resume from; a bug
    keeps its traceback (after the same cleanup)."""

    plain, resumable = tmp_path / "plain", tmp_path / "resumable"
    for d in (plain, resumable / "checkpoint"):
        d.mkdir(parents=True)
    (resumable / "checkpoint" / "state.json").write_text("{}")

    def fail(exc):
        def main():
            raise exc
        return main

    with pytest.raises(SystemExit) as e:
        cli.main_guard(fail(MescError("bad\ninput")), [plain, resumable])
    assert e.value.code == 2
    assert capsys.readouterr().err == "error: bad input\n"
    assert not plain.exists() and resumable.exists()
    plain.mkdir()
    with pytest.raises(SystemExit) as e:
        cli.main_guard(fail(OSError(13, "Permission denied", "/x/y")), [plain])
    assert e.value.code == 2 and capsys.readouterr().err == "error: Permission denied: /x/y\n"
    plain.mkdir()
    with pytest.raises(ZeroDivisionError):
        cli.main_guard(fail(ZeroDivisionError()), [plain])
    assert not plain.exists()
    # Ctrl-C: exit 130, and the line says how to go on (no --resume without a checkpoint).
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "state.json").write_text("{}")
    for folder, advice in ((tmp_path / "kept", "checkpoint is kept: rerun the same command with "
                            "--resume"), (tmp_path / "ckpt", "before the first checkpoint; "
                            "nothing was kept: rerun the command without --resume"),
                           (None, "nothing was kept: rerun the command (with --checkpoint")):
        with pytest.raises(SystemExit) as e:
            cli.main_guard(fail(KeyboardInterrupt()),
                           interrupted=lambda: cli.training_interrupted(folder))
        err = capsys.readouterr().err
        assert e.value.code == 130 and err.startswith("error: interrupted") and advice in err
    with pytest.raises(SystemExit) as e:  # SIGTERM's, the same line and exit 143
        cli.main_guard(fail(cli.Terminated()))
    assert e.value.code == 143 and capsys.readouterr().err == f"error: {cli.INTERRUPTED}\n"
    # A --jobs worker killed (the OOM killer): one line, not joblib's traceback.
    from joblib.externals.loky.process_executor import TerminatedWorkerError

    plain.mkdir()
    with pytest.raises(SystemExit) as e:
        cli.main_guard(fail(TerminatedWorkerError("A worker process managed by the executor "
                                                  "was unexpectedly terminated.\n...")), [plain])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and not plain.exists()
    assert err.startswith("error: a --jobs worker process was killed") and "fewer --jobs" in err
    # NumPy's MemoryError (an array too large for the machine): one line, exit 2.
    with pytest.raises(SystemExit) as e:
        cli.main_guard(fail(MemoryError("Unable to allocate 763. GiB for an array")))
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert err.startswith("error: out of memory (MemoryError: Unable to allocate 763. GiB")


def test_cleanup_keeps_parent_folders_another_run_uses(tmp_path):
    """A failed run removes its own directory and the parents it made, but a parent that holds
    another run's files by then stays (runs started together into one new folder)."""
    out, made = cli.prepare_out_dir(tmp_path / "exp" / "a" / "seed0", "x")
    assert out.is_dir() and [Path(getattr(m, "path", m)) for m in made] == [
        tmp_path / "exp" / "a" / "seed0", tmp_path / "exp" / "a", tmp_path / "exp"]
    (out / "partial.txt").write_text("")
    other = tmp_path / "exp" / "b" / "seed1"  # the other run's
    other.mkdir(parents=True)
    (other / "results.json").write_text("{}")
    coef = cli.prepare_out_file(tmp_path / "exp" / "c" / "C.npy", what="--save-coef file")
    cli._remove([*made, *coef])
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "exp", "exp/b", "exp/b/seed1", "exp/b/seed1/results.json"]
    cli._remove(cli.prepare_out_dir(tmp_path / "new" / "run", "x")[1])  # alone: all of it
    assert not (tmp_path / "new").exists()


def _descendants(pid):
    """PIDs of a process's children and theirs (Linux /proc)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                kids = [int(k) for k in task.read_text().split()]
            except OSError:  # the thread or process ended meanwhile
                continue
            found += kids
            todo += kids
    return found


def _alive(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _training_workers(pid):
    """PIDs of a sweep's loky workers (not its two resource trackers, which start first) once
    they have loaded TensorFlow, which they train with next."""
    found = []
    for p in _descendants(pid):
        try:
            if ("popen_loky_posix" in Path(f"/proc/{p}/cmdline").read_text()
                    and "libtensorflow" in Path(f"/proc/{p}/maps").read_text()):
                found.append(p)
        except OSError:  # ended meanwhile
            pass
    return found


def _endless_jobs_sweep(files, tmp_path):
    """experiments/sweep.py --jobs 2 on a grid of two million-step trainings, in a session of
    its own (to be signalled and, where a test fails, killed as a group)."""
    return subprocess.Popen(
        [sys.executable, str(ROOT / "experiments" / "sweep.py"), "--dataset", "toy",
         "--data-dir", str(files["dir"] / "coil20"), "--no-pretrain", "--grid",
         "epochs=1000000 reg1=1,2", "--jobs", "2", "--out", str(tmp_path / "sweep.jsonl")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=signals_default)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_sigterm_stops_the_jobs_workers_too(files, tmp_path):
    """kill (SIGTERM) of a sweep with --jobs 2 stops its worker processes with it, as Ctrl-C
    does: by default Python dies at once and the workers trained on, orphaned."""
    proc = _endless_jobs_sweep(files, tmp_path)
    workers, err = [], ""
    try:
        end = time.monotonic() + 180
        while len(_training_workers(proc.pid)) < 2:
            assert proc.poll() is None and time.monotonic() < end, "no workers started"
            time.sleep(0.2)
        workers = _descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        end = time.monotonic() + 30
        while any(_alive(p) for p in workers) and time.monotonic() < end:
            time.sleep(0.2)
    finally:
        survivors = [p for p in workers if _alive(p)]
        if survivors or proc.poll() is None:  # where the test fails, not the workers train on
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 143, err
    # One error line (a worker's TensorFlow may log after it: they share stderr).
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert line.startswith("error: interrupted; finished trials are kept"), err
    assert not survivors


def _sweep_signalled_by(tmp_path, files, patch, grid="epochs=1000000 reg1=1,2"):
    """Run experiments/sweep.py --jobs 2 through main_guard, in a session of its own, after
    ``patch`` (driver code, where a stand-in sends SIGTERM to the sweep itself; it may append
    worker pids to the file ``PIDS``): (exit status, stdout, stderr, those pids)."""
    pids = tmp_path / "pids"
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import os, signal, sys\n"
        f"sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'tests')!r}]\n"
        f"PIDS = {str(pids)!r}\n"
        "from scripts import load_script\nfrom mesc_tf import cli\n"
        "sweep = load_script('experiments/sweep.py', 'sweep_script')\n" + patch +
        "cli.main_guard(lambda: sweep.main(sys.argv[1:]), interrupted=lambda: 'interrupted')\n")
    argv = ["--dataset", "toy", "--data-dir", str(files["dir"] / "coil20"), "--no-pretrain",
            "--grid", grid, "--jobs", "2", "--out", str(tmp_path / "sweep.jsonl")]
    proc = subprocess.Popen([sys.executable, str(driver), *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=signals_default)
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:  # a worker left holding the pipes: the test fails, not hangs
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    worker_pids = [int(p) for p in pids.read_text().split()] if pids.exists() else []
    return proc.returncode, out, err, worker_pids


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_sigterm_as_a_jobs_worker_starts_leaves_no_worker(files, tmp_path):
    """SIGTERM (or Ctrl-C) that comes while loky starts a --jobs worker (forked, not yet
    registered, so not killed with the others): the sweep still stops every worker, with one
    line. The worker went on alone, and failed with a traceback ("LokyProcess-1 failed") once
    the sweep was gone, or waited for work, holding the terminal's (a test's) pipes."""
    patch = (
        "from joblib.externals.loky.backend import fork_exec\n"
        "real = fork_exec.fork_exec\n"
        "def fork_exec_then_signal(*a, **k):\n"
        "    pid = real(*a, **k)\n"
        "    with open(PIDS, 'a') as f:\n"
        "        f.write(f'{pid}\\n')\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    return pid\n"
        "fork_exec.fork_exec = fork_exec_then_signal\n")
    code, out, err, workers = _sweep_signalled_by(tmp_path, files, patch)
    assert workers, "no worker was started"
    assert code == 143 and "Traceback" not in out + err, out + err
    assert [x for x in err.splitlines() if x.startswith("error:")] == ["error: interrupted"], err
    assert not [p for p in workers if _alive(p)]


def test_loky_managers_key_error_at_a_kill_prints_nothing(capsys, monkeypatch):
    """loky's manager thread can raise KeyError when the sweep kills the workers as one starts
    (test_sigterm_as_a_jobs_worker_starts_leaves_no_worker failed with its traceback about one
    run in ten): it is dropped once the sweep stops its workers on an error; other threads'
    errors are still printed."""
    import threading

    from mesc_tf import sweep

    monkeypatch.setattr(threading, "excepthook", threading.__excepthook__)

    def fail(name, exc):
        def raise_it():
            raise exc
        t = threading.Thread(target=raise_it, name=name)
        t.start()
        t.join()
        return capsys.readouterr().err

    def interrupted_results(self, tasks):  # joblib's results, cut short by a Ctrl-C
        raise KeyboardInterrupt
        yield

    assert "KeyError" in fail("ExecutorManagerThread", KeyError(1))  # before: printed
    monkeypatch.setattr("joblib.Parallel.__call__", interrupted_results)
    with pytest.raises(KeyboardInterrupt):
        list(sweep.run_groups([None, None], jobs=2))
    assert fail("ExecutorManagerThread", KeyError(1)) == ""
    assert "KeyError" in fail("Thread-9", KeyError(1))
    assert "ValueError" in fail("ExecutorManagerThread", ValueError(1))


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_sigterm_between_two_results_of_the_jobs_is_one_line(files, tmp_path):
    """SIGTERM (or Ctrl-C) that comes while the sweep prints a finished group's line, not
    while it waits for the next: one line, as when it waits. The results generator, left
    unfinished, was closed on the way out, and joblib warned on stderr that "2 tasks which
    were still being processed by the workers have been cancelled" (two lines of warnings
    output before the error line)."""
    patch = (
        "import builtins\n"
        "def print_then_signal(*a, **k):\n"
        "    builtins.print(*a, **k)\n"
        "    if a and str(a[0]).startswith('[1/'):\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "sweep.print = print_then_signal\n")
    code, out, err, _ = _sweep_signalled_by(tmp_path, files, patch, grid="epochs=2 reg1=1,2,3")
    assert code == 143 and "[1/3]" in out, out + err
    # TensorFlow's start-up lines (a worker's) aside, the error line alone.
    ours = [x for x in err.splitlines() if not x.startswith(("I0000", "W0000", "E0000",
                                                             "WARNING: All log messages"))]
    assert ours == ["error: interrupted"], err


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_ctrl_c_as_the_jobs_workers_start_is_one_line(files, tmp_path):
    """Ctrl-C (SIGINT to the terminal's process group) while the --jobs workers import their
    modules: one line. Each worker printed a KeyboardInterrupt traceback from its imports
    (numpy's, joblib's) before it: the workers now start with SIGINT blocked, and the sweep,
    which gets it too, kills them."""
    proc = _endless_jobs_sweep(files, tmp_path)
    blocked = []
    try:
        end = time.monotonic() + 120
        while True:  # both workers are up and have begun their imports (numpy), not finished
            workers = [p for p in _descendants(proc.pid)
                       if "popen_loky_posix" in _proc_text(p, "cmdline")]
            if len(workers) == 2 and all("_multiarray_umath" in _proc_text(p, "maps")
                                         for p in workers):
                break
            assert proc.poll() is None and time.monotonic() < end, "no workers started"
            time.sleep(0.05)
        blocked = [int(_status_field(p, "SigBlk"), 16) >> (signal.SIGINT - 1) & 1
                   for p in workers]
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, err
    ours = [x for x in err.splitlines() if not x.startswith(("I0000", "W0000", "E0000",
                                                             "WARNING: All log messages"))]
    assert ours == ["error: interrupted; finished trials are kept in the results file: rerun "
                    "the same command to run the others"], err
    assert blocked == [1, 1]


def _proc_text(pid, name):
    try:
        return Path(f"/proc/{pid}/{name}").read_text(errors="replace")
    except OSError:  # ended meanwhile
        return ""


def _status_field(pid, field):
    return next((line.split()[1] for line in _proc_text(pid, "status").splitlines()
                 if line.startswith(field + ":")), "0")


# --- results never lost -------------------------------------------------------------------------


def test_finished_run_and_existing_files_are_refused(files, tmp_path, capsys):
    out = tmp_path / "done"
    out.mkdir()
    (out / "results.json").write_text('{"acc": 0.9}\n')
    base = [*ORL, "--data-dir", files["dir"] / "orl"]
    code, _, err = invoke(RUN, [*base, "--out", out], capsys)
    assert code == 2
    assert_one_error_line(err, "already holds a finished run", "--force")
    assert (out / "results.json").read_text() == '{"acc": 0.9}\n'
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]

    coef = tmp_path / "C.npy"
    coef.write_bytes(b"old")
    code, _, err = invoke(RUN, [*base, "--out", tmp_path / "new", "--save-coef", coef], capsys)
    assert code == 2
    assert_one_error_line(err, "C.npy already exists", "--force")
    assert coef.read_bytes() == b"old" and not (tmp_path / "new").exists()

    # A killed run's checkpoint is neither reused nor thrown away silently.
    (out / "results.json").unlink()
    (out / "checkpoint").mkdir()
    (out / "checkpoint" / "state.json").write_text('{"epoch": 5, "weights": "x.weights.h5"}')
    code, _, err = invoke(RUN, [*base, "--out", out], capsys)
    assert code == 2
    assert_one_error_line(err, "unfinished run", "--resume", "--force")
    assert (out / "checkpoint" / "state.json").exists()
    # --force with another bad input: the error comes first, and the checkpoint stays.
    code, _, err = invoke(RUN, [*base, "--out", out, "--force", "--tensorboard", "--save-coef",
                                files["a_file"] / "C.npy"], capsys)
    assert code == 2
    assert_one_error_line(err, "C.npy")
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint"]
    # --resume from a damaged state.json: one line, no traceback.
    (out / "checkpoint" / "state.json").write_text('{"epoch": 5}')
    code, _, err = invoke(RUN, [*base, "--out", out, "--resume"], capsys)
    assert code == 2
    assert_one_error_line(err, "cannot read the checkpoint", "start over")


def test_atomic_writes_keep_the_old_file(tmp_path, monkeypatch):
    """results.json and --save-coef go through a temporary file and os.replace."""
    from mesc_tf.files import save_npy, write_json

    target, coef = tmp_path / "results.json", tmp_path / "C.npy"
    write_json(target, {"a": 1})
    save_npy(coef, np.eye(3))
    umask = os.umask(0)
    os.umask(umask)
    for path in (target, coef):  # the usual mode, not mkstemp's 0600
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask

    def crash(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(MescError, match=f"cannot write {target} .*the disk is full"):
        write_json(target, {"a": 2})
    with pytest.raises(MescError, match=f"cannot write {coef} .*the disk is full"):
        save_npy(coef, np.zeros((3, 3)))
    assert json.loads(target.read_text()) == {"a": 1}
    assert np.array_equal(np.load(coef), np.eye(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["C.npy", "results.json"]  # no temp


def test_pretrain_follows_the_same_rules(files, tmp_path, capsys):
    from mesc_tf.weights import read_autoencoder_file

    data = ["--dataset", "orl", "--data-dir", files["dir"] / "orl", "--quiet"]
    out = tmp_path / "ae" / "orl.h5"
    # Bad options and unwritable or taken outputs: one line, nothing written.
    for argv, needle in [
        (["--lr", "0"], "--lr must be a finite number > 0"), (["--lr", "inf"], "got inf"),
        (["--max-steps", "-1"], "--max-steps must be a whole number >= 0"),
        (["--max-steps", "0"], "trains nothing: give --init"),
        (["--checkpoint-every", "-1"], ">= 0"),
        (["--out", files["a_file"] / "x.h5"], "cannot write"),
        (["--out", out, "--resume"], "nothing to resume"),
        (["--out", out, "--tensorboard", files["a_file"]], "pass a writable --tensorboard DIR"),
    ]:
        code, _, err = invoke(PRETRAIN, [*data, *argv], capsys)
        assert code == 2, err
        assert_one_error_line(err, needle)
        assert not list(tmp_path.iterdir())
    # --force does not delete an unfinished checkpoint before the input is checked.
    (tmp_path / "ae" / "orl.checkpoint").mkdir(parents=True)
    (tmp_path / "ae" / "orl.checkpoint" / "state.json").write_text("{}")
    code, _, err = invoke(PRETRAIN, [*data[:2], "--data-dir", tmp_path / "nowhere", "--out", out,
                                     "--force", "--tensorboard", tmp_path / "tb"], capsys)
    assert code == 2
    assert_one_error_line(err, "nowhere")
    assert (tmp_path / "ae" / "orl.checkpoint" / "state.json").exists()
    assert not (tmp_path / "tb").exists()
    shutil.rmtree(tmp_path / "ae")
    # A short pretraining writes the .h5 (and drops its checkpoint once the .h5 is safe) ...
    code, stdout, err = invoke(PRETRAIN, [*data, "--max-steps", "3", "--checkpoint-every", "2",
                                          "--out", out], capsys)
    assert code == 0, err
    assert sorted(p.name for p in out.parent.iterdir()) == ["orl.h5"]
    assert "channels on at < 1 % of positions:" in stdout
    meta = read_autoencoder_file(out)[1]
    assert list(meta["channel_activity"]) == ["enc_0", "enc_1", "enc_2", "dec_0", "dec_1", "dec_2"]
    assert [len(a) for a in meta["channel_activity"].values()] == [3, 3, 5, 3, 3, 1]
    written = out.read_bytes()
    # ... which a second run refuses to replace without --force.
    code, _, err = invoke(PRETRAIN, [*data, "--max-steps", "3", "--out", out], capsys)
    assert code == 2
    assert_one_error_line(err, "already exists", "--force")
    assert out.read_bytes() == written
    # --max-steps 0 only rescales --init (ORL configures no scale, so one must be given).
    rescaled = tmp_path / "ae" / "rescaled.h5"
    code, _, err = invoke(PRETRAIN, [*data, "--init", out, "--max-steps", "0", "--out", rescaled],
                          capsys)
    assert code == 2
    assert_one_error_line(err, "would only copy", "--activation-scale")
    code, _, err = invoke(PRETRAIN, [*data, "--init", out, "--max-steps", "0",
                                     "--activation-scale", "5", "--out", rescaled], capsys)
    assert code == 0, err
    meta, first = read_autoencoder_file(rescaled)[1], read_autoencoder_file(out)[1]
    assert (meta["steps"], meta["activation_scale"], len(meta["activation_factors"])) == (0, 5, 5)
    assert meta["relative_error"] == pytest.approx(first["relative_error"], rel=1e-4)
    assert meta["init"]["metadata"]["steps"] == 3
    # One scale per hidden layer, as EYaleB's schedule has.
    code, _, err = invoke(PRETRAIN, [*data, "--init", out, "--max-steps", "0", "--force",
                                     "--activation-scale", "1,2,3,4,5", "--out", rescaled],
                          capsys)
    assert code == 0, err
    meta = read_autoencoder_file(rescaled)[1]
    assert meta["activation_scale"] == [1, 2, 3, 4, 5]
    assert meta["relative_error"] == pytest.approx(first["relative_error"], rel=1e-4)
    # An unfinished pretraining's checkpoint is not silently reused.
    (out.parent / "new.checkpoint").mkdir()
    (out.parent / "new.checkpoint" / "state.json").write_text("{}")
    code, _, err = invoke(PRETRAIN, [*data, "--out", out.parent / "new.h5"], capsys)
    assert code == 2
    assert_one_error_line(err, "unfinished pretraining", "--resume")
    # Resuming it: its state.json holds no step, so it cannot be resumed (one line, no traceback).
    code, _, err = invoke(PRETRAIN, [*data, "--out", out.parent / "new.h5", "--resume"], capsys)
    assert code == 2
    assert_one_error_line(err, "cannot read the checkpoint", "start over")


def test_pretrain_resume_records_where_it_resumed(files, tmp_path, capsys):
    """A resumed pretraining's .h5 says at which step it resumed and the learning rate it ended
    with: the checkpoint's, not the resuming process's schedule. Where the checkpoint has no
    run.json, the first rate and the initializer are unknown, not the resuming schedule's."""
    from mesc_tf import pipeline
    from mesc_tf.config import Pretrain, get_config
    from mesc_tf.data import load_dataset
    from mesc_tf.training import configure_runtime
    from mesc_tf.weights import read_autoencoder_file

    x = load_dataset("orl", files["dir"] / "orl").x
    configure_runtime(0)
    pipeline.pretrain(x, get_config("orl").arch, Pretrain(lr=2e-3, max_steps=2), verbose=0,
                      backup_dir=tmp_path / "orl.checkpoint", checkpoint_every=2)
    # The backup records the training time of its steps; the resumed file counts it in.
    state = json.loads((tmp_path / "orl.checkpoint" / "state.json").read_text())
    assert state["seconds"] > 0
    state["seconds"] = 1000.0
    (tmp_path / "orl.checkpoint" / "state.json").write_text(json.dumps(state))
    out = tmp_path / "orl.h5"
    start = time.perf_counter()
    code, _, err = invoke(PRETRAIN, ["--dataset", "orl", "--data-dir", files["dir"] / "orl",
                                     "--quiet", "--out", out, "--resume", "--max-steps", "4"],
                          capsys)
    elapsed = time.perf_counter() - start
    assert code == 0, err
    meta = read_autoencoder_file(out)[1]
    assert (meta["resumed_at_step"], meta["steps"]) == (2, 4) and 3 <= meta["best_step"] <= 4
    assert meta["lr"] is None and meta["initializer"] is None and meta["data_files"] is None
    assert meta["final_lr"] == pytest.approx(2e-3)
    assert 0 < meta["seconds"] - 1000.0 <= elapsed  # the checkpoint's seconds plus this run's
    assert not (tmp_path / "orl.checkpoint").exists()


def test_pretrain_resume_keeps_the_minibatch_order(files, tmp_path, capsys, monkeypatch):
    """A minibatch pretraining resumes with the batch size and seed it started with (they fix
    the order of batches); a different --batch-size or --seed on --resume is refused. The
    resumed file's metadata names the run's start (initializer, first rate), not the resuming
    schedule's."""
    from mesc_tf import pipeline
    from mesc_tf.config import get_config
    from mesc_tf.data import load_dataset
    from mesc_tf.weights import read_autoencoder_file

    data = ["--dataset", "orl", "--data-dir", files["dir"] / "orl", "--quiet"]
    first = tmp_path / "first.h5"
    written, real = [], pipeline.pretrain

    def spy(*a, backup_dir, **k):  # what the run's checkpoint records while it trains
        written.append(json.loads((backup_dir / "run.json").read_text()))
        return real(*a, backup_dir=backup_dir, **k)

    monkeypatch.setattr(pipeline, "pretrain", spy)
    code, _, err = invoke(PRETRAIN, [*data, "--batch-size", "50", "--seed", "7", "--max-steps",
                                     "2", "--checkpoint-every", "1", "--lr", "2e-3",
                                     "--initializer", "glorot_uniform", "--out", first], capsys)
    assert code == 0, err
    monkeypatch.undo()
    assert written == [{"batch_size": 50, "seed": 7, "lr": 2e-3, "initializer": "glorot_uniform",
                        "init": None, "dataset": "orl", "checkpoint_every": 1,
                        "data_files": load_dataset("orl", files["dir"] / "orl").file_hashes}]
    assert read_autoencoder_file(first)[1]["batch_size"] == 50
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first.h5"]  # checkpoint dropped
    # An interrupted run's checkpoint, as pretrain.py leaves it (state and run.json).
    out = tmp_path / "orl.h5"
    ckpt = tmp_path / "orl.checkpoint"
    x = load_dataset("orl", files["dir"] / "orl").x
    pipeline.pretrain(x, get_config("orl").arch, get_config("orl").pretrain.replace(
        max_steps=2, batch_size=50), verbose=0, seed=7, backup_dir=ckpt, checkpoint_every=2)
    (ckpt / "run.json").write_text(json.dumps(written[0]))
    for argv, needle in ((["--batch-size", "60"], "--batch-size 60 differs from the 50"),
                         # the whole set (full batch) is not the 50 either
                         (["--batch-size", "100000"], "--batch-size 100000 differs from the 50"),
                         (["--seed", "8"], "--seed 8 differs from the 7"),
                         (["--lr", "3e-3"], "--lr 0.003 differs from the 0.002"),
                         (["--initializer", "he_normal"],
                          "--initializer he_normal differs from the glorot_uniform")):
        code, _, err = invoke(PRETRAIN, [*data, "--resume", "--max-steps", "3", "--out", out,
                                         *argv], capsys)
        assert code == 2
        assert_one_error_line(err, needle, "resume without it")
    good = (ckpt / "run.json").read_text()
    for damaged in ("{not json", "[1, 2]", '{"batch_size": "50", "seed": 7}',
                    '{"batch_size": 0, "seed": 7}', '{"batch_size": 50, "seed": 7, "init": 5}',
                    '{"batch_size": 50, "seed": 7, "lr": "2e-3"}'):
        (ckpt / "run.json").write_text(damaged)
        code, _, err = invoke(PRETRAIN, [*data, "--resume", "--max-steps", "3", "--out", out],
                              capsys)
        assert code == 2
        assert_one_error_line(err, "cannot read", "run.json", "start over")
    # Another dataset's checkpoint, or one past --max-steps: refused.
    (ckpt / "run.json").write_text(json.dumps({**written[0], "dataset": "toy"}))
    code, _, err = invoke(PRETRAIN, [*data, "--resume", "--max-steps", "3", "--out", out], capsys)
    assert code == 2
    assert_one_error_line(err, "pretrains toy, not orl; resume it with --dataset toy")
    (ckpt / "run.json").write_text(good)
    code, _, err = invoke(PRETRAIN, [*data, "--resume", "--max-steps", "1", "--out", out], capsys)
    assert code == 2
    assert_one_error_line(err, "at step 2, past --max-steps 1; resume with --max-steps 2 or more")
    # The first command with --resume carries on (what its Ctrl-C line says to do), and the
    # schedule it prints is the checkpoint's run's; it checkpoints as often as the run did.
    monkeypatch.setattr(pipeline, "pretrain", lambda *a, **k: (written.append(k), real(*a, **k))[1])
    code, printed, err = invoke(PRETRAIN, [*data, "--batch-size", "50", "--seed", "7", "--lr",
                                           "2e-3", "--initializer", "glorot_uniform", "--resume",
                                           "--max-steps", "3", "--out", out], capsys)
    assert code == 0, err
    assert written[-1]["checkpoint_every"] == 1
    assert "lr=0.002," in printed and "initializer='glorot_uniform'" in printed
    meta = read_autoencoder_file(out)[1]
    assert (meta["batch_size"], meta["seed"], meta["resumed_at_step"], meta["steps"]) == \
        (50, 7, 2, 3)
    assert (meta["initializer"], meta["lr"]) == ("glorot_uniform", 2e-3)
    assert not ckpt.exists()


# --- determinism -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def seeded_runs(files, tmp_path_factory):
    """--no-pretrain toy runs with seeds 0, 0, 1, without --out (run from a tmp dir)."""
    cwd = tmp_path_factory.mktemp("seeded")
    argv = ["--dataset", "toy", "--data-dir", files["dir"] / "coil20", "--no-pretrain",
            "--epochs", "3", "--quiet"]
    old = os.getcwd()
    os.chdir(cwd)
    try:
        results = [RUN.main([str(a) for a in [*argv, "--seed", seed]]) for seed in (0, 0, 1)]
    finally:
        os.chdir(old)
    return cwd, results


def test_same_seed_same_c(seeded_runs):
    """On a small problem from he_normal weights the seed decides C: same seed, same bits.

    Without --out each run gets its own new directory under runs/, even within one second.
    """
    cwd, (a, b, c) = seeded_runs
    assert np.array_equal(a["coef"], b["coef"])
    assert not np.array_equal(a["coef"], c["coef"])
    runs = sorted((cwd / "runs").iterdir())
    assert len(runs) == 3 and all((r / "results.json").is_file() for r in runs)
    assert sum("seed0" in r.name for r in runs) == 2


def test_same_seed_same_labels(seeded_runs):
    """Same C and seed, same labels. The default post-clustering route takes the rank-r
    subspace from LAPACK (a dense eigh of CᵀC for n ≤ 4096) rather than scipy's svds, whose
    ARPACK restarts from unseeded random vectors on clustered singular values (as here, 3 steps
    from he_normal), and it seeds the spectral step: the seed alone decides, not NumPy's global
    random state (which run.py also seeds, so two runs alone would not show it)."""
    from mesc_tf import postcluster

    _, (a, b, _) = seeded_runs
    assert np.array_equal(a["labels"], b["labels"])
    s = get_config("toy").mesc
    for global_seed in (1, 2):
        np.random.seed(global_seed)
        labels = postcluster.cluster(a["coef"], 3, thr=s.thr, subspace_dim=s.subspace_dim,
                                     power=s.power, variant=s.variant, seed=0)
        np.testing.assert_array_equal(labels, a["labels"])


# --- resume after SIGKILL ------------------------------------------------------------------------


def _wait_for_checkpoint(proc, state, min_epoch, timeout=300):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            pytest.fail(f"the run ended (status {proc.returncode}) before it could be killed")
        try:
            epoch = json.loads(state.read_text())["epoch"]
        except (OSError, ValueError):
            epoch = 0
        if epoch >= min_epoch:
            return
        time.sleep(0.01)
    proc.kill()
    pytest.fail("no checkpoint appeared in time")


def test_resume_after_sigkill_gives_the_same_c(files, tmp_path, capsys):
    """ORL-shaped data (120 images) and a TF1-format ORL checkpoint, checkpoint every 5 steps;
    killed with SIGKILL once a checkpoint at step >= 10 exists, then resumed to 50 steps past
    it. The killed run is asked for a million steps, so that it cannot end before the kill
    however loaded the machine (the resume may set another --epochs: it may grow)."""
    common = ["--dataset", "orl", "--data-dir", str(files["dir"] / "orl"), "--tf1-checkpoint",
              str(files["tf1_orl"]), "--variant", "dsc", "--subspace-dim", "1", "--quiet"]
    out = tmp_path / "killed"
    outputs = ["--out", str(out), "--checkpoint-every", "5", "--save-coef", str(out / "C.npy")]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.Popen([sys.executable, "experiments/run.py", *common, "--epochs",
                             "1000000", *outputs], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = out / "checkpoint" / "state.json"
    try:
        _wait_for_checkpoint(proc, state, 10)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    saved = json.loads(state.read_text())  # a consistent state, whatever the moment of the kill
    assert saved["epoch"] >= 10
    assert (out / "checkpoint" / saved["weights"]).is_file()
    assert not (out / "results.json").exists() and not (out / "C.npy").exists()
    # Leftovers of a kill during a save are ignored, and removed by the next save.
    stray = [out / "checkpoint" / f".tmp-state-{saved['epoch'] + 5:08d}.weights.h5",
             out / "checkpoint" / ".state.json.abc123"]
    for p in stray:
        p.write_bytes(b"half written")

    # The same command with --resume and the final step count (in this process, through
    # main_guard).
    epochs = saved["epoch"] + 50
    argv = [*common, "--epochs", str(epochs), *outputs]
    runs = []
    recording = SimpleNamespace(main=lambda a, cleanup: runs.append(RUN.main(a, cleanup=cleanup)))
    code, _, err = invoke(recording, [*argv, "--resume"], capsys)
    assert code == 0, err
    steps_taken = {len(v) for v in runs[0]["history"].values()}
    assert steps_taken == {epochs - saved["epoch"]}  # from the checkpoint, not from step 0
    resumed = np.load(out / "C.npy")
    assert json.loads(state.read_text())["epoch"] == epochs
    assert not any(s.exists() for s in stray)
    results = json.loads((out / "results.json").read_text())
    assert results["timings"]["steps"] == epochs  # the step counter was restored too
    assert len(results["final_losses"]) > 0
    assert results["resumed_at_step"] == saved["epoch"]
    assert results["timings"]["train_s"] > saved["seconds"]  # the killed process's steps too

    # The same run, never interrupted, with no checkpoint at all.
    ref = RUN.main([*common, "--epochs", str(epochs), "--out", str(tmp_path / "straight")])
    assert np.array_equal(ref["coef"], resumed), np.abs(ref["coef"] - resumed).max()

    # Resuming the finished run takes no further step and gives the same C again.
    again = RUN.main([*argv, "--resume"])
    assert all(len(v) == 0 for v in again["history"].values())
    assert again["timings"]["steps"] == epochs
    assert np.array_equal(again["coef"], resumed)
    assert np.array_equal(np.load(out / "C.npy"), resumed)
    # Its results keep the last step's losses (from the checkpoint) and the training time.
    reclustered = json.loads((out / "results.json").read_text())
    assert reclustered["final_losses"] == pytest.approx(results["final_losses"], rel=1e-6)
    assert reclustered["resumed_at_step"] == epochs
    assert reclustered["timings"]["train_s"] >= json.loads(state.read_text())["seconds"]
    # From pretrained weights the seed only seeds the clustering: another one may recluster.
    again = RUN.main([*argv, "--resume", "--seed", "1"])
    assert np.array_equal(again["coef"], resumed)
    assert json.loads((out / "results.json").read_text())["seed"] == 1

    # Resuming with other options is refused in one line, and nothing is touched.
    code, _, err = invoke(RUN, [*argv, "--resume", "--lr", "0.005"], capsys)
    assert code == 2
    assert_one_error_line(err, "made with other options",
                          f"lr: {get_config('orl').mesc.lr} now 0.005",
                          "drop --resume and pass --force")
    assert json.loads(state.read_text())["epoch"] == epochs
    # Post-clustering settings act on the trained C: changing them does not block a resume.
    again = RUN.main([*argv, "--resume", "--thr", "0.5", "--force"])
    assert again["timings"]["steps"] == epochs and np.array_equal(again["coef"], resumed)


def test_a_full_disk_is_one_line_and_leaves_nothing(files, tmp_path, capsys, monkeypatch):
    """No space for a checkpoint (h5py would crash on it, so the space is looked at first), for
    --save-coef (NumPy's short write has no errno) or for results.json: one line naming the
    file, exit 2, no output left."""
    import errno

    import mesc_tf.files

    data = ["--data-dir", files["dir"] / "orl"]
    real_usage = shutil.disk_usage
    monkeypatch.setattr(mesc_tf.files.shutil, "disk_usage",
                        lambda p: real_usage(p)._replace(free=1000))
    code, _, err = invoke(RUN, [*ORL, *data, "--checkpoint-every", "1", "--out", tmp_path / "r"],
                          capsys)
    assert code == 2
    assert_one_error_line(err, "no space for the checkpoint", "1000 bytes is free there")
    assert not list(tmp_path.iterdir())
    monkeypatch.setattr(mesc_tf.files.shutil, "disk_usage", real_usage)

    def short_write(*args, **kwargs):
        raise OSError("160000 requested and 10208 written")

    with monkeypatch.context() as m:
        m.setattr(np, "save", short_write)
        code, _, err = invoke(RUN, [*ORL, *data, "--out", tmp_path / "r", "--save-coef",
                                    tmp_path / "c.npy"], capsys)
    assert code == 2
    assert_one_error_line(err, f"cannot write {tmp_path / 'c.npy'}", "the disk is full")
    assert not list(tmp_path.iterdir())

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(mesc_tf.files.os, "fsync", no_space)
    code, _, err = invoke(RUN, [*ORL, *data, "--out", tmp_path / "r"], capsys)
    assert code == 2
    assert_one_error_line(err, f"cannot write {tmp_path / 'r' / 'results.json'}",
                          "No space left on device", "the disk is full")
    assert not list(tmp_path.iterdir())


# --- output folders, cleanup and signals ------------------------------------------------------


def _fail(exc):
    def main():
        raise exc
    return main


def test_an_existing_out_folder_is_not_removed_when_the_run_fails(tmp_path, capsys):
    """--out naming a folder that was already there (the user's, with other files in it) is
    not on the cleanup list: a failed run removes only what it made."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    path, made = cli.prepare_out_dir(out, "x")
    assert path == out and made == []
    with pytest.raises(SystemExit):
        cli.main_guard(_fail(MescError("bad input")), made)
    assert (out / "notes.txt").read_text() == "keep me"


def test_ctrl_c_removes_a_failed_runs_outputs_too(tmp_path, capsys):
    """Ctrl-C (and SIGTERM) cleans up as an error does: a run folder without a checkpoint goes,
    one with a checkpoint stays for --resume."""
    plain, resumable = tmp_path / "plain", tmp_path / "resumable"
    plain.mkdir()
    (resumable / "checkpoint").mkdir(parents=True)
    (resumable / "checkpoint" / "state.json").write_text("{}")
    for exc, code in ((KeyboardInterrupt(), 130), (cli.Terminated(), 143)):
        plain.mkdir(exist_ok=True)
        with pytest.raises(SystemExit) as e:
            cli.main_guard(_fail(exc), [plain, resumable])
        assert e.value.code == code
        assert not plain.exists() and (resumable / "checkpoint" / "state.json").exists()


@pytest.mark.parametrize("raised,sig,status,line", [
    ("cli.MescError('bad')", signal.SIGINT, 2, "error: bad"),
    ("cli.MescError('bad')", signal.SIGTERM, 2, "error: bad"),
    ("KeyboardInterrupt()", signal.SIGINT, 130, f"error: {cli.INTERRUPTED}"),  # Ctrl-C twice
])
def test_a_signal_during_main_guards_cleanup_does_not_cut_it_short(tmp_path, raised, sig,
                                                                    status, line):
    """Ctrl-C or SIGTERM while main_guard removes a failed run's outputs (a second Ctrl-C,
    say): the cleanup ends and the run ends with its one line. It raised in main_guard's
    except clause, out of main_guard: a traceback, the outputs half removed, no line."""
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    driver = tmp_path / "driver.py"
    driver.write_text(
        f"import os, sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom mesc_tf import cli\n"
        "real = cli._remove\n"
        "def remove(paths):\n"
        f"    os.kill(os.getpid(), {int(sig)})\n"
        "    real(paths)\n"
        "cli._remove = remove\n"
        "def main():\n"
        f"    raise {raised}\n"
        f"cli.main_guard(main, [{str(out)!r}])\n")
    proc = subprocess.run([sys.executable, str(driver)], capture_output=True, text=True,
                          timeout=120, preexec_fn=signals_default)
    assert (proc.returncode, proc.stderr) == (status, line + "\n")
    assert not out.exists()


def test_main_guard_restores_the_sigterm_handler(capsys):
    """main_guard turns SIGTERM into an exception only while main runs; afterwards (a script
    run in-process, a test) the caller's handler is back."""
    def mine(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        assert cli.main_guard(lambda: 7) == 7
        assert signal.getsignal(signal.SIGTERM) is mine
        with pytest.raises(SystemExit):
            cli.main_guard(_fail(MescError("bad")))
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_interrupts_deferred_runs_the_handler_at_the_end_of_the_block():
    """A SIGTERM inside the block reaches its handler as the block ends, once; the handlers
    are back afterwards; an ignored signal stays ignored."""
    got = []

    def mine(signum, frame):
        got.append(signum)

    previous = signal.signal(signal.SIGTERM, mine)
    ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with cli.interrupts_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)
            assert got == []  # Python would have run the handler by now
        assert got == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, ignored)


def test_force_lets_an_existing_output_file_be_overwritten(tmp_path):
    """prepare_out_file refuses an existing file unless --force."""
    coef = tmp_path / "C.npy"
    coef.write_bytes(b"old")
    with pytest.raises(MescError, match="already exists.*--force"):
        cli.prepare_out_file(coef)
    assert cli.prepare_out_file(coef, force=True) == []
    assert coef.read_bytes() == b"old"


def test_resume_takes_a_folder_that_holds_results(tmp_path):
    """A finished run's folder is refused without --force or --resume, taken with either."""
    out = tmp_path / "done"
    out.mkdir()
    (out / "results.json").write_text("{}")
    with pytest.raises(MescError, match="already holds a finished run"):
        cli.prepare_out_dir(out, "x")
    for flags in ({"force": True}, {"resume": True}):
        assert cli.prepare_out_dir(out, "x", **flags) == (out, [])


def test_a_checkpoint_state_without_seconds_reads_as_zero(tmp_path):
    """state.json written before the "seconds" key existed still resumes, with 0 training
    seconds."""
    (tmp_path / "state.json").write_text(json.dumps({"weights": "w.weights.h5", "epoch": 5}))
    state = read_backup_state(tmp_path)
    assert state["epoch"] == 5 and state["seconds"] == 0.0 and state["weights"] == "w.weights.h5"


def test_cleanup_removes_every_parent_folder_it_made(tmp_path):
    """A failed run into a new deep path (a/b/c) leaves none of the folders it made: parents go
    deepest first, so each is empty when its turn comes."""
    out, made = cli.prepare_out_dir(tmp_path / "a" / "b" / "c", "x")
    (out / "partial.txt").write_text("")
    cli._remove(made)
    assert not list(tmp_path.iterdir())


def test_an_unwritable_output_leaves_no_folders_behind(tmp_path, monkeypatch):
    """The write probe failing after the folders were made (a read-only mount, a quota):
    one MescError, and the folders the check made are removed again."""
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(cli.tempfile, "mkstemp", refuse)
    with pytest.raises(MescError, match="is not writable"):
        cli.prepare_out_dir(tmp_path / "new" / "run", "x")
    with pytest.raises(MescError, match="cannot write output file"):
        cli.prepare_out_file(tmp_path / "other" / "deep" / "C.npy")
    assert not list(tmp_path.iterdir())


def test_an_empty_path_among_repeated_options_is_refused(capsys):
    """--weights given twice, once empty: the same one-line error as a single empty path."""
    p = cli.ArgumentParser(prog="x")
    p.add_argument("--weights", action="append", default=[])
    assert p.parse_args(["--weights", "a.h5"]).weights == ["a.h5"]
    with pytest.raises(SystemExit) as e:
        p.parse_args(["--weights", "a.h5", "--weights", ""])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err == "error: --weights is empty; give a path; see x --help\n"


def test_a_list_option_given_twice_is_refused(capsys):
    """argparse keeps the last of two lists and drops the first without a word; a list option
    given twice is one error (in an argument group too), and the namespace keeps no trace."""
    p = cli.ArgumentParser(prog="x")
    p.add_argument("--seeds", nargs="+")
    p.add_argument_group("g").add_argument("--methods", nargs="*")
    ns = p.parse_args(["--seeds", "0", "1", "--methods", "our"])
    assert vars(ns) == {"seeds": ["0", "1"], "methods": ["our"]}
    for argv in (["--seeds", "0", "--seeds", "1"], ["--methods", "a", "--methods", "b"]):
        with pytest.raises(SystemExit) as e:
            p.parse_args(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2 and err == (f"error: argument {argv[0]}: given twice; list all "
                                             f"its values after one {argv[0]}; see x --help\n")


def test_resume_of_a_run_killed_before_its_first_checkpoint_says_to_rerun(files, tmp_path,
                                                                          capsys):
    """A run killed (SIGKILL) before its first checkpoint leaves only checkpoint/run.json: its
    --resume says to rerun without --resume (it was started with --checkpoint-every)."""
    out = tmp_path / "run"
    (out / "checkpoint").mkdir(parents=True)
    (out / "checkpoint" / "run.json").write_text("{}")
    code, _, err = invoke(RUN, ["--dataset", "orl", "--data-dir", files["dir"] / "orl",
                                "--out", out, "--resume", "--checkpoint-every", "1"], capsys)
    assert code == 2
    assert_one_error_line(err, "stopped before its first", "without --resume")
    assert sorted(p.name for p in out.rglob("*")) == ["checkpoint", "run.json"]


# C untrained (constant) gives sklearn's spectral step nothing to converge on: its warning.
@pytest.mark.filterwarnings("ignore:ARPACK has failed:RuntimeWarning")
def test_resume_of_a_finished_run_that_took_no_step_says_to_start_over(files, tmp_path,
                                                                        capsys):
    """--epochs 0 with --checkpoint-every saves no checkpoint: --resume --epochs M says to start
    over with --force, not to rerun without --resume (that is refused: a finished run)."""
    out = tmp_path / "run"
    argv = ["--dataset", "orl", "--data-dir", files["dir"] / "orl", "--no-pretrain", "--out",
            out, "--checkpoint-every", "1", "--quiet"]
    assert invoke(RUN, [*argv, "--epochs", "0"], capsys)[0] == 0
    assert not (out / "checkpoint" / "state.json").exists()
    code, _, err = invoke(RUN, [*argv, "--epochs", "2", "--resume"], capsys)
    assert code == 2
    assert_one_error_line(err, "took no step: --epochs 0", "pass --force")
    assert invoke(RUN, [*argv, "--epochs", "2", "--force"], capsys)[0] == 0


def test_resume_refuses_an_autoencoder_file_that_changed(files, tmp_path, capsys):
    """The checkpoint holds the auto-encoder the run started from: after --weights FILE was
    replaced, --resume is refused (results.json would record the new file's hash)."""
    from mesc_tf.weights import load_autoencoder, save_autoencoder

    weights = tmp_path / "ae.h5"
    shutil.copy(files["orl_h5"], weights)
    out = tmp_path / "run"
    argv = ["--dataset", "orl", "--data-dir", files["dir"] / "orl", "--weights", weights,
            "--epochs", "1", "--quiet", "--out", out, "--checkpoint-every", "1"]
    code, _, err = invoke(RUN, argv, capsys)
    assert code == 0, err
    ae, _ = load_autoencoder(weights, get_config("orl").arch)
    ae.set_weights([w + 1 for w in ae.get_weights()])  # another auto-encoder, same name
    save_autoencoder(ae, weights)
    code, _, err = invoke(RUN, [*argv, "--resume"], capsys)
    assert code == 2
    assert_one_error_line(err, "the file changed since the checkpoint", "--force")


def test_resume_refuses_data_that_changed_and_results_name_the_files(files, tmp_path, capsys):
    """results.json records each data file's SHA-256 (the data's SOURCES.md lists the same),
    and so does the checkpoint: after the data file was replaced by another of the same shape,
    --resume is refused (C's rows would be other images). A checkpoint that records no data
    files (made before they were recorded) resumes."""
    import hashlib

    data_dir = tmp_path / "data"
    write_fea_gnd(data_dir / "ORL_32x32.mat", 40, 3)
    out = tmp_path / "run"
    argv = ["--dataset", "orl", "--data-dir", data_dir, "--no-pretrain", "--epochs", "1",
            "--quiet", "--out", out, "--checkpoint-every", "1"]
    code, _, err = invoke(RUN, argv, capsys)
    assert code == 0, err
    sha = hashlib.sha256((data_dir / "ORL_32x32.mat").read_bytes()).hexdigest()
    assert json.loads((out / "results.json").read_text())["data_files"] == {"ORL_32x32.mat": sha}
    write_fea_gnd(data_dir / "ORL_32x32.mat", 40, 3, seed=1)  # other faces, same shape
    code, _, err = invoke(RUN, [*argv, "--resume", "--epochs", "2"], capsys)
    assert code == 2
    assert_one_error_line(err, "the data changed since the checkpoint", f"ORL_32x32.mat: sha256 "
                          f"{sha[:12]}… then", "--data-dir", "--force")
    run_json = out / "checkpoint" / "run.json"
    run_json.write_text(json.dumps({k: v for k, v in json.loads(run_json.read_text()).items()
                                    if k != "data_files"}))
    code, _, err = invoke(RUN, [*argv, "--resume", "--epochs", "2"], capsys)
    assert code == 0, err
    # Its first step ran on data the checkpoint does not name: not known.
    assert json.loads((out / "results.json").read_text())["data_files"] is None


def test_pretrain_resume_refused_makes_no_tensorboard_folder(files, tmp_path, capsys):
    """A --resume that the checkpoint refuses (another --seed) is bad input: it creates no
    --tensorboard folder (it did, with its parents, before the checkpoint was checked)."""
    from mesc_tf import pipeline
    from mesc_tf.config import Pretrain
    from mesc_tf.data import load_dataset

    data_dir = files["dir"] / "orl"
    ckpt = tmp_path / "orl.checkpoint"
    pipeline.pretrain(load_dataset("orl", data_dir).x, get_config("orl").arch,
                      Pretrain(max_steps=1), verbose=0, backup_dir=ckpt, checkpoint_every=1)
    (ckpt / "run.json").write_text(json.dumps({"dataset": "orl", "seed": 0}))
    tb = tmp_path / "tb" / "run"
    code, _, err = invoke(PRETRAIN, ["--dataset", "orl", "--data-dir", data_dir, "--quiet",
                                     "--out", tmp_path / "orl.h5", "--resume", "--seed", "3",
                                     "--max-steps", "2", "--tensorboard", tb], capsys)
    assert code == 2
    assert_one_error_line(err, "--seed 3 differs from the 0")
    assert not (tmp_path / "tb").exists()
    assert (ckpt / "state.json").exists()


def test_pretrain_resume_refuses_data_that_changed(files, tmp_path, capsys):
    """A pretraining's checkpoint records its data files: resumed on another file, it is refused
    in one line; the finished file's metadata names them."""
    from mesc_tf import pipeline
    from mesc_tf.config import Pretrain
    from mesc_tf.data import load_dataset
    from mesc_tf.weights import read_autoencoder_file

    data_dir = tmp_path / "data"
    write_fea_gnd(data_dir / "ORL_32x32.mat", 40, 3)
    out = tmp_path / "orl.h5"
    argv = ["--dataset", "orl", "--data-dir", data_dir, "--quiet", "--out", out]
    code, _, err = invoke(PRETRAIN, [*argv, "--max-steps", "1"], capsys)
    assert code == 0, err
    hashes = load_dataset("orl", data_dir).file_hashes
    assert read_autoencoder_file(out)[1]["data_files"] == hashes
    # The checkpoint of a run stopped at step 1, made from the file before it was replaced.
    ckpt = tmp_path / "orl.checkpoint"
    pipeline.pretrain(load_dataset("orl", data_dir).x, get_config("orl").arch,
                      Pretrain(max_steps=1), verbose=0, backup_dir=ckpt, checkpoint_every=1)
    (ckpt / "run.json").write_text(json.dumps({"dataset": "orl", "data_files": hashes}))
    write_fea_gnd(data_dir / "ORL_32x32.mat", 40, 3, seed=1)
    code, _, err = invoke(PRETRAIN, [*argv, "--resume", "--max-steps", "2", "--force"], capsys)
    assert code == 2
    assert_one_error_line(err, "the data changed since the checkpoint", "ORL_32x32.mat: sha256 "
                          f"{hashes['ORL_32x32.mat'][:12]}… then",
                          "drop --resume and pass --force to start over")
    assert (ckpt / "state.json").exists()


def test_resume_extends_a_run_and_force_starts_over(files, tmp_path, capsys, monkeypatch):
    """--resume --epochs M extends a finished run: without --checkpoint-every it keeps saving
    as the first run did, and train_s counts the earlier processes' seconds. A he_normal start
    resumes only with its own seed. --force drops the old checkpoint only without --resume."""
    out = tmp_path / "run"
    argv = ["--dataset", "toy", "--data-dir", files["dir"] / "coil20", "--no-pretrain",
            "--epochs", "2", "--quiet", "--out", out]
    code, _, err = invoke(RUN, [*argv, "--checkpoint-every", "1"], capsys)
    assert code == 0, err
    state = out / "checkpoint" / "state.json"
    saved = json.loads(state.read_text())
    assert saved["epoch"] == 2
    code, _, err = invoke(RUN, [*argv, "--resume", "--epochs", "3", "--seed", "1"], capsys)
    assert code == 2
    assert_one_error_line(err, "made with other options", "seed: 0 now 1")
    code, _, err = invoke(RUN, [*argv, "--resume", "--epochs", "1"], capsys)
    assert code == 2
    assert_one_error_line(err, "is at step 2, past --epochs 1", "--epochs 2 or more")
    state.write_text(json.dumps({**saved, "seconds": 1000.0}))  # earlier processes' steps
    from mesc_tf import pipeline

    asked, real = [], pipeline.run
    monkeypatch.setattr(pipeline, "run", lambda *a, **k: (asked.append(k), real(*a, **k))[1])
    code, _, err = invoke(RUN, [*argv, "--resume", "--epochs", "4"], capsys)
    assert code == 0, err
    assert asked[-1]["checkpoint_every"] == 1 and json.loads(state.read_text())["epoch"] == 4
    results = json.loads((out / "results.json").read_text())
    assert results["resumed_at_step"] == 2 and results["timings"]["steps"] == 4
    assert results["timings"]["train_s"] >= 1000.0
    # --force beside --resume only lets outputs be rewritten: the checkpoint is kept.
    again = RUN.main([str(a) for a in [*argv, "--resume", "--epochs", "4", "--force"]])
    assert all(len(v) == 0 for v in again["history"].values())
    code, _, err = invoke(RUN, [*argv, "--force"], capsys)
    assert code == 0, err
    assert not (out / "checkpoint").exists()


def test_run_defaults_are_the_documented_ones():
    """run.py without options: MESC-Net's settings (--method our), the fast post-clustering
    route and seed 0, as its --help says."""
    args = RUN.parse_args(["--dataset", "orl"])
    assert (args.method, args.post_method, args.seed) == ("our", "fast", 0)


def test_no_pretrain_does_not_look_at_the_pretrained_file(files, tmp_path, capsys, monkeypatch):
    """--no-pretrain starts from he_normal weights: a damaged pretrained/<dataset>.h5 is none
    of its business."""
    shutil.copy(files["bad_h5"], tmp_path / "toy.h5")
    monkeypatch.setenv("MESC_PRETRAINED_DIR", str(tmp_path))
    code, _, err = invoke(RUN, ["--dataset", "toy", "--data-dir", files["dir"] / "coil20",
                                "--no-pretrain", "--epochs", "1", "--quiet", "--out",
                                tmp_path / "run"], capsys)
    assert code == 0, err


# --- mutation-testing gaps: cli.py and files.py ------------------------------------------------


def test_results_json_keeps_numpy_whole_numbers_and_paths(tmp_path):
    """write_json: a NumPy integer stays a whole number, a path its full text."""
    from mesc_tf.files import write_json

    target = tmp_path / "results.json"
    write_json(target, {"n": np.int64(3), "acc": np.float32(0.5), "c": np.arange(2),
                        "out": tmp_path / "run"})
    saved = json.loads(target.read_text())
    assert saved == {"n": 3, "acc": 0.5, "c": [0, 1], "out": str(tmp_path / "run")}
    assert type(saved["n"]) is int and type(saved["c"][0]) is int


def test_size_text_switches_unit_at_its_size():
    assert size_text(2**20) == "1.0 MiB" and size_text(2**30) == "1.0 GiB"
    assert size_text(2**10) == "1.0 KiB" and size_text(1023) == "1023 bytes"


def test_a_full_quota_says_the_disk_is_full():
    """EDQUOT (a user's quota) is a full disk as ENOSPC is; other errors point at the folder."""
    import errno

    from mesc_tf.files import write_error

    quota = write_error("r.json", OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert "cannot write r.json" in str(quota) and "the disk is full" in str(quota)
    denied = write_error("r.json", OSError(errno.EACCES, "Permission denied"))
    assert "the disk is full" not in str(denied) and "writable" in str(denied)
    short = write_error("r.npy", OSError("40 requested and 8 written"))  # NumPy's tofile
    assert "the disk is full" in str(short)
    # a message that merely contains "written" (a read-only file system) is not a full disk
    erofs = write_error("r.json", OSError(errno.EROFS, "Read-only file system (not written)"))
    assert "the disk is full" not in str(erofs) and "writable" in str(erofs)


def test_atomic_file_into_a_missing_folder_names_the_target(tmp_path):
    """mkstemp's own error names its temporary file; the MescError names the file to write."""
    from mesc_tf.files import atomic_write_text

    target = tmp_path / "no-such-folder" / "r.json"
    with pytest.raises(MescError) as caught:
        atomic_write_text(target, "{}")
    message = str(caught.value)
    assert f"cannot write {target}" in message and "folder exists" in message
    assert ".r.json." not in message and not target.parent.exists()


def test_atomic_file_follows_the_umask_and_closes_its_descriptor_when_chmod_fails(
        tmp_path, monkeypatch):
    """The mode comes from the umask without setting it (os.umask(0) gave other threads'
    new files mode 0666 meanwhile); a failing chmod (EPERM on some network file systems)
    left mkstemp's descriptor open."""
    from mesc_tf import files

    old = os.umask(0o027)
    try:
        files.atomic_write_text(tmp_path / "a.txt", "x")
        assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o640
        assert os.umask(0o027) == 0o027  # still the process's umask
    finally:
        os.umask(old)

    def refuse(*args):
        raise PermissionError(1, "Operation not permitted")  # EPERM

    monkeypatch.setattr(files.os, "fchmod", refuse)
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(MescError, match=f"cannot write {tmp_path / 'b.txt'} "):
        files.atomic_write_text(tmp_path / "b.txt", "x")
    assert len(os.listdir("/proc/self/fd")) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_locked_is_exclusive(tmp_path):
    """files.locked holds an exclusive lock: not even a shared one can be taken meanwhile."""
    import fcntl

    from mesc_tf.files import locked

    lock = tmp_path / ".lock"
    with locked(lock), open(lock) as other, pytest.raises(BlockingIOError):
        fcntl.flock(other, fcntl.LOCK_SH | fcntl.LOCK_NB)
    with open(lock) as other:  # released afterwards
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_save_npy_writes_float32_into_a_new_folder(tmp_path):
    from mesc_tf.files import save_npy

    coef = tmp_path / "new" / "deep" / "C.npy"
    save_npy(coef, np.eye(3))  # float64 in
    saved = np.load(coef)
    assert saved.dtype == np.float32 and np.array_equal(saved, np.eye(3))


@pytest.mark.parametrize("text", ['{"weights": "w.weights.h5", "epoch": null}',
                                  '{"weights": "w.weights.h5", "epoch": 5',
                                  '{"weights": "w.weights.h5", "epoch": "five"}', "[1, 2]",
                                  '{"weights": "w.weights.h5", "epoch": -5}',
                                  '{"weights": "w.weights.h5", "epoch": Infinity}',
                                  '{"weights": "w.weights.h5", "epoch": 5, "seconds": 1e999}'])
def test_a_damaged_state_json_is_one_error(tmp_path, text):
    """Whatever is wrong in state.json (a null, a cut-off file, a word, a list) is the same
    MescError that says to start over, not a traceback."""
    (tmp_path / "state.json").write_text(text)
    with pytest.raises(MescError, match="cannot read the checkpoint .*start over"):
        read_backup_state(tmp_path)


def test_a_state_json_naming_another_step_than_its_weights_is_refused(tmp_path):
    """A state.json whose epoch is not the step its weights file was saved after (damaged or
    edited by hand) is one MescError, not a resume at the wrong step that runs extra steps."""
    from mesc_tf.config import Architecture
    from mesc_tf.model import ConvAutoEncoder, PretrainNet
    from mesc_tf.training import configure_runtime, fit_steps

    configure_runtime(0)
    x = np.random.default_rng(0).random((4, 8, 8, 1)).astype(np.float32)
    net = lambda: PretrainNet(ConvAutoEncoder(Architecture((8, 8), (3,), (2,)))  # noqa: E731
                              .build_for_input())
    backup = tmp_path / "checkpoint"
    fit_steps(net(), x, 2, 1e-3, verbose=0, backup_dir=backup, checkpoint_every=1)
    state = json.loads((backup / "state.json").read_text())
    assert state["epoch"] == 2
    (backup / "state.json").write_text(json.dumps({**state, "epoch": 1}))
    with pytest.raises(MescError, match="says step 1, but its weights .* after step 2.*start over"):
        fit_steps(net(), x, 3, 1e-3, verbose=0, backup_dir=backup, checkpoint_every=1)


def test_a_failed_checkpoint_write_keeps_the_last_one_and_says_to_resume(tmp_path, monkeypatch):
    """A checkpoint write that fails mid-run (a full disk) names the checkpoint, not its
    temporary file, says the previous checkpoint is kept and how to go on, and leaves no
    temporary file; one interrupted by Ctrl-C leaves none either."""
    import errno

    import keras

    from mesc_tf.config import Architecture
    from mesc_tf.model import ConvAutoEncoder, PretrainNet
    from mesc_tf.training import configure_runtime, fit_steps

    configure_runtime(0)
    x = np.random.default_rng(0).random((4, 8, 8, 1)).astype(np.float32)
    net = lambda: PretrainNet(ConvAutoEncoder(Architecture((8, 8), (3,), (2,)))  # noqa: E731
                              .build_for_input())
    backup = tmp_path / "checkpoint"
    real_save, saves = keras.Model.save_weights, []

    def save(failure):
        def save_weights(model, path, *args, **kwargs):
            saves.append(path)
            real_save(model, path, *args, **kwargs)  # a part of the file is written
            if len(saves) == 2:
                raise failure
        return save_weights

    monkeypatch.setattr(keras.Model, "save_weights", save(OSError(errno.ENOSPC, "No space")))
    with pytest.raises(MescError) as caught:
        fit_steps(net(), x, 3, 1e-3, verbose=0, backup_dir=backup, checkpoint_every=1)
    message = str(caught.value)
    assert f"cannot write {backup / 'state-00000002.weights.h5'}" in message
    assert "the disk is full" in message and ".tmp-" not in message
    assert "the checkpoint of step 1 is kept" in message and "--resume" in message
    assert sorted(p.name for p in backup.iterdir()) == ["state-00000001.weights.h5",
                                                        "state.json"]
    saves.clear()
    monkeypatch.setattr(keras.Model, "save_weights", save(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        fit_steps(net(), x, 3, 1e-3, verbose=0, backup_dir=backup, checkpoint_every=1)
    assert not list(backup.glob(".tmp-*"))


@pytest.mark.parametrize("option", ["out", "weights", "tf1-checkpoint", "save-coef", "init",
                                    "tensorboard", "data-dir", "coef-cache", "json", "coef",
                                    "against", "tf1-dir", "dir"])
def test_every_path_option_refuses_an_empty_value(option, capsys):
    p = cli.ArgumentParser(prog="x")
    p.add_argument(f"--{option}")
    with pytest.raises(SystemExit) as e:
        p.parse_args([f"--{option}", ""])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err == f"error: --{option} is empty; give a path; see x --help\n"


def test_settings_options_reach_the_settings():
    """run.py's settings options each land in their own field; the others keep the config."""
    from mesc_tf.config import method_settings

    base = method_settings("orl", "our")
    args = RUN.parse_args(["--dataset", "orl", "--reg1", "1.5", "--reg2", "7", "--power", "2.5",
                           "--thr", "0.3", "--subspace-dim", "5", "--variant", "mesc"])
    s = cli.settings_from_args(base, args)
    assert (s.reg1, s.reg2, s.power, s.thr, s.subspace_dim, s.variant) == (
        1.5, 7.0, 2.5, 0.3, 5, "mesc")
    assert (s.lr, s.epochs, s.framework) == (base.lr, base.epochs, base.framework)


def test_fine_tuning_only_options_keep_the_clustering_settings():
    """add_settings_args(post=False) (faithfulness.py): no clustering options, and
    settings_from_args keeps the config's clustering settings."""
    from mesc_tf.config import method_settings

    base = method_settings("orl", "our")
    p = cli.ArgumentParser(prog="x")
    cli.add_settings_args(p, post=False)
    s = cli.settings_from_args(base, p.parse_args(["--lr", "0.01"]))
    assert s.lr == 0.01 and (s.thr, s.subspace_dim, s.power, s.variant) == (
        base.thr, base.subspace_dim, base.power, base.variant)


def test_dataset_names_are_case_insensitive():
    assert RUN.parse_args(["--dataset", "ORL"]).dataset == "orl"


def test_runs_started_in_the_same_second_get_their_own_folders(tmp_path, monkeypatch):
    """Without --out each run makes runs/<name>-<time>[-i]; a second run in the same second
    gets '-2', and each run's cleanup list holds its own folder (the first's runs/ too, which a
    failed first run leaves only if another run is in it)."""
    import datetime

    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2024, 1, 2, 3, 4, 5)

    monkeypatch.setattr(cli.datetime, "datetime", Frozen)
    monkeypatch.chdir(tmp_path)
    first, made1 = cli.prepare_out_dir(None, "orl")
    second, made2 = cli.prepare_out_dir(None, "orl")
    assert first == Path("runs/orl-20240102-030405") and second == Path(f"{first}-2")
    assert made1[0] == first and [p.path for p in made1[1:]] == [Path("runs")]
    assert made2 == [second]
    cli._remove(made2)
    assert not second.exists() and first.is_dir()
    cli._remove(made1)
    assert not Path("runs").exists()


def test_an_output_file_that_is_a_directory_is_refused_even_with_force(tmp_path):
    for force in (False, True):
        with pytest.raises(MescError, match="is a directory; give a file name"):
            cli.prepare_out_file(tmp_path, force=force, what="--save-coef file")


def test_guard_names_an_os_error_without_a_file(capsys):
    """An OSError without a file name: its own text, not 'reason: None'."""
    with pytest.raises(SystemExit) as e:
        cli.main_guard(_fail(OSError(28, "No space left on device")))
    assert e.value.code == 2
    assert capsys.readouterr().err == "error: [Errno 28] No space left on device\n"


def test_guard_reports_tensorflows_out_of_memory(tmp_path, capsys):
    """TF's ResourceExhaustedError (out of GPU/host memory while training): one line, exit 2,
    the run's outputs removed."""
    class ResourceExhaustedError(Exception):
        pass

    out = tmp_path / "run"
    out.mkdir()
    with pytest.raises(SystemExit) as e:
        cli.main_guard(_fail(ResourceExhaustedError("OOM when allocating tensor\n...")), [out])
    err = capsys.readouterr().err
    assert e.value.code == 2 and not out.exists()
    assert err == ("error: out of memory while training; use a smaller problem or a machine "
                   "with more memory\n")


def test_remove_takes_files_too(tmp_path):
    """cli._remove (main_guard's cleanup) removes a file on the list, as its contract says."""
    part, keep = tmp_path / "part.npy", tmp_path / "keep.npy"
    part.write_bytes(b"x")
    keep.write_bytes(b"y")
    cli._remove([part, tmp_path / "never-made.npy"])
    assert not part.exists() and keep.read_bytes() == b"y"
