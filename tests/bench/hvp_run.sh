#!/usr/bin/env bash
# The HVP comparison of issue 7 on a GPU machine: flashot_hvp_bench (flashot, --backend cuda) then hvp_peer.py
# (FlashSinkhorn on the same inputs) for n = 100k, d ∈ {3, 64}. Usage: tests/bench/hvp_run.sh BUILD_DIR [OUT_DIR]
# Needs: BUILD_DIR/tests/bench/flashot_hvp_bench (built with FLASHOT_CUDA=ON and tests/bench/hvp.cmake included)
# and a Python with torch (CUDA), triton and flash-sinkhorn.
set -euo pipefail
build=${1:?usage: hvp_run.sh BUILD_DIR [OUT_DIR]}
out=${2:-hvp_results}
here=$(cd "$(dirname "$0")" && pwd)
bench=$(find "$build" -name flashot_hvp_bench -type f -perm -u+x | head -n 1)
[ -n "$bench" ] || { echo "flashot_hvp_bench not found under $build" >&2; exit 1; }
for d in 3 64; do
  "$bench" --n 100000 --d "$d" --backend cuda --epsilon 0.1 --cg-tolerance 1e-6 --repeat 3 --out "$out/d$d"
  python3 "$here/hvp_peer.py" "$out/d$d" --repeat 3
done
