"""Smoke tests of the benchmark scripts (the figures themselves are measured by `make bench` and
the scripts' own commands, not by tests): one small ORL run of benchmarks/bench.py in a subprocess
writes every figure the README's table reads; benchmarks/xla_step.py exports a program whose
parameters and outputs line up with what it stores."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def test_bench_writes_its_figures(tmp_path):
    out = tmp_path / "bench.json"
    # Random images of ORL's shape: the figures need the shape only, not the data.
    env = {**os.environ, "MESC_DATA_DIR": str(tmp_path / "no-data")}
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench.py"), "--datasets", "orl",
         "--warmup", "1", "--repeats", "2", "--jit", "off,on", "--post", "fast,reference",
         "--json", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (res,) = json.loads(out.read_text())["results"]
    assert res["dataset"] == "orl" and res["data"] == "random" and res["n"] == 400
    for mode in ("off", "on"):
        assert len(res["steps_ms_all"][mode]) == 3 and res["step_ms"][mode] > 0
    assert res["ratio_mode"] == "off"  # the ratios take the default, not the faster mode
    for key in ("floor_ms", "autoencoder_ms", "original_step_ms", "peak_rss_gib"):
        assert res[key] > 0, key
    for method in ("fast", "reference"):
        split = res["post"][method]
        assert all(split[k] >= 0 for k in ("thrc_s", "svd_s", "spectral_s")), split
        assert split["total_s"] >= split["thrc_s"] + split["svd_s"], split
    assert isinstance(res["labels_fast_equal_reference"], bool)
    assert "orl" in proc.stdout and "ours ms off/on" in proc.stdout  # the printed table


def test_bench_fails_loudly_on_a_bad_data_file(tmp_path):
    """Random images stand in only for a data file that is not there: a damaged one stops
    that dataset's benchmark, and the run ends with exit status 2 and one line naming it (the
    report, with the failure in it, is still written)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "ORL_32x32.mat").write_bytes(b"not a MATLAB file")
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench.py"), "--datasets", "orl",
         "--warmup", "0", "--repeats", "1", "--jit", "off", "--post", "fast", "--no-original",
         "--json", str(out)],
        cwd=REPO, env={**os.environ, "MESC_DATA_DIR": str(tmp_path / "data")},
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert "cannot read" in errors[0] and "ORL_32x32.mat" in errors[0]
    assert errors[-1].startswith("error: 1 benchmark(s) failed (orl)") and str(out) in errors[-1]
    assert "Traceback" not in proc.stderr
    (res,) = json.loads(out.read_text())["results"]
    assert res == {"dataset": "orl", "error": "exit status 2"}


def test_spectral_routes_benchmark_agrees_and_restores_the_module(tmp_path, monkeypatch):
    """benchmarks/spectral_routes.py on a small block C with the large-n routes forced: both
    routes give the same labels, the figures are written, and the module is left as it was."""
    import importlib.util

    import numpy as np

    from mesc_tf.postcluster import fast as pc_fast

    spec = importlib.util.spec_from_file_location("spectral_routes",
                                                  REPO / "benchmarks" / "spectral_routes.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # Five blocks with heavy-tailed weights in noise (test_postcluster_fast's trained_like):
    # well-posed at powers 1 and 8, so the two routes must agree.
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(5), (30, 40, 25, 35, 30))
    C = 0.2 * np.abs(rng.standard_normal((160, 160)))
    same = y[:, None] == y[None, :]
    C[same] += rng.uniform(0.5, 1.0, same.sum()) * rng.random(same.sum()) ** 3
    np.save(tmp_path / "c.npy", C.astype(np.float32))
    monkeypatch.setattr(pc_fast, "SI_LU_MAX_N", 0)
    monkeypatch.setattr(pc_fast, "DENSE_SVD_MAX_N", 0)
    real, cap = pc_fast._lanczos_smallest, pc_fast.LANCZOS_MAX_PRODUCTS
    out = tmp_path / "routes.json"
    assert mod.main(["--coef", str(tmp_path / "c.npy"), "--clusters", "5", "--thr", "0.2",
                     "--settings", "4:1,4:8", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["d"], r["power"]) for r in rows] == [(4, 1.0), (4, 8.0)]
    assert all(r["same_labels"] and not r["ill_posed"] and r["lanczos_products"] > 0
               and r["cholesky_s"] > 0 for r in rows)
    assert pc_fast._lanczos_smallest is real and pc_fast.LANCZOS_MAX_PRODUCTS == cap


