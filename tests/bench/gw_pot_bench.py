#!/usr/bin/env python3
"""POT beside flashot on the same synthetic tissue slices: entropic fused Gromov-Wasserstein, same ε, same α.

Usage: gw_pot_bench.py --bench build/tests/bench/flashot_gw_bench [--device cpu|cuda] [--pot-backend numpy|torch]
                       [--sizes N[,N...] | --n N --m M] [--e E] [--blur B] [--alpha A] [--threads T]
                       [--dtype float64|float32] [--pot-sinkhorn sinkhorn|sinkhorn_log] [--pot-time-cap S]
                       [--pot-max-iter K] [--pot-inner K] [--fit-gb G] [--verbose]
For each size it runs flashot_gw_bench with --dump (--backend cpu or cuda), then POT's
ot.gromov.entropic_fused_gromov_wasserstein (solver "PGD", square loss, from p qᵀ like flashot, uniform weights) on
the inputs it wrote, and prints one table row per size: both wall times, outer and inner iterations, both
objectives, POT's final marginal error (flashot's definition) and, on a GPU, POT's peak memory.

--device cuda runs POT on PyTorch CUDA tensors (its backend dispatch; torch.cuda.synchronize around every timing) and
flashot's CUDA backend; --device cpu runs POT on numpy (or, with --pot-backend torch, on torch CPU tensors) and
flashot's CPU backend with --threads. Conventions (docs/gromov-wasserstein.md §5): M = ‖u_i − v_j‖² (ot.dist),
C1/C2 squared distances, POT's epsilon = ε = blur², POT's alpha = α.

POT's settings: its defaults (max_iter 1000, tol 1e-9 on ‖T − T_prev‖_F checked every 10th outer iteration,
warmstart False, ot.sinkhorn numItermax 1000 and stopThr 1e-9) except symmetric=True (C1, C2 are distance
matrices; POT's symmetry test would allocate n×n temporaries) and, where asked, the Sinkhorn variant: POT's entropic
FGW calls ot.sinkhorn with method="sinkhorn" (the scaling domain) fixed, so --pot-sinkhorn sinkhorn_log substitutes
POT's own log-domain ot.sinkhorn(method="sinkhorn_log") inside that loop. The scaling domain underflows when
exp(−cost/ε) of a whole row does: in fp64 at the slices' ε = 0.05² (not at 0.1²), in fp32 already at 0.1², so
float32 defaults to sinkhorn_log.

Every inner solve is recorded (the wrapper asks ot.sinkhorn for its log, which it keeps anyway): its iterations,
its last marginal error and whether it met stopThr. --pot-time-cap S stops POT after the outer iteration past which
the next one would end beyond S seconds; such a row is labelled "capped" and gives the seconds per outer iteration
and a lower bound for a full run (POT tests its stop rule only at every 10th outer iteration, so a full run has at
least 11).

Memory: POT holds C1, C2 = hC1, hC2 = 2·C2 (n×n, m×m), M, constC, T and T_prev, and in each outer iteration the
gradient, the linearized cost, the Sinkhorn kernel K and diag(1/a)·K and the plan's temporaries (n×m): about 12
n×n-sized fp64 arrays at n = m at its peak (measured with tracemalloc on numpy: 12.05 at n = 800), 96·n² bytes.
"""
import argparse
import gc
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

# POT imports every array library it finds (JAX, TensorFlow, CuPy) and builds a backend object for each at import;
# JAX's then reserves 75 % of the GPU's memory, which POT's own torch arrays then cannot have (the first GPU call
# of this bench ran out of memory at 20k with 105 GB held outside PyTorch). Only numpy and torch are used here.
for _key in ("POT_BACKEND_DISABLE_JAX", "POT_BACKEND_DISABLE_TENSORFLOW", "POT_BACKEND_DISABLE_CUPY"):
    os.environ.setdefault(_key, "1")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


class PotCapped(Exception):
    """Raised out of POT's outer loop by the time cap; carries the plan of the last finished outer iteration."""

    def __init__(self, plan):
        super().__init__("time cap")
        self.plan = plan


