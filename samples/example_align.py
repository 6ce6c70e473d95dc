#!/usr/bin/env python3
"""Aligns the bundled query batch (cells_batch_b.h5ad) onto the reference batch (cells_batch_a.h5ad) with
flashot's Python API, transfers the reference's cell types, and plots the result with matplotlib.

  python samples/example_align.py [-o align.png]

Needs: the flashot package (`pip install .`), anndata and matplotlib. docs/python.md.
"""

import argparse
import pathlib

import anndata
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import flashot  # noqa: E402

here = pathlib.Path(__file__).resolve().parent
parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("-o", "--output", default="align.png", help="the figure (PNG)")
args = parser.parse_args()

query = anndata.read_h5ad(here / "cells_batch_b.h5ad")
reference = anndata.read_h5ad(here / "cells_batch_a.h5ad")
alignment = flashot.tl.align(query, reference, key="X_pca", transfer_labels="cell_type")
print(alignment)
truth = query.obs["cell_type"].astype(str).to_numpy()
found = query.obs["cell_type_flashot"].astype(str).to_numpy()
print(f"cell types transferred: {np.mean(truth == found):.1%} agree with the query's own annotation; "
      f"mean confidence {query.obs['cell_type_flashot_confidence'].mean():.3f}")

types = sorted(set(reference.obs["cell_type"].astype(str)))
colors = {t: plt.cm.tab10(i % 10) for i, t in enumerate(types)}
panels = [
    ("reference (batch a)", reference.obsm["X_pca"], reference.obs["cell_type"].astype(str)),
    ("query (batch b), before", query.obsm["X_pca"], query.obs["cell_type"].astype(str)),
    ("query aligned, transferred types", query.obsm["X_pca_flashot"], query.obs["cell_type_flashot"].astype(str)),
]
fig, axes = plt.subplots(1, 3, figsize=(15, 4.8), sharex=True, sharey=True)
for ax, (title, points, labels) in zip(axes, panels):
    ax.scatter(reference.obsm["X_pca"][:, 0], reference.obsm["X_pca"][:, 1], s=3, c="0.85", linewidths=0)
    ax.scatter(points[:, 0], points[:, 1], s=4, c=[colors[t] for t in labels], linewidths=0)
    ax.set_title(title)
    ax.set_xlabel("PC 1")
axes[0].set_ylabel("PC 2")
handles = [plt.Line2D([], [], marker="o", ls="", color=colors[t], label=t) for t in types]
fig.legend(handles=handles, loc="lower center", ncol=len(types), frameon=False)
fig.tight_layout(rect=(0, 0.07, 1, 1))
fig.savefig(args.output, dpi=110)
print(f"wrote {args.output}")
