"""Writes .h5ad files in every encoding with Python anndata / h5py, each with an expect file (h5ad_expect.py) that
states what a correct reader must return. flashot's tests read the files and compare.

usage: make_h5ad_fixtures.py OUTDIR [PBMC68K_H5AD] | OUTDIR --anndata-only | OUTDIR --pandas3

Files written by anndata (current PyPI) cover dense/CSR/CSC X of several dtypes, categoricals (string, numeric,
missing, ordered), nullable integer/boolean/string columns, obsm arrays and dataframes, layers, raw and uns.
Layouts anndata no longer writes are built by hand with h5py from the anndata 0.6/0.7 specifications: the ≤0.6
compound obs/var/obsm with uns/<col>_categories, and the 0.7 object-reference categories with LZF compression.
Malformed files are built by editing valid ones.

--anndata-only: an older anndata as the writer (Debian's 0.8); only what anndata itself writes.
--pandas3: anndata ≥ 0.13 with pandas ≥ 3 as the writer (it fails if the interpreter has older ones), in its own
defaults: the files of --anndata-only plus pandas3_native (index and str columns as nullable-string-array groups)
and pandas3_categoricals (str columns converted to categoricals, as anndata does unless told not to).
"""

import importlib.metadata
import inspect
import os
import pathlib
import sys
import warnings

import anndata as ad
import h5py
import numpy as np
import pandas as pd
import scipy.sparse as sp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import h5ad_expect as ex  # noqa: E402

warnings.filterwarnings("ignore")
SEED = 20261129


def text(v):
    """A category as flashot renders it (numbers without a trailing .0 when integral)."""
    if isinstance(v, (bool, np.bool_)):
        return "True" if v else "False"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return str(int(f)) if f.is_integer() and abs(f) < 1e15 else repr(f)
    return str(v)


def describe_column(w, which, name, s):
    dtype = s.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        w.categorical(which, name, [text(c) for c in s.cat.categories], s.cat.codes.to_numpy(), s.cat.ordered)
    elif isinstance(dtype, pd.BooleanDtype):
        w.boolean(which, name, s.fillna(False).to_numpy(dtype=bool), s.isna().to_numpy())
    elif isinstance(dtype, pd.api.extensions.ExtensionDtype) and pd.api.types.is_integer_dtype(dtype):
        w.numeric(which, name, s.astype("float64").to_numpy(na_value=np.nan))
    elif pd.api.types.is_bool_dtype(dtype):
        w.boolean(which, name, s.to_numpy(dtype=bool))
    elif pd.api.types.is_numeric_dtype(dtype):
        w.numeric(which, name, s.to_numpy(dtype=np.float64))
    else:
        missing = s.isna().to_numpy()
        w.string(which, name, ["" if m else str(v) for v, m in zip(s.to_numpy(dtype=object), missing)], missing)


def dense_of(m):
    if sp.issparse(m):
        return m.toarray()
    if isinstance(m, pd.DataFrame):
        return m.to_numpy(dtype=np.float64)
    return np.asarray(m)


def describe(adata, w, generation=None):
    w.add("n_obs", adata.n_obs)
    w.add("n_vars", adata.n_vars)
    w.names("obs", list(adata.obs_names))
    w.names("var", list(adata.var_names))
    if adata.X is None:
        w.add("x", "none")
    else:
        x = adata.X
        encoding = "csr_matrix" if sp.isspmatrix_csr(x) or isinstance(x, sp.csr_array) else (
            "csc_matrix" if sp.issparse(x) else "array")
        dtype = (x.data if sp.issparse(x) else np.asarray(x)).dtype.name
        w.add("x", encoding, dtype, adata.n_obs, adata.n_vars)
        w.dense("X", None, dense_of(x))
    for which, frame in (("obs", adata.obs), ("var", adata.var)):
        w.columns(which, list(frame.columns))
        for name in frame.columns:
            describe_column(w, which, name, frame[name])
    w.keys("obsm", list(adata.obsm.keys()))
    for key, m in adata.obsm.items():
        w.dense("obsm", key, dense_of(m))
    w.keys("varm", list(adata.varm.keys()))
    for key, m in adata.varm.items():
        w.dense("varm", key, dense_of(m))
    # anndata 0.13 lists X as layers[None]; only the named layers are stored under /layers
    layers = {key: m for key, m in adata.layers.items() if key is not None}
    w.keys("layers", list(layers))
    for key, m in layers.items():
        w.dense("layers", key, dense_of(m))
    w.keys("uns", list(adata.uns.keys()))
    describe_uns(w, adata.uns, "")
    if adata.raw is not None:
        w.dense("raw_x", None, dense_of(adata.raw.X))
        w.names("raw_var", list(adata.raw.var_names))
    if generation:
        w.add("generation", ex.enc(generation))


