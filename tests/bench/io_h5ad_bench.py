"""Reading obsm['X_pca'] from a 1M-cell .h5ad: flashot side by side with h5py and anndata, in one run.

Usage: io_h5ad_bench.py PATH/TO/flashot_h5ad_bench [--cells 1000000] [--genes 30000] [--nnz-per-cell 20]
                        [--dims 50] [--repeats 5] [--folder DIR] [--keep] [--cold]

Writes, with Python anndata, a file shaped like a large atlas: sparse CSR X (cells × genes, float32, int32
indices), obs with a string index and a categorical column, obsm X_pca (cells × dims, float32) and X_umap. Then,
alternating the readers so load on the machine hits them alike, times opening the file and reading X_pca:
  flashot-into    H5adReader(file).read_obsm_into("X_pca", buffer), buffer from make_unique_for_overwrite (not
                  zero-filled, like numpy's); the second read of a fresh process
  flashot-into-1st  the same, the first read of a fresh process (HDF5's library start-up included)
  flashot-vector  H5adReader(file).read_obsm("X_pca"): a DenseMatrix whose std::vector<float> is zero-filled
                  first; the second read of a fresh process
  h5py            h5py.File(file)["obsm/X_pca"][()]
  anndata         anndata.io.read_elem(h5py.File(file)["obsm/X_pca"])
The page cache is warm for every reader, or with --cold (root only) dropped before every timed read, so each read
comes from the disk; flashot then reads once per process. Also reports the bytes flashot read from the file (X is
never read).
"""

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import anndata as ad
import h5py
import numpy as np
import pandas as pd
import scipy.sparse as sp

SEED = 1


def write_atlas(path, cells, genes, nnz_per_cell, dims):
    rng = np.random.default_rng(SEED)
    nnz = cells * nnz_per_cell
    indptr = np.arange(0, nnz + 1, nnz_per_cell, dtype=np.int64)
    indices = np.sort(rng.integers(0, genes, size=(cells, nnz_per_cell), dtype=np.int32), axis=1).ravel()
    data = rng.random(nnz, dtype=np.float32) * 10
    x = sp.csr_matrix((data, indices, indptr), shape=(cells, genes))
    x.sum_duplicates()
    obs = pd.DataFrame(index=pd.Index([f"cell{i:07d}" for i in range(cells)]))
    obs["cluster"] = pd.Categorical(rng.integers(0, 40, cells).astype(str))
    var = pd.DataFrame(index=pd.Index([f"gene{j:05d}" for j in range(genes)]))
    adata = ad.AnnData(X=x, obs=obs, var=var)
    adata.obsm["X_pca"] = rng.standard_normal((cells, dims), dtype=np.float32)
    adata.obsm["X_umap"] = rng.standard_normal((cells, 2), dtype=np.float32)
    adata.write_h5ad(path)


def time_h5py(path):
    start = time.perf_counter()
    with h5py.File(path, "r") as f:
        values = f["obsm/X_pca"][()]
    return time.perf_counter() - start, values


def time_anndata(path):
    start = time.perf_counter()
    with h5py.File(path, "r") as f:
        values = ad.io.read_elem(f["obsm/X_pca"])
    return time.perf_counter() - start, values


def drop_page_cache():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def time_flashot(tool, path, mode, reads=2):
    """`reads` reads in one fresh process: the first pays HDF5's library start-up (as a CLI run does), the second
    compares with h5py and anndata, whose process has HDF5 started already."""
    out = subprocess.run([tool, str(path), "X_pca", str(reads), mode], check=True, capture_output=True,
                         text=True).stdout
    result = json.loads(out)
    return result["seconds"], result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("tool")
    parser.add_argument("--cells", type=int, default=1_000_000)
    parser.add_argument("--genes", type=int, default=30_000)
    parser.add_argument("--nnz-per-cell", type=int, default=20)
    parser.add_argument("--dims", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--folder", default=None)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--cold", action="store_true", help="drop the page cache before every timed read (root)")
    args = parser.parse_args()
    if args.cold:
        try:
            drop_page_cache()
        except PermissionError:
            parser.error("--cold writes /proc/sys/vm/drop_caches, which needs root")

    folder = Path(args.folder or tempfile.mkdtemp(prefix="flashot_h5ad_bench_"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"atlas_{args.cells}x{args.genes}.h5ad"
    if not path.exists():
        start = time.perf_counter()
        write_atlas(path, args.cells, args.genes, args.nnz_per_cell, args.dims)
        print(f"wrote {path} ({path.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - start:.1f} s")
    with h5py.File(path, "r") as f:
        x_bytes = sum(f["X"][k].id.get_storage_size() for k in ("data", "indices", "indptr"))
        pca_bytes = f["obsm/X_pca"].id.get_storage_size()

    # warm the page cache and check all readers agree
    _, reference = time_h5py(path)
    expected = float(reference.ravel()[0]) + float(reference.ravel()[-1])
    for mode in ("into", "vector"):
        _, flashot_result = time_flashot(args.tool, path, mode)
        assert abs(flashot_result["checksum"] - expected) < 1e-5, (flashot_result, expected)
        assert (flashot_result["rows"], flashot_result["cols"]) == reference.shape
    time_anndata(path)

    def timed(read):
        if args.cold:
            drop_page_cache()
        return read()

    times = {"flashot-into": [], "flashot-into-1st": [], "flashot-vector": [], "h5py": [], "anndata": []}
    for _ in range(args.repeats):
        if args.cold:  # one read per process, each from the disk
            times["flashot-into-1st"] += timed(lambda: time_flashot(args.tool, path, "into", 1)[0])
            times["flashot-vector"] += timed(lambda: time_flashot(args.tool, path, "vector", 1)[0])
        else:
            first, second = time_flashot(args.tool, path, "into")[0]
            times["flashot-into-1st"].append(first)
            times["flashot-into"].append(second)
            times["flashot-vector"].append(time_flashot(args.tool, path, "vector")[0][1])
        times["h5py"].append(timed(lambda: time_h5py(path)[0]))
        times["anndata"].append(timed(lambda: time_anndata(path)[0]))
    times = {reader: values for reader, values in times.items() if values}

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"anndata {importlib.metadata.version('anndata')}, h5py {h5py.__version__}, HDF5 {h5py.version.hdf5_version}")
    print(f"file: {args.cells} cells × {args.genes} genes, X CSR {x_bytes / 1e6:.0f} MB on disk, "
          f"obsm X_pca {args.cells}×{args.dims} float32 {pca_bytes / 1e6:.0f} MB")
    print(f"flashot read {flashot_result['bytes_read'] / 1e6:.0f} MB from files to open it and read X_pca")
    cache = "cold (dropped before every read)" if args.cold else "warm"
    print(f"{'reader':16s} {'best s':>8s} {'median s':>9s}   (open + read obsm['X_pca'], {args.repeats} repeats, "
          f"page cache {cache})")
    for reader, values in times.items():
        print(f"{reader:16s} {min(values):8.3f} {statistics.median(values):9.3f}")
    print("flashot-into-1st: the first read in a fresh process, HDF5's start-up included")
    if not args.keep and not args.folder:
        path.unlink()
        folder.rmdir()


if __name__ == "__main__":
    main()
