"""zarr stores for flashot's tests, written by PyPI zarr 3.x + anndata, and what anndata reads from them.

usage: zarr_fixtures.py make DIR          writes DIR/<name>.zarr / .zarr.zip and DIR/<name>.json (anndata's view)
       zarr_fixtures.py dump STORE OUT    anndata.read_zarr(STORE) as JSON into OUT (to check flashot's own stores)

JSON (for tests/io/zarr_python_test.cpp): n_obs, n_vars, obs_names, var_names, X {encoding, dense}, obsm {key:
rows}, layers {key: rows}, obs/var {column: {kind, values (null = missing), categories, ordered}}, uns {key: value},
raw_var_names. Every store is re-read by anndata here before its JSON is written (the oracle), and the script
asserts the layout it meant to make (codec, sharding, index location, zip entries) really is on disk.
"""

import json
import math
import os
import shutil
import sys
import warnings
import zipfile

import anndata as ad
import numpy as np
import pandas as pd
import scipy.sparse as sp
import zarr

warnings.filterwarnings("ignore")


def to_list(a):
    a = np.asarray(a)
    if a.dtype.kind == "f":
        return [[None if math.isnan(v) else float(v) for v in row] for row in a.reshape(a.shape[0], -1).tolist()]
    return a.tolist()


def column_json(s):
    if isinstance(s.dtype, pd.CategoricalDtype):
        cats = [str(c) if not isinstance(c, (bool, np.bool_)) else ("True" if c else "False") for c in s.cat.categories]
        return {"kind": "categorical", "categories": cats, "codes": s.cat.codes.astype(int).tolist(),
                "ordered": bool(s.cat.ordered)}
    if pd.api.types.is_bool_dtype(s.dtype):
        return {"kind": "boolean", "values": [None if pd.isna(v) else bool(v) for v in s.astype(object)]}
    if pd.api.types.is_numeric_dtype(s.dtype):
        return {"kind": "numeric", "values": [None if pd.isna(v) else float(v) for v in s.astype(object)]}
    return {"kind": "string", "values": [None if pd.isna(v) else str(v) for v in s.astype(object)]}


def dense(m):
    return np.asarray(m.todense()) if sp.issparse(m) else np.asarray(m)


def dump(a, out):
    j = {"n_obs": a.n_obs, "n_vars": a.n_vars, "obs_names": [str(x) for x in a.obs_names],
         "var_names": [str(x) for x in a.var_names]}
    if a.X is not None:
        j["X"] = {"encoding": "csr_matrix" if sp.isspmatrix_csr(a.X) or isinstance(a.X, sp.csr_array) else
                  "csc_matrix" if sp.issparse(a.X) and a.X.format == "csc" else "array",
                  "dense": to_list(dense(a.X).astype(np.float64))}
    j["obsm"] = {k: to_list(np.asarray(v, dtype=np.float64)) for k, v in a.obsm.items()
                 if not isinstance(v, pd.DataFrame)}
    j["layers"] = {k: to_list(dense(v).astype(np.float64)) for k, v in a.layers.items() if k is not None}
    j["obs"] = {c: column_json(a.obs[c]) for c in a.obs.columns}
    j["var"] = {c: column_json(a.var[c]) for c in a.var.columns}
    uns = {}
    for k, v in a.uns.items():
        if isinstance(v, str):
            uns[k] = v
        elif isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
            uns[k] = {"int": int(v)}
        elif isinstance(v, (float, np.floating)):
            uns[k] = {"float": float(v)}
        elif isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype.kind in "fiu":
            uns[k] = {"vector": [float(x) for x in v]}
    j["uns"] = uns
    if a.raw is not None:
        j["raw_var_names"] = [str(x) for x in a.raw.var_names]
        j["raw_X"] = to_list(dense(a.raw.X).astype(np.float64))
    with open(out, "w") as f:
        json.dump(j, f)


