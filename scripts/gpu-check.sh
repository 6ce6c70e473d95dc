#!/bin/bash
# The whole GPU check of flashot, in one command, on a machine with an NVIDIA GPU:
#   1. build build-gpu (engine tests + the `flashot` CLI, no io/GUI) unless it is already there and starts;
#   2. the engine test suites on the CUDA backend with FLASHOT_REQUIRE_CUDA=1 (a skip is a failure);
#   3. compute-sanitizer memcheck and racecheck on small cases;
#   4. the backend's own timings (tests/bench/cuda_iterate_bench.cpp) and `flashot bench` at the issue's sizes;
#   5. tests/bench/peers/peers.sh (FlashSinkhorn, GeomLoss/KeOps) against `flashot bench`, when peer wheels are given;
#   6. the Hessian-vector-product comparison with FlashSinkhorn (tests/bench/hvp_run.sh), when peer wheels are given;
#   7. the end-to-end job of issue 3: 1M x 1M, d = 50, epsilon-scaling to 1e-3, barycentric projection (E2E=1).
# Logs go to $OUT (default: gpu-check-out/). Steps can be skipped: TESTS=0 SANITIZE=0 BENCH=0 PEERS=0 HVP=0 E2E=0;
# SANITIZE_TOOLS (default "memcheck racecheck"), PEERS_ARGS (e.g. --no-keops) and STEP_TIMEOUT (seconds per step,
# default 600) bound a run on a leased machine. The engine links NCCL (libnccl.so.2): on a machine without it in
# the loader's path, the copy inside PyTorch's nvidia-nccl wheel is used.
# usage: [OUT=dir] [BUILD=build-gpu] [PEERS_DIR=.peers] [SIZES=100000,10000] [DIMS=3,64] scripts/gpu-check.sh
#
# A GPU machine without SLEEF/OpenMP development files (the lent H200 image) cannot configure flashot itself: build
# on a machine that can, carry the build folder, and put the shared libraries the binaries need beside them:
#   cmake -B build-gpu -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DFLASHOT_IO=OFF -DFLASHOT_GUI=OFF -DFLASHOT_CUDA=ON -DFLASHOT_MPI_TESTS=OFF
#   ninja -C build-gpu flashot_engine_tests flashot flashot_cuda_iterate_bench flashot_hvp_bench
#   mkdir -p build-gpu/lib && cp -L /lib/x86_64-linux-gnu/{libsleef.so.3,libgomp.so.1} build-gpu/lib/
# (scripts/pack-gpu-build.sh does the carrying part: stripped programs and those libraries in one xz tarball.)
# Peers: bash tests/bench/peers/fetch-peer-wheels.sh .peers/wheels (.peers is git-ignored; the scripts run from tests/bench/peers/).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-check-out}
BUILD=${BUILD:-build-gpu}
PEERS_DIR=${PEERS_DIR:-.peers}
SIZES=${SIZES:-100000,10000}
DIMS=${DIMS:-3,64}
mkdir -p "$OUT"
status=0
step() { echo; echo "==== $*"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"

export LD_LIBRARY_PATH=$PWD/$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if ! ldconfig -p 2>/dev/null | grep -q libnccl.so.2; then
  nccl_lib=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
  [[ -n $nccl_lib ]] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$nccl_lib
fi
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
limit=${STEP_TIMEOUT:-600}
tests=$BUILD/tests/engine/flashot_engine_tests
cli=$BUILD/apps/flashot
if ! "$tests" --gtest_list_tests > /dev/null 2>&1 || ! "$cli" --help > /dev/null 2>&1; then
  step "build ($BUILD)"
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DFLASHOT_IO=OFF -DFLASHOT_GUI=OFF -DFLASHOT_CUDA=ON -DFLASHOT_MPI_TESTS=OFF \
    > "$OUT/build.log" 2>&1 && ninja -C "$BUILD" flashot_engine_tests flashot flashot_cuda_iterate_bench flashot_hvp_bench >> "$OUT/build.log" 2>&1 \
    || { echo "build failed: see $OUT/build.log"; tail -30 "$OUT/build.log"; exit 1; }
fi

if [[ ${TESTS:-1} == 1 ]]; then
  step "engine tests on CUDA (FLASHOT_REQUIRE_CUDA=1)"
  FLASHOT_REQUIRE_CUDA=1 timeout "$limit" "$tests" --gtest_filter="${TEST_FILTER:-*cuda*:*Cuda*}" 2>&1 | tee "$OUT/tests.log" | \
    grep -E "^\[  (FAILED|PASSED|SKIPPED) |^\[==========\]|Failure|error" | head -60
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
  # The screened cases run both kernel families themselves (CudaTuning::warpgroup_kernels true and false).
fi

if [[ ${SANITIZE:-1} == 1 ]]; then
  small='Backends/ReferenceTest.*/cuda_balanced_symmetric_scaling_d3:Backends/ReferenceTest.*/cuda_embedding_d50:Dimensions/CudaStartFarTest.*:CudaBackend.Apply*:CudaBackend.ScreenedSmall*'
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
    step "compute-sanitizer $tool"
    FLASHOT_REQUIRE_CUDA=1 timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 3 "$tests" --gtest_filter="$small" \
      > "$OUT/sanitizer-$tool.log" 2>&1
    rc=$?
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) " "$OUT/sanitizer-$tool.log" | head -8
    [[ $rc == 0 ]] || { echo "compute-sanitizer $tool: exit $rc"; status=1; }
  done
