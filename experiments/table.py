"""The paper's main tables (ACC/NMI): four methods on every dataset with data, 5 seeds each.

    python experiments/table.py                                  # every dataset with data
    python experiments/table.py --datasets orl --seeds 0,1,2,3,4
    make table DATASETS=orl

For each dataset and each method (our, our_wo_net, dsc_l1, dsc_l2) the settings are those of
mesc_tf/config.py (config.method_settings), the auto-encoder is pretrained/<dataset>.h5 (or
--weights DATASET=PATH / --tf1-checkpoint DATASET=PREFIX). Fine-tuning from a pretrained
auto-encoder is deterministic, so each (dataset, method) is trained ONCE and the seeds only
seed the spectral clustering of that C. Writes, in --out (default experiments/results):

* main_table.json: {dataset: {method: {"acc": [...], "nmi": [...], "seeds": [...],
  "settings": {...}, "seconds": ..., ...}}}, rewritten (atomically) after every finished cell;
* main_table.md: mean ± std and median per cell beside the paper's reported ACC/NMI, the
  total time and the machine.

Resumable: a finished cell whose settings, seeds (in any order), auto-encoder and data files
(by SHA-256; a cell from before they were recorded has none) are unchanged is kept when the
command is rerun (pass --force to recompute it; --retry-failed recomputes only the cells with a
failed seed, such as one stopped by a full memory). An interrupted --force run goes on with the
same command: the cells it finished are kept (--out's .recomputing-*.json lists them).
--max-epochs N caps every method's fine-tuning steps for SMOKE TESTS only; the cells whose
steps it lowered are flagged in both files.
"""

import datetime
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # also for the worker processes

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout too

from experiments import common  # noqa: E402
from mesc_tf import cli, files, provenance, sources  # noqa: E402
from mesc_tf.config import DATASETS, METHODS  # noqa: E402

DEFAULT_SEEDS = (0, 1, 2, 3, 4)
PAPER_DATASETS = ("orl", "coil20", "coil40", "coil100", "eyaleb", "usps", "mnist")
METHOD_NAMES = {"our": "Our (MESC-Net)", "our_wo_net": "Our w/o Net",
                "dsc_l1": "DSC-Net-L1", "dsc_l2": "DSC-Net-L2"}

# THE PAPER'S REPORTED VALUES (%), not measured here: Peng et al., TCSVT 2021, Tables
# "Comparison of ACC" and "Comparison of NMI" (copied in reference-facts §5.1 and §5.2).
# Column order: ORL, COIL20, COIL40, COIL100, EYaleB, USPS, MNIST.
_PAPER_ACC = {
    "our":        (90.25, 98.13, 89.51, 71.88, 97.45, 81.49, 81.11),
    "our_wo_net": (89.75, 98.19, 89.13, 69.97, 98.03, 83.53, 80.28),
    "dsc_l1":     (85.75, 93.05, 80.03, 60.67, 96.67, 79.65, 73.44),
    "dsc_l2":     (86.00, 94.86, 80.75, 67.71, 97.33, 77.64, 73.61),
}
_PAPER_NMI = {
    "our":        (93.59, 98.17, 95.39, 90.76, 96.61, 86.34, 82.26),
    "our_wo_net": (93.23, 98.19, 95.40, 89.86, 97.27, 85.80, 80.27),
    "dsc_l1":     (90.23, 93.53, 88.52, 85.86, 96.87, 82.95, 74.94),
    "dsc_l2":     (90.34, 94.08, 89.41, 89.08, 97.03, 78.86, 75.15),
}
PAPER_REPORTED = {  # {dataset: {method: {"acc": %, "nmi": %}}}
    d: {m: {"acc": _PAPER_ACC[m][i], "nmi": _PAPER_NMI[m][i]} for m in METHODS}
    for i, d in enumerate(PAPER_DATASETS)
}


