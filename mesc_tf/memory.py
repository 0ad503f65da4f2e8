"""How much memory a run needs, checked before anything is allocated (issue 6): fine-tuning's
n×n matrices and the auto-encoder's activations, post-clustering's buffers, the runtime, and
what the machine (or ``$MESC_MEMORY_LIMIT_BYTES``) has. Pretraining takes minibatches where the
whole set's activations would not fit.
"""

import os

from mesc_tf.config import Architecture, encoder_sizes
from mesc_tf.errors import MescError
from mesc_tf.files import size_text

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


# Post-clustering's n² bytes beyond C, by route (`python benchmarks/post_memory.py --n 2000
# 3000 4000 5000`, NumPy's buffers by tracemalloc; session 65): the fast route's one float64
# buffer (6.2 n² at n 5000), but up to fast.DENSE_SVD_MAX_N its dense eigh of CᵀC holds CᵀC
# and its eigenvectors too (16.4-16.7 n² at n 2000-4000); the reference route's dense float64
# copies (pre-treated C, U·Uᵀ, the affinity, scikit-learn's Laplacian), 36.2-36.5 n² at n
# 2000-5000; strict (32.2-32.5 n²) falls back to it.
POST_N2_BYTES = {"fast": 8, "strict": 37, "reference": 37}
POST_N2_BYTES_DENSE_SVD = 17  # the fast route at n <= fast.DENSE_SVD_MAX_N


def memory_estimate(n_samples: int, arch: Architecture, rank: int = 121,
                    post_method: str = "fast") -> int:
    """Bytes a run needs at its peak (MNIST-10k end to end: measured 3.36-3.89 GiB in session
    20, during fine-tuning; estimate 3.97). ``rank`` is post-clustering's SVD rank d·K + 1:
    run.py and the estimator pass their settings'; the figure scripts and sweeps, whose methods
    differ, keep the default 121 (d 12, K 10), which at MNIST's d 32 leaves the post-clustering
    figure 32 MB short, below fine-tuning's anyway.

    Fine-tuning: C and its two Adam slots (3 n² float32) stay; during a step the C-gradient
    of the self-expression term (n²), the entropy's gradient (n², recomputed from C in the
    backward pass, see losses.entropy) and their sum exist, less what the allocator reuses
    (about 2.5 n² float32 in all), plus the auto-encoder's activations, their gradients and the
    convolutions' work buffers (about 3.5 × the activations of one forward pass), plus Z, C·Z,
    their difference, their gradients and the products' outputs (about 8 n × p float32, p the
    code's size; COIL20's measured step, p = 3840 > n, peaked 10 % over the estimate
    without them: tests/test_reliability.py).
    Post-clustering (``pipeline.run`` has dropped the model) then holds C, the sparse
    thresholded C and the n × r embedding (r = ``rank``, d·K + 1) and, by ``post_method``, the
    fast route's affinity/Laplacian/Cholesky buffer (one n² float64; two more up to
    ``DENSE_SVD_MAX_N``, ``POST_N2_BYTES_DENSE_SVD``): less than fine-tuning (MNIST at r 321:
    1.2 GiB against 3.2), or the reference route's dense copies
    (``POST_N2_BYTES``; MNIST: 3.9 GiB, more than fine-tuning). The SVD's solvers work before
    the fast route's buffer exists, in less (PROPACK's basis is capped for it:
    ``postcluster.fast.SVD_PROPACK_MAX_SHARE``).
    Plus the runtime. With TF's BFC allocator (``bfc_allocator``) the pool fine-tuning grew,
    ``BFC_POOL_FACTOR`` × its estimate, stays resident during post-clustering: the two add up.
    """
    n = int(n_samples)
    (h, w), c = encoder_sizes(arch)[-1], arch.channels[-1]
    train = 4 * 5.5 * n * n + n * _training_bytes_per_image(arch) + 4 * 8 * n * h * w * c
    post = _post_bytes(n, rank, post_method)
    if bfc_allocator():
        return int(BFC_POOL_FACTOR * train + post + RUNTIME_BYTES)
    return int(max(train, post) + RUNTIME_BYTES)


def post_n2_bytes(n: int, post_method: str | None = "fast") -> int:
    """Post-clustering's bytes beyond C, in units of n², by route (None: the fast one)."""
    from mesc_tf.postcluster.fast import DENSE_SVD_MAX_N  # scikit-learn: not at import

    route = post_method or "fast"
    if route == "fast" and n <= DENSE_SVD_MAX_N:
        return POST_N2_BYTES_DENSE_SVD
    return POST_N2_BYTES[route]


def _post_bytes(n: int, rank: int, post_method: str | None = "fast") -> int:
    return ((4 + post_n2_bytes(n, post_method)) * n * n + 16 * n * min(int(rank), n)
            + 64 * 2**20)


