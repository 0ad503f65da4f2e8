"""Where ORL's clustering gap between two auto-encoders comes from (issue 3).

    python experiments/orl_gap.py            # ours (pretrained/orl.h5) against the authors'

Fine-tunes ORL once from each auto-encoder with the configured MESC-Net settings (seed 0,
fine-tuning deterministic), then prints, for each:
* the codes' common offset: ‖mean code‖² over the codes' mean squared spread, and their mean
  |code|, before and after fine-tuning (an offset this large holds C's rows to sums of 1);
* C's row sums, mean diagonal and share of negative entries;
* label-aware local measures of C: the share of |C| (diagonal excluded) within a subject, after
  thrC too (with the entries it keeps per column), and how often a sample's 1, 3 and 9 largest
  coefficients lie within its subject;
* ACC with the configured post-clustering;
and then clusters both C's over a grid of post-clustering settings (thr × d × power, seed 0)
and prints each one's mean ACC and best setting, and the paired difference's quartiles, range,
and share of settings where ours is ahead. pretrained/HISTORY.md ("ORL: not the codes' common
offset") holds its figures.
"""

import itertools
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout too

import numpy as np  # noqa: E402

from mesc_tf import cli  # noqa: E402

THRS = (0.08, 0.12, 0.17, 0.25, 0.4)
DIMS = (2, 3, 5, 7, 10)
POWERS = (1.0, 1.5, 2.0, 3.0, 4.0)


def parse_args(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--weights", default=None, metavar="PATH",
                   help="our auto-encoder (default: pretrained/orl.h5)")
    p.add_argument("--tf1-checkpoint", default="original", metavar="PREFIX",
                   help="the authors' (default: their ORL checkpoint)")
    p.add_argument("--data-dir", help="data folder (default: $MESC_DATA_DIR, then ./data)")
    p.add_argument("--epochs", type=cli.at_least(1),
                   help="fine-tuning steps (default: the configured MESC-Net settings')")
    args = p.parse_args(argv)
    from mesc_tf.weights import tf1_prefix

    args.tf1_checkpoint = tf1_prefix("orl", args.tf1_checkpoint)
    return args


def code_stats(z):
    """(‖mean code‖² over the codes' mean squared spread, mean |code|)."""
    mu = z.mean(0)
    return float((mu ** 2).sum() / ((z - mu) ** 2).sum(1).mean()), float(np.abs(z).mean())


def coef_stats(C, y, thr):
    from mesc_tf.postcluster import thrC

    same = y[:, None] == y[None, :]
    np.fill_diagonal(same, False)
    A = np.abs(C.astype(np.float64))
    np.fill_diagonal(A, 0)
    At = np.abs(thrC(C, thr).astype(np.float64))
    np.fill_diagonal(At, 0)
    order = np.argsort(-A, axis=1)
    rows = np.arange(len(y))[:, None]
    return {"row_sum": (float(C.sum(1).mean()), float(C.sum(1).std())),
            "diagonal": float(np.diag(C).mean()), "negative": float((C < 0).mean()),
            "within_subject": float(A[same].sum() / A.sum()),
            "within_subject_after_thrc": float(At[same].sum() / At.sum()),
            "kept_per_column": float((At > 0).sum(0).mean()),
            **{f"top{k}_in_subject": float(same[rows, order[:, :k]].mean()) for k in (1, 3, 9)}}


def main(argv=None):
    args = parse_args(argv)
    from mesc_tf import pipeline, sources
    from mesc_tf.config import get_config
    from mesc_tf.data import load_dataset
    from mesc_tf.measures import latent_codes
    from mesc_tf.metrics import evaluate
    from mesc_tf.postcluster import cluster
    from mesc_tf.training import configure_runtime

    cfg = get_config("orl")
    settings = cfg.mesc.replace(epochs=args.epochs)
    ds = load_dataset("orl", args.data_dir)
    specs = {"authors'": sources.resolve_autoencoder("orl", tf1_checkpoint=args.tf1_checkpoint,
                                                     arch=cfg.arch),
             "ours": sources.resolve_autoencoder("orl", weights=args.weights, arch=cfg.arch)}
    coefs = {}
    for name, spec in specs.items():
        configure_runtime(0)
        ae = spec.load(cfg.arch)
        before = code_stats(latent_codes(ae, ds.x))
        r = pipeline.run(ds.x, ds.y, ds.n_clusters, settings, ae, seed=0, verbose=0)
        coefs[name] = r["coef"]
        s = coef_stats(r["coef"], ds.y, settings.thr)
        after = code_stats(latent_codes(ae, ds.x))
        print(f"{name} ({spec.describe()}): code offset / spread {before[0]:.2f} before, "
              f"{after[0]:.2f} after (mean |code| {before[1]:.0f}, {after[1]:.0f}); C row sums "
              f"{s['row_sum'][0]:.4f} ± {s['row_sum'][1]:.4f}, diagonal {s['diagonal']:.4f}, "
              f"negative {100 * s['negative']:.1f} %; |C| within a subject "
              f"{100 * s['within_subject']:.1f} % ({100 * s['within_subject_after_thrc']:.1f} % "
              f"after thrC, {s['kept_per_column']:.1f} entries kept per column); top 1/3/9 in "
              "the subject " + "/".join(
                  f"{100 * s[f'top{k}_in_subject']:.1f}" for k in (1, 3, 9))
              + f" %; ACC {100 * r['metrics']['acc']:.2f} %", flush=True)
    grid = list(itertools.product(THRS, DIMS, POWERS))
    acc = {name: np.array([evaluate(ds.y, cluster(C, ds.n_clusters, thr, d, power,
                                                  settings.variant, seed=0))["acc"]
                           for thr, d, power in grid]) for name, C in coefs.items()}
    theirs, ours = acc["authors'"], acc["ours"]
    diff = 100 * (theirs - ours)
    q = np.percentile(diff, [0, 25, 50, 75, 100])
    print(f"{len(grid)} post-clustering settings (thr {THRS}, d {DIMS}, power {POWERS}): mean "
          f"ACC authors' {100 * theirs.mean():.2f} %, ours {100 * ours.mean():.2f} %; "
          f"authors' − ours: median {q[2]:.2f}, quartiles "
          f"{q[1]:.2f} and {q[3]:.2f}, range {q[0]:.2f} to {q[4]:.2f} points; ours ahead at "
          f"{100 * (diff < 0).mean():.0f} % of them")
    for name, a in acc.items():
        print(f"best of the grid, {name}: {100 * a.max():.2f} % at (thr, d, power) "
              f"{grid[int(a.argmax())]}")
    return 0


if __name__ == "__main__":
    sys.exit(cli.main_guard(main, interrupted=lambda: "interrupted; nothing was written"))