def sample():
    rng = np.random.default_rng(7)
    n, g = 45, 12
    x = sp.random(n, g, density=0.3, format="csr", random_state=3, dtype=np.float32)
    obs = pd.DataFrame(index=[f"cell-{i}" for i in range(n)])
    obs["cluster"] = pd.Categorical(rng.choice(["T", "B", "NK", "Mono"], n))
    obs["score"] = rng.normal(size=n)
    ints = pd.array(rng.integers(0, 9, n), dtype="Int64")
    ints[3] = pd.NA
    obs["count"] = ints
    obs["flag"] = rng.random(n) > 0.5
    nb = pd.array(rng.random(n) > 0.5, dtype="boolean")
    nb[5] = pd.NA
    obs["maybe"] = nb
    obs["batch"] = pd.Categorical(rng.choice(["b2", "b1"], n), categories=["b2", "b1"], ordered=True)
    obs["note"] = [f"n{i % 7}é" for i in range(n)]
    var = pd.DataFrame(index=[f"gene-{j}" for j in range(g)])
    var["highly_variable"] = rng.random(g) > 0.5
    var["mean"] = rng.random(g)
    a = ad.AnnData(X=x, obs=obs, var=var)
    a.obsm["X_pca"] = rng.normal(size=(n, 5)).astype(np.float32)
    a.obsm["X_umap"] = rng.normal(size=(n, 2))
    a.layers["counts"] = rng.integers(0, 20, size=(n, g)).astype(np.int32)
    a.uns["n_pcs"] = 5
    a.uns["resolution"] = 0.8
    a.uns["method"] = "leiden"
    a.uns["weights"] = np.array([0.5, 1.5, 2.5])
    a.raw = a.copy()
    a.obsp["distances"] = sp.random(n, n, density=0.1, format="csr", random_state=4)
    return a


def walk(group, path=""):
    for name, node in group.members():
        p = f"{path}/{name}" if path else name
        yield p, node
        if isinstance(node, zarr.Group):
            yield from walk(node, p)


