#!/usr/bin/env python3
"""POT beside flashot on the same synthetic tissue slices: entropic fused Gromov-Wasserstein, same ε, same α.

Usage: gw_pot_bench.py --bench build/tests/bench/flashot_gw_bench [--n N] [--m M] [--e E] [--blur B] [--alpha A]
                       [--threads T] [--pot-max-iter K]
Runs flashot_gw_bench (which prints its outer iterations and totals) with --dump, then POT's
ot.gromov.entropic_fused_gromov_wasserstein (solver="PGD", square loss, from a bᵀ like flashot) on the inputs it
wrote, and prints both wall times and objectives. POT holds the n×m cost, kernel and plan and the n×n, m×m
distance matrices in fp64 (about 10 n×m-sized arrays at once): that decides the largest size it fits.
Conventions (docs/gromov-wasserstein.md §5): M = ‖u_i − v_j‖², C1/C2 squared distances, epsilon = ε = blur².
"""
import argparse
import subprocess
import sys
import tempfile
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--m", type=int, default=2000)
    ap.add_argument("--e", type=int, default=10)
    ap.add_argument("--blur", type=float, default=0.1)
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pot-max-iter", type=int, default=1000, help="POT's outer iterations at most")
    ap.add_argument("--pot-inner", type=int, default=1000, help="ot.sinkhorn's numItermax (POT's default 1000)")
    args = ap.parse_args()
    import ot

    with tempfile.TemporaryDirectory() as folder:
        command = [args.bench, "--n", str(args.n), "--m", str(args.m), "--e", str(args.e), "--blur", str(args.blur),
                   "--alpha", str(args.alpha), "--backend", "cpu", "--threads", str(args.threads), "--dump", folder]
        print("flashot:", " ".join(command), flush=True)
        start = time.perf_counter()
        run = subprocess.run(command, capture_output=True, text=True, check=True)
        flashot_wall = time.perf_counter() - start
        print(run.stdout, end="", flush=True)
        load = lambda name: np.loadtxt(f"{folder}/{name}.txt", dtype=np.float64, ndmin=2)
        x, y, u, v = load("x"), load("y"), load("u"), load("v")

    epsilon = args.blur ** 2
    start = time.perf_counter()
    c1 = ot.dist(x, x, metric="sqeuclidean")
    c2 = ot.dist(y, y, metric="sqeuclidean")
    m = ot.dist(u, v, metric="sqeuclidean")
    a = np.full(len(x), 1.0 / len(x))
    b = np.full(len(y), 1.0 / len(y))
    plan, log = ot.gromov.entropic_fused_gromov_wasserstein(
        m, c1, c2, a, b, loss_fun="square_loss", epsilon=epsilon, alpha=args.alpha, max_iter=args.pot_max_iter,
        tol=1e-9, solver="PGD", log=True, numItermax=args.pot_inner)
    pot_wall = time.perf_counter() - start
    print(f"POT {ot.__version__}: n={len(x)} m={len(y)} e={u.shape[1]} alpha={args.alpha} eps={epsilon:g}: "
          f"wall {pot_wall:.2f} s, objective {log['fgw_dist']:.6g}, outer iterations <= {10 * len(log['err'])}, "
          f"plan mass {plan.sum():.6f}")
    outer = [line.split() for line in run.stdout.splitlines() if line.lstrip().startswith("outer")]
    objective = float(outer[-1][outer[-1].index("objective") + 1]) if outer else float("nan")
    print(f"flashot objective {objective:.6g}; wall {flashot_wall:.2f} s (process, including data generation); POT / flashot "
          f"{pot_wall / flashot_wall:.1f}x")


if __name__ == "__main__":
    sys.exit(main())
