"""Unit tests of benchmarks/conv_routes.py, spectral_routes.py and spectral_sklearn.py beyond
the smoke runs in test_bench.py: the convolution rewrites against TensorFlow's own ops on kernel
and input sizes the models do not use, the timing and comparison helpers, and what each
script's main passes on and writes (its slow parts faked, so nothing here depends on timing)."""

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
from scripts import load_script  # tests/scripts.py

REPO = Path(__file__).resolve().parents[1]


def _load(name):
    return load_script(f"benchmarks/{name}.py", name)


def test_parse_args_makes_no_json_folder(tmp_path):
    """parse_args only parses: --json's missing folders are made by main, before the work.
    (test_documented_commands_parse left /tmp/s21 and /tmp/s34 behind, the folders of the
    README's conv_routes.py --json commands.)"""
    coef = tmp_path / "c.npy"
    np.save(coef, np.eye(3, dtype=np.float32))
    out = tmp_path / "new" / "deeper" / "r.json"
    for name, argv in (("conv_routes", []),
                       ("spectral_routes", ["--coef", str(coef), "--clusters", "2", "--thr",
                                            "0.1"]),
                       ("svd_solvers", ["--coef", str(coef), "--clusters", "2", "--thr", "0.1",
                                        "--subspace-dim", "1"])):
        mod = _load(name)
        assert mod.parse_args([*argv, "--json", str(out)]).json == str(out)
        assert not (tmp_path / "new").exists() and not mod.CLEANUP, name


def test_an_existing_json_is_replaced_with_force_only(tmp_path, monkeypatch, capsys):
    """As bench.py's: an existing --json file (a committed one, say) stops the run in one line
    before the work, unless --force."""
    import mesc_tf.training
    from mesc_tf import cli
    from mesc_tf.postcluster import fast as pc_fast

    coef = tmp_path / "c.npy"
    np.save(coef, _blocks_C())
    monkeypatch.setattr(pc_fast, "SI_LU_MAX_N", 0)
    # conv_routes' main turns op determinism off: not for the tests this worker runs next
    monkeypatch.setattr(mesc_tf.training, "configure_runtime", lambda *a, **k: None)
    out = tmp_path / "old.json"
    for name, argv, work in (
            ("conv_routes", ["--datasets", "orl"], "layer_cases"),
            ("spectral_routes", ["--coef", str(coef), "--clusters", "5", "--thr", "0.2",
                                 "--settings", "4:8"], "time_route")):
        mod = _load(name)

        class Worked(Exception):
            pass

        def worked(*a, **k):
            raise Worked

        monkeypatch.setattr(mod, work, worked)
        out.write_text("old")
        with pytest.raises(SystemExit) as e:
            cli.main_guard(lambda: mod.main([*argv, "--json", str(out)]), mod.CLEANUP)
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count("\n") == 1, err
        assert "already exists" in err and "--force" in err and out.read_text() == "old", err
        with pytest.raises(Worked):  # --force: on to the work
            mod.main([*argv, "--json", str(out), "--force"])


# ---- conv_routes.py ----------------------------------------------------------------------


