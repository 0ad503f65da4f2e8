"""The learned affinities on the Toy set (the paper's figures "different regularizer" and
"COSSIM"): C learned with the L1, Frobenius, nuclear and entropy regularisers, drawn after
min-max normalisation beside the ideal block matrix, with the variance of each diagonal block
in its box, and the cosine similarity of each to the ideal matrix.

    python experiments/toy_affinity.py                 # toy: 3 COIL20 objects × 72 views
    python experiments/toy_affinity.py --tf1-checkpoint \
        ../shared/pretrained-tf1/dscnet/COIL20/model.ckpt      # the DSC COIL20 AE

Settings (mesc_tf/config.py, dataset 'toy' = COIL20's architecture and DSC-Net
settings, with MESC-Net settings of its own):

* L1: DSC-Net-L1 (coupled, Σ|C|), the toy's DSC-Net settings;
* Frobenius: DSC-Net-L2 (coupled, Σ C²), the same settings;
* nuclear: DSC-Net with ‖C‖_* in place of Σ C², the same settings;
* entropy: MESC-Net (decoupled, ½ Σ C ln C), the toy's MESC settings.

Each C is fine-tuned once from the same pretrained auto-encoder (no randomness); the seeds
only change the clustering whose ACC/NMI is reported too. Samples are ordered by class, so
the ideal matrix is block diagonal. The picture is |C| (``--signed``: C) min-max normalised to
[0, 1] over the whole matrix, diagonal included (``--zero-diagonal`` zeroes it first). Block
variance = variance of the normalised entries of each diagonal block; cosine similarity =
⟨A, I⟩ / (‖A‖_F ‖I‖_F) with I the ideal 0/1 block matrix.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments import common  # noqa: E402

NAME = "toy_affinity"
METHODS = ("dsc_l1", "dsc_l2", "dsc_nuclear", "our")
TITLES = {"dsc_l1": r"$\|C\|_1$", "dsc_l2": r"$\|C\|_F^2$", "dsc_nuclear": r"$\|C\|_*$",
          "our": "Our (entropy)", "our_wo_net": "Our w/o Net"}


def parse_args(argv=None):
    p = common.parser(NAME, __doc__, datasets=("toy",), seeds=(0, 1, 2), methods=METHODS)
    p.add_argument("--signed", action="store_true", help="draw C instead of |C|")
    p.add_argument("--zero-diagonal", action="store_true",
                   help="zero the diagonal of C before normalising")
    return common.finish_args(p, p.parse_args(argv))


def ideal_matrix(y):
    import numpy as np

    return (y[:, None] == y[None, :]).astype(np.float64)


def normalised(coef, signed=False, zero_diagonal=False):
    """|C| (or C) min-max normalised to [0, 1]."""
    import numpy as np

    A = np.array(coef, np.float64)
    if zero_diagonal:
        np.fill_diagonal(A, 0.0)
    if not signed:
        A = np.abs(A)
    lo, hi = A.min(), A.max()
    return (A - lo) / (hi - lo) if hi > lo else np.zeros_like(A)


def block_stats(A, y):
    """Per class: variance and mean of the diagonal block; mean of the off-diagonal entries."""
    import numpy as np

    same = y[:, None] == y[None, :]
    blocks = []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        B = A[np.ix_(idx, idx)]
        blocks.append({"class": int(c), "size": int(idx.size), "variance": float(B.var()),
                       "mean": float(B.mean())})
    return blocks, float(A[~same].mean()) if (~same).any() else 0.0


def cosine(A, B):
    import numpy as np

    den = np.linalg.norm(A) * np.linalg.norm(B)
    return float((A * B).sum() / den) if den > 0 else 0.0


def run_dataset(d, args, results):
    name, d = d.name, common.order_by_class(d)
    print(f"{name}: {d.n} images, {d.n_clusters} clusters")
    src = common.ae_source(args, name)
    out = {}
    for method in args.methods:
        settings = common.configure(common.preset(name, method), args, method)
        key = f"{name}-{method}"
        spec = common.method_spec(d, method, settings, src, args)
        rec, coef = results.get_with_array(key, spec)
        if coef is None:
            print(f"  {common.METHODS[method]}: {settings.regularizer}, {settings.framework}")
            t = common.train(d, settings, src, args, args.seeds[0])
            clusterings = common.cluster_seeds(t.coef, d, settings, args.seeds)
            rec = results.put(key, spec, {"finetune_s": t.finetune_s, "clusterings": clusterings},
                              array=t.coef)
            coef = t.coef
        A = normalised(coef, args.signed, args.zero_diagonal)
        blocks, off = block_stats(A, d.y)
        scores = common.acc_nmi(rec["result"]["clusterings"])
        out[method] = {"A": A, "blocks": blocks, "offdiag_mean": off,
                       "cosine_to_ideal": cosine(A, ideal_matrix(d.y)), **scores,
                       "finetune_s": rec["result"]["finetune_s"],
                       "settings": rec["spec"]["settings"]}
        print(f"    cosine to ideal {out[method]['cosine_to_ideal']:.4f}, block variances "
              f"{[round(b['variance'], 5) for b in blocks]}, ACC {scores['acc_mean']:.4f}")
    return d, out


def _matrices(args) -> str:
    """What the figures and the table show: |C| or C (--signed), its diagonal kept or zeroed."""
    what = "C" if args.signed else "|C|"
    return what + (" with its diagonal zeroed" if args.zero_diagonal else "")


def draw_matrices(name, d, out, path, args):
    import numpy as np
    from matplotlib.patches import Rectangle

    plt = common.pyplot()
    panels = [("Ideal", ideal_matrix(d.y), block_stats(ideal_matrix(d.y), d.y)[0])]
    panels += [(f"{TITLES.get(m, m)}\n{common.METHODS[m]}", r["A"], r["blocks"])
               for m, r in out.items()]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.3 * len(panels), 3.7))
    axes = np.atleast_1d(axes)
    for ax, (title, A, blocks) in zip(axes, panels):
        im = ax.imshow(A, cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
        start = 0
        for b in blocks:
            ax.add_patch(Rectangle((start - 0.5, start - 0.5), b["size"], b["size"],
                                   fill=False, edgecolor="red", linewidth=1.2))
            ax.text(start + b["size"] / 2 - 0.5, start + b["size"] / 2 - 0.5,
                    f"var\n{b['variance']:.4f}", ha="center", va="center", fontsize=8,
                    color="white", bbox=dict(facecolor="black", alpha=0.55, pad=1.5,
                                             edgecolor="none"))
            start += b["size"]
        ax.set_title(title, fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(im, ax=list(axes), fraction=0.012, pad=0.01)
    fig.suptitle(f"{name}: learned affinity {_matrices(args)} after min-max normalisation "
                 f"({d.n} samples ordered by class)", fontsize=11)
    return common.save_figure(fig, path)


def draw_cosine(name, out, path):
    plt = common.pyplot()
    labels = ["Ideal"] + [common.METHODS[m] for m in out]
    values = [1.0] + [r["cosine_to_ideal"] for r in out.values()]
    fig, ax = plt.subplots(figsize=(1.4 * len(labels) + 2, 3.6))
    bars = ax.bar(range(len(values)), values, color=["grey"] + [f"C{i}" for i in range(len(out))])
    for b, v in zip(bars, values):
        ax.text(b.get_x() + b.get_width() / 2, v + 0.01, f"{v:.4f}", ha="center", fontsize=9)
    ax.set_xticks(range(len(values)), [f"Ideal vs\n{l}" for l in labels], fontsize=9)
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("cosine similarity to the ideal matrix")
    ax.set_title(f"{name}: cosine similarity between the ideal affinity and each learned one")
    ax.grid(axis="y", alpha=0.3)
    return common.save_figure(fig, path)


def markdown(summary, args):
    lines = ["# Toy affinities (paper figures: regularisers on C, cosine similarity)", ""]
    for name, s in summary.items():
        k = len(next(iter(s["methods"].values()))["blocks"])
        head = (["method", "regulariser", "framework", "cosine to ideal"]
                + [f"var block {i + 1}" for i in range(k)]
                + ["mean in blocks", "mean off blocks", "ACC (%)", "NMI (%)"])
        lines += [f"## {name} ({s['n']} images, {k} classes)", "",
                  "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for m, r in s["methods"].items():
            mean_in = sum(b["mean"] * b["size"] ** 2 for b in r["blocks"]) / sum(
                b["size"] ** 2 for b in r["blocks"])
            lines.append("| " + " | ".join(
                [common.METHODS[m], r["settings"]["regularizer"], r["settings"]["framework"],
                 f"{r['cosine_to_ideal']:.4f}"]
                + [f"{b['variance']:.5f}" for b in r["blocks"]]
                + [f"{mean_in:.4f}", f"{r['offdiag_mean']:.4f}",
                   common.pm(r["acc_mean"], r["acc_std"]), common.pm(r["nmi_mean"], r["nmi_std"])])
                + " |")
        lines += ["", f"![affinities]({name}_affinity.png)", "",
                  f"![cosine]({name}_cosine.png)", ""]
    lines += [f"Matrices: {_matrices(args)}, "
              "min-max normalised to [0, 1]; samples ordered by class. Settings: L1, Frobenius "
              "and nuclear = DSC-Net presets (coupled) with that regulariser, entropy = MESC-Net "
              f"(decoupled), see mesc_tf/config.py. ACC/NMI: mean ± std over seeds "
              f"{' '.join(map(str, args.seeds))} of the clustering.", ""]
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    common.check_sources(args, args.datasets)
    loaded = common.load_all(args)
    results = common.Results(args, common.request_of(args, signed=args.signed,
                                                     zero_diagonal=args.zero_diagonal),
                             figures=[f"{name}_{kind}.png" for name in args.datasets
                                      for kind in ("affinity", "cosine")])
    summary, ran = {}, {}
    for name in args.datasets:
        d, out = ran[name] = run_dataset(loaded[name], args, results)
        summary[name] = {"n": d.n, "n_clusters": d.n_clusters, "methods": {
            m: {k: v for k, v in r.items() if k != "A"} for m, r in out.items()}}
    # Drawn once every dataset has run: a stopped run leaves no figure newer than its summary.
    pngs = [png for name, (d, out) in ran.items() for png in (
        draw_matrices(name, d, out, results.dir / f"{name}_affinity.png", args),
        draw_cosine(name, out, results.dir / f"{name}_cosine.png"))]
    md = markdown(summary, args)
    results.finish({"datasets": summary}, md, pngs)
    return summary


if __name__ == "__main__":
    common.run_main(main)
