"""The fine-tuning step's XLA program, exported here and timed on a GPU machine without TensorFlow.

    python benchmarks/xla_step.py export --out .xla_steps               # here, with TensorFlow
    python benchmarks/xla_step.py time --dir .xla_steps --json OUT.json  # there, with JAX alone

(``.xla_steps`` is git-ignored; the device tool carries it when named in ``carry``.)

The machine lent for GPU checks has JAX and CUDA 13 but no TensorFlow, and nothing can be
installed there beyond what one call carries (64 MiB; TensorFlow's wheel alone is 546 MB). So
``export`` traces MESCNet.train_step (the configured MESC-Net settings, the dataset's auto-encoder
as ``bench.py`` picks it) as TensorFlow compiles it with ``jit_compile=True``: one XLA program
that takes the images, every weight, C and the Adam slots, and returns the loss terms and every
updated variable. It writes, per dataset, that program (``<name>.hlo.pb``), the start values
(``<name>.npz``; constant arrays such as C's start and the empty Adam slots only as their
value), and what TensorFlow computed from them on this CPU over ``--steps`` steps: the loss
terms of each step and C after the last (``<name>.json``, ``<name>.ref.npz``).

``time`` (no TensorFlow) compiles each program with XLA for the first device JAX
sees, runs the same steps, feeding the updated variables back as the next step's inputs (the
program's input/output aliases say which output is which input), and reports: the largest
relative difference of the loss terms and of C from TensorFlow's, whether a second run gave
bit-identical results, the median milliseconds per step after warm-up (each step waited for,
as ``fit`` waits for one step per epoch), the "floor" (the three n×n by n×p products, C·Z and the
two gradients, at the same float32 precision) and the device's peak memory.

What this measures is the step's XLA program; TensorFlow on a GPU with ``jit_compile=True``
compiles the same kind of program (bridged for the GPU, which can choose other layouts).
Without ``jit_compile`` TensorFlow would run its own GPU kernels op by op: not measured here.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import DATASETS, _csv  # noqa: E402  (bench imports only the standard library)
# C after the last step is kept in as many whole rows as make up 2 MiB.
REF_VALUES = 2**19
HOST_OR_CUSTOM = {"custom-call", "infeed", "outfeed", "send", "send-done", "recv", "recv-done"}
# Folders made for --json, removed if the run then fails (cli.main_guard).
CLEANUP = []


# ---------------------------------------------------------------------------------------------
# export (here: TensorFlow and mesc_tf)
# ---------------------------------------------------------------------------------------------

def xla_protos():
    """XLA's protobuf modules (hlo_pb2, xla_data_pb2), as TensorFlow's wheels ship them."""
    from tensorflow.compiler.xla import xla_data_pb2
    from tensorflow.compiler.xla.service import hlo_pb2

    return hlo_pb2, xla_data_pb2


def _program_facts(module_pb: bytes) -> dict:
    """From the HLO module: which output is which updated variable ({output: parameter}), how
    many products and convolutions run at less than float32 precision (TF32 would show here),
    and any custom calls or host transfers (none should be in a step)."""
    hlo_pb2, xla_data_pb2 = xla_protos()
    module = hlo_pb2.HloModuleProto.FromString(module_pb)
    ops = [op for c in module.computations for op in c.instructions]
    products = [op for op in ops if op.opcode in ("dot", "convolution")]
    highest = xla_data_pb2.PrecisionConfig.HIGHEST
    return {
        "aliases": {e.output_shape_index[0]: e.parameter_number
                    for e in module.input_output_alias.entries},
        "products": len(products),
        "products_below_highest": sum(
            any(p != highest for p in op.precision_config.operand_precision) for op in products),
        "host_or_custom_ops": sorted({op.opcode for op in ops if op.opcode in HOST_OR_CUSTOM}),
    }


def _param_spec(name, value: np.ndarray, arrays: dict) -> dict:
    """A JSON entry for one parameter; constant arrays are stored as their value alone."""
    spec = {"name": name, "shape": list(value.shape), "dtype": str(value.dtype)}
    flat = value.reshape(-1)
    if flat.size > 1 and np.all(flat == flat[0]):
        spec["fill"] = flat[0].item()
    else:
        arrays[f"p{len(arrays)}"] = value
        spec["key"] = f"p{len(arrays) - 1}"
    return spec


def export_one(name: str, out: Path, steps: int, seed: int) -> dict:
    """Write ``name``'s step program, start values and TensorFlow's reference; returns the
    metadata written to ``<name>.json``."""
    import keras
    import tensorflow as tf

    from bench import autoencoder_source, load_or_random

    from mesc_tf import sources
    from mesc_tf.config import get_config
    from mesc_tf.files import atomic_file, atomic_write_text
    from mesc_tf.model import MESCNet
    from mesc_tf.training import adam, configure_runtime

    configure_runtime(seed, deterministic=False)  # Keras compiles nothing with XLA otherwise
    cfg = get_config(name)
    settings = cfg.mesc
    x, _, source, _ = load_or_random(name, seed)
    x = tf.convert_to_tensor(x, tf.float32)
    ae, ae_line = sources.get_autoencoder(cfg.arch, **autoencoder_source(name))
    model = MESCNet(ae, int(x.shape[0]), settings)
    model(x)
    model.compile(optimizer=adam(settings.lr))
    model.optimizer.build(model.trainable_variables)
    step = tf.function(model.train_step, jit_compile=True)  # what fit compiles per step

    # `time` takes a dataset as exported once its .json exists: that file goes first and comes
    # back last, so an interrupted export never pairs new files with an old .json.
    (out / f"{name}.json").unlink(missing_ok=True)
    concrete = step.get_concrete_function(x)
    module_pb = step.experimental_get_compiler_ir(x)(stage="hlo_serialized")
    with atomic_file(out / f"{name}.hlo.pb", "wb") as f:
        f.write(module_pb)

    # The program's parameters: the images, then the captured variables in capture order.
    def handle(v):
        return (v.value if isinstance(v, keras.Variable) else v).handle

    variables = {id(handle(v)): v for v in list(model.variables) + list(model.optimizer.variables)}
    captured = [variables[id(c)] for c in concrete.captured_inputs]
    arrays: dict = {}
    params = [_param_spec("x", x.numpy(), arrays)]
    params += [_param_spec(v.path, np.asarray(v.numpy()), arrays) for v in captured]
    coef_param = next(i for i, p in enumerate(params) if p["name"].endswith("self_expression/coef"))
    with atomic_file(out / f"{name}.npz", "wb") as f:
        np.savez_compressed(f, **arrays)

    terms = sorted(concrete.structured_outputs)  # its first outputs: tf.nest sorts dict keys
    losses = []
    for _ in range(steps):
        values = step(x)
        losses.append([float(values[k]) for k in terms])
    rows = min(int(x.shape[0]), REF_VALUES // int(x.shape[0]))
    with atomic_file(out / f"{name}.ref.npz", "wb") as f:
        np.savez_compressed(f, coef=model.coef.numpy()[:rows])
    facts = _program_facts(module_pb)
    aliases = facts.pop("aliases")
    coef_output = next(o for o, p in aliases.items() if p == coef_param)
    meta = {
        "dataset": name, "n": int(x.shape[0]), "latent_dim": int(np.prod(ae.latent_shape)),
        "data": source, "autoencoder": ae_line, "settings": settings.to_dict(),
        "tensorflow": tf.__version__, "params": params, "aliases": aliases,
        "terms": terms, "coef_output": coef_output, "steps": steps, "tf_losses": losses,
        "tf_coef_rows": rows, **facts,
    }
    atomic_write_text(out / f"{name}.json", json.dumps(meta, indent=1))
    return meta


def export(args):
    from mesc_tf.cli import IfEmpty, writable_dir

    # The folders made here go again if the export fails before writing into them.
    CLEANUP.extend(IfEmpty(p) for p in (Path(args.out), *Path(args.out).parents)
                   if not p.exists())
    out = writable_dir(args.out, "--out")
    for name in args.datasets:
        t = time.perf_counter()
        meta = export_one(name, out, args.steps, args.seed)
        size = sum(f.stat().st_size for f in out.glob(f"{name}.*")) / 2**20
        print(f"{name}: n {meta['n']}, {len(meta['params'])} parameters, {meta['data']} data, "
              f"{meta['products']} products/convolutions ({meta['products_below_highest']} below "
              f"float32 precision), host transfers or custom calls: "
              f"{', '.join(meta['host_or_custom_ops']) or 'none'}; {size:.1f} MiB, "
              f"{time.perf_counter() - t:.0f} s", flush=True)


# ---------------------------------------------------------------------------------------------
# time (there: JAX alone)
# ---------------------------------------------------------------------------------------------

def _without_copies(mlir_bytecode: bytes) -> str:
    """The module as text with its ``mhlo.copy`` ops dropped: the HLO importer turns the copies
    TensorFlow puts on returned variables into ``mhlo.copy``, which jaxlib 0.11's compiler
    refuses ("failed to legalize operation 'mhlo.copy'"). A copy of a value is that value."""
    from jax._src.interpreters.mlir import make_ir_context
    from jax._src.lib.mlir import ir

    with make_ir_context() as ctx:
        ctx.allow_unregistered_dialects = True  # mhlo is not among jax's dialects
        module = ir.Module.parse(mlir_bytecode)
        copies = []

        def visit(op):
            if op.name == "mhlo.copy":
                copies.append(op)
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
        for op in copies:
            op.results[0].replace_all_uses_with(op.operands[0])
            op.erase()
        return str(module)


def _compile(module_pb: bytes, device):
    """The HLO module compiled for ``device`` by the XLA inside jaxlib."""
    from jax._src.lib import xla_client as xc

    mlir = _without_copies(xc._xla.mlir.hlo_to_stablehlo(module_pb))
    return device.client.compile_and_load(mlir, xc.DeviceList((device,)), xc.CompileOptions())


class Program:
    """One exported step, compiled for ``device``, run with its variables fed back."""

    def __init__(self, directory: Path, name: str, device):
        import jax

        self.meta = json.loads((directory / f"{name}.json").read_text())
        self.device = device
        self.exe = _compile((directory / f"{name}.hlo.pb").read_bytes(), device)
        stored = np.load(directory / f"{name}.npz")

        def value(spec):
            if "key" in spec:
                return stored[spec["key"]]
            return np.full(spec["shape"], spec["fill"], dtype=spec["dtype"])

        self.start = [value(p) for p in self.meta["params"]]
        self.put = lambda v: jax.device_put(v, device)
        self.aliases = {int(o): p for o, p in self.meta["aliases"].items()}

    def run(self, steps, args=None):
        """Run ``steps`` steps; (per-step loss terms, per-step seconds, final arguments).
        A list ``args`` is updated in place, so that no earlier step's arrays stay held."""
        args = args if args is not None else [self.put(v) for v in self.start]
        losses, seconds = [], []
        for _ in range(steps):
            t = time.perf_counter()
            outs = [o[0] for o in self.exe.execute_sharded(args)
                    .disassemble_into_single_device_arrays()]
            for o in outs:
                o.block_until_ready()
            seconds.append(time.perf_counter() - t)
            losses.append([float(outs[i]) for i in range(len(self.meta["terms"]))])
            for o, p in self.aliases.items():
                args[p] = outs[o]
        return losses, seconds, args