def clustering_estimate(n_samples: int, rank: int = 121, post_method: str = "fast") -> int:
    """Bytes post-clustering alone needs at its peak, for a C that was not trained in this
    process (a sweep's C read from its cache): :func:`memory_estimate`'s post-clustering part
    and the runtime."""
    return int(_post_bytes(int(n_samples), rank, post_method) + RUNTIME_BYTES)


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


# Where the kernel says which control groups this process is in, and where they are mounted.
PROC_CGROUP = "/proc/self/cgroup"
CGROUP_ROOT = "/sys/fs/cgroup"
# (limit file, usage file, memory.stat's reclaimable page cache) in cgroup v2, then v1.
_CGROUP_FILES = {"v2": ("memory.max", "memory.current", "inactive_file"),
                 "v1": ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")}


def _read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _as_int(text):
    """A byte count from a cgroup file; None for 'max' (no limit) or anything else."""
    text = text.strip()
    return int(text) if text.isdigit() else None


def _cgroup_folders():
    """(version, folder) of this process's memory cgroup and of each of its parents up to the
    mount (in a container the mount is the container's own group). cgroup v1's memory line
    first (hybrid systems keep the memory controller there), else v2's unified line."""
    groups = {}
    for line in _read_text(PROC_CGROUP).splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if "memory" in controllers.split(","):
            groups["v1"] = (os.path.join(CGROUP_ROOT, "memory"), path)
        elif not controllers and os.path.exists(os.path.join(CGROUP_ROOT, "cgroup.controllers")):
            groups["v2"] = (CGROUP_ROOT, path)
    version = "v1" if "v1" in groups else "v2" if "v2" in groups else None
    if version is None:
        return []
    mount, path = groups[version]
    parts = [p for p in path.split("/") if p]
    return [(version, os.path.join(mount, *parts[:i])) for i in range(len(parts), -1, -1)]


def cgroup_room():
    """Bytes the memory cgroups of this process leave it (limit − usage + their inactive page
    cache, which the kernel reclaims first), the smallest over the group and its parents; None
    where no group sets a limit. A container's limit is below the machine's MemAvailable."""
    room = None
    for version, folder in _cgroup_folders():
        limit_file, usage_file, cache_key = _CGROUP_FILES[version]
        limit = _as_int(_read_text(os.path.join(folder, limit_file)))
        usage = _as_int(_read_text(os.path.join(folder, usage_file)))
        if limit is None or usage is None or limit >= 2**60:  # v1 writes "no limit" as ~2^63
            continue
        stat = dict(line.split(" ", 1) for line in
                    _read_text(os.path.join(folder, "memory.stat")).splitlines() if " " in line)
        cache = _as_int(stat.get(cache_key, "0")) or 0
        left = max(0, limit - usage + cache)
        room = left if room is None else min(room, left)
    return room


def _memory_limits() -> tuple[int, int | None, int | None]:
    """(the machine's MemAvailable, :func:`cgroup_room`, :func:`memory_cap`), read once."""
    try:
        with open("/proc/meminfo") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
        have = info.get("MemAvailable", info["MemTotal"])
    except (OSError, KeyError, ValueError):
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return have, cgroup_room(), memory_cap()


def available_memory() -> int:
    """Bytes of memory available now: the machine's MemAvailable, at most what the process's
    memory cgroup leaves (:func:`cgroup_room`) and ``$MESC_MEMORY_LIMIT_BYTES`` where set."""
    return available_text()[0]


def available_text() -> tuple[int, str]:
    """(:func:`available_memory`, "<size> is available" and what sets that limit where it is
    not the machine's: the cap or the memory cgroup), read once."""
    machine, room, cap = _memory_limits()
    have = min(x for x in (machine, room, cap) if x is not None)
    why = (f" (the cap {MEMORY_LIMIT_ENV} sets)" if have == cap else
           " (what this process's memory cgroup, e.g. a container's limit, leaves)"
           if have == room else "")
    return have, f"{size_text(have)} is available{why}"


def check_memory(n_samples: int, arch: Architecture, rank: int = 121, post_method="fast"):
    """:func:`memory_estimate` against the available memory (:func:`available_text`): MescError
    if it does not fit."""
    need = memory_estimate(n_samples, arch, rank, post_method)
    have, available = available_text()
    if need > have:
        other = ("" if post_method in (None, "fast")
                 or memory_estimate(n_samples, arch, rank) > have
                 else f" (the {post_method} post-clustering's dense copies; the fast one needs "
                 "less)")
        raise MescError(f"a problem of {n_samples} samples needs about {size_text(need)}{other} "
                        f"but {available}; use a subset of the data or a machine with more "
                        "memory")
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
    have, available = available_text()
    room = have - RUNTIME_BYTES - 4 * n * pixels  # the images themselves stay
    if n * per_image <= room:
        return None
    if room < per_image:
        raise MescError(f"pretraining on {n} images of {arch.image_shape} needs about "
                        f"{size_text(RUNTIME_BYTES + 4 * n * pixels + per_image)} even one "
                        f"image per step, but {available}; use a subset of the data or a "
                        "machine with more memory")
    return int(room // per_image)
