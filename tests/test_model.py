"""The Keras models against the shapes and initialisation of the original graphs
(reference-facts §1.2, §2.1-2.3)."""

import math
import sys
import warnings

import numpy as np
import pytest
import tensorflow as tf

from mesc_tf.config import DATASETS, Architecture, get_config
from mesc_tf.errors import MescError
from mesc_tf.model import ConvAutoEncoder, MESCNet

pytestmark = pytest.mark.usefixtures("runtime")

# Latent h×w×c and flattened dimension p per dataset (reference-facts §1.2).
LATENT = {
    "toy": ((16, 16, 15), 3840),
    "orl": ((4, 4, 5), 80),
    "coil20": ((16, 16, 15), 3840),
    "coil40": ((16, 16, 20), 5120),
    "coil100": ((16, 16, 50), 12800),
    "eyaleb": ((6, 6, 30), 1080),
    "usps": ((2, 2, 30), 120),
    "mnist": ((4, 4, 30), 480),
}

# TF1 checkpoint kernel shapes, in layer order enc_0.., dec_0.. (reference-facts §1.3).
CKPT_KERNELS = {
    "orl": [(3, 3, 1, 3), (3, 3, 3, 3), (3, 3, 3, 5), (3, 3, 3, 5), (3, 3, 3, 3), (3, 3, 1, 3)],
    "mnist": [(5, 5, 1, 10), (3, 3, 10, 20), (3, 3, 20, 30),
              (3, 3, 20, 30), (3, 3, 10, 20), (5, 5, 1, 10)],
    "coil40": [(3, 3, 1, 20), (3, 3, 1, 20)],
    "coil100": [(5, 5, 1, 50), (5, 5, 1, 50)],
}

TINY = Architecture(image_shape=(8, 8), kernels=(3,), channels=(2,))


def test_all_configs_are_covered():
    assert set(LATENT) == set(DATASETS)


@pytest.mark.parametrize("name", sorted(LATENT))
def test_autoencoder_shapes(name):
    arch = get_config(name).arch
    ae = ConvAutoEncoder(arch).build_for_input()
    x = tf.zeros((2, *arch.image_shape, 1))
    latent, p = LATENT[name]
    z = ae.encode(x)
    assert tuple(z.shape) == (2, *latent) and ae.latent_shape == latent
    assert math.prod(latent) == p
    assert tuple(ae.decode(z).shape) == tuple(x.shape)
    assert tuple(ae(x).shape) == tuple(x.shape)


@pytest.mark.parametrize("name, sizes", [
    ("eyaleb", [(12, 11), (24, 21), (48, 42)]),
    ("mnist", [(7, 7), (14, 14), (28, 28)]),
    ("orl", [(8, 8), (16, 16), (32, 32)]),
])
def test_decoder_intermediate_sizes(name, sizes):
    """Odd sizes need output_padding (pitfall 10): 6×6 → 12×11 → 24×21, 4 → 7."""
    ae = ConvAutoEncoder(get_config(name).arch).build_for_input()
    act = tf.zeros((1, *ae.latent_shape))
    for layer, size in zip(ae.decoder_layers, sizes):
        act = layer(act)
        assert tuple(act.shape[1:3]) == size, layer.name


@pytest.mark.parametrize("name", sorted(LATENT))
def test_kernel_layout(name):
    """Encoder kernels (k, k, in, out); decoder (k, k, out, in) with dec_0 the deepest,
    exactly the TF1 layouts so that checkpoints load one to one."""
    arch = get_config(name).arch
    ae = ConvAutoEncoder(arch).build_for_input()
    ins = (1, *arch.channels[:-1])
    expected = [(k, k, i, c) for k, i, c in zip(arch.kernels, ins, arch.channels)]
    expected += expected[::-1]  # decoder j mirrors encoder L-1-j, same 4-D shape
    got = [tuple(layer.kernel.shape) for layer in ae.named_layers]
    assert got == expected
    assert [layer.name for layer in ae.named_layers] == (
        [f"enc_{i}" for i in range(len(arch.kernels))]
        + [f"dec_{j}" for j in range(len(arch.kernels))])
    if name in CKPT_KERNELS:
        assert got == CKPT_KERNELS[name]
    assert all(tuple(layer.bias.shape) == (s[-1] if layer.name.startswith("enc") else s[-2],)
               for layer, s in zip(ae.named_layers, got))


@pytest.mark.parametrize("name, layer_name", [("coil100", "enc_0"), ("eyaleb", "dec_0"),
                                              ("mnist", "enc_2")])
def test_he_normal_init_and_zero_biases(name, layer_name):
    """Truncated normal (cut at 2σ), σ = √(2/fan_in)/0.8796, fan_in = kh·kw·shape[-2]
    (for decoders: kh·kw·out_ch; reference-facts §2.1). Its actual std is √(2/fan_in)."""
    ae = ConvAutoEncoder(get_config(name).arch).build_for_input()
    for layer in ae.named_layers:
        np.testing.assert_array_equal(layer.bias.numpy(), 0.0)
    kernel = ae.get_layer(layer_name).kernel.numpy()
    kh, kw, second_last, _ = kernel.shape
    fan_in = kh * kw * second_last
    cut = 2 * math.sqrt(2 / fan_in) / 0.87962566103423978
    assert np.abs(kernel).max() <= cut + 1e-6
    assert np.abs(kernel).max() > 0.8 * cut  # a normal, not a narrow uniform
    assert abs(kernel.mean()) < 0.15 * math.sqrt(2 / fan_in)
    np.testing.assert_allclose(kernel.std(), math.sqrt(2 / fan_in), rtol=0.1)


def test_he_normal_stddev_from_graph():
    """The graph's stddev 0.3215490 for [5,5,1,50] (fan_in 25), reference-facts §2.1."""
    kernel = ConvAutoEncoder(get_config("coil100").arch).build_for_input().encoder_layers[0].kernel
    assert np.abs(kernel.numpy()).max() <= 2 * 0.3215490 + 1e-6
    np.testing.assert_allclose(kernel.numpy().std(), 0.3215490 * 0.87962566, rtol=0.1)


@pytest.mark.parametrize("framework", ["decoupled", "coupled"])
@pytest.mark.parametrize("name", ["orl", "eyaleb", "mnist"])
def test_mescnet_outputs(name, framework):
    cfg = get_config(name)
    n = 5
    x = tf.random.uniform((n, *cfg.arch.image_shape, 1))
    model = MESCNet(ConvAutoEncoder(cfg.arch).build_for_input(), n,
                    cfg.mesc.replace(framework=framework))
    x_rec, z, cz = model(x)
    p = LATENT[name][1]
    assert tuple(x_rec.shape) == tuple(x.shape)
    assert tuple(z.shape) == (n, p) and tuple(cz.shape) == (n, p)
    assert tuple(model.coef.shape) == (n, n)
    np.testing.assert_allclose(model.coef.numpy(), cfg.mesc.coef_init)
    np.testing.assert_allclose(cz.numpy(), model.coef.numpy() @ z.numpy(), rtol=1e-5, atol=1e-6)