fi

if [[ ${BENCH:-1} == 1 ]]; then
  if [[ -x $BUILD/tests/bench/flashot_wgmma_probe ]]; then
    step "warpgroup probe (wgmma layouts; screening sweep: wgmma vs mma.sync, staged bytes)"
    timeout "$limit" "$BUILD/tests/bench/flashot_wgmma_probe" 2>&1 | tee "$OUT/wgmma-probe.log"
  fi
  step "backend timings (iterate as one graph, softmin, apply)"
  if [[ -x $BUILD/tests/bench/flashot_cuda_iterate_bench ]]; then
    "$BUILD/tests/bench/flashot_cuda_iterate_bench" ${SIZES//,/ } -- ${DIMS//,/ } 2>&1 | tee "$OUT/iterate-bench.log"
  fi
  step "flashot bench"
  for d in ${DIMS//,/ }; do for n in ${SIZES//,/ }; do for scheme in symmetric alternating; do
    "$cli" bench --n "$n" --m "$n" --d "$d" --eps 0.1 --iters 10 --backend cuda --scheme "$scheme" --csv \
      2>&1 | tee -a "$OUT/flashot-bench.log"
  done; done; done
fi

if [[ ${PEERS:-1} == 1 && -d $PEERS_DIR/wheels ]]; then
  step "peers.sh"
  WHEELS=$PEERS_DIR/wheels SIZES=$SIZES DIMS=$DIMS OUTDIR="$OUT/peers" \
    PEERS_ARGS=${PEERS_ARGS:-} FLASHOT_BENCH="$BUILD/apps/flashot bench --backend cuda" \
    timeout "$limit" bash tests/bench/peers/peers.sh 2>&1 | tee "$OUT/peers.log"
  step "flashot bench at TF32-class precision (FlashSinkhorn's dot products are TF32)"
  for d in ${DIMS//,/ }; do for n in ${SIZES//,/ }; do
    [[ $d -ge 16 ]] && timeout "$limit" "$cli" bench --n "$n" --m "$n" --d "$d" --eps 0.1 --iters 10 --backend cuda \
      --precision tf32 --csv 2>&1 | tee -a "$OUT/flashot-bench-tf32.log"
  done; done
fi

if [[ ${HVP:-1} == 1 && -d $PEERS_DIR/wheels ]]; then
  step "Hessian-vector products vs FlashSinkhorn (tests/bench/hvp_run.sh)"
  site=/tmp/flashot-peers-site  # where peers.sh installs the wheels
  [[ -d $site/flash_sinkhorn ]] || python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile \
    --target "$site" "$PEERS_DIR"/wheels/*
  PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} timeout "$limit" bash tests/bench/hvp_run.sh "$BUILD" "$OUT/hvp" 2>&1 | \
    tee "$OUT/hvp.log"
fi
if [[ ${E2E:-1} == 1 ]]; then
  step "end to end: 1M x 1M, d = 50, eps = ${E2E_EPS:-4}"
  timeout "$limit" "$cli" bench --n 1000000 --d 50 --eps "${E2E_EPS:-4}" --end-to-end --scheme alternating \
    --backend cuda 2>&1 | tee "$OUT/end-to-end.log"
fi
exit $status
