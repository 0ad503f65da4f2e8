"""Parameter sensitivity of MESC-Net (the paper's figure "Sensitivity analysis of λ1 and λ2"):
ACC over a λ1 × λ2 grid, as heat maps, on ORL and COIL20.

    python experiments/sensitivity.py          # λ1 ∈ {0.02,0.2,2} × λ2 ∈ {0.02,0.2,2,30}
    python experiments/sensitivity.py --lambda1 0.02 0.2 2 --lambda2 0.02 0.2 2 30 --datasets orl

λ1 and λ2 are in the **paper's** convention (λ1 on the entropy term, λ2 on the self-expression
term of its equation). The released code's loss is twice the paper's with a ½ inside the entropy
and self-expression terms, so the code constants are reg1 = 4·λ1 and reg2 = 4·λ2
(reference-facts §2.4, config.paper_lambdas). Every other setting is the dataset's MESC-Net
setting in mesc_tf/config.py. Each cell is fine-tuned once from the pretrained auto-encoder (no
randomness); the seeds change only the clustering, and the cell shows the mean ACC over them.
"""

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments import common  # noqa: E402

NAME = "sensitivity"
LAMBDA1 = (0.02, 0.2, 2.0)
LAMBDA2 = (0.02, 0.2, 2.0, 30.0)
SMOKE_GRID = ((0.02, 2.0), (0.02, 30.0))


def parse_args(argv=None):
    p = common.parser(NAME, __doc__, datasets=("orl", "coil20"))
    p.add_argument("--lambda1", nargs="+", type=float, metavar="L1",
                   help=f"paper λ1 values (default {' '.join(map(str, LAMBDA1))})")
    p.add_argument("--lambda2", nargs="+", type=float, metavar="L2",
                   help=f"paper λ2 values (default {' '.join(map(str, LAMBDA2))})")
    # reg1 and reg2 are the grid's axes (4·λ1, 4·λ2): --lambda1/--lambda2 set them.
    args = common.finish_args(p, p.parse_args(argv), fixed=("reg1", "reg2"))
    smoke = args.smoke
    args.lambda1 = sorted(set(args.lambda1 or (SMOKE_GRID[0] if smoke else LAMBDA1)))
    args.lambda2 = sorted(set(args.lambda2 or (SMOKE_GRID[1] if smoke else LAMBDA2)))
    for option in ("lambda1", "lambda2"):
        values = getattr(args, option)
        if not all(math.isfinite(4 * v) for v in values) or min(values) < 0:  # reg = 4·λ
            p.error(f"--{option} {' '.join(map(str, values))}: the values must be >= 0 and "
                    "finite, 4·λ included")
        for a, b in zip(values, values[1:]):  # sorted: equal spellings are neighbours
            if fmt(a) == fmt(b):
                p.error(f"--{option}: {a!r} and {b!r} are both {fmt(a)} in the run records' "
                        "names; give values that differ in the first 6 digits")
    return args


def fmt(v):
    return f"{v:g}"


def run_dataset(d, args, results):
    import numpy as np

    name = d.name
    print(f"{name}: {d.n} images, {d.n_clusters} clusters")
    src = common.ae_source(args, name)
    base = common.configure(common.preset(name, "our"), args, "our")
    acc = np.full((len(args.lambda1), len(args.lambda2), len(args.seeds)), np.nan)
    nmi = np.full_like(acc, np.nan)
    cells = []
    for i, l1 in enumerate(args.lambda1):
        for j, l2 in enumerate(args.lambda2):
            settings = base.replace(reg1=4.0 * l1, reg2=4.0 * l2)
            key = f"{name}-l1_{fmt(l1)}-l2_{fmt(l2)}"
            spec = {**common.data_spec(d), "lambda1": l1, "lambda2": l2,
                    "settings": settings.to_dict(), **common.ae_spec(src),
                    "seeds": args.seeds}
            rec = results.get(key, spec)
            if rec is None:
                print(f"  λ1 {fmt(l1)}, λ2 {fmt(l2)} (code reg1 {fmt(4 * l1)}, reg2 {fmt(4 * l2)})")
                t = common.train(d, settings, src, args, args.seeds[0])
                coef, ft_s = t.coef, t.finetune_s
                final = float(t.history["loss"][-1]) if len(t.history.get("loss", [])) else None
                if not np.all(np.isfinite(coef)):
                    clusterings, err = [], "C has NaN/inf (training diverged)"
                else:
                    try:
                        clusterings, err = common.cluster_seeds(coef, d, settings, args.seeds), None
                    except common.MescError as e:  # e.g. an all-zero affinity
                        clusterings, err = [], str(e)
                rec = results.put(key, spec, {"finetune_s": ft_s, "final_loss": final,
                                              "clusterings": clusterings, "error": err})
                if err:
                    print(f"    no clustering: {err}")
                else:
                    print(f"    ACC {np.mean([c['metrics']['acc'] for c in clusterings]):.4f}")
            for c in rec["result"]["clusterings"]:
                s = args.seeds.index(c["seed"])
                acc[i, j, s], nmi[i, j, s] = c["metrics"]["acc"], c["metrics"]["nmi"]
            cells.append({"lambda1": l1, "lambda2": l2, "reg1": 4 * l1, "reg2": 4 * l2,
                          "error": rec["result"]["error"],
                          "finetune_s": rec["result"]["finetune_s"],
                          "per_seed": rec["result"]["clusterings"] and [
                              {"seed": c["seed"], **c["metrics"]}
                              for c in rec["result"]["clusterings"]]})
    return d, acc, nmi, cells


