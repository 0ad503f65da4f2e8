"""Our pretrained auto-encoders against the authors' original checkpoints, same settings.

    python experiments/compare_autoencoders.py --datasets orl coil20 toy
    make compare-ae DATASETS="orl coil20 toy"

For each dataset: the relative reconstruction error of pretrained/<dataset>.h5 and of the
original TF1 checkpoint on the same data, then the main-table methods (default: our) fine-tuned
from each with the settings of mesc_tf/config.py and clustered with every seed (through
experiments/table.py, so the cells are resumable and computed as the main table's; ORL's
DSC-Net labels move with BLAS thread counts, so cells run with other --jobs can differ).
Writes
experiments/results/autoencoders/{autoencoders.json, autoencoders.md} and the two tables it
ran in ours/ and original/ beside them. Runs on other datasets or methods merge into these files,
one after another or side by side.

A second table judges the codes themselves, before any fine-tuning: their scale (mean |Z|) and
how well they cluster by closed-form self-expression (LSR, :func:`closed_form_coef`) followed by
the dataset's post-clustering. Equal LSR scores with unequal fine-tuned scores point at the
fine-tuning dynamics rather than at what the encoder learnt.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout too
sys.path.insert(0, str(Path(__file__).resolve().parent))  # experiments/table.py

from experiments import common  # noqa: E402
from mesc_tf import cli, files, provenance, sources  # noqa: E402
from mesc_tf.config import DATASETS, METHODS, POST_FIELDS  # noqa: E402
from mesc_tf.weights import ORIGINAL_CHECKPOINTS, default_tf1_dir  # noqa: E402


def parse_args(argv=None):
    from table import DEFAULT_SEEDS  # the main table's cells are this script's

    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", type=str.lower, choices=list(DATASETS),
                   default=["orl", "coil20", "toy"], metavar="NAME",
                   help="datasets (default: orl coil20 toy)")
    p.add_argument("--methods", nargs="+", choices=list(METHODS), default=["our"],
                   metavar="M", help=f"methods (default: our; any of {', '.join(METHODS)})")
    common.add_seeds_arg(p, DEFAULT_SEEDS)
    p.add_argument("--tf1-dir", default=str(default_tf1_dir()),
                   help="folder of the original checkpoints (default: $MESC_TF1_DIR, then "
                        "../shared/pretrained-tf1)")
    p.add_argument("--data-dir", help="data folder (default: $MESC_DATA_DIR, then ./data)")
    p.add_argument("--out", help="output folder (default experiments/results/autoencoders; "
                   "required with --max-epochs, so that a smoke test never writes there)")
    p.add_argument("--force", action="store_true", help="recompute cells and diagnostics "
                   "already finished (an interrupted --force run: the same command keeps what "
                   "it finished)")
    p.add_argument("--jobs", type=cli.at_least(1), default=1,
                   help="parallel cells, as table.py's --jobs (default 1); more than 1 runs each "
                        "with one BLAS thread, which can move ORL's labels "
                        "(experiments/results/README.md, Reproducibility)")
    p.add_argument("--max-epochs", type=cli.at_least(1), metavar="N",
                   help="SMOKE TESTS ONLY: cap fine-tuning at N steps (as table.py)")
    args = p.parse_args(argv)
    if args.out is None and args.max_epochs is not None:
        p.error("--max-epochs (a smoke test) needs --out DIR: it would replace rows of the "
                "committed comparison in experiments/results/autoencoders")
    args.seeds = common.seeds_of(args.seeds, DEFAULT_SEEDS)
    args.out = Path(args.out) if args.out else common.RESULTS_DIR / "autoencoders"
    args.tf1_dir = Path(args.tf1_dir)
    for d in args.datasets:
        ckpt = args.tf1_dir / ORIGINAL_CHECKPOINTS[d]
        if not Path(str(ckpt) + ".index").is_file():
            p.error(f"no original checkpoint for {d} at {ckpt}; pass --tf1-dir DIR (the folder "
                    "holding dscnet/ and mesc/)")
    return args


# LSR's ridge weights, relative to the mean squared norm of a code (‖Z‖²_F / n). Its scores
# depend on λ (Toy: ACC 0.48 at 0.01, 1.0 at 0.1), so the table gives all three.
LSR_LAMBDAS = (0.01, 0.1, 1.0)


def closed_form_coef(z, rel_lambda):
    """C = argmin ‖Z − CZ‖² + λ‖C‖² = (ZZᵀ + λI)⁻¹ZZᵀ with a zero diagonal (rows of ``z`` are
    samples; LSR, Lu et al., ECCV 2012), λ = rel_lambda · ‖Z‖²_F / n.

    Computed from the thin SVD Z = USVᵀ as U·diag(s²/(s² + λ))·Uᵀ: no n×n solve.
    """
    import numpy as np

    z = np.asarray(z, np.float64).reshape(len(z), -1)
    u, s, _ = np.linalg.svd(z, full_matrices=False)
    lam = rel_lambda * float(np.sum(s ** 2)) / len(z)
    coef = (u * (s ** 2 / (s ** 2 + lam))) @ u.T
    np.fill_diagonal(coef, 0.0)
    return coef.astype(np.float32)


def autoencoder_diagnostics(dataset, data_dir, tf1_prefix, seeds, done=None, save=None):
    """Per auto-encoder: relative reconstruction error, mean |Z| and the LSR clustering scores.
    ``done``: what an interrupted call had finished (its ``save``d dict), not computed again;
    ``save(out)`` is called after each λ's clusterings (MNIST's take minutes each)."""
    import numpy as np

    from mesc_tf import data, pipeline
    from mesc_tf.config import get_config
    from mesc_tf.metrics import evaluate
    from mesc_tf.measures import latent_codes, relative_error
    from mesc_tf.weights import load_autoencoder, load_tf1_checkpoint

    d = data.load_dataset(dataset, data_dir)
    cfg = get_config(dataset)
    s = cfg.mesc  # the post-clustering settings of the "our" row
    out = dict(done or {})
    for name, ae in (("ours", load_autoencoder(sources.pretrained_path(dataset), cfg.arch)[0]),
                     ("original", load_tf1_checkpoint(tf1_prefix, cfg.arch))):
        if len(out.get(name, {}).get("lsr", {}).get("acc", ())) == len(LSR_LAMBDAS):
            continue
        z = latent_codes(ae, d.x)
        row = out[name] = out.get(name) or {
            "relative_error": relative_error(ae, d.x), "mean_abs_code": float(np.abs(z).mean()),
            "lsr": {"rel_lambda": list(LSR_LAMBDAS), "seeds": list(seeds), "acc": [], "nmi": []}}
        lsr = row["lsr"]
        for lam in LSR_LAMBDAS[len(lsr["acc"]):]:
            coef = closed_form_coef(z, lam)
            scores = [evaluate(d.y, pipeline.cluster(coef, d.n_clusters, s, seed=seed)[0])
                      for seed in seeds]
            lsr["acc"].append([m["acc"] for m in scores])
            lsr["nmi"].append([m["nmi"] for m in scores])
            if save is not None:
                save(out)
    return out


def _read_partial(path, key):
    """The diagnostics a stopped run saved at ``path``, if made for ``key`` (else None)."""
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # none, or cut off (cannot happen with atomic writes): compute them
    if isinstance(saved, dict) and saved.get("diagnostics_key") == key:
        return saved.get("done")
    return None


def diagnostics_key(dataset, tf1_prefix, seeds, data_files=None):
    """What autoencoder_diagnostics' figures depend on: both auto-encoders' contents, the
    data files (data.Dataset.file_hashes), the seeds and the post-clustering settings they are
    clustered with."""
    from mesc_tf.config import get_config

    s = get_config(dataset).mesc
    return {"ours": sources.resolve_autoencoder(dataset).sha256,
            "original": sources.resolve_autoencoder(dataset, tf1_checkpoint=tf1_prefix).sha256,
            "data_files": data_files, "seeds": list(seeds), "lsr_lambdas": list(LSR_LAMBDAS),
            "post": {k: getattr(s, k) for k in POST_FIELDS}}


def render_md(summary) -> str:
    import numpy as np

    smoke = [f"{d}/{m}" for d, s in summary.items() for m, r in s["methods"].items()
             if r["ours"].get("max_epochs") or r["original"].get("max_epochs")]
    lines = ["# Our auto-encoders vs the original checkpoints", ""]
    if smoke:
        lines += [f"**SMOKE TEST ROWS (fine-tuning capped by --max-epochs): {', '.join(smoke)}; "
                  "these numbers say nothing about the auto-encoders.**", ""]
    lines += ["Same data, same fine-tuning settings (mesc_tf/config.py), same seeds within a row "
             "(its seeds column: those that scored, each side's where they differ), same code; "
             "the two sides of a row may come from different "
             "runs, with other --jobs (hence BLAS threads) or machines, which move the labels "
             "where the spectral step is ill-posed (ORL's DSC-Net cells, "
             "experiments/results/README.md). ACC/NMI in %: "
             "median (mean ± std over the seeds). Rows merge across runs of `python "
             "experiments/compare_autoencoders.py --datasets D ... [--methods M ...]` (default "
             "method: our); each run adds or replaces the rows of its datasets and methods. "
             f"Datasets here: {' '.join(summary)}.", "",
             "| dataset | method | seeds | recon. error ours | original | ratio | ACC ours "
             "| ACC original | NMI ours | NMI original | ours ≥ original |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]

    def cell(v):  # median (mean ± std; one seed: no spread); '–' where every seed failed
        return f"{100 * np.median(v):.2f} ({common.pm(*common.mean_std(v))})" if v else "–"

    for d, s in summary.items():
        e = s["relative_error"]
        for m, r in s["methods"].items():
            scored = all(r[k][x] for k in ("ours", "original") for x in ("acc", "nmi"))
            ok = scored and (np.median(r["ours"]["acc"]) >= np.median(r["original"]["acc"])
                             and np.median(r["ours"]["nmi"]) >= np.median(r["original"]["nmi"]))
            # Each side's seeds that scored: one list where they agree, both where a seed
            # failed on one side only (its medians are then over other seeds).
            ours, orig = (",".join(map(str, r[k]["seeds"])) for k in ("ours", "original"))
            seeds = (ours if ours == orig else f"ours {ours or '–'}; original {orig or '–'}") + (
                " (smoke)" if r["ours"].get("max_epochs") or r["original"].get("max_epochs")
                else "")
            lines.append(f"| {d} | {m} | {seeds} | {e['ours']:.4f} | {e['original']:.4f} | "
                         f"{e['ours'] / e['original']:.2f} | {cell(r['ours']['acc'])} | "
                         f"{cell(r['original']['acc'])} | {cell(r['ours']['nmi'])} | "
                         f"{cell(r['original']['nmi'])} | {'yes' if ok else 'no'} |")
    lines += ["", "Fine-tuning from a pretrained auto-encoder is deterministic: the seeds vary "
              "only the spectral clustering, so the spread is the clustering's.", ""]
    coded = {d: s["codes"] for d, s in summary.items() if "codes" in s}
    if coded:
        lams = " / ".join(f"{v:g}" for v in next(iter(coded.values()))["ours"]["lsr"]["rel_lambda"])
        lines += ["## The codes before fine-tuning", "",
                  "Mean |Z| over the latent codes of the whole dataset, and ACC/NMI (%) of the "
                  "codes clustered without fine-tuning: C = (ZZᵀ + λI)⁻¹ZZᵀ with a zero diagonal "
                  f"(LSR) for λ = {lams} times ‖Z‖²_F / n, then the post-clustering settings of "
                  "the dataset's our row; medians over the same seeds.", "",
                  f"| dataset | mean abs(Z) ours | original | LSR ACC ours (λ {lams}) | original "
                  "| LSR NMI ours | original |", "|---|---|---|---|---|---|---|"]

        def medians(v):
            return " / ".join(f"{100 * np.median(x):.2f}" for x in v)

        for d, c in coded.items():
            o, g = c["ours"], c["original"]
            lines.append(f"| {d} | {o['mean_abs_code']:.4g} | {g['mean_abs_code']:.4g} | "
                         f"{medians(o['lsr']['acc'])} | {medians(g['lsr']['acc'])} | "
                         f"{medians(o['lsr']['nmi'])} | {medians(g['lsr']['nmi'])} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    import table

    from mesc_tf import data
    from mesc_tf.files import atomic_write_text

    data_dir = data.find_data_dir(args.data_dir)
    json_path = args.out / "autoencoders.json"
    # Read before the long runs, so that an unreadable file stops us before they start.
    table.load_table(json_path)
    shared = ["--datasets", *args.datasets, "--methods", *args.methods,
              "--seeds", ",".join(map(str, args.seeds)),
              "--jobs", str(args.jobs), "--data-dir", str(data_dir),
              *(["--max-epochs", str(args.max_epochs)] if args.max_epochs is not None else [])]
    # An interrupted --force goes on with the same command: a table it finished, and a row it
    # wrote, are not recomputed again (each table keeps its own finished cells too).
    cont = common.Continuation(args.out, args.force, {
        "datasets": args.datasets, "methods": args.methods, "seeds": args.seeds,
        "max_epochs": args.max_epochs, "tf1_dir": str(args.tf1_dir)})
    if cont.resumed:
        print(cont.describe("table(s) and row(s)"))
    elif cont.active:  # a fresh --force: no diagnostics kept from before
        for partial in args.out.glob(".diagnostics-*.json"):
            partial.unlink()

    def run_table(name, extra=()):
        force = ["--force"] if not cont.keeps(name) else []
        cells = table.main([*shared, *force, "--out", str(args.out / name), *extra])
        if force:
            cont.note(name)
        return cells

    ours = run_table("ours")
    original = run_table("original", [
        a for d in args.datasets
        for a in ("--tf1-checkpoint", f"{d}={args.tf1_dir / ORIGINAL_CHECKPOINTS[d]}")])
    command = provenance.command("experiments/compare_autoencoders.py", argv)
    keep = ("acc", "nmi", "seeds", "failed_seeds", "max_epochs", "settings",
            "autoencoder_id", "data_files", "jobs", "threads_per_job", "machine", "finished")
    for d in args.datasets:
        tf1_prefix = args.tf1_dir / ORIGINAL_CHECKPOINTS[d]
        key = diagnostics_key(d, tf1_prefix, args.seeds,
                              data.load_dataset(d, data_dir).file_hashes)
        kept = table.load_table(json_path).get(d, {})
        partial = args.out / f".diagnostics-{d}.json"  # what a stopped run had finished
        if kept.get("diagnostics_key") == key and cont.keeps(d):  # same files, seeds, settings
            errors, diag = kept["relative_error"], kept["codes"]
        else:
            done = _read_partial(partial, key)
            diag = autoencoder_diagnostics(
                d, data_dir, tf1_prefix, args.seeds, done,
                save=lambda out, path=partial, key=key: files.write_json(
                    path, {"diagnostics_key": key, "done": out}))
            errors = {k: v.pop("relative_error") for k, v in diag.items()}
        # Each dataset's row is kept as soon as it exists, merged into the file as it is now
        # under a lock (as table.py does): datasets, and methods compared by earlier runs or by
        # a run beside this one, keep their rows.
        with files.locked(args.out / ".autoencoders.lock"):
            summary = table.load_table(json_path)
            methods = summary.get(d, {}).get("methods", {})
            methods.update({m: {"ours": {k: ours[d][m].get(k) for k in keep},
                                "original": {k: original[d][m].get(k) for k in keep}}
                            for m in args.methods})
            summary[d] = {"relative_error": errors, "codes": diag, "diagnostics_key": key,
                          "methods": methods, "command": command,
                          "versions": provenance.versions()}
            files.write_json(json_path, summary)
            atomic_write_text(args.out / "autoencoders.md", render_md(summary))
        partial.unlink(missing_ok=True)
        cont.note(d)
    cont.done()
    print(f"{args.out / 'autoencoders.md'}")
    return summary


# Rows reach autoencoders.json only after both tables ran; the tables' finished cells are kept,
# and so are a dataset's diagnostics finished so far (.diagnostics-<dataset>.json).
KEPT = "finished cells and diagnostics are kept under --out"

if __name__ == "__main__":
    common.run_main(main, kept=KEPT)
