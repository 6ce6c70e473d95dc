#!/usr/bin/env bash
# Sets everything up and runs the main job on the bundled sample data: aligns the query batch
# samples/cells_batch_b.h5ad onto the reference batch samples/cells_batch_a.h5ad (obsm X_pca), transfers the
# reference's cell_type labels to every query cell, and writes the enriched copy, the report and a summary.
# usage: scripts/quickstart.sh   (outputs in quickstart-out/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=${FLASHOT_JOBS:-2}
build=${FLASHOT_BUILD:-build}
bash scripts/install-deps.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs" --target flashot
mkdir -p quickstart-out
"$build/apps/flashot" align samples/cells_batch_b.h5ad samples/cells_batch_a.h5ad \
  -o quickstart-out/cells_batch_b_aligned.h5ad --transfer-labels cell_type \
  --coupling quickstart-out/coupling.h5ad --report quickstart-out/report.json
"$build/apps/flashot" info quickstart-out/cells_batch_b_aligned.h5ad
echo "quickstart: outputs in $root/quickstart-out/ (aligned copy, coupling, report.json)"