def tiny_mescnet(n, **changes):
    """A built MESCNet on TINY (Toy's MESC settings with ``changes``) and n random images.
    Seeded: about one he_normal draw in 300 leaves this 2-channel auto-encoder dead on these
    images (every gradient 0), which made the tests that need a gradient fail at random."""
    import keras

    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).random((n, *TINY.image_shape, 1), dtype=np.float32)
    model = MESCNet(ConvAutoEncoder(TINY).build_for_input(), n,
                    get_config("toy").mesc.replace(**changes))
    model(tf.convert_to_tensor(x))
    return model, x


def recon_grad_wrt_coef(framework):
    model, x = tiny_mescnet(6, framework=framework)
    with tf.GradientTape() as tape:
        terms = model.compute_terms(x)
    return tape.gradient(terms["recon"], model.coef)


def test_decoupled_reconstruction_ignores_coef():
    """MESC feeds the decoder Ẑ: the reconstruction has no path to C (reference-facts §2.3)."""
    assert recon_grad_wrt_coef("decoupled") is None


def test_coupled_reconstruction_depends_on_coef():
    """DSC-Net feeds the decoder reshape(C·Z): the reconstruction pulls on C."""
    grad = recon_grad_wrt_coef("coupled")
    assert grad is not None and float(tf.reduce_max(tf.abs(grad))) > 0


@pytest.mark.parametrize("regularizer", ["entropy", "l2"])
def test_training_leaves_no_variable_behind(regularizer):
    """Once a trained model is dropped, TF frees C and the Adam slots (issue 6: MNIST's 1.2 GB
    must not stay resident under post-clustering). Keras' one-replica all-reduce and a bare
    tf.custom_gradient, traced in the step, used to register closures that kept the step's
    graph, and every variable it captured, alive in TF's global gradient registry."""
    import gc
    import weakref

    from mesc_tf.training import fit_steps

    model, x = tiny_mescnet(12, regularizer=regularizer)
    fit_steps(model, x, 2, 1e-3, verbose=0)
    handles = [weakref.ref(v.value.handle) for v in [model.coef, *model.optimizer.variables]]
    del model
    gc.collect()
    assert sum(h() is not None for h in handles) == 0


