"""POT's entropic fused Gromov-Wasserstein on the inputs that tests/engine/gromov_test.cpp (GromovPot) writes.

Usage: pot_fgw.py DIR ALPHA EPSILON
DIR holds x.txt (n×p), y.txt (m×q), u.txt (n×e), v.txt (m×e), a.txt (n), b.txt (m) as numpy.loadtxt reads them.
Prints one line: "objective feature_cost gw_cost outer_iterations" of POT's plan, in fp64.

Conventions mapped (docs/gromov-wasserstein.md §5): POT's M is the feature cost matrix ‖u_i − v_j‖² (squared
Euclidean, not normalised), C1 and C2 the squared-Euclidean distance matrices of x and y, loss_fun="square_loss",
alpha = α, and epsilon = ε in the cost's own units (POT's ot.sinkhorn regularises with −ε·H(T); on balanced plans
that differs from ε·KL(T | a⊗b) by a constant, so the plans are the same). POT starts from a bᵀ like flashot.
"""
import sys

import numpy as np
import ot


def main():
    folder, alpha, epsilon = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    load = lambda name: np.atleast_2d(np.loadtxt(f"{folder}/{name}.txt", dtype=np.float64))
    x, y, u, v = load("x"), load("y"), load("u"), load("v")
    a = np.loadtxt(f"{folder}/a.txt", dtype=np.float64)
    b = np.loadtxt(f"{folder}/b.txt", dtype=np.float64)
    a, b = a / a.sum(), b / b.sum()
    c1 = ot.dist(x, x, metric="sqeuclidean")
    c2 = ot.dist(y, y, metric="sqeuclidean")
    m = ot.dist(u, v, metric="sqeuclidean")
    plan, log = ot.gromov.entropic_fused_gromov_wasserstein(
        m, c1, c2, a, b, loss_fun="square_loss", epsilon=epsilon, alpha=alpha, max_iter=5000, tol=1e-11,
        solver="PGD", log=True, numItermax=100000, stopThr=1e-13)
    feature = float(np.sum(m * plan))
    # E(P) = Σ_ijkl (C1_ik − C2_jl)² P_ij P_kl, by POT's own loss helper.
    const_c, h1, h2 = ot.gromov.init_matrix(c1, c2, plan.sum(1), plan.sum(0), "square_loss")
    gw = float(ot.gromov.gwloss(const_c, h1, h2, plan))
    print(f"{log['fgw_dist']:.12g} {feature:.12g} {gw:.12g} {len(log['err'])}")


if __name__ == "__main__":
    main()
