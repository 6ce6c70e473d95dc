"""scanpy-style tools on AnnData objects in memory: what ``flashot align`` / ``map`` / ``register`` do to files,
with the same parameters, defaults and output names (docs/cli.md, docs/python.md).

- ``align(adata, reference, key="X_pca", transfer_labels="cell_type")`` writes ``adata.obsm["X_pca_flashot"]``,
  ``adata.obs["cell_type_flashot"]`` (categorical), ``adata.obs["cell_type_flashot_confidence"]`` and
  ``adata.uns["flashot_epsilon" | "flashot_cost" | "flashot_marginal_error"]``.
- ``map(adata, alignment)`` maps new cells through a solved alignment (or a ``--save-solution`` file).
- ``register(source, target, model="rigid")`` registers two (n, 3) point arrays.

anndata, pandas and scipy are imported only when these functions need them.
"""

import os

import numpy as np

from . import _flashot

_BACKEND_FIELDS = ("backend", "threads", "device", "precision", "screening", "devices", "shards", "nccl")
_DEFAULT_RELATIVE_BLUR = _flashot.DEFAULT_BLUR_RELATIVE  # the engine's rule, as the CLI and the GUI use it


def _backend_options(backend, threads, backend_kwargs):
    unknown = sorted(set(backend_kwargs) - set(_BACKEND_FIELDS))
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(unknown)} (backend options: {', '.join(_BACKEND_FIELDS)})")
    return _flashot.BackendOptions(backend=backend, threads=threads, **backend_kwargs)


def _points(adata, key, what):
    if key not in adata.obsm:
        keys = ", ".join(adata.obsm.keys()) or "none"
        raise KeyError(f"{what} has no obsm['{key}'] (obsm keys: {keys})")
    points = adata.obsm[key]
    if hasattr(points, "toarray"):
        points = points.toarray()
    return np.ascontiguousarray(np.asarray(points), dtype=np.float32)


def _shared_x(adata, reference):
    shared = set(reference.var_names)
    genes = [g for g in adata.var_names if g in shared]
    if not genes:
        raise ValueError("use_x: the two data sets share no genes (var names)")

    def dense(a):
        x = a[:, genes].X
        if hasattr(x, "toarray"):
            x = x.toarray()
        return np.ascontiguousarray(np.asarray(x), dtype=np.float32)

    return dense(adata), dense(reference)


def _check_finite(points, what):
    finite = np.isfinite(points).all(axis=1)
    if not finite.all():
        row = int(np.flatnonzero(~finite)[0])
        raise ValueError(f"{what}: row {row} holds a non-finite value")


def _labels(reference, column):
    """Codes and categories of an obs column, as workflow::read_labels makes them from a file."""
    import pandas as pd

    if column not in reference.obs.columns:
        raise KeyError(f"reference.obs has no column '{column}' (columns: {', '.join(str(c) for c in reference.obs.columns)})")
    values = reference.obs[column]
    if isinstance(values.dtype, pd.CategoricalDtype):
        categories = [_text(c) for c in values.cat.categories]
        return np.asarray(values.cat.codes, dtype=np.int32), categories
    if pd.api.types.is_bool_dtype(values.dtype):
        present = values.notna().to_numpy()
        text = np.where(values.fillna(False).to_numpy(dtype=bool), "true", "false")
        categories = sorted(set(text[present]))
    elif pd.api.types.is_numeric_dtype(values.dtype):
        numbers = values.to_numpy(dtype=np.float64, na_value=np.nan)
        present = ~np.isnan(numbers)
        distinct = np.unique(numbers[present])
        categories = [_value_text(float(v)) for v in distinct]
        codes = np.full(len(numbers), -1, dtype=np.int32)
        codes[present] = np.searchsorted(distinct, numbers[present]).astype(np.int32)
        return codes, categories
    else:
        present = values.notna().to_numpy()
        text = np.asarray([str(v) for v in values.to_numpy()], dtype=object)
        categories = sorted(set(text[present]), key=lambda s: s.encode("utf-8"))
    code_of = {c: i for i, c in enumerate(categories)}
    codes = np.asarray([code_of[t] if p else -1 for t, p in zip(text, present)], dtype=np.int32)
    return codes, categories


