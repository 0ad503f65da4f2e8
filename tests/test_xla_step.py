"""In-process checks of benchmarks/xla_step.py: its bookkeeping (program facts, stored start
values, the figures `time` reports, its options) with the heavy parts replaced by fakes, and one
small export timed through JAX on this CPU (skipped where JAX is not installed), so that `time`,
which otherwise runs only on the GPU machine, is exercised here."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from scripts import load_script  # tests/scripts.py

REPO = Path(__file__).resolve().parents[1]


def _load():
    return load_script("benchmarks/xla_step.py", "xla_step")


@pytest.fixture
def xla_step(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    mod = _load()
    monkeypatch.setattr(mod, "CLEANUP", [])
    return mod


# ---------------------------------------------------------------------------------------------
# export's bookkeeping
# ---------------------------------------------------------------------------------------------

def test_program_facts_counts_products_precision_and_host_ops(xla_step):
    """_program_facts maps each aliased output to its parameter, counts dots and convolutions,
    those with any operand below float32 precision, and names custom calls and host transfers."""
    hlo_pb2, xla_data_pb2 = xla_step.xla_protos()
    highest, default = xla_data_pb2.PrecisionConfig.HIGHEST, xla_data_pb2.PrecisionConfig.DEFAULT
    module = hlo_pb2.HloModuleProto()
    comp = module.computations.add()
    for opcode, precision in (("dot", [highest, highest]), ("dot", [highest, highest]),
                              ("convolution", [highest, default]), ("add", []),
                              ("custom-call", []), ("send", []), ("parameter", [])):
        op = comp.instructions.add()
        op.opcode = opcode
        op.precision_config.operand_precision.extend(precision)
    for output, param in ((4, 2), (5, 7)):
        entry = module.input_output_alias.entries.add()
        entry.output_shape_index.append(output)
        entry.parameter_number = param
    facts = xla_step._program_facts(module.SerializeToString())
    assert facts == {"aliases": {4: 2, 5: 7}, "products": 3, "products_below_highest": 1,
                     "host_or_custom_ops": ["custom-call", "send"]}


def test_param_spec_stores_constants_as_their_value(xla_step):
    """A constant array is stored as its value alone; any other (a one-element one included)
    under the next free key of the .npz, which its spec names."""
    arrays = {}
    varied = np.arange(6, dtype=np.float32).reshape(2, 3)
    one = np.asarray(3, np.int64)
    specs = [xla_step._param_spec("a", varied, arrays),
             xla_step._param_spec("b", np.full((2, 2), 0.5, np.float32), arrays),
             xla_step._param_spec("c", one, arrays),
             xla_step._param_spec("d", varied[::-1], arrays)]
    assert specs[1] == {"name": "b", "shape": [2, 2], "dtype": "float32", "fill": 0.5}
    assert [s.get("key") for s in specs] == ["p0", None, "p1", "p2"]
    assert specs[2]["shape"] == [] and specs[2]["dtype"] == "int64"
    for spec, value in zip([specs[0], specs[2], specs[3]], [varied, one, varied[::-1]]):
        np.testing.assert_array_equal(arrays[spec["key"]], value)


# ---------------------------------------------------------------------------------------------
# time's bookkeeping, with a fake program and device
# ---------------------------------------------------------------------------------------------

class _Out:
    """A fake device array: a value, and whether it was waited for."""

    def __init__(self, value, waited):
        self.value, self.waited = value, waited

    def block_until_ready(self):
        self.waited.append(self)
        return self

    def __float__(self):
        return float(self.value)


def test_program_run_feeds_updated_variables_back(xla_step):
    """Program.run reads the loss terms from the first outputs, waits for every output of each
    step, and passes each aliased output as its parameter in the next step."""
    waited, seen = [], []

    def execute_sharded(args):  # outputs: two loss terms, then x + v, the update of v
        seen.append(list(args))
        x, v = float(args[0]), float(args[1])
        outs = [_Out(10 * v, waited), _Out(-v, waited), _Out(x + v, waited)]
        return SimpleNamespace(disassemble_into_single_device_arrays=lambda: [[o] for o in outs])

    prog = xla_step.Program.__new__(xla_step.Program)
    prog.meta = {"terms": ["a", "b"]}
    prog.exe = SimpleNamespace(execute_sharded=execute_sharded)
    prog.start, prog.put, prog.aliases = [2.0, 1.0], lambda v: v, {2: 1}
    losses, seconds, args = prog.run(3)
    assert losses == [[10.0, -1.0], [30.0, -3.0], [50.0, -5.0]]
    assert len(seconds) == 3 and len(waited) == 9
    assert [a[0] for a in seen] == [2.0] * 3 and float(args[1]) == 7.0
    assert prog.start == [2.0, 1.0]  # the start values are not overwritten


def test_time_one_figures(xla_step, tmp_path, monkeypatch):
    """time_one: a reference run from the start values, the timed steps from its end (peak
    memory read then, before a second reference run puts another set of variables on the
    device), the second reference run; the loss terms' largest difference per term relative to
    TF's, C's difference relative to how far TF moved its compared rows, bit-identical only if
    both C and the losses repeat, the median of the steps after warm-up, the floor for n×n by
    n×p."""
    n, rows = 4, 2
    start_c = np.zeros((n, n), np.float32)
    start_c[:rows] = 1.0  # the compared rows start at 1, the others at 0
    ref = np.full((rows, n), 3.0, np.float32)  # TF moved them by 2
    np.savez(tmp_path / "orl.ref.npz", coef=ref)
    final = np.full((n, n), 100.0, np.float32)
    final[:rows] = 3.2  # 0.2 from TF's: a tenth of its change
    meta = {"n": n, "latent_dim": 3, "data": "random", "steps": 2, "terms": ["a", "b"],
            "tf_losses": [[1.0, 2.0], [2.0, 4.0]], "tf_coef_rows": rows, "coef_output": 2}
    calls = []

    class FakeProgram:
        def __init__(self, directory, name, device):
            self.meta, self.start, self.aliases = meta, [np.zeros(1), start_c], {2: 1}

        def run(self, steps, args=None):
            calls.append((steps, args))
            if len(calls) == 1:
                return [[1.1, 2.6], [2.4, 4.0]], [1.0, 1.0], ["x", final]
            if len(calls) == 3:  # the same losses, another C
                return [[1.1, 2.6], [2.4, 4.0]], [1.0, 1.0], ["x", final + 1]
            args[1] = args[1] + 50  # the timed steps go on from the first run's C
            return None, [0.005, 0.001, 0.002, 0.010], args

    floors, peaks = [], iter([7, 9])
    monkeypatch.setattr(xla_step, "Program", FakeProgram)
    monkeypatch.setattr(xla_step, "_floor_ms", lambda n, p, device: floors.append((n, p)) or 1.5)
    device = SimpleNamespace(memory_stats=lambda: {"peak_bytes_in_use": next(peaks)})
    r = xla_step.time_one(tmp_path, "orl", device, 1, 3)
    assert [c[0] for c in calls] == [2, 4, 2] and calls[0][1] is None and calls[2][1] is None
    assert calls[1][1][1] is not final  # the timed run had the first run's list
    assert r["step_ms"] == 2.0 and r["steps_ms_all"] == [5.0, 1.0, 2.0, 10.0]
    assert floors == [(4, 3)] and r["floor_ms"] == 1.5
    assert r["loss_terms_max_rel_diff_vs_tf_cpu"] == pytest.approx({"a": 0.2, "b": 0.3})
    assert r["coef_change_rel_diff_vs_tf_cpu"] == pytest.approx(0.1, rel=1e-5)
    assert r["bitwise_repeatable"] is False  # C after the first run was read before timing
    assert r["peak_device_bytes"] == 7  # read right after the timed steps
    assert r["compared_steps"] == 2 and r["coef_rows_compared"] == rows


def test_floor_ms_is_three_float32_products(xla_step, monkeypatch):
    """_floor_ms times C·Z, G·Zᵀ and Cᵀ·G, each at HIGHEST precision (no TF32), and reports the
    median of the calls after warm-up, in ms."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    products = []
    dot = jnp.dot

    def recording_dot(a, b, precision=None):
        products.append((np.asarray(a), np.asarray(b), precision))
        return dot(a, b, precision=precision)

    monkeypatch.setattr(jnp, "dot", recording_dot)
    # A warm-up call reads the clock once (at its start), then timed calls of 1 s, 2 s and 6 s.
    clock = iter([0, 10, 11, 11, 13, 13, 19])
    monkeypatch.setattr(xla_step, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    with jax.disable_jit():  # the products' operands as values
        ms = xla_step._floor_ms(4, 3, jax.devices()[0], warmup=1, repeats=3)
    assert ms == 2000.0
    (c, z, p1), (g, zt, p2), (ct, g2, p3) = products[:3]
    assert (c.shape, z.shape, g.shape) == ((4, 4), (4, 3), (4, 3))
    np.testing.assert_array_equal(zt, z.T)
    np.testing.assert_array_equal(ct, c.T)
    np.testing.assert_array_equal(g2, g)
    assert p1 == p2 == p3 == jax.lax.Precision.HIGHEST


def _result(name):
    return {"dataset": name, "n": 4, "step_ms": 1.0, "floor_ms": 0.5, "compile_s": 0.1,
            "loss_terms_max_rel_diff_vs_tf_cpu": {"a": 0.0}, "coef_change_rel_diff_vs_tf_cpu": 0.0,
            "bitwise_repeatable": True, "peak_device_bytes": None}


def test_time_all_writes_the_report_after_each_dataset(xla_step, tmp_path, monkeypatch):
    """The --json report is rewritten after each dataset, so a run that fails on a later one
    keeps the earlier results, and it names the datasets asked for and says it is not
    complete, so that it is not taken for the whole run; x64 is on before the first program
    runs (Keras' step counter is int64). A stand-in JAX module: this runs where JAX is not
    installed too."""
    import types

    flags = {"jax_enable_x64": False}
    fake = types.ModuleType("jax")
    fake.__version__ = "0"
    fake.config = SimpleNamespace(update=flags.__setitem__, read=flags.__getitem__)
    fake.devices = lambda: [SimpleNamespace(platform="gpu", device_kind="test")]
    monkeypatch.setitem(sys.modules, "jax", fake)
    x64 = []

    def time_one(directory, name, device, warmup, repeats):
        x64.append(flags["jax_enable_x64"])
        if name == "coil20":
            raise RuntimeError("out of memory")
        return _result(name)

    monkeypatch.setattr(xla_step, "time_one", time_one)
    out = tmp_path / "r.json"
    args = SimpleNamespace(dir=str(tmp_path), datasets=["orl", "coil20"], warmup=2, repeats=3,
                           json=str(out))
    with pytest.raises(RuntimeError):
        xla_step.time_all(args)
    report = json.loads(out.read_text())
    assert [r["dataset"] for r in report["datasets"]] == ["orl"]
    assert (report["warmup"], report["repeats"]) == (2, 3) and x64 == [True, True]
    assert report["datasets_requested"] == ["orl", "coil20"] and report["complete"] is False
    args.datasets = ["orl"]
    xla_step.time_all(args)
    report = json.loads(out.read_text())
    assert report["complete"] is True and [r["dataset"] for r in report["datasets"]] == ["orl"]
    assert report["command"].startswith("benchmarks/xla_step.py")


def test_time_options(xla_step, tmp_path, monkeypatch):
    """`time` defaults to every dataset exported in --dir (in the known order), refuses
    --repeats 0 (no step to take the median of); parsing makes no --json folder: main makes
    it, before the timing, and registers it for removal should the run fail (main_guard
    removes it). A stand-in JAX module: this runs where JAX is not installed too."""
    import types

    monkeypatch.setitem(sys.modules, "jax", types.ModuleType("jax"))  # `import jax` works
    for name in ("mnist", "orl"):
        (tmp_path / f"{name}.json").write_text("{}")
    assert xla_step.parse_args(["time", "--dir", str(tmp_path)]).datasets == ["orl", "mnist"]
    with pytest.raises(SystemExit) as e:
        xla_step.parse_args(["time", "--dir", str(tmp_path), "--repeats", "0"])
    assert e.value.code == 2
    new = tmp_path / "new" / "deeper"
    argv = ["time", "--dir", str(tmp_path), "--json", str(new / "r.json")]
    assert xla_step.parse_args(argv).datasets == ["orl", "mnist"]
    assert not (tmp_path / "new").exists() and not xla_step.CLEANUP
    timed = []
    monkeypatch.setattr(xla_step, "time_all", lambda args: timed.append(new.is_dir()))
    xla_step.main(argv)
    assert timed == [True]
    from mesc_tf import cli

    cli._remove(xla_step.CLEANUP)  # what main_guard does when the run fails
    assert not (tmp_path / "new").exists()


def test_failed_export_removes_the_folders_it_made_while_empty(xla_step, tmp_path,
                                                              monkeypatch):
    """An export that fails before writing (a bad data file) leaves no empty --out folder
    behind; one that wrote a dataset's files keeps them (`time` reads a set once its .json
    is there)."""
    from mesc_tf import cli
    from mesc_tf.errors import MescError

    def bad_data(name, out, steps, seed):
        raise MescError("cannot read the data")

    monkeypatch.setattr(xla_step, "export_one", bad_data)
    out = tmp_path / "new" / "deeper"
    with pytest.raises(SystemExit) as e:
        cli.main_guard(lambda: xla_step.main(["export", "--out", str(out), "--datasets", "orl"]),
                       xla_step.CLEANUP)
    assert e.value.code == 2 and list(tmp_path.iterdir()) == []

    def half_written(name, out, steps, seed):
        (out / f"{name}.hlo.pb").write_bytes(b"")
        raise MescError("disk full")

    monkeypatch.setattr(xla_step, "export_one", half_written)
    with pytest.raises(SystemExit):
        cli.main_guard(lambda: xla_step.main(["export", "--out", str(out), "--datasets", "orl"]),
                       xla_step.CLEANUP)
    assert [f.name for f in out.iterdir()] == ["orl.hlo.pb"]


def test_time_replaces_an_existing_json_with_force_only(xla_step, tmp_path, monkeypatch,
                                                        capsys):
    """As bench.py's --json: an existing report is refused in one line unless --force."""
    import types

    from mesc_tf import cli

    (tmp_path / "orl.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "jax", types.ModuleType("jax"))  # `import jax` works
    out = tmp_path / "report.json"
    out.write_text("old")
    argv = ["time", "--dir", str(tmp_path), "--json", str(out)]
    timed = []
    monkeypatch.setattr(xla_step, "time_all", timed.append)
    with pytest.raises(SystemExit) as e:
        cli.main_guard(lambda: xla_step.main(argv), xla_step.CLEANUP)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "already exists" in err, err
    assert "--force" in err and out.read_text() == "old" and not timed
    xla_step.main([*argv, "--force"])
    assert timed[0].force


def test_time_without_jax_writes_nothing(xla_step, tmp_path, monkeypatch):
    """Without JAX, `time` stops with one line before making --json's missing folders: that
    error (a SystemExit) is not one main_guard cleans up after."""
    (tmp_path / "orl.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "jax", None)  # `import jax` raises ImportError
    new = tmp_path / "new"
    with pytest.raises(SystemExit) as e:
        xla_step.parse_args(["time", "--dir", str(tmp_path), "--json", str(new / "r.json")])
    assert e.value.code == 2 and not new.exists()


def test_without_copies_drops_mhlo_copy(xla_step):
    """The copies TensorFlow puts on returned variables are dropped, their uses reading the
    copied value (jaxlib's compiler refuses mhlo.copy)."""
    pytest.importorskip("jax")
    text = ('func.func @main(%arg0: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {\n'
            '  %0 = "mhlo.copy"(%arg0) : (tensor<2xf32>) -> tensor<2xf32>\n'
            '  %1 = stablehlo.add %0, %0 : tensor<2xf32>\n'
            '  return %0, %1 : tensor<2xf32>, tensor<2xf32>\n}\n')
    out = xla_step._without_copies(text)
    assert "mhlo.copy" not in out
    assert "stablehlo.add %arg0, %arg0" in out and "return %arg0, %" in out


# ---------------------------------------------------------------------------------------------
# one small export, timed through JAX on this CPU
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_export(tmp_path_factory):
    """ORL's step for its first 40 (random) images, 2 reference steps, C's first 10 rows kept;
    (the folder, the auto-encoder the step was built on)."""
    pytest.importorskip("jax")
    out = tmp_path_factory.mktemp("xla_steps")
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(REPO / "benchmarks"))
        mp.setenv("MESC_DATA_DIR", str(out / "no-data"))
        mod = _load()
        import bench

        from mesc_tf import sources

        load, get_ae, made = bench.load_or_random, sources.get_autoencoder, []
        mp.setattr(bench, "load_or_random", lambda name, seed: (
            lambda x, y, s, f: (x[:40], y[:40], s, f))(*load(name, seed)))
        mp.setattr(sources, "get_autoencoder",
                   lambda *a, **k: made.append(get_ae(*a, **k)) or made[-1])
        mp.setattr(mod, "REF_VALUES", 400)
        from tensorflow.python.framework import config as tf_config  # no public getter

        deterministic = tf_config.is_op_determinism_enabled()
        mod.export_one("orl", out, 2, 0)  # switches op determinism off, as XLA needs
        if deterministic:  # for the tests this worker runs next
            tf_config.enable_op_determinism()
    return out, made[0][0]


def test_xla_step_time_runs_the_export_on_this_cpu(small_export, tmp_path):
    """`time` on an export, through JAX on this CPU: the program compiles, its variables fed
    back give TensorFlow's loss terms and C (the compared rows), a second run repeats bit for
    bit, and the report counts the steps asked for."""
    out, ae = small_export
    meta = json.loads((out / "orl.json").read_text())
    assert meta["steps"] == len(meta["tf_losses"]) == 2 and meta["tf_coef_rows"] == 10
    assert meta["latent_dim"] == int(np.prod(ae.latent_shape))
    assert meta["terms"] == sorted(meta["terms"])  # the program returns the dict's values sorted
    report_file = tmp_path / "report.json"
    jax = pytest.importorskip("jax")
    before = jax.config.read("jax_enable_x64")
    sys_path = list(sys.path)
    try:
        _load().main(["time", "--dir", str(out), "--warmup", "1", "--repeats", "2",
                      "--json", str(report_file)])
    finally:
        jax.config.update("jax_enable_x64", before)
        sys.path[:] = sys_path
    (r,) = json.loads(report_file.read_text())["datasets"]
    assert r["n"] == 40 and r["compared_steps"] == 2 and r["coef_rows_compared"] == 10
    assert set(r["loss_terms_max_rel_diff_vs_tf_cpu"]) == set(meta["terms"])
    assert max(r["loss_terms_max_rel_diff_vs_tf_cpu"].values()) < 1e-4, r
    assert r["coef_change_rel_diff_vs_tf_cpu"] < 1e-3, r
    assert r["bitwise_repeatable"] is True
    assert len(r["steps_ms_all"]) == 3 and r["step_ms"] > 0 and r["floor_ms"] > 0