def test_adam_updates_coef_in_place():
    """C's update waits for every gradient and every logged term. Run earlier, while the
    backward pass still held a read of C, TF's Adam kernel copied C first (copy-on-write): one
    more n×n buffer per step, in 16 of 19 MNIST steps. Awaiting the gradients alone left copies
    on TF 2.20 and 2.16 (this test failed in 13 of 16 and 3 of 10 runs; none in 32 and 10 since,
    session 45). Checked by C's buffer address after each step (CPU: the read aliases the
    variable's buffer)."""
    import keras

    from mesc_tf.training import fit_steps

    model, x = tiny_mescnet(12)
    if "CPU" not in model.coef.value.device.upper():
        pytest.skip("the buffer address is only visible for host memory")
    addresses = []

    class Address(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            read = model.coef.value.value()  # aliases the variable's buffer
            addresses.append(read._numpy().__array_interface__["data"][0])
            del read  # a live read would itself force the next update to copy

    fit_steps(model, x, 6, 1e-3, verbose=0, callbacks=[Address()])
    # From the second step on: once, in a full run under Python 3.13 / NumPy 2.5 (session 44, not
    # reproduced alone), C moved at the second update and stayed; a copy per step shows here.
    assert len(set(addresses[1:])) == 1


def test_jit_compile_is_not_refused():
    """Keras compiles nothing with XLA under op determinism (it warns and runs without);
    configure_runtime(deterministic=False), as ``run.py --jit`` calls it, lets it compile."""
    import warnings

    from mesc_tf.training import configure_runtime, fit_steps

    configure_runtime(0, deterministic=False)
    try:
        model, x = tiny_mescnet(12)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "Model doesn't support jit_compile=True"
            fit_steps(model, x, 2, 1e-3, verbose=0, jit_compile=True)
        assert model.jit_compile is True
    finally:
        configure_runtime(0)


def test_progress_bar_shows_every_loss_term(capsys, monkeypatch):
    """verbose=1: on a terminal Keras' Progbar counts steps and shows the loss terms of the last
    one; in a log file, plain lines (Keras' bar wrote carriage returns and colour codes there):
    the first step's, then one every 30 s, and the last step's."""
    from mesc_tf.training import configure_runtime, fit_steps

    configure_runtime(0)
    model, x = tiny_mescnet(12)
    history, _ = fit_steps(model, x, 3, 1e-3, verbose=1)
    out = capsys.readouterr().out
    assert "\r" not in out and "\x1b" not in out
    assert [line.split(" - ")[0] for line in out.splitlines()] == ["step 1/3", "step 3/3"]
    for term in ("loss", "recon", "reg", "selfexp"):
        assert f"{term}: {history[term][-1]:.4g}" in out.splitlines()[-1], term
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    history, _ = fit_steps(model, x, 3, 1e-3, verbose=1)
    out = capsys.readouterr().out
    assert "3/3" in out and "step" in out and "\r" in out
    for term in ("loss", "recon", "reg", "selfexp"):
        assert f"{term}: {history[term][-1]:.4f}" in out, term


def test_progress_bar_shows_each_value_of_the_last_step(capsys, monkeypatch):
    """On a terminal every logged value is the last step's, not a mean over the steps so far:
    the learning rate ReduceLROnPlateau halves (COIL pretraining) and val_* terms were
    averaged (1 then 0.5 showed 0.75)."""
    from mesc_tf.training import StepProgbar

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    bar = StepProgbar(3)
    bar.on_train_begin()
    bar.bar.interval = 0  # show every update
    bar.on_epoch_end(0, {"loss": 3.0, "learning_rate": 1.0, "val_loss": 10.0})
    bar.on_epoch_end(1, {"loss": 1.0, "learning_rate": 0.5, "val_loss": 2.0})
    shown = capsys.readouterr().out.split("\r")[-1]
    assert "2/3" in shown and "loss: 1.0000" in shown
    assert "learning_rate: 0.5000" in shown and "val_loss: 2.0000" in shown


def test_progress_bar_stopped_early_shows_the_last_step(capsys, monkeypatch):
    """On a terminal Keras' bar skips an update within 0.05 s of the last one; stopped early
    (EarlyStopping), it ended on an earlier step's line (1/5 after two steps)."""
    from mesc_tf.training import StepProgbar

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    bar = StepProgbar(5)
    bar.on_train_begin()
    bar.bar.interval = 3600  # as if the steps came within Keras' interval, however slow here
    bar.on_epoch_end(0, {"loss": 3.0})
    bar.on_epoch_end(1, {"loss": 1.0})  # within the interval: not shown
    assert "2/5" not in capsys.readouterr().out
    bar.on_train_end()
    out = capsys.readouterr().out
    shown = out.split("\r")[-1]
    assert "2/5" in shown and "loss: 1.0000" in shown and out.endswith("\n")


def test_configure_runtime_switches_tf32_off_and_determinism_on():
    """TF32 off (the references ran without it, pitfall 4) and op determinism on; off again
    with deterministic=False."""
    from tensorflow.python.framework import config as tf_config

    from mesc_tf.training import configure_runtime

    try:
        tf.config.experimental.enable_tensor_float_32_execution(True)
        configure_runtime(0, deterministic=False)
        assert not tf.config.experimental.tensor_float_32_execution_enabled()
        assert not tf_config.is_op_determinism_enabled()
        configure_runtime(0)
        assert not tf.config.experimental.tensor_float_32_execution_enabled()
        assert tf_config.is_op_determinism_enabled()
    finally:
        configure_runtime(0)


def test_loss_weighs_reg_by_reg1_and_selfexp_by_reg2():
    """loss = recon + reg1·reg + reg2·selfexp with the settings' weights: ORL's MESC settings
    have reg1 0.5, which the faithfulness tests (reg1 1) cannot tell from 1. On tiny_mescnet's
    seeded auto-encoder: an unseeded one was dead on these images (Z = 0, so selfexp = 0) for
    about one draw in 400, failing the first assertion at random."""
    model, x = tiny_mescnet(6, reg1=0.5, reg2=3.0)
    terms = {k: float(v) for k, v in model.compute_terms(x).items()}
    assert all(abs(terms[k]) > 0 for k in ("recon", "reg", "selfexp"))
    assert terms["loss"] == pytest.approx(
        terms["recon"] + 0.5 * terms["reg"] + 3.0 * terms["selfexp"], rel=1e-6)


def test_autoencoder_refuses_images_of_another_size_and_takes_uint8():
    """The convolutions take any size, and the decoder then returned a reconstruction of
    another size (17x15 in, 18x16 out) without a word; images without their channel axis
    failed inside Keras. uint8 pixels are cast, as float32 gives the same codes."""

    ae = ConvAutoEncoder(TINY).build_for_input()
    for bad in (np.zeros((2, 9, 7, 1), np.float32), np.zeros((2, 8, 8, 3), np.float32)):
        with pytest.raises(MescError, match=r"given to an auto-encoder made for \(8, 8\) images"):
            ae.encode(bad)
        with pytest.raises(MescError, match=r"given to an auto-encoder made for \(8, 8\)"):
            ae(bad)
    with pytest.raises(MescError, match=r"\(8, 8\) have no channel axis; give x\[\.\.\., None\]"):
        ae(np.zeros((2, 8, 8), np.float32))
    pixels = np.random.default_rng(0).integers(0, 256, (3, 8, 8, 1), dtype=np.uint8)
    np.testing.assert_array_equal(ae.encode(pixels).numpy(),
                                  ae.encode(pixels.astype(np.float32)).numpy())


@pytest.mark.parametrize("framework", ["decoupled", "coupled"])
def test_keras_save_and_load_model_continue_training_alike(tmp_path, framework):
    """model.save("x.keras") / keras.models.load_model, as Keras users expect: the models
    have configs (registered as mesc_tf>…), and a loaded MESCNet holds the same C, settings
    and Adam state (epsilon, step count, slots), so its next step is the original's."""
    import keras

    from mesc_tf.model import PretrainNet
    from mesc_tf.training import adam, full_batch

    model, x = tiny_mescnet(6, framework=framework, lr=1e-3)
    model.compile(optimizer=adam(1e-3))
    model.fit(full_batch(x), epochs=2, steps_per_epoch=1, verbose=0, shuffle=False)
    model.save(tmp_path / "net.keras")
    loaded = keras.models.load_model(tmp_path / "net.keras")
    assert type(loaded) is MESCNet and loaded.settings == model.settings
    assert loaded.autoencoder.arch == TINY
    assert loaded.optimizer.epsilon == model.optimizer.epsilon
    assert int(loaded.optimizer.iterations) == 2
    np.testing.assert_array_equal(loaded.coef.numpy(), model.coef.numpy())
    for m in (model, loaded):
        m.fit(full_batch(x), epochs=1, steps_per_epoch=1, verbose=0, shuffle=False)
    np.testing.assert_array_equal(loaded.coef.numpy(), model.coef.numpy())
    for a, b in zip(model.autoencoder.weights, loaded.autoencoder.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())

    # The auto-encoder alone, with an odd-sized activation (output_padding) and TF1's
    # truncated-normal initialiser, which its config keeps.
    ae = ConvAutoEncoder(get_config("eyaleb").arch,
                         kernel_initializer="truncated_normal").build_for_input()
    ae.save(tmp_path / "ae.keras")
    back = keras.models.load_model(tmp_path / "ae.keras")
    assert back.arch == ae.arch
    assert back.encoder_layers[0].kernel_initializer.get_config()["stddev"] == 0.1
    images = np.random.default_rng(1).random((2, 48, 42, 1), dtype=np.float32)
    np.testing.assert_array_equal(back(images).numpy(), ae(images).numpy())
    pretrain = PretrainNet(ae)
    pretrain(images)
    pretrain.save(tmp_path / "pre.keras")
    assert keras.models.load_model(tmp_path / "pre.keras").autoencoder.arch == ae.arch


def _fitted_coef(model, data, epochs=3, steps_per_execution=1, **fit_kwargs):
    from mesc_tf.training import adam

    model.compile(optimizer=adam(1e-2), steps_per_execution=steps_per_execution)
    model.fit(data, epochs=epochs, verbose=0, **fit_kwargs)
    return model.coef.numpy()


def test_mescnet_fit_takes_an_array_as_one_batch_in_order():
    """Keras' fit defaults (batch_size 32, shuffle=True) would permute the rows of the one
    batch, so C's row i would stop being sample i's; MESCNet takes an array's batch size as
    n and never shuffles it. fit(x) equals one step per epoch on full_batch(x)."""
    from mesc_tf.training import full_batch

    model, x = tiny_mescnet(6)
    reference = _fitted_coef(model, full_batch(x), steps_per_epoch=1)
    model, _ = tiny_mescnet(6)
    np.testing.assert_array_equal(_fitted_coef(model, x), reference)
    terms = model.evaluate(x, verbose=0, return_dict=True)
    assert set(terms) == {"loss", "recon", "reg", "selfexp"}
    assert [tuple(a.shape) for a in model.predict(x, verbose=0)] == [
        (6, 8, 8, 1), (6, 32), (6, 32)]
    for call, kwargs in ((model.fit, dict(shuffle=True)), (model.fit, dict(batch_size=4)),
                         (model.evaluate, dict(batch_size=3)), (model.predict, {})):
        data = x[:4] if call == model.predict else x
        with pytest.raises(MescError, match="made for 6 samples|cannot shuffle"):
            call(data, verbose=0, **kwargs)
    # A dataset's batch size shows only when the step runs (a graph error, said as one line);
    # a shuffling dataset is refused before.
    batches = tf.data.Dataset.from_tensor_slices(x).batch(4).repeat()
    with pytest.raises(MescError, match="made for 6 samples.*the dataset gave a batch of"):
        model.fit(batches, steps_per_epoch=1, verbose=0)
    shuffled = tf.data.Dataset.from_tensors(x).repeat().shuffle(6).batch(1).unbatch()
    with pytest.raises(MescError, match="shuffles its images"):
        model.fit(shuffled, steps_per_epoch=1, verbose=0)
    for kwargs, message in ((dict(validation_split=0.5), "validation_split"),
                            (dict(validation_data=(x[:3],)), "6 samples.*; got 3 samples"),
                            (dict(steps_per_epoch=3), "an array is one step per epoch")):
        with pytest.raises(MescError, match=message):
            model.fit(x, verbose=0, **kwargs)
    for images, message in ((list(x), "one array .* got a list"), ({"x": x}, "got a dict"),
                            (np.where(np.eye(6)[:, :1, None, None] > 0, np.nan, x),
                             "NaN or inf pixels")):
        for call in (model.fit, model.evaluate, model.predict):
            with pytest.raises(MescError, match=message):
                call(images, verbose=0)
    steps = int(model.optimizer.iterations)
    assert steps == 3  # nothing refused took a step
    with pytest.raises(MescError, match="n_samples must be a whole number >= 1"):
        MESCNet(model.autoencoder, 6.5, model.settings)
    with pytest.raises(MescError, match="settings must be a mesc_tf.config.Settings .*NoneType"):
        MESCNet(model.autoencoder, 6, None)


def test_mescnet_steps_per_execution_must_divide_steps_per_epoch():
    """Keras runs whole executions: steps_per_epoch 1 with steps_per_execution 3 ran 3 steps
    per epoch on full_batch's repeated dataset. A multiple runs the steps asked for."""
    from mesc_tf.training import full_batch

    model, x = tiny_mescnet(6)
    reference = _fitted_coef(model, x, epochs=4)
    model, _ = tiny_mescnet(6)
    with pytest.raises(MescError, match="Keras runs whole executions, 3 steps per epoch"):
        _fitted_coef(model, full_batch(x), steps_per_execution=3, steps_per_epoch=1)
    model, _ = tiny_mescnet(6)
    fused = _fitted_coef(model, full_batch(x), epochs=2, steps_per_execution=2,
                         steps_per_epoch=2)
    np.testing.assert_array_equal(fused, reference)
    assert int(model.optimizer.iterations) == 4


def test_an_endless_dataset_without_steps_is_refused_not_run_forever():
    """full_batch(x) repeats forever: fit without steps_per_epoch (or evaluate, predict
    without steps) ran its first epoch until killed. It is one line now, before any step;
    with the steps given it runs."""
    from mesc_tf.model import PretrainNet
    from mesc_tf.training import adam, full_batch

    import keras

    class RunsOn(keras.callbacks.Callback):  # fails, where the call would hang
        def on_batch_end(self, batch, logs=None):
            assert batch < 3, "the call ran on past 3 steps"

        on_test_batch_end = on_predict_batch_end = on_batch_end

    for model, x in (tiny_mescnet(6), (PretrainNet(ConvAutoEncoder(TINY)), tiny_mescnet(6)[1])):
        model.compile(optimizer=adam(1e-3))
        data, cb = full_batch(x), [RunsOn()]
        for call, what in ((lambda: model.fit(data, epochs=1, verbose=0, callbacks=cb),
                            "steps_per_epoch"),
                           (lambda: model.fit(x, epochs=1, verbose=0, validation_data=data,
                                              callbacks=cb), "validation_steps"),
                           (lambda: model.evaluate(data, verbose=0, callbacks=cb), "steps"),
                           (lambda: model.predict(data, verbose=0, callbacks=cb), "steps")):
            with pytest.raises(MescError, match=f"repeats forever.*pass {what}=1") as refused:
                call()
            assert "\n" not in str(refused.value)
        assert int(model.optimizer.iterations) == 0  # refused before any step
        model.fit(data, epochs=2, steps_per_epoch=1, verbose=0)
        model.evaluate(data, steps=1, verbose=0)
        assert int(model.optimizer.iterations) == 2


def test_a_refused_fit_leaves_the_model_trainable(monkeypatch):
    """Images of the wrong shape, and datasets of dicts or of unknown shape, are refused in one
    line before Keras traces a step (its wrapper added lines of its own, or failed in the
    trace). A step whose trace fails all the same no longer spoils the model: Adam's slots were
    first made in the traced step, so the next fit raised "Creating variables on a non-first
    call to a function". Afterwards fit(x) takes the step a fresh model takes."""
    from mesc_tf.model import PretrainNet
    from mesc_tf.training import adam, full_batch

    model, x = tiny_mescnet(6)
    reference = _fitted_coef(model, x, epochs=1)
    unknown = tf.data.Dataset.from_generator(
        lambda: iter([x]), output_signature=tf.TensorSpec(None, tf.float32))
    for model in (tiny_mescnet(6)[0], PretrainNet(ConvAutoEncoder(TINY))):
        model.compile(optimizer=adam(1e-2))
        for bad, message in ((x[..., 0], "no channel axis"),
                             (full_batch(np.zeros((6, 7, 7, 1), np.float32)),
                              r"the dataset given to \w+ yields images of shape \(7, 7, 1\)"),
                             (np.zeros((6, 8, 8, 2), np.float32), r"shape \(8, 8, 2\) given"),
                             (tf.data.Dataset.from_tensors({"images": x}), "yields a dict"),
                             (unknown, "yields tensors of unknown shape")):
            with pytest.raises(MescError, match=message) as refused:
                model.fit(bad, epochs=1, verbose=0)
            assert "\n" not in str(refused.value)
        fail_once = [True]
        compute_terms = model.compute_terms

        def failing_trace(images, fail_once=fail_once, compute_terms=compute_terms):
            if fail_once.pop() if fail_once else False:
                raise RuntimeError("a trace that fails")
            return compute_terms(images)

        monkeypatch.setattr(model, "compute_terms", failing_trace)
        with pytest.raises(RuntimeError, match="a trace that fails"):
            model.fit(x, epochs=1, verbose=0)
        model.fit(x, epochs=1, verbose=0)
        assert int(model.optimizer.iterations) == 1
        with pytest.raises(MescError, match="no channel axis"):  # after a traced step too
            model.fit(x[..., 0], epochs=1, verbose=0)
        if isinstance(model, MESCNet):
            np.testing.assert_array_equal(model.coef.numpy(), reference)


def test_models_refuse_what_their_own_loss_would_ignore(tmp_path):
    """The loss is the model's: compile's loss or metrics broke fit or were ignored, and
    sample weights were ignored; a settings change would not reach a compiled step. Under op
    determinism Keras turned jit_compile=True off with a warning that blamed the model."""
    import keras

    from mesc_tf.model import PretrainNet
    from mesc_tf.training import adam, configure_runtime

    model, x = tiny_mescnet(6)
    for kwargs in (dict(loss="mse"), dict(metrics=["mae"])):
        with pytest.raises(MescError, match="compile takes no (loss|metrics)"):
            model.compile(optimizer=adam(1e-3), **kwargs)
    configure_runtime(0)  # op determinism on, whatever an earlier test in this process did
    with pytest.raises(MescError, match="jit_compile=True under TF's op determinism"):
        model.compile(optimizer=adam(1e-3), jit_compile=True)
    model.compile(optimizer=adam(1e-3))
    with pytest.raises(MescError, match="takes no sample_weight"):
        model.fit(x, sample_weight=np.ones(6), verbose=0)
    weighted = tf.data.Dataset.from_tensors((x, x, np.ones(6, np.float32))).repeat()
    with pytest.raises(MescError, match="takes no sample_weight"):
        model.fit(weighted, steps_per_epoch=1, verbose=0)
    with pytest.raises(AttributeError):
        model.settings = model.settings.replace(regularizer="l2")
    pretrain = PretrainNet(model.autoencoder)
    pretrain.compile(optimizer=adam(1e-3))
    with pytest.raises(MescError, match="PretrainNet weighs every sample alike"):
        pretrain.fit(x, x, sample_weight=np.ones(6), batch_size=6, verbose=0)
    # One epoch is one step: Keras' batch-level backup would take the saved step again.
    backup = keras.callbacks.BackupAndRestore(str(tmp_path), save_freq=1)
    with pytest.raises(MescError, match="save_freq=1 would repeat a step"):
        model.fit(x, verbose=0, callbacks=[backup])


def test_models_are_built_on_construction_and_take_uint8_pixels():
    """Built at once (the auto-encoder by shape), so save_weights, count_params and
    BackupAndRestore work before any call; uint8 pixels train as their float32 values."""
    from mesc_tf.model import PretrainNet
    from mesc_tf.training import adam

    model = MESCNet(ConvAutoEncoder(TINY), 6, get_config("toy").mesc)
    assert model.built and model.count_params() == 39 + 36
    assert PretrainNet(ConvAutoEncoder(TINY)).count_params() == 39
    model, x = tiny_mescnet(6)
    pixels = (x * 255).astype(np.uint8)
    as_uint8 = _fitted_coef(model, pixels)
    model, _ = tiny_mescnet(6)
    np.testing.assert_array_equal(as_uint8, _fitted_coef(model, pixels.astype(np.float32)))
    pretrain = PretrainNet(model.autoencoder)
    pretrain.compile(optimizer=adam(1e-3))
    assert np.isfinite(pretrain.fit(pixels, batch_size=6, verbose=0).history["rel_err"][0])


def test_models_refuse_a_mixed_precision_policy():
    """Under mixed_float16 fit failed inside the loss (float16 against float32)."""
    import keras


    keras.config.set_dtype_policy("mixed_float16")
    try:
        with pytest.raises(MescError, match="runs in float32.*'mixed_float16'"):
            ConvAutoEncoder(TINY)
    finally:
        keras.config.set_dtype_policy("float32")
    with pytest.raises(MescError, match="MESCNet runs in float32.*'mixed_bfloat16'"):
        MESCNet(ConvAutoEncoder(TINY), 6, get_config("toy").mesc, dtype="mixed_bfloat16")


def test_readme_keras_example_fine_tunes_as_the_pipeline_does(readme_example, capsys):
    """The README's MESCNet-in-Keras example (its 2500 steps cut to 15) gives the C that
    mesc_tf.pipeline.fine_tune gives with the same settings, bit for bit, and prints the
    metrics."""
    from mesc_tf.pipeline import fine_tune
    from mesc_tf.training import configure_runtime

    code, scope = readme_example("The fine-tuning model is a plain Keras model",
                                 replace={"epochs=s.epochs": "epochs=15"})
    out = capsys.readouterr().out
    assert "'acc':" in out and "'nmi':" in out
    configure_runtime(seed=0)
    ae, _ = scope["load_autoencoder"]("pretrained/orl.h5", scope["cfg"].arch)
    model, _, _ = fine_tune(scope["data"].x, scope["s"].replace(epochs=15), ae, verbose=0)
    np.testing.assert_array_equal(scope["model"].coef.numpy(), model.coef.numpy())


def test_load_weights_into_a_fresh_model_restores_adam_too(tmp_path):
    """ModelCheckpoint(save_weights_only=True), then a new compiled model and load_weights:
    Keras skipped Adam's slots and step count while the optimizer was unbuilt (before the first
    step), so the resumed C went its own way. PretrainNet evaluates its own terms."""
    from mesc_tf.model import PretrainNet
    from mesc_tf.training import adam

    model, x = tiny_mescnet(6)
    _fitted_coef(model, x, epochs=3)
    model.save_weights(tmp_path / "w.weights.h5")
    fresh, _ = tiny_mescnet(6)
    fresh.compile(optimizer=adam(1e-2))
    fresh.load_weights(tmp_path / "w.weights.h5")
    for m in (model, fresh):
        m.fit(x, epochs=1, verbose=0)
    assert int(fresh.optimizer.iterations) == int(model.optimizer.iterations) == 4
    np.testing.assert_array_equal(fresh.coef.numpy(), model.coef.numpy())
    pretrain = PretrainNet(model.autoencoder)
    pretrain.compile(optimizer=adam(1e-3))
    terms = pretrain.evaluate(x, batch_size=6, verbose=0, return_dict=True)
    assert set(terms) == {"recon", "rel_err"} and 0 < terms["rel_err"]


def test_load_weights_before_compile_says_adam_is_not_restored(tmp_path):
    """Into a model with no optimizer yet, Keras loaded the weights alone without a word: the
    model compiled after it went on with a fresh Adam. Now a warning says to compile first; a
    file without Adam's state, or a compiled model, loads as before."""
    from mesc_tf.errors import MescWarning
    from mesc_tf.training import adam

    model, x = tiny_mescnet(6)
    model.save_weights(tmp_path / "untrained.weights.h5")  # no optimizer: nothing to restore
    _fitted_coef(model, x, epochs=3)
    model.save_weights(tmp_path / "w.weights.h5")
    fresh, _ = tiny_mescnet(6)
    with pytest.warns(MescWarning, match="has no optimizer yet.*compile it first"):
        fresh.load_weights(tmp_path / "w.weights.h5")
    np.testing.assert_array_equal(fresh.coef.numpy(), model.coef.numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("error", MescWarning)
        tiny_mescnet(6)[0].load_weights(tmp_path / "untrained.weights.h5")
        fresh.compile(optimizer=adam(1e-2))
        fresh.load_weights(tmp_path / "w.weights.h5")
    assert int(fresh.optimizer.iterations) == 3


# Keras' own note on loading: the recompiled model's fresh Adam saved no slots to restore.
@pytest.mark.filterwarnings("ignore:Skipping variable loading for optimizer")
def test_overrides_take_keras_positional_arguments_and_load_a_jit_model(tmp_path):
    """The fit/evaluate/predict/compile overrides take Keras' arguments by position too (they
    raised TypeError), compile(metrics=[]) asks for nothing, and a model saved with
    jit_compile=True loads under op determinism (without XLA, as Keras would run it) instead
    of failing in compile_from_config."""
    import keras

    from mesc_tf import MescWarning
    from mesc_tf.training import adam, configure_runtime

    model, x = tiny_mescnet(6)
    with pytest.raises(MescError, match="compile takes no loss"):
        model.compile(adam(1e-3), "mse")
    model.compile(adam(1e-3), None, None, [])
    model.fit(x, None, None, 2, 0)
    assert len(model.evaluate(x, None, None, 0)) == 4
    assert len(model.predict(x, None, 0)) == 3
    assert int(model.optimizer.iterations) == 2

    configure_runtime(0, deterministic=False)
    try:
        model.compile(optimizer=adam(1e-3), jit_compile=True)
        model.save(tmp_path / "jit.keras")
    finally:
        configure_runtime(0)
    with pytest.warns(MescWarning, match="runs without XLA"):
        loaded = keras.models.load_model(tmp_path / "jit.keras")
    np.testing.assert_array_equal(loaded.coef.numpy(), model.coef.numpy())


def test_a_batch_of_another_size_is_one_line_before_keras_wraps_it():
    """A batch size known before the step (a dataset of another n's array, predict_on_batch,
    a direct call) reached the check in call(), inside Keras' __call__, which wrapped the
    MescError in lines of its own ("Exception encountered when calling MESCNet.call()", the
    arguments, colour codes). It is one line now, and the model trains afterwards."""
    from mesc_tf.training import adam, full_batch

    model, x = tiny_mescnet(6)
    model.compile(optimizer=adam(1e-3))
    for call in (lambda: model(x[:4]), lambda: model.predict_on_batch(x[:4]),
                 lambda: model.fit(full_batch(x[:4]), steps_per_epoch=1, verbose=0),
                 lambda: model.predict(tf.data.Dataset.from_tensors(x[:4]), verbose=0)):
        with pytest.raises(MescError, match="made for 6 .*; got (a batch of 4|4 samp)") as refused:
            call()
        assert "\n" not in str(refused.value)
    model.fit(x, epochs=1, verbose=0)
    assert int(model.optimizer.iterations) == 1


def test_on_batch_calls_take_what_fit_takes():
    """train_on_batch on NaN pixels made every weight NaN without a word, and on a batch of
    another size failed with TF's graph error (its step does not know the size when traced);
    test_on_batch and predict_on_batch took NaN pixels too. They are refused as fit refuses
    them, and a full batch trains as fit does."""
    from mesc_tf.model import PretrainNet
    from mesc_tf.training import adam

    model, x = tiny_mescnet(6)
    reference = _fitted_coef(model, x, epochs=2)
    model, _ = tiny_mescnet(6)
    model.compile(optimizer=adam(1e-2))
    nan = np.where(np.eye(6)[:, :1, None, None] > 0, np.nan, x)
    for call in (model.train_on_batch, model.test_on_batch, model.predict_on_batch):
        for images, message in ((nan, "NaN or inf pixels"), (x[:4], "made for 6 samples"),
                                (list(x), "one array .* got a list")):
            with pytest.raises(MescError, match=message) as refused:
                call(images)
            assert "\n" not in str(refused.value)
    with pytest.raises(MescError, match="takes no sample_weight"):
        model.train_on_batch(x, sample_weight=np.ones(6))
    for _ in range(2):
        model.train_on_batch(x)
    np.testing.assert_array_equal(model.coef.numpy(), reference)
    pretrain = PretrainNet(model.autoencoder)
    pretrain.compile(optimizer=adam(1e-3))
    with pytest.raises(MescError, match="NaN or inf pixels"):
        pretrain.train_on_batch(nan)
    assert np.isfinite(pretrain.train_on_batch(x[:4], return_dict=True)["rel_err"])


def test_saving_in_keras_legacy_hdf5_is_refused(tmp_path):
    """model.save('x.h5') (and ModelCheckpoint('x.h5')) wrote Keras' legacy HDF5 format, which
    keras.models.load_model could not read back ("Unknown layer: 'MESCNet'", and with
    custom_objects a model whose optimizer knew none of its variables, or an auto-encoder
    without its layers), nor load_autoencoder (not the project's .h5). Refused before any file
    is written; .keras loads back."""
    import keras

    from mesc_tf.training import adam

    model, x = tiny_mescnet(6)
    model.compile(optimizer=adam(1e-3))
    for obj, path, message in ((model, "m.h5", r"MESCNet back: save it as \.keras, or"),
                               (model.autoencoder, "ae.HDF5", "ConvAutoEncoder back: .*"
                                "save_autoencoder"), (model, "m.hdf5", "legacy HDF5"),
                               # save() is not save_weights(): the message named the suffix only
                               (model, "m.weights.h5", r"weights with save_weights \(a")):
        with pytest.raises(MescError, match=message):
            obj.save(tmp_path / path)
    checkpoint = keras.callbacks.ModelCheckpoint(str(tmp_path / "m_{epoch}.h5"))
    with pytest.raises(MescError, match="legacy HDF5"):
        model.fit(x, epochs=1, verbose=0, callbacks=[checkpoint])
    assert not list(tmp_path.iterdir())
    model.autoencoder.save(tmp_path / "ae.keras")
    loaded = keras.models.load_model(tmp_path / "ae.keras")
    np.testing.assert_array_equal(loaded.encode(x), model.autoencoder.encode(x))


def test_sample_weights_without_labels_are_refused_not_ignored():
    """evaluate(x, sample_weight=w) and fit(..., validation_data=(x, None, w)) gave the
    unweighted terms without a word (Keras does not pass weights on without y), while
    fit(x, sample_weight=w) and evaluate(x, x, sample_weight=w) were refused."""
    from mesc_tf.model import PretrainNet
    from mesc_tf.training import adam

    model, x = tiny_mescnet(6)
    w = np.linspace(0, 1, 6).astype(np.float32)
    for m in (model, PretrainNet(model.autoencoder)):
        m.compile(optimizer=adam(1e-3))
        size = dict(batch_size=6) if isinstance(m, PretrainNet) else {}
        for call in (lambda: m.evaluate(x, sample_weight=w, verbose=0, **size),
                     lambda: m.test_on_batch(x, sample_weight=w),
                     lambda: m.fit(x, epochs=1, verbose=0, validation_data=(x, None, w),
                                   **size)):
            with pytest.raises(MescError, match="weighs every sample alike"):
                call()
        assert int(m.optimizer.iterations) == 0
    model.fit(x, epochs=1, verbose=0, validation_data=(x, None, None))


def test_models_called_on_a_list_of_images():
    """model(list_of_images) failed with "AttributeError: 'list' object has no attribute
    'shape'" in the shape check, though encode takes such a list: a list is one tensor now,
    checked as an array is, and a dict is refused in one line."""
    from mesc_tf.model import PretrainNet

    model, x = tiny_mescnet(6)
    for m in (model, model.autoencoder, PretrainNet(model.autoencoder)):
        np.testing.assert_array_equal(tf.nest.flatten(m(list(x)))[0],
                                      tf.nest.flatten(m(x))[0])
        with pytest.raises(MescError, match="got a dict"):
            m({"x": x})
        with pytest.raises(MescError, match="no channel axis"):
            m(list(x[..., 0]))
    with pytest.raises(MescError, match="made for 6 samples.*; got a batch of 4"):
        model(list(x[:4]))


def test_full_batch_and_minibatches_refuse_nan_pixels():
    """fit refused NaN pixels in an array, but full_batch(x) of the same images trained: NaN
    losses and weights without a word, and a decoupled model's C finite, ready to cluster."""
    from mesc_tf.training import full_batch, minibatches

    x = np.random.default_rng(0).random((6, *TINY.image_shape, 1), dtype=np.float32)
    for bad in (np.nan, np.inf):
        images = x.copy()
        images[2, 3, 4, 0] = bad
        for make, what in ((lambda: full_batch(images), "full_batch"),
                           (lambda: minibatches(images, 2), "minibatches")):
            with pytest.raises(MescError, match=f"given to {what} hold NaN or inf pixels"):
                make()
    first = next(iter(full_batch(x)))
    np.testing.assert_array_equal(first, x)


def test_export_takes_the_models_image_shape(tmp_path):
    """model.export(path) after fit said "The model provided has never called. It must be
    called at least once before export." (the models build by shape on construction, and
    Keras took no input shape from that). The exported model serves what predict gives."""
    from mesc_tf.training import adam

    model, x = tiny_mescnet(6)
    model.compile(optimizer=adam(1e-2))
    model.fit(x, epochs=1, verbose=0)
    for m, path in ((model, "mesc"), (model.autoencoder, "ae")):
        m.export(str(tmp_path / path), verbose=False)
        loaded = tf.saved_model.load(str(tmp_path / path))  # kept: serve needs its variables
        served = loaded.serve(tf.constant(x))
        np.testing.assert_array_equal(tf.nest.flatten(served)[0],
                                      tf.nest.flatten(m.predict(x, batch_size=6, verbose=0))[0])


def test_evaluation_refuses_a_shuffling_dataset_as_fit_does():
    """fit refused a dataset with a shuffle step (row i of C is sample i), but evaluate, predict
    and fit's validation_data took one: terms and C·Z of samples paired with other samples' rows
    of C, without a word."""
    from mesc_tf.training import adam

    model, x = tiny_mescnet(6)
    model.compile(optimizer=adam(1e-2))
    shuffled = tf.data.Dataset.from_tensor_slices(x).shuffle(6, seed=1).batch(6)
    for call in (lambda: model.evaluate(shuffled, verbose=0),
                 lambda: model.predict(shuffled, verbose=0),
                 lambda: model.fit(x, epochs=1, verbose=0, validation_data=shuffled)):
        with pytest.raises(MescError, match="shuffles its images"):
            call()
    assert int(model.optimizer.iterations) == 0
    in_order = tf.data.Dataset.from_tensor_slices(x).batch(6)
    assert model.evaluate(in_order, verbose=0) == model.evaluate(x, verbose=0)


def test_evaluate_and_predict_steps_must_be_whole_executions():
    """predict(full_batch(x), steps=1) under steps_per_execution 3 gave 3n rows (Keras runs
    whole executions on a repeated dataset), and evaluate ran 3 steps for 1: refused as fit's
    steps_per_epoch is; a multiple runs."""
    from mesc_tf.training import adam, full_batch

    model, x = tiny_mescnet(6)
    model.compile(optimizer=adam(1e-2), steps_per_execution=3)
    for call in (model.evaluate, model.predict):
        with pytest.raises(MescError, match="steps 1 is not a multiple of steps_per_execution 3"
                                            ": Keras runs whole executions, 3 steps here"):
            call(full_batch(x), steps=1, verbose=0)
    assert model.predict(full_batch(x), steps=3, verbose=0)[0].shape == (18, 8, 8, 1)
    assert model.predict(x, verbose=0)[0].shape == (6, 8, 8, 1)


@pytest.mark.parametrize("initializer", ["truncated_normal", "he_normal", "glorot_uniform",
                                         "instance", "seeded instance"])
def test_every_layer_draws_its_own_kernel(initializer):
    """One Keras initializer object draws the same values at every call; shared by the layers
    (truncated_normal, or an object given), each decoder kernel was its mirrored encoder kernel
    and every kernel began with the same numbers. TF1 drew each layer on its own. An object
    with a seed of its own gave each layer that seed: the same again."""
    import keras

    if initializer == "instance":
        initializer = keras.initializers.TruncatedNormal(stddev=0.1)
    if initializer == "seeded instance":
        initializer = keras.initializers.HeNormal(seed=1)
        again = ConvAutoEncoder(get_config("orl").arch,
                                kernel_initializer=keras.initializers.HeNormal(seed=1))
        first = ConvAutoEncoder(get_config("orl").arch, kernel_initializer=initializer)
        for a, b in zip(again.build_for_input().get_weights(),
                        first.build_for_input().get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)  # the seed still fixes the draws
    ae = ConvAutoEncoder(get_config("orl").arch, kernel_initializer=initializer).build_for_input()
    kernels = [layer.kernel.numpy().ravel() for layer in ae.named_layers]
    firsts = {float(k[0]) for k in kernels}
    assert len(firsts) == len(kernels)  # six layers, six different draws
    if initializer == "truncated_normal":
        assert all(np.abs(k).max() <= 0.2 + 1e-6 for k in kernels)  # σ 0.1, cut at 2σ


def test_models_refuse_what_is_not_an_autoencoder():
    """load_autoencoder's (autoencoder, metadata) pair, a file name or another model given as
    the auto-encoder: one MescError naming what to give, not an AttributeError."""
    from mesc_tf.model import PretrainNet

    model, _ = tiny_mescnet(4)
    settings = get_config("toy").mesc
    for given, hint in [((model.autoencoder, {}), r"ae, _ = load_autoencoder"),
                        (model, r"its \.autoencoder"), ("ae.h5", r"got str$")]:
        with pytest.raises(MescError, match=f"needs a mesc_tf.model.ConvAutoEncoder.*{hint}"):
            MESCNet(given, 4, settings)
        with pytest.raises(MescError, match="PretrainNet needs a mesc_tf.model.ConvAutoEncoder"):
            PretrainNet(given)


def test_autoencoder_refuses_what_is_not_an_architecture():
    """A dataset's config, its name or a bare tuple for the architecture: one MescError, not
    an AttributeError ('DatasetConfig' object has no attribute 'kernels')."""

    for given in (get_config("orl"), "orl", ((32, 32), (3,), (3,))):
        with pytest.raises(MescError, match=r"needs a mesc_tf.config.Architecture, got "
                                            r".*get_config\(name\).arch"):
            ConvAutoEncoder(given)


def test_pretrain_net_takes_an_array_as_one_batch():
    """Keras' default batch of 32 made PretrainNet.fit(x) take several shuffled steps per
    epoch, and evaluate(x) return the last batch's terms only (those of the last 8 of 40
    images); minibatches come as training.minibatches' dataset instead."""
    from mesc_tf.model import PretrainNet
    from mesc_tf.training import adam, configure_runtime

    configure_runtime(0)
    x = np.random.default_rng(0).random((40, *TINY.image_shape, 1)).astype(np.float32)
    net = PretrainNet(ConvAutoEncoder(TINY))
    net.compile(optimizer=adam(1e-3))
    net.fit(x, epochs=2, verbose=0)
    assert int(net.optimizer.iterations) == 2
    terms = net.evaluate(x, verbose=0, return_dict=True)
    whole = {k: float(v) for k, v in net.compute_terms(x).items()}
    assert terms == pytest.approx(whole, rel=1e-6)
    for call in (lambda: net.fit(x, batch_size=8, verbose=0),
                 lambda: net.evaluate(x, batch_size=8, verbose=0)):
        with pytest.raises(MescError, match="takes an array as one batch .* batch_size None "
                                            "or 40, got 8; for minibatches give "
                                            r"mesc_tf.training.minibatches\(x, batch_size\)"):
            call()


def test_full_batch_takes_tensors_of_any_pixel_type():
    """A tf.Tensor of uint8 or float64 pixels failed in tf.convert_to_tensor(x, float32);
    arrays of those types were taken."""
    from mesc_tf.training import full_batch, minibatches

    for dtype in (np.uint8, np.float64):
        x = tf.constant(np.arange(4 * 64).reshape(4, 8, 8, 1) % 200, dtype=dtype)
        (batch,) = full_batch(x).take(1)
        assert batch.dtype == tf.float32 and float(batch[0, 0, 1, 0]) == 1.0
        (batch,) = minibatches(x, 2).take(1)
        assert batch.shape == (2, 8, 8, 1) and batch.dtype == tf.float32


# --- review of session 65: what a Keras user does with the models ---------------------------


def test_frozen_parts_stay_frozen_through_save_load_and_clone(tmp_path):
    """ConvAutoEncoder(trainable=False), which a config holds, made its layers trainable after
    (so a loaded frozen auto-encoder trained); a frozen C, or layers frozen one by one, came back
    trainable; and the saved Adam, with slots for fewer variables, was skipped with a warning."""
    import keras

    from mesc_tf.training import adam, full_batch

    model, x = tiny_mescnet(6, lr=1e-3)
    model.autoencoder.trainable = False
    model.compile(optimizer=adam(1e-3))
    model.fit(full_batch(x), epochs=2, steps_per_epoch=1, verbose=0)
    model.save(tmp_path / "net.keras")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "Skipping variable loading for optimizer"
        loaded = keras.models.load_model(tmp_path / "net.keras")
    assert [v.name for v in loaded.trainable_variables] == ["coef"]
    assert int(loaded.optimizer.iterations) == 2
    for m in (model, loaded):
        m.fit(full_batch(x), epochs=1, steps_per_epoch=1, verbose=0)
    np.testing.assert_array_equal(loaded.coef.numpy(), model.coef.numpy())
    for a, b in zip(model.autoencoder.weights, loaded.autoencoder.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())

    # trainable=False freezes each layer (Keras lists no trainable variable of a frozen model
    # whatever its layers say, so the layers and a MESCNet around it are what show it).
    frozen = ConvAutoEncoder(TINY, trainable=False)
    assert not [layer.name for layer in frozen.named_layers if layer.trainable]
    assert frozen.get_config()["frozen_layers"] == [layer.name for layer in frozen.named_layers]
    assert [v.name for v in MESCNet(frozen, 6, get_config("toy").mesc).trainable_variables] == [
        "coef"]
    # Layers frozen one by one come back frozen, every one of them.
    ae = ConvAutoEncoder(get_config("orl").arch)
    for layer in ae.encoder_layers:
        layer.trainable = False
    for again in (ConvAutoEncoder.from_config(ae.get_config()), keras.models.clone_model(ae)):
        assert [layer.name for layer in again.named_layers if not layer.trainable] == [
            "enc_0", "enc_1", "enc_2"]
    net = MESCNet(ConvAutoEncoder(TINY), 6, get_config("toy").mesc)
    net.self_expression.trainable = False
    net.autoencoder.encoder_layers[0].trainable = False  # the encoder alone, as HISTORY did
    clone = keras.models.clone_model(net)
    assert not clone.self_expression.trainable
    trained = [[v.path.split("/")[-2:] for v in m.trainable_variables] for m in (clone, net)]
    assert trained[0] == trained[1] == [["dec_0", "kernel"], ["dec_0", "bias"]]


def test_a_seeded_initializer_keeps_its_layer_seeds_through_a_config():
    """get_config holds the initializer as a dict, which from_config passed through without
    the per-layer seeds: every kernel of the same shape drawn alike again (dec_0 = enc_1)."""
    import keras

    ae = ConvAutoEncoder(get_config("orl").arch,
                         kernel_initializer=keras.initializers.HeNormal(seed=5))
    seeds = [layer.kernel_initializer.seed for layer in ae.named_layers]
    for copy in (ConvAutoEncoder.from_config(ae.get_config()), keras.models.clone_model(ae)):
        assert [layer.kernel_initializer.seed for layer in copy.named_layers] == seeds
        for a, b in zip(copy.build_for_input().get_weights(),
                        ae.build_for_input().get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)
    assert seeds == list(range(5, 5 + len(seeds)))


def test_a_loss_scale_optimizer_scales_the_loss_as_keras_does():
    """Keras' own train_step scales the loss (optimizer.scale_loss); the models' steps did not,
    so a LossScaleOptimizer divided unscaled gradients by 2^15 and the steps shrank."""
    import keras

    from mesc_tf.training import full_batch

    coefs = []
    for wrap in (False, True):
        model, x = tiny_mescnet(6, lr=1e-3)
        sgd = keras.optimizers.SGD(0.01)
        model.compile(optimizer=keras.optimizers.LossScaleOptimizer(sgd) if wrap else sgd)
        model.fit(full_batch(x), epochs=1, steps_per_epoch=1, verbose=0)
        coefs.append(model.coef.numpy())
    np.testing.assert_allclose(coefs[1], coefs[0], rtol=1e-6, atol=1e-12)
    assert not np.array_equal(coefs[0], np.full_like(coefs[0], 1e-4))  # the step moved C


def test_model_checkpoint_in_legacy_hdf5_is_refused_before_any_step(tmp_path):
    """Keras' ModelCheckpoint takes a .h5 path; the refusal came at its first save, after
    save_freq steps had run."""
    import keras

    from mesc_tf.training import adam, full_batch

    model, x = tiny_mescnet(6)
    model.compile(optimizer=adam(1e-3))
    with pytest.raises(MescError, match="legacy HDF5 format does not load a MESCNet back"):
        model.fit(full_batch(x), epochs=3, steps_per_epoch=1, verbose=0,
                  callbacks=[keras.callbacks.ModelCheckpoint(str(tmp_path / "m.h5"))])
    assert int(model.optimizer.iterations) == 0
    model.fit(full_batch(x), epochs=1, steps_per_epoch=1, verbose=0, callbacks=[
        keras.callbacks.ModelCheckpoint(str(tmp_path / "m.weights.h5"), save_weights_only=True)])
    assert (tmp_path / "m.weights.h5").exists()


def test_a_dtype_given_to_the_model_is_named_as_the_cause():
    with pytest.raises(MescError, match="dtype policy is 'float16': make it without dtype="):
        MESCNet(ConvAutoEncoder(TINY), 6, get_config("toy").mesc, dtype="float16")