def _floor_ms(n, p, device, warmup=3, repeats=10):
    """C·Z, G·Zᵀ and Cᵀ·G for n×n C and n×p Z, G at float32 (no TF32), in one program."""
    import jax
    import jax.numpy as jnp

    hi = jax.lax.Precision.HIGHEST
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    c = jax.device_put(jax.random.uniform(keys[0], (n, n), jnp.float32), device)
    z = jax.device_put(jax.random.uniform(keys[1], (n, p), jnp.float32), device)
    g = jax.device_put(jax.random.uniform(keys[2], (n, p), jnp.float32), device)
    products = jax.jit(lambda c, z, g: (jnp.dot(c, z, precision=hi), jnp.dot(g, z.T, precision=hi),
                                        jnp.dot(c.T, g, precision=hi)))
    times = []
    for i in range(warmup + repeats):
        t = time.perf_counter()
        jax.block_until_ready(products(c, z, g))
        if i >= warmup:
            times.append(time.perf_counter() - t)
    return 1000 * float(np.median(times))


def time_one(directory: Path, name: str, device, warmup: int, repeats: int) -> dict:
    t = time.perf_counter()
    prog = Program(directory, name, device)
    meta = prog.meta
    compile_s = time.perf_counter() - t
    n_ref = meta["steps"]
    coef_param = prog.aliases[meta["coef_output"]]
    losses, _, args = prog.run(n_ref)
    coef = np.asarray(args[coef_param])
    # Timed on from the first run's end, while only its variables are on the device: the peak
    # counts one set of C, Adam slots and weights, not a second run's as well.
    _, seconds, _ = prog.run(warmup + repeats, args)
    stats = device.memory_stats() or {}
    del args
    losses_again, _, args_again = prog.run(n_ref)
    coef_again = np.asarray(args_again[coef_param])
    del args_again
    rows = meta["tf_coef_rows"]
    ref = np.load(directory / f"{name}.ref.npz")["coef"]
    ref_change = ref - prog.start[coef_param][:rows]
    tf_losses = np.asarray(meta["tf_losses"])
    loss_rel = (np.abs(np.asarray(losses) - tf_losses) / np.abs(tf_losses)).max(axis=0)
    return {
        "dataset": name, "n": meta["n"], "data": meta["data"], "compile_s": round(compile_s, 2),
        "step_ms": round(1000 * float(np.median(seconds[warmup:])), 3),
        "steps_ms_all": [round(1000 * s, 3) for s in seconds],
        "floor_ms": round(_floor_ms(meta["n"], meta["latent_dim"], device), 3),
        "loss_terms_max_rel_diff_vs_tf_cpu": dict(zip(meta["terms"], map(float, loss_rel))),
        # relative to how far C moved in those steps, not to C itself
        "coef_change_rel_diff_vs_tf_cpu": float(np.linalg.norm(coef[:rows] - ref)
                                                / np.linalg.norm(ref_change)),
        "compared_steps": n_ref, "coef_rows_compared": rows,
        "bitwise_repeatable": bool(np.array_equal(coef, coef_again)
                                   and losses == losses_again),
        # The process's high-water mark so far: the datasets run in one process, the largest
        # last by default.
        "peak_device_bytes": stats.get("peak_bytes_in_use"),
    }


