"""Confusion matrices on COIL20 (the paper's figure "Confusion matrices on COIL20") for
DSC-Net-L1, DSC-Net-L2, DSC-Net with the nuclear norm and MESC-Net, with per-class recall (row
summary) and precision (column summary).

    python experiments/confusion.py                       # coil20, seed 0
    python experiments/confusion.py --seeds 0 1 2         # matrices of seed 0, ACC over all

Each method is fine-tuned once from the pretrained auto-encoder with its preset
(mesc_tf/config.py: dsc_l1, dsc_l2, DSC-Net-L2's settings with ‖C‖_* for the nuclear norm, our)
and clustered; the cluster labels are relabelled by best_map (Hungarian matching) before
counting. Rows are the true classes, columns the predicted (matched) classes; the right-hand
column is the recall of each class (diagonal / row sum), the bottom row the precision
(diagonal / column sum), as in MATLAB's confusionchart summaries the paper shows. The figure
shows the first seed; the JSON has every seed.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments import common  # noqa: E402

NAME = "confusion"
METHODS = ("dsc_l1", "dsc_l2", "dsc_nuclear", "our")


def parse_args(argv=None):
    p = common.parser(NAME, __doc__, datasets=("coil20",), seeds=(0,), methods=METHODS)
    return common.finish_args(p, p.parse_args(argv))


def confusion(y, labels, k):
    """(matrix rows=true, cols=predicted after best_map, recall per row, precision per column)."""
    import numpy as np
    from sklearn.metrics import confusion_matrix

    from mesc_tf.metrics import best_map

    mapped = best_map(y, labels)
    M = confusion_matrix(y, mapped, labels=np.arange(1, k + 1))
    with np.errstate(invalid="ignore", divide="ignore"):
        recall = np.diag(M) / M.sum(axis=1)
        precision = np.diag(M) / M.sum(axis=0)
    return M, np.nan_to_num(recall), np.nan_to_num(precision)


def run_dataset(d, args, results):
    name = d.name
    print(f"{name}: {d.n} images, {d.n_clusters} clusters")
    src = common.ae_source(args, name)
    out = {}
    for method in args.methods:
        settings = common.configure(common.preset(name, method), args, method)
        key = f"{name}-{method}"
        spec = common.method_spec(d, method, settings, src, args)
        rec = results.get(key, spec)
        if rec is None:
            print(f"  {common.METHODS[method]}: {settings.regularizer}, {settings.framework}")
            t = common.train(d, settings, src, args, args.seeds[0])
            clusterings = common.cluster_seeds(t.coef, d, settings, args.seeds, keep_labels=True)
            for c in clusterings:
                M, rec_, prec = confusion(d.y, c["labels"], d.n_clusters)
                c.update(confusion=M.tolist(), recall=rec_.tolist(), precision=prec.tolist())
            rec = results.put(key, spec, {"finetune_s": t.finetune_s, "clusterings": clusterings})
        cl = rec["result"]["clusterings"]
        scores = common.acc_nmi(cl)
        out[method] = {"title": common.METHODS[method], **scores,
                       "finetune_s": rec["result"]["finetune_s"],
                       "per_seed": [{k: c[k] for k in ("seed", "metrics", "confusion", "recall",
                                                        "precision")} for c in cl]}
        n_classes = len(cl[0]["recall"])
        worst = min(range(n_classes), key=cl[0]["recall"].__getitem__)
        print(f"    ACC {scores['acc_mean']:.4f}, seed {cl[0]['seed']}: worst recall "
              f"{cl[0]['recall'][worst]:.3f} (class {common.class_names(name, n_classes)[worst]})")
    return d, out


def draw(ax, M, recall, precision, title, names=None):
    """One confusion chart: counts, a recall column on the right, a precision row below;
    ``names``: the classes' tick labels (default 1..K, the labels)."""
    import numpy as np

    M = np.asarray(M, float)
    k = len(M)
    full = np.full((k + 1, k + 1), np.nan)
    full[:k, :k] = M
    text = [["" for _ in range(k + 1)] for _ in range(k + 1)]
    for i in range(k):
        for j in range(k):
            if M[i, j]:
                text[i][j] = f"{int(M[i, j])}"
        text[i][k] = f"{100 * recall[i]:.0f}"
        text[k][i] = f"{100 * precision[i]:.0f}"
    # Counts in blues, relative to the largest class; summaries in a red-green scale.
    ax.imshow(np.ma.masked_invalid(full[:k, :k] / max(M.sum(axis=1).max(), 1)), cmap="Blues",
              vmin=0, vmax=1, extent=(-0.5, k - 0.5, k - 0.5, -0.5))
    summ = np.full((k + 1, k + 1), np.nan)
    summ[:k, k], summ[k, :k] = recall, precision
    ax.imshow(np.ma.masked_invalid(summ), cmap="RdYlGn", vmin=0, vmax=1,
              extent=(-0.5, k + 0.5, k + 0.5, -0.5))
    fs = 7 if k <= 20 else 5
    for i in range(k + 1):
        for j in range(k + 1):
            if text[i][j]:
                if i < k and j < k:
                    dark = M[i, j] / max(M.sum(axis=1).max(), 1) > 0.55
                else:  # the ends of RdYlGn are dark
                    v = recall[i] if j == k else precision[j]
                    dark = v < 0.15 or v > 0.85
                ax.text(j, i, text[i][j], ha="center", va="center", fontsize=fs,
                        color="white" if dark else "black")
    ax.axhline(k - 0.5, color="black", linewidth=1)
    ax.axvline(k - 0.5, color="black", linewidth=1)
    ticks, names = list(range(k + 1)), list(names or (str(t + 1) for t in range(k)))
    ax.set_xticks(ticks, names + ["recall\n(%)"], fontsize=fs)
    ax.set_yticks(ticks, names + ["precision (%)"], fontsize=fs)
    ax.set_xlim(-0.5, k + 0.5)
    ax.set_ylim(k + 0.5, -0.5)
    ax.set_xlabel("predicted class (clusters matched by best_map)")
    ax.set_ylabel("true class")
    ax.set_title(title, fontsize=11)


