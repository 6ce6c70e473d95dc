#!/bin/bash
# The multi-GPU check of docs/multi-gpu.md, in one command, on a machine with two or more NVIDIA GPUs:
#   1. the CUDA engine tests with FLASHOT_REQUIRE_CUDA=1 and FLASHOT_TEST_GPUS=G (the NCCL layouts included);
#   2. the multi-process path: ShardRanks as G processes with the Open MPI launcher's variables, bootstrapped through
#      a file (no MPI on the lent image; with MPI: mpirun -np G ... --gtest_filter='ShardRanks*');
#   3. compute-sanitizer memcheck on small one-GPU and two-GPU cases, racecheck on one GPU;
#   4. scaling: `flashot bench` on 1 and G GPUs, strong (n = m = 1M, d = 3 and 64) and weak (500k source rows per
#      GPU, m = 1M), 10 iterations at ε = 0.1, default precision;
#   5. one GPU at n = 10k / 100k, d = 3 / 64 against a second build (BASE, e.g. main's) in the same run.
# usage: BUILD=dir [BASE=dir] [OUT=dir] [GPUS=2] [STEPS="smoke scaling single tests ranks sanitize"] scripts/gpu-scaling.sh
# (steps run in the order given; smoke: the two-GPU shard tests alone, with a short limit, before any long run)
# BUILD and BASE hold tests/engine/flashot_engine_tests, apps/flashot and lib/ (scripts/pack-gpu-build.sh's layout).
set -uo pipefail
OUT=${OUT:-gpu-scaling-out}
GPUS=${GPUS:-2}
STEPS=${STEPS:-smoke scaling single tests ranks sanitize}
REPEATS=${REPEATS:-3}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if ! ldconfig -p 2>/dev/null | grep -q libnccl.so.2; then
  nccl_lib=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
  [[ -n $nccl_lib ]] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$nccl_lib
fi
tests=$BUILD/tests/engine/flashot_engine_tests
flashot=$BUILD/apps/flashot
status=0
has() { [[ " $STEPS " == *" $1 "* ]]; }
step() { echo; echo "==== $* ($(date -u +%H:%M:%S))"; }
summary() { grep -E "^\[  (FAILED|PASSED|SKIPPED) |^\[==========\]|Failure|error|ERROR SUMMARY|RACECHECK SUMMARY" | head -${1:-40}; }

step "devices"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"

do_tests() {
  step "CUDA engine tests (FLASHOT_REQUIRE_CUDA=1 FLASHOT_TEST_GPUS=$GPUS)"
  FLASHOT_REQUIRE_CUDA=1 FLASHOT_TEST_GPUS=$GPUS timeout 200 "$tests" --gtest_filter="${TEST_FILTER:-*cuda*:*Cuda*}" \
    > "$OUT/tests.log" 2>&1
  rc=$?; summary 60 < "$OUT/tests.log"; [[ $rc == 0 ]] || { echo "tests: exit $rc"; status=1; }
}

do_ranks() {
  step "ShardRanks as $GPUS processes (file bootstrap)"
  rv=$(mktemp -d)
  pids=()
  for ((r = 0; r < GPUS; ++r)); do
    OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=$GPUS OMPI_COMM_WORLD_LOCAL_RANK=$r FLASHOT_TEST_RENDEZVOUS=$rv \
      FLASHOT_REQUIRE_CUDA=1 timeout 90 "$tests" --gtest_filter='ShardRanks*' > "$OUT/ranks-$r.log" 2>&1 &
    pids+=($!)
  done
  for ((r = 0; r < GPUS; ++r)); do
    wait "${pids[$r]}"; rc=$?
    echo "rank $r: exit $rc"; summary 8 < "$OUT/ranks-$r.log"
    [[ $rc == 0 ]] || status=1
  done
}