def _value_text(value):
    """workflow::value_text (shortest round-trip text: 3, 0.5, 1e-07), also in a module built without io."""
    if _flashot.io_compiled:
        return _flashot.value_text(value)
    if value != value:
        return "nan"
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    if value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


def _text(value):
    if isinstance(value, (float, np.floating)) or (isinstance(value, (int, np.integer)) and not isinstance(value, bool)):
        return _value_text(float(value))
    return str(value)


class Alignment:
    """What ``align`` computed: the solved ``problem`` and ``result`` (flashot.Problem / SolveResult), the points'
    ``key``, the data's ``diameter`` and the ``blur`` used, the ``mapped`` points (n, d), the ``transfer``
    (flashot.LabelTransfer or None) with its ``categories``, the ``coupling`` (scipy CSR, n × m, when asked for)
    and ``adata`` (the object written to: the input, or its copy with ``copy=True``)."""

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def save_solution(self, path):
        """Writes what ``flashot map --solution`` (and ``map`` here) reads, as ``flashot align --save-solution``."""
        n, m = self.problem.n, self.problem.m
        _flashot.save_solution(
            os.fspath(path), self.source_points, np.full(n, 1.0 / n, dtype=np.float32), self.target_points,
            np.full(m, 1.0 / m, dtype=np.float32), self.result, key=self.key,
            representation=self.representation, source="<memory>", target="<memory>")

    def __repr__(self):
        return (f"Alignment(key={self.key!r}, n={self.problem.n}, m={self.problem.m}, d={self.problem.d}, "
                f"blur={self.blur:.4g}, result={self.result!r})")


