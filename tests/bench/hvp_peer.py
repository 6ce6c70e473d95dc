#!/usr/bin/env python3
"""FlashSinkhorn's Hessian-vector product on the inputs flashot_hvp_bench wrote (same points, potentials, v, ε and
CG tolerance), timed the same way; prints both timings, the ratio and how far the two products are apart.

    python3 tests/bench/hvp_peer.py DIR [--repeat 3]

FlashSinkhorn (PyPI `flash-sinkhorn`) takes OTT-style potentials f̂ = f + ε·log a, ĝ = g + ε·log b; flashot's are
GeomLoss-style (P = a b exp((f + g − C)/ε)), converted here. Both solve the same Schur-complement system
(D_g − Pᵀ D_f⁻¹ P) δg = rhs by CG and decide convergence on the true relative residual; cg_atol is set to 0 so only
the relative tolerance counts. The timed call is hvp_x_sqeuclid_from_potentials (everything after the solve), after
one untimed warm-up call (Triton compilation and autotuning)."""

import argparse
import json
import math
import pathlib
import statistics
import sys
import time

import numpy as np
import torch
from flash_sinkhorn.hvp import hvp_x_sqeuclid_from_potentials


def load(folder, name, shape):
    return torch.from_numpy(np.fromfile(folder / name, dtype="<f4").reshape(shape)).cuda()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=pathlib.Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--allow-tf32", action="store_true", help="TF32 dots in FlashSinkhorn (default: fp32)")
    args = ap.parse_args()
    ours = json.loads((args.folder / "result.json").read_text())
    n, d, eps = ours["n"], ours["d"], ours["epsilon"]
    x = load(args.folder, "x.f32", (n, d))
    y = load(args.folder, "y.f32", (n, d))
    f = load(args.folder, "f.f32", (n,))
    g = load(args.folder, "g.f32", (n,))
    v = load(args.folder, "v.f32", (n, d))
    ours_hvp = load(args.folder, "hvp.f32", (n, d))
    # Uniform weights 1/n on both sides: f̂ = f + ε log(1/n).
    f_hat = f - eps * math.log(n)
    g_hat = g - eps * math.log(n)

    def run():
        return hvp_x_sqeuclid_from_potentials(
            x, y, f_hat, g_hat, v, eps=eps, cost_scale=1.0, cg_rtol=ours["cg_tolerance"], cg_atol=0.0,
            max_cg_iter=300, allow_tf32=args.allow_tf32)

    t0 = time.perf_counter()
    run()  # warm-up: Triton compilation and autotuning
    torch.cuda.synchronize()
    print(f"FlashSinkhorn warm-up call (compilation, autotuning): {time.perf_counter() - t0:.1f} s", flush=True)
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        hvp, info = run()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    peer = statistics.median(times)
    rel_residual = info.cg_residual / info.cg_initial_residual if info.cg_initial_residual > 0 else 0.0
    diff = (hvp - ours_hvp).abs().max().item() / max(ours_hvp.abs().max().item(), 1e-30)
    result = {
        "n": n, "d": d, "epsilon": eps, "cg_tolerance": ours["cg_tolerance"],
        "flashot_hvp_seconds": ours["hvp_seconds"], "flashot_cg_iterations": ours["cg_iterations"],
        "flashot_cg_residual": ours["cg_residual"],
        "flashsinkhorn_hvp_seconds": peer, "flashsinkhorn_cg_iterations": info.cg_iters,
        "flashsinkhorn_cg_residual": rel_residual, "flashsinkhorn_cg_converged": info.cg_converged,
        "speedup": peer / ours["hvp_seconds"], "max_relative_difference": diff,
    }
    (args.folder / "peer.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"hvp n={n} d={d} eps={eps:g} cg tolerance {ours['cg_tolerance']:g}")
    print(f"  flashot        {ours['hvp_seconds']:.4f} s  cg {ours['cg_iterations']} it, residual {ours['cg_residual']:.3g}")
    print(f"  FlashSinkhorn  {peer:.4f} s  cg {info.cg_iters} it, residual {rel_residual:.3g}"
          f" ({'converged' if info.cg_converged else 'NOT converged'})")
    print(f"  ratio FlashSinkhorn / flashot = {peer / ours['hvp_seconds']:.2f}x;"
          f" products differ by {diff:.2e} (max abs, relative to the largest entry)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
