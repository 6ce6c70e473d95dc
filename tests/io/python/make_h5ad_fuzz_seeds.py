"""Writes the seed corpus of the .h5ad fuzz target (tests/fuzz/corpus/h5ad/): tiny AnnData files, each under the
4 KiB the ctest fuzz run allows (-max_len=4096), so mutations start from complete, valid files. Small sizes come
from the newest HDF5 format (libver='latest': compact groups and object headers) and compact dataset layouts.

usage: make_h5ad_fuzz_seeds.py OUTDIR
"""

import pathlib
import sys

import h5py
import numpy as np

MAX_BYTES = 4096


def compact(group, name, data):
    """A dataset stored inside its object header (no separate data block)."""
    data = np.asarray(data)
    space = h5py.h5s.create_simple(data.shape) if data.shape else h5py.h5s.create(h5py.h5s.SCALAR)
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    tid = h5py.h5t.py_create(data.dtype, logical=True)
    dsid = h5py.h5d.create(group.id, name.encode(), tid, space, dcpl=dcpl)
    dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(data))
    return group[name]


def enc(obj, kind, version="0.2.0"):
    # fixed-length string attributes: variable-length ones would open a 4 KiB global heap collection
    obj.attrs["encoding-type"] = np.bytes_(kind)
    obj.attrs["encoding-version"] = np.bytes_(version)
    return obj


def modern(path, sparse):
    with h5py.File(path, "w", libver="latest") as f:
        enc(f, "anndata", "0.1.0")
        obs = enc(f.create_group("obs"), "dataframe")
        obs.attrs["_index"] = np.bytes_("_index")
        compact(obs, "_index", np.array([b"a", b"b", b"c"], dtype="S1"))
        if sparse:  # each seed stays under 4 KiB: the sparse one has a numeric column instead of a categorical
            obs.attrs["column-order"] = np.array(["n"], dtype="S2")
            compact(obs, "n", np.array([1, 2, 3], dtype=np.int16))
        else:
            obs.attrs["column-order"] = np.array(["ct"], dtype="S2")
            ct = enc(obs.create_group("ct"), "categorical")
            ct.attrs["ordered"] = False
            compact(ct, "codes", np.array([0, 1, -1], dtype=np.int8))
            compact(ct, "categories", np.array([b"T", b"B"], dtype="S1"))
        var = enc(f.create_group("var"), "dataframe")
        var.attrs["_index"] = np.bytes_("_index")
        var.attrs["column-order"] = np.array([], dtype=np.float64)
        compact(var, "_index", np.array([b"g", b"h"], dtype="S1"))
        if sparse:
            x = enc(f.create_group("X"), "csr_matrix", "0.1.0")
            x.attrs["shape"] = np.array([3, 2])
            compact(x, "data", np.array([1, 2, 3], dtype=np.float32))
            compact(x, "indices", np.array([0, 1, 1], dtype=np.int32))
            compact(x, "indptr", np.array([0, 1, 2, 3], dtype=np.int32))
        else:
            enc(compact(f, "X", np.arange(6, dtype=np.float32).reshape(3, 2)), "array")
        obsm = enc(f.create_group("obsm"), "dict", "0.1.0")
        enc(compact(obsm, "X_pca", np.arange(6, dtype=np.float64).reshape(3, 2)), "array")


def legacy_07(path):
    with h5py.File(path, "w", libver="latest") as f:
        obs = f.create_group("obs")
        obs.attrs["_index"] = np.bytes_("index")
        compact(obs, "index", np.array([b"a", b"b"], dtype="S1"))
        cats = compact(obs.create_group("__categories"), "k", np.array([b"x", b"y"], dtype="S1"))
        k = compact(obs, "k", np.array([1, 0], dtype=np.int8))
        k.attrs["categories"] = cats.ref
        var = f.create_group("var")
        var.attrs["_index"] = np.bytes_("index")
        compact(var, "index", np.array([b"g"], dtype="S1"))
        compact(f, "X", np.ones((2, 1), dtype=np.float32))


def legacy_06(path):
    with h5py.File(path, "w", libver="latest") as f:
        obs = np.zeros(2, dtype=[("index", "S2"), ("louvain", "<i1"), ("n", "<f4")])
        obs["index"] = [b"c0", b"c1"]
        obs["louvain"] = [0, 1]
        compact(f, "obs", obs)
        compact(f, "var", np.array([(b"g0",)], dtype=[("index", "S2")]))
        compact(f.create_group("uns"), "louvain_categories", np.array([b"0", b"1"], dtype="S1"))
        obsm = np.zeros(2, dtype=[("X_pca", "<f4", (2,))])
        compact(f, "obsm", obsm)
        compact(f, "X", np.ones((2, 1), dtype=np.float32))


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name, make in (("dense.h5ad", lambda p: modern(p, False)), ("csr.h5ad", lambda p: modern(p, True)),
                       ("legacy_07.h5ad", legacy_07), ("legacy_06.h5ad", legacy_06)):
        make(out / name)
        size = (out / name).stat().st_size
        if size > MAX_BYTES:
            raise SystemExit(f"{name}: {size} bytes, more than the fuzzer's {MAX_BYTES}")
        print(name, size)


if __name__ == "__main__":
    main()
