"""Issue 21's sweep: flashot beside FlashSinkhorn over d, n, m, eps and data kind, on one machine in one run.

  sweep.py points --preset full|reduced            the (n, m, d, eps, data) list, one `n,m,d,eps,data` line each
  sweep.py flashot --bin FLASHOT --points FILE --out CSV [--repeats R] [--families all|auto]
        times `flashot bench --kernel F` for every kernel family that serves d (engine/cuda/dispatch.hpp)
  sweep.py peers --points FILE --out CSV [--schemes symmetric,alternating]   FlashSinkhorn 0.4.1 (needs torch)
  sweep.py report --flashot CSV --peers CSV --out DIR   ratio table (stdout, DIR/sweep.md), DIR/sweep.png
  sweep.py table --flashot CSV [CSV...] --out engine/cuda/dispatch_table.inc
        the dispatch table from the measured per-family times (eps = 0.1, normal data)
Same problem on both sides: fp32 points ~ N(0,1) (or the clustered mixture below), weights U(0,1) + 0.1
normalised, fixed eps, ITERS iterations, median of repeats after a warm-up (as tests/bench/peers/peers_bench.py).
Clustered data: 8 centres ~ N(0, 9 I), each point a uniformly chosen centre + N(0, I/16) (apps/bench.cpp).
"""
import argparse, csv, math, os, subprocess, sys, time

REGISTER_MAX_D, TENSOR_MAX_D = 16, 256  # engine/cuda/dispatch.hpp (past 128: Hopper only)
TENSOR_BIAS_MAX_D = 30  # engine/cuda/dispatch.hpp kTensorBiasMaxD
FIELDS_F = ["n", "m", "d", "eps", "data", "kernel", "median_ms", "status"]
FIELDS_P = ["n", "m", "d", "eps", "data", "method", "median_ms", "status"]


def sweep_dims():
    return list(range(1, 17)) + list(range(20, 65, 4)) + [96, 128, 192, 256]


def preset(name):
    pts = []
    if name == "full":
        for n in (100_000, 10_000, 1_000_000):
            pts += [(n, n, d, 0.1, "normal") for d in sweep_dims()]
        for d in (3, 16, 64):
            pts += [(10_000, 1_000_000, d, 0.1, "normal"), (1_000_000, 10_000, d, 0.1, "normal")]
            pts += [(100_000, 100_000, d, e, "normal") for e in (0.01, 1.0)]
            pts += [(100_000, 100_000, d, 0.1, "clusters")]
    elif name == "reduced":
        pts += [(100_000, 100_000, d, 0.1, "normal") for d in list(range(1, 17)) + [20, 24, 32, 48, 64]]
        pts += [(10_000, 10_000, d, 0.1, "normal") for d in (3, 6, 8, 12, 16, 32, 64)]
        pts += [(10_000, 1_000_000, 16, 0.1, "normal"), (1_000_000, 10_000, 16, 0.1, "normal")]
        pts += [(100_000, 100_000, 8, 0.1, "clusters"), (100_000, 100_000, 8, 1.0, "normal"),
                (100_000, 100_000, 8, 0.01, "normal")]
    else:
        raise SystemExit(f"unknown preset {name!r} (full, reduced)")
    return pts


def read_points(path):
    out = []
    for line in open(path):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        n, m, d, eps, data = line.split(",")
        out.append((int(n), int(m), int(d), float(eps), data))
    return out


def families(d):
    fam = []
    if d <= REGISTER_MAX_D:
        fam.append("register")
    if d <= TENSOR_MAX_D:
        fam.append("tensor")
    if d <= TENSOR_BIAS_MAX_D:
        fam.append("tensor-bias")
    fam.append("tiled")
    return fam


def append(path, fields, row):
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        if new:
            w.writeheader()
        w.writerow(row)
    print(",".join(str(row[k]) for k in fields), file=sys.stderr, flush=True)