def describe_uns(w, mapping, prefix):
    for key, value in mapping.items():
        full = prefix + key
        if isinstance(value, dict):
            describe_uns(w, value, full + "/")
        elif isinstance(value, str):
            w.uns(full, value)
        elif isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
            w.uns(full, value)
        elif isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in "iuf":
            w.uns(full, value)


def save(adata, out, name, extra=None, generation="0.1.0 (anndata ≥0.8)", keep_strings=True):
    path = out / f"{name}.h5ad"
    # keep string columns as strings where this anndata allows it: categoricals are covered explicitly
    if keep_strings and "convert_strings_to_categoricals" in inspect.signature(adata.write_h5ad).parameters:
        adata.write_h5ad(path, convert_strings_to_categoricals=False)
    else:
        adata.write_h5ad(path)
    w = ex.Writer()
    describe(adata, w, generation)
    if extra:
        extra(w)
    w.save(out / f"{name}.expect")
    return path


def base_frames(rng, n_obs, n_vars):
    obs = pd.DataFrame(index=[f"cell-{i}" for i in range(n_obs)])
    labels = np.array(["T", "B", "NK", "Mono"])[rng.integers(0, 4, n_obs)]
    obs["cell_type"] = pd.Categorical(labels, categories=["B", "Mono", "NK", "T"])
    obs.loc[obs.index[1], "cell_type"] = np.nan  # code −1
    obs["score"] = rng.normal(size=n_obs)
    obs["n_genes"] = rng.integers(100, 5000, n_obs).astype(np.int64)
    obs["is_doublet"] = rng.random(n_obs) < 0.3
    obs["batch_name"] = np.array([f"batch é{i % 3}" for i in range(n_obs)], dtype=object)
    var = pd.DataFrame(index=[f"GENE{j}" for j in range(n_vars)])
    var["highly_variable"] = rng.random(n_vars) < 0.5
    var["mean"] = rng.random(n_vars).astype(np.float32)
    return obs, var


