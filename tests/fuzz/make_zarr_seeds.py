"""Seeds for fuzz_zarr (tests/fuzz/corpus/zarr/): tiny AnnData stores as .zarr.zip archives, written by anndata and
re-encoded by zarr-python: format 3 sharded (index at the end and at the start) with zstd, gzip and blosc, unsharded,
unconsolidated, and format 2 with blosc and zlib. JSON is written compactly; the seeds are
18–26 KB, so the zarr target's ctest runs with -max_len=65536 (tests/fuzz/CMakeLists.txt).

usage: make_zarr_seeds.py OUTDIR   (a Python with anndata, zarr 3.x, numcodecs)"""

import json
import os
import shutil
import sys
import tempfile

import anndata as ad
import numpy as np
import pandas as pd
import scipy.sparse as sp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "io", "python"))
import zarr_fixtures as zf  # noqa: E402


def tiny():
    obs = pd.DataFrame(index=["a", "b", "c"])
    obs["k"] = pd.Categorical(["x", "y", "x"])
    obs["n"] = pd.array([1, None, 3], dtype="Int64")
    a = ad.AnnData(X=sp.csr_matrix(np.array([[1, 0], [0, 2], [3, 0]], dtype=np.float32)), obs=obs,
                   var=pd.DataFrame(index=["g1", "g2"]))
    a.obsm["X_pca"] = np.arange(6, dtype=np.float32).reshape(3, 2)
    a.uns["s"] = 1.5
    return a


def main(out):
    os.makedirs(out, exist_ok=True)
    tmp = tempfile.mkdtemp()
    base = os.path.join(tmp, "base.zarr")
    tiny().write_zarr(base)
    variants = {"v3_zstd_shard_end": (3, "zstd", 2, "end"), "v3_zstd_shard_start": (3, "zstd", 2, "start"),
                "v3_gzip_shard": (3, "gzip", 2, "end"), "v3_blosc": (3, "blosc", None, "end"),
                "v3_none": (3, "none", None, "end"), "v2_blosc": (2, "blosc", None, "end"),
                "v2_zlib": (2, "zlib", None, "end")}
    for name, (fmt, comp, shard, where) in variants.items():
        path = os.path.join(tmp, name + ".zarr")
        zf.recode(base, path, fmt, comp, 2, shard * 2 if shard else None, where)
        for root, _, files in os.walk(path):  # compact JSON: smaller seeds
            for f in files:
                if f in ("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"):
                    full = os.path.join(root, f)
                    doc = json.load(open(full))
                    json.dump(doc, open(full, "w"), separators=(",", ":"))
        zf.zip_dir(path, os.path.join(out, name + ".zarr.zip"))
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main(sys.argv[1])
