"""The plain-text "expect" format shared by the .h5ad tests and Python anndata.

A file is a stream of whitespace-separated tokens. Strings are hex-encoded UTF-8 ("_" for the empty string) so any
text survives; numbers are Python reprs ("nan" for missing). Records (one per line, for readability):

  n_obs N | n_vars N
  names obs|var N str*N
  x none | x ENCODING DTYPE ROWS COLS
  info obsm KEY ENCODING DTYPE ROWS COLS                              (obsm_info; ENCODING "_" for none)
  dense X|raw_x|obsm|varm|layers KEY ROWS COLS value*(ROWS*COLS)        (KEY "_" for X / raw_x)
  pattern obsm KEY ROWS COLS          (value[i, j] = ((i * COLS + j) % 1000) / 8, for arrays too big to list)
  columns obs|var N str*N                                             (the column order)
  column obs|var NAME categorical ORDERED K str*K N code*N
  column obs|var NAME numeric N value*N
  column obs|var NAME string N str*N missing*N
  column obs|var NAME boolean N flag*N missing*N
  keys obsm|layers|uns|varm N str*N                                   (as a set)
  uns KEY f VALUE | uns KEY i VALUE | uns KEY s STR | uns KEY v N value*N
  raw_var_names N str*N
  fail WHAT STR STR                   (WHAT: open, x_dense, x_sparse, obs_names, obsm:KEY, obs:NAME; the error
                                       message must contain both strings)
"""

import math

import numpy as np


def enc(s):
    if isinstance(s, bytes):
        s = s.decode("utf-8")
    s = str(s)
    return s.encode("utf-8").hex() if s else "_"


def dec(token):
    return "" if token == "_" else bytes.fromhex(token).decode("utf-8")


def num(v):
    v = float(v)
    return "nan" if math.isnan(v) else repr(v)


class Writer:
    def __init__(self):
        self.lines = []

    def add(self, *tokens):
        self.lines.append(" ".join(str(t) for t in tokens))

    def names(self, which, values):
        self.add("names", which, len(values), *[enc(v) for v in values])

    def dense(self, kind, key, matrix):
        m = np.asarray(matrix, dtype=np.float64)
        if m.ndim == 1:
            m = m.reshape(-1, 1)
        self.add("dense", kind, enc(key) if key else "_", m.shape[0], m.shape[1], *[num(v) for v in m.ravel()])

    def keys(self, which, keys):
        self.add("keys", which, len(keys), *[enc(k) for k in keys])

    def columns(self, which, names):
        self.add("columns", which, len(names), *[enc(n) for n in names])

    def categorical(self, which, name, categories, codes, ordered=False):
        self.add("column", which, enc(name), "categorical", int(bool(ordered)), len(categories),
                 *[enc(c) for c in categories], len(codes), *[int(c) for c in codes])

    def numeric(self, which, name, values):
        self.add("column", which, enc(name), "numeric", len(values), *[num(v) for v in values])

    def string(self, which, name, values, missing=None):
        missing = [0] * len(values) if missing is None else [int(bool(m)) for m in missing]
        self.add("column", which, enc(name), "string", len(values), *[enc(v) for v in values], *missing)

    def boolean(self, which, name, flags, missing=None):
        missing = [0] * len(flags) if missing is None else [int(bool(m)) for m in missing]
        self.add("column", which, enc(name), "boolean", len(flags), *[int(bool(f)) for f in flags], *missing)

    def uns(self, key, value):
        if isinstance(value, str):
            self.add("uns", enc(key), "s", enc(value))
        elif isinstance(value, (bool, np.bool_, int, np.integer)):
            self.add("uns", enc(key), "i", int(value))
        elif isinstance(value, (float, np.floating)):
            self.add("uns", enc(key), "f", num(value))
        else:
            values = np.asarray(value, dtype=np.float64).ravel()
            self.add("uns", enc(key), "v", len(values), *[num(v) for v in values])

    def fail(self, what, *needles):
        needles = list(needles) + [""] * (2 - len(needles))
        self.add("fail", what, enc(needles[0]), enc(needles[1]))

    def save(self, path):
        with open(path, "w", encoding="ascii") as f:
            f.write("\n".join(self.lines) + "\n")


def parse(path):
    """Records as lists of tokens, one per line."""
    with open(path, encoding="ascii") as f:
        return [line.split() for line in f if line.strip()]
