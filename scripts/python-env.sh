#!/usr/bin/env bash
# Creates the Python environment the io tests use as an oracle (files nobody here wrote):
#   DIR/bin/python with the latest PyPI anndata, h5py, pandas, numpy, scipy, plyfile and POT (the fused GW
#   oracle of tests/engine/gromov_test.cpp), and
#   DIR/data/10x_pbmc68k_reduced.h5ad taken from a scanpy wheel (1.12.x up to 1.12.3: newer wheels ship it as
#   .zarr.zip). The wheel is downloaded, not installed: scanpy itself is not needed.
#   DIR/pandas3/bin/python with anndata >= 0.13 and pandas >= 3, used only by the tests that read files written by
#   them and have them read what flashot writes. anndata 0.13 needs Python >= 3.12 (its Requires-Python; pip on
#   Debian 12's 3.11 sees 0.12.19 as the latest, and anndata 0.12 pins pandas < 3), so this venv is made only where
#   such a Python exists: $PYTHON_PANDAS3, else python3.13/python3.12 on PATH, else pyenv's 3.12+ builds.
#   Without one it says so, and the pandas-3 tests are not built.
# Usage: scripts/python-env.sh DIR   then configure with -DFLASHOT_PYTHON=DIR/bin/python (tests/io/CMakeLists.txt
#        finds DIR/pandas3/bin/python beside it)
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
dir=$1
python=${PYTHON:-python3}

"$python" -m venv "$dir"
"$dir/bin/python" -m pip install --quiet --upgrade pip
# zarr >= 3 and numcodecs: the zarr store tests (tests/io/python/zarr_fixtures.py) write format 2 and 3 stores
"$dir/bin/python" -m pip install --quiet --upgrade anndata h5py pandas numpy scipy plyfile 'zarr>=3' numcodecs pot

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
import anndata, h5py, numpy, pandas, scipy, plyfile, zarr, ot
print(f"python-env: anndata {anndata.__version__}, h5py {h5py.__version__}, pandas {pandas.__version__}, "
      f"numpy {numpy.__version__}, scipy {scipy.__version__}, zarr {zarr.__version__}, POT {ot.__version__}")
PY

# A Python >= 3.12 for anndata 0.13 + pandas 3: the first candidate that runs and is new enough.
python_pandas3=""
candidates=(${PYTHON_PANDAS3:-} python3.13 python3.12)
for v in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*; do
  [[ -x $v/bin/python3 ]] && candidates+=("$v/bin/python3")
done
for candidate in "${candidates[@]}"; do
  if "$candidate" -c 'import sys, venv; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then
    python_pandas3=$candidate
    break
  fi
done
if [[ -z $python_pandas3 ]]; then
  echo "python-env: no Python >= 3.12 found (set PYTHON_PANDAS3): anndata 0.13 + pandas 3 tests will not be built"
else
  [[ -x "$dir/pandas3/bin/python" ]] || "$python_pandas3" -m venv "$dir/pandas3"
  "$dir/pandas3/bin/python" -m pip install --quiet --upgrade pip
  "$dir/pandas3/bin/python" -m pip install --quiet --upgrade 'anndata>=0.13' 'pandas>=3' h5py numpy scipy 'zarr>=3' numcodecs
  "$dir/pandas3/bin/python" - <<'PY'
import sys
from importlib.metadata import version
print(f"python-env: pandas3/ (Python {sys.version.split()[0]}): anndata {version('anndata')}, "
      f"pandas {version('pandas')}, h5py {version('h5py')}, numpy {version('numpy')}, zarr {version('zarr')}")
PY
fi
