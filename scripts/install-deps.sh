#!/usr/bin/env bash
# Installs every Debian package flashot needs to build, test and run (Debian 12). Idempotent.
# The CUDA toolkit is not a Debian package here: nvcc is expected at /usr/local/cuda/bin (the build then compiles
# the CUDA backend too); without it the build is CPU-only.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  libeigen3-dev libsleef-dev libtbb-dev
  libhdf5-dev hdf5-plugin-lzf
  libboost-program-options-dev
  qt6-base-dev libqt6opengl6-dev libgl1-mesa-dev libgl1-mesa-dri libvtk9-dev
  xvfb xauth
  clang libclang-rt-14-dev libomp-dev libopenmpi-dev
  python3 python3-venv python3-pip python3-dev
  assimp-testmodels nlohmann-json3-dev openmpi-bin
  python3-anndata
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=(); [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  echo "install-deps: installing ${missing[*]}" >&2
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
