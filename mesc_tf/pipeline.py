"""The steps every experiment (and the estimator) shares: pretraining, fine-tuning and
clustering, with the memory checks before them (the auto-encoder comes from
:mod:`mesc_tf.sources`).

One code path: ``experiments/run.py``, the sweeps, the tables and
:class:`mesc_tf.estimator.MESCClustering` all call these functions.
"""

import gc
import os
import time

import numpy as np

from mesc_tf import postcluster
from mesc_tf.config import Architecture, Settings, check_post_method, encoder_sizes
from mesc_tf.errors import MescError
from mesc_tf.files import size_text
from mesc_tf.metrics import evaluate

# Resident memory of the runtime itself (TensorFlow, Keras, numpy, scipy, sklearn), measured.
RUNTIME_BYTES = 800 * 2**20


# TensorFlow's switch for its pooling (BFC) allocator on the CPU; read when TF starts.
BFC_ENV = "TF_CPU_ALLOCATOR_USE_BFC"
# The BFC pool over fine-tuning's estimate below, from one measurement: MNIST-10k end to end
# peaked at 5.17 GiB with the pool (estimate then 5.3 GiB, now 5.5), 3.81 GiB without (session
# 18).
BFC_POOL_FACTOR = 1.1


def bfc_allocator() -> bool:
    """Whether TensorFlow keeps CPU tensors in its BFC pool (``TF_CPU_ALLOCATOR_USE_BFC`` true
    or 1). Faster where first touches of memory are slow, but the pool is kept until the
    process ends (README, "Performance")."""
    return os.environ.get(BFC_ENV, "").strip().lower() in ("1", "true")


def _training_bytes_per_image(arch: Architecture) -> float:
    """The auto-encoder's float32 activations of one image (input and reconstruction, every
    encoder and decoder layer), their gradients and the convolutions' work buffers: about 3.5 ×
    the activations of one forward pass."""
    sizes = encoder_sizes(arch)
    per_image = sizes[0][0] * sizes[0][1]  # input and reconstruction
    per_image += 2 * sum(h * w * c for (h, w), c in zip(sizes[1:], arch.channels))  # enc + dec
    return 4 * 3.5 * per_image


def memory_estimate(n_samples: int, arch: Architecture, rank: int = 121) -> int:
    """Bytes a run needs at its peak (MNIST-10k end to end: measured 3.36-3.89 GiB in session
    20, during fine-tuning; estimate 3.97).

    Fine-tuning: C and its two Adam slots (3 n² float32) stay; during a step the C-gradient
    of the self-expression term (n²), the entropy's gradient (n², recomputed from C in the
    backward pass, see losses.entropy) and their sum exist, less what the allocator reuses
    (about 2.5 n² float32 in all), plus the auto-encoder's activations, their gradients and the
    convolutions' work buffers (about 3.5 × the activations of one forward pass), plus Z, C·Z,
    their difference, their gradients and the products' outputs (about 8 n × p float32, p the
    code's size; COIL20's measured step, p = 3840 > n, peaked 10 % over the estimate
    without them: tests/test_reliability.py).
    Post-clustering (postcluster's fast route; ``run`` has dropped the model) then holds C and
    the affinity/Laplacian/Cholesky buffer (one n² float64), the sparse thresholded C and the
    n × r embedding (r = ``rank``, d·K + 1): less than fine-tuning (MNIST: 2.45 GiB). Plus the
    runtime. With TF's BFC allocator (``bfc_allocator``) the pool fine-tuning grew,
    ``BFC_POOL_FACTOR`` × its estimate, stays resident during post-clustering: the two add up.
    """
    n = int(n_samples)
    (h, w), c = encoder_sizes(arch)[-1], arch.channels[-1]
    train = 4 * 5.5 * n * n + n * _training_bytes_per_image(arch) + 4 * 8 * n * h * w * c
    post = 4 * n * n + 8 * n * n + 16 * n * min(int(rank), n) + 64 * 2**20
    if bfc_allocator():
        return int(BFC_POOL_FACTOR * train + post + RUNTIME_BYTES)
    return int(max(train, post) + RUNTIME_BYTES)


MEMORY_LIMIT_ENV = "MESC_MEMORY_LIMIT_BYTES"


def memory_cap() -> int | None:
    """``$MESC_MEMORY_LIMIT_BYTES`` in bytes, or None where it is not set."""
    limit = os.environ.get(MEMORY_LIMIT_ENV)
    if not limit:
        return None
    try:
        value = float(limit)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise MescError(f"{MEMORY_LIMIT_ENV}={limit!r} is not a number of bytes > 0; set it "
                        "to e.g. 8e9 or unset it")
    return int(value)


def available_memory() -> int:
    """Bytes of memory available now, at most ``$MESC_MEMORY_LIMIT_BYTES`` where it is set."""
    cap = memory_cap()
    try:
        with open("/proc/meminfo") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
        have = info.get("MemAvailable", info["MemTotal"])
    except (OSError, KeyError, ValueError):
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return have if cap is None else min(cap, have)