def modern_files(out, rng):
    n_obs, n_vars = 12, 7
    obs, var = base_frames(rng, n_obs, n_vars)
    dense = rng.normal(size=(n_obs, n_vars))
    dense[dense < 0.2] = 0.0
    counts = rng.poisson(1.0, size=(n_obs, n_vars))

    def make(x):
        a = ad.AnnData(X=x, obs=obs.copy(), var=var.copy())
        a.obsm["X_pca"] = rng.normal(size=(n_obs, 5)).astype(np.float32)
        a.obsm["X_umap"] = rng.normal(size=(n_obs, 2))
        a.varm["PCs"] = rng.normal(size=(n_vars, 3))
        a.layers["counts"] = sp.csr_matrix(counts.astype(np.float32))
        a.uns["resolution"] = 0.8
        a.uns["n_neighbors"] = 15
        a.uns["method"] = "umap ✓"
        a.uns["variance"] = rng.random(4)
        a.uns["params"] = {"seed": 7, "metric": "cosine"}
        return a

    save(make(dense.astype(np.float32)), out, "dense_f32")
    save(make(dense.astype(np.float64)), out, "dense_f64")
    save(make(counts.astype(np.int32)), out, "dense_i32")
    save(make(counts.astype(np.uint16)), out, "dense_u16")
    save(make(sp.csr_matrix(dense.astype(np.float32))), out, "csr_f32")
    x64 = sp.csr_matrix(dense)
    x64.indices = x64.indices.astype(np.int64)
    x64.indptr = x64.indptr.astype(np.int64)
    save(make(x64), out, "csr_f64_i64")
    save(make(sp.csr_matrix(counts.astype(np.int64))), out, "csr_i64")
    save(make(sp.csc_matrix(dense.astype(np.float32))), out, "csc_f32")
    save(make(sp.csc_matrix(counts.astype(np.int16))), out, "csc_i16")

    # unsigned indices/indptr (written by some R/Julia tools): anndata's own file, indices rewritten as uint32/uint64
    path = save(make(sp.csr_matrix(dense.astype(np.float32))), out, "csr_unsigned_indices")
    with h5py.File(path, "r+") as f:
        for key, dtype in (("indices", np.uint32), ("indptr", np.uint64)):
            values = f["X"][key][()].astype(dtype)
            del f["X"][key]
            f["X"].create_dataset(key, data=values)

    # X absent, raw present, obsm dataframe and sparse obsm
    a = ad.AnnData(obs=obs.copy(), var=var.copy())
    a.obsm["coords"] = pd.DataFrame({"x": rng.random(n_obs), "y": rng.random(n_obs)}, index=obs.index)
    a.obsm["sparse_knn"] = sp.csr_matrix((rng.random((n_obs, 4)) < 0.3).astype(np.float64))
    save(a, out, "no_x")
    b = ad.AnnData(X=dense.astype(np.float32), obs=obs.copy(), var=var.copy())
    b.raw = ad.AnnData(X=sp.csr_matrix(counts.astype(np.float32)), var=var.copy())
    b = b[:, :4].copy()
    save(b, out, "raw")


def large_contiguous_file(out):
    """obsm arrays big enough (> 16 MB, anndata's default contiguous layout) for flashot's block-wise read path;
    values follow a pattern the C++ test recomputes: value[i, j] = ((i * cols + j) % 1000) / 8."""
    n, d = 90_000, 50
    obs = pd.DataFrame(index=[f"c{i}" for i in range(n)])
    a = ad.AnnData(obs=obs)
    pattern = (np.arange(n * d, dtype=np.int64) % 1000 / 8.0).reshape(n, d)
    a.obsm["X_f32"] = pattern.astype(np.float32)
    a.obsm["X_f64"] = pattern
    path = out / "large_contiguous.h5ad"
    a.write_h5ad(path)
    with h5py.File(path, "r") as f:
        assert f["obsm/X_f32"].chunks is None and f["obsm/X_f64"].chunks is None, "expected contiguous layout"
    w = ex.Writer()
    w.add("n_obs", n)
    w.add("pattern", "obsm", ex.enc("X_f32"), n, d)
    w.add("pattern", "obsm", ex.enc("X_f64"), n, d)
    w.save(out / "large_contiguous.expect")


def nullable_files(out, rng):
    n = 10
    obs = pd.DataFrame(index=[f"c{i}" for i in range(n)])
    obs["count"] = pd.array([1, None, 3, 4, None, 6, 7, 8, 9, -10], dtype="Int64")
    obs["flag"] = pd.array([True, False, None, True, True, False, None, False, True, True], dtype="boolean")
    obs["name"] = pd.array(["a", None, "ü", "d", "e", "", "g", None, "i", "j"], dtype="string")
    obs["int_cat"] = pd.Categorical([3, 1, 2, 3, 1, 2, 3, 1, 2, None])
    obs["float_cat"] = pd.Categorical([0.5, 1.5, 0.5, 2.0, 1.5, 0.5, 2.0, 0.5, 1.5, 2.0])
    obs["ordered_cat"] = pd.Categorical(["lo", "hi", "mid"] * 3 + ["lo"], categories=["lo", "mid", "hi"],
                                        ordered=True)
    obs["bool_cat"] = pd.Categorical([True, False] * 5)
    a = ad.AnnData(X=rng.normal(size=(n, 3)).astype(np.float32), obs=obs)
    ad.settings.allow_write_nullable_strings = True
    save(a, out, "nullable")

    # anndata 0.13 + pandas 3: the index and string columns are nullable-string-array groups. Where the installed
    # pandas is older, the same layout is produced by rewriting anndata's own file with h5py.
    b = ad.AnnData(X=rng.normal(size=(n, 3)).astype(np.float32),
                   obs=pd.DataFrame({"donor": pd.array([f"d{i % 4}" for i in range(n)], dtype="string")},
                                    index=pd.Index([f"cell_{i}" for i in range(n)], dtype="string")))
    path = save(b, out, "pandas3_strings")
    with h5py.File(path, "r+") as f:
        obs_group = f["obs"]
        index_name = obs_group.attrs["_index"]
        if obs_group[index_name].attrs.get("encoding-type") != "nullable-string-array":
            values = obs_group[index_name][()]
            del obs_group[index_name]
            g = obs_group.create_group(index_name)
            g.attrs["encoding-type"] = "nullable-string-array"
            g.attrs["encoding-version"] = "0.1.0"
            g.create_dataset("values", data=values, dtype=h5py.string_dtype())
            g.create_dataset("mask", data=np.zeros(len(values), dtype=bool))
    ad.settings.allow_write_nullable_strings = False


