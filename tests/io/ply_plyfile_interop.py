"""PLY interoperability with Python's plyfile, an independent reader and writer.

plyfile writes a file of every scalar type (plus lists) in each format; flashot_ply_tool must dump exactly the
values written, and convert it to each format; plyfile must read flashot's files back with the same types and
values. Usage: ply_plyfile_interop.py PATH/TO/flashot_ply_tool   (exit 0 = pass)
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from plyfile import PlyData, PlyElement

FORMATS = ["ascii", "binary_little_endian", "binary_big_endian"]
# numpy dtype → the header name plyfile writes and flashot reports
TYPES = {"i1": "char", "u1": "uchar", "i2": "short", "u2": "ushort",
         "i4": "int", "u4": "uint", "f4": "float", "f8": "double"}
N_VERTICES = 64
N_FACES = 20
SEED = 20261129


def make_vertex(rng):
    fields = []
    for code in TYPES:
        dtype = np.dtype(code)
        if dtype.kind == "f":
            values = rng.standard_normal(N_VERTICES) * 10.0 ** rng.integers(-30, 30, N_VERTICES)
            values[:4] = [0.0, -0.0, np.finfo(dtype).max, np.finfo(dtype).tiny]
        else:
            info = np.iinfo(dtype)
            values = rng.integers(info.min, info.max, N_VERTICES, endpoint=True)
            values[:2] = [info.min, info.max]
        fields.append((f"p_{code}", dtype, values.astype(dtype)))
    array = np.empty(N_VERTICES, dtype=[(name, dtype) for name, dtype, _ in fields])
    for name, _, values in fields:
        array[name] = values
    return array


def make_face(rng):
    indices = np.empty(N_FACES, dtype=object)
    weights = np.empty(N_FACES, dtype=object)
    for i in range(N_FACES):
        indices[i] = rng.integers(0, N_VERTICES, rng.integers(0, 7)).astype("i4")
        weights[i] = rng.standard_normal(rng.integers(0, 4)).astype("f8")
    array = np.empty(N_FACES, dtype=[("vertex_indices", object), ("weights", object)])
    array["vertex_indices"] = indices
    array["weights"] = weights
    return array


def tool(*args):
    result = subprocess.run([sys.argv[1], *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"flashot_ply_tool {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def same(a, b):
    a = np.asarray(a, dtype="f8")
    b = np.asarray(b, dtype="f8")
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


def check_dump(path, vertex, face, fmt):
    dumped = json.loads(tool("dump", str(path)))
    assert dumped["format"] == fmt, (path, dumped["format"])
    assert dumped["comments"] == ["written by plyfile"], dumped["comments"]
    assert dumped["obj_info"] == ["interop test"], dumped["obj_info"]
    elements = {e["name"]: e for e in dumped["elements"]}
    assert list(elements) == ["vertex", "face"], list(elements)
    assert elements["vertex"]["count"] == N_VERTICES
    for prop, code in zip(elements["vertex"]["properties"], TYPES):
        assert prop["name"] == f"p_{code}" and prop["type"] == TYPES[code] and not prop["list"], prop["name"]
        assert same(prop["values"], vertex[f"p_{code}"]), f"{path}: vertex.{prop['name']} values differ"
    lists = {p["name"]: p for p in elements["face"]["properties"]}
    for name, count_type, item_type in (("vertex_indices", "uchar", "int"), ("weights", "ushort", "double")):
        prop = lists[name]
        assert prop["list"] and prop["count_type"] == count_type and prop["type"] == item_type, prop
        expected = np.concatenate([np.asarray(row, dtype="f8") for row in face[name]])
        lengths = np.diff(prop["offsets"])
        assert list(lengths) == [len(row) for row in face[name]], f"{path}: face.{name} lengths differ"
        assert same(prop["values"], expected), f"{path}: face.{name} values differ"


def check_plyfile_reads(path, vertex, face, fmt):
    data = PlyData.read(str(path))
    assert data.text == (fmt == "ascii"), (path, data.text)
    if fmt != "ascii":
        assert data.byte_order == ("<" if fmt == "binary_little_endian" else ">"), (path, data.byte_order)
    assert data.comments == ["written by plyfile"], data.comments
    assert data.obj_info == ["interop test"], data.obj_info
    read_vertex = data["vertex"].data
    for code in TYPES:
        name = f"p_{code}"
        got = read_vertex.dtype[name]
        assert got.kind == np.dtype(code).kind and got.itemsize == np.dtype(code).itemsize, (path, name, got)
        assert same(read_vertex[name], vertex[name]), f"{path}: vertex.{name} values differ after flashot wrote it"
    for name in ("vertex_indices", "weights"):
        for row, (got, want) in enumerate(zip(data["face"].data[name], face[name])):
            assert same(got, want), f"{path}: face.{name} row {row} differs after flashot wrote it"


def main():
    rng = np.random.default_rng(SEED)
    vertex = make_vertex(rng)
    face = make_face(rng)
    checked = 0
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        for fmt in FORMATS:
            source = folder / f"plyfile_{fmt}.ply"
            elements = [
                PlyElement.describe(vertex, "vertex"),
                PlyElement.describe(face, "face", len_types={"vertex_indices": "u1", "weights": "u2"},
                                    val_types={"vertex_indices": "i4", "weights": "f8"}),
            ]
            byte_order = ">" if fmt == "binary_big_endian" else "<"
            PlyData(elements, text=(fmt == "ascii"), byte_order=byte_order, comments=["written by plyfile"],
                    obj_info=["interop test"]).write(str(source))
            check_dump(source, vertex, face, fmt)
            checked += 1
            for out_fmt in FORMATS:
                converted = folder / f"flashot_{fmt}_to_{out_fmt}.ply"
                tool("convert", str(source), str(converted), out_fmt)
                check_plyfile_reads(converted, vertex, face, out_fmt)
                check_dump(converted, vertex, face, out_fmt)
                checked += 1
    print(f"ply_plyfile_interop: {checked} files checked, every value exact")


if __name__ == "__main__":
    main()