def align(adata, reference, key="X_pca", transfer_labels=None, *, use_x=False, blur=None,
          rel_blur=_DEFAULT_RELATIVE_BLUR, scaling=0.5, reach=0.0, reach_source=0.0, reach_target=0.0, tol=1e-3,
          max_iters=1000, scheme="alternating", half_cost=False, coupling_k=None, progress=None, copy=False,
          multiscale="auto", backend="auto", threads=0, **backend_kwargs):
    """Aligns ``adata`` (the query) to ``reference`` with entropic OT, as ``flashot align QUERY REFERENCE``.

    Points: ``obsm[key]`` of both (or, with ``use_x``, X on the genes both share, in adata's order; the output
    key is then ``X``). ε = blur² with blur = ``blur`` or ``rel_blur`` × the bounding-box diagonal of both clouds.
    Parameters and defaults are the CLI's (``tol`` = --tol, ``max_iters`` = --max-iters, ``scheme`` alternating,
    ``half_cost`` = --half-cost, reach in data units, ``multiscale`` = --multiscale: 'auto', 'on' or 'off', the
    block-sparse solver for large clouds, docs/multiscale.md); ``backend``, ``threads`` and the other keyword arguments
    (precision, screening, device, devices, shards, nccl) are BackendOptions fields.

    Writes into ``adata`` (or a copy, with ``copy=True``): obsm ``<key>_flashot`` (n × d, each cell's barycentric
    image in the reference's space); with ``transfer_labels=COL``: obs ``COL_flashot`` (categorical, the
    reference category receiving the most mass) and ``COL_flashot_confidence`` (its share, NaN where no labelled
    mass arrived); uns ``flashot_epsilon``, ``flashot_cost``, ``flashot_marginal_error``. ``coupling_k=K`` also
    returns the K largest plan entries of every row as a CSR matrix (``Alignment.coupling``), as --coupling.
    ``progress``: a callable(flashot.Progress), e.g. flashot.ProgressBar(); returning False cancels.

    Returns an Alignment. Raises ValueError / KeyError naming the input for bad data or options, RuntimeError
    for a cancelled or non-finite solve (nothing is written then), KeyboardInterrupt on Ctrl-C (likewise).
    """
    if copy:
        adata = adata.copy()
    if use_x:
        source, target = _shared_x(adata, reference)
        out_key = "X"
        representation = f"X on {source.shape[1]} shared genes"
    else:
        source = _points(adata, key, "adata")
        target = _points(reference, key, "reference")
        out_key = key
        representation = f"obsm['{key}'] ({source.shape[1]}-d)"
        if source.shape[1] != target.shape[1]:
            raise ValueError(f"obsm['{key}'] has {source.shape[1]} columns in adata and {target.shape[1]} in "
                             "reference")
    _check_finite(source, f"adata obsm['{out_key}']")
    _check_finite(target, f"reference obsm['{out_key}']")
    labels = _labels(reference, transfer_labels) if transfer_labels is not None else None
    if coupling_k is not None and int(coupling_k) < 1:
        raise ValueError(f"coupling_k must be ≥ 1 (got {coupling_k})")
    if not rel_blur > 0:
        raise ValueError(f"rel_blur must be > 0 (got {rel_blur})")
    if blur is not None and not blur > 0:
        raise ValueError(f"blur must be > 0 (got {blur})")

    # One blur rule, the engine's (SolveOptions::blur_relative): it measures the diameter and refuses data with none.
    options = _flashot.SolveOptions(
        cost="half_sqeuclidean" if half_cost else "sqeuclidean", scaling=scaling, reach=reach,
        reach_source=reach_source, reach_target=reach_target, tolerance=tol, max_iterations=int(max_iters),
        scheme=scheme, progress=progress, multiscale=multiscale)
    if blur is not None:
        options.blur = float(blur)
    else:
        options.blur_relative = float(rel_blur)
    problem = _flashot.Problem(source, target, options=_backend_options(backend, threads, backend_kwargs))
    result = problem.solve(options)
    if result.reason == "cancelled":
        raise RuntimeError(f"cancelled after {result.iterations} iterations; nothing written")
    if result.reason == "non_finite":
        raise RuntimeError(f"the solve produced non-finite values ({result.message}); try a larger blur or rel_blur")

    diameter = result.diameter
    final_blur = float(blur) if blur is not None else rel_blur * diameter
    mapped = problem.barycentric(result, "source")
    transfer = None
    categories = None
    if labels is not None:
        codes, categories = labels
        transfer = problem.transfer_labels(result, codes, len(categories), labels_on="target")
    coupling = None
    if coupling_k is not None:
        coupling = _coupling(problem.top_k(result, int(coupling_k)), problem.m)

    adata.obsm[f"{out_key}_flashot"] = mapped
    if transfer is not None:
        import pandas as pd

        label = np.asarray(transfer.label)
        adata.obs[f"{transfer_labels}_flashot"] = pd.Categorical.from_codes(
            label, dtype=pd.CategoricalDtype(categories)).copy()
        confidence = np.where(label >= 0, np.asarray(transfer.confidence, dtype=np.float64), np.nan)
        adata.obs[f"{transfer_labels}_flashot_confidence"] = confidence
    adata.uns["flashot_epsilon"] = result.epsilon
    adata.uns["flashot_cost"] = result.dual_cost
    adata.uns["flashot_marginal_error"] = result.marginal_error
    return Alignment(problem=problem, result=result, key=out_key, representation=representation,
                     diameter=diameter, blur=final_blur, mapped=mapped, transfer=transfer, categories=categories,
                     coupling=coupling, adata=adata, source_points=source, target_points=target)


def _coupling(top, columns):
    import scipy.sparse as sp

    values = np.asarray(top.values)
    cols = np.asarray(top.columns)
    keep = values > 0  # rows with fewer than k positive entries (unbalanced, tiny mass), as the CLI
    indptr = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(np.int64)
    return sp.csr_matrix((values[keep], cols[keep].astype(np.int64), indptr), shape=(top.rows, columns))


