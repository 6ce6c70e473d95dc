"""flashot: entropic optimal transport for single-cell data and point clouds, on NVIDIA GPUs or any CPU.

The engine's API (Problem, solve options and results, every plan operation, the Sinkhorn divergence, gradients
and Hessian-vector products, multi-GPU options) comes from the compiled module; ``flashot.tl`` works on AnnData
objects the way ``flashot align`` / ``map`` / ``register`` work on files, writing the same obsm / obs / uns
names; ``flashot.read`` / ``flashot.write`` use flashot's C++ readers and writers. See docs/python.md.
"""

from ._flashot import (  # noqa: F401
    BackendOptions,
    BatchResults,
    DivergenceResult,
    LabelTransfer,
    Problem,
    ProcessGroup,
    Progress,
    SolveOptions,
    SolveResult,
    TopKCoupling,
    TransportDerivatives,
    available_backends,
    cuda_available,
    cuda_compiled,
    cuda_copies,
    device_memory,
    io_compiled,
    process_group_from_environment,
    rank_options,
    sinkhorn_divergence,
    sinkhorn_divergence_gradient,
    solve_batch,
    version,
)
from ._progress import ProgressBar  # noqa: F401
from . import tl  # noqa: F401

if io_compiled:
    from ._flashot import FormatError, H5adReader, IoError, load_solution, save_solution  # noqa: F401
    from .io import read, write  # noqa: F401
else:  # a module built with FLASHOT_IO=OFF (no HDF5, e.g. for a GPU machine): the engine and tl.align only

    def _no_io(*args, **kwargs):
        raise RuntimeError("this flashot module was built without io (FLASHOT_IO=OFF): no file reading or writing")

    read = write = load_solution = save_solution = _no_io

__version__ = version()