def version_tuple(package):
    return tuple(int(p) for p in importlib.metadata.version(package).split(".")[:2] if p.isdigit())


def pandas3_files(out, rng):
    """Written by anndata ≥ 0.13 with pandas ≥ 3 as they are, nothing rewritten: pandas 3 makes the index and
    string columns its `str` dtype (missing = NaN), which anndata 0.13 writes as nullable-string-array groups
    (values + mask, attribute na-value); pd.StringDtype columns (missing = pd.NA) likewise."""
    if version_tuple("anndata") < (0, 13) or version_tuple("pandas") < (3, 0):
        sys.exit(f"--pandas3 needs anndata >= 0.13 and pandas >= 3; this interpreter has anndata "
                 f"{importlib.metadata.version('anndata')}, pandas {pd.__version__}")
    n, n_vars = 10, 6
    obs = pd.DataFrame(index=[f"cell-{i}" for i in range(n)])
    obs["donor"] = [f"donor {i % 3}" for i in range(n)]
    obs["note"] = ["a", None, "ü", "d", None, "", "g", "h", "i", "细胞"]
    obs["name"] = pd.array(["x", "y", None, "z", "x", None, "é", "x", "y", "z"], dtype="string")
    obs["cell_type"] = pd.Categorical(["T", "B", None, "T", "NK", "B", "T", "NK", "B", "T"],
                                      categories=["B", "NK", "T"])
    obs["count"] = pd.array([1, None, 3, 4, None, 6, 7, 8, 9, -10], dtype="Int64")
    obs["flag"] = pd.array([True, False, None, True, True, False, None, False, True, True], dtype="boolean")
    obs["score"] = rng.normal(size=n)
    obs["is_doublet"] = rng.random(n) < 0.3
    var = pd.DataFrame(index=[f"GENE{j}" for j in range(n_vars)])
    var["symbol"] = [f"sym-{j}" for j in range(n_vars)]
    var["mean"] = rng.random(n_vars)
    assert str(obs.index.dtype) == "str" and str(obs["note"].dtype) == "str", (obs.index.dtype, obs.dtypes)

    def make(x):
        a = ad.AnnData(X=x, obs=obs.copy(), var=var.copy())
        a.obsm["X_pca"] = rng.normal(size=(n, 4)).astype(np.float32)
        a.obsm["coords"] = pd.DataFrame({"x": rng.random(n), "y": rng.random(n)}, index=obs.index)
        a.obsm["knn"] = sp.csr_matrix((rng.random((n, 5)) < 0.3).astype(np.float32))
        a.uns["method"] = "umap ✓"
        a.uns["resolution"] = 0.5
        return a

    dense = rng.normal(size=(n, n_vars)).astype(np.float32)
    save(make(dense), out, "pandas3_native")
    save(make(sp.csr_matrix(dense * (dense > 0))), out, "pandas3_categoricals", keep_strings=False)
    with h5py.File(out / "pandas3_native.h5ad", "r") as f:
        for element in ("obs/_index", "obs/note", "obs/name", "var/_index"):
            encoding = f[element].attrs.get("encoding-type")
            assert encoding == "nullable-string-array", f"pandas3_native.h5ad: {element} is {encoding}"
    with h5py.File(out / "pandas3_categoricals.h5ad", "r") as f:
        for element in ("obs/donor", "obs/note", "obs/name"):
            encoding = f[element].attrs.get("encoding-type")
            assert encoding == "categorical", f"pandas3_categoricals.h5ad: {element} is {encoding}"


