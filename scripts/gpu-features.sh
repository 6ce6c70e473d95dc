#!/bin/bash
# One device call that checks the features beyond the dense solver on an H200 machine (docs/benchmarks.md): the CUDA
# engine tests (FLASHOT_REQUIRE_CUDA=1, every GPU of the machine), the sharded tests as MPI ranks, batches and the
# hard c-transform / label cost beside FlashSinkhorn, a multiscale solve, the Python package on CUDA tensors, fused
# GW, compute-sanitizer. Each step has a time limit (T_* variables); STEPS picks steps.
# Carry .gpu (gpu.tar.xz from scripts/pack-gpu-build.sh, mpi.tar.xz from scripts/pack-mpi.sh), .peers/fs (the
# FlashSinkhorn wheel alone, from tests/bench/peers/fetch-peer-wheels.sh) and, for the Python step, .pywheel (a
# cp312 wheel built with FLASHOT_IO=OFF, FLASHOT_CUDA=ON: docs/python.md, with libsleef.so.3 beside it; the Python
# step needs nothing else, so it may run in a call of its own when everything together exceeds the carry limit).
# usage (GPU machine, repository root): OUT=dir [STEPS="tests mpi batch ctl multiscale python gw sanitize"]
#        (sanitize_new instead of sanitize: only the memcheck of the kernels beyond the dense ones)
#        scripts/gpu-features.sh
set -uo pipefail
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
STEPS=${STEPS:-tests mpi batch ctl multiscale python gw sanitize}
has() { [[ " $STEPS " == *" $1 "* ]]; }
G=.gpu
if [[ -f $G/gpu.tar.xz ]]; then
  python3 -c "import tarfile; tarfile.open('$G/gpu.tar.xz').extractall('$G')" || exit 1
fi
if [[ -f $G/mpi.tar.xz ]]; then
  python3 -c "import tarfile; tarfile.open('$G/mpi.tar.xz').extractall('$G', filter='tar')" || exit 1
  cp -r $G/mpi/openmpi $G/gpu/ && cp $G/mpi/tests/engine/flashot_engine_tests $G/gpu/tests/engine/flashot_engine_tests
fi
B=$G/gpu; L=$OUT/logs; mkdir -p $L
GPUS=$(nvidia-smi -L | wc -l)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,memory.total --format=csv,noheader | tee $OUT/gpu.txt
if has tests; then
  el "CUDA engine tests, $GPUS GPU(s)"
  BUILD=$B GPUS=$GPUS OUT=$L/t STEPS="tests" TEST_TIMEOUT=${T_TESTS:-170} bash scripts/gpu-scaling.sh 2>&1 |
    grep -vE "^\[       OK|^\[ RUN" | tail -40
fi
if has mpi && [[ $GPUS -ge 2 && -d $B/openmpi ]]; then
  el "MPI ranks"
  BUILD=$B GPUS=$GPUS OUT=$L/m STEPS="mpi" MPI_TIMEOUT=${T_MPI:-90} bash scripts/gpu-scaling.sh 2>&1 | tail -12
fi
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if has batch; then
  el "batches beside FlashSinkhorn (B = 64, n = m = 4096)"
  WHEELS=.peers/fs OUTDIR=$OUT/batch timeout ${T_BATCH:-80} bash tests/bench/peers/batch.sh \
    $B/tests/bench/flashot_batch_bench > $L/batch.log 2>&1; echo "batch exit $?"; tail -6 $L/batch.log
fi
if has ctl; then
  el "hard c-transform and label cost beside FlashSinkhorn (n = m = 100k)"
  WHEELS=.peers/fs BUILD=$B OUTDIR=$OUT/ctl timeout ${T_CTL:-100} bash tests/bench/peers/ctransform_label.sh \
    > $L/ctl.log 2>&1; echo "ctl exit $?"; tail -12 $L/ctl.log
fi
if has multiscale; then
  el "multiscale: ${MS_N:-1000000} points, d = 3, sphere and its deformation, blur 1% of the diameter"
  for ms in on off; do
    timeout ${T_MS:-45} $B/apps/flashot bench --end-to-end --n ${MS_N:-1000000} --d 3 --data sphere --pair deformed \
      --blur-relative 0.01 --tolerance 1e-2 --multiscale $ms --backend cuda ${MS_ARGS:---scheme alternating} \
      > $L/ms-$ms.log 2>&1
    echo "multiscale $ms exit $?"; tail -8 $L/ms-$ms.log
  done
fi
if has python && compgen -G ".pywheel/*.whl" > /dev/null; then
  el "Python package on CUDA tensors"
  site=/tmp/flashot-site; rm -rf $site; mkdir -p $site
  python3 -m pip install -q --no-index --no-deps --no-compile --target $site .pywheel/*.whl &&
    cp .pywheel/libsleef.so.3 $site/ 2>/dev/null
  ( export PYTHONPATH=$site LD_LIBRARY_PATH=$site:$LD_LIBRARY_PATH FLASHOT_REQUIRE_CUDA=1
    timeout ${T_PY:-90} python3 -m pytest -q -p no:cacheprovider tests/python 2>&1 | tail -15
    timeout 60 python3 tests/bench/python_overhead.py --backend cuda --cli $B/apps/flashot 2>&1 | tail -18
    timeout 40 python3 tests/bench/python_overhead.py --backend cuda --torch 2>&1 | tail -18 ) > $L/python.log 2>&1
  cat $L/python.log
fi
if has gw; then
  el "fused GW, 100k x 100k (50-d embedding + 2-d coordinates)"
  timeout ${T_GW:-60} $B/tests/bench/flashot_gw_bench --n 100000 --m 100000 --e 50 --backend cuda > $L/gw.log 2>&1
  echo "gw exit $?"; tail -12 $L/gw.log
fi
if has sanitize || has sanitize_new; then
  el "compute-sanitizer"
  # sanitize_new: only the kernels beyond the dense ones (below), when the dense set is unchanged.
  has sanitize && BUILD=$B GPUS=$GPUS OUT=$L/s STEPS="sanitize" bash scripts/gpu-scaling.sh 2>&1 | tail -12
  # The kernels beyond the dense ones: block-sparse lists, batches, the hard c-transform, device inputs.
  FLASHOT_REQUIRE_CUDA=1 timeout ${T_SAN:-100} compute-sanitizer --tool memcheck --error-exitcode 3 \
    $B/tests/engine/flashot_engine_tests --gtest_filter="${SAN_FILTER:-Backends/BlockBackend.*cuda*:Backends/BatchTest.*cuda*:*CTransform*cuda*:DeviceInput.*}" \
    > $L/memcheck-new.log 2>&1; echo "memcheck (new kernels) exit $?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $L/memcheck-new.log | tail -5
fi
el "done"
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
