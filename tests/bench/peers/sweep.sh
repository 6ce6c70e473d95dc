#!/bin/bash
# Issue 21's sweep on a GPU machine (tests/bench/peers/sweep.py): flashot (every kernel family that serves d, on
# GPU FLASHOT_GPU) beside FlashSinkhorn 0.4.1 (both schemes, on GPU PEERS_GPU, concurrently when they differ), then
# the ratio table (OUTDIR/sweep.md), OUTDIR/sweep.png and, with TABLE=path, the dispatch table regenerated from the
# measured per-family times (engine/cuda/dispatch_table.inc).
# usage: FLASHOT=build/apps/flashot WHEELS=.peers/wheels [PRESET=reduced|full] [POINTS=file] [OUTDIR=out]
#        [FLASHOT_GPU=0] [PEERS_GPU=1] [BUDGET_S=1e9] [REPEATS=5] [FAMILIES=all|auto|all+auto] [TABLE=engine/cuda/dispatch_table.inc] sweep.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUTDIR=${OUTDIR:-out} PRESET=${PRESET:-reduced} FLASHOT_GPU=${FLASHOT_GPU:-0} PEERS_GPU=${PEERS_GPU:-1}
BUDGET_S=${BUDGET_S:-1000000000} REPEATS=${REPEATS:-5}
mkdir -p "$OUTDIR"; OUTDIR=$(cd "$OUTDIR" && pwd)
nvidia-smi --query-gpu=index,name,clocks.max.sm,memory.total --format=csv,noheader | tee "$OUTDIR/gpu.txt"
points=${POINTS:-$OUTDIR/points.txt}
[[ -n ${POINTS:-} ]] || python3 "$here/sweep.py" points --preset "$PRESET" > "$points"
site=/tmp/flashot-peers-site
if [[ -n ${WHEELS:-} ]]; then
  rm -rf "$site" && mkdir -p "$site"
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target "$site" "$WHEELS"/*.whl
fi
export PYTHONPATH=$site:${PYTHONPATH:-} PYTHONUNBUFFERED=1
rm -f "$OUTDIR/flashot.csv" "$OUTDIR/peers.csv"
CUDA_VISIBLE_DEVICES=$PEERS_GPU python3 "$here/sweep.py" peers --points "$points" --out "$OUTDIR/peers.csv" \
  --repeats "$REPEATS" --budget-s "$BUDGET_S" 2> "$OUTDIR/peers.log" &
peers=$!
[[ $PEERS_GPU == "$FLASHOT_GPU" ]] && wait $peers
CUDA_VISIBLE_DEVICES=$FLASHOT_GPU python3 "$here/sweep.py" flashot --bin "$FLASHOT" --points "$points" \
  --out "$OUTDIR/flashot.csv" --repeats "$REPEATS" --budget-s "$BUDGET_S" --families "${FAMILIES:-all}" \
  2> "$OUTDIR/flashot.log"
wait $peers
python3 "$here/sweep.py" report --flashot "$OUTDIR/flashot.csv" --peers "$OUTDIR/peers.csv" --out "$OUTDIR"
if [[ -n ${TABLE:-} ]]; then
  python3 "$here/sweep.py" table --flashot "$OUTDIR/flashot.csv" --out "$TABLE"
fi
