"""A scikit-learn estimator that clusters a user's own images with MESC-Net (or DSC-Net).

    from mesc_tf import MESCClustering
    labels = MESCClustering(n_clusters=3).fit_predict(images)     # (n, h, w) or (n, h, w, 1)

:class:`MESCClustering` is a thin wrapper around :mod:`mesc_tf.pipeline`, the code path that
``experiments/pretrain.py`` and ``experiments/run.py`` use: ``fit`` seeds every random source
with :func:`mesc_tf.training.configure_runtime`, loads the auto-encoder from ``weights`` (as
``run.py --weights``) or pretrains one on ``X`` with :func:`mesc_tf.pipeline.pretrain` (as
``pretrain.py``), then calls :func:`mesc_tf.pipeline.run` (fine-tuning + thrC + post_proC +
spectral clustering). For the same images, settings, weights and seed it therefore gives the
same C and labels as the command line, bit for bit on CPU (the labels where the spectral step
is well-posed: ``postcluster_info_``).

Subspace clustering is transductive: it clusters the images it is fitted on and has no
``predict`` for new images (fit again on the union instead).
"""

from __future__ import annotations

import dataclasses
import numbers
import os
import time
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from mesc_tf import memory, sources
from mesc_tf.config import (POST_METHODS, Architecture, Pretrain, Settings, check_post_method,
                            check_seed, get_config, is_whole, pretrain_problem)
from mesc_tf.data import validate_images
from mesc_tf.errors import MescError, MescWarning, one_line

_PICKLED_AE = "__mesc_tf_autoencoder__"
# The Pretrain fields the estimator exposes, by their parameter names.
_PRETRAIN_PARAMS = {"lr": "pretrain_lr", "max_steps": "pretrain_steps",
                    "patience": "pretrain_patience", "min_delta": "pretrain_min_delta"}


def default_architecture(image_shape) -> Architecture:
    """The auto-encoder used when ``kernels`` and ``channels`` are not given.

    Images whose shorter side is at least 16 pixels get the 3-layer encoder of USPS, MNIST and
    EYaleB: kernels (5, 3, 3), channels (10, 20, 30), i.e. a ⌈h/8⌉ × ⌈w/8⌉ × 30 latent
    code (120 numbers for 16×16, 270 for 17×17, 480 for 32×32). Smaller images get the
    1-layer encoder of COIL20: kernel 3, 15 channels (⌈h/2⌉ × ⌈w/2⌉ × 15: more numbers than
    pixels, 960 for 15×15). For other sizes give ``kernels`` and ``channels``.
    """
    h, w = (int(s) for s in image_shape)
    arch = get_config("mnist" if min(h, w) >= 16 else "coil20").arch
    return dataclasses.replace(arch, image_shape=(h, w))


