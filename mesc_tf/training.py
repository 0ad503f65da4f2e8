"""Full-batch training through ``keras.Model.fit`` (reference-facts §2.6, pitfalls 3–5).

The whole dataset is one batch, so one epoch is one Adam step (pretraining may take
minibatches, still one per epoch). That makes Keras' own callbacks work per step: the Progbar
callback below shows the loss terms, TensorBoard logs them, EarlyStopping can watch them and
:class:`AtomicBackupAndRestore` makes runs resumable.
"""

import functools
import json
import logging
import os
import sys
import time
import zipfile
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from mesc_tf.errors import MescError, one_line
from mesc_tf.files import (atomic_write_text, check_free_space, read_backup_state,
                           write_error)


# TF1's AdamOptimizer default; Keras' is 1e-7 (pitfall 3).
ADAM_EPSILON = 1e-8


class _ExpectedRetracing(logging.Filter):
    """Drops TF's 'triggered tf.function retracing' warning, and only that. Every call of
    fit_steps compiles a new model's step, so after a few fits (a sweep, or an estimator in a
    loop or a grid search) TF warns about retracing, though each step is traced only once."""

    def filter(self, record):
        return "triggered tf.function retracing" not in record.getMessage()


_EXPECTED_RETRACING = _ExpectedRetracing()


def configure_runtime(seed=None, deterministic=True):
    """Seed every random source (with ``seed``) and make float32 results reproducible.

    TF32 is switched off because the references ran without it (pitfall 4); op determinism
    makes GPU reductions repeatable (CPU kernels already are). Keras compiles nothing with XLA
    under op determinism, so a ``jit_compile`` run needs ``deterministic=False``.
    """
    if seed is not None:
        keras.utils.set_random_seed(int(seed))  # Python, NumPy and TF
    tf.config.experimental.enable_tensor_float_32_execution(False)
    if deterministic:
        tf.config.experimental.enable_op_determinism()
    else:  # TF has no public switch back
        from tensorflow.python.framework import config as tf_config

        tf_config.disable_op_determinism()


def _finite_images(x, what):
    """``x`` as float32, refusing NaN or inf pixels as fit refuses them in an array: a model's
    fit cannot see a dataset's pixels before its steps (a decoupled model's C stayed finite)."""
    x = tf.cast(tf.convert_to_tensor(x), tf.float32)  # a tensor of uint8 pixels, say
    if not bool(tf.reduce_all(tf.math.is_finite(x))):
        raise MescError(f"the images given to {what} hold NaN or inf pixels; clean or drop "
                        "those images first")
    return x


def full_batch(x):
    """A dataset that yields the whole array as one batch, forever: fit it with
    ``steps_per_epoch=1`` (evaluate and predict with ``steps=1``)."""
    return tf.data.Dataset.from_tensors(_finite_images(x, "full_batch")).repeat()


def minibatches(x, batch_size, seed=0, start_step=0):
    """A dataset of ``batch_size`` images per step, from step ``start_step`` on.

    Every pass over the data takes the samples in a new random order, and batches are
    consecutive chunks of that stream, the last of a pass running on into the next, so every
    batch is full and every image is used equally often. (The ``next_batch`` helper of DSC-Net's
    public pretraining code differs: its first batch is the first B images unshuffled, and
    where a batch would overrun the set it takes the first B of a fresh permutation, so with
    EYaleB's B = 2016 of 2432 every later step drops 416 random images.) Step s's
    batch depends on (seed, s) alone (a stateless shuffle per pass), so a run resumed at step s
    gets the batches the uninterrupted run would have had.
    """
    x = _finite_images(x, "minibatches")
    n, b = int(x.shape[0]), int(batch_size)
    if not 1 <= b <= n:
        raise MescError(f"the batch size must be between 1 and the {n} samples, got {b}")

    def batch(step):
        position = step * b + tf.range(b, dtype=tf.int64)
        passes, offsets = position // n, position % n
        first = passes[0]  # b <= n: a batch spans at most two passes

        def order(p):  # the sample at each offset of pass p
            return tf.random.experimental.index_shuffle(
                offsets, seed=tf.stack([tf.constant(seed, tf.int64), p]), max_index=n - 1)

        index = tf.where(passes == first, order(first), order(first + 1))
        return tf.gather(x, index)

    return tf.data.Dataset.range(int(start_step), 2**62).map(batch)