def fixed_string_file(out):
    """Fixed-length (NUL-padded) ASCII strings, UTF-8 variable-length strings, and an empty column-order."""
    path = out / "fixed_strings.h5ad"
    names = ["AAACCTG-1", "AAACGGG", "Zellé-3", "细胞-4"]
    with h5py.File(path, "w") as f:
        f.attrs["encoding-type"] = "anndata"
        f.attrs["encoding-version"] = "0.1.0"
        obs = f.create_group("obs")
        obs.attrs.update({"encoding-type": "dataframe", "encoding-version": "0.2.0", "_index": "_index",
                          "column-order": np.array([], dtype=np.float64)})
        obs.create_dataset("_index", data=np.array([n.encode() for n in names], dtype=h5py.string_dtype("utf-8", 12)))
        var = f.create_group("var")
        var.attrs.update({"encoding-type": "dataframe", "encoding-version": "0.2.0", "_index": "gene_ids",
                          "column-order": np.array(["kind"], dtype=object)})
        var.create_dataset("gene_ids", data=np.array([b"G1", b"G22", b"G333"], dtype="S8"))
        kind = var.create_group("kind")
        kind.attrs.update({"encoding-type": "categorical", "encoding-version": "0.2.0", "ordered": False})
        kind.create_dataset("codes", data=np.array([1, 0, 1], dtype=np.int8))
        kind.create_dataset("categories", data=np.array([b"coding", b"lncRNA"], dtype="S10"))
        x = f.create_dataset("X", data=np.arange(12, dtype=np.float32).reshape(4, 3))
        x.attrs.update({"encoding-type": "array", "encoding-version": "0.2.0"})
    w = ex.Writer()
    w.add("n_obs", 4)
    w.add("n_vars", 3)
    w.names("obs", names)
    w.names("var", ["G1", "G22", "G333"])
    w.add("x", "array", "float32", 4, 3)
    w.dense("X", None, np.arange(12).reshape(4, 3))
    w.columns("obs", [])
    w.columns("var", ["kind"])
    w.categorical("var", "kind", ["coding", "lncRNA"], [1, 0, 1])
    w.save(out / "fixed_strings.expect")


