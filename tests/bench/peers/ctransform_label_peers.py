"""FlashSinkhorn 0.4.1's hard c-transform (flash_sinkhorn.c_transform_fwd) and label-augmented solve
(SamplesLoss(label_cost_matrix=W, lambda_y=λ)) on the problem flashot_ctransform_label_bench times: x, y ~ N(0,1)
(n = m), random weights, ψ ~ 0.1·N(0,1), labels uniform in [0, L), W = 1 − I, fixed ε and iterations. CUDA events,
warm-up, median of 10. Appends CSV lines `method,n,m,d,eps,iters,median_ms,peak_mib` to --out.
usage: python3 ctransform_label_peers.py --out FILE [--sizes 100000] [--ct-dims 3,64] [--label-dims 64]
       [--classes 10] [--lambda 1] [--eps 0.1] [--iters 10]
"""
import argparse, inspect, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from peers_bench import problem, timed  # noqa: E402


def row(out, name, n, d, eps, iters, ms, mib):
    line = f"{name},{n},{n},{d},{eps},{iters},{ms:.4f},{mib:.1f}"
    with open(out, "a") as f:
        f.write(line + "\n")
    print(line, file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000"); ap.add_argument("--ct-dims", default="3,64")
    ap.add_argument("--label-dims", default="64"); ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--lambda", dest="lam", type=float, default=1.0)
    ap.add_argument("--eps", type=float, default=0.1); ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--out", required=True)
    o = ap.parse_args()
    from flash_sinkhorn import SamplesLoss, c_transform_fwd
    for n in map(int, o.sizes.split(",")):
        for d in [int(v) for v in o.ct_dims.split(",") if v]:
            x, y, _, _ = problem(n, d)
            g = torch.Generator(device="cuda").manual_seed(5)
            psi = 0.1 * torch.randn(n, device="cuda", generator=g)
            for tf32 in (True, False):
                name = f"flash_ctransform_{'tf32' if tf32 else 'fp32'}"
                try:
                    ms, mib = timed(lambda: c_transform_fwd(x, y, psi, cost_scale=1.0, allow_tf32=tf32))
                    row(o.out, name, n, d, 0, 0, ms, mib)
                except Exception as exc:
                    print(f"# {name} n={n} d={d} failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        for d in [int(v) for v in o.label_dims.split(",") if v]:
            x, y, a, b = problem(n, d)
            g = torch.Generator(device="cuda").manual_seed(6)
            lx = torch.randint(0, o.classes, (n,), device="cuda", generator=g)
            ly = torch.randint(0, o.classes, (n,), device="cuda", generator=g)
            W = 1.0 - torch.eye(o.classes, device="cuda")
            for backend in ("symmetric", "alternating"):
                name = f"flash_label_{backend}"
                try:
                    wanted = dict(backend=backend, use_epsilon_scaling=False, eps=o.eps, n_iters=o.iters,
                                  debias=False, potentials=False, normalize=False, autotune=True,
                                  last_extrapolation=False, label_cost_matrix=W, lambda_x=1.0, lambda_y=o.lam)
                    accepted = inspect.signature(SamplesLoss.__init__).parameters
                    loss = SamplesLoss("sinkhorn", **{k: v for k, v in wanted.items() if k in accepted})
                    ms, mib = timed(lambda: loss(a, x, b, y, label_x=lx, label_y=ly))
                    row(o.out, name, n, d, o.eps, o.iters, ms, mib)
                except Exception as exc:
                    print(f"# {name} n={n} d={d} failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
