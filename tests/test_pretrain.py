"""Pretraining (issue 3): a tiny auto-encoder on synthetic images learns and is saved as a
loadable .h5; the stopping rules (patience, target error), the initializer option and
minibatches (when asked for or when memory says so)."""

import json
import re
import shutil
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from mesc_tf import memory, pipeline, sources
from mesc_tf.config import Architecture, Pretrain
from mesc_tf.errors import MescError
from mesc_tf.model import ConvAutoEncoder
from mesc_tf.measures import channel_activity, hidden_activation_means, relative_error
from mesc_tf.training import configure_runtime
from mesc_tf.weights import load_autoencoder, save_autoencoder
from scripts import load_script  # tests/scripts.py

ARCH = Architecture(image_shape=(16, 16), kernels=(3, 3), channels=(4, 6))


@pytest.fixture(scope="module")
def x():
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(0)
    imgs = np.stack([np.maximum(gaussian_filter(rng.standard_normal((16, 16)), 1.5), 0)
                     for _ in range(40)])
    return (imgs / imgs.max())[..., None].astype(np.float32)


def test_pretraining_lowers_the_error_and_writes_a_loadable_file(x, tmp_path,
                                                                tensorboard_scalars):
    configure_runtime(0)
    ae, info = pipeline.pretrain(x, ARCH, Pretrain(lr=1e-2, max_steps=60, patience=60), verbose=0,
                                 log_dir=tmp_path / "tb")
    err = info["history"]["rel_err"]
    assert info["steps"] == 60 and err[-1] < 0.6 * err[0]
    # TensorBoard has both logged terms at every step.
    logged = tensorboard_scalars(tmp_path / "tb")["train"]
    for tag in ("epoch_recon", "epoch_rel_err"):
        assert logged[tag] == list(range(60)), tag
    # The error recorded is that of the kept weights, measured again: here the error falls at
    # every step, so those are the last (keeping earlier best weights: the patience test below).
    assert info["relative_error"] <= err.min() + 1e-6
    activity = channel_activity(ae, x)
    assert list(activity) == list(info["channel_activity"])
    for name, recorded in info["channel_activity"].items():  # rounded to 4 digits
        np.testing.assert_allclose(activity[name], recorded, atol=5e-5)
    path = tmp_path / "tiny.h5"
    save_autoencoder(ae, path, {"steps": info["steps"]})
    loaded, meta = load_autoencoder(path, ARCH)
    assert meta["steps"] == 60
    np.testing.assert_array_equal(loaded(tf.constant(x)).numpy(), ae(tf.constant(x)).numpy())
    assert relative_error(loaded, x) == pytest.approx(info["relative_error"])


def test_target_error_stops_training_early(x):
    configure_runtime(0)
    _, free = pipeline.pretrain(x, ARCH, Pretrain(lr=1e-2, max_steps=40, patience=40), verbose=0)
    target = float(free["history"]["rel_err"][9])  # what 10 steps reach
    configure_runtime(0)
    _, info = pipeline.pretrain(x, ARCH, Pretrain(lr=1e-2, max_steps=40, patience=40,
                                                  target=target), verbose=0)
    assert info["steps"] == 10
    assert info["relative_error"] <= target + 1e-6


def test_patience_stops_training_and_keeps_the_best_weights(x):
    """No step improves the error (< 1) by min_delta 1.0, so the first step's weights stay the
    best: training stops `patience` steps later and returns them (Keras' EarlyStopping with
    restore_best_weights)."""
    weights = {}
    for steps, patience in ((1, 1), (100, 5)):
        configure_runtime(0)
        ae, info = pipeline.pretrain(x, ARCH, Pretrain(lr=1e-2, max_steps=steps,
                                                       patience=patience, min_delta=1.0),
                                     verbose=0)
        weights[steps] = [w.numpy() for w in ae.weights]
    assert (info["steps"], info["best_step"]) == (6, 1)
    for kept, first in zip(weights[100], weights[1], strict=True):
        np.testing.assert_array_equal(kept, first)