do_sanitize() {
  one='Backends/ReferenceTest.*/cuda_balanced_symmetric_scaling_d3:Backends/ReferenceTest.*/cuda_embedding_d50:CudaBackend.ScreenedSmall*'
  two='Shards/ShardedProblemTest.*/cuda_nccl_2_shards_to_tolerance_d50:Shards/ShardedProblemTest.*/cuda_nccl_2_shards_semi_unbalanced_alternating'
  step "compute-sanitizer memcheck (one GPU)"
  FLASHOT_REQUIRE_CUDA=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$tests" --gtest_filter="$one" > "$OUT/memcheck.log" 2>&1
  rc=$?; summary 12 < "$OUT/memcheck.log"; [[ $rc == 0 ]] || { echo "memcheck: exit $rc"; status=1; }
  # NCCL's own CUDA calls return errors it expects (peer access already enabled, 704; a probe, 209): API errors are
  # not reported for the two-GPU cases, memory errors are.
  step "compute-sanitizer memcheck (two GPUs, NCCL)"
  FLASHOT_REQUIRE_CUDA=1 FLASHOT_TEST_GPUS=$GPUS timeout 120 compute-sanitizer --tool memcheck --report-api-errors no \
    --error-exitcode 3 "$tests" --gtest_filter="$two" > "$OUT/memcheck2.log" 2>&1
  rc=$?; summary 12 < "$OUT/memcheck2.log"; [[ $rc == 0 ]] || { echo "memcheck (two GPUs): exit $rc"; status=1; }
  step "compute-sanitizer racecheck (one GPU)"
  FLASHOT_REQUIRE_CUDA=1 timeout 50 compute-sanitizer --tool racecheck --error-exitcode 3 "$tests" \
    --gtest_filter='CudaBackend.ScreenedSmall*' > "$OUT/racecheck.log" 2>&1
  rc=$?; summary 8 < "$OUT/racecheck.log"; [[ $rc == 0 ]] || { echo "racecheck: exit $rc"; status=1; }
}

bench() {  # label build gpus n m d
  local ms
  ms=$(timeout 120 "$2/apps/flashot" bench --backend cuda --gpus "$3" --n "$4" --m "$5" --d "$6" --eps 0.1 --iters 10 \
         --repeats "$REPEATS" --csv 2>>"$OUT/bench.err" | tail -1 | awk -F, '{print $NF}')
  echo "$1,gpus=$3,n=$4,m=$5,d=$6,median_ms=${ms:-failed}" | tee -a "$OUT/bench.csv"
}

do_scaling() {
  step "scaling: 1 vs $GPUS GPUs, 10 iterations, eps 0.1"
  for d in 3 64; do
    bench strong "$BUILD" 1 1000000 1000000 $d
    bench strong "$BUILD" "$GPUS" 1000000 1000000 $d
    bench weak "$BUILD" 1 500000 1000000 $d
    bench weak "$BUILD" "$GPUS" $((500000 * GPUS)) 1000000 $d
  done
}

do_single() {
  step "one GPU: this build vs BASE"
  for n in 10000 100000; do
    for d in 3 64; do
      bench single "$BUILD" 1 $n $n $d
      [[ -n ${BASE:-} ]] && LD_LIBRARY_PATH=$BASE/lib:$LD_LIBRARY_PATH bench base "$BASE" 1 $n $n $d
    done
  done
  # the order reversed once, so that warm-up order does not decide
  for d in 3 64; do
    [[ -n ${BASE:-} ]] && LD_LIBRARY_PATH=$BASE/lib:$LD_LIBRARY_PATH bench base "$BASE" 1 10000 10000 $d
    bench single "$BUILD" 1 10000 10000 $d
  done
}

do_smoke() {
  step "smoke: two-GPU shard tests"
  FLASHOT_REQUIRE_CUDA=1 FLASHOT_TEST_GPUS=$GPUS timeout 90 "$tests" --gtest_filter='Shards/ShardedProblemTest.*cuda_nccl*' \
    > "$OUT/smoke.log" 2>&1
  rc=$?; summary 30 < "$OUT/smoke.log"; [[ $rc == 0 ]] || { echo "smoke: exit $rc"; status=1; }
}

for s in $STEPS; do "do_$s"; done

step "summary"
cat "$OUT/bench.csv" 2>/dev/null
exit $status
