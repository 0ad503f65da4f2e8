"""Smoke tests of the benchmark scripts (the figures themselves are measured by `make bench` and
the scripts' own commands, not by tests): one small ORL run of benchmarks/bench.py in a subprocess
writes every figure the README's table reads; benchmarks/xla_step.py exports a program whose
parameters and outputs line up with what it stores."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scripts import load_script, signals_default  # tests/scripts.py

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
    assert res["data_files"] is None
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


def test_bench_records_the_data_files_it_timed(synthetic_data, monkeypatch):
    """Real data: the figures name the files they came from, by SHA-256, as results.json does."""
    monkeypatch.setenv("MESC_DATA_DIR", str(synthetic_data))
    bench = load_script("benchmarks/bench.py", "bench_data_files")
    from mesc_tf.data import load_dataset

    x, y, source, files = bench.load_or_random("orl")
    assert source == "real" and x.shape == (400, 32, 32, 1) and len(y) == 400
    assert files == load_dataset("orl").file_hashes and set(files) == {"ORL_32x32.mat"}


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

    import numpy as np

    from mesc_tf.postcluster import fast as pc_fast

    mod = load_script("benchmarks/spectral_routes.py", "spectral_routes")
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


def test_spectral_routes_bad_coef_is_one_line(tmp_path, capsys):
    """Bad input: one line, exit status 2, nothing left behind. One case runs as a process
    (no traceback reaches the terminal); the rest go through the same guard in this one."""
    import numpy as np

    from mesc_tf import cli

    np.save(tmp_path / "rect.npy", np.ones((3, 4), np.float32))
    (tmp_path / "junk.npy").write_text("junk")
    # n <= SI_LU_MAX_N: neither route compared here runs (a KeyError after the work, before).
    np.save(tmp_path / "small.npy", np.random.default_rng(0).random((50, 50), np.float32))
    script = REPO / "benchmarks" / "spectral_routes.py"
    proc = subprocess.run([sys.executable, str(script), "--coef", str(tmp_path / "rect.npy"),
                           "--clusters", "2", "--thr", "0.1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: --coef") and "square" in proc.stderr, proc.stderr

    def run(name, *extra):
        mod = load_script("benchmarks/spectral_routes.py")
        argv = ["--coef", str(tmp_path / name), "--clusters", "2", "--thr", "0.1", *extra]
        with pytest.raises(SystemExit) as e:
            cli.main_guard(lambda: mod.main(argv), mod.CLEANUP)
        return e.value.code, capsys.readouterr().err

    for name, needle in (("junk.npy", "not a .npy"), ("missing.npy", "not found"),
                         ("small.npy", "run only above")):
        status, err = run(name)
        assert status == 2 and err.count("\n") == 1 and err.startswith("error: --coef"), err
        assert needle in err, err
    status, err = run("small.npy", "--seed", "-1")
    assert status == 2 and "--seed" in err and err.count("\n") == 1
    # A --json folder made before the work is removed when the work then fails.
    status, err = run("small.npy", "--json", str(tmp_path / "new" / "routes.json"))
    assert status == 2 and "run only above" in err
    assert not (tmp_path / "new").exists()


def test_spectral_sklearn_prints_both_routes_per_variant(capsys):
    """benchmarks/spectral_sklearn.py: with the scikit-learn setup.py requires, every route
    clusters its noisy blocks perfectly (the README's figures for 1.9)."""

    mod = load_script("benchmarks/spectral_sklearn.py", "spectral_sklearn")
    assert mod.main(["--seeds", "0-2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("scikit-learn ") and len(lines) == 7
    for line in lines[1:]:
        assert line.endswith("ACC per seed 1.00 1.00 1.00"), line


def _run_group(cmd, timeout):
    """subprocess.run in a session of its own; on timeout the whole group is killed, so that
    a bench.py which wrongly went on to its per-dataset children leaves none behind."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=signals_default)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _signal_group_when(cmd, ready, sig, env=None):
    """Start ``cmd`` in a session of its own (signals_default), send ``sig`` to its group
    once ``ready()`` holds (or after 60 s, or once it exited), and return (status, stderr)."""
    import time

    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=signals_default)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None and not ready(proc):
            time.sleep(0.1)
        os.killpg(proc.pid, sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return proc.returncode, err


def _ignores_sigint(pid):
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("SigIgn:")[1].split()[0], 16) & (1 << (signal.SIGINT - 1))


def _child_ignores_sigint(proc):
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    return bool(children) and bool(_ignores_sigint(children[0]))


@pytest.mark.parametrize("sig,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_bench_interrupted_says_so_once(tmp_path, sig, status):
    """Ctrl-C, or SIGTERM sent to the group, reaches bench.py and its dataset's subprocess:
    one error line (each printed its own, the same line twice), the signal's exit status, and
    no --json folder left."""
    out = tmp_path / "new" / "bench.json"
    env = {**os.environ, "MESC_DATA_DIR": str(tmp_path / "no-data")}
    # Signalled once the child ignores SIGINT (the fix); else after 60 s, into its steps.
    returncode, err = _signal_group_when(
        [sys.executable, str(REPO / "benchmarks" / "bench.py"), "--datasets", "orl", "--jit",
         "off", "--post", "fast", "--no-original", "--repeats", "100000", "--json", str(out)],
        _child_ignores_sigint, sig, env=env)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert returncode == status and len(errors) == 1, err[-2000:]
    assert "Traceback" not in err
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("sig,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_bench_end_to_end_interrupted_says_so_once(tmp_path, sig, status):
    """Ctrl-C (or SIGTERM to the group) while --e2e's run.py works: one error line, bench.py's
    (what the benchmark kept), not also run.py's own ("nothing was kept: rerun ... with
    --checkpoint-every"), which says nothing about the benchmark. A stand-in run.py with
    run.py's Ctrl-C handling stands in for the real one (minutes of MNIST)."""
    ready = tmp_path / "ready"
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "run.py").write_text(
        f"import pathlib, sys, time\nsys.path.insert(0, {str(REPO)!r})\n"
        "from mesc_tf import cli\n"
        f"def main():\n    pathlib.Path({str(ready)!r}).write_text('')\n    time.sleep(60)\n"
        "cli.main_guard(main, interrupted=lambda: cli.training_interrupted(None))\n")
    driver = tmp_path / "driver.py"
    driver.write_text(
        f"import sys\nsys.path[:0] = [{str(REPO)!r}, {str(REPO / 'tests')!r}]\n"
        "from pathlib import Path\nfrom scripts import load_script\nfrom mesc_tf import cli\n"
        "bench = load_script('benchmarks/bench.py', 'bench')\n"
        f"bench.ROOT = Path({str(tmp_path)!r})\n"
        "bench.autoencoder_source = lambda name: {'dataset': name}\n"
        # bench.py kills run.py at once: a second late, so that a run.py that got the signal
        # too has printed its line by then (a race otherwise)
        "import subprocess, time\nclass Popen(subprocess.Popen):\n    def kill(self):\n"
        "        time.sleep(1)\n        super().kill()\nsubprocess.Popen = Popen\n"
        f"cli.main_guard(lambda: bench.end_to_end('mnist', 1, Path({str(tmp_path)!r}) / 'c.npy',"
        f" Path({str(tmp_path)!r}) / 'e2e'), interrupted=lambda: 'interrupted; bench kept')\n")
    returncode, err = _signal_group_when([sys.executable, str(driver)],
                                         lambda proc: ready.exists(), sig)
    assert ready.exists(), "the stand-in run.py did not start"
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert returncode == status and errors == ["error: interrupted; bench kept"], err[-2000:]


# A signal the main thread blocks is taken by another thread where one exists (bench.py's
# parent has OpenBLAS's), and Python still runs its handler in the main thread, once that one
# next takes the GIL back (Popen does, after the fork): the stand-in's time.sleep(0). The
# other thread starts before Popen, with the signals unblocked, as OpenBLAS's.
OTHER_THREAD = (
    "go, taken = threading.Event(), threading.Event()\n"
    "def take():\n"
    "    go.wait()\n"
    "    signal.pthread_kill(threading.get_ident(), {sig})\n"
    "    taken.set()\n"
    "threading.Thread(target=take, daemon=True).start()\n")
OTHER_THREAD_TAKES = (
    "        go.set()\n"
    "        taken.wait()\n"
    "        time.sleep(0)\n")


@pytest.mark.parametrize("taken_by", ["main thread", "other thread"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_bench_child_started_as_the_signal_comes_is_killed(tmp_path, sig, taken_by):
    """A signal that reaches bench.py while Popen is still starting its child (the fork done,
    Popen not returned; CI's failure) kills the child too: it ignores the signal, so it ran on
    alone, and the test waiting for its output hung. The stand-in Popen signals bench.py
    itself just before it returns, through its main thread or another one (see above; a
    signal mask, the first fix, held the first only)."""
    pid_file = tmp_path / "child.pid"
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import os, signal, subprocess, sys, threading, time\n"
        f"sys.path[:0] = [{str(REPO)!r}, {str(REPO / 'tests')!r}]\n"
        "from pathlib import Path\nfrom scripts import load_script\nfrom mesc_tf import cli\n"
        "bench = load_script('benchmarks/bench.py', 'bench')\n"
        + ("" if taken_by == "main thread" else OTHER_THREAD.format(sig=int(sig))) +
        "class Popen(subprocess.Popen):\n    def __init__(self, *a, **k):\n"
        "        super().__init__(*a, **k)\n"
        f"        Path({str(pid_file)!r}).write_text(str(self.pid))\n"
        + (f"        os.kill(os.getpid(), {int(sig)})\n" if taken_by == "main thread"
           else OTHER_THREAD_TAKES) +
        "subprocess.Popen = Popen\n"
        # the child lets go of the test's pipes, so that one left running fails the test at once
        "cli.main_guard(lambda: bench._run_child([sys.executable, '-c', "
        "'import os, time; os.close(1); os.close(2); time.sleep(60)']), "
        "interrupted=lambda: 'interrupted')\n")
    proc = _run_group([sys.executable, str(driver)], 120)
    assert proc.returncode == 128 + sig and proc.stderr.count("error:") == 1, proc.stderr
    child = int(pid_file.read_text())
    try:
        os.kill(child, 0)
    except ProcessLookupError:
        return  # killed and reaped
    os.kill(child, signal.SIGKILL)
    pytest.fail(f"the child {child} was still running")


def test_bench_bad_options_are_one_line(tmp_path):
    a_file = tmp_path / "orl.npy"
    a_file.write_bytes(b"")
    for argv, needle in ((["--datasets", "foo"], "choose from"), (["--repeats", "0"], ">= 1"),
                         (["--seed", "-1"], "from 0 to"), (["--warmup", "-2"], ">= 0"),
                         (["--e2e-epochs", "3"], "needs --e2e"),
                         (["--coef", "/nonexistent/coefs"], "no such folder"),
                         (["--coef", str(a_file)], "a file, not a folder"),
                         (["--json", str(a_file / "b.json")], f"({a_file} is a file)")):
        proc = _run_group([sys.executable, str(REPO / "benchmarks" / "bench.py"), *argv], 120)
        assert proc.returncode == 2, (argv, proc.stderr)
        assert proc.stderr.count("\n") == 1 and needle in proc.stderr, proc.stderr


def test_conv_routes_reformulations_agree_with_keras(tmp_path):
    """benchmarks/conv_routes.py's stride-1 and col2im rewrites compute Keras' layers (odd sizes
    included: EYaleB 12×11 → 6×6, MNIST 7 → 4), and it writes a row per layer."""

    mod = load_script("benchmarks/conv_routes.py", "conv_routes")
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

    xla_step = load_script("benchmarks/xla_step.py", "xla_step")
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

    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    monkeypatch.setenv("MESC_DATA_DIR", str(tmp_path / "no-data"))
    xla_step = load_script("benchmarks/xla_step.py", "xla_step")
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


# In-process checks of benchmarks/bench.py's bookkeeping, its heavy parts replaced by fakes.

@pytest.fixture
def bench():

    return load_script("benchmarks/bench.py", "bench")


def test_bench_timed_ms_is_the_median_of_the_timed_calls(bench, monkeypatch):
    """_timed_ms skips the warm-up calls and reports the median (not the mean) in ms."""
    from types import SimpleNamespace

    # A warm-up call reads the clock once (at its start), then timed calls of 1 s, 2 s and 6 s.
    clock = iter([0, 10, 11, 11, 13, 13, 19])
    monkeypatch.setattr(bench, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    value = SimpleNamespace(numpy=lambda: 0)
    assert bench._timed_ms(lambda: value, 1, 3) == 2000.0


def _fake_dataset_run(bench, monkeypatch, seen, step_s, original_s=None):
    """Replace everything slow one_dataset calls; record what it is called with in ``seen``."""
    from types import SimpleNamespace

    import mesc_tf.released_graph
    import mesc_tf.training

    x, y = np.zeros((6, 4, 4, 1), np.float32), np.arange(6) % 2 + 1
    coef = np.full((6, 6), 0.5, np.float32)
    layer = SimpleNamespace(name="enc_0", kernel=SimpleNamespace(numpy=lambda: 1),
                            bias=SimpleNamespace(numpy=lambda: 2))
    ae = SimpleNamespace(latent_shape=(2, 2), named_layers=[layer])
    model = SimpleNamespace(autoencoder=ae, coef=SimpleNamespace(numpy=lambda: coef))
    seen.update(posts=[], steps=[], coefs=[])

    def ours_steps(x_, cfg, jit, steps, seed):
        seen["steps"].append((jit, steps, seed))
        return model, step_s["on" if jit else "off"]

    def post(C, y_, cfg, method, seed):
        seen["posts"].append(method)
        seen["coefs"].append(C)
        return np.arange(6) % 2, {"total_s": 1.0}

    def floor_ms(*a):
        seen["floor"] = a
        return 1.0

    monkeypatch.setattr(bench, "load_or_random", lambda name, seed: (x, y, "random", None))
    monkeypatch.setattr(bench, "autoencoder_source", lambda name: {"no_pretrain": True})
    monkeypatch.setattr(bench, "ours_steps", ours_steps)
    monkeypatch.setattr(bench, "post", post)
    monkeypatch.setattr(bench, "floor_ms", floor_ms)
    monkeypatch.setattr(bench, "autoencoder_ms", lambda *a: 1.0)
    # The process's peak RSS stands for how many post-clustering methods have run.
    monkeypatch.setattr(bench, "_peak_rss_gib", lambda: float(len(seen["posts"])))
    monkeypatch.setattr(mesc_tf.training, "configure_runtime", lambda *a, **k: None)
    monkeypatch.setattr(mesc_tf.released_graph, "finetune",
                        lambda x_, weights, settings, steps: (None, None, original_s))


def test_bench_one_dataset_keeps_the_timed_steps_and_the_right_figures(bench, monkeypatch):
    """one_dataset: an explicit --warmup 0 is kept, the medians leave out the warm-up steps
    (ours and the released graph's), the ratios take XLA off even where on is faster, the
    peak RSS is the one right after the fast post-clustering, and each pair of methods' labels
    is compared once."""
    seen = {}
    _fake_dataset_run(bench, monkeypatch, seen, {"off": [0.1, 0.002, 0.004, 0.006]},
                      original_s=[0.1, 0.002, 0.004, 0.006])
    args = bench.parse_args(["--datasets", "orl", "--warmup", "0", "--repeats", "4",
                             "--jit", "off", "--post", "fast,strict,reference", "--seed", "3"])
    res = bench.one_dataset("orl", args)
    assert res["warmup"] == 0 and res["repeats"] == 4 and seen["steps"] == [(False, 4, 3)]
    assert res["step_ms"] == {"off": 5.0} and res["original_step_ms"] == 5.0  # all 4 steps

    _fake_dataset_run(bench, monkeypatch, seen, {"off": [9.0, 0.002, 0.004, 0.006],
                                                 "on": [9.0, 0.001, 0.001, 0.001]},
                      original_s=[9.0, 0.002, 0.004, 0.006])
    args = bench.parse_args(["--datasets", "orl", "--warmup", "1", "--repeats", "3",
                             "--post", "fast,strict,reference"])
    res = bench.one_dataset("orl", args)
    assert seen["steps"] == [(False, 4, 0), (True, 4, 0)]
    assert res["step_ms"] == {"off": 4.0, "on": 1.0} and res["original_step_ms"] == 4.0
    assert res["jit_faster"] == "on" and res["ratio_mode"] == "off"
    assert seen["floor"] == (6, 4, 1, 3)  # n, p = 2·2, one warm-up, at least 3 repeats
    assert seen["posts"] == ["fast", "strict", "reference"] and res["peak_rss_gib"] == 1.0
    assert res["peak_rss_gib_all"] == 3.0
    assert sorted(k for k in res if k.startswith("labels_")) == [
        "labels_fast_equal_reference", "labels_fast_equal_strict",
        "labels_strict_equal_reference"]
    assert res["coef"] == "after 4 steps"


def test_bench_one_dataset_post_clusters_the_given_coef_file(bench, monkeypatch, tmp_path):
    seen = {}
    _fake_dataset_run(bench, monkeypatch, seen, {"off": [0.001, 0.002]})
    np.save(tmp_path / "orl.npy", np.eye(6, dtype=np.float32))
    args = bench.parse_args(["--warmup", "1", "--repeats", "1", "--jit", "off", "--post", "fast",
                             "--no-original", "--coef-file", str(tmp_path / "orl.npy")])
    res = bench.one_dataset("orl", args)
    assert res["coef"] == str(tmp_path / "orl.npy")
    np.testing.assert_array_equal(seen["coefs"][0], np.eye(6))
    assert "original_step_ms" not in res and res["peak_rss_gib"] == 1.0


def test_bench_table_ratios_take_xla_off(bench):
    """The printed table's ratios divide ours with XLA off (ratio_mode), not the faster mode,
    by the released graph and the floor; "same" is fast against reference."""
    fast = {"total_s": 1.0, "thrc_s": 0.1, "svd_s": 0.2, "spectral_s": 0.7}
    res = {"dataset": "orl", "n": 400, "step_ms": {"off": 40.0, "on": 20.0}, "ratio_mode": "off",
           "original_step_ms": 20.0, "floor_ms": 10.0, "autoencoder_ms": 5.0,
           "post": {"fast": fast, "reference": {"total_s": 2.0}},
           "labels_fast_equal_reference": False, "labels_fast_equal_strict": True,
           "peak_rss_gib": 1.5}
    lines = bench.table([res, {"dataset": "coil20", "error": "exit status 2"}]).splitlines()
    assert lines[1].split() == ["orl", "400", "40.0/20.0", "20.0", "2.00", "10.0", "4.00", "5.0",
                                "1.00", "=", "0.10/0.20/0.70", "-", "2.00", "no", "1.50"]
    assert lines[2].split() == ["coil20", "error:", "exit", "status", "2"]


def test_bench_table_marks_random_data(bench):
    """A dataset whose files were not found ran on random images ("data": "random"): the
    printed table says so, on its row and in a note below; real data gets neither."""
    res = {"dataset": "orl", "n": 400, "data": "random", "step_ms": {"off": 40.0},
           "ratio_mode": "off", "post": {}, "peak_rss_gib": 1.5}
    lines = bench.table([res, {**res, "dataset": "coil20", "data": "real"}]).splitlines()
    assert lines[1].split()[0] == "orl*" and lines[2].split()[0] == "coil20"
    assert lines[3].startswith("* random images") and len(lines) == 4
    assert "*" not in bench.table([{**res, "data": "real"}])


def test_bench_option_lists_and_child_arguments(bench):
    """Comma lists are case-blind and must name something; a dataset's subprocess gets the
    seed, --warmup 0 and --no-original."""
    import argparse

    parse = bench._csv(bench.DATASETS)
    assert parse(" ORL, Coil20 ,") == ["orl", "coil20"]
    assert parse("orl,ORL, coil20,orl") == ["orl", "coil20"]  # each timed once
    for text in (",", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="choose from"):
            parse(text)
    args = bench.parse_args(["--seed", "7", "--warmup", "0", "--no-original", "--jit", "on",
                             "--post", "strict"])
    child = bench._child_argv(args)
    assert child == ["--jit", "on", "--post", "strict", "--seed", "7", "--warmup", "0",
                     "--no-original"]
    again = bench.parse_args([*child, "--one", "orl"])
    assert (again.seed, again.warmup, again.original, again.jit, again.post) == (
        7, 0, False, ["on"], ["strict"])
    assert "--no-original" not in bench._child_argv(bench.parse_args([]))


def test_bench_checks_the_coef_files_before_the_runs(bench, tmp_path, capsys):
    """A --coef file that is not the dataset's n×n C is refused in one line before any run
    (the dataset's subprocess read it after its timings: a traceback for a file that is not a
    .npy, an error naming no file for one of another shape); --e2e's MNIST C replaces the
    folder's, so that one is not read."""
    coefs = tmp_path / "coefs"
    coefs.mkdir()
    np.save(coefs / "orl.npy", np.eye(400, dtype=np.float32))  # ORL's shape: taken
    assert bench.parse_args(["--datasets", "orl", "--coef", str(coefs)]).coef == str(coefs)
    for content, name in ((b"junk", "coil20"), (b"", "coil20"), (np.eye(50), "coil20"),
                          (np.eye(50), "mnist")):
        path = coefs / f"{name}.npy"
        path.write_bytes(content) if isinstance(content, bytes) else np.save(path, content)
        with pytest.raises(SystemExit) as e:
            bench.parse_args(["--datasets", f"orl,{name}", "--coef", str(coefs)])
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count("\n") == 1, err
        assert f"{path} is not {name}'s C" in err, err
        assert f"run.py --dataset {name} --save-coef {path} --force," in err, err
        if name == "mnist":
            assert bench.parse_args(["--datasets", "mnist", "--coef", str(coefs), "--e2e"]).e2e
        path.unlink()


def test_bench_end_to_end_passes_the_auto_encoder_and_epochs(bench, monkeypatch, tmp_path):
    from types import SimpleNamespace

    launched = []

    def popen(cmd, **kwargs):
        launched.append(cmd)
        return SimpleNamespace(pid=12345)

    monkeypatch.setattr(bench.subprocess, "Popen", popen)
    monkeypatch.setattr(bench.os, "wait4", lambda pid, opts: (pid, 0, SimpleNamespace(
        ru_maxrss=3 * 2**20)))
    for src, want in (({"tf1_checkpoint": "/ckpt/model"}, ["--tf1-checkpoint", "/ckpt/model"]),
                      ({"no_pretrain": True}, ["--no-pretrain"]), ({"dataset": "mnist"}, [])):
        monkeypatch.setattr(bench, "autoencoder_source", lambda name, src=src: src)
        res = bench.end_to_end("mnist", 3, tmp_path / "c.npy", tmp_path / "e2e")
        cmd = launched[-1]
        assert cmd[cmd.index("mnist") + 1:cmd.index("--quiet")] == want
        assert cmd[-2:] == ["--epochs", "3"]
        assert res["exit_status"] == 0 and res["peak_rss_gib"] == 3.0
    bench.end_to_end("mnist", None, tmp_path / "c.npy", tmp_path / "e2e")
    assert "--epochs" not in launched[-1]


def test_bench_end_to_end_interrupted_kills_its_run(bench, monkeypatch, tmp_path):
    """Ctrl-C or SIGTERM while the end-to-end run.py works stops that run too, rather than
    leaving it training alone beside the next job."""
    import subprocess

    started = []
    real_popen = subprocess.Popen

    def popen(cmd, **kwargs):
        started.append(real_popen([sys.executable, "-c", "import time; time.sleep(60)"]))
        return started[-1]

    def interrupted(pid, opts):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench.subprocess, "Popen", popen)
    monkeypatch.setattr(bench.os, "wait4", interrupted)
    monkeypatch.setattr(bench, "autoencoder_source", lambda name: {"dataset": name})
    with pytest.raises(KeyboardInterrupt):
        bench.end_to_end("mnist", 1, tmp_path / "c.npy", tmp_path / "e2e")
    try:
        assert started[0].poll() is not None, "run.py was left running"
    finally:
        started[0].kill()
        started[0].wait()


def test_bench_autoencoder_source_prefers_the_shipped_weights(bench, monkeypatch, tmp_path):
    from mesc_tf import sources

    h5 = tmp_path / "orl.h5"
    monkeypatch.setattr(sources, "pretrained_path", lambda name: h5)
    monkeypatch.setattr(bench, "_tf1_checkpoint", lambda name: tmp_path / "ckpt")
    assert bench.autoencoder_source("orl") == {"tf1_checkpoint": str(tmp_path / "ckpt")}
    h5.write_bytes(b"")
    assert bench.autoencoder_source("orl") == {"dataset": "orl"}
    h5.unlink()
    monkeypatch.setattr(bench, "_tf1_checkpoint", lambda name: None)
    assert bench.autoencoder_source("orl") == {"no_pretrain": True}


def test_bench_main_collects_the_children_and_keeps_a_partial_report(bench, monkeypatch,
                                                                     tmp_path):
    """main: --coef's C goes to the datasets it has one for; an existing --json is replaced with
    --force only (the committed ones are cited); a
    child that failed is reported as failed even if it wrote figures; the report, in a folder
    made for it, is kept when a benchmark failed (the error line points to it)."""
    from mesc_tf import cli, provenance

    monkeypatch.setattr(provenance, "machine", dict)
    monkeypatch.setattr(provenance, "versions", dict)
    cmds = []

    def run(cmd):
        cmds.append(cmd)
        name, out = cmd[cmd.index("--one") + 1], Path(cmd[cmd.index("--json") + 1])
        out.write_text(json.dumps({"dataset": name, "n": 1, "step_ms": {"off": 2.0},
                                   "ratio_mode": "off", "post": {}, "peak_rss_gib": 1.0}))
        return (1 if name == "eyaleb" else 0), None

    monkeypatch.setattr(bench, "_run_child", run)
    coefs = tmp_path / "coefs"
    coefs.mkdir()
    np.save(coefs / "orl.npy", np.eye(400, dtype=np.float32))  # ORL's n×n
    out = tmp_path / "bench.json"
    out.write_text("old")
    with pytest.raises(cli.MescError, match="bench.json already exists; .*--force"):
        bench.main(["--datasets", "orl", "--json", str(out)])
    assert out.read_text() == "old" and not cmds
    assert bench.main(["--datasets", "orl,coil20", "--coef", str(coefs), "--json",
                       str(out), "--force"]) == 0
    assert [c[c.index("--one") + 1] for c in cmds] == ["orl", "coil20"]
    assert cmds[0][-2:] == ["--coef-file", str(coefs / "orl.npy")]
    assert "--coef-file" not in cmds[1]
    assert [r["dataset"] for r in json.loads(out.read_text())["results"]] == ["orl", "coil20"]

    out = tmp_path / "new" / "bench.json"
    with pytest.raises(SystemExit) as e:
        cli.main_guard(lambda: bench.main(["--datasets", "orl,eyaleb", "--json", str(out)]),
                       bench.CLEANUP)
    assert e.value.code == 2
    results = json.loads(out.read_text())["results"]
    assert results[1] == {"dataset": "eyaleb", "error": "exit status 1"}


def test_bench_child_killed_by_a_signal_says_which(bench, monkeypatch, tmp_path, capsys):
    """A child the OOM killer ended has no error line of its own: the report said only "exit
    status -9" and pointed to errors "printed above". It names the signal, and for SIGKILL
    what to try."""
    from mesc_tf import provenance
    from mesc_tf.errors import MescError

    monkeypatch.setattr(provenance, "machine", dict)
    monkeypatch.setattr(provenance, "versions", dict)
    monkeypatch.setattr(bench, "_run_child", lambda cmd: (-signal.SIGKILL, None))
    out = tmp_path / "bench.json"
    with pytest.raises(MescError, match="1 benchmark"):
        bench.main(["--datasets", "mnist", "--json", str(out)])
    error = json.loads(out.read_text())["results"][0]["error"]
    assert error.startswith("killed by SIGKILL (out of memory?") and "--no-original" in error
    assert "mnist   error: killed by SIGKILL" in capsys.readouterr().out
    assert bench._failure(-signal.SIGSEGV) == "killed by SIGSEGV"
    assert "--no-original" not in bench._failure(-signal.SIGKILL, original=False)
    assert bench._failure(3) == "exit status 3"


def test_post_memory_prints_each_route_beside_what_the_estimate_counts(capsys):
    from mesc_tf import memory

    post_memory = load_script("benchmarks/post_memory.py", "post_memory_cli")
    post_memory.main(["--n", "60", "--clusters", "3"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["n 60, fast", "n 60, strict",
                                                     "n 60, reference"]
    assert f"counted: {memory.post_n2_bytes(60, 'fast')} n²" in lines[0]
