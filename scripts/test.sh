#!/usr/bin/env bash
# Sets everything up and runs every test: Debian packages, a Python venv with anndata/h5py/plyfile (PyPI) for the
# cross-checks, the full build (CUDA compiled for sm_90 when nvcc is present; it cannot run without a GPU), ctest,
# the Python package (`pip install .` into that venv, CPU backend) and its pytest suite, then the engine suites
# again under AddressSanitizer + UndefinedBehaviorSanitizer, and the fuzz targets briefly.
# usage: scripts/test.sh            (from the repository root or anywhere)
# env:   FLASHOT_JOBS (default 2), FLASHOT_BUILD (default build), FLASHOT_SKIP_SANITIZERS=1, FLASHOT_SKIP_FUZZ=1,
#        FLASHOT_SKIP_PYTHON=1
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=${FLASHOT_JOBS:-2}
build=${FLASHOT_BUILD:-build}
step() { printf '\n==== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

step "dependencies"
bash scripts/install-deps.sh
step "python environment"
bash scripts/python-env.sh "$root/$build-python"
python_args=(-DFLASHOT_PYTHON="$root/$build-python/bin/python" -DFLASHOT_PYTHON_OLD_ANNDATA=/usr/bin/python3)

step "configure + build ($build)"
cuda_args=()
if command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  cuda_args=(-DFLASHOT_CUDA=ON -DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
             -DCMAKE_CUDA_ARCHITECTURES=90)
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" "${python_args[@]}"
cmake --build "$build" -j "$jobs"

step "ctest"
ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 900

if [[ ${FLASHOT_SKIP_PYTHON:-0} != 1 ]]; then
  step "python package: pip install . into $build-python, pytest tests/python"
  # CPU backend only: the CUDA engine is compiled once above; a second nvcc build for the module would double the
  # CI time, and CI has no GPU to run it on (docs/python.md says how to build the CUDA wheel). The build folder is
  # kept ($build-pymod), so a second run rebuilds only what changed.
  "$root/$build-python/bin/python" -m pip install --quiet pytest tqdm
  CMAKE_BUILD_PARALLEL_LEVEL=$jobs "$root/$build-python/bin/python" -m pip install --quiet \
    -C build-dir="$root/$build-pymod" -C cmake.define.FLASHOT_CUDA=OFF "$root"
  (cd "$root" && FLASHOT_CLI="$root/$build/apps/flashot" FLASHOT_REQUIRE_CLI=1 \
     "$root/$build-python/bin/python" -m pytest -q -p no:cacheprovider tests/python)
fi

if [[ ${FLASHOT_SKIP_SANITIZERS:-0} != 1 ]]; then
  step "engine tests under ASan + UBSan"
  cmake -S . -B "$build-asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASHOT_SANITIZE=address,undefined \
    -DFLASHOT_CUDA=OFF -DFLASHOT_IO=OFF -DFLASHOT_GUI=OFF -DFLASHOT_BENCHMARKS=OFF
  cmake --build "$build-asan" -j "$jobs" --target flashot_engine_tests
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 "$build-asan/tests/engine/flashot_engine_tests"
fi

if [[ ${FLASHOT_SKIP_FUZZ:-0} != 1 ]]; then
  step "fuzz targets (brief, clang + libFuzzer + ASan)"
  # seeds from real writers (anndata of every era, h5py, pbmc68k, plyfile, assimp's PLY models), made here
  bash tests/fuzz/make_real_seeds.sh "$root/$build-fuzz-seeds" "$root/$build-python/bin/python" /usr/bin/python3
  CC=clang CXX=clang++ cmake -S . -B "$build-fuzz" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASHOT_FUZZ=ON \
    -DFLASHOT_CUDA=OFF -DFLASHOT_GUI=OFF -DFLASHOT_BENCHMARKS=OFF -DFLASHOT_TESTS=ON \
    -DFLASHOT_FUZZ_RUNS="${FLASHOT_FUZZ_RUNS:-2000}" -DFLASHOT_FUZZ_EXTRA_SEEDS="$root/$build-fuzz-seeds"
  cmake --build "$build-fuzz" -j "$jobs" --target fuzz_ply fuzz_h5ad fuzz_zarr
  ctest --test-dir "$build-fuzz" --output-on-failure -R '^fuzz_' --timeout 600
fi
step "all tests passed"
