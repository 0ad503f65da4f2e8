"""t-SNE of the encoder outputs (the paper's figure "t-SNE plots on MNIST"): 2-D t-SNE of the
flattened latent codes Z after fine-tuning, for DSC-Net-L1, DSC-Net-L2 and MESC-Net, plus the
ground truth, each panel with the homogeneity and completeness of the method's clustering.

    python experiments/tsne.py                          # MNIST (10000 test images)
    python experiments/tsne.py --tsne-samples 2000 --seeds 0
    python experiments/tsne.py --smoke --no-pretrain

Each method is fine-tuned once from the pretrained auto-encoder with its preset
(mesc_tf/config.py: dsc_l1, dsc_l2, our); Z = encoder(x) of the fine-tuned network, flattened.
Homogeneity and completeness (sklearn) compare the method's cluster labels with the ground
truth on all samples (mean over the seeds). The t-SNE (sklearn, PCA start, perplexity 30, seeded
with the first seed) runs on a random subset of ``--tsne-samples`` images (the same for every
panel) for speed. The ground-truth panel is the t-SNE of the input pixels coloured by class.
Method panels are coloured by the method's clusters (first seed) relabelled by best_map, so a
colour is the class its cluster was matched to (``--color-by truth``: the true classes).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments import common  # noqa: E402
from mesc_tf import cli  # noqa: E402

NAME = "tsne"
METHODS = ("dsc_l1", "dsc_l2", "our")


def parse_args(argv=None):
    p = common.parser(NAME, __doc__, datasets=("mnist",), seeds=(0, 1, 2), methods=METHODS)
    p.add_argument("--tsne-samples", type=cli.at_least(5), metavar="N",
                   help="images in the t-SNE (default 5000; all with --smoke); scores use all")
    p.add_argument("--perplexity", type=float, default=30.0, help="t-SNE perplexity (default 30)")
    p.add_argument("--color-by", choices=("cluster", "truth"), default="cluster",
                   help="colour method panels by their mapped clusters (default) or true classes")
    args = common.finish_args(p, p.parse_args(argv))
    if args.tsne_samples is None and not args.smoke:
        args.tsne_samples = 5000
    if not 0 < args.perplexity < float("inf"):
        p.error("--perplexity must be a finite number > 0")
    return args


def tsne(features, seed, perplexity):
    from sklearn.manifold import TSNE

    n = len(features)
    # Barnes-Hut for real sizes; the exact gradient is faster (and thread-free) for a few points.
    return TSNE(n_components=2, perplexity=min(perplexity, (n - 1) / 3.0), init="pca",
                method="exact" if n <= 300 else "barnes_hut",
                random_state=seed).fit_transform(features.astype("float64"))


def embedding(results, key, spec, features):
    """The t-SNE of ``features`` for ``spec`` (cached as runs/<key>.npy)."""
    emb = results.get_with_array(key, spec)[1]
    if emb is None:
        print(f"  t-SNE {key} ({len(features)} points)")
        emb = tsne(features, spec["seed"], spec["perplexity"])
        results.put(key, spec, {"points": len(features)}, array=emb)
    return emb


def run_dataset(d, args, results):
    import numpy as np
    from sklearn.metrics import completeness_score, homogeneity_score

    from mesc_tf.metrics import best_map
    from mesc_tf.measures import latent_codes

    name = d.name
    print(f"{name}: {d.n} images, {d.n_clusters} clusters")
    src = common.ae_source(args, name)
    m = d.n if args.tsne_samples is None else min(args.tsne_samples, d.n)
    sub = np.sort(np.random.default_rng(args.seeds[0]).choice(d.n, m, replace=False))
    tspec = {**common.data_spec(d), "points": m,
             "seed": args.seeds[0], "perplexity": args.perplexity}
    panels = [{"method": "truth", "title": "Ground truth (input pixels)",
               "emb": embedding(results, f"{name}-tsne-pixels",
                                {**tspec, "features": "pixels"}, d.x[sub].reshape(m, -1)),
               "colors": d.y[sub], "homogeneity": 1.0, "completeness": 1.0}]
    for method in args.methods:
        settings = common.configure(common.preset(name, method), args, method)
        key = f"{name}-{method}"
        spec = common.method_spec(d, method, settings, src, args)
        rec, z = results.get_with_array(key, spec)
        if z is None:
            print(f"  {common.METHODS[method]}")
            t = common.train(d, settings, src, args, args.seeds[0],
                             inspect=lambda model: latent_codes(model.autoencoder, d.x))
            z = t.extra
            clusterings = common.cluster_seeds(t.coef, d, settings, args.seeds, keep_labels=True)
            for c in clusterings:
                c["homogeneity"] = float(homogeneity_score(d.y, c["labels"]))
                c["completeness"] = float(completeness_score(d.y, c["labels"]))
            rec = results.put(key, spec, {"finetune_s": t.finetune_s, "latent_dim": int(z.shape[1]),
                                          "clusterings": clusterings}, array=z)
        cl = rec["result"]["clusterings"]
        emb = embedding(results, f"{name}-tsne-{method}", {**tspec, "features": key,
                                                           "fit_spec": spec}, z[sub])
        labels = np.asarray(cl[0]["labels"])
        colors = d.y[sub] if args.color_by == "truth" else best_map(d.y, labels)[sub]
        h = common.mean_std([c["homogeneity"] for c in cl])
        c_ = common.mean_std([c["completeness"] for c in cl])
        scores = common.acc_nmi(cl)
        panels.append({"method": method, "title": common.METHODS[method], "emb": emb,
                       "colors": colors, "homogeneity": h[0], "homogeneity_std": h[1],
                       "completeness": c_[0], "completeness_std": c_[1],
                       **scores, "finetune_s": rec["result"]["finetune_s"],
                       "per_seed": [{"seed": c["seed"], "homogeneity": c["homogeneity"],
                                     "completeness": c["completeness"], **c["metrics"]}
                                    for c in cl]})
        print(f"    homogeneity {h[0]:.4f}, completeness {c_[0]:.4f}, "
              f"ACC {scores['acc_mean']:.4f}")
    return d, m, panels


def figure(name, d, m, panels, args, path):
    plt = common.pyplot()
    import numpy as np

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.6), squeeze=False)
    cmap = plt.get_cmap("tab10" if d.n_clusters <= 10 else "tab20")
    for ax, p in zip(axes[0], panels):
        c = np.asarray(p["colors"]) - 1
        ax.scatter(p["emb"][:, 0], p["emb"][:, 1], c=cmap(c % cmap.N), s=3 if m > 1000 else 12,
                   linewidths=0)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(p["title"], fontsize=11)
        ax.set_xlabel(f"homogeneity {p['homogeneity']:.4f}\ncompleteness {p['completeness']:.4f}",
                      fontsize=10)
    handles = [plt.Line2D([], [], marker="o", linestyle="", color=cmap(k % cmap.N), label=label)
               for k, label in enumerate(common.class_names(name, d.n_clusters))]
    if d.n_clusters <= 20:
        fig.legend(handles=handles, loc="center right", title="class", fontsize=8)
    what = "true classes" if args.color_by == "truth" else "clusters mapped to classes"
    fig.suptitle(f"{name}: t-SNE of the encoder output after fine-tuning ({m} of {d.n} images; "
                 f"methods coloured by {what})", fontsize=11)
    fig.tight_layout(rect=(0, 0, 0.94 if d.n_clusters <= 20 else 1, 0.95))
    return common.save_figure(fig, path)


def markdown(summary, args):
    lines = ["# t-SNE of the encoder outputs (paper figure: t-SNE on MNIST)", ""]
    for name, s in summary.items():
        lines += [f"## {name} ({s['n']} images, t-SNE of {s['tsne_points']})", "",
                  "| method | homogeneity | completeness | ACC (%) | NMI (%) |",
                  "|---|---|---|---|---|"]
        for p in s["panels"]:
            if p["method"] == "truth":
                continue
            h = common.pm(p["homogeneity"], p["homogeneity_std"], 1, 4)
            c = common.pm(p["completeness"], p["completeness_std"], 1, 4)
            lines.append(f"| {p['title']} | {h} | {c} | "
                         f"{common.pm(p['acc_mean'], p['acc_std'])} | "
                         f"{common.pm(p['nmi_mean'], p['nmi_std'])} |")
        lines += ["", f"![t-SNE]({name}_tsne.png)", ""]
    lines += [f"Scores of the clustering (sklearn homogeneity_score / completeness_score against "
              "the ground truth, all images), mean ± std over seeds "
              f"{' '.join(map(str, args.seeds))}. "
              "Presets from mesc_tf/config.py.", ""]
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    common.check_sources(args, args.datasets)
    loaded = common.load_all(args)
    results = common.Results(args, common.request_of(
        args, tsne_samples=args.tsne_samples, perplexity=args.perplexity, color_by=args.color_by),
        figures=[f"{name}_tsne.png" for name in args.datasets])
    summary, ran = {}, {}
    for name in args.datasets:
        d, m, panels = ran[name] = run_dataset(loaded[name], args, results)
        summary[name] = {"n": d.n, "tsne_points": m, "panels": [
            {k: v for k, v in p.items() if k not in ("emb", "colors")} for p in panels]}
    # Drawn once every dataset has run: a stopped run leaves no figure newer than its summary.
    pngs = [figure(name, *r, args, results.dir / f"{name}_tsne.png") for name, r in ran.items()]
    md = markdown(summary, args)
    results.finish({"datasets": summary}, md, pngs)
    return summary


if __name__ == "__main__":
    common.run_main(main)
