#!/usr/bin/env bash
# Sets up what the `flashot` command line needs and runs the main job on the bundled sample data: aligns the query
# batch samples/cells_batch_b.h5ad onto the reference batch samples/cells_batch_a.h5ad (obsm X_pca), transfers the
# reference's cell_type labels to every query cell, writes the enriched copy, the coupling and a report, and says
# how good the result is: the agreement of the transferred labels with the query's own known cell types.
# usage: scripts/quickstart.sh   (outputs in quickstart-out/)
# env:   FLASHOT_JOBS (default: the number of cores), FLASHOT_BUILD (default build-quickstart)
# Installs only the CLI's Debian packages (scripts/install-deps.sh cli) and builds only the `flashot` target; the
# CUDA backend is compiled only when a GPU answers `nvidia-smi -L` (and nvcc is found), so a CPU machine compiles
# no CUDA kernel. scripts/test.sh sets up and builds everything.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=${FLASHOT_JOBS:-$(nproc)}
build=${FLASHOT_BUILD:-build-quickstart}
out=quickstart-out
start=$SECONDS
step() { printf 'quickstart: [%s] %s\n' "$1" "$2" >&2; }

step 1/4 "Debian packages for the command line (scripts/install-deps.sh cli)"
bash scripts/install-deps.sh cli

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  cuda=AUTO
  step 2/4 "building flashot with the CUDA backend (a GPU answered nvidia-smi -L; nvcc from PATH or /usr/local/cuda)"
  [[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="$PATH:/usr/local/cuda/bin"
else
  cuda=OFF
  step 2/4 "building flashot, CPU backend only (no GPU answered nvidia-smi -L)"
fi
mkdir -p "$build"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHOT_CUDA="$cuda" -DFLASHOT_GUI=OFF \
  -DFLASHOT_TESTS=OFF -DFLASHOT_BENCHMARKS=OFF >"$build/configure.log" 2>&1 \
  || { cat "$build/configure.log" >&2; exit 1; }
cmake --build "$build" -j "$jobs" --target flashot
echo "quickstart: built $build/apps/flashot ($((SECONDS - start)) s so far)" >&2

step 3/4 "aligning the query batch (2,000 cells) onto the reference batch (2,400 cells) and transferring cell_type"
mkdir -p "$out"
"$build/apps/flashot" align samples/cells_batch_b.h5ad samples/cells_batch_a.h5ad \
  -o "$out/cells_batch_b_aligned.h5ad" --transfer-labels cell_type --compare-labels cell_type \
  --coupling "$out/coupling.h5ad" --report "$out/report.json" --progress lines 2>&1 | tee "$out/align.log" >&2
"$build/apps/flashot" info "$out/cells_batch_b_aligned.h5ad"

step 4/4 "how good: the query's true cell types are known (samples/README.md), so the transferred ones are scored"
agreement=$(grep -o 'label agreement .*' "$out/align.log" || true)
if [[ -z $agreement ]]; then
  echo "quickstart: error: align printed no label agreement (see $out/align.log)" >&2
  exit 1
fi
fraction=$(awk '{print $3}' <<<"$agreement")
if awk -v f="$fraction" 'BEGIN { exit !(f >= 0.90) }'; then verdict="good: 0.94 expected"; else
  verdict="LOW: 0.94 expected, below 0.90 something is wrong"; fi
echo "quickstart: $agreement — $verdict"
echo "quickstart: outputs in $root/$out/ (aligned copy, coupling, report.json); $((SECONDS - start)) s in all"
