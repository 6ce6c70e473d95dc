"""Reading a large binary PLY: flashot's read_ply side by side with Python's plyfile, in one run.

Usage: io_ply_bench.py PATH/TO/flashot_ply_tool [--points 10000000] [--repeats 5] [--folder DIR]

Writes two binary_little_endian clouds with plyfile (x,y,z float; and a scan layout x,y,z,nx,ny,nz float +
red,green,blue uchar), then, alternating so that load on the machine hits both sides alike, times
  flashot          read_ply (timed inside flashot_ply_tool: the file mapped, every property converted to double)
  plyfile lazy     PlyData.read as is: plyfile memory-maps the payload and reads no bytes yet (not comparable)
  plyfile copy     PlyData.read + np.array(data): the whole payload in memory, in the file's own types
  plyfile float64  PlyData.read + every property as a float64 column: the same result flashot returns
The page cache is warm for every reader (each file is read once before timing). Prints best and median seconds.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import plyfile
from plyfile import PlyData, PlyElement

SEED = 1


def write_cloud(path, n, layout):
    rng = np.random.default_rng(SEED)
    fields = [("x", "f4"), ("y", "f4"), ("z", "f4")]
    if layout == "scan":
        fields += [("nx", "f4"), ("ny", "f4"), ("nz", "f4"), ("red", "u1"), ("green", "u1"), ("blue", "u1")]
    data = np.empty(n, dtype=fields)
    for name, code in fields:
        if code == "f4":
            data[name] = rng.standard_normal(n, dtype=np.float32)
        else:
            data[name] = rng.integers(0, 256, n, dtype=np.uint8)
    PlyData([PlyElement.describe(data, "vertex")], byte_order="<").write(str(path))


def flashot_read(tool, path):
    out = subprocess.run([tool, "read", str(path)], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["seconds"]


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def plyfile_lazy(path):
    PlyData.read(str(path))


def plyfile_copy(path):
    np.array(PlyData.read(str(path))["vertex"].data)


def plyfile_float64(path):
    vertex = PlyData.read(str(path))["vertex"].data
    [np.array(vertex[name], dtype=np.float64) for name in vertex.dtype.names]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("tool")
    parser.add_argument("--points", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--folder", default=None)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        print(f"io_ply_bench: {args.points:,} points, {args.repeats} repeats; {platform.processor() or platform.machine()},"
              f" {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; plyfile {plyfile_version()},"
              f" numpy {np.__version__}")
        for layout in ("xyz", "scan"):
            path = Path(folder) / f"{layout}.ply"
            write_cloud(path, args.points, layout)
            flashot_read(args.tool, path)  # warm the page cache
            plyfile_copy(path)
            times = {"flashot": [], "plyfile lazy": [], "plyfile copy": [], "plyfile float64": []}
            for _ in range(args.repeats):
                times["flashot"].append(flashot_read(args.tool, path))
                times["plyfile lazy"].append(timed(lambda: plyfile_lazy(path)))
                times["plyfile copy"].append(timed(lambda: plyfile_copy(path)))
                times["plyfile float64"].append(timed(lambda: plyfile_float64(path)))
            size = path.stat().st_size / 2**20
            print(f"\n{layout}: {size:.0f} MiB binary_little_endian")
            print(f"  {'reader':<16} {'best s':>8} {'median s':>9}")
            for name, values in times.items():
                print(f"  {name:<16} {min(values):8.3f} {statistics.median(values):9.3f}")
            best = {name: min(values) for name, values in times.items()}
            print(f"  flashot / plyfile float64 = {best['flashot'] / best['plyfile float64']:.2f}, "
                  f"flashot / plyfile copy = {best['flashot'] / best['plyfile copy']:.2f} (best times; < 1 = faster)")
        print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


def plyfile_version():
    try:
        from importlib.metadata import version
        return version("plyfile")
    except Exception:
        return "?"


if __name__ == "__main__":
    main()
