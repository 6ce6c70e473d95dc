"""Reads a file flashot wrote with Python anndata (and h5py) and compares every value with the expect file flashot
wrote beside it (format: h5ad_expect.py). Exit 0 when everything matches, 1 with the differences listed.

usage: check_with_anndata.py FILE EXPECT [--same-x ORIGINAL] [--rewrite OUTPUT]
  --same-x ORIGINAL: X of FILE must be bit-identical to X of ORIGINAL (dtype, layout, values, attributes):
                     what a copy with additions must leave alone.
  --rewrite OUTPUT:  when everything matches, write what anndata read to OUTPUT in this anndata's own encodings
                     (string columns kept as strings), for flashot to read back against the same EXPECT.
"""

import math
import os
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
FLOAT32_RTOL = 1e-6
problems = []


def report(where, message):
    problems.append(f"{where}: {message}")


class Cursor:
    def __init__(self, tokens):
        self.tokens = tokens
        self.i = 0

    def next(self):
        self.i += 1
        return self.tokens[self.i - 1]

    def size(self):
        return int(self.next())

    def text(self):
        return ex.dec(self.next())

    def number(self):
        t = self.next()
        return math.nan if t == "nan" else float(t)

    def texts(self):
        return [self.text() for _ in range(self.size())]


def dense(m):
    if sp.issparse(m):
        return m.toarray()
    if isinstance(m, pd.DataFrame):
        return m.to_numpy(dtype=np.float64)
    return np.asarray(m)


def check_matrix(where, got, c):
    rows, cols = c.size(), c.size()
    want = np.array([c.number() for _ in range(rows * cols)]).reshape(rows, cols)
    got = np.asarray(dense(got), dtype=np.float64)
    if got.ndim == 1:
        got = got.reshape(-1, 1)
    if got.shape != want.shape:
        report(where, f"shape {got.shape}, expected {want.shape}")
    elif not np.allclose(got, want, rtol=FLOAT32_RTOL, atol=FLOAT32_RTOL, equal_nan=True):
        bad = np.argwhere(~np.isclose(got, want, rtol=FLOAT32_RTOL, atol=FLOAT32_RTOL, equal_nan=True))
        report(where, f"{len(bad)} values differ, first at {tuple(bad[0])}: {got[tuple(bad[0])]} vs {want[tuple(bad[0])]}")


def check_column(where, s, kind, c):
    if kind == "categorical":
        ordered = c.next() == "1"
        categories = c.texts()
        codes = [int(c.next()) for _ in range(c.size())]
        if not isinstance(s.dtype, pd.CategoricalDtype):
            report(where, f"dtype {s.dtype}, expected categorical")
            return
        if [str(x) for x in s.cat.categories] != categories:
            report(where, f"categories {list(s.cat.categories)}, expected {categories}")
        if list(s.cat.codes) != codes:
            report(where, f"codes {list(s.cat.codes)}, expected {codes}")
        if bool(s.cat.ordered) != ordered:
            report(where, f"ordered {s.cat.ordered}, expected {ordered}")
    elif kind == "numeric":
        want = np.array([c.number() for _ in range(c.size())])
        if not pd.api.types.is_numeric_dtype(s.dtype) or pd.api.types.is_bool_dtype(s.dtype):
            report(where, f"dtype {s.dtype}, expected numeric")
            return
        got = s.astype("float64").to_numpy()
        if not np.array_equal(got, want, equal_nan=True):
            report(where, f"values {got}, expected {want}")
    elif kind == "string":
        n = c.size()
        want = [c.text() for _ in range(n)]
        missing = [c.next() == "1" for _ in range(n)]
        got_missing = list(s.isna())
        if got_missing != missing:
            report(where, f"missing {got_missing}, expected {missing}")
        got = ["" if m else str(v) for v, m in zip(s.to_numpy(dtype=object), got_missing)]
        if got != want:
            report(where, f"strings {got}, expected {want}")
    elif kind == "boolean":
        n = c.size()
        want = [c.next() == "1" for _ in range(n)]
        missing = [c.next() == "1" for _ in range(n)]
        if not pd.api.types.is_bool_dtype(s.dtype):
            report(where, f"dtype {s.dtype}, expected boolean")
            return
        got_missing = list(s.isna())
        got = [bool(v) if not m else False for v, m in zip(s.to_numpy(dtype=object), got_missing)]
        if got_missing != missing:
            report(where, f"missing {got_missing}, expected {missing}")
        if [g for g, m in zip(got, missing) if not m] != [w for w, m in zip(want, missing) if not m]:
            report(where, f"flags {got}, expected {want}")


def check_uns(where, adata, key, c):
    value = adata.uns
    for part in key.split("/"):
        if part not in value:
            report(where, "missing")
            return
        value = value[part]
    kind = c.next()
    if kind == "f":
        want = c.number()
        if not isinstance(value, (float, np.floating)) or not (value == want or (math.isnan(want) and math.isnan(value))):
            report(where, f"{value!r} ({type(value).__name__}), expected float {want!r}")
    elif kind == "i":
        want = int(c.next())
        if not isinstance(value, (int, np.integer)) or int(value) != want:
            report(where, f"{value!r} ({type(value).__name__}), expected int {want}")
    elif kind == "s":
        want = c.text()
        if value != want:
            report(where, f"{value!r}, expected {want!r}")
    else:
        want = np.array([c.number() for _ in range(c.size())])
        if not np.array_equal(np.asarray(value, dtype=np.float64), want, equal_nan=True):
            report(where, f"{value!r}, expected {want!r}")


