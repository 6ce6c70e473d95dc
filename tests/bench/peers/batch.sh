#!/bin/bash
# Batches side by side (issue 23, docs/benchmarks.md): flashot's batched solve (tests/bench/batch_bench.cpp) in
# both modes — from host arrays (solve_batch) and from device-resident arrays uploaded before the timed calls
# (solve_batch_on_device, like the peer's CUDA tensors) — against FlashSinkhorn's batched (B, N, D) solve
# (peers_bench.py --batch), same sizes, ε and iterations, then the ratios scheme by scheme (flashot's symmetric vs
# FlashSinkhorn's symmetric backend, alternating vs alternating) for each mode.
#
# usage: WHEELS=DIR (or PEERS_PYTHONPATH=dirs) [B=64] [N=4096] [DIMS=3,64] [ITERS=10] [EPS=0.1] [OUTDIR=out-batch] \
#        [RESIDENT=0,1] tests/bench/peers/batch.sh BUILD/tests/bench/flashot_batch_bench
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=${1:?usage: batch.sh BUILD/tests/bench/flashot_batch_bench}
B=${B:-64} N=${N:-4096} DIMS=${DIMS:-3,64} ITERS=${ITERS:-10} EPS=${EPS:-0.1} OUTDIR=${OUTDIR:-out-batch}
RESIDENT=${RESIDENT:-0,1}
mkdir -p "$OUTDIR"; OUTDIR=$(cd "$OUTDIR" && pwd)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee "$OUTDIR/gpu.txt"
if [[ -n ${PEERS_PYTHONPATH:-} ]]; then
  export PYTHONPATH=$PEERS_PYTHONPATH:${PYTHONPATH:-}
else
  site=/tmp/flashot-peers-site
  rm -rf "$site" && mkdir -p "$site"
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target "$site" \
    "${WHEELS:?set WHEELS (or PEERS_PYTHONPATH)}"/flash_sinkhorn* || exit 1
  export PYTHONPATH=$site:${PYTHONPATH:-}
fi
export PYTHONUNBUFFERED=1
# flashot first: a peer run cut short by a time limit still leaves flashot's figures. The breakdown (fixed part of
# a call, per iteration) goes to stderr and to breakdown.txt.
"$bench" --batch "$B" --n "$N" --d "$DIMS" --eps "$EPS" --iters "$ITERS" --resident "$RESIDENT" --breakdown 1 \
  2> >(tee "$OUTDIR/breakdown.txt" >&2) |
  tee "$OUTDIR/flashot.csv"
echo "method,B,n,m,d,eps,iters,median_ms,peak_mib" > "$OUTDIR/peers.csv"
python3 "$here/peers_bench.py" --out "$OUTDIR/peers.csv" --batch "$B" --sizes "$N" --dims "$DIMS" --eps "$EPS" \
  --iters "$ITERS" --no-keops ${PEERS_ARGS:-}
python3 - "$OUTDIR" <<'PY'
import csv, os, sys
out = sys.argv[1]
peers = {(r["method"], int(r["d"])): float(r["median_ms"]) for r in csv.DictReader(open(os.path.join(out, "peers.csv")))}
# inputs: "host" (solve_batch from host arrays: the upload is timed) or "device" (solve_batch_on_device from
# device arrays uploaded before the timed calls, as the peer's CUDA tensors).
print(f"{'scheme':>12} {'inputs':>7} {'B':>4} {'n':>6} {'d':>4} {'flashot ms':>11} {'FlashSinkhorn ms':>17} "
      f"{'ratio':>7}")
for r in csv.DictReader(open(os.path.join(out, "flashot.csv"))):
    method = r["method"].removeprefix("flashot_batch_")
    inputs = "device" if method.startswith("resident_") else "host"
    scheme = method.removeprefix("resident_")
    d, ms = int(r["d"]), float(r["median_ms"])
    fs = peers.get((f"flash_{scheme}_batch", d), float("nan"))
    print(f"{scheme:>12} {inputs:>7} {r['B']:>4} {r['n']:>6} {d:>4} {ms:>11.3f} {fs:>17.3f} {fs / ms:>6.2f}x")
PY