def test_continuing_never_returns_worse_weights_than_it_started_from(x):
    """--init: a trained auto-encoder under a fresh Adam at a high rate only gets worse. Keras'
    EarlyStopping would keep the weights after its best step's update (worse than the start);
    the starting weights count as step 0 and come back, with best_step 0."""
    configure_runtime(0)
    trained, _ = pipeline.pretrain(x, ARCH, Pretrain(lr=1e-2, max_steps=60, patience=60),
                                   verbose=0)
    start = [w.numpy().copy() for w in trained.weights]
    start_error = relative_error(trained, x)
    ae, info = pipeline.pretrain(x, ARCH, Pretrain(lr=0.5, max_steps=5, patience=5),
                                 init=trained, verbose=0)
    assert info["steps"] == 5 and info["best_step"] == 0
    assert info["relative_error"] == start_error
    assert min(info["history"]["rel_err"][1:]) > start_error  # every step made it worse
    for kept, first in zip(ae.weights, start, strict=True):
        np.testing.assert_array_equal(kept.numpy(), first)


def test_diverged_pretraining_is_refused_not_returned(x):
    """Images of 1e30 overflow the reconstruction error: NaN weights would give arbitrary codes
    and labels (the estimator's fit returned them silently), so pretraining stops with one
    line naming the rate and the pixel scale."""
    configure_runtime(0)
    with pytest.raises(MescError, match=r"pretraining diverged \(relative reconstruction error "
                       r"nan\); lower the learning rate \(it was 0.01\) or scale the images "
                       r"\(the largest value is 1e\+30\)"):
        pipeline.pretrain(x * np.float32(1e30), ARCH, Pretrain(lr=1e-2, max_steps=2), verbose=0)


@pytest.mark.parametrize("scale", [-1.0, 0, "abc", (), (1.0, float("inf")), True])
def test_a_bad_activation_scale_is_refused_when_the_schedule_is_made(scale):
    """It used to be read only by the rescaling, after the whole pretraining: -1 then gave a
    MescError, "abc" a bare ValueError."""
    with pytest.raises(MescError, match=re.escape(
            "activation_scale (--activation-scale) must be None, a finite number > 0 or a "
            f"tuple of them (one per hidden layer), got {scale!r}")):
        Pretrain(activation_scale=scale)
    assert Pretrain(activation_scale=(1, 2.5)).activation_scale == (1, 2.5)
    assert Pretrain(activation_scale=[1, 2.5]).activation_scale == (1, 2.5)  # JSON's list


def test_pretraining_checks_its_arguments_against_the_architecture_before_training(x):
    """An init of another architecture, or one activation scale too many, failed only after
    the training (in Keras' set_weights, or in the rescaling)."""
    other = ConvAutoEncoder(Architecture((16, 16), (3,), (4,))).build_for_input()
    with pytest.raises(MescError, match=r"pretrain's init is an auto-encoder of another "
                                        r"architecture \(Architecture\(.*channels=\(4,\)\)\)"):
        pipeline.pretrain(x, ARCH, Pretrain(max_steps=1), init=other, verbose=0)
    with pytest.raises(MescError, match=r"the activation scale needs one value or 3 \(one per "
                                        r"hidden layer\), got 2"):
        pipeline.pretrain(x, ARCH, Pretrain(max_steps=1, activation_scale=(1.0, 2.0)), verbose=0)


def test_a_continued_run_that_diverges_is_refused_whatever_its_error(x):
    """--init at an absurd rate: every step's error is inf or NaN. Both are a divergence, one
    line naming the rate; an inf used to count as 'worse than the start' and return the start
    silently, a NaN as a divergence."""
    configure_runtime(0)
    trained, _ = pipeline.pretrain(x, ARCH, Pretrain(lr=1e-2, max_steps=20), verbose=0)
    for lr in (1e10, 1e30):
        rate = re.escape(f"{lr:g}")
        with pytest.raises(MescError, match=rf"pretraining diverged \(relative reconstruction "
                           rf"error (inf|nan)\); lower the learning rate \(it was {rate}\)"):
            pipeline.pretrain(x, ARCH, Pretrain(lr=lr, max_steps=3, patience=3),
                              init=trained, verbose=0)


def test_pretraining_refuses_nan_images_before_training(x):
    """NaN pixels used to train to NaN weights and be reported as a divergence (blaming the
    learning rate); now they are refused first, as the estimator and the loaders refuse them."""
    bad = x.copy()
    bad[0, 0, 0, 0] = np.nan
    configure_runtime(0)
    with pytest.raises(MescError, match="pretraining images: images hold 1 NaN or infinite "
                       "values; remove or fill them first"):
        pipeline.pretrain(bad, ARCH, Pretrain(max_steps=2), verbose=0)
    # Negative pixels: the callers' warning (the estimator's would otherwise come twice).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pipeline.pretrain(x - 0.1, ARCH, Pretrain(max_steps=1), verbose=0)