def test_conv_rewrites_match_tf_on_every_kernel_and_parity():
    """The three rewrites are general stride-2 'SAME' (transposed) convolutions, not only for
    the models' odd kernels on their sizes: kernels 1-5 (even ones fold with a zero tap; k = 1
    pads nothing) on even, odd, square and non-square inputs, outputs and col2im's kernel and
    input gradients against tf.nn.conv2d and tf.nn.conv2d_transpose."""
    import tensorflow as tf

    mod = _load("conv_routes")
    rng = np.random.default_rng(0)
    for k in (1, 2, 3, 4, 5):
        for size in ((1, 2), (4, 4), (5, 6), (7, 3)):
            half = tuple((s + 1) // 2 for s in size)
            x = tf.constant(rng.standard_normal((2, *size, 2)), tf.float32)
            w = tf.constant(rng.standard_normal((k, k, 2, 3)), tf.float32)
            want = tf.nn.conv2d(x, w, 2, "SAME")
            np.testing.assert_allclose(mod.conv_space_to_depth(x, w), want, atol=1e-5,
                                       err_msg=f"k {k}, {size}")
            y = tf.constant(rng.standard_normal((2, *half, 3)), tf.float32)
            wt = tf.constant(rng.standard_normal((k, k, 2, 3)), tf.float32)
            want = tf.nn.conv2d_transpose(y, wt, (2, *size, 2), 2, "SAME")
            np.testing.assert_allclose(mod.conv_transpose_sub_pixel(y, wt, size), want,
                                       atol=1e-5, err_msg=f"k {k}, {size}")
            if (k, size) not in ((1, (5, 6)), (2, (7, 3)), (4, (5, 6))):
                continue  # each is an XLA compilation; odd kernels: test_bench's run
            with tf.GradientTape(persistent=True) as tape:
                tape.watch([y, wt])
                got = mod.conv_transpose_col2im(y, wt, size)
                ref = tf.nn.conv2d_transpose(y, wt, (2, *size, 2), 2, "SAME")
                got_loss, ref_loss = (tf.reduce_sum(tf.sin(t)) for t in (got, ref))
            np.testing.assert_allclose(got, ref, atol=1e-5, err_msg=f"k {k}, {size}")
            for a, b in zip(tape.gradient(got_loss, [y, wt]), tape.gradient(ref_loss, [y, wt])):
                np.testing.assert_allclose(a, b, atol=1e-4, err_msg=f"k {k}, {size}")


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_median_ms_warms_up_once_then_takes_the_median_in_ms(monkeypatch):
    """_median_ms: one untimed warm-up call, then --repeats timed calls whose median (not mean)
    it returns in milliseconds."""
    mod = _load("conv_routes")
    clock = _Clock()
    monkeypatch.setattr(mod.time, "perf_counter", clock)
    durations = iter([0.5, 0.001, 0.004, 0.010])  # the warm-up first
    calls = []

    class Result:
        def numpy(self):
            return None

    def step():
        calls.append(1)
        clock.now += next(durations)
        return [Result()]

    assert mod._median_ms(step, 3) == pytest.approx(4.0)
    assert len(calls) == 4


def test_max_rel_compares_every_route_and_gradient_with_the_first():
    """_max_rel: every later route (not only the second) and every gradient (not only the
    output), each difference relative to the first route's largest entry."""
    mod = _load("conv_routes")
    first = [np.array([1.0, -2.0]), np.array([4.0])]
    grad_off = [np.array([1.0, -2.0]), np.array([5.0])]  # 1 / 4 of the first's; 1 / 5 of its own
    out_off = [np.array([1.0, -2.5]), np.array([4.0])]  # 0.5 / 2 of the first's; 0.5 / 2.5
    assert mod._max_rel([first, first]) == 0
    assert mod._max_rel([first, grad_off]) == pytest.approx(0.25)
    assert mod._max_rel([first, first, out_off]) == pytest.approx(0.25)


def _double_input_grad(route):
    """route with the same output and kernel gradient, but twice the input gradient."""
    import tensorflow as tf

    return lambda x, *rest: route(2 * x - tf.stop_gradient(x), *rest)


def _doubled(route):
    return lambda *args: 2 * route(*args)


def test_time_layer_checks_each_route_with_bias_and_input_gradient(monkeypatch):
    """time_layer: the stride-1 route of a decoder layer is the sub-pixel rewrite and col2im
    is timed beside it, the rewrites add the layer's bias, and the input's gradient is compared
    where asked for; a rewrite wrong in any of these shows in the largest difference."""
    import keras

    mod = _load("conv_routes")
    rng = np.random.default_rng(0)
    enc = keras.layers.Conv2D(3, 3, strides=2, padding="same", activation="relu")
    dec = keras.layers.Conv2DTranspose(2, 3, strides=2, padding="same", activation="relu")
    enc.build((None, 5, 6, 2))
    dec.build((None, 3, 3, 3))
    for layer in (enc, dec):
        layer.bias.assign(rng.uniform(0.5, 1.0, layer.bias.shape).astype(np.float32))
    x = rng.uniform(0, 1, (2, 5, 6, 2)).astype(np.float32)
    y = rng.uniform(0, 1, (2, 3, 3, 3)).astype(np.float32)

    times, rel = mod.time_layer(enc, x, (3, 3), True, 1, False)
    assert set(times) == {"keras", "stride1"} and rel < 1e-5
    times, rel = mod.time_layer(dec, y, (6, 6), True, 1, False)
    assert set(times) == {"keras", "stride1", "col2im"} and rel < 1e-5
    with monkeypatch.context() as m:
        m.setattr(mod, "conv_space_to_depth", _double_input_grad(mod.conv_space_to_depth))
        assert mod.time_layer(enc, x, (3, 3), False, 1, False)[1] < 1e-5
        assert mod.time_layer(enc, x, (3, 3), True, 1, False)[1] > 0.5
    for route in ("conv_transpose_sub_pixel", "conv_transpose_col2im"):
        with monkeypatch.context() as m:
            m.setattr(mod, route, _doubled(getattr(mod, route)))
            assert mod.time_layer(dec, y, (6, 6), True, 1, False)[1] > 0.5, route


def test_layer_cases_seeded_and_only_the_data_layer_without_input_gradient():
    """layer_cases: the same seed gives the same weights and inputs (the docstring's seeded
    he_normal), and every layer but the first encoder layer, whose input is data, asks for
    the input's gradient."""
    mod = _load("conv_routes")
    a, b = mod.layer_cases("orl", 2, 3), mod.layer_cases("orl", 2, 3)
    assert [c[0] for c in a] == ["enc_0", "enc_1", "enc_2", "dec_0", "dec_1", "dec_2"]
    assert [c[4] for c in a] == [False] + [True] * 5
    for ca, cb in zip(a, b):
        np.testing.assert_array_equal(ca[2], cb[2])
        np.testing.assert_array_equal(ca[1].kernel.numpy(), cb[1].kernel.numpy())


def test_time_autoencoder_runs_its_output_layer_by_col2im(monkeypatch):
    """time_autoencoder's second route computes the output layer by conv_transpose_col2im (a
    wrong col2im shows in the difference), not by the Keras layer again."""
    mod = _load("conv_routes")
    times, rel = mod.time_autoencoder("orl", 2, 0, 1, False)
    assert set(times) == {"keras", "col2im_output"} and rel < 1e-5
    monkeypatch.setattr(mod, "conv_transpose_col2im", _doubled(mod.conv_transpose_col2im))
    assert mod.time_autoencoder("orl", 2, 0, 1, False)[1] > 0.1


def test_conv_routes_main_passes_options_and_sums_layers(tmp_path, monkeypatch):
    """main (the timing faked): --seed, --jit and the dataset's size reach every layer and the
    auto-encoder, each row holds its own routes' times, and the per-dataset totals are the
    sums over the layers."""
    mod = _load("conv_routes")
    seen = []

    class Layer:
        filters = 4

    def layer_cases(name, n, seed):
        seen.append(("cases", name, n, seed))
        return [(f"l{i}", Layer(), np.zeros((n, 4, 4, 1)), (2, 2), i > 0) for i in range(3)]

    def time_layer(layer, x, out_size, input_grad, repeats, jit):
        seen.append(("layer", repeats, jit))
        scale = 1 + len([s for s in seen if s[0] == "layer"])
        return {"keras": 1.0 * scale, "stride1": 10.0 * scale}, 1e-7

    def time_autoencoder(name, n, seed, repeats, jit):
        seen.append(("ae", name, n, seed, repeats, jit))
        return {"keras": 3.0, "col2im_output": 2.0}, 2e-7

    monkeypatch.setattr(mod, "layer_cases", layer_cases)
    monkeypatch.setattr(mod, "time_layer", time_layer)
    monkeypatch.setattr(mod, "time_autoencoder", time_autoencoder)
    import mesc_tf.training  # op determinism stays on for the tests this worker runs next

    monkeypatch.setattr(mesc_tf.training, "configure_runtime", lambda *a, **k: None)
    from mesc_tf import provenance  # what bench.py records, from the same helper

    monkeypatch.setattr(provenance, "machine", lambda: {"cores": 2})
    monkeypatch.setattr(provenance, "versions", lambda: {"mesc_tf": "x"})
    out = tmp_path / "a folder" / "conv.json"  # a space: the recorded command quotes it
    argv = ["--datasets", "orl", "--seed", "7", "--jit", "--repeats", "3", "--json", str(out)]
    assert mod.main(argv) == 0
    assert seen == [("cases", "orl", 400, 7)] + [("layer", 3, True)] * 3 + [
        ("ae", "orl", 400, 7, 3, True)]
    report = json.loads(out.read_text())
    orl = report["datasets"]["orl"]
    assert [r["keras_ms"] for r in orl["layers"]] == [2.0, 3.0, 4.0]
    assert [r["stride1_ms"] for r in orl["layers"]] == [20.0, 30.0, 40.0]
    assert orl["keras_ms"] == 9.0 and orl["stride1_ms"] == 90.0 and orl["n"] == 400
    assert orl["autoencoder_keras_ms"] == 3.0 and orl["autoencoder_col2im_output_ms"] == 2.0
    assert orl["autoencoder_max_rel_diff"] == 2e-7
    assert report["jit"] is True and report["repeats"] == 3 and report["seed"] == 7
    assert shlex.split(report["command"]) == ["benchmarks/conv_routes.py", *argv]
    assert report["machine"] == {"cores": 2} and report["versions"] == {"mesc_tf": "x"}


def test_conv_routes_datasets_case_blind_and_once_each():
    """--datasets ORL is orl (as in bench.py), and a name given twice runs once: the report
    has one entry per dataset, so a second run replaced the first's figures there while both
    were printed."""
    mod = _load("conv_routes")
    assert mod.parse_args(["--datasets", "ORL, coil20,orl"]).datasets == ["orl", "coil20"]


def test_conv_routes_empty_datasets_is_one_line(capsys):
    """--datasets with no name in it stops with one line, as an unknown name does."""
    mod = _load("conv_routes")
    for value, needle in ((",", "(none given)"), ("foo", "unknown foo")):
        with pytest.raises(SystemExit) as e:
            mod.parse_args(["--datasets", value])
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count("\n") == 1 and needle in err, err


# ---- spectral_routes.py ------------------------------------------------------------------


def _blocks_C():
    """Five blocks in heavy-tailed noise (as test_bench's spectral_routes test)."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(5), (30, 40, 25, 35, 30))
    C = 0.2 * np.abs(rng.standard_normal((160, 160)))
    same = y[:, None] == y[None, :]
    C[same] += rng.uniform(0.5, 1.0, same.sum()) * rng.random(same.sum()) ** 3
    return C.astype(np.float32)


def test_time_route_cholesky_skips_lanczos_whatever_the_cap(monkeypatch):
    """time_route: the Cholesky route never tries Lanczos, even where LANCZOS_MAX_PRODUCTS > 0
    (the fast route's own setting), the Lanczos route runs uncapped, each works on a copy of
    the affinity, and the module is restored after each."""
    from mesc_tf.postcluster import fast as pc_fast
    from mesc_tf.postcluster import thrc as pc_thrc

    mod = _load("spectral_routes")
    monkeypatch.setattr(pc_fast, "SI_LU_MAX_N", 0)
    monkeypatch.setattr(pc_fast, "DENSE_SVD_MAX_N", 0)
    monkeypatch.setattr(pc_fast, "LANCZOS_MAX_PRODUCTS", 40)
    real = pc_fast._lanczos_smallest
    Cs = pc_fast._pretreat_sparse(pc_thrc.thrC_sparse(_blocks_C(), 0.2), "mesc")
    A = pc_fast._affinity_inplace(pc_fast._svd_embedding_fast(Cs, 5, 4, {}), 8.0)
    kept = A.copy()
    _, y_ch, info_ch, inside = mod.time_route(A, 5, 0, lanczos=False)
    assert "lanczos_products" not in info_ch and "Lanczos" not in info_ch["spectral"]
    assert pc_fast._lanczos_smallest is real and pc_fast.LANCZOS_MAX_PRODUCTS == 40
    assert inside == 0.0
    seconds, y_lz, info_lz, inside = mod.time_route(A, 5, 0, lanczos=True)
    assert info_lz["lanczos_products"] > 0 and "Lanczos" in info_lz["spectral"]
    assert 0 < inside < seconds  # Lanczos itself, a part of the route
    assert pc_fast._lanczos_smallest is real and pc_fast.LANCZOS_MAX_PRODUCTS == 40
    np.testing.assert_array_equal(A, kept)
    np.testing.assert_array_equal(y_lz, y_ch)


def test_spectral_routes_main_figures_from_the_routes(tmp_path, monkeypatch):
    """main (the routes faked): --seed, --clusters and --variant are passed on, the break-even
    is the Cholesky route's seconds, less the Lanczos route's work besides its products, over
    the seconds per Lanczos product (none where Lanczos did not converge), same_labels compares
    the two routes' labels, and ill_posed is set if either route found it so."""
    from mesc_tf.postcluster import fast as pc_fast

    mod = _load("spectral_routes")
    np.save(tmp_path / "c.npy", _blocks_C())
    monkeypatch.setattr(pc_fast, "SI_LU_MAX_N", 0)
    monkeypatch.setattr(pc_fast, "DENSE_SVD_MAX_N", 0)
    calls, variants = [], []
    pretreat = pc_fast._pretreat_sparse

    def spy_pretreat(C, variant):
        variants.append(variant)
        return pretreat(C, variant)

    converged = iter([True, False])

    def time_route(A, K, seed, lanczos):
        calls.append((K, seed, lanczos))
        if lanczos:  # 100 products in 0.5 s, 1.5 s of the rest of the step
            spectral = "ARPACK Lanczos on …" if next(converged) else "ARPACK shift-invert …"
            return 2.0, np.array([0, 0, 1]), {"lanczos_products": 100, "ill_posed": True,
                                              "spectral": spectral}, 0.5
        return 6.0, np.array([0, 1, 1]), {"ill_posed": False}, 0.0

    monkeypatch.setattr(pc_fast, "_pretreat_sparse", spy_pretreat)
    monkeypatch.setattr(mod, "time_route", time_route)
    from mesc_tf import provenance  # what bench.py records, from the same helpers

    monkeypatch.setattr(provenance, "machine", lambda: {"cores": 2})
    monkeypatch.setattr(provenance, "versions", lambda: {"mesc_tf": "x"})
    out = tmp_path / "routes.json"
    argv = ["--coef", str(tmp_path / "c.npy"), "--clusters", "5", "--thr", "0.2",
            "--settings", "4:8", "--variant", "dsc", "--seed", "9", "--json", str(out)]
    assert mod.main(argv) == 0
    assert calls == [(5, 9, True), (5, 9, False)] and variants == ["dsc"]
    report = json.loads(out.read_text())
    # what the figures depend on besides C, so that a report says what was run
    assert {k: report[k] for k in ("clusters", "thr", "variant", "seed")} == {
        "clusters": 5, "thr": 0.2, "variant": "dsc", "seed": 9}
    assert shlex.split(report["command"]) == ["benchmarks/spectral_routes.py", *argv]
    assert report["machine"] == {"cores": 2} and report["versions"] == {"mesc_tf": "x"}
    (row,) = report["rows"]
    assert row["break_even_products"] == pytest.approx((6.0 - 1.5) / (0.5 / 100))  # 900
    assert row["lanczos_products_s"] == 0.5 and row["lanczos_converged"] is True
    assert row["same_labels"] is False and row["ill_posed"] is True
    assert mod.main([*argv, "--force"]) == 0  # Lanczos fell back this time
    (row,) = json.loads(out.read_text())["rows"]
    assert row["break_even_products"] is None and row["lanczos_converged"] is False


def test_spectral_routes_coef_folder_is_named_a_folder(tmp_path, capsys):
    """--coef naming a folder says so (it said "not found", sending one to look for a
    missing file)."""
    mod = _load("spectral_routes")
    with pytest.raises(SystemExit) as e:
        mod.parse_args(["--coef", str(tmp_path), "--clusters", "2", "--thr", "0.1"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    assert f"--coef: {tmp_path} is a folder; give a .npy file" in err, err


def test_spectral_routes_coef_not_an_array_is_one_error(tmp_path):
    """An empty --coef file (a traceback: NumPy's EOFError) and an .npz archive (said to be
    a C of shape (1,)) are "not a .npy array", as a text file is."""
    from mesc_tf.errors import MescError

    mod = _load("spectral_routes")
    (tmp_path / "empty.npy").write_bytes(b"")
    np.savez(tmp_path / "c.npz", c=_blocks_C())
    for name in ("empty.npy", "c.npz"):
        with pytest.raises(MescError, match=r"is not a \.npy array; save C"):
            mod.main(["--coef", str(tmp_path / name), "--clusters", "5", "--thr", "0.2"])


def test_spectral_routes_refuses_what_it_cannot_compare(tmp_path, monkeypatch, capsys):
    """main stops with a message before timing anything: n = SI_LU_MAX_N (the large-n routes
    start above it), --clusters out of range, d = 0 in --settings, and an ill-determined
    subspace."""
    from mesc_tf.errors import MescError
    from mesc_tf.postcluster import fast as pc_fast

    mod = _load("spectral_routes")
    coef = tmp_path / "c.npy"
    np.save(coef, _blocks_C())
    argv = ["--coef", str(coef), "--clusters", "5", "--thr", "0.2", "--settings", "4:8"]
    monkeypatch.setattr(pc_fast, "DENSE_SVD_MAX_N", 0)
    monkeypatch.setattr(mod, "time_route", lambda *a, **k: pytest.fail("timed"))
    monkeypatch.setattr(pc_fast, "SI_LU_MAX_N", 160)
    with pytest.raises(MescError, match="run only above"):
        mod.main(argv)
    monkeypatch.setattr(pc_fast, "SI_LU_MAX_N", 0)
    with pytest.raises(MescError, match="--clusters"):
        mod.main(argv[:3] + ["161"] + argv[4:])
    with pytest.raises(SystemExit):
        mod.main(argv[:-1] + ["0:8"])
    assert "d must be >= 1" in capsys.readouterr().err
    monkeypatch.setattr(pc_fast, "_svd_embedding_fast", lambda *a: None)
    with pytest.raises(MescError, match="ill-determined"):
        mod.main(argv)


# ---- spectral_sklearn.py -----------------------------------------------------------------


def test_spectral_sklearn_runs_each_route_variant_and_seed(monkeypatch, capsys):
    """spectral_sklearn.py clusters its blocks by both routes for every variant and every seed
    given, with the thr, d and power its first line prints (post-clustering faked)."""
    from mesc_tf import postcluster

    mod = _load("spectral_sklearn")
    C, y = mod.noisy_blocks()
    calls = []

    def cluster(C_, K, thr, d, power, variant, seed, method):
        np.testing.assert_array_equal(C_, C)
        calls.append((K, thr, d, power, variant, method, seed))
        return y

    monkeypatch.setattr(postcluster, "cluster", cluster)
    assert mod.main(["--seeds", "3-4"]) == 0
    assert "thr 0.2, d 3, power 4" in capsys.readouterr().out.splitlines()[0]
    assert calls == [(4, 0.2, 3, 4.0, v, m, s) for v in ("mesc", "dsc", "dsc_diag")
                     for m in ("fast", "reference") for s in (3, 4)]


def test_svd_solvers_figures_and_the_module_restored(tmp_path, capsys):
    """benchmarks/svd_solvers.py on a small C: ARPACK converged, PROPACK with the route's extra
    triplets on ARPACK's subspace, asked for k alone less converged; the fast route's settings
    are restored after; bad input is one line before the work."""
    from mesc_tf import cli
    from mesc_tf.postcluster import fast as pc_fast

    mod = _load("svd_solvers")
    np.save(tmp_path / "c.npy", _blocks_C())
    settings = (pc_fast.eigsh, pc_fast.DENSE_SVD_MAX_N, pc_fast.SVD_PROPACK_MAX_SHARE,
                pc_fast.SVD_PROPACK_EXTRA, pc_fast.SVD_RESIDUAL_MAX)
    out = tmp_path / "svd.json"
    argv = ["--coef", str(tmp_path / "c.npy"), "--clusters", "5", "--thr", "0.2",
            "--subspace-dim", "4"]
    assert mod.main([*argv, "--svds", "--json", str(out)]) == 0
    assert (pc_fast.eigsh, pc_fast.DENSE_SVD_MAX_N, pc_fast.SVD_PROPACK_MAX_SHARE,
            pc_fast.SVD_PROPACK_EXTRA, pc_fast.SVD_RESIDUAL_MAX) == settings
    report = json.loads(out.read_text())
    assert report["rank"] == 21 and report["arpack"]["products"] > 0
    assert report["arpack"]["residual"] < 1e-13
    assert report["propack"]["extra"] == pc_fast.SVD_PROPACK_EXTRA
    assert report["propack"]["residual"] < pc_fast.SVD_RESIDUAL_MAX
    assert report["propack"]["sine_to_arpack"] < 1e-9
    assert report["propack_k_alone"]["extra"] == 0 and report["propack_k_alone"]["converged"]
    assert (report["propack_k_alone"]["sine_to_arpack"]
            > 100 * report["propack"]["sine_to_arpack"])  # what the extra triplets are for
    assert max(report["svds"][f"sine_to_{k}"] for k in ("arpack", "propack")) < 1e-9
    assert "PROPACK, 22 + 20 triplets" in capsys.readouterr().out
    # PROPACK asked for k alone and not converging is a figure, not the end of the run.
    real = pc_fast._propack_eigenpairs

    def k_alone_fails(Cs, Ct, k, rng):
        return (None, None) if pc_fast.SVD_PROPACK_EXTRA == 0 else real(Cs, Ct, k, rng)

    pc_fast._propack_eigenpairs = k_alone_fails
    try:
        assert mod.main([*argv, "--svds", "--json", str(out), "--force"]) == 0
    finally:
        pc_fast._propack_eigenpairs = real
    report = json.loads(out.read_text())
    assert report["propack_k_alone"] == {"extra": 0, "seconds": pytest.approx(
        report["propack_k_alone"]["seconds"]), "converged": False}
    assert "sine_to_propack_k_alone" not in report["svds"] and report["propack"]["converged"]
    assert "PROPACK, 22 + 0 triplets: " in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main_guard(lambda: mod.main([*argv[:-1], "159"]), mod.CLEANUP)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "leaves ARPACK no room in n = 160" in err