class InnerRecorder:
    """Stands in for ot.sinkhorn inside POT's entropic FGW loop: runs the chosen Sinkhorn variant, times each outer
    iteration (synchronizing the device), records the inner solve's iterations and convergence, applies the cap."""

    def __init__(self, original, method, synchronize, cap_s, stop_thr):
        self.original, self.method, self.synchronize = original, method, synchronize
        self.cap_s, self.stop_thr = cap_s, stop_thr
        self.records = []  # (seconds, inner iterations, last marginal error or None, converged)
        self.start = self.last = time.perf_counter()

    def __call__(self, a, b, M, reg, method=None, log=False, **kwargs):
        plan, inner = self.original(a, b, M, reg, method=self.method, log=True, **kwargs)
        self.synchronize()
        now = time.perf_counter()
        errors = inner.get("err", [])
        error = float(errors[-1]) if len(errors) else None
        converged = error is not None and error < kwargs.get("stopThr", self.stop_thr)
        self.records.append((now - self.last, int(inner.get("niter", -1)) + 1, error, converged))
        seconds = now - self.last
        self.last = now
        if self.cap_s > 0 and now - self.start + seconds > self.cap_s:
            raise PotCapped(plan)
        return (plan, inner) if log else plan


def run_flashot(args, n, m, folder):
    command = [args.bench, "--n", str(n), "--m", str(m), "--e", str(args.e), "--blur", str(args.blur),
               "--alpha", str(args.alpha), "--backend", args.device, "--dump", folder]
    if args.device == "cpu":
        command += ["--threads", str(args.threads)]
    print("flashot:", " ".join(command), flush=True)
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"flashot_gw_bench exited {run.returncode}: {run.stderr.strip()}")
    for line in run.stdout.splitlines():
        if args.verbose or not line.startswith(" "):
            print("  " + line)
    out = run.stdout
    totals = re.search(r"wall ([\d.]+) s \(solve ([\d.]+) s\), outer (\d+), inner (\d+), converged (\w+), "
                       r"peak device memory ([\d.]+) MB", out)
    coarse = re.search(r"coarse levels: (\d+) outer iterations, (\d+) inner", out)
    full = [line for line in out.splitlines() if re.match(rf"\s*{n} x {m}\s+outer", line)]
    objective = float(re.search(r"objective (\S+)", full[-1]).group(1)) if full else float("nan")
    marginal = float(re.search(r"marginal error (\S+)", full[-1]).group(1)) if full else float("nan")
    if not totals:
        raise RuntimeError("flashot_gw_bench printed no totals line:\n" + out)
    return {"wall": float(totals.group(1)), "outer": int(totals.group(3)), "inner": int(totals.group(4)),
            "converged": totals.group(5), "memory_mb": float(totals.group(6)),
            "coarse_outer": int(coarse.group(1)) if coarse else 0, "coarse_inner": int(coarse.group(2)) if coarse else 0,
            "objective": objective, "marginal": marginal}