def legacy_06_file(out, rng):
    """anndata ≤0.6: obs/var/obsm as compound datasets, categories in uns/<col>_categories, h5sparse X.

    obsm holds a float32 and a float64 array field (anndata ≤0.6 wrote both). A second file, legacy_06_obsm_unreadable,
    is the same with obsm stored under a filter nobody has: its shapes must still be reported (they come from the
    dataspace and the compound type), while reading the values must fail naming the filter.
    """
    n_obs, n_vars = 6, 4
    cells = [f"cell{i}" for i in range(n_obs)]
    genes = [f"g{j}" for j in range(n_vars)]
    louvain_codes = np.array([0, 1, 1, 2, 0, 2], dtype=np.int64)
    n_counts = rng.random(n_obs).astype(np.float32)
    pca = rng.normal(size=(n_obs, 3)).astype(np.float32)
    umap = rng.normal(size=(n_obs, 2))
    x = sp.random(n_obs, n_vars, density=0.5, format="csr", random_state=SEED, dtype=np.float32)
    obsm = np.zeros(n_obs, dtype=[("X_pca", "<f4", (3,)), ("X_umap", "<f8", (2,))])
    obsm["X_pca"] = pca
    obsm["X_umap"] = umap

    def write(path, obsm_unreadable):
        with h5py.File(path, "w") as f:
            obs = np.zeros(n_obs, dtype=[("index", "S10"), ("louvain", "<i8"), ("n_counts", "<f4")])
            obs["index"] = [c.encode() for c in cells]
            obs["louvain"] = louvain_codes
            obs["n_counts"] = n_counts
            f.create_dataset("obs", data=obs)
            var = np.zeros(n_vars, dtype=[("index", "S10"), ("gene_symbols", "S10")])
            var["index"] = [g.encode() for g in genes]
            var["gene_symbols"] = [f"SYM{j}".encode() for j in range(n_vars)]
            f.create_dataset("var", data=var)
            if obsm_unreadable:
                d = f.create_dataset("obsm", shape=(n_obs,), dtype=obsm.dtype, chunks=(n_obs,), compression=32099,
                                     allow_unknown_filter=True)
                d.id.write_direct_chunk((0,), obsm.tobytes())
            else:
                f.create_dataset("obsm", data=obsm)
            f.create_dataset("uns/louvain_categories", data=np.array([b"0", b"1", b"2"], dtype="S1"))
            g = f.create_group("X")
            g.attrs["h5sparse_format"] = "csr"
            g.attrs["h5sparse_shape"] = np.array([n_obs, n_vars])
            g.create_dataset("data", data=x.data)
            g.create_dataset("indices", data=x.indices)
            g.create_dataset("indptr", data=x.indptr)

    def common(w):
        w.add("n_obs", n_obs)
        w.names("obs", cells)
        w.keys("obsm", ["X_pca", "X_umap"])
        w.add("info", "obsm", ex.enc("X_pca"), "_", "float32", n_obs, 3)
        w.add("info", "obsm", ex.enc("X_umap"), "_", "float64", n_obs, 2)

    write(out / "legacy_06.h5ad", obsm_unreadable=False)
    w = ex.Writer()
    common(w)
    w.add("n_vars", n_vars)
    w.names("var", genes)
    w.add("x", "csr_matrix", "float32", n_obs, n_vars)
    w.dense("X", None, x.toarray())
    w.columns("obs", ["louvain", "n_counts"])
    w.categorical("obs", "louvain", ["0", "1", "2"], louvain_codes)
    w.numeric("obs", "n_counts", n_counts)
    w.columns("var", ["gene_symbols"])
    w.string("var", "gene_symbols", [f"SYM{j}" for j in range(n_vars)])
    w.dense("obsm", "X_pca", pca)
    w.dense("obsm", "X_umap", umap)
    w.add("generation", ex.enc("legacy (≤0.6)"))
    w.save(out / "legacy_06.expect")

    write(out / "legacy_06_obsm_unreadable.h5ad", obsm_unreadable=True)
    w = ex.Writer()
    common(w)
    for key in ("X_pca", "X_umap"):
        w.fail("obsm:" + ex.enc(key), "/obsm (field " + key + ")", "filter id 32099")
    w.save(out / "legacy_06_obsm_unreadable.expect")