@functools.lru_cache(maxsize=8)
def tf1_beta_powers(beta: float) -> np.ndarray:
    """βᵗ for t = 1, 2, … (index t − 1) as TF1's AdamOptimizer had it: a float32 variable
    multiplied by β after every step. ``pow(β, t)`` differs in the last bit from step 3 on
    (β 0.999), which moves Adam's step size by up to 2e-5. The table ends at the first
    βᵗ ≤ 2⁻²⁵: from there on 1 − βᵗ rounds to 1 in float32 whatever βᵗ is, so the last entry
    serves every later step (17,321 entries for β 0.999)."""
    b = np.float32(beta)
    powers = [b]
    while powers[-1] > 2.0**-25:
        powers.append(powers[-1] * b)  # float32 times float32: one rounding, as in TF1
    return np.array(powers, np.float32)


@keras.saving.register_keras_serializable(package="mesc_tf")  # for model.save / load_model
class FusedAdam(keras.optimizers.Adam):
    """Keras Adam whose update is TF's fused ``ApplyAdam`` kernel, the one TF1's AdamOptimizer ran.

    Same rule as Keras' Adam (m += (g−m)(1−β1), v += (g²−v)(1−β2),
    var −= lr·√(1−β2ᵗ)/(1−β1ᵗ)·m/(√v+ε)), but in one in-place pass instead of about ten
    elementwise ops that each allocate an n×n temporary: for MNIST's C (10000², 400 MB) that is
    ~4x faster and keeps no temporaries. It also takes 1−β1 and 1−β2 in float32 as TF1 did
    (Keras rounds 1−β from float64), so C follows the released graph ~6x more closely, and
    β1ᵗ and β2ᵗ as TF1 had them (:func:`tf1_beta_powers`).
    """

    def __init__(self, *args, name="fused_adam", **kwargs):
        # Keras 3.12 named it after Adam's default, "adam"; 3.15 after the class.
        super().__init__(*args, name=name, **kwargs)

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad or isinstance(gradient, tf.IndexedSlices):
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        beta1_power, beta2_power = (
            tf.cast(tf.gather(table, tf.minimum(self.iterations, len(table) - 1)), dtype)
            for table in (tf1_beta_powers(self.beta_1), tf1_beta_powers(self.beta_2)))
        index = self._get_variable_index(variable)

        def handle(v):
            return (v.value if isinstance(v, keras.Variable) else v).handle

        tf.raw_ops.ResourceApplyAdam(
            var=handle(variable), m=handle(self._momentums[index]),
            v=handle(self._velocities[index]), beta1_power=beta1_power,
            beta2_power=beta2_power, lr=tf.cast(learning_rate, dtype), beta1=beta_1,
            beta2=beta_2, epsilon=tf.cast(self.epsilon, dtype), grad=tf.cast(gradient, dtype),
            use_locking=False)

    def _all_reduce_sum_gradients(self, grads_and_vars):
        # Keras sums the gradients over replicas even with one. Traced in a tf.function, that
        # all-reduce's custom gradient stays registered in TF's global gradient registry, and
        # with it every variable and Adam slot, for the rest of the process (MNIST: C and both
        # slots, 1.2 GB under post-clustering). Without a distribution strategy it is the
        # identity, so skip it.
        if not tf.distribute.has_strategy():
            return list(grads_and_vars)
        return super()._all_reduce_sum_gradients(grads_and_vars)


def adam(lr):
    return FusedAdam(learning_rate=lr, beta_1=0.9, beta_2=0.999, epsilon=ADAM_EPSILON)


class StepProgbar(keras.callbacks.Callback):
    """Keras' Progbar over all steps (= epochs), showing the loss terms; in a log file (no
    terminal) a plain line at the first step, every ``log_every`` seconds and at the last step
    instead, since Keras' bar writes carriage returns and colour codes wherever ``sys`` is
    posix."""

    def __init__(self, total_steps, verbose=1, log_every=30.0):
        super().__init__()
        self.total_steps, self.verbose, self.log_every = total_steps, verbose, log_every

    def on_train_begin(self, logs=None):
        tty = hasattr(sys.stdout, "isatty") and sys.stdout.isatty()
        # Every value logged is one step's (one epoch is one step): Progbar shows each as it is,
        # none as a mean over the steps so far (learning_rate, val_* and a callback's values too).
        self.bar = keras.utils.Progbar(self.total_steps, verbose=self.verbose, interval=0.05,
                                       unit_name="step", stateful_metrics=()) if tty else None
        self._start, self._last, self._line, self._step = time.perf_counter(), None, None, 0

    def on_epoch_end(self, epoch, logs=None):
        values = [(k, float(v)) for k, v in (logs or {}).items()]
        self._step = epoch + 1
        if self.bar is not None:
            self.bar.stateful_metrics.update(k for k, _ in values)
            self.bar.update(epoch + 1, values)
            return
        now = time.perf_counter()
        self._line = (f"step {epoch + 1}/{self.total_steps} - {now - self._start:.0f}s - "
                      + " - ".join(f"{k}: {v:.4g}" for k, v in values))
        if self._last is None or now - self._last >= self.log_every:
            self._last = now
            print(self._line, flush=True)
            self._line = None

    def on_train_end(self, logs=None):
        if self.bar is not None and self._step < self.total_steps:
            # Stopped early: the bar skips updates within 0.05 s of the last one, so it may not
            # show the last step yet, and its line is not ended.
            if self._step:
                self.bar.update(self._step, finalize=True)
            else:
                print(flush=True)
        elif self._line is not None:  # the last step's line, wherever training stopped
            print(self._line, flush=True)


