"""flashot's multiscale solve beside FlashSinkhorn 0.4.1's SamplesLoss(backend="multiscale") on the same points,
both results judged by one exact evaluator (tests/bench/peers/multiscale.sh drives it; docs/benchmarks.md,
"Multiscale (issue 22)", "Beside FlashSinkhorn's multiscale").

Conventions (both solvers, and the evaluator):
  cost C_ij = s·|x_i − y_j|² with s = 1 (flashot's default, FlashSinkhorn's half_cost=False),
  plan P_ij = a_i b_j exp((f_i + g_j − C_ij)/ε), ε in cost units (FlashSinkhorn: blur = √ε),
  weights a, b summing to 1 (flashot bench normalizes them; the peer is called with normalize=False on the same).
  Residuals: row = ‖P1 − a‖₁, col = ‖Pᵀ1 − b‖₁. flashot's tolerance bounds (row + col)/Σa (SolveResult::
  marginal_error); FlashSinkhorn's tol bounds max(row, col), estimated from 1024–8192 sampled rows and columns
  (mean + 3 standard errors). The peer's tol defaults to half of flashot's: max ≤ tol/2 gives row + col ≤ tol.
  Dual cost ⟨a,f⟩ + ⟨b,g⟩; dual objective ⟨a,f⟩ + ⟨b,g⟩ − ε(ΣP − 1), a lower bound of OT_ε for any (f, g).

Subcommands:
  evaluate DIR_POINTS DIR_POTENTIALS [--eval full|sampled] — residuals of saved potentials (f.npy, g.npy and
      solve.json's ε and s) on saved points (x.npy, y.npy, a.npy, b.npy), as JSON. torch (CUDA when present) or
      numpy: the same code through a small array shim.
  peer DIR_POINTS OUTDIR --eps E --tol T — FlashSinkhorn's multiscale solve (after a warm-up that compiles its
      Triton kernels), writing f.npy, g.npy, the TF32-rounded centred clouds it solved (xp.npy, yp.npy) and
      peer.json (status, seconds, its MultiscaleInfo). Refusals and out-of-memory are recorded there, not raised.
  compare RUNDIR... — for each run folder (points/, flashot/ from `flashot bench --end-to-end --save-points
      --save-potentials`): the peer in a child process (a crash or a time limit is a result), then the evaluator
      on both, one JSON line per run appended to --results; then the table.
  table RESULTS — the table of a results file.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

PEER_NAME = "FlashSinkhorn 0.4.1 multiscale"


# ---------------------------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------------------------

def save_npy(path, array):
    """np.save through a temporary and a rename (as flashot's writer)."""
    tmp = os.path.join(os.path.dirname(path) or ".", "." + os.path.basename(path) + f".partial-{os.getpid()}")
    with open(tmp, "wb") as f:
        np.save(f, np.ascontiguousarray(array))
    os.replace(tmp, path)


def save_json(path, obj):
    tmp = os.path.join(os.path.dirname(path) or ".", "." + os.path.basename(path) + f".partial-{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=str)
        f.write("\n")
    os.replace(tmp, path)


def load_points(folder):
    x, y, a, b = (np.load(os.path.join(folder, k + ".npy")) for k in ("x", "y", "a", "b"))
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1] or a.shape != (len(x),) or b.shape != (len(y),):
        raise SystemExit(f"{folder}: inconsistent shapes x {x.shape}, y {y.shape}, a {a.shape}, b {b.shape}")
    return x, y, a, b


def load_potentials(folder, n, m):
    f, g = np.load(os.path.join(folder, "f.npy")), np.load(os.path.join(folder, "g.npy"))
    if f.shape != (n,) or g.shape != (m,):
        raise SystemExit(f"{folder}: potentials of shape {f.shape}, {g.shape} for n = {n}, m = {m}")
    return f, g


# ---------------------------------------------------------------------------------------------------------------
# The exact evaluator: streamed log-sum-exp over (row tile × column chunk) blocks, fp32 tiles (or fp64), fp64
# accumulation across chunks. Nothing n×m is held.
# ---------------------------------------------------------------------------------------------------------------

class NumpyOps:
    name = "numpy"
    tile_entries = 1 << 22

    def asarray(self, a, dtype):
        return np.asarray(a, dtype=dtype)

    def dtype(self, name):
        return {"float32": np.float32, "float64": np.float64}[name]

    def scores(self, xs, ys):
        return xs @ ys.T

    def exp_row_sums(self, z):
        np.exp(z, out=z)
        return z.sum(axis=1, dtype=np.float64)

    def lse_rows(self, z):
        top = z.max(axis=1)
        return np.log(np.exp(z - top[:, None]).sum(axis=1, dtype=np.float64)) + top

    def numpy(self, v):
        return np.asarray(v, dtype=np.float64)

    def sync(self):
        pass


class TorchOps:
    tile_entries = 1 << 27  # 512 MiB of fp32 scores per block

    def __init__(self, torch, device):
        self.torch, self.device = torch, device
        self.name = f"torch {torch.__version__} on {device}"
        # fp32 products: the evaluator must not round to TF32 as the peer does.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")

    def asarray(self, a, dtype):
        return self.torch.as_tensor(np.ascontiguousarray(a), dtype=dtype, device=self.device)

    def dtype(self, name):
        return {"float32": self.torch.float32, "float64": self.torch.float64}[name]

    def scores(self, xs, ys):
        return xs @ ys.T

    def exp_row_sums(self, z):
        z.exp_()
        return z.sum(dim=1, dtype=self.torch.float64)

    def lse_rows(self, z):
        return self.torch.logsumexp(z.double(), dim=1)

    def numpy(self, v):
        return v.double().cpu().numpy()

    def sync(self):
        if self.device != "cpu":
            self.torch.cuda.synchronize()


def array_ops(prefer):
    """torch on CUDA when asked for (or 'auto' and present), else numpy."""
    if prefer in ("auto", "torch"):
        try:
            import torch
            if torch.cuda.is_available():
                return TorchOps(torch, "cuda")
            if prefer == "torch":
                return TorchOps(torch, "cpu")
        except ImportError:
            if prefer == "torch":
                raise
    return NumpyOps()


def ratios(ops, x, y, b, f, g, eps, s, rows, dtype, progress=None):
    """(P1)_i / a_i = Σ_j b_j exp((f_i + g_j − s|x_i − y_j|²)/ε) for the rows `rows` (indices into x), in fp64.

    One GEMM per block gives every exponent: with x'_i = (x_i, F_i, 1) and y'_j = (2s/ε·y_j, 1, G_j),
    F_i = (f_i − s|x_i|²)/ε, G_j = log b_j + (g_j − s|y_j|²)/ε, the product ⟨x'_i, y'_j⟩ = (f_i + g_j − C_ij)/ε +
    log b_j = log(P_ij / a_i), at most log of the row's ratio, so exp cannot overflow unless the potentials are far
    off (such a block is summed again as a log-sum-exp in fp64). Then exp in place and a row sum accumulated in fp64.
    The points are centred on their joint mean in fp64 first (translation leaves C unchanged; smaller norms lose
    less to the cancellation in |x|² + |y|² − 2⟨x, y⟩)."""
    centre = 0.5 * (x.astype(np.float64).mean(0) + y.astype(np.float64).mean(0))
    xr = x[rows].astype(np.float64) - centre
    yc = y.astype(np.float64) - centre
    with np.errstate(divide="ignore"):
        log_b = np.log(b.astype(np.float64))
    F = (f[rows].astype(np.float64) - s * (xr * xr).sum(1)) / eps
    G = log_b + (g.astype(np.float64) - s * (yc * yc).sum(1)) / eps
    k, m = len(rows), len(y)
    xa = np.concatenate([xr, F[:, None], np.ones((k, 1))], axis=1)
    ya = np.concatenate([(2.0 * s / eps) * yc, np.ones((m, 1)), G[:, None]], axis=1)
    dt = ops.dtype(dtype)
    X, Y = ops.asarray(xa, dt), ops.asarray(ya, dt)
    del xa, ya
    cols = min(m, 1 << 20)
    tile_rows = max(1, min(k, ops.tile_entries // cols))
    out = np.empty(k, dtype=np.float64)
    previous = None  # end of the first row tile: the projection times the second (the first pays for warm-up)
    for r0 in range(0, k, tile_rows):
        r1 = min(k, r0 + tile_rows)
        acc = np.zeros(r1 - r0, dtype=np.float64)
        for c0 in range(0, m, cols):
            c1 = min(m, c0 + cols)
            part = ops.numpy(ops.exp_row_sums(ops.scores(X[r0:r1], Y[c0:c1])))
            if not np.all(np.isfinite(part)):
                with np.errstate(over="ignore"):
                    part = np.exp(ops.numpy(ops.lse_rows(ops.scores(X[r0:r1], Y[c0:c1]))))
            acc += part
        out[r0:r1] = acc
        if progress and r0 == tile_rows:
            progress((r1 - r0) * m, time.perf_counter() - previous)
        previous = time.perf_counter()
    return out


def side_residual(ops, x, y, a, b, f, g, eps, s, mode, samples, seed, dtype, label, log):
    """‖P1 − a‖₁ for the rows of (x, a): exact over every row ('full'), or estimated from `samples` rows drawn with
    probability a (mean of |r_i/a_i − 1|, with its standard error), as FlashSinkhorn's own check does but with an
    independent seed and more rows. Also ΣP (the plan's mass) the same way."""
    n, m = len(x), len(y)
    if mode == "full":
        rows = np.arange(n)
    else:
        rng = np.random.default_rng(seed)
        p = a.astype(np.float64)
        rows = rng.choice(n, size=samples, replace=True, p=p / p.sum())

    def progress(entries, seconds):
        total = len(rows) * m
        rate = entries / max(seconds, 1e-9)
        log(f"  {label}: {total:.3g} entries at {rate:.3g}/s (second row tile) -> about {total / rate:.1f} s")

    t0 = time.perf_counter()
    ratio_minus_one = ratios(ops, x, y, b, f, g, eps, s, rows, dtype, progress) - 1.0
    ops.sync()
    seconds = time.perf_counter() - t0
    if mode == "full":
        aw = a.astype(np.float64)
        return dict(l1=float(np.sum(aw * np.abs(ratio_minus_one))), se=0.0,
                    mass=float(np.sum(aw * (1.0 + ratio_minus_one))), rows=n, seconds=seconds)
    total_a = float(a.astype(np.float64).sum())
    v = np.abs(ratio_minus_one)
    return dict(l1=total_a * float(v.mean()), se=total_a * float(v.std(ddof=1) / math.sqrt(len(v))),
                mass=total_a * float((1.0 + ratio_minus_one).mean()), rows=int(len(v)), seconds=seconds)


def evaluate(ops, x, y, a, b, f, g, eps, s, mode, samples, seed, dtype, label, log):
    row = side_residual(ops, x, y, a, b, f, g, eps, s, mode, samples, seed, dtype, label + " rows", log)
    col = side_residual(ops, y, x, b, a, g, f, eps, s, mode, samples, seed + 1, dtype, label + " columns", log)
    total_a = float(a.astype(np.float64).sum())
    dual = float(np.dot(a.astype(np.float64), f.astype(np.float64)) + np.dot(b.astype(np.float64),
                                                                              g.astype(np.float64)))
    return dict(mode=mode, dtype=dtype, evaluator=ops.name, row_l1=row["l1"], col_l1=col["l1"],
                row_se=row["se"], col_se=col["se"], sum_l1=(row["l1"] + col["l1"]) / total_a,
                max_l1=max(row["l1"], col["l1"]), mass=row["mass"], dual_cost=dual,
                dual_objective=dual - eps * (row["mass"] - total_a), rows_evaluated=row["rows"],
                seconds=row["seconds"] + col["seconds"])


def choose_mode(mode, n, m, full_limit):
    if mode == "auto":
        return "full" if float(n) * float(m) <= full_limit else "sampled"
    return mode


# ---------------------------------------------------------------------------------------------------------------
# The peer (child process: its crash, hang or out-of-memory must not take the table with it)
# ---------------------------------------------------------------------------------------------------------------

def peer_main(o):
    out = o.outdir
    os.makedirs(out, exist_ok=True)
    record = dict(peer=PEER_NAME, status="started", eps=o.eps, blur=math.sqrt(o.eps), tol=o.tol)
    save_json(os.path.join(out, "peer.json"), record)
    try:
        import torch
        import flash_sinkhorn
        from flash_sinkhorn import SamplesLoss
        from flash_sinkhorn.multiscale import preprocess_coordinates
        record["version"] = getattr(flash_sinkhorn, "__version__", "?")
        record["torch"] = torch.__version__
        record["device"] = torch.cuda.get_device_name(0)
        x, y, a, b = load_points(o.points)
        record.update(n=len(x), m=len(y), d=x.shape[1])
        dev = "cuda"
        X, Y = torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev)
        A, B = torch.from_numpy(a).to(dev), torch.from_numpy(b).to(dev)

        def loss():
            # Full cost |x − y|² (half_cost=False), ε = blur²; the weights as given (they sum to 1).
            return SamplesLoss("sinkhorn", blur=math.sqrt(o.eps), backend="multiscale", tol=o.tol, potentials=True,
                               normalize=False)

        def timed(fn):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            r = fn()
            torch.cuda.synchronize()
            return time.perf_counter() - t0, r

        if o.warmup > 0:
            # Triton compiles (and autotunes) on first use: a small problem of the same shape and ε first.
            gen = torch.Generator(device="cpu").manual_seed(1)
            k = min(o.warmup, len(x), len(y))
            ix = torch.randperm(len(x), generator=gen)[:k].to(dev)
            iy = torch.randperm(len(y), generator=gen)[:k].to(dev)
            w = torch.full((k,), 1.0 / k, device=dev)
            record["status"] = "warming up"
            save_json(os.path.join(out, "peer.json"), record)
            record["warmup_s"], _ = timed(lambda: loss()(w, X[ix].contiguous(), w, Y[iy].contiguous()))
            record["warmup_points"] = k
        torch.cuda.reset_peak_memory_stats()
        record["status"] = "solving"
        save_json(os.path.join(out, "peer.json"), record)
        solver = loss()
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            record["solve_s"], (f, g) = timed(lambda: solver(A, X, B, Y))
        record["warnings"] = [str(w.message)[:400] for w in caught]
        record["peak_bytes"] = int(torch.cuda.max_memory_allocated())
        info = solver.last_multiscale_info
        if info is not None:
            record["info"] = {k: getattr(info, k) for k in ("accepted", "stop", "B", "t", "coarse_cells",
                                                         "schedule_entries", "continuation_updates",
                                                         "fine_updates", "terminal_previews", "returned",
                                                         "returned_step", "detail", "fine_work")
                              if hasattr(info, k)}
            record["info"]["coarse_cells"] = list(record["info"].get("coarse_cells", ()))
            checks = getattr(info, "checks", None) or []
            if checks:
                last = checks[-1]
                record["info"]["last_check"] = {k: v for k, v in last.items()
                                                if isinstance(v, (int, float, str, bool)) or v is None}
        save_npy(os.path.join(out, "f.npy"), f.detach().float().cpu().numpy())
        save_npy(os.path.join(out, "g.npy"), g.detach().float().cpu().numpy())
        # The clouds it solved: centred, TF32-rounded (the same call SamplesLoss makes on the same inputs).
        xp, yp = preprocess_coordinates(X, Y, A.float().contiguous(), B.float().contiguous())
        save_npy(os.path.join(out, "xp.npy"), xp.cpu().numpy())
        save_npy(os.path.join(out, "yp.npy"), yp.cpu().numpy())
        record["status"] = "solved" if record.get("info", {}).get("accepted", True) else "solved, not accepted"
    except Exception as exc:  # the peer's refusal or failure is the result
        text = f"{type(exc).__name__}: {exc}".split("\n")[0][:500]
        oom = "OutOfMemory" in type(exc).__name__ or "out of memory" in text.lower()
        refused = isinstance(exc, (ValueError, NotImplementedError))
        record["status"] = "out of memory" if oom else ("refused" if refused else "failed")
        record["error"] = text
    save_json(os.path.join(out, "peer.json"), record)
    print(json.dumps(record, default=str), flush=True)
    return 0


# ---------------------------------------------------------------------------------------------------------------
# compare / table
# ---------------------------------------------------------------------------------------------------------------

def run_peer_child(o, run, eps, tol, log):
    out = os.path.join(run, "peer")
    cmd = [sys.executable, os.path.abspath(__file__), "peer", os.path.join(run, "points"), out, "--eps", repr(eps),
           "--tol", repr(tol), "--warmup", str(o.warmup)]
    log(f"  peer: {' '.join(cmd)}")
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, timeout=o.peer_timeout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        tail = "\n".join(p.stdout.strip().splitlines()[-5:])
        rc = p.returncode
    except subprocess.TimeoutExpired as exc:
        tail, rc = f"timed out after {o.peer_timeout} s", None
        if exc.stdout:
            tail += ": " + (exc.stdout if isinstance(exc.stdout, str) else exc.stdout.decode(errors="replace"))[-300:]
    wall = time.perf_counter() - t0
    path = os.path.join(out, "peer.json")
    record = json.load(open(path)) if os.path.exists(path) else dict(status="no record")
    if rc is None:
        record["status"] = f"timed out after {o.peer_timeout} s (was {record.get('status')})"
    elif rc != 0:
        record["status"] = f"crashed (exit {rc}, was {record.get('status')})"
        record["error"] = tail[-500:]
    record["child_wall_s"] = wall
    log(f"  peer: {record.get('status')} {record.get('error', '')}")
    return record


def compare_main(o):
    ops = array_ops(o.array)
    log = lambda s: print(s, file=sys.stderr, flush=True)
    for run in o.runs:
        meta = json.load(open(os.path.join(run, "flashot", "solve.json")))
        stdout_json = os.path.join(run, "flashot.json")
        flashot_run = json.load(open(stdout_json)) if os.path.exists(stdout_json) else {}
        x, y, a, b = load_points(os.path.join(run, "points"))
        n, m = len(x), len(y)
        eps, s = float(meta["epsilon"]), float(meta["cost_scale"])
        peer_tol = o.peer_tol if o.peer_tol > 0 else 0.5 * float(meta["tolerance"])
        log(f"{run}: n = {n}, m = {m}, d = {x.shape[1]}, eps = {eps:.6g}, flashot tolerance {meta['tolerance']}, "
            f"peer tol {peer_tol}")
        result = dict(run=run, n=n, m=m, d=int(x.shape[1]), data=meta.get("data"), pair=meta.get("pair"), eps=eps,
                      tolerance=meta["tolerance"], peer_tol=peer_tol,
                      flashot=dict(solve_s=meta["solve_s"], upload_s=meta.get("upload_s"),
                                   total_s=flashot_run.get("total_s"), iterations=meta["iterations"],
                                   converged=meta["converged"], marginal_error=meta["marginal_error"],
                                   dual_cost=meta["dual_cost"], multiscale=meta.get("multiscale")))
        peer = None
        if not o.no_peer:
            if s != 1.0:
                raise SystemExit("the peer comparison needs flashot's cost |x - y|^2 (s = 1)")
            peer = run_peer_child(o, run, eps, peer_tol, log)
            result["peer"] = peer
        mode = choose_mode(o.eval, n, m, o.full_limit)
        if mode != "none":
            f, g = load_potentials(os.path.join(run, "flashot"), n, m)
            log(f"  evaluating flashot ({mode}, {o.dtype}, {ops.name})")
            result["flashot"]["eval"] = evaluate(ops, x, y, a, b, f, g, eps, s, mode, o.samples, o.seed, o.dtype,
                                                 "flashot", log)
            if peer is not None and os.path.exists(os.path.join(run, "peer", "f.npy")) and \
                    peer.get("status", "").startswith("solved"):
                pf, pg = load_potentials(os.path.join(run, "peer"), n, m)
                log(f"  evaluating the peer on the points both were given")
                peer["eval"] = evaluate(ops, x, y, a, b, pf, pg, eps, 1.0, mode, o.samples, o.seed, o.dtype,
                                        "peer", log)
                xp, yp = np.load(os.path.join(run, "peer", "xp.npy")), np.load(os.path.join(run, "peer", "yp.npy"))
                # Sampled: it only tells how much of the peer's residual on the common points is its TF32 rounding.
                log(f"  evaluating the peer on the TF32-rounded centred clouds it solved (sampled)")
                peer["eval_own_cloud"] = evaluate(ops, xp, yp, a, b, pf, pg, eps, 1.0, "sampled", o.samples,
                                                  o.seed, o.dtype, "peer (own cloud)", log)
        with open(o.results, "a") as fh:
            fh.write(json.dumps(result, default=str) + "\n")
        del x, y, a, b
    print_table(o.results)
    return 0


def fmt(v, spec):
    return "—" if v is None else format(v, spec)


def print_table(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    print(f"\nflashot multiscale vs {PEER_NAME}: same points and weights, same ε, cost |x−y|²; residuals from one "
          "exact evaluator: sum = (‖P1−a‖₁ + ‖Pᵀ1−b‖₁) (flashot's tolerance), max = max of the two (the peer's tol); "
          "'±' = standard error of a sampled evaluation")
    head = (f"{'N':>9} {'data':>15} {'flashot s':>10} {'peer s':>9} {'peer/fl':>8} {'fl sum':>9} {'fl max':>9} "
            f"{'peer sum':>9} {'peer max':>9} {'fl dual':>12} {'peer dual':>12} {'peer':>s}")
    print(head)
    for r in rows:
        fl, pe = r["flashot"], r.get("peer") or {}
        fe, pv = fl.get("eval") or {}, pe.get("eval") or {}
        ps = pe.get("solve_s") if pe.get("status", "").startswith("solved") else None
        ratio = ps / fl["solve_s"] if ps and fl.get("solve_s") else None
        se = lambda e: (f"±{max(e.get('row_se', 0), e.get('col_se', 0)):.1e}" if e.get("mode") == "sampled" else "")
        status = pe.get("status", "not run")
        if pe.get("warmup_s") is not None:
            status += f", warm-up/compile {pe['warmup_s']:.1f} s"
        if pe.get("info"):
            status += f", accepted={pe['info'].get('accepted')} stop={pe['info'].get('stop')}"
        if pe.get("error"):
            status += f": {pe['error'][:160]}"
        own = pe.get("eval_own_cloud")
        if own:
            status += f"; on its TF32 cloud (sampled) sum {own['sum_l1']:.2e} max {own['max_l1']:.2e}"
        print(f"{r['n']:>9} {str(r.get('data')) + '/' + str(r.get('pair')):>15} {fl['solve_s']:>10.3f} "
              f"{fmt(ps, '9.3f'):>9} {fmt(ratio, '7.2f') + ('x' if ratio else ''):>8} "
              f"{fmt(fe.get('sum_l1'), '9.2e'):>9} {fmt(fe.get('max_l1'), '9.2e'):>9} "
              f"{fmt(pv.get('sum_l1'), '9.2e'):>9} {fmt(pv.get('max_l1'), '9.2e'):>9} "
              f"{fmt(fe.get('dual_cost', fl.get('dual_cost')), '12.8f'):>12} {fmt(pv.get('dual_cost'), '12.8f'):>12} "
              f"{status}")
        notes = []
        if fe:
            notes.append(f"flashot: {fe['mode']} {fe['dtype']} evaluation {se(fe)} in {fe['seconds']:.1f} s, own "
                         f"report {fl['marginal_error']:.3e} ({fl['iterations']} iterations), dual objective "
                         f"{fe['dual_objective']:.8f}")
        if pv:
            notes.append(f"peer: {pv['mode']} {pv['dtype']} evaluation {se(pv)} in {pv['seconds']:.1f} s, dual "
                         f"objective {pv['dual_objective']:.8f}, peak {pe.get('peak_bytes', 0) / 2**30:.2f} GiB, "
                         f"{(pe.get('info') or {}).get('fine_updates', '?')} fine updates")
        for note in notes:
            print(f"{'':>9}   {note}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)

    def eval_options(p):
        p.add_argument("--eval", choices=("auto", "full", "sampled", "none"), default="auto",
                       help="auto: full when n·m ≤ --full-limit, else sampled")
        p.add_argument("--full-limit", type=float, default=1.01e12)
        p.add_argument("--samples", type=int, default=65536, help="rows (and columns) of a sampled evaluation")
        p.add_argument("--seed", type=int, default=12345)
        p.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                       help="of the score tiles (accumulation across chunks and the residuals are fp64)")
        p.add_argument("--array", choices=("auto", "torch", "numpy"), default="auto",
                       help="auto: torch on CUDA when present, else numpy")

    p = sub.add_parser("evaluate")
    p.add_argument("points"); p.add_argument("potentials")
    eval_options(p)
    p = sub.add_parser("peer")
    p.add_argument("points"); p.add_argument("outdir")
    p.add_argument("--eps", type=float, required=True); p.add_argument("--tol", type=float, required=True)
    p.add_argument("--warmup", type=int, default=65536, help="points per side of the compile warm-up (0: none)")
    p = sub.add_parser("compare")
    p.add_argument("runs", nargs="+")
    p.add_argument("--results", required=True)
    p.add_argument("--peer-tol", type=float, default=0, help="0: half of flashot's tolerance (see the docstring)")
    p.add_argument("--peer-timeout", type=float, default=600)
    p.add_argument("--warmup", type=int, default=65536)
    p.add_argument("--no-peer", action="store_true", help="only the evaluator on flashot's result")
    eval_options(p)
    p = sub.add_parser("table")
    p.add_argument("results")
    o = ap.parse_args()

    if o.command == "peer":
        return peer_main(o)
    if o.command == "compare":
        return compare_main(o)
    if o.command == "table":
        print_table(o.results)
        return 0
    ops = array_ops(o.array)
    meta = json.load(open(os.path.join(o.potentials, "solve.json")))
    x, y, a, b = load_points(o.points)
    f, g = load_potentials(o.potentials, len(x), len(y))
    mode = choose_mode(o.eval, len(x), len(y), o.full_limit)
    r = evaluate(ops, x, y, a, b, f, g, float(meta["epsilon"]), float(meta["cost_scale"]), mode, o.samples, o.seed,
                 o.dtype, "evaluate", lambda s: print(s, file=sys.stderr, flush=True))
    r["reported_marginal_error"] = meta.get("marginal_error")
    r["reported_dual_cost"] = meta.get("dual_cost")
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