def map(adata, alignment, key=None, *, backend="auto", threads=0, **backend_kwargs):  # noqa: A001
    """Maps new cells through a solved alignment, as ``flashot map --solution FILE``: each point q of
    ``adata.obsm[key]`` goes to Σ_j softmax_j(log b_j + (g_j − C(q, y_j))/ε) y_j, no re-solve. ``alignment`` is
    an Alignment from ``align`` or the path of a ``--save-solution`` file; ``key`` defaults to the alignment's.
    Writes obsm ``<key>_flashot`` and returns the mapped points (n, d)."""
    if isinstance(alignment, Alignment):
        problem, result = alignment.problem, alignment.result
        key = key or alignment.key
    else:
        solution = _flashot.load_solution(os.fspath(alignment))
        key = key or solution["key"]
        if key == "X":
            raise ValueError("solutions made with use_x cannot be used (the gene panel is not saved)")
        problem = _flashot.Problem(solution["x"], solution["y"], solution["a"], solution["b"],
                                   options=_backend_options(backend, threads, backend_kwargs))
        result = solution["result"]
    queries = _points(adata, key, "adata")
    _check_finite(queries, f"adata obsm['{key}']")
    mapped = problem.map_points(result, queries, "source")
    adata.obsm[f"{key}_flashot"] = mapped
    return mapped


class Registration:
    """What ``register`` computed: ``matrix`` (4 × 4, y = A x + t), ``points`` (the source moved), ``scale``,
    ``rotation_degrees``, ``rms``, ``diameter``, ``converged``, ``rounds`` [dict], ``last_solve``, ``iterations``,
    ``backend``, ``device``, ``seconds``."""

    def __init__(self, fields):
        self.__dict__.update(fields)

    def __repr__(self):
        return (f"Registration(rotation_degrees={self.rotation_degrees:.4g}, scale={self.scale:.4g}, "
                f"rms={self.rms:.4g}, converged={self.converged}, rounds={len(self.rounds)})")


def register(source, target, model="rigid", *, blur=None, start_blur=None, anneal=0.7, max_rounds=60,
             reach=0.0, reach_source=0.0, reach_target=0.0, progress=None, multiscale="auto", backend="auto",
             threads=0, **backend_kwargs):
    """Registers ``source`` (n, 3) onto ``target`` (m, 3), as ``flashot register``: ICP with OT correspondences,
    the blur annealed from ``start_blur`` (default 0.5 × diameter) by ``anneal`` per round down to ``blur``
    (default 0.01 × diameter); ``model`` 'rigid', 'similarity' or 'affine'; reach in data units for partial
    overlap. ``progress``: callable(round, max_rounds, epsilon, rms); returning False stops. ``multiscale``:
    'auto', 'on' or 'off' for every round's solve (as --multiscale; each round dict says whether it ran
    multiscale). Returns a Registration (its ``points`` are the moved source)."""
    if not _flashot.io_compiled:
        raise RuntimeError("register needs the application layer, which this module was built without "
                           "(FLASHOT_IO=OFF)")
    if blur is not None and not blur > 0:
        raise ValueError(f"blur must be > 0 (got {blur})")
    if start_blur is not None and not start_blur > 0:
        raise ValueError(f"start_blur must be > 0 (got {start_blur})")
    if not 0 < anneal < 1:
        raise ValueError(f"anneal must be in (0, 1) (got {anneal})")
    fields = _flashot.register_clouds(
        source, target, model=model, blur=blur or 0.0, start_blur=start_blur or 0.0, anneal=anneal,
        max_rounds=int(max_rounds), reach=reach, reach_source=reach_source, reach_target=reach_target,
        progress=progress, backend_options=_backend_options(backend, threads, backend_kwargs),
        multiscale=multiscale)
    return Registration(fields)