class MESCClustering(ClusterMixin, BaseEstimator):
    """Deep subspace clustering of grey images: MESC-Net by default, DSC-Net on request.

    Transductive, as subspace clustering is: ``fit`` / ``fit_predict`` cluster the images
    given; there is no ``predict`` or ``transform`` for new images (fit again on the union).
    The defaults are the released MESC-Net settings for COIL40 (40 clusters); for other data
    the post-clustering settings matter most, and can be tried on ``coef_`` without fitting
    again (README, "Choosing settings for your images").

    Parameters
    ----------
    n_clusters : int
        Number of clusters K (required).
    framework : {'decoupled', 'coupled'}, default='decoupled'
        'decoupled' is MESC-Net (the decoder sees Z); 'coupled' is DSC-Net (it sees C·Z).
    regularizer : {'entropy', 'l1', 'l2', 'nuclear'}, default='entropy'
        Regulariser on C: MESC's maximum entropy, or DSC-Net's Σ|C| / Σ C², or nuclear.
    reg1, reg2, lr, epochs, coef_init, recon_scale : fine-tuning settings
        Weight of the regulariser, weight of ½Σ(Z − CZ)², Adam learning rate, number of
        full-batch Adam steps, initial value of every entry of C, weight of the
        reconstruction term. Defaults: the released MESC-Net settings (COIL40), see
        :class:`mesc_tf.config.Settings`; the constants are the code's (paper's λ = reg / 4).
    thr, subspace_dim, power, variant : post-clustering settings
        thrC ratio ρ, post_proC d (SVD rank d·K + 1, clipped to n − 1), post_proC exponent and
        pre-treatment of C ('mesc', 'dsc' or 'dsc_diag'); see :mod:`mesc_tf.postcluster`.
    post_method : {'fast', 'strict', 'reference'}, default='fast'
        Post-clustering route: 'fast' computes the released code's steps with cheaper
        numerics; 'strict' also returns the released code's own labels where the spectral
        step is ill-posed (``postcluster_info_['ill_posed']``); 'reference' runs the released
        numerics throughout (slow for large n).
    kernels, channels : int or sequence of int, default=None
        Encoder layers (one stride-2 'same' conv per pair). ``None`` (both) picks
        :func:`default_architecture` for the image size, or the architecture stored in
        ``weights``. An int is repeated to the length of the other.
    weights : str or path, default=None
        A project ``.h5`` auto-encoder (``experiments/pretrain.py`` or
        :func:`mesc_tf.save_autoencoder`) to start fine-tuning from. ``None``: pretrain an
        auto-encoder on ``X`` first.
    pretrain_lr, pretrain_steps, pretrain_patience, pretrain_min_delta : pretraining schedule
        Full-batch Adam (minibatches only where the whole set's activations do not fit in
        memory) on ½Σ(x_r − x)², at most ``pretrain_steps`` steps, stopped when the
        relative reconstruction error has not improved by ``pretrain_min_delta`` for
        ``pretrain_patience`` steps; the best weights are kept (:class:`mesc_tf.config.Pretrain`).
        ``pretrain_steps=0`` fine-tunes from the seeded he_normal initialisation instead (the
        ablation without pretraining, ``run.py --no-pretrain``). Unused when ``weights`` is given.
    image_shape : (int, int), default=None
        Lets ``X`` be 2-D (n, h·w), each row an image in row-major (C) order; also checks
        the size of 3-D input.
    random_state : int, RandomState or None, default=0
        Seeds Python, NumPy and TensorFlow (initialisation, minibatch order) and the spectral
        clustering. A RandomState, or None (NumPy's global one), gives a seed drawn from it.
        ``fit`` seeds them process-wide (``keras.utils.set_random_seed``), turns on
        TensorFlow's op determinism and turns TF32 off (both stay so for the process's other
        TensorFlow code), as the command-line runs do, so that a fit repeats bit for bit;
        reseed your own generators after it if you rely on them.
    verbose : int, default=0
        0: silent; 1 (or more): progress lines of pretraining and fine-tuning, and a line per
        stage (pretraining, fine-tuning, clustering).

    Attributes
    ----------
    labels_ : ndarray of shape (n,), int64
        Cluster of each image, 0..K-1.
    coef_ : ndarray of shape (n, n), float32
        The learned self-expression matrix C after the last step (row i: coefficients of
        image i), before thrC / post_proC (not the affinity, which post_proC builds from it).
    autoencoder_ : mesc_tf.model.ConvAutoEncoder
        The fine-tuned Keras auto-encoder, encoder and decoder: ``autoencoder_.encode(x)``
        gives latent maps, ``autoencoder_(x)`` reconstructions; :meth:`encode` gives flattened
        codes as NumPy; ``mesc_tf.save_autoencoder(est.autoencoder_, path)`` saves it.
        (``encoder_``, its first name, still reads it.)
    architecture_ : mesc_tf.config.Architecture
    settings_ : mesc_tf.config.Settings
        The fine-tuning and clustering settings that were used.
    image_shape_ : tuple (h, w)
    n_features_in_ : int
        Pixels per image, h·w.
    n_iter_ : int
        Fine-tuning steps run.
    history_ : dict of str to ndarray
        Per-step fine-tuning loss terms ('loss', 'recon', 'reg', 'selfexp'), before each step.
    pretrain_info_ : dict or None
        Pretraining steps, best step, relative reconstruction error, seconds and history;
        ``None`` when ``weights`` was given or ``pretrain_steps=0``.
    weights_source_ : str
        Where the starting auto-encoder came from.
    postcluster_info_ : dict
        The route (``method``) and, on the fast and strict routes, the solvers used and
        ``ill_posed``: the spectral step is near a tie (repeated Laplacian eigenvalues among
        the K + 1 smallest, or in discretize), or a sample's row of the embedding or its
        degree in the affinity graph is rounding noise, where rounding can renumber or
        move labels, in the released code's route as well (often set on well-clustered C's too);
        ``clusters_found``: the non-empty clusters (spectral clustering can leave some empty;
        ``fit`` then warns).
    timings_ : dict
        Seconds spent pretraining (``pretrain_s``; 0 where it did not run), fine-tuning
        (``train_s``) and post-clustering (``post_s``: ``thrc_s``, ``svd_s``, ``spectral_s``),
        and the number of fine-tuning ``steps``.
    """

    def __init__(self, n_clusters, *, framework=Settings.framework,
                 regularizer=Settings.regularizer, reg1=Settings.reg1, reg2=Settings.reg2,
                 lr=Settings.lr, epochs=Settings.epochs, coef_init=Settings.coef_init,
                 recon_scale=Settings.recon_scale, thr=Settings.thr,
                 subspace_dim=Settings.subspace_dim, power=Settings.power,
                 variant=Settings.variant, post_method=POST_METHODS[0], kernels=None, channels=None,
                 weights=None,
                 pretrain_lr=Pretrain.lr, pretrain_steps=Pretrain.max_steps,
                 pretrain_patience=Pretrain.patience, pretrain_min_delta=Pretrain.min_delta,
                 image_shape=None, random_state=0, verbose=0):
        self.n_clusters = n_clusters
        self.framework = framework
        self.regularizer = regularizer
        self.reg1 = reg1
        self.reg2 = reg2
        self.lr = lr
        self.epochs = epochs
        self.coef_init = coef_init
        self.recon_scale = recon_scale
        self.thr = thr
        self.subspace_dim = subspace_dim
        self.power = power
        self.variant = variant
        self.post_method = post_method
        self.kernels = kernels
        self.channels = channels
        self.weights = weights
        self.pretrain_lr = pretrain_lr
        self.pretrain_steps = pretrain_steps
        self.pretrain_patience = pretrain_patience
        self.pretrain_min_delta = pretrain_min_delta
        self.image_shape = image_shape
        self.random_state = random_state
        self.verbose = verbose

    # -----------------------------------------------------------------------------------------
    # Parameters → project objects (all checks happen here, in fit, as scikit-learn wants)

    def _settings(self) -> Settings:
        return Settings(framework=self.framework, regularizer=self.regularizer,
                        reg1=self.reg1, reg2=self.reg2, lr=self.lr, epochs=self.epochs,
                        coef_init=self.coef_init, recon_scale=self.recon_scale,
                        thr=self.thr, subspace_dim=self.subspace_dim, power=self.power,
                        variant=self.variant)  # Settings checks every value (MescError)

    def _schedule(self) -> Pretrain:
        values = {field: getattr(self, param) for field, param in _PRETRAIN_PARAMS.items()}
        for field, param in _PRETRAIN_PARAMS.items():
            need = pretrain_problem(field, values[field])
            if need:
                zero = " (0: no pretraining)" if field == "max_steps" else ""
                raise MescError(f"{param} must be {need}{zero}, got {values[field]!r}")
        return Pretrain(**values)

    def _weights(self):
        """``weights`` checked to be None or a path (a bad type reaches h5py otherwise)."""
        w = self.weights
        if w is not None and (not isinstance(w, (str, os.PathLike)) or os.fspath(w) == ""):
            raise MescError(f"weights must be the path of a .h5 auto-encoder file, or None to "
                            f"pretrain on X, got {w!r}")
        return w

    def _seed(self):
        rs = self.random_state
        if is_whole(rs):
            return check_seed(rs, "random_state")
        if rs is None or isinstance(rs, np.random.RandomState):  # None: NumPy's global one
            return int(check_random_state(rs).randint(2**31 - 1))
        raise MescError(f"random_state must be None, an int or a numpy RandomState, got {rs!r}")

    def _n_clusters(self) -> int:
        if not is_whole(self.n_clusters) or self.n_clusters < 1:
            raise MescError(f"n_clusters must be a whole number >= 1, got {self.n_clusters!r}")
        return int(self.n_clusters)

    def _image_shape_param(self):
        if self.image_shape is None:
            return None
        shape = tuple(self.image_shape) if np.ndim(self.image_shape) == 1 else ()
        if len(shape) != 2 or not all(is_whole(s) and s >= 1 for s in shape):
            raise MescError(f"image_shape must be (height, width), got {self.image_shape!r}")
        return tuple(int(s) for s in shape)

    def _architecture(self, image_shape, weights=None) -> Architecture:
        """The architecture from kernels/channels, else from weights, else the default."""
        if self.kernels is None and self.channels is None:
            if weights is not None:
                from mesc_tf.weights import read_autoencoder_file

                return read_autoencoder_file(weights)[0]
            return default_architecture(image_shape)
        if self.kernels is None or self.channels is None:
            raise MescError("give both kernels and channels (one per encoder layer), or neither "
                            "for the default architecture")
        kernels = _int_tuple(self.kernels, "kernels")
        channels = _int_tuple(self.channels, "channels")
        if len(kernels) == 1 and is_whole(self.kernels):
            kernels = kernels * len(channels)
        if len(channels) == 1 and is_whole(self.channels):
            channels = channels * len(kernels)
        return Architecture(tuple(image_shape), kernels, channels)

    @staticmethod
    def _check_weights_architecture(weights, arch):
        """kernels/channels given beside weights must be the file's."""
        from mesc_tf.weights import read_autoencoder_file

        stored = read_autoencoder_file(weights)[0]
        if stored != arch:
            raise MescError(f"kernels {arch.kernels} / channels {arch.channels} for "
                            f"{arch.image_shape[0]}x{arch.image_shape[1]} images differ from the "
                            f"auto-encoder in {weights} (kernels {stored.kernels} / channels "
                            f"{stored.channels}, {stored.image_shape[0]}x{stored.image_shape[1]} "
                            "images); leave kernels and channels out to use the file's")

    def _validate_images(self, X, n_clusters=None, image_shape=None, where="X", training=True,
                         size_hint=None, stacklevel=4):
        """X as float32 (n, h, w, 1), reshaping 2-D rows with ``image_shape``; ``stacklevel``
        (4: called from a public method; 5: from _fit) points the negative-pixel warning at the
        caller's line. ``size_hint``: validate_images' wording for images of another size."""
        given = self._image_shape_param()
        X = _as_array(X, where)
        if X.ndim == 2:
            if given is None:
                raise MescError(f"{where} is 2-D {X.shape}; pass images as (n, height, width) or "
                                "(n, height, width, 1), or give image_shape=(height, width) to "
                                "read each row as one image")
            if given[0] * given[1] != X.shape[1]:
                raise MescError(f"{where} has {X.shape[1]} values per row but image_shape "
                                f"{given} has {given[0] * given[1]} pixels; give the right "
                                "image_shape")
            X = X.reshape(X.shape[0], *given)
        if given is not None and image_shape is not None and given != tuple(image_shape):
            raise MescError(f"image_shape {given} differs from the auto-encoder's "
                            f"{tuple(image_shape)}; leave image_shape out or use matching weights")
        if image_shape is None and given is not None and size_hint is None:
            def size_hint(h, w):  # the parameter the user gave, not an "architecture"
                return (f"image_shape is {given}; give images of that size, or "
                        f"image_shape=({h}, {w}) or None (the images' own size)")
        return validate_images(X, n_clusters=n_clusters, image_shape=image_shape or given,
                               where=where, training=training, stacklevel=stacklevel,
                               size_hint=size_hint)

    # -----------------------------------------------------------------------------------------
    # scikit-learn API

    def fit(self, X, y=None):
        """Pretrain (unless ``weights``), fine-tune and cluster the images ``X``.

        ``X``: (n, h, w) or (n, h, w, 1) array of grey images in any consistent pixel scale
        (the one ``weights`` was trained on, if given; [0, 1] works well otherwise), or
        (n, h·w) with ``image_shape``. ``y`` is ignored. Returns self.
        """
        return self._fit(X)

    def fit_predict(self, X, y=None):
        """``fit(X)``, then ``labels_``. Its own (not ClusterMixin's, which calls ``fit``), so
        that fit's warnings point at the caller's line here too."""
        return self._fit(X).labels_

    def _fit(self, X):
        """fit, one frame below the public method (warnings' stacklevel counts on it)."""
        from mesc_tf import pipeline
        from mesc_tf.training import configure_runtime

        k = self._n_clusters()
        settings = self._settings()
        post_method = check_post_method(self.post_method)  # before pretraining; None: fast
        # An int >= 0, as scikit-learn's; True and False pass as 1 and 0.
        if not (isinstance(self.verbose, (bool, np.bool_, numbers.Integral))
                and self.verbose >= 0):
            raise MescError(f"verbose must be a whole number >= 0, got {self.verbose!r}")
        verbose = min(int(self.verbose), 1)  # the progress lines have one level of detail
        weights = self._weights()
        schedule = self._schedule() if weights is None else None
        seed = self._seed()
        if weights is not None and self.kernels is None and self.channels is None:
            arch = self._architecture(None, weights)  # the one stored in the weights file
            eh, ew = arch.image_shape
            x = self._validate_images(
                X, n_clusters=k, image_shape=arch.image_shape, stacklevel=5,
                size_hint=lambda h, w: (
                    f"the auto-encoder in {weights} was made for {eh}x{ew} images; give images "
                    f"of that size, or weights made for {h}x{w} images (None pretrains on X)"))
        else:
            x = self._validate_images(X, n_clusters=k, stacklevel=5)
            arch = self._architecture(x.shape[1:3])
            if weights is not None:
                self._check_weights_architecture(weights, arch)
        memory.check_memory(len(x), arch, settings.subspace_dim * k + 1, post_method)

        # The order of experiments/pretrain.py followed by experiments/run.py.
        configure_runtime(seed)
        timings = {"pretrain_s": 0.0}
        pretrain_info = None
        if weights is not None:
            ae, source = sources.get_autoencoder(arch, weights=weights)
        elif schedule.max_steps == 0:  # as run.py --no-pretrain
            ae, source = sources.get_autoencoder(arch, no_pretrain=True)
        else:
            if self.verbose:
                print(f"MESCClustering: pretraining the auto-encoder on {len(x)} images "
                      f"(at most {schedule.max_steps} steps)")
            start = time.perf_counter()
            ae, pretrain_info = pipeline.pretrain(x, arch, schedule, verbose=verbose,
                                                  seed=seed)
            timings["pretrain_s"] = time.perf_counter() - start
            source = _pretrained_source(pretrain_info, schedule)
            configure_runtime(seed)  # run.py seeds again before fine-tuning
        if self.verbose:
            print(f"MESCClustering: fine-tuning on {len(x)} images {x.shape[1:3]}, {k} clusters "
                  f"({settings.epochs} steps); auto-encoder: {source}")
        # Warnings from inside (thrC's, or scikit-learn's eigensolvers', some over several
        # lines) are raised again at the caller's line, one line each.
        try:
            with warnings.catch_warnings(record=True) as caught:  # the filters as they are
                result = pipeline.run(x, None, k, settings, ae, seed=seed, verbose=verbose,
                                      post_method=post_method)
        finally:  # also before an error, which they may explain
            for seen in dict.fromkeys((w.category, " ".join(str(w.message).split()))
                                      for w in caught):  # each once, in order
                warnings.warn(seen[1], seen[0], stacklevel=3)
        note = pipeline.empty_clusters_note(result["postcluster"], k)
        if note:
            warnings.warn(f"MESCClustering: {note}", MescWarning, stacklevel=3)
        if self.verbose:
            print(f"MESCClustering: {result['postcluster']['clusters_found']} clusters found "
                  f"({result['timings']['post_s']:.1f} s of post-clustering)")

        self.labels_ = np.asarray(result["labels"], dtype=np.int64)
        self.coef_ = np.asarray(result["coef"], dtype=np.float32)
        self.autoencoder_ = ae  # fine-tuned in place: the MESCNet model wraps this object
        self.architecture_ = arch
        self.settings_ = settings
        self.image_shape_ = tuple(int(s) for s in x.shape[1:3])
        self.n_features_in_ = int(x.shape[1] * x.shape[2])
        self.n_iter_ = int(result["timings"]["steps"])
        # Every key also after epochs=0, where Keras' History holds none.
        self.history_ = {**{k: np.empty(0) for k in ("loss", "recon", "reg", "selfexp")},
                         **result["history"]}
        self.pretrain_info_ = pretrain_info
        self.weights_source_ = source
        self.postcluster_info_ = result["postcluster"]
        self.timings_ = {**timings, **result["timings"]}
        return self

    def encode(self, X, batch_size=1024):
        """Latent codes of the fine-tuned encoder, flattened: float32 (n, h'·w'·channels)."""
        from mesc_tf.measures import latent_codes

        check_is_fitted(self, "autoencoder_")
        if not is_whole(batch_size) or batch_size < 1:
            raise MescError(f"batch_size must be a whole number >= 1, got {batch_size!r}")
        eh, ew = self.image_shape_
        x = self._validate_images(X, image_shape=self.image_shape_, training=False,
                                  size_hint=lambda h, w: f"this estimator was fitted on {eh}x{ew} "
                                  "images; encode images of the size fit saw")
        return latent_codes(self.autoencoder_, x, batch_size)

    @property
    def encoder_(self):
        """The attribute's first name: it holds the whole auto-encoder (``autoencoder_``)."""
        check_is_fitted(self, "autoencoder_")
        return self.autoencoder_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False  # images; 2-D rows only with image_shape
        tags.input_tags.three_d_array = True
        tags.non_deterministic = False  # given random_state, on CPU
        return tags

    # Pickling (and copy.deepcopy): the Keras auto-encoder travels as architecture + arrays.

    def __getstate__(self):
        state = dict(super().__getstate__())
        ae = state.get("autoencoder_")
        if ae is not None and not isinstance(ae, dict):
            state["autoencoder_"] = {
                _PICKLED_AE: 1, "architecture": ae.arch.to_dict(),
                "weights": {layer.name: (layer.kernel.numpy(), layer.bias.numpy())
                            for layer in ae.named_layers}}
        return state

    def __setstate__(self, state):
        state = dict(state)
        if "encoder_" in state:  # pickled when the attribute had that name
            state["autoencoder_"] = state.pop("encoder_")
        ae = state.get("autoencoder_")
        if isinstance(ae, dict) and ae.get(_PICKLED_AE):
            from mesc_tf.weights import autoencoder_with

            state["autoencoder_"] = autoencoder_with(
                Architecture.from_dict(ae["architecture"]), ae["weights"],
                "pickled MESCClustering")
        super().__setstate__(state)