def _names(values, allowed, what):
    out = [v.strip().lower() for s in values for v in s.replace(",", " ").split()]
    bad = [v for v in out if v not in allowed]
    if bad:
        raise ValueError(f"unknown {what} {bad[0]!r}; choose from {', '.join(allowed)}")
    if not out:
        raise ValueError(f"no {what} in {' '.join(values)!r}; name at least one of "
                         f"{', '.join(allowed)}")
    return list(dict.fromkeys(out))


def parse_args(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", help="datasets, e.g. orl,coil20 (default: every "
                   "paper dataset whose data and auto-encoder are present)")
    p.add_argument("--methods", nargs="+", default=[",".join(METHODS)],
                   help=f"methods (default {','.join(METHODS)})")
    common.add_seeds_arg(p, DEFAULT_SEEDS)
    p.add_argument("--out", help="output folder (default experiments/results; required with "
                   "--max-epochs, so that a smoke test never writes into the committed table)")
    p.add_argument("--data-dir", help="data folder (default: $MESC_DATA_DIR, then ./data)")
    p.add_argument("--weights", action="append", metavar="DATASET=PATH",
                   help="auto-encoder .h5 for one dataset (default pretrained/<dataset>.h5, "
                   "or $MESC_PRETRAINED_DIR/<dataset>.h5 if that is set)")
    p.add_argument("--tf1-checkpoint", action="append", metavar="DATASET=PREFIX",
                   help="original TF1 checkpoint for one dataset; PREFIX 'original' is the "
                   "authors' checkpoint of that dataset (e.g. eyaleb=original)")
    p.add_argument("--jobs", type=cli.at_least(1), default=1,
                   help="cells of one dataset run in parallel, at most one per method; "
                   "datasets run one after another (default 1)")
    p.add_argument("--threads-per-job", type=cli.at_least(1),
                   help="TF/BLAS threads per worker (default 1 when --jobs > 1)")
    p.add_argument("--max-epochs", type=cli.at_least(1), metavar="N",
                   help="SMOKE TESTS ONLY: cap fine-tuning at N steps (cells are flagged)")
    p.add_argument("--force", action="store_true", help="recompute cells already finished "
                   "(an interrupted --force run: the same command keeps the cells it finished)")
    p.add_argument("--retry-failed", action="store_true", help="recompute the finished cells "
                   "that have failed seeds (main_table.json's failed_seeds), keeping the rest")
    args = p.parse_args(argv)
    from mesc_tf.errors import MescError

    try:
        args.explicit = args.datasets is not None
        args.datasets = _names(args.datasets or PAPER_DATASETS, list(DATASETS), "dataset")
        args.methods = _names(args.methods, METHODS, "method")
        args.seeds = common.seeds_of(args.seeds, DEFAULT_SEEDS)
        args.weights = common.per_dataset(args.weights, "--weights", bare=False)
        args.tf1_checkpoint = common.per_dataset(args.tf1_checkpoint, "--tf1-checkpoint",
                                                 bare=False)
        common.check_one_source(args.weights, args.tf1_checkpoint, DATASETS)
    except (ValueError, MescError) as e:
        p.error(str(e))
    if args.force and args.retry_failed:
        p.error("--force recomputes every cell and --retry-failed only those with failed seeds: "
                "give one of them")
    # Said, not refused: the Makefile names ORL's auto-encoder whichever datasets run.
    for option, paths in (("--weights", args.weights), ("--tf1-checkpoint", args.tf1_checkpoint)):
        for d, path in paths.items():
            if d not in args.datasets:
                which = "--datasets" if args.explicit else "the default --datasets"
                print(f"note: {option} {d}={path} is not used: {which} does not include {d}")
    if args.out is None and args.max_epochs is not None:
        p.error("--max-epochs (a smoke test) needs --out DIR: it would replace cells of the "
                "committed table in experiments/results")
    if args.threads_per_job is None and args.jobs > 1:
        args.threads_per_job = 1
    args.out = Path(args.out) if args.out else common.RESULTS_DIR  # not the current folder's
    return args


def cell_settings(dataset, method, max_epochs=None):
    from mesc_tf.config import method_settings

    s = method_settings(dataset, method)
    return s.replace(epochs=min(s.epochs, max_epochs)) if max_epochs else s


def smoke_cap(dataset, method, max_epochs):
    """--max-epochs where it cuts the cell's fine-tuning short, else None: a cap above the
    method's steps changes nothing, and the cell is a full run's (not flagged as a smoke test)."""
    from mesc_tf.config import method_settings

    capped = max_epochs is not None and max_epochs < method_settings(dataset, method).epochs
    return max_epochs if capped else None


def load_table(path):
    """The JSON object in ``path`` ({} if there is none); a one-line MescError otherwise."""
    from mesc_tf.errors import MescError

    if not path.exists():
        return {}
    if path.is_dir():
        raise MescError(f"{path} is a folder, not a table file; move it away or pass another "
                        "--out DIR")
    try:
        table = json.loads(path.read_text())
        if not isinstance(table, dict):
            raise ValueError("not a JSON object")
    except (OSError, UnicodeDecodeError) as e:
        raise MescError(f"cannot read {path} ({getattr(e, 'strerror', None) or e}); move it "
                        "away or fix it, then rerun") from None
    except ValueError as e:
        raise MescError(f"cannot read {path} ({e}); move it away or fix it, then rerun") from None
    return table


def _cell_problem(cell):
    """What in a main_table.json cell the table cannot use (render_md, cell_is_current)."""
    if not isinstance(cell, dict):
        return "not a JSON object"
    for key in ("acc", "nmi"):
        values = cell.get(key)
        if values is not None and not (isinstance(values, list) and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)):
            return f"{key} is not a list of numbers"
    if not isinstance(cell.get("seconds", 0), (int, float)):
        return "seconds is not a number"
    machine = cell.get("machine")
    if machine and not (isinstance(machine, dict) and {"cpu", "cores"} <= set(machine)):
        return "machine is not an object with cpu and cores"
    for key, kind, what in (("seeds", list, "a list"), ("failed_seeds", dict, "an object"),
                            ("autoencoder", str, "a string")):
        if cell.get(key) is not None and not isinstance(cell[key], kind):
            return f"{key} is not {what}"
    return None