def stats(a):
    import warnings

    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(a, -1), np.nanstd(a, -1, ddof=1)  # ddof 1 as everywhere


def nan_to_none(a):
    """A nested list with None where a is NaN (JSON has no NaN)."""
    import numpy as np

    return np.where(np.isnan(a), None, a).tolist()


def figure(summary, args, path):
    import numpy as np

    plt = common.pyplot()
    names = list(summary)
    width = 1.3 * len(args.lambda2) + 3.2
    fig, axes = plt.subplots(1, len(names), figsize=(width * len(names), 3.9), squeeze=False,
                             layout="constrained")
    for ax, name in zip(axes[0], names):
        m = np.asarray(summary[name]["acc_mean"], float)
        s = np.asarray(summary[name]["acc_std"], float)
        text = [[("–" if np.isnan(m[i, j]) else f"{100 * m[i, j]:.1f}"
                  + (f"\n±{100 * s[i, j]:.1f}"
                     if len(args.seeds) > 1 and not np.isnan(m[i, j]) else ""))
                 for j in range(m.shape[1])] for i in range(m.shape[0])]
        common.annotated_heatmap(ax, 100 * m, xticks=[fmt(v) for v in args.lambda2],
                                 yticks=[fmt(v) for v in args.lambda1], text=text,
                                 cmap="viridis", vmin=0, vmax=100, fontsize=10)
        ax.set_xlabel(r"$\lambda_2$ (paper; code reg2 = 4$\lambda_2$)")
        ax.set_ylabel(r"$\lambda_1$ (paper; code reg1 = 4$\lambda_1$)")
        ax.set_title(f"{name}: ACC (%) of MESC-Net")
    return common.save_figure(fig, path)


def markdown(summary, args):
    import numpy as np

    lines = ["# Sensitivity to λ1 and λ2 (paper figure: parameter analysis)", "",
             "λ in the paper's convention; the code's constants are reg1 = 4·λ1 and "
             "reg2 = 4·λ2 (reference-facts §2.4). Cells: ACC (%) mean ± std over seeds "
             f"{' '.join(map(str, args.seeds))} of the clustering; every other setting is the "
             "dataset's MESC-Net setting (mesc_tf/config.py).", ""]
    for name, s in summary.items():
        m, sd = np.asarray(s["acc_mean"], float), np.asarray(s["acc_std"], float)
        l1, l2 = s["config_lambdas"]
        lines += [f"## {name} ({s['n']} images; the config's own setting is λ1 = {l1:g}, "
                  f"λ2 = {l2:g})", "",
                  "| λ1 \\ λ2 | " + " | ".join(fmt(v) for v in args.lambda2) + " |",
                  "|---|" + "---|" * len(args.lambda2)]
        for i, v in enumerate(args.lambda1):
            lines.append(f"| {fmt(v)} | " + " | ".join(
                "–" if np.isnan(m[i, j])
                else common.pm(m[i, j], sd[i, j] if len(args.seeds) > 1 else None)
                for j in range(len(args.lambda2))) + " |")
        lines.append("")
    lines += ["![sensitivity](sensitivity.png)", ""]
    return "\n".join(lines) + "\n"


def main(argv=None):
    from mesc_tf.config import get_config, paper_lambdas

    args = parse_args(argv)
    common.check_sources(args, args.datasets)
    loaded = common.load_all(args)
    results = common.Results(args, common.request_of(args, lambda1=args.lambda1,
                                                     lambda2=args.lambda2),
                             figures=["sensitivity.png"])
    summary = {}
    for name in args.datasets:
        d, acc, nmi, cells = run_dataset(loaded[name], args, results)
        am, asd = stats(acc)
        nm, nsd = stats(nmi)
        cfg = get_config(name).mesc
        summary[name] = {"n": d.n, "n_clusters": d.n_clusters, "lambda1": args.lambda1,
                         "lambda2": args.lambda2,
                         "acc_mean": nan_to_none(am), "acc_std": nan_to_none(asd),
                         "nmi_mean": nan_to_none(nm), "nmi_std": nan_to_none(nsd), "cells": cells,
                         "config_lambdas": paper_lambdas(cfg.reg1, cfg.reg2)}
    md = markdown(summary, args)
    png = figure(summary, args, results.dir / "sensitivity.png")
    results.finish({"conversion": "code reg1 = 4·λ1, reg2 = 4·λ2 (paper λ)",
                    "datasets": summary}, md, [png])
    return summary


if __name__ == "__main__":
    common.run_main(main)
