"""flashot.tl and flashot.read/write against the flashot program on the bundled samples: the same backend and
threads must give the same numbers and the same labels, under the same obsm / obs / uns names."""

import subprocess

import numpy as np
import pytest

import flashot

anndata = pytest.importorskip("anndata")

THREADS = "2"


def run(cli, *args):
    done = subprocess.run([str(cli), *[str(a) for a in args]], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def aligned(cli, samples, tmp_path_factory):
    """The CLI's and the Python API's alignment of batch b onto batch a, cell types transferred."""
    out = tmp_path_factory.mktemp("align")
    run(cli, "align", samples / "cells_batch_b.h5ad", samples / "cells_batch_a.h5ad", "-o", out / "b_aligned.h5ad",
        "--transfer-labels", "cell_type", "--coupling", out / "coupling.h5ad", "--coupling-k", 5,
        "--save-solution", out / "b_to_a.solution", "--backend", "cpu", "--threads", THREADS, "--quiet")
    query = anndata.read_h5ad(samples / "cells_batch_b.h5ad")
    reference = anndata.read_h5ad(samples / "cells_batch_a.h5ad")
    alignment = flashot.tl.align(query, reference, key="X_pca", transfer_labels="cell_type", coupling_k=5,
                                 backend="cpu", threads=int(THREADS))
    return out, anndata.read_h5ad(out / "b_aligned.h5ad"), query, alignment


def test_align_equals_the_cli(aligned):
    out, cli_out, query, alignment = aligned
    np.testing.assert_allclose(query.obsm["X_pca_flashot"], cli_out.obsm["X_pca_flashot"], rtol=0, atol=1e-5)
    assert query.obsm["X_pca_flashot"].dtype == np.float32
    ours = query.obs["cell_type_flashot"]
    theirs = cli_out.obs["cell_type_flashot"]
    assert list(ours.cat.categories) == list(theirs.cat.categories)
    np.testing.assert_array_equal(ours.astype(str).to_numpy(), theirs.astype(str).to_numpy())
    np.testing.assert_allclose(query.obs["cell_type_flashot_confidence"], cli_out.obs["cell_type_flashot_confidence"],
                               atol=1e-6)
    for name in ("flashot_epsilon", "flashot_cost", "flashot_marginal_error"):
        assert query.uns[name] == pytest.approx(float(cli_out.uns[name]), rel=1e-9, abs=1e-12), name
    assert alignment.result.converged
    # The labels are right for most cells: the samples' batches share their cell types.
    agree = (ours.astype(str).to_numpy() == query.obs["cell_type"].astype(str).to_numpy()).mean()
    assert agree > 0.9


def test_coupling_equals_the_cli(aligned):
    out, _, query, alignment = aligned
    cli_coupling = anndata.read_h5ad(out / "coupling.h5ad").X
    ours = alignment.coupling
    assert ours.shape == cli_coupling.shape == (query.n_obs, 2400)
    np.testing.assert_array_equal(ours.indptr, cli_coupling.indptr)
    np.testing.assert_array_equal(ours.indices, cli_coupling.indices)
    np.testing.assert_allclose(ours.data, cli_coupling.data, rtol=1e-6)


def test_map_equals_the_cli(aligned, cli, samples):
    out, _, query, alignment = aligned
    run(cli, "map", "--solution", out / "b_to_a.solution", samples / "cells_batch_b.h5ad", "-o",
        out / "b_mapped.h5ad", "--backend", "cpu", "--threads", THREADS, "--quiet")
    cli_mapped = anndata.read_h5ad(out / "b_mapped.h5ad").obsm["X_pca_flashot"]
    fresh = anndata.read_h5ad(samples / "cells_batch_b.h5ad")
    from_solution = flashot.tl.map(fresh, out / "b_to_a.solution", backend="cpu", threads=int(THREADS))
    np.testing.assert_allclose(from_solution, cli_mapped, atol=1e-5)
    again = anndata.read_h5ad(samples / "cells_batch_b.h5ad")
    from_alignment = flashot.tl.map(again, alignment)
    np.testing.assert_allclose(from_alignment, cli_mapped, atol=1e-5)
    # Mapping the source points themselves is the barycentric projection.
    np.testing.assert_allclose(from_alignment, query.obsm["X_pca_flashot"], atol=1e-4)
    # A solution saved from Python is read by the CLI and gives the same map.
    alignment.save_solution(out / "python.solution")
    run(cli, "map", "--solution", out / "python.solution", samples / "cells_batch_b.h5ad", "-o",
        out / "b_mapped_py.h5ad", "--backend", "cpu", "--threads", THREADS, "--quiet")
    np.testing.assert_allclose(anndata.read_h5ad(out / "b_mapped_py.h5ad").obsm["X_pca_flashot"], cli_mapped,
                               atol=1e-5)


def test_register_equals_the_cli(cli, samples, tmp_path):
    run(cli, "register", samples / "shape_scan.ply", samples / "shape.ply", "-o", tmp_path / "moved.ply",
        "--reach-target", 0.1, "--max-rounds", 12, "--backend", "cpu", "--threads", THREADS, "--quiet")
    theirs = flashot.read(tmp_path / "moved.ply")
    scan = flashot.read(samples / "shape_scan.ply")["points"]
    shape = flashot.read(samples / "shape.ply")["points"]
    ours = flashot.tl.register(scan, shape, "rigid", reach_target=0.1, max_rounds=12, backend="cpu",
                               threads=int(THREADS))
    np.testing.assert_allclose(ours.points, theirs["points"], atol=1e-5)
    np.testing.assert_allclose(theirs["elements"]["vertex"]["x_original"], scan[:, 0], atol=0)
    assert ours.matrix.shape == (4, 4) and len(ours.rounds) <= 12
    np.testing.assert_allclose(ours.points, scan @ ours.matrix[:3, :3].T + ours.matrix[:3, 3], atol=1e-4)
    assert all(r["multiscale"] is False for r in ours.rounds)  # auto keeps the samples dense
    with pytest.raises(ValueError, match="maybe"):
        flashot.tl.register(scan, shape, multiscale="maybe", backend="cpu")


def test_align_errors_name_the_input(samples):
    query = anndata.read_h5ad(samples / "cells_batch_b.h5ad")
    reference = anndata.read_h5ad(samples / "cells_batch_a.h5ad")
    with pytest.raises(KeyError, match="X_nope"):
        flashot.tl.align(query, reference, key="X_nope")
    with pytest.raises(KeyError, match="no column 'kind'"):
        flashot.tl.align(query, reference, transfer_labels="kind")
    with pytest.raises(TypeError, match="precison"):
        flashot.tl.align(query, reference, precison="fp32")
    bad = query.copy()
    bad.obsm["X_pca"][3, 2] = np.inf
    with pytest.raises(ValueError, match="row 3"):
        flashot.tl.align(bad, reference)
    assert "X_pca_flashot" not in query.obsm  # nothing written by a failed call


def test_align_blur_is_the_engines_relative_rule(aligned, samples):
    alignment = aligned[3]
    # One rule for every front end: the engine's SolveOptions::blur_relative with its default, on the diameter the
    # engine measured (the CLI's ε on the samples comes from the same rule).
    assert flashot.tl.align.__kwdefaults__["rel_blur"] == flashot._flashot.DEFAULT_BLUR_RELATIVE == 0.05
    assert alignment.diameter == alignment.result.diameter > 0
    assert alignment.blur == pytest.approx(0.05 * alignment.diameter, rel=1e-12)
    assert alignment.result.epsilon == pytest.approx(alignment.blur ** 2, rel=1e-6)
    same = anndata.read_h5ad(samples / "cells_batch_b.h5ad")
    same.obsm["X_pca"][:] = 1.0
    reference = same.copy()
    with pytest.raises(ValueError, match="coincide"):
        flashot.tl.align(same, reference)


def test_read_equals_anndata(samples):
    ours = flashot.read(samples / "cells_batch_a.h5ad")
    theirs = anndata.read_h5ad(samples / "cells_batch_a.h5ad")
    assert ours.shape == theirs.shape
    np.testing.assert_array_equal(ours.obs_names, theirs.obs_names)
    np.testing.assert_array_equal(ours.var_names, theirs.var_names)
    x = theirs.X.toarray() if hasattr(theirs.X, "toarray") else theirs.X
    ox = ours.X.toarray() if hasattr(ours.X, "toarray") else ours.X
    np.testing.assert_allclose(ox, x, rtol=1e-6)
    for key in theirs.obsm:
        np.testing.assert_array_equal(ours.obsm[key], np.asarray(theirs.obsm[key], dtype=np.float32))
    for column in theirs.obs.columns:
        np.testing.assert_array_equal(ours.obs[column].astype(str), theirs.obs[column].astype(str))


def test_ply_write_read_round_trip(tmp_path):
    points = np.random.default_rng(0).normal(size=(50, 3)).astype(np.float32)
    weight = np.linspace(0, 1, 50).astype(np.float32)
    for ascii_format in (False, True):
        path = tmp_path / f"cloud_{ascii_format}.ply"
        flashot.write(path, points, {"weight": weight}, ascii=ascii_format)
        back = flashot.read(path)
        np.testing.assert_array_equal(back["points"], points)
        np.testing.assert_array_equal(back["elements"]["vertex"]["weight"], weight)
        assert back["format"] == ("ascii" if ascii_format else "binary_little_endian")
    (tmp_path / "broken.ply").write_bytes(b"ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nend_header\n1\n")
    with pytest.raises(flashot.FormatError, match="broken.ply"):
        flashot.read(tmp_path / "broken.ply")
    with pytest.raises(OSError):
        flashot.read(tmp_path / "missing.ply")