def time_all(args):
    import jax

    from mesc_tf.files import atomic_write_text

    jax.config.update("jax_enable_x64", True)  # Keras' step counter is int64
    device = jax.devices()[0]
    # Written after each dataset, so that a run that fails keeps what it finished: "complete"
    # says whether every dataset asked for is in it.
    report = {"command": " ".join(["benchmarks/xla_step.py", *sys.argv[1:]]),
              "device": f"{device.platform}: {device.device_kind}", "jax": jax.__version__,
              "warmup": args.warmup, "repeats": args.repeats,
              "datasets_requested": list(args.datasets), "complete": False, "datasets": []}
    print(report["device"], "jax", jax.__version__, flush=True)
    for name in args.datasets:
        r = time_one(Path(args.dir), name, device, args.warmup, args.repeats)
        report["datasets"].append(r)
        print(f"{name:7} n {r['n']:5}  step {r['step_ms']:8.3f} ms  floor {r['floor_ms']:7.3f} ms  "
              f"compile {r['compile_s']:5.1f} s  loss terms vs TF "
              f"{max(r['loss_terms_max_rel_diff_vs_tf_cpu'].values()):.1e}  "
              f"ΔC vs TF {r['coef_change_rel_diff_vs_tf_cpu']:.1e}  "
              f"repeatable {r['bitwise_repeatable']}  "
              f"peak {(r['peak_device_bytes'] or 0) / 2**30:.2f} GiB", flush=True)
        if args.json:
            atomic_write_text(args.json, json.dumps(report, indent=1))
    report["complete"] = True
    if args.json:
        atomic_write_text(args.json, json.dumps(report, indent=1))