def legacy_07_file(out, rng, name, compression):
    """anndata 0.7: categorical = int dataset + `categories` object reference into obs/__categories."""
    path = out / f"{name}.h5ad"
    n_obs, n_vars = 8, 5
    cells = [f"AAAC{i}" for i in range(n_obs)]
    genes = [f"Gene{j}" for j in range(n_vars)]
    codes = np.array([0, 1, -1, 1, 0, 2, 2, 0], dtype=np.int8)
    categories = ["alpha", "beta", "gamma"]
    age = rng.random(n_obs)
    # mostly zeros, so LZF really compresses the chunks (h5py stores a chunk unfiltered when it would not shrink)
    x = np.where(rng.random((n_obs, n_vars)) < 0.2, rng.normal(size=(n_obs, n_vars)), 0).astype(np.float32)
    umap = np.round(rng.normal(size=(n_obs, 2)), 1)
    kw = {"compression": compression} if compression else {}
    str_dt = h5py.string_dtype()
    with h5py.File(path, "w") as f:
        f.create_dataset("X", data=x, chunks=(n_obs, n_vars), **kw)
        obs = f.create_group("obs")
        obs.attrs["_index"] = "index"
        obs.attrs["column-order"] = np.array(["cluster", "age"], dtype=object)
        obs.attrs["encoding-type"] = "dataframe"
        obs.attrs["encoding-version"] = "0.1.0"
        obs.create_dataset("index", data=np.array(cells, dtype=object), dtype=str_dt, chunks=(4,), **kw)
        cats = obs.create_dataset("__categories/cluster", data=np.array(categories, dtype=object), dtype=str_dt)
        cluster = obs.create_dataset("cluster", data=codes, chunks=(4,), **kw)
        cluster.attrs["categories"] = cats.ref
        obs.create_dataset("age", data=age, chunks=(4,), **kw)
        var = f.create_group("var")
        var.attrs["_index"] = "index"
        var.attrs["column-order"] = np.array([], dtype=np.float64)
        var.attrs["encoding-type"] = "dataframe"
        var.attrs["encoding-version"] = "0.1.0"
        var.create_dataset("index", data=np.array(genes, dtype=object), dtype=str_dt)
        f.create_dataset("obsm/X_umap", data=np.repeat(umap[:1], n_obs, axis=0), chunks=(n_obs, 2), **kw)
        f.create_dataset("uns/clustering_resolution", data=1.5)
        if compression:
            for key in ("X", "obsm/X_umap", "obs/index"):
                assert f[key].id.get_chunk_info(0).filter_mask == 0, f"{key}: chunk stored without {compression}"
    umap = np.repeat(umap[:1], n_obs, axis=0)
    w = ex.Writer()
    w.add("n_obs", n_obs)
    w.add("n_vars", n_vars)
    w.names("obs", cells)
    w.names("var", genes)
    w.add("x", "_", "float32", n_obs, n_vars)
    w.dense("X", None, x)
    w.columns("obs", ["cluster", "age"])
    w.categorical("obs", "cluster", categories, codes)
    w.numeric("obs", "age", age)
    w.columns("var", [])
    w.keys("obsm", ["X_umap"])
    w.dense("obsm", "X_umap", umap)
    w.uns("clustering_resolution", 1.5)
    w.add("generation", ex.enc("legacy (0.7)"))
    w.save(out / f"{name}.expect")