class StopAtTarget(keras.callbacks.Callback):
    """Stop training at the first step whose ``monitor`` is ≤ ``target``. Placed after an
    EarlyStopping with restore_best_weights, the weights kept are the best that EarlyStopping
    recorded: that step's weights after its update (PretrainNet logs the error before it),
    unless the step improved by less than min_delta."""

    def __init__(self, target, monitor="rel_err"):
        super().__init__()
        self.target, self.monitor = float(target), monitor

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is not None and value <= self.target:
            self.model.stop_training = True


class StartingPoint(keras.callbacks.Callback):
    """The weights a run started from and their error, kept for the end of training
    (pipeline.pretrain counts them as step 0). It does nothing during training; a checkpoint
    carries them, so that a resumed run compares with the uninterrupted run's start."""

    def __init__(self, weights, error):
        super().__init__()
        self.start_weights, self.start_error = weights, float(error)


# What these callbacks carry from one epoch to the next (EarlyStopping's and ReduceLROnPlateau's
# on_train_begin resets it), and StartingPoint's start.
_STATEFUL = (keras.callbacks.EarlyStopping, keras.callbacks.ReduceLROnPlateau, StartingPoint)
_STATE_FIELDS = ("wait", "stopped_epoch", "best", "best_epoch", "best_weights",
                 "cooldown_counter", "start_weights", "start_error")


def _callback_state(cb, arrays: dict) -> dict:
    """``cb``'s fields for state.json; its weights go into ``arrays`` (the checkpoint's .npz:
    as JSON, a fine-tuning EarlyStopping's best C would be gigabytes of text), each field
    naming its arrays' key."""
    state = {}
    for name in _STATE_FIELDS:
        if hasattr(cb, name):
            value = getattr(cb, name)
            if name.endswith("_weights") and value is not None:
                key = f"{type(cb).__name__}.{name}"
                arrays.update({f"{key}.{i}": np.asarray(w) for i, w in enumerate(value)})
                value = {"npz": key, "count": len(value)}
            state[name] = value.item() if isinstance(value, np.generic) else value
    return state


_WHOLE_FIELDS = ("wait", "stopped_epoch", "best_epoch", "cooldown_counter")
_NUMBER_FIELDS = ("best", "start_error")


def _restore_callback_state(cb, state: dict, model_weights, where, arrays):
    for name, value in state.items():
        if name not in _STATE_FIELDS:
            raise MescError(f"{where}: unknown {type(cb).__name__} field {name!r}")
        # Checked here: a wrong type would fail inside fit, as a traceback.
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ((name in _WHOLE_FIELDS and not (number and float(value).is_integer()))
                or (name in _NUMBER_FIELDS and not number)):
            raise MescError(f"{where}: {type(cb).__name__}'s {name} is {value!r}, not a "
                            f"{'whole ' if name in _WHOLE_FIELDS else ''}number")
        if name.endswith("_weights") and value is not None:
            if isinstance(value, dict):  # in the .npz; older checkpoints hold JSON lists
                value = [arrays()[f"{value['npz']}.{i}"] for i in range(int(value["count"]))]
            value = [np.asarray(w, dtype=m.dtype) for w, m in zip(value, model_weights)]
            if [w.shape for w in value] != [m.shape for m in model_weights]:
                raise MescError(f"{where}: {type(cb).__name__}'s {name.replace('_', ' ')} do "
                                "not fit the model")
        setattr(cb, name, value)


def _state_bytes(model) -> int:
    """About the size of ``save_weights``' file: the variables, with room for h5py's layout."""
    variables = [*model.weights, *(model.optimizer.variables if model.optimizer else [])]
    data = sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in variables)
    return int(1.05 * data) + 2**20