def test_pretraining_refuses_images_whose_squares_underflow(x):
    """Pixels below ~1e-19: every square is 0 in float32 (TF flushes subnormals), and the
    relative error's 0/0 was a ZeroDivisionError traceback (also from the estimator's fit);
    now one line, before any training. Pixels of 1e-18 still pretrain."""
    configure_runtime(0)
    with pytest.raises(MescError, match=r"largest pixel magnitude is 1e-20, whose square is 0 "
                       r"in float32.*rescale the images"):
        pipeline.pretrain(x * np.float32(1e-20 / x.max()), ARCH, Pretrain(max_steps=2),
                          verbose=0)
    _, info = pipeline.pretrain(x * np.float32(1e-18), ARCH, Pretrain(max_steps=1), verbose=0)
    assert np.isfinite(info["relative_error"])


def test_lr_patience_halves_the_rate_on_plateaus(x):
    """With no improvement, ReduceLROnPlateau halves the rate every ``lr_patience`` steps."""
    configure_runtime(0)
    _, info = pipeline.pretrain(x, ARCH, Pretrain(lr=1e-2, max_steps=9, patience=100,
                                                  min_delta=1.0, lr_patience=2), verbose=0)
    assert info["steps"] == 9
    assert info["final_lr"] == pytest.approx(1e-2 / 2**4)


def test_initializer_option(x):
    stds = {}
    for init in ("he_normal", "glorot_uniform", "truncated_normal"):
        configure_runtime(0)
        ae, _ = pipeline.pretrain(x, ARCH, Pretrain(max_steps=1, initializer=init), verbose=0)
        stds[init] = float(np.std(ae.encoder_layers[1].kernel.numpy()))
    # enc_1: 3×3×4 → 6. he_normal std √(2/36) = 0.24; glorot_uniform √(2/(36+54)) = 0.15
    # (one Adam step of lr 1e-3 barely moves them).
    assert stds["he_normal"] == pytest.approx(np.sqrt(2 / 36), rel=0.25)
    assert stds["glorot_uniform"] == pytest.approx(np.sqrt(2 / 90), rel=0.25)
    assert stds["truncated_normal"] == pytest.approx(0.088, rel=0.25)  # 0.1 truncated at 2σ
    with pytest.raises(MescError, match="unknown initializer 'zeros'"):
        Pretrain(initializer="zeros")


def test_pretrain_schedule_bounds_are_one_table():
    """Pretrain, experiments/pretrain.py and the estimator take and refuse the same values
    (the estimator once refused patience 0, which the command and Keras take)."""
    from mesc_tf import MESCClustering

    Pretrain(patience=0, lr_patience=0, max_steps=0, min_delta=0.0, target=0.0, batch_size=1)
    MESCClustering(2, pretrain_patience=0)._schedule()
    for field, value, need in (("lr", 0.0, "a finite number > 0"),
                               ("max_steps", 2.5, "a whole number >= 0"),
                               ("patience", -1, "a whole number >= 0"),
                               ("min_delta", float("inf"), "a finite number >= 0"),
                               ("lr_patience", True, "a whole number >= 0"),
                               ("target", 1.0, "in [0, 1)"),
                               ("batch_size", 0, "a whole number >= 1")):
        flag = field.replace("_", "-")
        with pytest.raises(MescError, match=re.escape(f"{field} (--{flag}) must be {need}")):
            Pretrain(**{field: value})
    with pytest.raises(MescError, match="pretrain_patience must be a whole number >= 0, got -1"):
        MESCClustering(2, pretrain_patience=-1)._schedule()


def test_minibatches_take_each_pass_in_a_new_order_and_resume_exactly():
    from mesc_tf.training import minibatches

    n, b = 10, 4
    ids = np.arange(n, dtype=np.float32).reshape(n, 1, 1, 1)  # each image holds its index

    def stream(start, steps):
        return np.concatenate([batch.numpy().ravel() for batch in
                               minibatches(ids, b, seed=3, start_step=start).take(steps)])

    five = stream(0, 5)  # 20 positions: two passes, batch 2 straddling them
    passes = five[:n], five[n:]
    assert all(sorted(p) == list(range(n)) for p in passes)
    assert not np.array_equal(*passes)  # a new order every pass
    np.testing.assert_array_equal(stream(3, 2), five[3 * b:])  # a resumed stream continues
    assert not np.array_equal(five, np.concatenate([batch.numpy().ravel() for batch in
                                                    minibatches(ids, b, seed=4).take(5)]))
    with pytest.raises(MescError, match="between 1 and the 10 samples"):
        minibatches(ids, 11)
    whole = next(iter(minibatches(ids, n))).numpy().ravel()  # B = n: every sample once
    assert sorted(whole) == list(range(n))


