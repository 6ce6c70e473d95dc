"""Writes the hostile .h5ad files kept in tests/io/data/hostile/ (regression inputs for docs/io-h5ad.md, "Hostile
files"): a minimal AnnData file written with h5py (variable-length string attributes, so one global heap collection)
with its global heap damaged in one place each. HDF5 1.10.8 itself crashes, hangs or misreads on them when it
converts the strings; flashot must end each with an error naming the file.

usage: make_hostile_h5ad.py OUTDIR
  heap_object_size.h5ad   object 1 (the root's encoding-type) claims 150,000,000 bytes in a 4096-byte collection:
                          HDF5's H5HG_read memcpy's that much out of the collection's buffer (SIGSEGV)
  heap_free_space_zero.h5ad  the collection's free-space object has size 0: H5HG__cache_heap_deserialize never
                          advances (endless loop)
  heap_object_missing.h5ad object 1 renumbered 9000: the string points at an object the collection lacks (HDF5 reads
                          an empty slot and returns no string)
"""

import pathlib
import struct
import sys

import h5py
import numpy as np


def minimal(path):
    with h5py.File(path, "w") as f:
        f.attrs["encoding-type"] = "anndata"
        f.attrs["encoding-version"] = "0.1.0"
        obs = f.create_group("obs")
        obs.attrs.update({"encoding-type": "dataframe", "encoding-version": "0.2.0", "_index": "_index",
                          "column-order": np.array([], dtype=np.float64)})
        obs.create_dataset("_index", data=np.array(["c0", "c1", "c2"], dtype=object), dtype=h5py.string_dtype())
        var = f.create_group("var")
        var.attrs.update({"encoding-type": "dataframe", "encoding-version": "0.2.0", "_index": "_index",
                          "column-order": np.array([], dtype=np.float64)})
        var.create_dataset("_index", data=np.array(["g0", "g1"], dtype=object), dtype=h5py.string_dtype())
        x = f.create_dataset("X", data=np.arange(6, dtype=np.float32).reshape(3, 2))
        x.attrs.update({"encoding-type": "array", "encoding-version": "0.2.0"})


def objects(b):
    at = b.find(b"GCOL")
    assert at >= 0, "no global heap collection"
    size = struct.unpack_from("<Q", b, at + 8)[0]
    off, out = at + 16, []
    while off + 16 <= at + size:
        idx, sz = struct.unpack_from("<H", b, off)[0], struct.unpack_from("<Q", b, off + 8)[0]
        out.append((idx, off, sz))
        if idx == 0:
            break
        off += 16 + (sz + 7) // 8 * 8
    return at, out


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    base = out / "minimal.h5ad.tmp"
    minimal(base)
    clean = base.read_bytes()
    base.unlink()
    at, objs = objects(clean)
    first = next(o for o in objs if o[0] == 1)
    free = next(o for o in objs if o[0] == 0)
    assert clean[first[1] + 16:first[1] + 16 + first[2]] == b"anndata", "object 1 is not the root's encoding-type"

    b = bytearray(clean)
    struct.pack_into("<Q", b, first[1] + 8, 150_000_000)
    (out / "heap_object_size.h5ad").write_bytes(b)
    b = bytearray(clean)
    struct.pack_into("<Q", b, free[1] + 8, 0)
    (out / "heap_free_space_zero.h5ad").write_bytes(b)
    b = bytearray(clean)
    struct.pack_into("<H", b, first[1], 9000)
    (out / "heap_object_missing.h5ad").write_bytes(b)


if __name__ == "__main__":
    main()
