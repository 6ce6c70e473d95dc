#!/usr/bin/env python3
"""Per-iteration time of POT's log-domain Sinkhorn and GeomLoss's symmetric loop on the CPU, on the problem
flashot_cpu_bench times: n = m points ~ N(0, 1) in d dimensions, uniform weights, fixed epsilon.

Each figure is (time(K2 iterations) - time(K1 iterations)) / (K2 - K1), so it excludes building the cost matrix
and the solvers' set-up, like flashot's figure excludes its fixed costs. Prints CSV lines:
method,n,m,d,eps,iters,wall_ms_per_iteration,cpu_ms_per_iteration (process CPU time, all threads)
"""
import argparse
import sys
import time

import numpy as np


def seconds(fn):
    """(wall, process CPU) seconds of fn()."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def per_iteration_ms(run, k1, k2):
    (w1, c1), (w2, c2) = seconds(lambda: run(k1)), seconds(lambda: run(k2))
    return (w2 - w1) / (k2 - k1) * 1e3, (c2 - c1) / (k2 - k1) * 1e3


def pot_ms(x, y, eps, k1, k2):
    import ot
    n, m = len(x), len(y)
    # float32 like flashot (POT computes in the inputs' dtype); float64 would double its memory: 3.2 GB per n×m
    # array at n = 20k, and sinkhorn_log holds several.
    x, y = x.astype(np.float32), y.astype(np.float32)
    a = np.full(n, 1.0 / n, dtype=np.float32)
    b = np.full(m, 1.0 / m, dtype=np.float32)
    cost = ot.dist(x, y)  # squared Euclidean
    run = lambda k: ot.sinkhorn(a, b, cost, eps, method="sinkhorn_log", numItermax=k, stopThr=0.0, warn=False)
    return per_iteration_ms(run, k1, k2)


def geomloss_ms(x, y, eps, k1, k2):
    import torch
    from geomloss._legacy.sinkhorn_divergence import sinkhorn_loop
    from geomloss._legacy.sinkhorn_samples import softmin_tensorized
    torch.set_num_threads(torch.get_num_threads())
    xt = torch.from_numpy(x.astype(np.float32))[None]
    yt = torch.from_numpy(y.astype(np.float32))[None]
    n, m = xt.shape[1], yt.shape[1]
    # GeomLoss's p = 2 cost is |x - y|^2 / 2; double it so that the problem is flashot's (cost |x - y|^2, eps).
    c_xy = 2 * (0.5 * torch.cdist(xt, yt) ** 2)
    c_yx = c_xy.transpose(1, 2).contiguous()
    a_log = torch.full((1, n), -np.log(n))
    b_log = torch.full((1, m), -np.log(m))

    def run(k):
        sinkhorn_loop(softmin_tensorized, a_log, b_log, None, None, c_xy, c_yx, [eps] * k, None, debias=False)

    return per_iteration_ms(run, k1, k2)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--n", type=int, nargs="+", default=[10000, 20000])
    p.add_argument("--d", type=int, nargs="+", default=[3, 50])
    p.add_argument("--eps", type=float, default=0.1)
    p.add_argument("--methods", nargs="+", default=["pot", "geomloss"])
    args = p.parse_args()
    rng = np.random.default_rng(1)
    for n in args.n:
        for d in args.d:
            x = rng.standard_normal((n, d))
            y = rng.standard_normal((n, d))
            for method in args.methods:
                # POT needs seconds per iteration: fewer of them.
                k1, k2 = (1, 3) if method == "pot" else (2, 10)
                wall, cpu = (pot_ms if method == "pot" else geomloss_ms)(x, y, args.eps, k1, k2)
                print(f"{method},{n},{n},{d},{args.eps},{k2 - k1},{wall:.1f},{cpu:.1f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
