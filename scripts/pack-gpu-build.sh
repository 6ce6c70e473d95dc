#!/usr/bin/env bash
# Packs a CUDA build made on a machine with the full toolchain for a GPU machine that lacks SLEEF/OpenMP (the lent
# H200 image): the engine tests, the CLI and the CUDA benchmarks, stripped, with libgomp (and libsleef, which only
# the CPU benchmark links) beside them, as one
# xz tarball (10-25 MB, under the device tool's 64 MiB carry limit), after running the host-only CUDA tests. On the
# GPU machine, from the repository root:
#   python3 -c "import tarfile; tarfile.open('CARRY/gpu.tar.xz').extractall('CARRY')"
#   OUT=$OUT/gpu-check BUILD=CARRY/gpu bash scripts/gpu-check.sh          (gpu-check sets LD_LIBRARY_PATH itself)
# Build first, e.g.:
#   cmake -B build-sm90 -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DFLASHOT_IO=OFF \
#     -DFLASHOT_GUI=OFF -DFLASHOT_CUDA=ON -DFLASHOT_MPI_TESTS=OFF
#   ninja -C build-sm90 flashot_engine_tests flashot flashot_cuda_iterate_bench flashot_wgmma_probe flashot_hvp_bench flashot_gw_bench \
#     flashot_batch_bench flashot_ctransform_label_bench flashot_multiscale_pattern_bench
# usage: scripts/pack-gpu-build.sh [BUILD=build-sm90] [CARRY=build-carry]   (CARRY must be git-ignored: build*/)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-sm90}
carry=${2:-build-carry}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/gpu/apps" "$stage/gpu/tests/engine" "$stage/gpu/tests/bench" "$stage/gpu/lib" "$carry"
packed=0
for f in apps/flashot tests/engine/flashot_engine_tests tests/bench/flashot_cuda_iterate_bench \
         tests/bench/flashot_wgmma_probe tests/bench/flashot_hvp_bench tests/bench/flashot_gw_bench \
         tests/bench/flashot_batch_bench tests/bench/flashot_multiscale_pattern_bench \
         tests/bench/flashot_ctransform_label_bench; do
  if [[ -f $build/$f ]]; then
    strip -o "$stage/gpu/$f" "$build/$f"
    packed=$((packed + 1))
  fi
done
if [[ ! -f $build/tests/engine/flashot_engine_tests || ! -f $build/apps/flashot ]]; then
  echo "pack-gpu-build: $build has no flashot_engine_tests or flashot (build them first)" >&2
  exit 1
fi
# The CUDA backend's host-only tests (tiling plans) first: a hang or failure there costs nothing here and a whole
# device call there (it did once: docs/benchmarks.md, fifth session).
if ! timeout 120 "$build/tests/engine/flashot_engine_tests" --gtest_filter='CudaTiling*' > /dev/null 2>&1; then
  echo "pack-gpu-build: the host-only CudaTiling tests fail or hang in $build (run them for details)" >&2
  exit 1
fi
for lib in libsleef.so.3 libgomp.so.1; do
  path=$(ldconfig -p | awk -v l="$lib" '$1 == l && !found {print $NF; found = 1}')
  [[ -n $path ]] || { echo "pack-gpu-build: $lib not found on this machine" >&2; exit 1; }
  cp -L "$path" "$stage/gpu/lib/"
done
tar -C "$stage" -cJf "$carry/gpu.tar.xz" gpu
echo "pack-gpu-build: $packed programs from $build -> $carry/gpu.tar.xz ($(du -h "$carry/gpu.tar.xz" | cut -f1))"