class AtomicBackupAndRestore(keras.callbacks.BackupAndRestore):
    """BackupAndRestore whose backup survives a kill at any moment.

    Keras writes the weights file and then the epoch file in place, so a kill between the two
    (or during either) leaves an inconsistent or broken backup. Here every ``every`` epochs the
    full state (model weights, C, Adam slots and step counter, all in ``save_weights``) goes to
    a new file through a temporary name and ``os.replace``; then a small JSON naming that file
    and the epoch is replaced the same way. The last step, and a step after which a callback
    stopped training, are always saved. Weights + optimizer state + epoch, with the counters
    of the ``stateful`` callbacks (EarlyStopping, ReduceLROnPlateau, StartingPoint), whether
    training had stopped and the last step's logs (in the JSON), and those callbacks' best and
    starting weights (an .npz, written before the JSON that names it), is the whole training
    state: the only randomness after initialisation, the minibatch order, depends on (seed, step)
    alone (:func:`minibatches`). So a resumed run stops, halves its rate and keeps the weights
    the uninterrupted run would.
    """

    def __init__(self, backup_dir, every=1, stateful=()):
        super().__init__(backup_dir, save_freq="epoch", delete_checkpoint=False)
        self.every = max(int(every), 1)
        self.stateful = [cb for cb in stateful if isinstance(cb, _STATEFUL)]
        self._state_path = Path(backup_dir) / "state.json"
        # Training seconds of the steps in the backup, over every process that ran them.
        self._seconds_before, self._started = 0.0, time.perf_counter()
        self._logs = {}

    def on_epoch_end(self, epoch, logs=None):
        # After the other callbacks' on_epoch_end (fit_steps puts this one last): stop_training
        # already says whether one of them stopped training at this step.
        self._current_epoch = epoch + 1
        self._logs = {k: float(v) for k, v in (logs or {}).items()}
        if (self._current_epoch % self.every == 0 or self.model.stop_training
                or self._current_epoch == self.params.get("epochs")):
            self._save_model()

    def _save_model(self):
        backup_dir = Path(self.backup_dir)
        backup_dir.mkdir(parents=True, exist_ok=True)
        name = f"state-{self._current_epoch:08d}.weights.h5"
        arrays = {}
        callbacks = {type(cb).__name__: _callback_state(cb, arrays) for cb in self.stateful}
        npz = f"state-{self._current_epoch:08d}.callbacks.npz" if arrays else None
        # h5py does not fail cleanly on a full disk (it can crash on closing), so look first.
        check_free_space(backup_dir / f".tmp-{name}", _state_bytes(self.model) + sum(
            a.nbytes for a in arrays.values()), "the checkpoint")
        self._write_finished(name, lambda tmp: self.model.save_weights(str(tmp), overwrite=True))
        if npz is not None:
            self._write_finished(npz, lambda tmp: _save_npz(tmp, arrays))
        seconds = self._seconds_before + time.perf_counter() - self._started
        atomic_write_text(self._state_path, json.dumps({
            "epoch": self._current_epoch, "weights": name, "seconds": seconds,
            "stopped": bool(self.model.stop_training), "logs": self._logs,
            **({"callback_arrays": npz} if npz else {}), "callbacks": callbacks}))
        # Only now is the previous state unreferenced. Also drop temporary files a kill
        # left behind (they are never read: state.json names only finished files).
        for old in [*backup_dir.glob("state-*.weights.h5"), *backup_dir.glob(".tmp-state-*"),
                    *backup_dir.glob("state-*.callbacks.npz"), *backup_dir.glob(".state.json.*")]:
            if old.name not in (name, npz):
                old.unlink(missing_ok=True)

    def _write_finished(self, name, write):
        """``write(path)`` to a temporary name, flushed, then renamed to ``name``. A failed or
        interrupted write leaves no temporary file, and the previous checkpoint as it was."""
        tmp = Path(self.backup_dir) / f".tmp-{name}"
        try:
            write(tmp)
            _fsync(tmp)
        except BaseException as e:  # Ctrl-C or SIGTERM mid-write too
            tmp.unlink(missing_ok=True)
            if not isinstance(e, OSError):
                raise
            error = write_error(Path(self.backup_dir) / name, e)
            if self._state_path.exists():  # "write elsewhere" alone would abandon it
                kept = read_backup_state(self.backup_dir)["epoch"]
                error = MescError(f"{error}; the checkpoint of step {kept} is kept: once that "
                                  "is mended, rerun the same command with --resume")
            raise error from None
        os.replace(tmp, Path(self.backup_dir) / name)

    def _load_model(self):
        if not self._state_path.exists():
            return
        state = read_backup_state(self.backup_dir)
        weights = Path(self.backup_dir) / state["weights"]
        epoch, seconds = state["epoch"], state["seconds"]
        if self.model.optimizer is not None and not self.model.optimizer.built:
            self.model.optimizer.build(self.model.trainable_variables)
        try:
            self.model.load_weights(str(weights))
        except (OSError, ValueError, KeyError) as e:
            raise MescError(f"cannot restore the checkpoint {weights} ({one_line(e)}); it is "
                            f"damaged or belongs to a different model: delete {self.backup_dir} "
                            "(or pass --force without --resume) to start over") from None
        # One step per epoch: the weights file's step count is the epoch that state.json names
        # (a damaged or hand-edited state.json would resume silently at another step).
        steps = (int(self.model.optimizer.iterations.numpy())
                 if self.model.optimizer is not None else epoch)
        if steps != epoch:
            raise MescError(f"the checkpoint {self._state_path} says step {epoch}, but its "
                            f"weights {weights.name} were saved after step {steps}; it is "
                            f"damaged: delete {self.backup_dir} (or pass --force without "
                            "--resume) to start over")
        self.model._initial_epoch = epoch
        self._seconds_before = seconds
        saved = state.get("callbacks", {})  # older backups have no such key
        loaded = {}

        def arrays():  # the .npz, read once and only where a field names it
            if not loaded:
                try:
                    with np.load(Path(self.backup_dir) / state["callback_arrays"]) as f:
                        loaded.update(f)
                except (EOFError, zipfile.BadZipFile) as e:  # a damaged .npz: empty, not a zip
                    raise ValueError(f"{state['callback_arrays']}: {one_line(e)}") from None
            return loaded

        try:
            for cb in self.stateful:
                if type(cb).__name__ in saved:
                    _restore_callback_state(cb, saved[type(cb).__name__],
                                            self.model.get_weights(), self._state_path, arrays)
        except (MescError, ValueError, TypeError, AttributeError, KeyError, OSError) as e:
            raise MescError(f"cannot restore the checkpoint's callback state ({e}); delete "
                            f"{self.backup_dir} (or pass --force without --resume) to start "
                            "over") from None

    def on_train_begin(self, logs=None):
        # After the stateful callbacks' own on_train_begin, which resets them (fit_steps puts
        # this callback last).
        self._load_model()
        self._started = time.perf_counter()


