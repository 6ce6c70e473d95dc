#!/usr/bin/env python3
"""The CPU benchmark of docs/benchmarks.md in one run: flashot's exp2 ceiling and per-iteration times
(flashot_cpu_bench), then POT and GeomLoss on the same problem sizes (cpu_peers.py, run with the Python that has
them), then a ratio table in Markdown.

  tests/bench/run_cpu_bench.py --bench build/tests/bench/flashot_cpu_bench --python /tmp/benchvenv/bin/python
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", required=True, help="path of flashot_cpu_bench")
    p.add_argument("--python", default=sys.executable, help="a Python with pot, geomloss and torch")
    p.add_argument("--n", type=int, nargs="+", default=[10000, 20000])
    p.add_argument("--d", type=int, nargs="+", default=[3, 50])
    args = p.parse_args()

    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    sizes = "|".join(f"n:{n}/d:{d}/" for n in args.n for d in args.d)
    out = subprocess.run([args.bench, "--benchmark_format=json", f"--benchmark_filter=Exp2Ceiling|{sizes}"],
                         check=True, capture_output=True, text=True).stdout
    runs = json.loads(out)["benchmarks"]
    ceiling = {}
    flashot = {}
    for r in runs:
        name = r["name"]
        if name.startswith("BM_Exp2Ceiling"):
            ceiling[name.split("/")[1] + "/" + name.split("/")[2]] = r["items_per_second"]
        elif name.startswith("BM_Iteration"):
            f = dict(part.split(":") for part in name.split("/")[1:] if ":" in part)
            flashot[(int(f["n"]), int(f["d"]), int(f["warm"]))] = (r["real_time"], r["cpu_ms"])
            device = r.get("label", "")
    for k, v in ceiling.items():
        print(f"exp2 ceiling {k}: {v:.3g} per second")
    best = max(ceiling.values())
    peers = {}
    cmd = [args.python, os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpu_peers.py"),
           "--n", *map(str, args.n), "--d", *map(str, args.d)]
    for line in subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines():
        method, n, _, d, _, _, wall, cpu = line.split(",")
        peers[(method, int(n), int(d))] = (float(wall), float(cpu))

    print(f"\nflashot CPU backend: {device}. Each cell: wall ms per iteration / process CPU ms per iteration "
          f"(all threads). Ratios are of wall times, then of CPU times.\n")
    print("| n = m | d | flashot from zero | flashot near fixed point | exp ceiling, 2·n·m exps (wall ms) "
          "| POT sinkhorn_log | GeomLoss tensorized | POT / flashot | GeomLoss / flashot |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in args.n:
        for d in args.d:
            cold, warm = flashot[(n, d, 0)], flashot[(n, d, 1)]
            floor = 2.0 * n * n / best * 1e3
            pot, geo = peers[("pot", n, d)], peers[("geomloss", n, d)]
            cell = lambda t: f"{t[0]:.0f} / {t[1]:.0f}"
            ratio = lambda t: f"{t[0] / cold[0]:.1f}× / {t[1] / cold[1]:.1f}×"
            print(f"| {n} | {d} | {cell(cold)} | {cell(warm)} | {floor:.0f} | {cell(pot)} | {cell(geo)} "
                  f"| {ratio(pot)} | {ratio(geo)} |")


if __name__ == "__main__":
    sys.exit(main())
