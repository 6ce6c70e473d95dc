"""flashot.read / flashot.write: .h5ad and .ply through flashot's C++ io (docs/io-h5ad.md, docs/io-ply.md).

The C++ reader takes every AnnData writer generation (≤0.6 compound obs, 0.7, 0.8–0.12, 0.13 with pandas-3
strings), including files current anndata no longer opens. anndata, pandas and scipy are imported only here.
"""

import os
import tempfile

import numpy as np

from . import _flashot


def _column(values):
    import pandas as pd

    kind = values["kind"]
    missing = values["missing"]
    if kind == "categorical":
        codes = np.asarray(values["codes"], dtype=np.int64)
        dtype = pd.CategoricalDtype(values["categories"], ordered=values["ordered"])
        return pd.Categorical.from_codes(np.where(codes >= len(values["categories"]), -1, codes), dtype=dtype)
    if kind == "numeric":
        return np.asarray(values["values"])
    if kind == "boolean":
        flags = np.asarray(values["values"], dtype=bool)
        if missing is None:
            return flags
        return pd.array([None if m else f for f, m in zip(flags, missing)], dtype="boolean")
    strings = list(values["values"])
    if missing is not None:
        strings = [None if m else s for s, m in zip(strings, missing)]
    return np.asarray(strings, dtype=object)


def read(path, *, obsm=True, layers=True, uns=True):
    """Reads a file with flashot's C++ io.

    .h5ad: an ``anndata.AnnData`` with X (dense, or CSR/CSC as stored), obs and var columns, obsm entries, layers
    (densified) and uns scalars / strings / numeric vectors (nested mappings are skipped); ``obsm``, ``layers``
    and ``uns`` False leave those out.
    .ply: a dict ``{"points": (n, 3) float32, "elements": {element: {property: float64 array}}, "format",
    "comments"}`` (list properties such as faces are not included).
    A malformed file raises flashot.FormatError (a ValueError), an unreadable one flashot.IoError (an OSError),
    both naming the file and the place.
    """
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext == ".ply":
        return _flashot.read_ply(path)
    if ext != ".h5ad":
        raise ValueError(f"{path}: unknown file type '{ext}' (expected .h5ad or .ply)")
    import anndata
    import pandas as pd

    reader = _flashot.H5adReader(path)
    obs = pd.DataFrame(index=pd.Index(reader.obs_names()))
    for column in reader.obs_columns():
        obs[column] = _column(reader.read_obs(column))
    var = pd.DataFrame(index=pd.Index(reader.var_names()))
    for column in reader.var_columns():
        var[column] = _column(reader.read_var(column))
    x = None
    info = reader.x_info()
    if info is not None:
        if info["encoding"] in ("csr_matrix", "csc_matrix"):
            import scipy.sparse as sp

            s = reader.read_x_sparse()
            make = sp.csc_matrix if s["csc"] else sp.csr_matrix
            x = make((s["data"], s["indices"], s["indptr"]), shape=s["shape"])
        else:
            x = reader.read_x_dense()
    adata = anndata.AnnData(X=x, obs=obs, var=var)
    if obsm:
        for key in reader.obsm_keys():
            adata.obsm[key] = reader.read_obsm(key)
    if layers:
        for key in reader.layer_keys():
            adata.layers[key] = reader.read_layer(key)
    if uns:
        for key in reader.uns_keys():
            try:
                value = reader.read_uns(key)
            except _flashot.FormatError:
                continue  # mappings and tables: not read by the C++ reader
            adata.uns[key] = np.asarray(value) if isinstance(value, list) else value
    return adata


def write(path, data, properties=None, *, ascii=False):
    """Writes ``data`` to ``path`` atomically (a temporary file in the same folder, renamed at the end).

    .ply: ``data`` is an (n, 3) array of points; ``properties`` maps names to (n,) float vertex properties; written
    by flashot's C++ PLY writer (binary little-endian, or ASCII with ``ascii=True``).
    .h5ad: ``data`` is an AnnData object, written by anndata itself (every element it holds is kept).
    """
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext == ".ply":
        _flashot.write_ply(path, data, dict(properties or {}), ascii)
        return
    if ext != ".h5ad":
        raise ValueError(f"{path}: unknown file type '{ext}' (expected .h5ad or .ply)")
    if properties is not None:
        raise ValueError("properties are for .ply files; put obs columns into the AnnData object")
    folder = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=".flashot-", suffix=".h5ad", dir=folder)
    os.close(fd)
    try:
        data.write_h5ad(temporary)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