def load_cells(path):
    """main_table.json as {dataset: {method: cell}}: load_table, then each dataset's entry and
    cell checked for the shape the table reads (one MescError naming the first bad one)."""
    from mesc_tf.errors import MescError

    table = load_table(path)
    for d, cells in table.items():
        problems = ([(d, "not a JSON object")] if not isinstance(cells, dict) else
                    [(f"{d}/{m}", p) for m, c in cells.items() if (p := _cell_problem(c))])
        if problems:
            where, problem = problems[0]
            raise MescError(f"cannot use {path} ({where}: {problem}); move the file away or "
                            "fix it, then rerun")
    return table


def make_cell(res, ae, settings, seeds, args, max_epochs=None):
    """A main_table.json cell; ``max_epochs``: the cap that cut its steps (smoke_cap)."""
    from mesc_tf import sweep

    by_seed = {r["seed"]: r for r in res["records"]}
    recs = [by_seed[s] for s in seeds]
    ok = [r for r in recs if r["metrics"]]
    return {
        "acc": [r["metrics"]["acc"] for r in ok],
        "nmi": [r["metrics"]["nmi"] for r in ok],
        "seeds": [r["seed"] for r in ok],
        "settings": sweep.normalized(settings),
        "seconds": res["seconds"],
        "train_s": res["train_s"],
        "post_s": [r["timings"]["post_s"] for r in recs],
        "steps": res["steps_run"],
        "pur": [r["metrics"]["pur"] for r in ok],
        "ari": [r["metrics"]["ari"] for r in ok],
        "nmi_max": [r["metrics"]["nmi_max"] for r in ok],
        "failed_seeds": {str(r["seed"]): r["error"] for r in recs if not r["metrics"]},
        "seeds_requested": list(seeds),
        "autoencoder": ae.describe(),
        "autoencoder_id": ae.ident,
        "n_samples": recs[0]["n_samples"],
        "data_files": recs[0].get("data_files"),  # SHA-256 by file, as the data's SOURCES.md
        "max_epochs": max_epochs,
        "jobs": args.jobs,
        "threads_per_job": args.threads_per_job,
        "machine": provenance.machine(),
        "finished": datetime.datetime.now().isoformat(timespec="seconds"),
        "versions": provenance.versions(),
    }


