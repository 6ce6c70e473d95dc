"""Reading obsm['X_pca'] (1,000,000 × 50 float32) from an AnnData zarr store written by anndata (format 3: sharded,
zstd — anndata 0.13's default): flashot (flashot_h5ad_bench, which opens zarr stores through the same H5adReader)
against Python's zarr on the same machine. Prints both medians and the ratio. docs/io-zarr.md records the figures.

usage: io_zarr_bench.py FLASHOT_H5AD_BENCH [--dir DIR] [--repeats N]
  (run with a Python that has anndata >= 0.12 and zarr 3.x: scripts/python-env.sh DIR gives DIR/pandas3/bin/python)
"""

import argparse
import json
import os
import statistics
import subprocess
import time

import anndata as ad
import numpy as np
import pandas as pd
import zarr


def make(path, n, d):
    rng = np.random.default_rng(1)
    a = ad.AnnData(obs=pd.DataFrame(index=[f"cell{i}" for i in range(n)]))
    # PCA-like values: a few strong components and noise, float32 (what scanpy stores)
    scale = np.linspace(10.0, 0.5, d, dtype=np.float32)
    a.obsm["X_pca"] = (rng.standard_normal((n, d), dtype=np.float32) * scale).astype(np.float32)
    a.write_zarr(path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("flashot_bench")
    p.add_argument("--dir", default="/tmp/flashot-zarr-bench")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--cells", type=int, default=1_000_000)
    args = p.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    store = os.path.join(args.dir, f"cells_{args.cells}.zarr")
    if not os.path.exists(store):
        make(store, args.cells, 50)
    meta = json.load(open(os.path.join(store, "obsm", "X_pca", "zarr.json")))
    codecs = [c["name"] for c in meta["codecs"]]
    inner = meta["codecs"][0].get("configuration", {})
    print(f"store: {store}  zarr format {meta['zarr_format']}, codecs {codecs}, "
          f"shard {meta['chunk_grid']['configuration']['chunk_shape']}, inner chunk {inner.get('chunk_shape')}, "
          f"inner codecs {[c['name'] for c in inner.get('codecs', [])]}")
    python = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        x = zarr.open_group(store, mode="r")["obsm/X_pca"][...]
        python.append(time.perf_counter() - t0)
    checksum = float(x[0, 0]) + float(x[-1, -1])  # what flashot_h5ad_bench prints: first + last value
    run = subprocess.run([args.flashot_bench, store, "X_pca", str(args.repeats), "into"], capture_output=True,
                         text=True, check=True)
    flashot = json.loads(run.stdout)
    f_med, p_med = statistics.median(flashot["seconds"]), statistics.median(python)
    print(f"python zarr {zarr.__version__}: {', '.join(f'{s:.3f}' for s in python)} s (median {p_med:.3f})")
    print(f"flashot: {', '.join(f'{s:.3f}' for s in flashot['seconds'])} s (median {f_med:.3f})")
    print(f"ratio flashot / python: {f_med / p_med:.2f}  (checksums {flashot.get('checksum')} / {checksum:.6g})")


if __name__ == "__main__":
    main()