def check_memory(n_samples: int, arch: Architecture, rank: int = 121):
    """:func:`memory_estimate` against :func:`available_memory`: MescError if it does not fit."""
    need, have = memory_estimate(n_samples, arch, rank), available_memory()
    if need > have:
        cap = f" (the cap {MEMORY_LIMIT_ENV} sets)" if have == memory_cap() else ""
        raise MescError(f"a problem of {n_samples} samples needs about {size_text(need)} "
                        f"but {size_text(have)} is available{cap}; use a subset of the data "
                        "or a machine with more memory")
    return need


def pretrain_batch_size(n_samples: int, arch: Architecture, requested=None):
    """Images per pretraining step: ``requested`` (None where it is the whole set), else None
    (the whole set) where its activations fit in the available memory, else the largest batch
    that fits. Pretraining has no n×n terms, so only the auto-encoder's activations count."""
    n = int(n_samples)
    if requested is not None:
        if not requested >= 1:
            raise MescError(f"the pretraining batch size must be >= 1, got {requested}")
        return None if requested >= n else int(requested)
    per_image = _training_bytes_per_image(arch)
    pixels = arch.image_shape[0] * arch.image_shape[1]
    room = available_memory() - RUNTIME_BYTES - 4 * n * pixels  # the images themselves stay
    if n * per_image <= room:
        return None
    if room < per_image:
        raise MescError(f"pretraining on {n} images of {arch.image_shape} needs about "
                        f"{size_text(RUNTIME_BYTES + 4 * n * pixels + per_image)} even one "
                        f"image per step, but {size_text(available_memory())} is available; "
                        "use a subset of the data or a machine with more memory")
    return int(room // per_image)


def pretrain(x, arch: Architecture, schedule, *, init=None, verbose=1, log_dir=None,
             backup_dir=None, checkpoint_every=None, jit_compile=False, seed=0):
    """Train an auto-encoder on ``x`` alone (no self-expression).

    Starts from fresh weights (``schedule.initializer``; seed with configure_runtime first), or
    continues training the auto-encoder ``init`` (``schedule.max_steps`` 0: no training, only
    the final rescaling). ``schedule`` is a :class:`mesc_tf.config.Pretrain`; its batch size
    goes through :func:`pretrain_batch_size` (full batch unless memory says otherwise), and
    ``seed`` orders minibatches. Returns (autoencoder with the best weights, info dict); the
    starting weights where they reconstruct better than the best step's (``best_step`` 0).
    """
    import keras

    from mesc_tf.model import ConvAutoEncoder, PretrainNet
    from mesc_tf.training import (StartingPoint, StopAtTarget, channel_activity, dead_channels,
                                  fit_steps, relative_error, rescale_activations)

    ae = init if init is not None else ConvAutoEncoder(
        arch, kernel_initializer=schedule.initializer).build_for_input()
    net = PretrainNet(ae)
    early = keras.callbacks.EarlyStopping(
        monitor="rel_err", mode="min", min_delta=schedule.min_delta, patience=schedule.patience,
        restore_best_weights=True)  # restores its best at the end, whatever stopped training
    callbacks = [early]
    if schedule.target is not None:
        callbacks.append(StopAtTarget(schedule.target))
    if schedule.lr_patience:
        callbacks.append(keras.callbacks.ReduceLROnPlateau(
            monitor="rel_err", mode="min", factor=0.5, patience=schedule.lr_patience,
            min_delta=schedule.min_delta, min_lr=schedule.lr / 1000))
    batch_size = kept_start = None
    if schedule.max_steps:
        batch_size = pretrain_batch_size(len(x), arch, schedule.batch_size)
        # The starting weights count as step 0: EarlyStopping keeps the weights after its best
        # step's update, so a run that never improves on where it began (an --init auto-encoder
        # under a fresh Adam, whose first steps overshoot) would otherwise end worse.
        start = StartingPoint(ae.get_weights(), relative_error(ae, x))
        callbacks.append(start)  # a resumed run's start: the checkpoint's
        history, seconds = fit_steps(
            net, x, schedule.max_steps, schedule.lr, batch_size=batch_size, seed=seed,
            verbose=verbose, log_dir=log_dir, backup_dir=backup_dir,
            checkpoint_every=checkpoint_every, callbacks=callbacks, jit_compile=jit_compile)
        steps = int(net.optimizer.iterations.numpy())  # a resumed run's too
        final_lr = float(net.optimizer.learning_rate.numpy())
        kept_start = relative_error(ae, x) > start.start_error
        if kept_start:
            ae.set_weights(start.start_weights)
    else:  # no training: only the rescaling below, of ``init``
        history, seconds, steps, final_lr = {}, 0.0, 0, None
    error = relative_error(ae, x)
    if not np.isfinite(error):  # NaN weights would give arbitrary codes, and labels, silently
        raise MescError(f"pretraining diverged (relative reconstruction error {error}); lower "
                        f"the learning rate (it was {schedule.lr:g}) or scale the images (the "
                        f"largest value is {float(np.max(x)):.3g}), e.g. to [0, 1]")
    factors = (rescale_activations(ae, x, schedule.activation_scale)
               if schedule.activation_scale else None)
    return ae, {"steps": steps, "seconds": seconds, "batch_size": batch_size,
                # The weights returned: those after the step of EarlyStopping's best epoch (its
                # last improvement by min_delta, not always the lowest error logged; epochs
                # count from the start, a resumed run's too); 0: the starting weights, which no
                # step improved on.
                "best_step": int(early.best_epoch) + 1 if steps and not kept_start else 0,
                "relative_error": error if factors is None else relative_error(ae, x),
                "dead_channels": dead_channels(ae, x),
                "channel_activity": {k: [round(float(v), 4) for v in a]
                                     for k, a in channel_activity(ae, x).items()},
                # The rate reached (halved on plateaus; on a resume, restored from the checkpoint).
                "final_lr": final_lr, "activation_factors": factors, "history": history}


def fine_tune(x, settings: Settings, autoencoder, *, verbose=1, log_dir=None, backup_dir=None,
              checkpoint_every=None, jit_compile=False, callbacks=()):
    """Fine-tune auto-encoder + C on the whole of ``x``. Returns (model, history, seconds)."""
    if jit_compile and settings.regularizer == "nuclear":
        raise MescError("--jit with the nuclear-norm regulariser: XLA compiles its SVD into a "
                        "loop hundreds of times slower on the CPU; run without --jit")
    from mesc_tf.model import MESCNet
    from mesc_tf.training import fit_steps

    model = MESCNet(autoencoder, len(x), settings)  # built: C exists before fit, for backups
    history, seconds = fit_steps(
        model, x, settings.epochs, settings.lr, verbose=verbose, log_dir=log_dir,
        backup_dir=backup_dir, checkpoint_every=checkpoint_every, jit_compile=jit_compile,
        callbacks=callbacks)
    return model, history, seconds


def cluster(coef, n_clusters: int, settings: Settings, seed=0, post_method=None, info=None):
    """thrC + post_proC + spectral clustering on C. Returns (labels 0..K-1, timings dict).

    ``post_method`` is :func:`mesc_tf.postcluster.cluster`'s ``method`` (the route, "fast" by
    default), and ``info`` as there (the solvers used and ``ill_posed`` on the fast and strict
    routes; on the reference route, ``method`` only) with ``clusters_found``, the number of
    non-empty clusters (:func:`empty_clusters_note`); a figure that is not finite becomes None
    (JSON)."""
    info = {} if info is None else info
    labels, timings = postcluster.cluster(
        np.asarray(coef), n_clusters, thr=settings.thr, subspace_dim=settings.subspace_dim,
        power=settings.power, variant=settings.variant, seed=seed, return_timings=True,
        method=post_method, info=info)
    info["clusters_found"] = int(np.unique(labels).size)  # discretize can leave clusters empty
    info.update({k: None for k, v in info.items()  # the gaps of K = 1
                 if isinstance(v, float) and not np.isfinite(v)})
    return labels, timings


def empty_clusters_note(info, n_clusters):
    """A warning when spectral clustering left clusters empty (``run``'s ``postcluster``), or
    None."""
    found = info.get("clusters_found", n_clusters)
    if found >= n_clusters:
        return None
    return (f"spectral clustering left {n_clusters - found} of the {n_clusters} clusters empty "
            f"(the labels use {found}): C does not separate that many groups; train longer, or "
            "check n_clusters")


def run(x, y, n_clusters, settings: Settings, autoencoder, *, seed=0, verbose=1,
        post_method=None, **fit_kwargs):
    """Fine-tune, cluster and (if labels ``y`` are given) score. Returns a result dict.

    ``post_method``: the post-clustering route (:data:`mesc_tf.config.POST_METHODS`; default
    "fast"). The result's ``postcluster`` dict says how many clusters are non-empty
    (:func:`empty_clusters_note`) and, on the fast and strict routes, which solvers ran and
    whether the spectral step was ill-posed.
    ``seed`` seeds the spectral clustering only: for repeatable fine-tuning (and no TF32 on a
    GPU) call :func:`mesc_tf.training.configure_runtime` first, as the scripts do."""
    check_post_method(post_method)  # before the fine-tuning, not after
    model, history, train_s = fine_tune(x, settings, autoencoder, verbose=verbose, **fit_kwargs)
    coef = model.coef.numpy()
    steps = int(model.optimizer.iterations.numpy())
    # Post-clustering must not sit on the model's C and Adam's two slots (3 n² floats, 1.2 GB
    # for MNIST): drop the model (``autoencoder``, fine-tuned in place, stays with the caller);
    # collect, as Keras' model and its callbacks refer to each other.
    del model
    gc.collect()
    start = time.perf_counter()
    info = {}
    labels, post_timings = cluster(coef, n_clusters, settings, seed=seed,
                                   post_method=post_method, info=info)
    post_s = time.perf_counter() - start
    return {
        "coef": coef,
        "labels": labels,
        "postcluster": info,
        "history": history,
        "metrics": evaluate(y, labels) if y is not None else None,
        "timings": {"train_s": train_s, "post_s": post_s, **post_timings,
                    "steps": steps},
    }
