"""Writes PLY seed files with Python's plyfile (a writer flashot did not write): every format, scalar types, lists,
comments and obj_info, an empty element. Used with Debian's assimp test models as the fuzz_ply seed corpus.

usage: make_ply_seeds.py OUTDIR
"""

import pathlib
import sys

import numpy as np
from plyfile import PlyData, PlyElement


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    n = 12
    vertex = np.zeros(n, dtype=[("x", "f4"), ("y", "f4"), ("z", "f4"), ("red", "u1"), ("green", "u1"),
                                ("blue", "u1"), ("quality", "f8"), ("label", "i4"), ("flags", "u2"), ("tag", "i1")])
    for name in ("x", "y", "z"):
        vertex[name] = rng.normal(size=n)
    vertex["red"] = rng.integers(0, 256, n)
    vertex["quality"] = rng.random(n)
    vertex["label"] = rng.integers(-5, 5, n)
    face = np.empty(4, dtype=[("vertex_indices", "i4", (3,))])
    face["vertex_indices"] = rng.integers(0, n, (4, 3))
    ragged = np.empty(3, dtype=[("vertex_indices", object), ("intensity", "f4")])
    ragged["vertex_indices"] = [np.array([0, 1, 2], "u4"), np.array([3, 4, 5, 6], "u4"), np.array([], "u4")]
    ragged["intensity"] = [0.5, 1.5, 2.5]
    elements = [PlyElement.describe(vertex, "vertex"), PlyElement.describe(face, "face"),
                PlyElement.describe(ragged, "polygon", val_types={"vertex_indices": "u4"},
                                    len_types={"vertex_indices": "u1"}),
                PlyElement.describe(np.zeros(0, dtype=[("w", "f4")]), "nothing")]
    for name, text, byte_order in (("ascii", True, "="), ("binary_le", False, "<"), ("binary_be", False, ">")):
        PlyData(elements, text=text, byte_order=byte_order, comments=["written by plyfile", "seed " + name],
                obj_info=["flashot fuzz seed"]).write(str(out / f"plyfile_{name}.ply"))
    points = np.zeros(200, dtype=[("x", "f8"), ("y", "f8"), ("z", "f8")])
    for name in ("x", "y", "z"):
        points[name] = rng.normal(size=200)
    PlyData([PlyElement.describe(points, "vertex")]).write(str(out / "plyfile_points_f64.ply"))


if __name__ == "__main__":
    main()
