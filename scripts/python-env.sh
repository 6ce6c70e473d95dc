#!/usr/bin/env bash
# Creates the Python environment the io tests use as an oracle (files nobody here wrote):
#   DIR/bin/python with the latest PyPI anndata, h5py, pandas, numpy, scipy and plyfile, and
#   DIR/data/10x_pbmc68k_reduced.h5ad taken from a scanpy wheel (1.12.x up to 1.12.3: newer wheels ship it as
#   .zarr.zip). The wheel is downloaded, not installed: scanpy itself is not needed.
# Usage: scripts/python-env.sh DIR   then configure with -DFLASHOT_PYTHON=DIR/bin/python
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
dir=$1
python=${PYTHON:-python3}

"$python" -m venv "$dir"
"$dir/bin/python" -m pip install --quiet --upgrade pip
"$dir/bin/python" -m pip install --quiet --upgrade anndata h5py pandas numpy scipy plyfile

mkdir -p "$dir/data"
if [[ ! -s "$dir/data/10x_pbmc68k_reduced.h5ad" ]]; then
  wheels=$(mktemp -d)
  trap 'rm -rf "$wheels"' EXIT
  # The wheel is pure Python; --python-version lets a 3.11 interpreter fetch it although scanpy 1.12 asks for 3.12.
  "$dir/bin/python" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --dest "$wheels" 'scanpy>=1.12,<=1.12.3'
  wheel=$(ls "$wheels"/scanpy-*.whl)
  echo "python-env: 10x_pbmc68k_reduced.h5ad from $(basename "$wheel")"
  "$dir/bin/python" - "$wheel" "$dir/data" <<'PY'
import pathlib, sys, zipfile
wheel, dest = sys.argv[1], pathlib.Path(sys.argv[2])
member = "scanpy/datasets/10x_pbmc68k_reduced.h5ad"
with zipfile.ZipFile(wheel) as z:
    data = z.read(member)
tmp = dest / "10x_pbmc68k_reduced.h5ad.tmp"
tmp.write_bytes(data)
tmp.rename(dest / "10x_pbmc68k_reduced.h5ad")
PY
fi

"$dir/bin/python" - <<'PY'
import anndata, h5py, numpy, pandas, scipy, plyfile
print(f"python-env: anndata {anndata.__version__}, h5py {h5py.__version__}, pandas {pandas.__version__}, "
      f"numpy {numpy.__version__}, scipy {scipy.__version__}")
PY