def test_spectral_routes_bad_coef_is_one_line(tmp_path):
    import numpy as np

    np.save(tmp_path / "rect.npy", np.ones((3, 4), np.float32))
    (tmp_path / "junk.npy").write_text("junk")
    # n <= SI_LU_MAX_N: neither route compared here runs (a KeyError after the work, before).
    np.save(tmp_path / "small.npy", np.random.default_rng(0).random((50, 50), np.float32))
    for name, needle in (("rect.npy", "square"), ("junk.npy", "not a .npy"),
                         ("missing.npy", "not found"), ("small.npy", "run only above")):
        proc = subprocess.run(
            [sys.executable, str(REPO / "benchmarks" / "spectral_routes.py"), "--coef",
             str(tmp_path / name), "--clusters", "2", "--thr", "0.1"],
            capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, (name, proc.stderr)
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: --coef"), \
            proc.stderr
        assert needle in proc.stderr, proc.stderr
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "spectral_routes.py"), "--coef",
         str(tmp_path / "small.npy"), "--clusters", "2", "--thr", "0.1", "--seed", "-1"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--seed" in proc.stderr and proc.stderr.count("\n") == 1
    # A --json folder made before the work is removed when the work then fails.
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "spectral_routes.py"), "--coef",
         str(tmp_path / "small.npy"), "--clusters", "2", "--thr", "0.1", "--json",
         str(tmp_path / "new" / "routes.json")],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "run only above" in proc.stderr
    assert not (tmp_path / "new").exists()


def test_spectral_sklearn_prints_both_routes_per_variant(capsys):
    """benchmarks/spectral_sklearn.py: with the scikit-learn setup.py requires, every route
    clusters its noisy blocks perfectly (the README's figures for 1.9)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("spectral_sklearn",
                                                  REPO / "benchmarks" / "spectral_sklearn.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--seeds", "0-2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("scikit-learn ") and len(lines) == 7
    for line in lines[1:]:
        assert line.endswith("ACC per seed 1.00 1.00 1.00"), line


def test_bench_bad_options_are_one_line(tmp_path):
    a_file = tmp_path / "orl.npy"
    a_file.write_bytes(b"")
    for argv, needle in ((["--datasets", "foo"], "choose from"), (["--repeats", "0"], ">= 1"),
                         (["--seed", "-1"], "from 0 to"), (["--warmup", "-2"], ">= 0"),
                         (["--e2e-epochs", "3"], "needs --e2e"),
                         (["--coef", "/nonexistent/coefs"], "no such folder"),
                         (["--coef", str(a_file)], "a file, not a folder"),
                         (["--json", str(a_file / "b.json")], f"({a_file} is a file)")):
        proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench.py"), *argv],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, (argv, proc.stderr)
        assert proc.stderr.count("\n") == 1 and needle in proc.stderr, proc.stderr


def test_conv_routes_reformulations_agree_with_keras(tmp_path):
    """benchmarks/conv_routes.py's stride-1 and col2im rewrites compute Keras' layers (odd sizes
    included: EYaleB 12×11 → 6×6, MNIST 7 → 4), and it writes a row per layer."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("conv_routes",
                                                  REPO / "benchmarks" / "conv_routes.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "conv.json"
    assert mod.main(["--datasets", "eyaleb,mnist", "--n", "2", "--repeats", "1",
                     "--json", str(out)]) == 0
    report = json.loads(out.read_text())["datasets"]
    for name in ("eyaleb", "mnist"):
        rows = report[name]["layers"]
        assert [r["layer"] for r in rows] == ["enc_0", "enc_1", "enc_2", "dec_0", "dec_1", "dec_2"]
        assert all(r["max_rel_diff"] < 1e-5 and r["keras_ms"] > 0 and r["stride1_ms"] > 0
                   for r in rows), rows
        # col2im: decoder layers only; the auto-encoder with its output layer by col2im.
        assert [r["col2im_ms"] is None for r in rows] == [True] * 3 + [False] * 3, rows
        assert report[name]["autoencoder_max_rel_diff"] < 1e-5
        assert report[name]["autoencoder_col2im_output_ms"] > 0


