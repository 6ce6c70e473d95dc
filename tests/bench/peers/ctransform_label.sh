#!/bin/bash
# Side by side on an NVIDIA GPU: FlashSinkhorn 0.4.1's hard c-transform and label-cost solve
# (ctransform_label_peers.py) and flashot's (flashot_ctransform_label_bench), same problem, then a ratio table.
# c-transform: n = m = SIZES, d in CT_DIMS; label cost: d in LABEL_DIMS, L = CLASSES, λ = 1, W = 1 − I, eps = 0.1,
# ITERS iterations (symmetric and alternating), no convergence checks.
#
# usage: WHEELS=DIR (or PEERS_PYTHONPATH=dirs) BUILD=build-dir [SIZES=100000] [CT_DIMS=3,64] [LABEL_DIMS=64]
#        [CLASSES=10] [ITERS=10] [OUTDIR=out-ctl] ctransform_label.sh   (CT_DIMS= or LABEL_DIMS= empty: skip that part)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
SIZES=${SIZES:-100000} CT_DIMS=${CT_DIMS-3,64} LABEL_DIMS=${LABEL_DIMS-64} CLASSES=${CLASSES:-10}
ITERS=${ITERS:-10} OUTDIR=${OUTDIR:-out-ctl}
bench=${BUILD:?set BUILD (the CUDA build directory)}/tests/bench/flashot_ctransform_label_bench
mkdir -p "$OUTDIR"; OUTDIR=$(cd "$OUTDIR" && pwd)
if [[ -n ${PEERS_PYTHONPATH:-} ]]; then
  export PYTHONPATH=$PEERS_PYTHONPATH:${PYTHONPATH:-}
else
  site=/tmp/flashot-peers-site
  rm -rf "$site" && mkdir -p "$site"
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target "$site" \
    "${WHEELS:?set WHEELS (or PEERS_PYTHONPATH)}"/* || exit 1
  export PYTHONPATH=$site:${PYTHONPATH:-}
fi
export PYTHONUNBUFFERED=1
echo "method,n,m,d,eps,iters,median_ms" > "$OUTDIR/flashot.csv"
for n in ${SIZES//,/ }; do
  for d in ${CT_DIMS//,/ }; do "$bench" --backend cuda --mode ctransform --n "$n" --d "$d" >> "$OUTDIR/flashot.csv"; done
  for d in ${LABEL_DIMS//,/ }; do
    "$bench" --backend cuda --mode label --n "$n" --d "$d" --classes "$CLASSES" --lambda 1 --eps 0.1 --iters "$ITERS" \
      >> "$OUTDIR/flashot.csv"
  done
done
# flashot first: a peer run cut short by a time limit still leaves flashot's figures.
echo "method,n,m,d,eps,iters,median_ms,peak_mib" > "$OUTDIR/peers.csv"
python3 "$here/ctransform_label_peers.py" --out "$OUTDIR/peers.csv" --sizes "$SIZES" --ct-dims "$CT_DIMS" \
  --label-dims "$LABEL_DIMS" --classes "$CLASSES" --iters "$ITERS" --eps 0.1
python3 - "$OUTDIR" <<'PY'
import csv, os, sys
out = sys.argv[1]
peers, mine = {}, {}
for r in csv.DictReader(open(os.path.join(out, "peers.csv"))):
    peers[(r["method"], int(r["n"]), int(r["d"]))] = float(r["median_ms"])
for r in csv.DictReader(open(os.path.join(out, "flashot.csv"))):
    mine[(r["method"], int(r["n"]), int(r["d"]))] = float(r["median_ms"])
print(f"{'what':<22} {'n':>7} {'d':>4} {'flashot ms':>11} {'FlashSinkhorn ms':>17} {'ratio':>7}")
pairs = [("flashot_ctransform", "flash_ctransform_tf32", "c-transform vs tf32"),
         ("flashot_ctransform", "flash_ctransform_fp32", "c-transform vs fp32"),
         ("flashot_label_symmetric", "flash_label_symmetric", "label symmetric"),
         ("flashot_label_alternating", "flash_label_alternating", "label alternating")]
for (m, n, d), ms in sorted(mine.items()):
    for ours, theirs, what in pairs:
        if m == ours and (theirs, n, d) in peers:
            fs = peers[(theirs, n, d)]
            print(f"{what:<22} {n:>7} {d:>4} {ms:>11.3f} {fs:>17.3f} {fs / ms:>6.2f}x")
PY
