"""Time the fast post-clustering's two spectral routes for n > 4096 on a saved C (issue 6).

    python benchmarks/spectral_routes.py --coef /tmp/coef13/mnist.npy --clusters 10 \\
        --thr 0.03 --settings 24:8,32:16

Above ``postcluster.fast.SI_LU_MAX_N`` the fast route's spectral step is a Cholesky shift-invert,
after Lanczos on D^-½·A·D^-½ (one memory-bound product per step, nothing factorised) if
``LANCZOS_MAX_PRODUCTS`` > 0 and it converges within that many products. For each d:power this
builds the affinity once, then times the spectral step by Lanczos with no product cap and by
the Cholesky route (Lanczos skipped), and checks that the two give the same labels. The
Cholesky route's seconds divided by the seconds per Lanczos product is the break-even: Lanczos
pays only where it needs fewer products than that, and a capped attempt that fails costs the
cap on top of the Cholesky route.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mesc_tf import cli  # noqa: E402
from mesc_tf.postcluster import checks as pc_checks  # noqa: E402
from mesc_tf.postcluster import fast as pc_fast  # noqa: E402
from mesc_tf.postcluster import thrc as pc_thrc  # noqa: E402
from mesc_tf.errors import MescError  # noqa: E402
from mesc_tf.files import atomic_write_text  # noqa: E402

# Folders made for --json, removed if the run then fails (cli.main_guard).
CLEANUP = []


def add_coef_arguments(p):
    """--coef, --clusters, --thr and --variant: the saved C and how to threshold it (this
    script's and svd_solvers.py's)."""
    p.add_argument("--coef", required=True, help="n×n C saved as .npy (run.py --save-coef)")
    p.add_argument("--clusters", type=int, required=True, help="number of clusters K")
    p.add_argument("--thr", type=float, required=True, help="thrC ratio ρ")
    p.add_argument("--variant", default="mesc", choices=("mesc", "dsc", "dsc_diag"))


def parse_args(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_coef_arguments(p)
    p.add_argument("--settings", default="24:8,32:16", help="d:power pairs (default 24:8,32:16)")
    p.add_argument("--seed", type=cli.seed_arg, default=0, help="seed of the spectral step")
    p.add_argument("--json", help="also write the figures here")
    p.add_argument("--force", action="store_true", help="overwrite an existing --json file")
    args = p.parse_args(argv)
    try:
        args.settings = [(int(d), float(pw)) for d, pw in
                         (s.split(":") for s in args.settings.split(","))]
    except ValueError:
        p.error("--settings: write d:power pairs, e.g. 24:8,32:16")
    if not all(d >= 1 and pw > 0 for d, pw in args.settings):
        p.error("--settings: d must be >= 1 and the power > 0, e.g. 24:8,32:16")
    check_coef_path(p, args.coef)
    return args


def check_coef_path(parser, path):
    """--coef names a file (parser.error otherwise; the array is read by load_coef)."""
    if not Path(path).is_file():
        why = "is a folder" if Path(path).is_dir() else "not found"
        parser.error(f"--coef: {path} {why}; give a .npy file saved by experiments/run.py "
                     "--save-coef")


def load_coef(path):
    """The square C saved at --coef, or a MescError naming the file."""
    try:
        C = np.load(path, allow_pickle=False)
    except (ValueError, EOFError):  # EOFError: an empty file
        C = None
    if not isinstance(C, np.ndarray):  # an .npz archive is not one array
        raise MescError(f"--coef: {path} is not a .npy array; save C with experiments/run.py "
                        "--save-coef")
    return pc_checks.check_square(C, f"--coef {path}")


def time_route(A, K, seed, lanczos):
    """(seconds, labels, info, seconds in Lanczos itself) of the spectral step on a copy of the
    affinity A."""
    real = pc_fast._lanczos_smallest
    saved_cap = pc_fast.LANCZOS_MAX_PRODUCTS
    pc_fast.LANCZOS_MAX_PRODUCTS = 10**6 if lanczos else saved_cap
    inside = [0.0]

    def timed(*args):  # the products' share of the route, without the steps after them
        t = time.perf_counter()
        try:
            return real(*args)
        finally:
            inside[0] += time.perf_counter() - t

    # Without Lanczos: as if it had run out of products.
    pc_fast._lanczos_smallest = timed if lanczos else (lambda *args: None)
    L, info = A.copy(), {}
    try:
        t = time.perf_counter()
        labels = pc_fast._spectral_inplace(L, K, seed, info)
        return time.perf_counter() - t, labels, info, inside[0]
    finally:
        pc_fast._lanczos_smallest, pc_fast.LANCZOS_MAX_PRODUCTS = real, saved_cap


def main(argv=None):
    args = parse_args(argv)
    if args.json:  # before the work, not after (nor in parse_args: a parse makes nothing)
        CLEANUP.extend(cli.prepare_out_file(args.json, force=args.force, what="--json file"))
    C = load_coef(args.coef)
    if C.shape[0] <= pc_fast.SI_LU_MAX_N:
        raise MescError(f"--coef {args.coef}: n = {C.shape[0]}, but the routes compared here run "
                        f"only above postcluster.fast.SI_LU_MAX_N = {pc_fast.SI_LU_MAX_N}; give "
                        "the C of a larger set (MNIST-10k)")
    pc_checks.check_clusters(args.clusters, C.shape[0], "--clusters")
    pc_checks.check_ratio(args.thr)
    Cs = pc_fast._pretreat_sparse(pc_thrc.thrC_sparse(C, args.thr), args.variant)
    del C
    rows = []
    for d, power in args.settings:
        U = pc_fast._svd_embedding_fast(Cs, args.clusters, d, {})
        if U is None:
            raise MescError(f"d {d}: the rank-{args.clusters * d + 1} subspace is "
                            "ill-determined; try another d")
        A = pc_fast._affinity_inplace(U, power)
        t_lz, y_lz, info_lz, t_products = time_route(A, args.clusters, args.seed, lanczos=True)
        t_ch, y_ch, info_ch, _ = time_route(A, args.clusters, args.seed, lanczos=False)
        del A
        products = info_lz.get("lanczos_products")
        converged = info_lz.get("spectral", "").startswith("ARPACK Lanczos")
        # The cap at which the Lanczos route would cost what the Cholesky route does: its
        # products at their own rate, plus the rest of its step (λ_{K+1}, discretize, ...).
        break_even = ((t_ch - (t_lz - t_products)) / (t_products / products)
                      if converged and products else None)
        row = {"d": d, "power": power, "lanczos_s": t_lz, "lanczos_products": products,
               "lanczos_products_s": t_products, "lanczos_converged": converged,
               "cholesky_s": t_ch, "break_even_products": break_even,
               "same_labels": bool(np.array_equal(y_lz, y_ch)),
               "ill_posed": bool(info_lz["ill_posed"] or info_ch["ill_posed"])}
        rows.append(row)
        worth = (f"worth {break_even:.0f} products" if break_even is not None else
                 "Lanczos did not converge: no break-even")
        print(f"d {d}, power {power:g}: Lanczos {t_lz:.2f} s ({products} products in "
              f"{t_products:.2f} s), Cholesky {t_ch:.2f} s ({worth}), same labels: "
              f"{row['same_labels']}", flush=True)
    print(f"LANCZOS_MAX_PRODUCTS = {pc_fast.LANCZOS_MAX_PRODUCTS}")
    if args.json:
        from mesc_tf import provenance

        # As bench.py's: the command, the machine (its BLAS kernels set these times), versions.
        report = {"command": provenance.command("benchmarks/spectral_routes.py", argv),
                  "machine": provenance.machine(), "versions": provenance.versions(),
                  "coef": str(args.coef), "clusters": args.clusters, "thr": args.thr,
                  "variant": args.variant, "seed": args.seed, "rows": rows,
                  "lanczos_max_products": pc_fast.LANCZOS_MAX_PRODUCTS}
        atomic_write_text(args.json, json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(cli.main_guard(main, CLEANUP))