def run_pot(args, folder, ot, torch):
    load = lambda name: np.loadtxt(f"{folder}/{name}.txt", dtype=np.float64, ndmin=2)
    x, y, u, v = load("x"), load("y"), load("u"), load("v")
    epsilon = args.blur ** 2
    if torch is not None:
        dtype = torch.float64 if args.dtype == "float64" else torch.float32
        x, y, u, v = (torch.from_numpy(a).to(device=args.device, dtype=dtype) for a in (x, y, u, v))
    else:
        x, y, u, v = (a.astype(args.dtype) for a in (x, y, u, v))
    cuda = torch is not None and args.device == "cuda"
    synchronize = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    import ot.gromov._bregman as bregman_module
    original = bregman_module.sinkhorn
    recorder = InnerRecorder(original, args.pot_sinkhorn, synchronize, args.pot_time_cap, 1e-9)
    bregman_module.sinkhorn = recorder
    capped = None
    try:
        synchronize()
        start = time.perf_counter()
        c1 = ot.dist(x, x, metric="sqeuclidean")
        c2 = ot.dist(y, y, metric="sqeuclidean")
        m = ot.dist(u, v, metric="sqeuclidean")
        synchronize()
        setup = time.perf_counter() - start
        recorder.start = recorder.last = time.perf_counter()
        try:
            plan, log = ot.gromov.entropic_fused_gromov_wasserstein(
                m, c1, c2, None, None, loss_fun="square_loss", epsilon=epsilon, alpha=args.alpha, symmetric=True,
                max_iter=args.pot_max_iter, tol=1e-9, solver="PGD", log=True, numItermax=args.pot_inner)
            objective = float(log["fgw_dist"])
        except PotCapped as stop:
            capped = stop.plan
        synchronize()
        wall = time.perf_counter() - start
    finally:
        bregman_module.sinkhorn = original
    peak = torch.cuda.max_memory_allocated() if cuda else None
    if capped is not None:  # POT's own fgw_dist formula on the last plan (its loop's frames are gone by now)
        gc.collect()
        plan = capped
        const_c, h_c1, h_c2 = ot.gromov.init_matrix(c1, c2, ot.unif(len(x), type_as=c1), ot.unif(len(y), type_as=c1),
                                                    "square_loss")
        objective = float((1 - args.alpha) * (m * plan).sum() + args.alpha * ot.gromov.gwloss(const_c, h_c1, h_c2, plan))
        del const_c, h_c1, h_c2
    rows, cols = plan.sum(1), plan.sum(0)
    marginal = float(abs(rows - 1.0 / len(x)).sum() + abs(cols - 1.0 / len(y)).sum()) / float(plan.sum())
    mass = float(plan.sum())
    records = recorder.records
    del plan, c1, c2, m, x, y, u, v
    return {"setup": setup, "wall": wall, "records": records, "capped": capped is not None, "objective": objective,
            "marginal": marginal, "mass": mass, "peak": peak}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="flashot's backend, and where POT's torch tensors live")
    ap.add_argument("--pot-backend", choices=["numpy", "torch"], default=None,
                    help="numpy (default on cpu) or torch tensors (default and required on cuda)")
    ap.add_argument("--sizes", default=None, help="comma-separated n = m, one row each (overrides --n/--m)")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--m", type=int, default=2000)
    ap.add_argument("--e", type=int, default=10)
    ap.add_argument("--blur", type=float, default=0.1)
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64", help="POT's arrays")
    ap.add_argument("--pot-sinkhorn", choices=["sinkhorn", "sinkhorn_log"], default=None,
                    help="POT's inner Sinkhorn (default: sinkhorn in float64, sinkhorn_log in float32)")
    ap.add_argument("--pot-time-cap", type=float, default=150,
                    help="stop POT before an outer iteration would end past this many seconds (0: no cap)")
    ap.add_argument("--pot-max-iter", type=int, default=1000, help="POT's outer iterations at most (its default)")
    ap.add_argument("--pot-inner", type=int, default=1000, help="ot.sinkhorn's numItermax (POT's default 1000)")
    ap.add_argument("--fit-gb", type=float, default=0,
                    help="on cuda: after --sizes, one more size n = m, the largest whose POT peak (at the n×m arrays "
                         "per peak measured at the last size) stays within this many GB")
    ap.add_argument("--verbose", action="store_true", help="print flashot's every outer iteration")
    args = ap.parse_args()
    if args.fit_gb > 0 and args.device != "cuda":
        ap.error("--fit-gb needs --device cuda (it reads torch.cuda.max_memory_allocated)")
    args.pot_backend = args.pot_backend or ("torch" if args.device == "cuda" else "numpy")
    if args.device == "cuda" and args.pot_backend != "torch":
        ap.error("--device cuda needs --pot-backend torch (POT runs on a GPU through PyTorch tensors)")
    args.pot_sinkhorn = args.pot_sinkhorn or ("sinkhorn" if args.dtype == "float64" else "sinkhorn_log")
    sizes = [(int(s), int(s)) for s in args.sizes.split(",")] if args.sizes else [(args.n, args.m)]
    if any(n <= 0 or m <= 0 for n, m in sizes):
        ap.error(f"sizes must be positive (got {sizes})")
    import ot
    torch = None
    if args.pot_backend == "torch":
        import torch
        if args.device == "cuda" and not torch.cuda.is_available():
            sys.exit("--device cuda: torch sees no CUDA device")
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU ({args.threads} threads for flashot)"
    print(f"POT {ot.__version__} on {args.pot_backend} {args.dtype} ({args.device}), inner ot.sinkhorn method "
          f"{args.pot_sinkhorn!r}, numItermax {args.pot_inner}, stopThr 1e-9; outer max_iter {args.pot_max_iter}, "
          f"tol 1e-9; symmetric=True; time cap {args.pot_time_cap:g} s; device {device_name}"
          + (f"; torch {torch.__version__}" if torch is not None else ""), flush=True)
    if args.device == "cuda":  # cuBLAS handles and kernels loaded before the first timing
        torch.ones(64, 64, dtype=torch.float64, device="cuda") @ torch.ones(64, 64, dtype=torch.float64, device="cuda")
        torch.cuda.synchronize()

    rows = []
    element = 8 if args.dtype == "float64" else 4
    for index in range(len(sizes) + (1 if args.fit_gb > 0 else 0)):
        if index == len(sizes):  # --fit-gb: the largest n = m whose peak, at the arrays counted so far, fits
            last = next((r for r in reversed(rows) if r[3].get("peak")), None)
            if last is None:
                print("--fit-gb: no size before it ran to a peak-memory figure; no extra size", flush=True)
                break
            arrays = last[3]["peak"] / (element * last[0] * last[1])
            n = int((args.fit_gb * 1e9 / (arrays * element)) ** 0.5)
            n = n // 1000 * 1000 if n >= 5000 else n // 10 * 10
            if n < 10:
                print(f"--fit-gb {args.fit_gb:g}: not even 10 × 10 fits; no extra size", flush=True)
                break
            print(f"--fit-gb {args.fit_gb:g}: {arrays:.2f} n×m arrays at the peak of {last[0]} × {last[1]}, so "
                  f"n = m = {n} ({arrays * element * n * n / 1e9:.1f} GB expected)", flush=True)
            sizes.append((n, n))
        n, m = sizes[index]
        with tempfile.TemporaryDirectory() as folder:
            flashot = run_flashot(args, n, m, folder)
            try:
                pot = run_pot(args, folder, ot, torch)
            except Exception as error:  # out of memory: the row says so and the next size still runs
                if torch is None or not isinstance(error, torch.cuda.OutOfMemoryError):
                    raise
                pot = {"error": str(error).splitlines()[0]}
            gc.collect()
            if torch is not None and args.device == "cuda":
                torch.cuda.empty_cache()
        rows.append((n, m, flashot, pot))
        describe(n, m, flashot, pot, args)

    print(f"\nfused GW, e = {args.e}, alpha = {args.alpha}, eps = {args.blur ** 2:g} (blur {args.blur}), uniform weights; "
          f"flashot {args.device}, POT {ot.__version__} {args.pot_backend} {args.dtype} {args.pot_sinkhorn}")
    print("| n × m | flashot s (outer / inner; coarse levels) | POT s (outer; inner Sinkhorn) | POT / flashot | "
          "objective flashot | objective POT | POT marginal error | POT peak memory |")
    print("|---|---|---|---|---|---|---|---|")
    for n, m, flashot, pot in rows:
        f_text = (f"{flashot['wall']:.2f} ({flashot['outer']} / {flashot['inner']}; "
                  f"{flashot['coarse_outer']} / {flashot['coarse_inner']})")
        if "error" in pot:
            print(f"| {n} × {m} | {f_text} | out of memory: {pot['error']} | — | {flashot['objective']:.6g} | — | — | — |")
            continue
        summary = summarize(pot)
        peak = f"{pot['peak'] / 1e9:.1f} GB" if pot["peak"] is not None else "—"
        if pot["capped"]:
            p_text = (f"capped after {summary['outer']} outer, {pot['wall']:.1f} s: {summary['per_outer']:.2f} s per "
                      f"outer; full run ≥ {summary['least']} outer, ≥ {summary['lower_bound']:.0f} s "
                      f"({summary['inner_text']})")
            ratio = f"≥ {summary['lower_bound'] / flashot['wall']:.1f}×"
            objective = f"{pot['objective']:.6g} (after {summary['outer']} outer)"
        else:
            p_text = f"{pot['wall']:.2f} ({summary['outer']} outer; {summary['inner_text']})"
            ratio = f"{pot['wall'] / flashot['wall']:.1f}×"
            objective = f"{pot['objective']:.6g}"
        print(f"| {n} × {m} | {f_text} | {p_text} | {ratio} | {flashot['objective']:.6g} | {objective} | "
              f"{pot['marginal']:.2g} | {peak} |")
    return 0


