#!/usr/bin/env python3
"""What the Python layer adds to a solve: the same fixed-ε problem timed through flashot's Python API and through
the C++ API (`flashot bench`, which times Problem::solve in C++), plus the Python call's wall time against the
engine's own timing of the same call (SolveResult.seconds). Prints figures; asserts nothing.

  python tests/bench/python_overhead.py --cli build/apps/flashot --backend cpu --threads 2
  python tests/bench/python_overhead.py --backend cuda          (no --cli: the per-call figure only)

The problem is `flashot bench`'s: n = m points ~ N(0, 1) in d dimensions, weights U(0, 1) + 0.1 normalised,
fixed ε, exactly --iters iterations (tolerance 0, diagnostics off); one warm-up solve, then the median of
--repeats solves. docs/python.md records the figures.
"""

import argparse
import json
import statistics
import subprocess
import time

import numpy as np

import flashot


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--d", type=int, default=3)
    ap.add_argument("--eps", type=float, default=0.1)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--cli", help="the flashot program, for the C++ timing of the same problem")
    ap.add_argument("--torch", action="store_true", help="hand the points over as torch CUDA tensors")
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.n, args.d)).astype(np.float32)
    y = rng.normal(size=(args.n, args.d)).astype(np.float32)
    a = (rng.uniform(size=args.n) + 0.1).astype(np.float32)
    b = (rng.uniform(size=args.n) + 0.1).astype(np.float32)
    a /= a.sum()
    b /= b.sum()
    xs, ys = x, y
    if args.torch:
        import torch

        # Points and weights on the device: the zero-copy route (Problem.on_device; docs/python.md, "CUDA arrays").
        xs, ys = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
        a, b = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        torch.cuda.synchronize()

    # The second construction is timed (the first one pays for the CUDA context and the module's first calls).
    flashot.Problem(xs, ys, a, b, backend=args.backend, threads=args.threads)
    start = time.perf_counter()
    problem = flashot.Problem(xs, ys, a, b, backend=args.backend, threads=args.threads)
    construct = time.perf_counter() - start
    options = flashot.SolveOptions(epsilon=args.eps, tolerance=0, max_iterations=args.iters, diagnostics=False)
    problem.solve(options)  # warm-up
    walls, engine = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        result = problem.solve(options)
        walls.append(time.perf_counter() - start)
        engine.append(result.seconds)
    if result.reason != "fixed_iterations":
        raise SystemExit(f"the solve stopped early: {result.message}")
    per_call = [w - e for w, e in zip(walls, engine)]
    report = {
        "n": args.n, "d": args.d, "eps": args.eps, "iters": args.iters, "backend": result.backend,
        "device": result.device, "input_device": problem.input_device,
        "construct_s": construct, "on_device": problem.on_device,
        "input_host_bytes": problem.statistics()["input_host_bytes"],
        "python_median_ms": 1e3 * statistics.median(walls),
        "engine_median_ms": 1e3 * statistics.median(engine),
        "python_minus_engine_median_us": 1e6 * statistics.median(per_call),
        "python_minus_engine_fraction": statistics.median(per_call) / statistics.median(engine),
    }
    if args.cli:
        cmd = [args.cli, "bench", "--n", str(args.n), "--d", str(args.d), "--eps", str(args.eps), "--iters",
               str(args.iters), "--repeats", str(args.repeats), "--backend", args.backend, "--csv"]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        line = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        cpp_ms = float(line.split(",")[-1])
        report["cpp_bench_median_ms"] = cpp_ms
        report["python_over_cpp"] = report["python_median_ms"] / cpp_ms
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