def test_minibatch_pretraining_learns_and_resumes_exactly(x, tmp_path):
    """A run stopped after 3 steps and resumed gives steps 4-6 the batches and errors of the
    uninterrupted run, bit for bit."""
    schedule = Pretrain(lr=1e-2, max_steps=6, patience=6, batch_size=16)
    configure_runtime(0)
    _, whole = pipeline.pretrain(x, ARCH, schedule, verbose=0, seed=5)
    assert whole["batch_size"] == 16 and whole["steps"] == 6
    configure_runtime(0)
    backup = tmp_path / "ckpt"
    pipeline.pretrain(x, ARCH, Pretrain(lr=1e-2, max_steps=3, patience=6, batch_size=16),
                      verbose=0, seed=5, backup_dir=backup, checkpoint_every=3)
    configure_runtime(1)  # the checkpoint, not the seed, restores the weights
    _, resumed = pipeline.pretrain(x, ARCH, schedule, verbose=0, seed=5, backup_dir=backup,
                                   checkpoint_every=3)
    np.testing.assert_array_equal(resumed["history"]["rel_err"], whole["history"]["rel_err"][3:])
    configure_runtime(0)
    _, full = pipeline.pretrain(x, ARCH, Pretrain(lr=1e-2, max_steps=60, patience=60,
                                                  batch_size=16), verbose=0, seed=5)
    assert full["relative_error"] < 0.6 * full["history"]["rel_err"][0]


@pytest.mark.parametrize("lr", [0.07, 0.3])
def test_resumed_pretraining_stops_and_keeps_the_weights_of_the_uninterrupted_run(x, tmp_path,
                                                                                   lr):
    """EarlyStopping's best weights and counters, ReduceLROnPlateau's and the starting weights
    travel with the checkpoint: killed at step 10 and resumed from another seed's start, a run
    whose best step comes before the kill halves its rate, stops and returns the weights as the
    uninterrupted run does: EarlyStopping's best (lr 0.07), or the start, which every step at
    lr 0.3 left worse."""
    schedule = Pretrain(lr=lr, max_steps=40, patience=12, lr_patience=3)  # best step early
    configure_runtime(0)
    ae, whole = pipeline.pretrain(x, ARCH, schedule, verbose=0)
    assert (whole["best_step"] > 0) == (lr == 0.07)
    assert whole["best_step"] <= 10 and whole["steps"] < 40  # EarlyStopping ended it
    assert whole["final_lr"] < schedule.lr  # and the rate was halved on the way
    configure_runtime(0)
    backup = tmp_path / "ckpt"
    pipeline.pretrain(x, ARCH, schedule.replace(max_steps=10), verbose=0, backup_dir=backup,
                      checkpoint_every=5)
    configure_runtime(1)  # the checkpoint, not the seed, restores the state
    resumed_ae, resumed = pipeline.pretrain(x, ARCH, schedule, verbose=0, backup_dir=backup,
                                            checkpoint_every=5)
    for key in ("steps", "best_step", "final_lr", "relative_error"):
        assert resumed[key] == whole[key], key
    for a, b in zip(ae.get_weights(), resumed_ae.get_weights()):
        np.testing.assert_array_equal(a, b)
    # A state.json whose saved best weights do not fit the model: one clear error.
    state_path = backup / "state.json"
    state = json.loads(state_path.read_text())
    state["callbacks"]["EarlyStopping"]["best_weights"] = [[1.0]]
    state_path.write_text(json.dumps(state))
    with pytest.raises(MescError, match="cannot restore the checkpoint's callback state"):
        pipeline.pretrain(x, ARCH, schedule.replace(max_steps=60), verbose=0, backup_dir=backup)
    # A counter that is not a number failed inside fit, as a TypeError.
    state["callbacks"]["EarlyStopping"].pop("best_weights")
    for field, value in (("wait", "x"), ("wait", 1.5), ("best", None), ("best_epoch", True)):
        bad = json.loads(json.dumps(state))
        bad["callbacks"]["EarlyStopping"][field] = value
        state_path.write_text(json.dumps(bad))
        with pytest.raises(MescError, match=f"EarlyStopping.s {field} is .*, not a .*number\\); "
                           r"delete .* \(or pass --force without --resume\) to start over"):
            pipeline.pretrain(x, ARCH, schedule.replace(max_steps=60), verbose=0,
                              backup_dir=backup)


