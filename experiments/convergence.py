"""Convergence of MESC-Net (the paper's figure "convergence curve"): the loss per fine-tuning
step, total and its three terms, on ORL, COIL20, EYaleB (and COIL100 when its data exists).

    python experiments/convergence.py                   # orl coil20 eyaleb coil100
    python experiments/convergence.py --datasets orl --epochs 300

One fine-tuning per dataset with its MESC-Net settings (mesc_tf/config.py; ``--epochs`` for a
longer curve) from the pretrained auto-encoder; the curves are the training history Keras
records at every step (the values before that step's update, like the original's fetches):
total = recon + reg1·E + reg2·S with recon = Σ(x_r − x)², E = ½ Σ C ln C, S = ½ Σ (Z − CZ)².
The weighted terms are drawn, so that they add up to the total. A dataset whose data files are
missing is skipped with a note (COIL100.mat is not in the shared data). The clustering of the
final C is scored too (ACC/NMI over the seeds).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments import common  # noqa: E402
from mesc_tf.data import MissingDataError  # noqa: E402

NAME = "convergence"
TERMS = (("loss", "total loss"), ("recon", r"reconstruction $\Sigma(x_r-x)^2$"),
         ("reg", r"$\mathrm{reg1}\cdot E$ (entropy)"),
         ("selfexp", r"$\mathrm{reg2}\cdot S$ (self-expr.)"))


def titles(settings) -> dict:
    """TERMS' titles for a run's settings: ``--set`` may weight the reconstruction
    (recon_scale) or change the regulariser, which the default titles would misname."""
    out = dict(TERMS)
    if settings["recon_scale"] != 1:
        out["recon"] = rf"reconstruction ${settings['recon_scale']:g}\cdot\Sigma(x_r-x)^2$"
    if settings["regularizer"] != "entropy":
        out["reg"] = rf"$\mathrm{{reg1}}\cdot R(C)$ ({settings['regularizer']})"
    return out


def parse_args(argv=None):
    p = common.parser(NAME, __doc__, datasets=("orl", "coil20", "eyaleb", "coil100"))
    args = common.finish_args(p, p.parse_args(argv))
    for name in args.datasets:
        steps = common.configure(common.preset(name, "our"), args, "our").epochs
        if steps < 1:
            p.error(f"{name}: {steps} fine-tuning steps make no curve; give --epochs (or --set "
                    "epochs=) 1 or more")
    return args


def weighted(history, settings):
    """Per-step curves of the total and of the weighted terms."""
    return {"loss": list(map(float, history["loss"])),
            "recon": list(map(float, history["recon"])),
            "reg": [settings["reg1"] * float(v) for v in history["reg"]],
            "selfexp": [settings["reg2"] * float(v) for v in history["selfexp"]]}


def run_dataset(d, args, results):
    name = d.name
    print(f"{name}: {d.n} images, {d.n_clusters} clusters")
    src = common.ae_source(args, name)
    settings = common.configure(common.preset(name, "our"), args, "our")
    key = name
    spec = {**common.data_spec(d), "settings": settings.to_dict(),
            **common.ae_spec(src), "seeds": args.seeds}
    rec = results.get(key, spec)
    if rec is None:
        t = common.train(d, settings, src, args, args.seeds[0])
        rec = results.put(key, spec, {
            "finetune_s": t.finetune_s,
            "history": {k: list(map(float, v)) for k, v in t.history.items()},
            "clusterings": common.cluster_seeds(t.coef, d, settings, args.seeds)})
    res = rec["result"]
    curves = weighted(res["history"], rec["spec"]["settings"])
    scores = common.acc_nmi(res["clusterings"])
    loss = curves["loss"]
    out = {"n": d.n, "n_clusters": d.n_clusters, "settings": rec["spec"]["settings"],
           "autoencoder": rec["spec"]["autoencoder"],
           "steps": len(loss), "finetune_s": res["finetune_s"], "curves": curves,
           "first_loss": loss[0] if loss else None, "last_loss": loss[-1] if loss else None,
           "rises_at_start": bool(len(loss) > 1 and max(loss[1:6]) > loss[0]),
           "steps_to_within_1pct": steps_to_within(loss, 0.01),
           **scores}
    print(f"  {out['steps']} steps, loss {out['first_loss']} -> {out['last_loss']}, "
          f"ACC {scores['acc_mean']}")
    return out


def steps_to_within(loss, tol):
    """First step after which the loss stays within tol·|range| of its final value."""
    if not loss:
        return None
    final, span = loss[-1], (max(loss) - min(loss)) or 1.0
    for t in range(len(loss)):
        if all(abs(v - final) <= tol * span for v in loss[t:]):
            return t + 1
    return len(loss)


def figure(summary, path):
    plt = common.pyplot()
    names = list(summary)
    fig, axes = plt.subplots(len(names), len(TERMS), figsize=(3.6 * len(TERMS), 2.6 * len(names)),
                             squeeze=False)
    for r, name in enumerate(names):
        s = summary[name]
        steps = range(1, s["steps"] + 1)
        named = titles(s["settings"])
        for c, (term, _) in enumerate(TERMS):
            ax = axes[r][c]
            ax.plot(steps, s["curves"][term], color=f"C{c}", linewidth=1.4)
            ax.grid(alpha=0.3)
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))
            if r == 0 or named != titles(summary[names[r - 1]]["settings"]):
                ax.set_title(named[term], fontsize=10)
            if r == len(names) - 1:
                ax.set_xlabel("fine-tuning step")
            if c == 0:
                ax.set_ylabel(f"{name}\n(reg1 {s['settings']['reg1']:g}, "
                              f"reg2 {s['settings']['reg2']:g})")
    fig.suptitle("MESC-Net convergence: loss per full-batch step", fontsize=11)
    fig.tight_layout()
    return common.save_figure(fig, path)


def markdown(summary, skipped, seeds):
    lines = ["# Convergence (paper figure: convergence curves)", "",
             "| dataset | images | auto-encoder | steps | first loss | last loss | "
             "above the first loss in steps 2-6 | steps until within 1% of the loss's range "
             "of the final loss | "
             "ACC (%) | NMI (%) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in summary.items():
        lines.append(f"| {name} | {s['n']} | {common.display_label(s['autoencoder'])} | "
                     f"{s['steps']} | "
                     f"{s['first_loss']:.6g} | "
                     f"{s['last_loss']:.6g} | {'yes' if s['rises_at_start'] else 'no'} | "
                     f"{s['steps_to_within_1pct']} | {common.pm(s['acc_mean'], s['acc_std'])} | "
                     f"{common.pm(s['nmi_mean'], s['nmi_std'])} |")
    for name in skipped:
        lines.append(f"| {name} | skipped: data not found | | | | | | | | |")
    lines += ["", "Loss = Σ(x_r − x)² + reg1·½ΣC ln C + reg2·½Σ(Z − CZ)² (code constants, "
              "mesc_tf/config.py MESC-Net settings); one value per full-batch step from the "
              "Keras history. Paper: converges within about 100 iterations, and on ORL and "
              "EYaleB the objective rises during the first iterations. ACC/NMI: the final C "
              f"clustered with seeds {' '.join(map(str, seeds))}, mean ± std (ddof 1)."
              + ("" if all(titles(s["settings"]) == dict(TERMS) for s in summary.values()) else
                 " Some rows (--set) weight the reconstruction or use another regulariser: see "
                 "their settings in convergence.json and the figure's titles."), "",
              "![convergence](convergence.png)", ""]
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    results = common.Results(args, common.request_of(args), figures=["convergence.png"])
    loaded, skipped = {}, {}
    for name in args.datasets:
        try:
            loaded[name] = common.load_data(name, args)
        except MissingDataError as e:
            print(f"{name}: skipped ({e})")
            skipped[name] = str(e)
    if not loaded:
        raise common.MescError("no dataset could be loaded (all skipped: data not found); "
                               "set --data-dir or MESC_DATA_DIR")
    common.check_sources(args, list(loaded))  # every auto-encoder before any training
    summary = {name: run_dataset(d, args, results) for name, d in loaded.items()}
    md = markdown(summary, skipped, args.seeds)
    png = figure(summary, results.dir / "convergence.png")
    results.finish({"datasets": summary, "skipped": skipped}, md, [png])
    return summary


if __name__ == "__main__":
    common.run_main(main)