def _pretrained_source(info, schedule) -> str:
    """``weights_source_`` of a pretraining, and a MescWarning where it achieved nothing: no
    step improved on the start (kept), or the error stays near 1 (no better than zeros)."""
    error = info["relative_error"]
    if info["steps"] and not info["best_step"]:
        warnings.warn(f"MESCClustering: pretraining never improved on its starting weights "
                      f"(relative error {error:.4f}), which were kept; try a lower pretrain_lr "
                      f"than {schedule.lr:g}, or images in [0, 1]", MescWarning, stacklevel=4)
        return (f"pretrained on X ({info['steps']} steps, none better than the start, which "
                f"was kept; relative error {error:.4f})")
    if error >= 0.999:
        warnings.warn(f"MESCClustering: the pretrained auto-encoder reconstructs the images no "
                      f"better than zeros (relative error {error:.4f}); check the images' scale "
                      "(e.g. [0, 1]) and size", MescWarning, stacklevel=4)
    return f"pretrained on X ({info['steps']} steps, relative error {error:.4f})"


def _int_tuple(value, name) -> tuple[int, ...]:
    values = (value,) if is_whole(value) else tuple(value) if np.ndim(value) == 1 else None
    if not values or not all(is_whole(v) and v >= 1 for v in values):
        raise MescError(f"{name} must be a whole number >= 1 or a non-empty sequence of them, "
                        f"got {value!r}")
    return tuple(int(v) for v in values)


def _as_array(X, where):
    """X as a NumPy array; a clear ValueError for what NumPy cannot turn into one."""
    if hasattr(X, "toarray") or type(X).__module__.startswith("scipy.sparse"):
        raise MescError(f"{where} is a sparse matrix; pass a dense array of images")
    try:
        array = np.asarray(X)
    except (ValueError, TypeError) as e:
        raise MescError(f"{where} is not an array of images ({one_line(e)}); pass a numeric "
                        "array of shape (n, height, width)") from None
    if array.ndim == 0:  # a generator, say: named by validate_images, given X itself
        validate_images(X, where=where)
    return array
