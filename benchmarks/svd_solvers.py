"""Time the fast post-clustering's SVD by its two eigen-solvers, PROPACK and ARPACK, on a
saved C (issue 6).

    python benchmarks/svd_solvers.py --coef /tmp/coef/mnist.npy --clusters 10 --thr 0.03 \\
        --subspace-dim 32 --svds

Above ``postcluster.fast.DENSE_SVD_MAX_N`` the fast route takes the k = r + 1 leading eigenpairs
of CᵀC (the thresholded, pre-treated C) from PROPACK (``svds(solver="propack")``, asked for
``SVD_PROPACK_EXTRA`` more), else from ARPACK with tol 0, whose single-vector Lanczos
reorthogonalises each new vector against the whole basis, bound by memory. This runs both as the
route does, whatever n (PROPACK's seconds include the route's residual test), and PROPACK asked
for k alone. For each it prints the seconds, the largest residual ‖CᵀCv − θv‖ / σ₁² of the k
pairs and, for PROPACK, the sine of the largest angle between its rank-r subspace and ARPACK's;
with --svds, the reference's svds too and the sines of its subspace to theirs. The steps after
the SVD certify labels for subspaces that agree to rounding.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from mesc_tf import cli  # noqa: E402
from mesc_tf.errors import MescError  # noqa: E402
from mesc_tf.files import atomic_write_text  # noqa: E402
from mesc_tf.postcluster import checks as pc_checks  # noqa: E402
from mesc_tf.postcluster import fast as pc_fast  # noqa: E402
from mesc_tf.postcluster import thrc as pc_thrc  # noqa: E402
from mesc_tf.postcluster.reference import rank  # noqa: E402
# benchmarks/spectral_routes.py: the saved C's arguments, checks and loading
from spectral_routes import add_coef_arguments, check_coef_path, load_coef  # noqa: E402

# Folders made for --json, removed if the run then fails (cli.main_guard).
CLEANUP = []


def parse_args(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_coef_arguments(p)
    p.add_argument("--subspace-dim", type=int, required=True, help="d: the SVD's rank is d·K + 1")
    p.add_argument("--svds", action="store_true",
                   help="also the reference's svds (ARPACK on CᵀC, its own basis size, v0 of "
                        "ones; on the sparse C) and each solver's sine to its subspace")
    p.add_argument("--json", help="also write the figures here")
    p.add_argument("--force", action="store_true", help="overwrite an existing --json file")
    args = p.parse_args(argv)
    check_coef_path(p, args.coef)
    return args


def arpack(Cs, n_clusters, subspace_dim):
    """(seconds, θ, V, products) of the fast route's ARPACK call (PROPACK off), caught as it
    runs."""
    from scipy.sparse.linalg import LinearOperator

    caught, products = {}, [0]
    saved = pc_fast.eigsh, pc_fast.DENSE_SVD_MAX_N, pc_fast.SVD_PROPACK_MAX_SHARE

    def eigsh(op, **kw):
        def counted(x):
            products[0] += 1
            return op.matvec(x)

        t = time.perf_counter()
        try:
            caught["w"], caught["V"] = saved[0](LinearOperator(op.shape, matvec=counted,
                                                               dtype=op.dtype), **kw)
        except Exception as e:  # the route catches it and falls back: say why below
            caught["error"] = e
            raise
        caught["seconds"] = time.perf_counter() - t
        return caught["w"], caught["V"]

    pc_fast.eigsh, pc_fast.DENSE_SVD_MAX_N, pc_fast.SVD_PROPACK_MAX_SHARE = eigsh, 0, 0
    try:
        pc_fast._svd_embedding_fast(Cs, n_clusters, subspace_dim, {})
    finally:
        pc_fast.eigsh, pc_fast.DENSE_SVD_MAX_N, pc_fast.SVD_PROPACK_MAX_SHARE = saved
    if "error" in caught:
        raise MescError(f"ARPACK failed on this C ({type(caught['error']).__name__}: "
                        f"{caught['error']}); no figures for it")
    if "w" not in caught:
        raise MescError("ARPACK did not run (the rank-r subspace is ill-determined); no "
                        "figures for this C")
    return caught["seconds"], caught["w"], caught["V"], products[0]


def propack(Cs, Ct, k, extra):
    """(seconds, θ, V) of the route's PROPACK call asked for k + ``extra`` triplets, its size
    rule and residual test off; θ and V None where it does not converge within its basis."""
    saved = pc_fast.SVD_PROPACK_EXTRA, pc_fast.SVD_PROPACK_MAX_SHARE, pc_fast.SVD_RESIDUAL_MAX
    pc_fast.SVD_PROPACK_EXTRA, pc_fast.SVD_PROPACK_MAX_SHARE = extra, np.inf
    pc_fast.SVD_RESIDUAL_MAX = np.inf
    try:
        t = time.perf_counter()
        w, V = pc_fast._propack_eigenpairs(Cs, Ct, k, np.random.default_rng(0))
        seconds = time.perf_counter() - t
    finally:
        pc_fast.SVD_PROPACK_EXTRA, pc_fast.SVD_PROPACK_MAX_SHARE, pc_fast.SVD_RESIDUAL_MAX = saved
    return seconds, w, V


def sine(V, W):
    """The sine of the largest principal angle between span V and span W (orthonormalised):
    accurate for small angles, where 1 − cos is lost to rounding."""
    Q, _ = np.linalg.qr(V)
    P, _ = np.linalg.qr(W)
    return float(np.linalg.norm(P - Q @ (Q.T @ P), 2))


def main(argv=None):
    args = parse_args(argv)
    if args.json:  # before the work, not after (nor in parse_args: a parse makes nothing)
        CLEANUP.extend(cli.prepare_out_file(args.json, force=args.force, what="--json file"))
    C = load_coef(args.coef)
    K = pc_checks.check_clusters(args.clusters, C.shape[0], "--clusters")
    pc_checks.check_ratio(args.thr)
    pc_checks.check_affinity_args(K, args.subspace_dim, 1.0, C.shape[0])
    r = rank(K, args.subspace_dim, C.shape[0])
    if r + 2 >= C.shape[0]:
        raise MescError(f"--subspace-dim {args.subspace_dim}: the SVD's rank d·K + 1 = {r} leaves "
                        f"ARPACK no room in n = {C.shape[0]}; give a smaller d or a larger C")
    Cs = pc_fast._pretreat_sparse(pc_thrc.thrC_sparse(C, args.thr), args.variant)
    del C
    Ct = Cs.T.tocsr()
    t_a, w_a, V_a, products = arpack(Cs, K, args.subspace_dim)
    rows = {"arpack": {"seconds": t_a, "products": products,
                       "residual": pc_fast._relative_residual(Cs, Ct, w_a, V_a)}}
    gap = float((w_a[1] - w_a[0]) / w_a[-1])
    print(f"n {Cs.shape[0]}, nnz {Cs.nnz}, rank {r}, relative gap {gap:.3g}")
    print(f"ARPACK: {t_a:.2f} s ({products} products), residual {rows['arpack']['residual']:.2g}",
          flush=True)
    spaces = {"arpack": V_a[:, 1:]}  # the rank-r subspaces
    for name, extra in (("propack", pc_fast.SVD_PROPACK_EXTRA), ("propack_k_alone", 0)):
        t_p, w_p, V_p = propack(Cs, Ct, r + 1, extra)
        if w_p is None:  # a figure too: what the extra triplets are for
            rows[name] = {"extra": extra, "seconds": t_p, "converged": False}
            print(f"PROPACK, {r + 1} + {extra} triplets: {t_p:.2f} s, did not converge within "
                  f"its basis of {pc_fast.SVD_PROPACK_KMAX_FACTOR} × {r + 1 + extra} vectors",
                  flush=True)
            continue
        spaces[name] = V_p[:, 1:]
        rows[name] = {"extra": extra, "seconds": t_p, "converged": True,
                      "residual": pc_fast._relative_residual(Cs, Ct, w_p, V_p),
                      "sine_to_arpack": sine(V_a[:, 1:], V_p[:, 1:])}
        print(f"PROPACK, {r + 1} + {extra} triplets: {t_p:.2f} s, residual "
              f"{rows[name]['residual']:.2g}, sine to ARPACK's subspace "
              f"{rows[name]['sine_to_arpack']:.2g}", flush=True)
    if args.svds:
        from scipy.sparse.linalg import svds

        t = time.perf_counter()
        _, _, vt = svds(Cs, r, v0=np.ones(Cs.shape[0]))
        rows["svds"] = {"seconds": time.perf_counter() - t,
                        **{f"sine_to_{k}": sine(vt.T, V) for k, V in spaces.items()}}
        names = {"arpack": "ARPACK's", "propack": "PROPACK's",
                 "propack_k_alone": "PROPACK's asked for k alone"}
        print(f"svds: {rows['svds']['seconds']:.2f} s; sine of its subspace to "
              + ", to ".join(f"{names[k]} {rows['svds'][f'sine_to_{k}']:.2g}" for k in spaces),
              flush=True)
    if args.json:
        from mesc_tf import provenance

        report = {"command": provenance.command("benchmarks/svd_solvers.py", argv),
                  "machine": provenance.machine(), "versions": provenance.versions(),
                  "coef": str(args.coef), "clusters": K, "thr": args.thr,
                  "subspace_dim": args.subspace_dim, "variant": args.variant, "n": Cs.shape[0],
                  "nnz": int(Cs.nnz), "rank": r, "gap": gap, **rows}
        atomic_write_text(args.json, json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(cli.main_guard(main, CLEANUP))