def test_xla_step_export_matches_the_program(tmp_path):
    """benchmarks/xla_step.py export: the stored start values line up with the exported XLA
    program's parameters (shape and type, in order), every variable the step updates comes back
    as an aliased output, the program runs at float32 precision on the device alone, and
    TensorFlow's reference steps are recorded."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("xla_step", REPO / "benchmarks" / "xla_step.py")
    xla_step = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(xla_step)
    hlo_pb2, xla_data_pb2 = xla_step.xla_protos()

    env = {**os.environ, "MESC_DATA_DIR": str(tmp_path / "no-data")}
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "xla_step.py"), "export", "--out",
         str(tmp_path), "--datasets", "orl", "--steps", "2"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    meta = json.loads((tmp_path / "orl.json").read_text())
    module = hlo_pb2.HloModuleProto.FromString((tmp_path / "orl.hlo.pb").read_bytes())
    shapes = module.host_program_shape.parameters
    params = meta["params"]
    assert meta["data"] == "random" and len(params) == len(shapes)
    types = {"float32": xla_data_pb2.F32, "int64": xla_data_pb2.S64}
    for spec, shape in zip(params, shapes):
        assert list(shape.dimensions) == spec["shape"]
        assert shape.element_type == types[spec["dtype"]]
    assert params[0]["name"] == "x" and params[0]["shape"] == [400, 32, 32, 1]
    # C starts constant (stored as its value alone), and its update comes back.
    coef = next(i for i, p in enumerate(params) if p["name"].endswith("self_expression/coef"))
    assert params[coef]["fill"] == np.float32(meta["settings"]["coef_init"])
    aliases = {int(o): p for o, p in meta["aliases"].items()}
    assert aliases[meta["coef_output"]] == coef
    # Everything but the images and the learning rate is updated: weights, C, Adam's slots and
    # its step counter; the first outputs are the loss terms.
    updated = {params[p]["name"] for p in aliases.values()}
    assert {p["name"] for p in params} - updated == {"x", "fused_adam/learning_rate"}
    assert len(updated) == len(params) - 2
    assert min(aliases) == len(meta["terms"]) == 4
    stored = np.load(tmp_path / "orl.npz")
    assert all(("key" in p) != ("fill" in p) for p in params)
    assert {p["key"] for p in params if "key" in p} == set(stored.files)
    # TF32 off (configure_runtime) shows as float32 precision on every product; nothing leaves
    # the device within a step.
    assert meta["products"] > 0 and meta["products_below_highest"] == 0
    assert meta["host_or_custom_ops"] == []
    losses = np.asarray(meta["tf_losses"])
    assert losses.shape == (2, 4) and np.all(np.isfinite(losses))
    ref = np.load(tmp_path / "orl.ref.npz")["coef"]
    assert ref.shape == (meta["tf_coef_rows"], 400) and not np.all(ref == params[coef]["fill"])


def test_xla_step_interrupted_export_leaves_no_stale_set(tmp_path, monkeypatch):
    """An export stopped half-way leaves no temporary files, and no .json (the mark `time`
    reads as "exported") beside a half-written set, even where an older export left one."""
    import importlib.util

    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    monkeypatch.setenv("MESC_DATA_DIR", str(tmp_path / "no-data"))
    spec = importlib.util.spec_from_file_location("xla_step", REPO / "benchmarks" / "xla_step.py")
    xla_step = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(xla_step)
    out = tmp_path / "out"
    out.mkdir()
    (out / "orl.json").write_text("{}")  # an older export's

    def interrupted(_):
        raise KeyboardInterrupt

    monkeypatch.setattr(xla_step, "_program_facts", interrupted)  # after the arrays, before .json
    with pytest.raises(KeyboardInterrupt):
        xla_step.export_one("orl", out, 1, 0)
    assert sorted(f.name for f in out.iterdir()) == ["orl.hlo.pb", "orl.npz", "orl.ref.npz"]


def test_xla_step_bad_options_are_one_line(tmp_path):
    script = str(REPO / "benchmarks" / "xla_step.py")
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    for argv, needle in ((["export", "--out", str(tmp_path), "--datasets", "foo"], "choose from"),
                         (["export", "--out", str(a_file)], "is a file"),
                         (["export", "--out", str(tmp_path), "--steps", "0"], ">= 1"),
                         (["time", "--dir", str(tmp_path)], "no exported program"),
                         (["time", "--dir", str(tmp_path), "--warmup", "-1"], ">= 0"),
                         (["export", "--out", str(a_file / "sub")], f"({a_file} is a file)")):
        proc = subprocess.run([sys.executable, script, *argv], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 2, (argv, proc.stderr)
        assert proc.stderr.count("\n") == 1 and needle in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == [a_file]  # nothing written