def recode(src, dst, fmt, compressor, chunk_rows, shard_rows=None, index_location="end", big_endian=False):
    """Copies store `src` into a new store `dst` (zarr format `fmt`), every array re-encoded with `compressor`,
    chunks of `chunk_rows` along the first dimension, and (v3) shards of `shard_rows`."""
    import zarr.codecs as zc
    import numcodecs
    source = zarr.open_group(src, mode="r")
    out = zarr.open_group(dst, mode="w", zarr_format=fmt)
    out.attrs.update(dict(source.attrs))
    for path, node in walk(source):
        if isinstance(node, zarr.Group):
            g = out.require_group(path)
            g.attrs.update(dict(node.attrs))
            continue
        data = np.asarray(node[...])
        kwargs = {}
        if data.ndim > 0:
            # 2-D arrays in chunks of 2 columns too, so reads assemble rows from several chunks
            chunks = (max(1, min(chunk_rows, data.shape[0])),) + tuple(min(2, d) if d > 0 else d for d in data.shape[1:])
            kwargs["chunks"] = chunks
            if shard_rows is not None and fmt == 3:
                shard = max(chunks[0], (min(shard_rows, data.shape[0]) + chunks[0] - 1) // chunks[0] * chunks[0])
                kwargs["shards"] = (shard,) + tuple(data.shape[1:]) if data.ndim == 1 else \
                    (shard,) + tuple(-(-d // c) * c for d, c in zip(data.shape[1:], chunks[1:]))
        is_text = data.dtype.kind in "OUT"
        if fmt == 3:
            if compressor == "zstd":
                kwargs["compressors"] = [zc.ZstdCodec(level=3)]
            elif compressor == "gzip":
                kwargs["compressors"] = [zc.GzipCodec(level=5)]
            elif compressor == "blosc":
                kwargs["compressors"] = [zc.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")]
            else:
                kwargs["compressors"] = None
        else:
            kwargs["compressors"] = {"zstd": numcodecs.Zstd(level=3), "zlib": numcodecs.Zlib(level=5),
                                     "gzip": numcodecs.GZip(level=5), "blosc": numcodecs.Blosc(cname="zstd", clevel=3),
                                     "none": None}[compressor]
        if is_text:
            data = data.astype(object)
            kwargs["dtype"] = str
        elif big_endian and data.dtype.kind == "f" and path.startswith("obsm/"):
            # only dense obsm: anndata gives back what zarr reads, and pandas (nullable integers) and scipy.sparse
            # refuse big-endian arrays
            if fmt == 2:
                kwargs["dtype"] = data.dtype.newbyteorder(">")
            else:
                kwargs["serializer"] = zc.BytesCodec(endian="big")
        if shard_rows is not None and fmt == 3 and index_location == "start" and data.ndim > 0 and not is_text:
            kwargs.pop("shards")
            sharding = zc.ShardingCodec(chunk_shape=kwargs["chunks"],
                                        codecs=[zc.BytesCodec(), *(kwargs["compressors"] or [])],
                                        index_location="start")
            shard_shape = (max(kwargs["chunks"][0], (min(shard_rows, data.shape[0]) + kwargs["chunks"][0] - 1) //
                               kwargs["chunks"][0] * kwargs["chunks"][0]),) + \
                tuple(-(-d // c) * c for d, c in zip(data.shape[1:], kwargs["chunks"][1:]))
            kwargs["chunks"] = shard_shape
            kwargs["serializer"] = sharding
            kwargs["compressors"] = None
        arr = out.create_array(path, shape=data.shape, dtype=kwargs.pop("dtype", data.dtype), **kwargs,
                               fill_value=None if is_text else 0, attributes=dict(node.attrs))
        arr[...] = data
    zarr.consolidate_metadata(dst)


def zip_dir(src, dst, prefix=""):
    with zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_STORED) as z:
        for root, _, files in sorted(os.walk(src)):
            for f in sorted(files):
                full = os.path.join(root, f)
                z.write(full, prefix + os.path.relpath(full, src))


def check_encoded(store, key, *needles):
    text = open(os.path.join(store, key)).read()
    for n in needles:
        assert n in text, f"{store}/{key}: expected {n!r} in {text[:300]}"


def make(out):
    os.makedirs(out, exist_ok=True)
    a = sample()
    stores = {}
    # anndata's own writes: format 3 (anndata 0.13: sharded + zstd by default) and format 2 (blosc lz4)
    v3 = os.path.join(out, "anndata_v3.zarr")
    a.write_zarr(v3)
    stores["anndata_v3"] = v3
    if hasattr(ad.settings, "zarr_write_format"):
        ad.settings.zarr_write_format = 2
        v2 = os.path.join(out, "anndata_v2.zarr")
        a.write_zarr(v2)
        ad.settings.zarr_write_format = 3
        stores["anndata_v2"] = v2
        check_encoded(v2, "obsm/X_pca/.zarray", '"blosc"')
    # every codec, sharded and not, several chunks per array (7 rows; shards of 14 rows)
    for fmt, comp, shard, where in [(3, "zstd", 14, "end"), (3, "gzip", 14, "end"), (3, "blosc", 14, "end"),
                                    (3, "zstd", None, "end"), (3, "gzip", None, "end"), (3, "blosc", None, "end"),
                                    (3, "none", None, "end"), (3, "zstd", 14, "start"),
                                    (2, "zstd", None, "end"), (2, "zlib", None, "end"), (2, "gzip", None, "end"),
                                    (2, "blosc", None, "end"), (2, "none", None, "end")]:
        name = f"v{fmt}_{comp}" + (f"_shard_{where}" if shard else "")
        path = os.path.join(out, name + ".zarr")
        recode(v3, path, fmt, comp, 7, shard, where)
        stores[name] = path
        if fmt == 3 and shard:
            check_encoded(path, "obsm/X_pca/zarr.json", "sharding_indexed", f'"index_location": "{where}"')
    check_encoded(os.path.join(out, "v3_gzip.zarr"), "obsm/X_pca/zarr.json", '"gzip"')
    # big-endian numbers: format 2 '>f4' dtypes, format 3 the bytes codec's endian "big"
    for fmt in (2, 3):
        name = f"v{fmt}_big_endian"
        path = os.path.join(out, name + ".zarr")
        recode(v3, path, fmt, "zstd", 7, None, "end", big_endian=True)
        stores[name] = path
    check_encoded(os.path.join(out, "v2_big_endian.zarr"), "obsm/X_pca/.zarray", '">f4"')
    check_encoded(os.path.join(out, "v3_big_endian.zarr"), "obsm/X_pca/zarr.json", '"big"')
    check_encoded(os.path.join(out, "v2_zlib.zarr"), "obsm/X_pca/.zarray", '"zlib"')
    # without consolidated metadata (anndata falls back to walking the store; so must flashot)
    for src, name in [("v3_zstd_shard_end", "v3_unconsolidated"), ("v2_zstd", "v2_unconsolidated")]:
        path = os.path.join(out, name + ".zarr")
        shutil.copytree(stores[src], path)
        if os.path.exists(os.path.join(path, ".zmetadata")):
            os.remove(os.path.join(path, ".zmetadata"))
        else:
            root = json.load(open(os.path.join(path, "zarr.json")))
            root.pop("consolidated_metadata", None)
            json.dump(root, open(os.path.join(path, "zarr.json"), "w"))
        stores[name] = path
    # zip archives: zarr's own ZipStore, zipfile of a directory store (v2 and v3), one under a folder prefix
    zpath = os.path.join(out, "zarr_zipstore.zarr.zip")
    zs = zarr.storage.ZipStore(zpath, mode="w")
    a.write_zarr(zs)
    zs.close()
    stores["zarr_zipstore"] = zpath
    for src in ["v3_zstd_shard_end", "v2_blosc"]:
        path = os.path.join(out, src + ".zarr.zip")
        zip_dir(stores[src], path)
        stores[src + "_zip"] = path
    path = os.path.join(out, "folder_in_zip.zarr.zip")
    zip_dir(stores["v3_zstd"], path, prefix="cells.zarr/")
    stores["folder_in_zip"] = path
    # duplicate entries: damaged first copies, good last ones (Python's zipfile reads the last)
    path = os.path.join(out, "duplicates.zarr.zip")
    src = stores["v3_zstd_shard_end"]
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr("obsm/X_pca/c/0/0", b"\x00garbage that is no shard")
        z.writestr("zarr.json", b"{not json")
        for root, _, files in sorted(os.walk(src)):
            for f in sorted(files):
                full = os.path.join(root, f)
                z.write(full, os.path.relpath(full, src))
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        assert names.count("zarr.json") == 2 and names.count("obsm/X_pca/c/0/0") == 2, "duplicates missing"
    stores["duplicates"] = path
    for name, path in stores.items():
        store = zarr.storage.ZipStore(path, mode="r") if path.endswith(".zip") else path
        if name == "folder_in_zip":
            store = zarr.open_group(store, path="cells.zarr", mode="r")
        back = ad.read_zarr(store)
        dump(back, os.path.join(out, name + ".json"))
    with open(os.path.join(out, "stores.txt"), "w") as f:
        for name, path in stores.items():
            f.write(f"{name}\t{path}\n")


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif sys.argv[1] == "dump":
        store = sys.argv[2]
        if store.endswith(".zip"):
            store = zarr.storage.ZipStore(store, mode="r")
        dump(ad.read_zarr(store), sys.argv[3])
    else:
        sys.exit("usage: zarr_fixtures.py make DIR | dump STORE OUT")
