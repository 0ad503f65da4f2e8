"""The steps every experiment (and the estimator) shares: pretraining, fine-tuning and
clustering (the auto-encoder comes from :mod:`mesc_tf.sources`, the memory check before them
from :mod:`mesc_tf.memory`).

One code path: ``experiments/run.py``, the sweeps, the tables and
:class:`mesc_tf.estimator.MESCClustering` all call these functions.
"""

import dataclasses
import gc
import time

import numpy as np

from mesc_tf import memory, postcluster
from mesc_tf.config import Architecture, Settings, check_post_method, check_seed
from mesc_tf.data import validate_images
from mesc_tf.errors import MescError
from mesc_tf.metrics import evaluate, labels_for
from mesc_tf.postcluster.checks import check_clusters


class Diverged(MescError):
    """Pretraining ended with weights that reconstruct nothing finite: even its best step's."""


def pretrain(x, arch: Architecture, schedule, *, init=None, verbose=1, log_dir=None,
             backup_dir=None, checkpoint_every=None, jit_compile=False, seed=0):
    """Train an auto-encoder on ``x`` alone (no self-expression).

    Starts from fresh weights (``schedule.initializer``; seed with configure_runtime first), or
    continues training the auto-encoder ``init`` (``schedule.max_steps`` 0: no training, only
    the final rescaling). ``schedule`` is a :class:`mesc_tf.config.Pretrain`; its batch size
    goes through :func:`mesc_tf.memory.pretrain_batch_size` (full batch unless memory says
    otherwise), and ``seed`` orders minibatches. Returns (autoencoder with the best weights,
    info dict); the starting weights where they reconstruct better than the best step's
    (``best_step`` 0).
    """
    import keras

    from mesc_tf.model import ConvAutoEncoder, PretrainNet
    from mesc_tf.measures import (channel_activity, dead_channels, relative_error,
                                  rescale_activations)
    from mesc_tf.training import StartingPoint, StopAtTarget, fit_steps

    # Both would otherwise fail only after the training.
    if init is not None and getattr(init, "arch", None) != arch:
        raise MescError(f"pretrain's init is an auto-encoder of another architecture "
                        f"({getattr(init, 'arch', type(init).__name__)}) than arch ({arch})")
    n_hidden = 2 * len(arch.kernels) - 1
    if isinstance(schedule.activation_scale, tuple) and len(schedule.activation_scale) != n_hidden:
        raise MescError(f"the activation scale needs one value or {n_hidden} (one per hidden "
                        f"layer), got {len(schedule.activation_scale)}")
    # NaN pixels would make every weight NaN, reported only at the end as a divergence. The
    # negative-pixel warning is the callers' (the estimator and the loaders give it already).
    x = validate_images(x, image_shape=arch.image_shape, where="pretraining images",
                        warn_negative=False)
    peak = float(np.max(np.abs(x)))
    if peak * peak < float(np.finfo(np.float32).tiny):  # every square is 0 (TF flushes subnormals)
        raise MescError(f"pretraining images: the largest pixel magnitude is {peak:.3g}, whose "
                        "square is 0 in float32, so the relative reconstruction error is "
                        "undefined; rescale the images, e.g. to [0, 1]")
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
        batch_size = memory.pretrain_batch_size(len(x), arch, schedule.batch_size)
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
        trained = relative_error(ae, x)
        # A NaN or inf error is a divergence (Diverged below), whichever start it began from.
        kept_start = bool(np.isfinite(trained) and trained > start.start_error)
        if kept_start:
            ae.set_weights(start.start_weights)
    else:  # no training: only the rescaling below, of ``init``
        history, seconds, steps, final_lr = {}, 0.0, 0, None
    error = relative_error(ae, x)
    if not np.isfinite(error):  # NaN weights would give arbitrary codes, and labels, silently
        raise Diverged(f"pretraining diverged (relative reconstruction error {error}); lower "
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
    if isinstance(settings, dict):  # get_config(name).mesc.to_dict(), say
        unknown = sorted(set(settings) - {f.name for f in dataclasses.fields(Settings)})
        if unknown:
            raise MescError(f"settings has no field {', '.join(map(repr, unknown))}; its fields "
                            f"are {', '.join(f.name for f in dataclasses.fields(Settings))}")
        settings = Settings(**settings)
    if not isinstance(settings, Settings):
        raise MescError(f"settings must be a mesc_tf.config.Settings (e.g. get_config(name).mesc) "
                        f"or a dict of its fields, got {type(settings).__name__}")
    info = {} if info is None else info
    labels, timings = postcluster.cluster(  # C as given: its checks name a sparse C as such
        coef, n_clusters, thr=settings.thr, subspace_dim=settings.subspace_dim,
        power=settings.power, variant=settings.variant, seed=seed, return_timings=True,
        method=post_method, info=info)
    info["clusters_found"] = int(np.unique(labels).size)  # discretize can leave clusters empty
    # inf: a gap or margin that K = 1 does not have; NaN: where ARPACK did not converge.
    info.update({k: None for k, v in info.items()
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
    # Checked before the fine-tuning, not after it (post-clustering and scoring use them).
    check_post_method(post_method)
    if seed is not None:
        check_seed(seed)
    check_clusters(n_clusters, len(x), "run")
    if y is not None:
        labels_for(y, len(x))
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