def figure(name, out, path):
    import math

    plt = common.pyplot()
    cols = min(2, len(out))
    rows = math.ceil(len(out) / cols)
    k = len(next(iter(out.values()))["per_seed"][0]["confusion"])
    size = max(4.5, 0.38 * (k + 1) + 1.5)
    fig, axes = plt.subplots(rows, cols, figsize=(size * cols, size * rows), squeeze=False)
    for ax, r in zip(axes.ravel(), out.values()):
        s = r["per_seed"][0]
        draw(ax, s["confusion"], s["recall"], s["precision"],
             f"{r['title']}: ACC {100 * s['metrics']['acc']:.2f}% (seed {s['seed']})",
             common.class_names(name, k))  # USPS's and MNIST's by their digit
    for ax in axes.ravel()[len(out):]:
        ax.axis("off")
    fig.suptitle(f"{name}: confusion matrices", fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return common.save_figure(fig, path)


def markdown(summary, args):
    lines = ["# Confusion matrices (paper figure: confusion matrices on COIL20)", ""]
    for name, s in summary.items():
        lines += [f"## {name} ({s['n']} images, {s['n_clusters']} classes)", "",
                  "| method | ACC (%) | NMI (%) | classes with recall < 50% (seed "
                  f"{args.seeds[0]}) |", "|---|---|---|---|"]
        for r in s["methods"].values():
            recall = r["per_seed"][0]["recall"]  # classes named as in the figure (digits)
            names = common.class_names(name, len(recall))
            low = [names[i] for i, v in enumerate(recall) if v < 0.5]
            lines.append(f"| {r['title']} | {common.pm(r['acc_mean'], r['acc_std'])} | "
                         f"{common.pm(r['nmi_mean'], r['nmi_std'])} | {', '.join(low) or '–'} |")
        lines += ["", f"![confusion]({name}_confusion.png)", ""]
    lines += ["Rows: true class; columns: predicted class after best_map; right column: recall, "
              "bottom row: precision (%). ACC/NMI: mean ± std over seeds "
              f"{' '.join(map(str, args.seeds))}.", ""]
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    common.check_sources(args, args.datasets)
    loaded = common.load_all(args)
    results = common.Results(args, common.request_of(args),
                             figures=[f"{name}_confusion.png" for name in args.datasets])
    summary = {}
    for name in args.datasets:
        d, out = run_dataset(loaded[name], args, results)
        summary[name] = {"n": d.n, "n_clusters": d.n_clusters, "methods": out}
    # Drawn once every dataset has run: a stopped run leaves no figure newer than its summary.
    pngs = [figure(name, s["methods"], results.dir / f"{name}_confusion.png")
            for name, s in summary.items()]
    md = markdown(summary, args)
    results.finish({"datasets": summary}, md, pngs)
    return summary


if __name__ == "__main__":
    common.run_main(main)