def _save_npz(path, arrays):
    with open(path, "wb") as f:  # a file object: np.savez would add .npz to a name
        np.savez(f, **arrays)


def _fsync(path):
    """Flush a finished file to disk before it is renamed into place."""
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def fit_steps(model, x, epochs, lr, *, batch_size=None, seed=0, verbose=1, log_dir=None,
              backup_dir=None, checkpoint_every=None, callbacks=(), jit_compile=False):
    """Compile ``model`` with Adam and run ``epochs`` steps on ``x``, one per Keras epoch: on the
    whole of ``x`` (fine-tuning always; pretraining by default), or with ``batch_size`` on the
    next minibatch of :func:`minibatches` (shuffled with ``seed``).

    Returns (history dict of per-step loss terms, seconds spent in fit). With ``backup_dir``
    the training state is saved atomically every ``checkpoint_every`` steps and an existing
    backup there is resumed from.
    """
    resumed = (read_backup_state(backup_dir) if backup_dir is not None
               and (Path(backup_dir) / "state.json").exists() else {})
    if resumed.get("stopped"):  # a callback had stopped training there: no step, only the
        epochs = resumed["epoch"]  # callbacks' on_train_end (EarlyStopping's best weights)
    if batch_size is None or batch_size >= len(x):
        data = full_batch(x)
    else:  # a resumed run continues the stream of batches at the step it restores
        data = minibatches(x, batch_size, seed, resumed.get("epoch", 0))
    model.compile(optimizer=adam(lr), jit_compile=jit_compile)
    tf.get_logger().addFilter(_EXPECTED_RETRACING)  # once: the same filter is not added twice
    cbs = list(callbacks)
    if verbose:
        cbs.append(StepProgbar(epochs, verbose=verbose))
    if log_dir is not None:
        cbs.append(keras.callbacks.TensorBoard(log_dir=str(log_dir), write_graph=False))
    if backup_dir is not None:
        cbs.append(AtomicBackupAndRestore(backup_dir, every=checkpoint_every or epochs,
                                          stateful=callbacks))
    start = time.perf_counter()
    history = model.fit(data, epochs=epochs, steps_per_epoch=1, verbose=0, shuffle=False,
                        callbacks=cbs)
    seconds = time.perf_counter() - start
    return {k: np.asarray(v, np.float64) for k, v in history.history.items()}, seconds
