"""Ablation of MESC-Net (the paper's ablation table): {ME vs Frobenius} × {decoupled vs coupled}
× {pretrained vs not}, ACC, NMI and wall time per run, beside the paper's ORL column.

    python experiments/ablation.py                          # orl and coil20, seeds 0 1 2
    python experiments/ablation.py --datasets orl --seeds 0 1 2 3 4
    python experiments/ablation.py --smoke --datasets toy --tf1-checkpoint PREFIX

The eight rows, numbered as in the paper (reference-facts §5.3):

* As in the paper, whose rows 1, 3 and 7 are its main table's "Our", "Our w/o Net" and
  DSC-Net-L2: the decoupled ME rows (1, 2) use the MESC-Net settings of mesc_tf/config.py, the
  coupled ME rows (3, 4) the "Our w/o Net" ones (``--coupled-settings our``: MESC-Net's on the
  coupled graph instead), and the Frobenius rows the DSC-Net-L2 ones (row 7 = DSC-Net-L2), with
  the framework switched where the row says so (``--frobenius-settings mesc``: MESC-Net's with
  Σ C² instead, so that only the regulariser changes).
* "Pretrained" rows start from pretrained/<dataset>.h5 (or --weights / --tf1-checkpoint).
  Fine-tuning from it has no randomness, so it runs once and the seeds only change the
  clustering. Other rows start from he_normal weights seeded with each seed (one fine-tuning
  per seed), with the same number of steps.
* Time: fine-tuning + post-clustering seconds, plus for pretrained rows the pretraining
  seconds stored in the .h5 metadata ('seconds'), as the paper counted (its times with
  pretraining include pretraining). A TF1 checkpoint (or an .h5 without that metadata) has no
  pretraining time: its total is marked "(no pretraining time)".
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments import common  # noqa: E402

NAME = "ablation"
# Paper idx: (ME, decoupled, pretrained).
ROWS = {1: (True, True, True), 2: (True, True, False), 3: (True, False, True),
        4: (True, False, False), 5: (False, True, True), 6: (False, True, False),
        7: (False, False, True), 8: (False, False, False)}
# reference-facts §5.3: idx -> (ACC %, NMI %, time s).
PAPER = {
    "orl": {1: (90.25, 93.59, 110.55), 2: (86.00, 92.42, 13.27), 3: (89.75, 93.23, 110.95),
            4: (73.00, 84.65, 13.70), 5: (86.50, 91.94, 113.92), 6: (82.75, 89.76, 19.99),
            7: (86.00, 90.34, 110.85), 8: (68.75, 81.53, 13.39)},
    "coil100": {1: (71.88, 90.76, 38873.41), 2: (69.57, 90.31, 2973.28),
                3: (69.97, 89.86, 38785.97), 4: (66.81, 89.24, 3354.28),
                5: (68.04, 89.43, 37840.35), 6: (66.93, 88.87, 3390.94),
                7: (67.71, 89.08, 37778.14), 8: (65.96, 88.44, 3198.83)},
}


def parse_args(argv=None):
    p = common.parser(NAME, __doc__, datasets=("orl", "coil20"))
    p.add_argument("--rows", nargs="+", type=int, choices=list(ROWS), default=list(ROWS),
                   metavar="IDX", help="paper rows to run (default: all eight, 1..8)")
    p.add_argument("--frobenius-settings", choices=("dsc", "mesc"), default="dsc",
                   help="settings of the Frobenius rows: DSC-Net-L2's (default) or MESC-Net's "
                        "with Σ C² as regulariser")
    p.add_argument("--coupled-settings", choices=("our_wo_net", "our"), default="our_wo_net",
                   help="settings of the coupled ME rows 3 and 4: Our w/o Net's (default, as the "
                        "paper's row 3) or MESC-Net's on the coupled graph")
    args = p.parse_args(argv)
    # --set may address the rows chosen: for another one it would change nothing.
    # The rows' own axes (regulariser, framework) are not --set's: the table would mislabel them.
    args = common.finish_args(p, args, scopes=[f"row{i}" for i in sorted(set(args.rows))],
                              fixed=("framework", "regularizer"))
    if args.no_pretrain:
        p.error("the ablation has its own non-pretrained rows; give the pretrained auto-encoder "
                "with --weights/--tf1-checkpoint (or the default pretrained/<dataset>.h5)")
    args.rows = sorted(set(args.rows))
    return args


def row_settings(dataset, idx, args):
    me, dec, _ = ROWS[idx]
    if me:
        base = common.preset(dataset, "our" if dec else args.coupled_settings)
    elif args.frobenius_settings == "dsc":
        base = common.preset(dataset, "dsc_l2")
    else:
        base = common.preset(dataset, "our").replace(regularizer="l2")
    return common.configure(base.replace(framework="decoupled" if dec else "coupled"), args,
                            f"row{idx}")


def run_dataset(d, args, results):
    name = d.name
    print(f"{name}: {d.n} images, {d.n_clusters} clusters")
    records = {}
    for idx in args.rows:
        me, dec, pre = ROWS[idx]
        settings = row_settings(name, idx, args)
        src = common.ae_source(args, name, pretrained=pre)
        shared = None  # the one fine-tuning of a pretrained row
        for seed in args.seeds:
            key = f"{name}-row{idx}-seed{seed}"
            spec = {**common.data_spec(d), "row": idx,
                    "me": me, "decoupled": dec, "pretrained": pre, "seed": seed,
                    "settings": settings.to_dict(), **common.ae_spec(src)}
            rec = results.get(key, spec)
            if rec is None:
                print(f"  row {idx} (ME {me}, decoupled {dec}, pretrained {pre}), seed {seed}")
                t = shared if pre and shared is not None else common.train(
                    d, settings, src, args, seed)
                if pre:
                    shared = t
                ft_s, pre_s = t.finetune_s, t.pretrain_s
                c = common.cluster_seeds(t.coef, d, settings, [seed])[0]
                total = ft_s + c["post_s"] + (pre_s or 0.0)
                rec = results.put(key, spec, {
                    **c, "finetune_s": ft_s, "pretrain_s": pre_s if pre else None,
                    "total_s": total, "steps": t.steps,
                    "finetune_shared_across_seeds": bool(pre)})
                m = c["metrics"]
                print(f"    ACC {m['acc']:.4f}  NMI {m['nmi']:.4f}  fine-tune {ft_s:.1f} s  "
                      f"total {total:.1f} s")
            records.setdefault(idx, []).append(rec["result"])
    return d, records


def summarise(d, records):
    rows = {}
    for idx, recs in records.items():
        acc = common.mean_std([r["metrics"]["acc"] for r in recs])
        nmi = common.mean_std([r["metrics"]["nmi"] for r in recs])
        pre_s = recs[0]["pretrain_s"]
        rows[idx] = {
            "me": ROWS[idx][0], "decoupled": ROWS[idx][1], "pretrained": ROWS[idx][2],
            "acc_mean": acc[0], "acc_std": acc[1], "nmi_mean": nmi[0], "nmi_std": nmi[1],
            "finetune_s": common.mean_std([r["finetune_s"] for r in recs])[0],
            "post_s": common.mean_std([r["post_s"] for r in recs])[0],
            "pretrain_s": pre_s,
            "total_s": common.mean_std([r["total_s"] for r in recs])[0],
            "total_complete": not (ROWS[idx][2] and pre_s is None),
            "seeds": [r["seed"] for r in recs],
            "per_seed": [{"seed": r["seed"], **r["metrics"]} for r in recs],
        }
    return {"n": d.n, "n_clusters": d.n_clusters, "rows": rows}


def markdown(summary, args):
    tick = {True: "✓", False: "✗"}
    datasets = list(summary)
    paper_cols = ["orl"] + (["coil100"] if "coil100" in datasets else [])
    head = ["idx", "ME", "Dec", "Pre"]
    for name in datasets:
        head += [f"{name} ACC (%)", f"{name} NMI (%)", f"{name} time (s)"]
    for name in paper_cols:
        head += [f"paper {name.upper()} {what}" for what in ("ACC", "NMI", "time")]
    lines = ["# Ablation (paper Table: ablation study)", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for idx in args.rows:
        me, dec, pre = ROWS[idx]
        cells = [str(idx), tick[me], tick[dec], tick[pre]]
        for name in datasets:
            r = summary[name]["rows"].get(idx) or summary[name]["rows"].get(str(idx))
            if not r["pretrained"]:
                t = f"{r['total_s']:.1f}"
            elif r["pretrain_s"] is None:
                t = f"{r['total_s']:.1f} (no pretraining time)"
            else:  # total (pretraining + fine-tuning and clustering)
                rest = r["total_s"] - r["pretrain_s"]
                t = f"{r['total_s']:.1f} ({r['pretrain_s']:.1f} + {rest:.1f})"
            cells += [common.pm(r["acc_mean"], r["acc_std"]),
                      common.pm(r["nmi_mean"], r["nmi_std"]), t]
        for name in paper_cols:
            a, n, t = PAPER[name][idx]
            cells += [f"{a:.2f}", f"{n:.2f}", f"{t:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    sizes = ", ".join(f"{k}: {v['n']} images, {v['n_clusters']} clusters"
                      for k, v in summary.items())
    lines += [
        "",
        f"Ours: mean ± std over seeds {' '.join(map(str, args.seeds))} ({sizes}). ME = entropy "
        "regulariser (✗: Frobenius Σ C²); Dec = decoupled (✗: DSC-Net's coupled graph); "
        "Pre = pretrained auto-encoder (✗: he_normal start seeded by the seed).",
        f"Settings (mesc_tf/config.py): decoupled ME rows MESC-Net's, coupled ME rows "
        f"{'Our w/o Net' if args.coupled_settings == 'our_wo_net' else 'MESC-Net'}'s, Frobenius "
        f"rows {'DSC-Net-L2' if args.frobenius_settings == 'dsc' else 'MESC-Net with Σ C²'}'s, "
        "framework switched per row.",
        "Time = pretraining (from the .h5 metadata, pretrained rows only) + fine-tuning + "
        "post-clustering, the way the paper counted; pretrained rows show "
        "total (pretraining + the rest). The paper's times are on its hardware; "
        "compare ratios, not seconds. Paper columns: reference-facts §5.3.",
        "",
    ]
    return "\n".join(lines) + "\n"


def figure(summary, args, path):
    plt = common.pyplot()
    import numpy as np

    datasets = list(summary)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    width = 0.8 / (len(datasets) + 1)
    x = np.arange(len(args.rows))
    for a, metric in enumerate(("acc", "nmi")):
        ax = axes[a]
        for k, name in enumerate(datasets):
            rows = [summary[name]["rows"][i] for i in args.rows]
            ax.bar(x + k * width, [100 * r[f"{metric}_mean"] for r in rows], width,
                   yerr=[100 * (r[f"{metric}_std"] or 0) for r in rows], capsize=2, label=name)
        paper = [PAPER["orl"][i][0 if metric == "acc" else 1] for i in args.rows]
        ax.bar(x + len(datasets) * width, paper, width, color="lightgrey", edgecolor="black",
               hatch="//", label="paper ORL")
        labels = ["".join("✓" if f else "✗" for f in ROWS[i]) for i in args.rows]
        ax.set_xticks(x + width * len(datasets) / 2,
                      [f"{i}\n{l}" for i, l in zip(args.rows, labels)])
        ax.set_xlabel("paper idx  (ME, Dec, Pre)")
        ax.set_ylabel(f"{metric.upper()} (%)")
        ax.set_ylim(0, 105)
        ax.grid(axis="y", alpha=0.3)
        ax.set_title(f"Ablation: {metric.upper()}")
    axes[0].legend(fontsize=8, loc="lower left")
    return common.save_figure(fig, path)


def main(argv=None):
    args = parse_args(argv)
    if any(ROWS[i][2] for i in args.rows):
        common.check_sources(args, args.datasets, no_pretrain_option=False)
    loaded = common.load_all(args)
    results = common.Results(args, common.request_of(
        args, rows=args.rows, frobenius_settings=args.frobenius_settings,
        coupled_settings=args.coupled_settings), figures=["ablation.png"])
    summary = {}
    for name in args.datasets:
        d, records = run_dataset(loaded[name], args, results)
        summary[name] = summarise(d, records)
    md = markdown(summary, args)
    png = figure(summary, args, results.dir / "ablation.png")
    results.finish({"datasets": summary, "paper": PAPER}, md, [png])
    return summary


if __name__ == "__main__":
    common.run_main(main)