def test_a_checkpoint_keeps_callbacks_weights_in_an_npz_and_reads_older_json_lists(x, tmp_path):
    """Fine-tuning through the library with EarlyStopping(restore_best_weights): its best
    weights hold C, n x n, which state.json carried as JSON lists (6x C's size, gigabytes for
    MNIST). They go into one .npz beside the weights; a resumed run keeps the uninterrupted
    run's C; an older checkpoint's JSON lists still restore; a missing .npz is one error."""
    from mesc_tf.config import Settings

    settings = Settings(epochs=12, lr=1e-3)
    configure_runtime(0)
    ae, _ = pipeline.pretrain(x, ARCH, Pretrain(lr=1e-2, max_steps=5), verbose=0)
    start = ae.get_weights()

    def run(epochs, backup):
        ae.set_weights(start)  # fine-tuning trains the auto-encoder it is given
        early = keras.callbacks.EarlyStopping(monitor="loss", patience=100,
                                              restore_best_weights=True)
        model, _, _ = pipeline.fine_tune(x, settings.replace(epochs=epochs), ae, verbose=0,
                                         backup_dir=backup, checkpoint_every=3,
                                         callbacks=[early])
        return model.coef.numpy()

    configure_runtime(0)
    whole = run(12, None)
    backup = tmp_path / "ckpt"
    configure_runtime(0)
    at_7 = run(7, backup)  # EarlyStopping's best weights, restored at the end: step 7's
    state = json.loads((backup / "state.json").read_text())
    assert state["callback_arrays"] == "state-00000007.callbacks.npz"
    assert sorted(p.name for p in backup.iterdir()) == [
        "state-00000007.callbacks.npz", "state-00000007.weights.h5", "state.json"]
    assert (backup / "state.json").stat().st_size < 2000  # no C in it
    snapshot = tmp_path / "at-step-7"
    shutil.copytree(backup, snapshot)
    # The best weights read back are the ones saved: resumed at its last step, the run takes no
    # step and ends on them (the 12-step runs below would end on later bests whatever was read).
    shutil.copytree(snapshot, tmp_path / "again")
    np.testing.assert_array_equal(run(7, tmp_path / "again"), at_7)
    # A kill after step 9's .npz was renamed into place, before state.json named it, and one
    # during its write: never read (state.json names step 7's), gone after the next save.
    for stray in ("state-00000009.callbacks.npz", ".tmp-state-00000009.callbacks.npz"):
        (backup / stray).write_bytes(b"half written")
    configure_runtime(1)
    np.testing.assert_array_equal(run(12, backup), whole)
    assert sorted(p.name for p in backup.iterdir()) == [
        "state-00000012.callbacks.npz", "state-00000012.weights.h5", "state.json"]
    # A checkpoint of before: the weights as JSON lists, no .npz.
    older = tmp_path / "older"
    shutil.copytree(snapshot, older)
    with np.load(older / state["callback_arrays"]) as f:
        arrays = dict(f)
    (older / state["callback_arrays"]).unlink()
    old = json.loads(json.dumps(state))
    old.pop("callback_arrays")
    field = old["callbacks"]["EarlyStopping"]["best_weights"]
    old["callbacks"]["EarlyStopping"]["best_weights"] = [
        arrays[f"{field['npz']}.{i}"].tolist() for i in range(field["count"])]
    (older / "state.json").write_text(json.dumps(old))
    shutil.copytree(older, tmp_path / "older-again")
    np.testing.assert_array_equal(run(7, tmp_path / "older-again"), at_7)
    configure_runtime(1)
    np.testing.assert_array_equal(run(12, older), whole)
    # A damaged .npz (empty, or cut short), then state.json naming one that is not there.
    npz = snapshot / state["callback_arrays"]
    for damaged in (b"", npz.read_bytes()[:1000]):
        npz.write_bytes(damaged)
        with pytest.raises(MescError, match=r"callback state \(state-00000007.callbacks.npz: "
                           r".*; delete .*at-step-7 \(or pass --force"):
            run(12, snapshot)
    npz.unlink()
    with pytest.raises(MescError, match=r"cannot restore the checkpoint's callback state .*"
                       r"state-00000007.callbacks.npz.*; delete .*at-step-7 \(or pass --force"):
        run(12, snapshot)