def same_x(path, original):
    with h5py.File(path, "r") as a, h5py.File(original, "r") as b:
        if ("X" in a) != ("X" in b):
            report("X", "present in only one of the files")
            return
        if "X" not in a:
            return
        xa, xb = a["X"], b["X"]
        if dict(xa.attrs) .keys() != dict(xb.attrs).keys():
            report("X", f"attributes {sorted(xa.attrs)} vs {sorted(xb.attrs)}")
        if isinstance(xa, h5py.Dataset):
            pairs = [("X", xa, xb)]
        else:
            pairs = [(f"X/{k}", xa[k], xb[k]) for k in xb]
        for name, da, db in pairs:
            if da.dtype != db.dtype or da.shape != db.shape or da.chunks != db.chunks:
                report(name, f"{da.dtype}{da.shape} chunks {da.chunks} vs {db.dtype}{db.shape} chunks {db.chunks}")
            elif not np.array_equal(da[()], db[()]):
                report(name, "values differ from the original")


def main():
    path, expect = sys.argv[1], sys.argv[2]
    adata = ad.read_h5ad(path)
    for tokens in ex.parse(expect):
        c = Cursor(tokens)
        tag = c.next()
        where = f"{os.path.basename(path)}: {tag}"
        if tag == "n_obs" and adata.n_obs != c.size():
            report(where, f"{adata.n_obs}")
        elif tag == "n_vars" and adata.n_vars != c.size():
            report(where, f"{adata.n_vars}")
        elif tag == "names":
            which = c.next()
            got = list(adata.obs_names if which == "obs" else adata.var_names)
            want = c.texts()
            if got != want:
                report(f"{where} {which}", f"{got[:5]}…, expected {want[:5]}…")
        elif tag == "x":
            encoding = c.next()
            if encoding == "none":
                if adata.X is not None:
                    report(where, "X present, expected none")
                continue
            dtype, rows, cols = c.next(), c.size(), c.size()
            x = adata.X
            got_encoding = ("csc_matrix" if sp.isspmatrix_csc(x) or isinstance(x, sp.csc_array) else "csr_matrix") \
                if sp.issparse(x) else "array"
            got_dtype = (x.data if sp.issparse(x) else np.asarray(x)).dtype.name
            if (got_encoding, got_dtype, x.shape) != (encoding, dtype, (rows, cols)):
                report(where, f"{got_encoding} {got_dtype} {x.shape}, expected {encoding} {dtype} {(rows, cols)}")
        elif tag == "dense":
            kind, key = c.next(), c.text()
            source = {"X": lambda: adata.X, "obsm": lambda: adata.obsm[key], "varm": lambda: adata.varm[key],
                      "layers": lambda: adata.layers[key], "raw_x": lambda: adata.raw.X}[kind]
            try:
                matrix = source()
            except KeyError:
                report(f"{where} {kind} {key}", "missing")
                continue
            check_matrix(f"{where} {kind} {key}", matrix, c)
        elif tag == "columns":
            which = c.next()
            got = list((adata.obs if which == "obs" else adata.var).columns)
            want = c.texts()
            if got != want:
                report(f"{where} {which}", f"{got}, expected {want}")
        elif tag == "column":
            which, name, kind = c.next(), c.text(), c.next()
            frame = adata.obs if which == "obs" else adata.var
            if name not in frame:
                report(f"{where} {which}/{name}", "missing")
                continue
            check_column(f"{where} {which}/{name}", frame[name], kind, c)
        elif tag == "keys":
            which = c.next()
            got = set({"obsm": adata.obsm, "varm": adata.varm, "layers": adata.layers, "uns": adata.uns}[which].keys())
            got.discard(None)  # anndata 0.13 lists X as layers[None]
            want = set(c.texts())
            if got != want:
                report(f"{where} {which}", f"{sorted(got)}, expected {sorted(want)}")
        elif tag == "uns":
            key = c.text()
            check_uns(f"{where} {key}", adata, key, c)
    if "--same-x" in sys.argv:
        same_x(path, sys.argv[sys.argv.index("--same-x") + 1])
    if problems:
        print(f"anndata {ad.__version__} disagrees with flashot's expectations for {path}:")
        print("\n".join(problems))
        sys.exit(1)
    print(f"anndata {ad.__version__}: {path} matches")
    if "--rewrite" in sys.argv:
        output = sys.argv[sys.argv.index("--rewrite") + 1]
        adata.write_h5ad(output, convert_strings_to_categoricals=False)
        if int(pd.__version__.split(".")[0]) >= 3:
            # what makes the rewrite worth reading back: pandas 3's str index stored the anndata 0.13 way
            with h5py.File(output, "r") as f:
                encoding = f["obs"][f["obs"].attrs["_index"]].attrs.get("encoding-type")
            if encoding != "nullable-string-array":
                print(f"{output}: obs index written as {encoding}, expected nullable-string-array (pandas 3)")
                sys.exit(1)


if __name__ == "__main__":
    main()
