#!/usr/bin/env bash
# Seed corpora from writers flashot did not write, made at test time (nothing downloaded): .h5ad files of every
# anndata era (PyPI anndata, Debian's anndata 0.8, h5py-built ≤0.6 / 0.7 layouts and malformed files), the hostile
# regression files, scanpy's pbmc68k_reduced beside the venv when present; PLY files from Python's plyfile and
# Debian's assimp test models when installed.
# usage: make_real_seeds.sh OUTDIR PYTHON [OLD_ANNDATA_PYTHON]   → OUTDIR/h5ad, OUTDIR/ply
set -euo pipefail
out=$1
python=$2
old=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
scripts=$here/../io/python
rm -rf "$out"
mkdir -p "$out/h5ad" "$out/ply" "$out/work"
"$python" "$scripts/make_h5ad_fixtures.py" "$out/work/pypi" >/dev/null
for f in "$out"/work/pypi/*.h5ad; do
  # the 58 MB contiguous file is too large to mutate usefully
  [[ $(stat -c %s "$f") -le 262144 ]] && cp "$f" "$out/h5ad/pypi_$(basename "$f")"
done
if [[ -n $old ]]; then
  "$old" "$scripts/make_h5ad_fixtures.py" "$out/work/old" --anndata-only >/dev/null
  for f in "$out"/work/old/*.h5ad; do cp "$f" "$out/h5ad/old_$(basename "$f")"; done
fi
for f in "$here"/../io/data/hostile/*.h5ad; do cp "$f" "$out/h5ad/"; done
data=$(dirname "$(dirname "$python")")/data/10x_pbmc68k_reduced.h5ad
[[ -f $data ]] && cp "$data" "$out/h5ad/"
"$python" "$here/make_ply_seeds.py" "$out/ply" >/dev/null
if [[ -d /usr/share/assimp/models/PLY ]]; then cp /usr/share/assimp/models/PLY/*.ply "$out/ply/"; fi
rm -rf "$out/work"
echo "seeds: $(ls "$out/h5ad" | wc -l) .h5ad, $(ls "$out/ply" | wc -l) PLY in $out"