@pytest.mark.parametrize("stop", ["early_stopping", "target", "max_steps"])
def test_a_checkpoint_of_a_finished_run_resumes_without_a_step(x, tmp_path, stop):
    """Killed after its last step but before the .h5 is written, a run resumed from that
    checkpoint takes no further step (Keras would start the next epoch) and returns the
    uninterrupted run's weights, step count and best step."""
    schedule = {"early_stopping": Pretrain(lr=0.07, max_steps=40, patience=12, lr_patience=3),
                "target": Pretrain(lr=1e-2, max_steps=40, patience=40, target=0.87),
                "max_steps": Pretrain(lr=1e-2, max_steps=6, patience=6)}[stop]
    configure_runtime(0)
    # Saved every 1000 steps: the step that stopped it (or the last) is saved all the same.
    ae, whole = pipeline.pretrain(x, ARCH, schedule, verbose=0, backup_dir=tmp_path / "ckpt",
                                  checkpoint_every=1000)
    assert (whole["steps"] < schedule.max_steps) == (stop != "max_steps")
    state = json.loads((tmp_path / "ckpt" / "state.json").read_text())
    assert state["epoch"] == whole["steps"] and state["stopped"] == (stop != "max_steps")
    assert state["logs"]["rel_err"] == pytest.approx(whole["history"]["rel_err"][-1], rel=1e-6)
    configure_runtime(1)  # the checkpoint, not the seed, restores the state
    again_ae, again = pipeline.pretrain(x, ARCH, schedule, verbose=0,
                                        backup_dir=tmp_path / "ckpt", checkpoint_every=1000)
    assert again["history"] == {}  # no step
    for key in ("steps", "best_step", "final_lr", "relative_error"):
        assert again[key] == whole[key], key
    for a, b in zip(ae.get_weights(), again_ae.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_pretraining_batch_is_the_whole_set_unless_memory_says_otherwise(monkeypatch):
    size = memory.pretrain_batch_size
    per_image = memory._training_bytes_per_image(ARCH)
    assert size(40, ARCH) is None  # plenty of memory here
    assert size(40, ARCH, 16) == 16 and size(40, ARCH, 40) is None and size(40, ARCH, 99) is None
    base = memory.RUNTIME_BYTES + 4 * 40 * 16 * 16  # the runtime and the images
    monkeypatch.setenv(memory.MEMORY_LIMIT_ENV, str(int(base + 10.5 * per_image)))
    assert size(40, ARCH) == 10
    assert size(40, ARCH, 40) is None  # asked for: the user's call
    monkeypatch.setenv(memory.MEMORY_LIMIT_ENV, str(int(base + 0.5 * per_image)))
    with pytest.raises(MescError, match="even one image per step"):
        size(40, ARCH)
    with pytest.raises(MescError, match="batch size must be >= 1"):
        size(40, ARCH, 0)


def test_pretraining_too_large_names_the_cap_that_limits_it(monkeypatch):
    """As check_memory's: a refusal under $MESC_MEMORY_LIMIT_BYTES names the cap, not only 'a
    machine with more memory' (it said the latter alone, though the machine had room)."""
    monkeypatch.setenv(memory.MEMORY_LIMIT_ENV, "1e6")
    with pytest.raises(MescError, match=r"976\.6 KiB is available \(the cap "
                       r"MESC_MEMORY_LIMIT_BYTES sets\)"):
        memory.pretrain_batch_size(40, ARCH)


def test_pretrain_command_checks_the_new_options(capsys):

    mod = load_script("experiments/pretrain.py", "pretrain_cli")
    for argv, needle in ((["--target", "1.5"], "--target must be in [0, 1)"),
                         (["--initializer", "zeros"], "invalid choice"),
                         (["--max-steps", "0"], "--max-steps 0 trains nothing: give --init"),
                         (["--activation-scale", "-1"], "must be a finite number >= 0"),
                         (["--activation-scale", "1,0,1,1,1"], "finite numbers > 0"),
                         (["--activation-scale", "1,a"], "numbers separated by commas"),
                         (["--activation-scale", "1,2"],
                          "needs one value or 5 (orl has 5 hidden layers), got 2"),
                         (["--batch-size", "0"], "--batch-size must be a whole number >= 1")):
        with pytest.raises(SystemExit) as e:
            mod.parse_args(["--dataset", "orl", *argv])
        assert e.value.code == 2
        assert needle in capsys.readouterr().err


def test_dead_channels_finds_channels_off_for_every_image(x):
    from mesc_tf.model import ConvAutoEncoder
    from mesc_tf.measures import dead_channels

    configure_runtime(0)
    ae = ConvAutoEncoder(ARCH).build_for_input()
    assert dead_channels(ae, x) == []  # zero biases, he_normal: every channel fires somewhere
    last = ae.encoder_layers[-1]
    last.bias.assign(last.bias.numpy() - np.array([0, 1e6, 0, 0, 0, 1e6], np.float32))
    assert dead_channels(ae, x) == [1, 5]


def test_channel_activity_counts_where_each_channel_is_on(x):
    from mesc_tf.model import ConvAutoEncoder

    configure_runtime(0)
    ae = ConvAutoEncoder(ARCH).build_for_input()
    first = ae.encoder_layers[0]
    # Channel 0 off everywhere, channel 1 on everywhere (the images are >= 0, the kernel too).
    k = first.kernel.numpy()
    k[..., 1] = np.abs(k[..., 1])
    first.kernel.assign(k)
    first.bias.assign(first.bias.numpy() + np.array([-1e6, 1.0] + [0.0] * (k.shape[-1] - 2),
                                                    np.float32))
    act = channel_activity(ae, x, batch_size=5)  # several batches
    assert list(act) == [layer.name for layer in ae.named_layers]
    assert [len(a) for a in act.values()] == [layer.filters for layer in ae.named_layers]
    assert act["enc_0"][0] == 0.0 and act["enc_0"][1] == 1.0
    # Against a direct count on the whole set at once.
    h = first(x).numpy()
    np.testing.assert_allclose(act["enc_0"], (h > 0).mean(axis=(0, 1, 2)), rtol=1e-12)


def test_rescaling_keeps_every_reconstruction_and_sets_the_scale(x):
    from mesc_tf.errors import MescError
    from mesc_tf.model import ConvAutoEncoder
    from mesc_tf.measures import rescale_activations

    configure_runtime(0)
    ae, info = pipeline.pretrain(x, ARCH, Pretrain(lr=1e-2, max_steps=20, activation_scale=0.05),
                                 verbose=0)
    assert len(info["activation_factors"]) == 3  # enc_0, enc_1 (codes), dec_0
    np.testing.assert_allclose(hidden_activation_means(ae, x), 0.05, rtol=1e-5)
    before = ae(tf.constant(x)).numpy()
    factors = rescale_activations(ae, x, 2.0, batch_size=16)  # in batches, as for MNIST
    np.testing.assert_allclose(factors, 40.0, rtol=1e-5)
    np.testing.assert_allclose(ae(tf.constant(x)).numpy(), before, rtol=1e-4, atol=1e-6)
    # --max-steps 0: no training, only the rescaling of init.
    _, info = pipeline.pretrain(x, ARCH, Pretrain(max_steps=0, activation_scale=0.05), init=ae,
                                verbose=0)
    assert info["steps"] == 0 and info["activation_factors"] == pytest.approx([1 / 40] * 3)
    # A layer dead for every image (here enc_1, hence dec_0's input) cannot reach the scale;
    # the rescaling still goes through, as it runs after a possibly long training.
    dead = ConvAutoEncoder(ARCH).build_for_input()
    dead.encoder_layers[1].bias.assign(dead.encoder_layers[1].bias - 1e6)
    before = dead(tf.constant(x)).numpy()
    factors = rescale_activations(dead, x, 1.0)
    assert factors[1] == factors[0] and factors[2] == factors[0]  # dec_0 outputs relu(0) = 0
    np.testing.assert_allclose(dead(tf.constant(x)).numpy(), before, rtol=1e-5, atol=1e-6)
    with pytest.raises(MescError, match="activation scale must be finite and > 0"):
        rescale_activations(dead, x, 0.0)


def test_rescaling_to_one_scale_per_layer(x):
    """EYaleB's schedule rescales each hidden layer to its own mean (the original's)."""
    from mesc_tf.measures import rescale_activations

    configure_runtime(0)
    targets = (0.5, 2.0, 0.25)
    ae, _ = pipeline.pretrain(x, ARCH, Pretrain(lr=1e-2, max_steps=5), verbose=0)
    before = ae(tf.constant(x)).numpy()
    means = hidden_activation_means(ae, x)
    factors = rescale_activations(ae, x, targets)
    np.testing.assert_allclose(factors, np.array(targets) / means, rtol=1e-6)
    np.testing.assert_allclose(hidden_activation_means(ae, x), targets, rtol=1e-5)
    np.testing.assert_allclose(ae(tf.constant(x)).numpy(), before, rtol=1e-4, atol=1e-6)
    for bad, needle in (((1.0, 2.0), "needs one value or 3 .one per hidden layer., got 2"),
                        ((1.0, 0.0, 1.0), "must be finite and > 0"),
                        ((1.0, np.inf, 1.0), "must be finite and > 0")):
        with pytest.raises(MescError, match=needle):
            rescale_activations(ae, x, bad)
    np.testing.assert_allclose(ae(tf.constant(x)).numpy(), before, rtol=1e-4, atol=1e-6)


def test_configured_per_layer_scales_fit_the_architecture():
    """A schedule's per-layer activation scales (EYaleB's) name every hidden layer, so that
    ``pretrain.py --dataset D`` does not fail after hours of training."""
    from mesc_tf.config import DATASETS
    from mesc_tf.model import ConvAutoEncoder

    per_layer = {d: c for d, c in DATASETS.items()
                 if np.ndim(c.pretrain.activation_scale) == 1}
    assert "eyaleb" in per_layer
    for cfg in per_layer.values():
        hidden = len(ConvAutoEncoder(cfg.arch).build_for_input().named_layers) - 1
        assert len(cfg.pretrain.activation_scale) == hidden, cfg.name
        assert min(cfg.pretrain.activation_scale) > 0, cfg.name


# The auto-encoders issue 3 asks pretrained/ to ship (COIL40/COIL100 wait for COIL100.mat).
SHIPPED = ("orl", "coil20", "toy", "eyaleb", "usps", "mnist")


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_autoencoder_meets_the_reconstruction_bar(name, shared_data, tf1_ckpts):
    """pretrained/<name>.h5 exists, records the error it has on the shared data, and that error
    is at most 1.2x the authors' checkpoint's on the same data (Toy: the COIL20 checkpoint)."""
    from mesc_tf.config import get_config
    from mesc_tf.data import load_dataset
    from mesc_tf.weights import load_tf1_checkpoint

    path = sources.pretrained_path(name)
    assert path.is_file(), f"{path} is not shipped"
    arch = get_config(name).arch
    ours, meta = load_autoencoder(path, arch)
    x = load_dataset(name, shared_data).x
    err = relative_error(ours, x)
    assert meta["relative_error"] == pytest.approx(err, rel=1e-3)
    original = relative_error(load_tf1_checkpoint(tf1_ckpts["coil20" if name == "toy" else name],
                                                  arch), x)
    assert err <= 1.2 * original
    if meta.get("activation_scale"):  # rescaled after training: the recorded scale holds
        np.testing.assert_allclose(hidden_activation_means(ours, x), meta["activation_scale"],
                                   rtol=1e-3)


def test_lr_patience_stops_halving_at_a_thousandth(x):
    """ReduceLROnPlateau's floor is lr/1000: 12 halvings (1/4096) stop at 1/1000."""
    configure_runtime(0)
    _, info = pipeline.pretrain(x, ARCH, Pretrain(lr=1e-2, max_steps=13, patience=100,
                                                  min_delta=1.0, lr_patience=1), verbose=0)
    assert info["final_lr"] == pytest.approx(1e-2 / 1000)


def test_checkpoint_every_saves_at_that_step(x, tmp_path):
    """checkpoint_every=2: the backup holds step 2 when step 3 begins, nothing before."""
    import keras

    from mesc_tf.model import PretrainNet
    from mesc_tf.training import fit_steps

    seen = []
    backup = tmp_path / "ckpt"

    class Look(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            state = backup / "state.json"
            seen.append(json.loads(state.read_text())["epoch"] if state.exists() else None)

    configure_runtime(0)
    net = PretrainNet(ConvAutoEncoder(ARCH).build_for_input())
    net(tf.constant(x[:1]))
    fit_steps(net, x, 5, 1e-3, verbose=0, backup_dir=backup, checkpoint_every=2,
              callbacks=[Look()])
    assert seen == [None, None, 2, 2, 4]
    assert json.loads((backup / "state.json").read_text())["epoch"] == 5


def test_dead_channels_are_only_those_never_on(monkeypatch):
    """A latent channel on at a few positions (here 0.5 %) is alive: only a channel off for
    every image and pixel counts as dead."""
    from mesc_tf import measures

    ae = ConvAutoEncoder(ARCH).build_for_input()
    activity = {layer.name: np.ones(layer.filters) for layer in ae.named_layers}
    activity["enc_1"] = np.array([0.0, 0.005, 1e-6, 0.5, 0.0, 1.0])
    monkeypatch.setattr(measures, "channel_activity", lambda *a, **k: activity)
    assert measures.dead_channels(ae, np.zeros((1, 16, 16, 1), np.float32)) == [0, 4]