def cell_is_current(cell, settings, seeds, ae, max_epochs=None, data_files=None):
    """Whether a finished cell answers this request: same settings, seeds (in any order: each
    seed's clustering depends on it alone; the cell keeps its own order), auto-encoder (by
    content: sources.autoencoder_hash) and data files (by content; a cell from before they were
    recorded has none), and a smoke cell (--max-epochs) only for a smoke request with the same
    cap."""
    from mesc_tf import sweep

    asked = cell.get("seeds_requested") if isinstance(cell, dict) else None
    return (isinstance(cell, dict) and cell.get("settings") == sweep.normalized(settings)
            and isinstance(asked, list) and all(type(s) is int for s in asked)
            and sorted(asked) == sorted(seeds)
            and sources.autoencoder_hash(str(cell.get("autoencoder_id"))) ==
            sources.autoencoder_hash(ae.ident)
            and cell.get("max_epochs") == max_epochs
            and cell.get("data_files") in (None, data_files))


def _pct(values):
    """(mean ± std, median) in % of a cell's per-seed values."""
    from mesc_tf import sweep

    st = sweep.stats(values)
    return common.pm(st["mean"], st["std"]), 100 * st["median"]


def render_md(table, invocation) -> str:
    """main_table.md from the JSON (every number from the run) and the paper's values."""
    lines = ["# Main table: ACC and NMI (%), measured here vs. the paper's reported values", ""]
    cells = [(d, m, table[d][m]) for d in [*DATASETS, *sorted(set(table) - set(DATASETS))]
             if d in table for m in METHODS if m in table[d]]
    machines = sorted({f"{c['machine']['cpu']} ({c['machine']['cores']} cores)"
                       for _, _, c in cells if c.get("machine")})
    total = sum(c.get("seconds", 0.0) for _, _, c in cells)
    smoke = [f"{d}/{m}" for d, m, c in cells if c.get("max_epochs")]
    if smoke:
        lines += [f"**SMOKE TEST — NOT RESULTS:** fine-tuning was capped with --max-epochs in "
                  f"{', '.join(smoke)}; these numbers say nothing about the method.", ""]
    lines += [
        f"Machine: {'; '.join(machines) or 'unknown'}. Total time of the {len(cells)} cells: "
        f"{total:.0f} s ({total / 60:.1f} min), the sum of each cell's wall time (data and "
        f"auto-encoder loading, one fine-tuning, clustering for every seed). "
        f"{invocation}",
        "",
        "| dataset | method | ACC mean ± std | ACC median | paper ACC | NMI mean ± std | "
        "NMI median | paper NMI | seeds | steps | time (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d, m, c in cells:
        paper = PAPER_REPORTED.get(d, {}).get(m)
        row = [d, METHOD_NAMES.get(m, m)]
        for metric in ("acc", "nmi"):
            if c.get(metric):
                ms, med = _pct(c[metric])
                mark = ""
                if paper is not None:
                    mark = " ✓" if round(med, 2) >= paper[metric] else " ✗"
                row += [ms, f"{med:.2f}{mark}"]
            else:
                row += ["–", "–"]
            row.append(f"{paper[metric]:.2f}" if paper else "–")
        failed = len(c.get("failed_seeds") or {})
        seeds = ",".join(str(s) for s in c.get("seeds", []))
        row += [seeds + (f" ({failed} failed)" if failed else ""),
                f"{c.get('steps', '')}" + (" (smoke)" if c.get("max_epochs") else ""),
                f"{c.get('seconds', 0):.0f}"]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "Notes:",
        "* **paper ACC / paper NMI** are the values the paper reports (Peng et al., TCSVT 2021, "
        "Tables 'Comparison of ACC' and 'Comparison of NMI'); they were not measured here. "
        "✓ / ✗: the measured median is / is not ≥ the paper's value.",
        "* **Seeds**: the auto-encoder is pretrained and C starts at a constant, so fine-tuning "
        "is deterministic: each (dataset, method) was trained once, and the seeds only change "
        "the spectral clustering of that C (sklearn SpectralClustering's random_state). The "
        "spread over seeds is therefore the clustering's, not the training's.",
        "* mean ± std: sample standard deviation (ddof=1) over the seeds; the median over the "
        "seeds is the headline number. A seed whose clustering failed is listed as failed and "
        "left out of the statistics (its error is in main_table.json).",
        "* NMI: sklearn's arithmetic normalisation (mesc_tf.metrics.evaluate); the 'max' "
        "normalisation the paper names is in main_table.json as nmi_max.",
        "* Settings: mesc_tf/config.py (config.method_settings), stored per cell in "
        "main_table.json with the auto-encoder used, the seeds, the timings and the versions.",
    ]
    others: dict = {}  # (dataset, auto-encoder) → methods, for the cells not from pretrained/
    for d, m, c in cells:
        if not str(c.get("autoencoder", "pretrained")).startswith("pretrained"):
            others.setdefault((d, c["autoencoder"]), []).append(METHOD_NAMES.get(m, m))
    if others:
        lines.append("* Auto-encoder: the default pretrained/<dataset>.h5 (main_table.json "
                     "names each cell's file), except "
                     + "; ".join(f"{d} ({', '.join(ms)}): {_short(ae)}"
                                 for (d, ae), ms in sorted(others.items())) + ".")
    return "\n".join([*lines, ""])