def parse_args(argv=None):
    from mesc_tf import cli  # no TensorFlow: the GPU machine has none
    from mesc_tf.config import DATASETS as KNOWN

    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])  # one-line errors
    sub = p.add_subparsers(dest="command", required=True, parser_class=cli.ArgumentParser)
    e = sub.add_parser("export", help="write each dataset's step program and references")
    e.add_argument("--out", required=True, help="folder for the exported files")
    e.add_argument("--datasets", type=_csv(tuple(KNOWN)), default=list(DATASETS),
                   help=f"comma-separated (default {','.join(DATASETS)})")
    e.add_argument("--steps", type=cli.at_least(1), default=3,
                   help="steps TensorFlow runs as the reference")
    e.add_argument("--seed", type=cli.seed_arg, default=0)
    t = sub.add_parser("time", help="compile and time the exported programs with JAX")
    t.add_argument("--dir", required=True, help="folder written by export")
    t.add_argument("--datasets", type=_csv(tuple(KNOWN)),
                   help="comma-separated (default: every dataset exported in --dir)")
    t.add_argument("--warmup", type=cli.at_least(0), default=5)
    t.add_argument("--repeats", type=cli.at_least(1), default=50)
    t.add_argument("--json", help="write the report here (after each dataset)")
    t.add_argument("--force", action="store_true", help="overwrite an existing --json file")
    args = p.parse_args(argv)
    parser = e if args.command == "export" else t
    if args.command == "export" and Path(args.out).exists() and not Path(args.out).is_dir():
        parser.error(f"--out {args.out} is a file; give a folder for the exported programs")
    if args.command == "time":
        folder = Path(args.dir)
        names = args.datasets or [d for d in KNOWN if (folder / f"{d}.json").is_file()]
        missing = [d for d in names if not (folder / f"{d}.json").is_file()]
        if not names or missing:
            parser.error(f"no exported program for {', '.join(missing) or 'any dataset'} in "
                         f"{folder}; write it with `python benchmarks/xla_step.py export --out "
                         f"{folder}`")
        args.datasets = names
        try:
            import jax  # noqa: F401
        except ImportError:
            parser.error("`time` needs JAX (pip install jax, or jax[cuda13] for a GPU)")
    return args


def main(argv=None):
    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    args = parse_args(argv)
    if args.command == "export":
        export(args)
    else:
        from mesc_tf import cli

        if args.json:  # before compiling, not after (nor in parse_args: a parse makes nothing)
            CLEANUP.extend(cli.prepare_out_file(args.json, force=args.force, what="--json file"))
        time_all(args)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from mesc_tf import cli

    sys.exit(cli.main_guard(main, CLEANUP))