def run_flashot(o):
    deadline = time.time() + o.budget_s
    for (n, m, d, eps, data) in read_points(o.points):
        fams = ["auto"] if o.families == "auto" else families(d) + (["auto"] if o.families == "all+auto" else [])
        for fam in fams:
            row = dict(n=n, m=m, d=d, eps=eps, data=data, kernel=fam, median_ms="nan", status="ok")
            if time.time() > deadline:
                row["status"] = "skipped (time budget)"
                append(o.out, FIELDS_F, row)
                continue
            cmd = [o.bin, "bench", "--backend", "cuda", "--n", str(n), "--m", str(m), "--d", str(d), "--eps", str(eps),
                   "--iters", str(o.iters), "--repeats", str(o.repeats), "--data", data, "--kernel", fam, "--csv"]
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=o.timeout_s)
                if r.returncode != 0:
                    row["status"] = "failed: " + (r.stderr.strip().splitlines() or ["?"])[-1][:200].replace(",", ";")
                else:
                    row["median_ms"] = float(r.stdout.strip().splitlines()[-1].split(",")[6])
            except subprocess.TimeoutExpired:
                row["status"] = f"timeout {o.timeout_s}s"
            append(o.out, FIELDS_F, row)


def make_problem(torch, n, m, d, data, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    def pts(k):
        if data == "normal":
            return torch.randn(k, d, device="cuda", generator=g)
        centres = 3.0 * torch.randn(8, d, device="cuda", generator=g)
        idx = torch.randint(0, 8, (k,), device="cuda", generator=g)
        return centres[idx] + 0.25 * torch.randn(k, d, device="cuda", generator=g)
    x, y = pts(n), pts(m)
    a = torch.rand(n, device="cuda", generator=g) + 0.1
    b = torch.rand(m, device="cuda", generator=g) + 0.1
    return x, y, a / a.sum(), b / b.sum()


def run_peers(o):
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from peers_bench import flash, timed
    deadline = time.time() + o.budget_s
    for (n, m, d, eps, data) in read_points(o.points):
        x = y = a = b = None
        for scheme in o.schemes.split(","):
            row = dict(n=n, m=m, d=d, eps=eps, data=data, method=f"flash_{scheme}", median_ms="nan", status="ok")
            if time.time() > deadline:
                row["status"] = "skipped (time budget)"
                append(o.out, FIELDS_P, row)
                continue
            try:
                if x is None:
                    x, y, a, b = make_problem(torch, n, m, d, data)
                f = flash(scheme, eps, o.iters, True)
                row["median_ms"], _ = timed(lambda: f(x, y, a, b), warmup=2, rep=o.repeats)
            except Exception as exc:  # a peer that cannot run a point is reported, not fatal
                row["status"] = f"failed: {type(exc).__name__}: {exc}"[:200].replace(",", ";").replace("\n", " ")
            append(o.out, FIELDS_P, row)
        del x, y, a, b
        torch.cuda.empty_cache()


def load(path, key):
    rows = {}
    if not path or not os.path.exists(path):
        return rows
    for r in csv.DictReader(open(path)):
        if r["status"] != "ok":
            continue
        k = (int(r["n"]), int(r["m"]), int(r["d"]), float(r["eps"]), r["data"])
        rows.setdefault(k, {})[r[key]] = float(r["median_ms"])
    return rows


def report(o):
    fl, pe = load(o.flashot, "kernel"), load(o.peers, "method")
    os.makedirs(o.out, exist_ok=True)
    lines = ["| n | m | d | ε | data | register ms | tensor ms | tiled ms | flashot best (family) | FlashSinkhorn best ms "
             "| ratio |", "|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    plot = {}
    for k in sorted(set(fl) | set(pe), key=lambda k: (k[4], k[3], k[0], k[1], k[2])):
        n, m, d, eps, data = k
        f, p = fl.get(k, {}), pe.get(k, {})
        fams = {x: v for x, v in f.items() if x != "auto"}
        best = min(fams.items(), key=lambda kv: kv[1]) if fams else (None, math.nan)
        if "auto" in f and (best[0] is None or f["auto"] < best[1]):
            best = ("auto", f["auto"])
        fs = min(p.values()) if p else math.nan
        ratio = fs / best[1] if best[0] and p else math.nan
        cell = lambda x: f"{f[x]:.2f}" if x in f else "–"
        lines.append(f"| {n} | {m} | {d} | {eps:g} | {data} | {cell('register')} | {cell('tensor')} | {cell('tiled')} | "
                     f"{best[1]:.2f} ({best[0]}) | {fs:.2f} | {ratio:.2f}× |")
        if data == "normal" and eps == 0.1 and n == m:
            plot.setdefault(n, []).append((d, ratio))
    text = "\n".join(lines)
    print(text)
    open(os.path.join(o.out, "sweep.md"), "w").write(text + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 4))
        for n, pts in sorted(plot.items()):
            pts.sort()
            ax.plot([d for d, _ in pts], [r for _, r in pts], "o-", label=f"n = m = {n}")
        ax.axhline(2.0, color="gray", ls="--", lw=1, label="target 2×")
        ax.set_xscale("log", base=2); ax.set_xlabel("d"); ax.set_ylabel("FlashSinkhorn ms / flashot ms")
        ax.set_title("flashot vs FlashSinkhorn 0.4.1, 10 iterations, ε = 0.1, N(0,1)"); ax.legend(); ax.grid(alpha=.3)
        fig.tight_layout(); fig.savefig(os.path.join(o.out, "sweep.png"), dpi=120)
    except ImportError:
        print("# matplotlib not available: no sweep.png", file=sys.stderr)


def table(o):
    fams = {"register": "kRegister", "tensor": "kTensor", "tensor-bias": "kTensorBias", "tiled": "kTiled"}
    rows = []
    for path in o.flashot:
        for k, v in load(path, "kernel").items():
            n, m, d, eps, data = k
            if eps != 0.1 or data != "normal":
                continue
            rows += [(d, n, m, fam, ms) for fam, ms in v.items() if fam in fams]
    rows.sort()
    with open(o.out + ".tmp", "w") as f:
        f.write("// Measured kernel-family timings (engine/cuda/dispatch.hpp reads them): {d, n, m, kernel, ms for 10\n"
                "// symmetric iterations at eps = 0.1 on N(0,1) points}. Written by tests/bench/peers/sweep.py table from\n"
                f"// {', '.join(os.path.basename(p) for p in o.flashot)}{(' (' + o.note + ')') if o.note else ''}.\n")
        for d, n, m, fam, ms in rows:
            f.write(f"{{{d}, {n}, {m}, ScoreKernel::{fams[fam]}, {ms:.3f}}},\n")
    os.replace(o.out + ".tmp", o.out)
    print(f"{len(rows)} entries -> {o.out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("points"); p.add_argument("--preset", default="reduced")
    p = sub.add_parser("flashot")
    p.add_argument("--bin", required=True); p.add_argument("--points", required=True); p.add_argument("--out", required=True)
    p.add_argument("--iters", type=int, default=10); p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--families", default="all", choices=["all", "auto", "all+auto"])
    p.add_argument("--timeout-s", type=int, default=120); p.add_argument("--budget-s", type=float, default=1e9)
    p = sub.add_parser("peers")
    p.add_argument("--points", required=True); p.add_argument("--out", required=True)
    p.add_argument("--iters", type=int, default=10); p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--budget-s", type=float, default=1e9)
    p.add_argument("--schemes", default="symmetric,alternating",
                   help="FlashSinkhorn's schemes to time, comma-separated (each compiles its Triton kernels per point)")
    p = sub.add_parser("report"); p.add_argument("--flashot"); p.add_argument("--peers"); p.add_argument("--out", required=True)
    p = sub.add_parser("table"); p.add_argument("--flashot", nargs="+", required=True); p.add_argument("--out", required=True)
    p.add_argument("--note", default="")
    o = ap.parse_args()
    if o.cmd == "points":
        for pt in preset(o.preset):
            print(",".join(str(v) for v in pt))
    elif o.cmd == "flashot":
        run_flashot(o)
    elif o.cmd == "peers":
        run_peers(o)
    elif o.cmd == "report":
        report(o)
    else:
        table(o)


if __name__ == "__main__":
    main()
