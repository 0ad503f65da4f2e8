"""What post-clustering allocates, by route: the figures behind ``memory.post_n2_bytes``.

    python benchmarks/post_memory.py --n 2000 3000

For each n it clusters a C of K noisy diagonal blocks (float32) by each route and prints
NumPy's peak allocation beyond C (tracemalloc, which sees NumPy's buffers, not LAPACK's work
space) in units of n² bytes, beside what ``memory_estimate`` counts for it.
"""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mesc_tf import cli, memory  # noqa: E402
from mesc_tf.config import POST_METHODS, Settings  # noqa: E402


def block_coef(n, k, seed=0):
    """A float32 C of k diagonal blocks (uniform in [0, 1)) on noise of 1 % and a zero diagonal."""
    rng = np.random.default_rng(seed)
    coef = rng.random((n, n), dtype=np.float32) * 0.01
    for i in range(k):
        block = slice(i * n // k, (i + 1) * n // k)
        coef[block, block] += rng.random((block.stop - block.start,) * 2, dtype=np.float32)
    np.fill_diagonal(coef, 0)
    return coef


def peak_beyond_coef(coef, k, post_method, settings=None):
    """NumPy's peak allocation (bytes) while ``pipeline.cluster`` clusters ``coef`` (with the
    default Settings' thr, d and power unless ``settings``)."""
    from mesc_tf.pipeline import cluster

    settings = Settings() if settings is None else settings
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        cluster(coef, k, settings, post_method=post_method)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def parse_args(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=cli.at_least(20), nargs="+", default=[2000], help="sizes of C")
    p.add_argument("--clusters", type=cli.at_least(2), default=10, help="blocks K (default 10)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    for n in args.n:
        coef = block_coef(n, args.clusters)
        for route in POST_METHODS:
            peak = peak_beyond_coef(coef, args.clusters, route)
            print(f"n {n}, {route}: {peak / n**2:.1f} n² bytes beyond C (counted: "
                  f"{memory.post_n2_bytes(n, route)} n² and fixed terms)")


if __name__ == "__main__":
    sys.exit(cli.main_guard(main))