def malformed_files(out, rng):
    """Valid anndata files broken in one place each; the expect file names the error the reader must give."""
    n_obs, n_vars = 6, 5
    x = sp.random(n_obs, n_vars, density=0.6, format="csr", random_state=SEED, dtype=np.float32)
    a = ad.AnnData(X=x, obs=pd.DataFrame(index=[f"c{i}" for i in range(n_obs)]),
                   var=pd.DataFrame(index=[f"g{j}" for j in range(n_vars)]))
    a.obs["cluster"] = pd.Categorical(["a", "b", "a", "b", "a", "b"])
    a.obsm["X_pca"] = rng.normal(size=(n_obs, 3)).astype(np.float32)

    def broken(name, edit, *fails, readable=None):
        path = out / f"{name}.h5ad"
        a.write_h5ad(path)
        with h5py.File(path, "r+") as f:
            edit(f)
        w = ex.Writer()
        for what, *needles in fails:
            w.fail(what, *needles)
        if readable:
            readable(w)
        w.save(out / f"{name}.expect")

    def replace(f, key, values):
        del f[key]
        f.create_dataset(key, data=values)

    indptr = x.indptr.copy()
    indptr[3], indptr[4] = indptr[4] + 1, indptr[3]
    broken("bad_indptr", lambda f: replace(f, "X/indptr", indptr), ("x_sparse", "/X/indptr", "decreases"),
           ("x_dense", "/X/indptr", "decreases"))
    short_indptr = x.indptr[:-2]
    broken("short_indptr", lambda f: replace(f, "X/indptr", short_indptr), ("x_sparse", "/X/indptr", "expected 7"))
    bad_indices = x.indices.copy()
    bad_indices[2] = n_vars + 3
    broken("bad_indices", lambda f: replace(f, "X/indices", bad_indices), ("x_sparse", "/X/indices", "outside"))
    broken("missing_indices", lambda f: f["X"].__delitem__("indices"), ("x_sparse", "/X/indices", "missing"))
    broken("obsm_wrong_rows", lambda f: replace(f, "obsm/X_pca", np.zeros((n_obs + 2, 3), np.float32)),
           ("obsm:" + ex.enc("X_pca"), "/obsm/X_pca", "rows"))
    broken("column_wrong_length", lambda f: replace(f, "obs/cluster/codes", np.zeros(n_obs - 1, np.int8)),
           ("obs:" + ex.enc("cluster"), "/obs/cluster", "rows"))
    broken("bad_code", lambda f: replace(f, "obs/cluster/codes", np.array([0, 1, 5, 0, 1, 0], np.int8)),
           ("obs:" + ex.enc("cluster"), "/obs/cluster/codes", "outside"))
    broken("missing_obsm_key", lambda f: None, ("obsm:" + ex.enc("X_umap"), "X_umap", "X_pca"))
    broken("missing_index", lambda f: f["obs"].__delitem__(f["obs"].attrs["_index"]), ("obs_names", "/obs/", "missing"))

    # a dataset compressed with a filter nobody has (id 32099): the error must name the filter
    def unknown_filter(f):
        del f["obsm/X_pca"]
        d = f["obsm"].create_dataset("X_pca", shape=(n_obs, 3), dtype=np.float32, chunks=(n_obs, 3),
                                     compression=32099, allow_unknown_filter=True)
        d.id.write_direct_chunk((0, 0), b"\x00" * 40)
        d.attrs.update({"encoding-type": "array", "encoding-version": "0.2.0"})
    broken("unknown_filter", unknown_filter, ("obsm:" + ex.enc("X_pca"), "/obsm/X_pca", "filter id 32099"))

    # X unreadable (its data needs a filter nobody has): obsm, obs and names must still read, since reading them
    # never touches X
    def x_unreadable(f):
        del f["X/data"]
        d = f["X"].create_dataset("data", shape=(x.nnz,), dtype=np.float32, chunks=(x.nnz,), compression=32099,
                                  allow_unknown_filter=True)
        d.id.write_direct_chunk((0,), b"\x00" * 8)

    def still_readable(w):
        w.add("n_obs", n_obs)
        w.names("obs", list(a.obs_names))
        w.dense("obsm", "X_pca", a.obsm["X_pca"])
        describe_column(w, "obs", "cluster", a.obs["cluster"])

    broken("x_unreadable", x_unreadable, ("x_sparse", "/X/data", "filter id 32099"), readable=still_readable)
    broken("x_wrong_shape", lambda f: f["X"].attrs.__setitem__("shape", np.array([n_obs + 1, n_vars])),
           ("x_dense", "/X", "does not match"), ("x_sparse", "/X", "does not match"))

    # an HDF5 file that is not AnnData
    with h5py.File(out / "not_anndata.h5ad", "w") as f:
        f.create_dataset("matrix", data=np.zeros(3))
    w = ex.Writer()
    w.fail("open", "not an AnnData file", "not_anndata.h5ad")
    w.save(out / "not_anndata.expect")


def pbmc_expect(out, pbmc):
    adata = ad.read_h5ad(pbmc)
    w = ex.Writer()
    describe(adata, w)
    w.save(out / "pbmc68k_reduced.expect")


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    if "--pandas3" in sys.argv:
        pandas3_files(out, rng)
    modern_files(out, rng)
    if "--anndata-only" in sys.argv or "--pandas3" in sys.argv:
        # an older anndata as the writer (Debian's 0.8): only what anndata itself writes
        (out / "versions.txt").write_text(f"anndata {ad.__version__} pandas {pd.__version__}\n")
        return
    nullable_files(out, rng)
    large_contiguous_file(out)
    fixed_string_file(out)
    legacy_06_file(out, rng)
    legacy_07_file(out, rng, "legacy_07", None)
    legacy_07_file(out, rng, "legacy_07_lzf", "lzf")
    malformed_files(out, rng)
    if len(sys.argv) > 2 and not sys.argv[2].startswith("--"):
        pbmc_expect(out, sys.argv[2])
    versions = f"anndata {ad.__version__} h5py {h5py.__version__} pandas {pd.__version__} numpy {np.__version__}"
    (out / "versions.txt").write_text(versions + "\n")


if __name__ == "__main__":
    main()