def _short(describe):
    """An auto-encoder description with the path relative to the checkout where it can be."""
    kind, _, path = describe.rpartition(" ")
    return f"{kind} {cli.display_path(path, Path(__file__).resolve().parents[1])}".strip()


def main(argv=None):
    args = parse_args(argv)
    from mesc_tf import data, sweep
    from mesc_tf.errors import MescError

    start = time.perf_counter()
    json_path = args.out / "main_table.json"
    table = load_cells(json_path)  # before any training
    data_dir = data.find_data_dir(args.data_dir)
    cont = common.Continuation(args.out, args.force, {  # an interrupted --force goes on
        k: getattr(args, k) for k in ("datasets", "methods", "seeds", "max_epochs", "weights",
                                      "tf1_checkpoint")})
    todo, kept, skipped = _plan(args, table, data_dir, cont)
    if not todo and not kept:  # nothing to run, and nothing to record: leave the table be
        raise MescError(f"no dataset could be run, all {len(skipped)} skipped (the first: "
                        f"{skipped[0]}); set --data-dir or MESC_DATA_DIR, or name datasets "
                        "that can run with --datasets")
    common.check_writable_dir(args.out)  # before any cell runs; made by the first cell
    for line in skipped:
        print(f"skipped {line}")
    if cont.resumed:
        print(cont.describe("cell(s)"))
    print(f"{len(todo)} cells to run, {kept} kept from {json_path}; seeds {args.seeds}, "
          f"--jobs {args.jobs}" + (f", SMOKE --max-epochs {args.max_epochs}" if args.max_epochs
                                   else ""))

    ran = {}  # (dataset, method) -> cell, what this invocation computed
    done = 0
    for res, (d, m, ae, s, _) in _run(todo, args, data_dir):
        c = ran[d, m] = table.setdefault(d, {})[m] = make_cell(
            res, ae, s, args.seeds, args, smoke_cap(d, m, args.max_epochs))
        done += 1
        acc = f"{100 * sweep.stats(c['acc'])['median']:.2f}" if c["acc"] else "-"
        nmi = f"{100 * sweep.stats(c['nmi'])['median']:.2f}" if c["nmi"] else "-"
        print(f"[{done}/{len(todo)}] {d} {m}: median ACC {acc} NMI {nmi} over {len(c['acc'])} "
              f"seeds, {c['seconds']:.0f} s", flush=True)
        _write(args.out, ran, f"Last invocation: {done} of {len(todo)} cells run so far, "
               f"{time.perf_counter() - start:.0f} s.")
        cont.note(f"{d}/{m}")
    wall = time.perf_counter() - start
    _write(args.out, ran, f"Last invocation: {len(todo)} cells run and {kept} kept from an "
           f"earlier run, {wall:.0f} s wall time with --jobs {args.jobs}." +
           (f" Skipped (no data or auto-encoder): {'; '.join(skipped)}." if skipped else ""))
    cont.done()
    print(f"{json_path}\n{args.out / 'main_table.md'}\n{wall:.0f} s")
    return table


