"""The spectral step under the installed scikit-learn, on block problems with a clear answer.

    python benchmarks/spectral_sklearn.py --seeds 0-4

scikit-learn 1.9 changed how ``spectral_embedding`` (hence ``SpectralClustering``, step 8 of
post_proC) calls ARPACK: shift-invert on the Laplacian L at σ = −1e-5, where 1.8 and before,
the versions the released code ran, inverted −L at σ = 1 (scikit-learn issue 33242), which
leaves the wanted eigenvalues bunched together. For four noisy diagonal blocks of C
(``noisy_blocks`` of tests/synthetic.py: 50 images, blocks of 10-15, noise 1 % of the in-block
values) this prints the ACC of both post-clustering routes per seed, so that running
it under two scikit-learn versions shows what the change does. ``setup.py`` requires 1.9.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from experiments import common  # noqa: E402
from mesc_tf import cli, postcluster  # noqa: E402
from mesc_tf.metrics import accuracy  # noqa: E402
from synthetic import noisy_blocks  # noqa: E402  (tests/synthetic.py)


def parse_args(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n")[0])
    common.add_seeds_arg(p, [0, 1, 2, 3, 4])
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    seeds = common.seeds_of(args.seeds, [0, 1, 2, 3, 4])
    import scipy
    import sklearn

    print(f"scikit-learn {sklearn.__version__}, SciPy {scipy.__version__}; thr 0.2, d 3, power 4")
    C, y = noisy_blocks()
    for variant in ("mesc", "dsc", "dsc_diag"):
        for method in ("fast", "reference"):
            accs = [accuracy(y, postcluster.cluster(C, 4, 0.2, 3, 4.0, variant, seed=s,
                                                     method=method)) for s in seeds]
            print(f"{variant:9s} {method:9s} ACC per seed {' '.join(f'{a:.2f}' for a in accs)}")
    return 0


if __name__ == "__main__":
    sys.exit(cli.main_guard(main))
