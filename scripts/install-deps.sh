#!/usr/bin/env bash
# Installs the Debian packages flashot needs (Debian 12), for one profile. Idempotent; --no-install-recommends.
# usage: scripts/install-deps.sh [cli|all]
#   cli  what the `flashot` command line needs to build and run (scripts/quickstart.sh): a C++20 compiler, CMake,
#        Ninja, HDF5 (+ its LZF filter), zstd, c-blosc and zlib (zarr stores), Boost.Program_options, Eigen,
#        nlohmann-json
#   all  (default) everything to build, test and run: the above plus GoogleTest/benchmark (and SLEEF for the CPU
#        benchmark's exp2 ceiling), Qt 6 + VTK 9 for
#        flashot-gui, Xvfb, clang (fuzzing), OpenMPI (the multi-rank test), Python (scripts/test.sh)
# The CUDA toolkit is not a Debian package here: nvcc is expected at /usr/local/cuda/bin (the build then compiles
# the CUDA backend too); without it the build is CPU-only.
set -euo pipefail
profile=${1:-all}
cli=(
  build-essential cmake ninja-build
  libhdf5-dev hdf5-plugin-lzf
  libzstd-dev libblosc-dev zlib1g-dev
  libboost-program-options-dev libeigen3-dev nlohmann-json3-dev
)
rest=(
  pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev libsleef-dev
  libtbb-dev
  qt6-base-dev libqt6opengl6-dev libgl1-mesa-dev libgl1-mesa-dri libvtk9-dev
  xvfb xauth
  clang libclang-rt-14-dev libomp-dev libopenmpi-dev
  python3 python3-venv python3-pip python3-dev
  assimp-testmodels openmpi-bin
  python3-anndata
)
case "$profile" in
  cli) packages=("${cli[@]}") ;;
  all) packages=("${cli[@]}" "${rest[@]}") ;;
  *) echo "install-deps: unknown profile '$profile' (cli or all)" >&2; exit 2 ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: the ${#packages[@]} packages of profile '$profile' are installed already" >&2
  exit 0
fi
sudo_cmd=(); [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
"${sudo_cmd[@]}" apt-get update -q >/dev/null
# What apt will do, dependencies included, before it does it.
plan=$(LC_ALL=C apt-get install -s -q --no-install-recommends "${missing[@]}")
count=$(grep -c '^Inst ' <<<"$plan" || true)
echo "install-deps: installing ${#missing[@]} packages of profile '$profile' (${count} with their dependencies): ${missing[*]}" >&2
log=$(mktemp)
if ! DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" \
     >"$log" 2>&1; then
  cat "$log" >&2
  rm -f "$log"
  exit 1
fi
grep -E '^(Need to get|After this operation)' "$log" | sed 's/^/install-deps: /' >&2 || true
rm -f "$log"
