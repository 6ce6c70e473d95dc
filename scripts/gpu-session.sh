#!/bin/bash
# One device call that checks a build as a whole on a machine with two H200s (docs/benchmarks.md, "Multi-GPU"):
# 1. the CUDA engine tests on 2 GPUs (FLASHOT_REQUIRE_CUDA=1), 2. the every-d sweep, FlashSinkhorn on GPU 1 beside
# flashot's kernel families on GPU 0 (tests/bench/peers/sweep.py, reduced preset), 3. the sharded tests as two MPI ranks,
# 4. 1-vs-2-GPU scaling, 5. fused GW at 100k, 6. compute-sanitizer. Each step has a time limit (T_* variables).
# Carry .gpu (gpu.tar.xz from scripts/pack-gpu-build.sh and mpi.tar.xz from scripts/pack-mpi.sh, one MPI-linked build)
# and .peers (the FlashSinkhorn wheel from tests/bench/peers/fetch-peer-wheels.sh); OUT receives the CSVs, the sweep
# table and plot, and logs.tgz.
# usage (GPU machine, repository root): [T_TESTS=120 T_SWEEP=140 T_MPI=80 T_GW=50] OUT=dir scripts/gpu-session.sh
set -uo pipefail
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
G=.gpu
python3 -c "import tarfile; tarfile.open('$G/gpu.tar.xz').extractall('$G'); tarfile.open('$G/mpi.tar.xz').extractall('$G', filter='tar')" || exit 1
cp -r $G/mpi/openmpi $G/gpu/ && cp $G/mpi/tests/engine/flashot_engine_tests $G/gpu/tests/engine/flashot_engine_tests
B=$G/gpu; L=$OUT/logs; mkdir -p $L
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,memory.total --format=csv,noheader | tee $OUT/gpu.txt
el "1. CUDA tests, 2 GPUs"
BUILD=$B GPUS=2 OUT=$L/t STEPS="tests" TEST_TIMEOUT=${T_TESTS:-170} bash scripts/gpu-scaling.sh 2>&1 | grep -vE "^\[       OK|^\[ RUN" | tail -45
el "2. every-d sweep: FlashSinkhorn on GPU 1, flashot on GPU 0"
site=/tmp/flashot-peers-site; mkdir -p $site
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target $site .peers/wheels/flash_sinkhorn-*.whl
S=tests/bench/peers; python3 $S/sweep.py points --preset reduced > /tmp/points.txt
( export LD_LIBRARY_PATH=$B/lib PYTHONPATH=$site; CUDA_VISIBLE_DEVICES=1 timeout ${T_SWEEP:-170} python3 $S/sweep.py peers --points /tmp/points.txt \
   --out $OUT/peers.csv --repeats 5 --budget-s $(( ${T_SWEEP:-170} - 15 )) 2> $L/peers.log ) & pp=$!
( export LD_LIBRARY_PATH=$B/lib; CUDA_VISIBLE_DEVICES=0 timeout ${T_SWEEP:-170} python3 $S/sweep.py flashot --bin $B/apps/flashot --points /tmp/points.txt \
   --out $OUT/flashot.csv --repeats 5 --families all+auto --budget-s $(( ${T_SWEEP:-170} - 15 )) --timeout-s 30 2> $L/flashot.log )
wait $pp
python3 $S/sweep.py report --flashot $OUT/flashot.csv --peers $OUT/peers.csv --out $OUT > $L/report.log 2>&1; tail -45 $L/report.log
tar czf $OUT/logs.tgz -C $OUT logs
el "3. MPI ranks"
BUILD=$B GPUS=2 OUT=$L/m STEPS="mpi" MPI_TIMEOUT=${T_MPI:-100} bash scripts/gpu-scaling.sh 2>&1 | tail -30
el "4. scaling"
BUILD=$B GPUS=2 OUT=$L/c STEPS="scaling" REPEATS=3 bash scripts/gpu-scaling.sh 2>&1 | tail -12
export LD_LIBRARY_PATH=$B/lib
tar czf $OUT/logs.tgz -C $OUT logs
el "5. GW"
timeout ${T_GW:-60} $B/tests/bench/flashot_gw_bench --n 100000 --m 100000 --e 50 --backend cuda > $L/gw.log 2>&1; echo "gw exit $?"; head -5 $L/gw.log; tail -12 $L/gw.log
el "7. sanitizer"
BUILD=$B GPUS=2 OUT=$L/s STEPS="sanitize" bash scripts/gpu-scaling.sh 2>&1 | tail -20
el "done"
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