def _plan(args, table, data_dir, cont):
    """(cells to run as (dataset, method, auto-encoder, settings, sweep.Group), the number kept
    from ``table`` (finished for this request; with --force, by the interrupted --force run
    ``cont`` continues), the datasets skipped: no data or auto-encoder, an error where
    --datasets names them)."""
    from mesc_tf import data, sweep
    from mesc_tf.config import get_config
    from mesc_tf.errors import MescError

    todo, kept, skipped = [], 0, []
    for d in args.datasets:
        try:
            data_files = data.load_dataset(d, data_dir).file_hashes
            ae = sources.resolve_autoencoder(d, args.weights.get(d), args.tf1_checkpoint.get(d),
                                             per_dataset=True, arch=get_config(d).arch,
                                             no_pretrain_option=False)
        except MescError as e:
            if args.explicit:
                raise MescError(f"{d}: {e}") from None
            skipped.append(f"{d} ({e})")
            continue
        for m in args.methods:
            cap = smoke_cap(d, m, args.max_epochs)
            s = cell_settings(d, m, cap)
            cell = table.get(d, {}).get(m)
            retry = args.retry_failed and isinstance(cell, dict) and cell.get("failed_seeds")
            if not retry and cell_is_current(cell, s, args.seeds, ae, cap, data_files) \
                    and cont.keeps(f"{d}/{m}"):
                kept += 1
                continue
            trials = tuple(sweep.Trial(s, seed) for seed in args.seeds)
            todo.append((d, m, ae, s, sweep.Group(s, trials, 0, tag=m)))
    return todo, kept, skipped


def _write(out, ran, invocation):
    """Merge the cells ``ran`` ({(dataset, method): cell}) into out/main_table.json as it is
    now, under a lock, and rewrite main_table.md: a `make table DATASETS=usps` run beside a
    `make table DATASETS=orl` keeps the other's cells."""
    from mesc_tf.files import atomic_write_text

    json_path = out / "main_table.json"
    out.mkdir(parents=True, exist_ok=True)
    with files.locked(out / ".main_table.lock"):
        merged = load_cells(json_path)
        for (d, m), cell in ran.items():
            merged.setdefault(d, {})[m] = cell
        files.write_json(json_path, merged)
        atomic_write_text(out / "main_table.md", render_md(merged, invocation))


def _run(todo, args, data_dir):
    """Yield (result, cell) as cells finish, in --jobs worker processes, dataset by dataset
    (so that a worker loads each dataset once)."""
    from mesc_tf import sweep

    for d in dict.fromkeys(c[0] for c in todo):
        cells = {c[1]: c for c in todo if c[0] == d}
        groups = [c[4] for c in cells.values()]
        sweep.memory_check(d, min(args.jobs, len(groups)), 1)
        for res in sweep.run_groups(groups, jobs=args.jobs, threads=args.threads_per_job,
                                    dataset=d, data_dir=data_dir, ae=next(iter(cells.values()))[2]):
            yield res, cells[res["tag"]]


if __name__ == "__main__":
    cli.main_guard(main, interrupted=lambda: "interrupted; finished cells are kept: rerun "
                   "the same command to compute the others")