def summarize(pot):
    records = pot["records"]
    outer = len(records)
    converged = sum(1 for r in records if r[3])
    inner_total = sum(r[1] for r in records)
    if converged == outer:
        inner_text = f"{inner_total} inner, every solve converged"
    elif converged == 0:
        inner_text = f"{inner_total} inner, no solve converged"
    else:
        inner_text = f"{inner_total} inner, {converged} of {outer} solves converged"
    # The first outer iteration also builds POT's constC; the later ones are the loop's steady cost.
    steady = [r[0] for r in records[1:]] or [r[0] for r in records]
    per_outer = sum(steady) / len(steady) if steady else float("nan")
    # POT tests its stop rule after outer iterations 1, 11, 21, ...: a capped run would have gone on at least to the
    # first of these past where it stopped.
    least = 11 + 10 * max(0, (outer - 1) // 10)
    lower_bound = pot["setup"] + (records[0][0] if records else 0) + per_outer * (least - 1)
    return {"outer": outer, "inner_text": inner_text, "per_outer": per_outer, "least": least,
            "lower_bound": lower_bound}


def describe(n, m, flashot, pot, args):
    print(f"flashot {args.device}: {n} x {m}: wall {flashot['wall']:.3f} s, full level {flashot['outer']} outer / "
          f"{flashot['inner']} inner, coarse levels {flashot['coarse_outer']} / {flashot['coarse_inner']}, "
          f"converged {flashot['converged']}, objective {flashot['objective']:.6g}, marginal error "
          f"{flashot['marginal']:.2g}, peak device memory {flashot['memory_mb']:.0f} MB", flush=True)
    if "error" in pot:
        print(f"POT: {n} x {m}: {pot['error']}", flush=True)
        return
    summary = summarize(pot)
    element = 8 if args.dtype == "float64" else 4
    errors = [r[2] for r in pot["records"] if r[2] is not None]
    last_error = f"{errors[-1]:.2g}" if errors else "none (numerical errors at its first iteration)"
    print(f"POT: {n} x {m}: wall {pot['wall']:.3f} s (ot.dist {pot['setup']:.3f} s), {summary['outer']} outer "
          f"iterations{' (capped)' if pot['capped'] else ''}, {summary['inner_text']}, last inner stopThr error "
          f"{last_error}; {summary['per_outer']:.3f} s per outer iteration; objective {pot['objective']:.6g}, "
          f"marginal error {pot['marginal']:.2g}, plan mass {pot['mass']:.6f}"
          + (f", peak memory {pot['peak'] / 1e9:.2f} GB ({pot['peak'] / (element * n * m):.1f} n×m {args.dtype} "
             f"arrays)"
             if pot["peak"] is not None else ""), flush=True)
    if abs(pot["mass"] - 1) > 1e-3 or not np.isfinite(pot["mass"]):
        print(f"POT: the plan's mass is {pot['mass']:g}: the scaling-domain Sinkhorn underflowed at this ε "
              f"(rerun with --pot-sinkhorn sinkhorn_log)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
