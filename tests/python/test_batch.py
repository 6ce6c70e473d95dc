"""Batches from Python (docs/python.md, "Batches"): flashot.solve_batch takes a (B, n, d) array or sequences of
per-problem arrays (ragged sizes), weights as (B, n) arrays or sequences with None for uniform, one SolveOptions or
one per problem; each result equals the problem's own solve. float32 C-order torch CUDA tensors on one device are
taken in place (solve_batch_on_device: BatchResults.on_device) with the results of the same values from numpy;
mixed placements take the copy route. The CPU tests run everywhere; the CUDA ones skip without torch and a device,
and FLASHOT_REQUIRE_CUDA=1 (the GPU machine's run) turns that skip into a failure."""

import os

import numpy as np
import pytest

import flashot

# The CUDA backend's alternating reductions are ordered, so the two routes agree to fp32 rounding
# (tests/engine/batch_device_test.cpp); the symmetric scheme adds its atomic sums' rounding.
ATOL = 5e-5


def _batch(seed=0, B=3, n=300, m=260, d=3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(B, n, d)).astype(np.float32)
    y = (rng.normal(size=(B, m, d)) * 0.8 + 0.3).astype(np.float32)
    a = rng.uniform(0.5, 1.5, size=(B, n)).astype(np.float32)
    b = rng.uniform(0.5, 1.5, size=(B, m)).astype(np.float32)
    a /= a.sum(axis=1, keepdims=True)
    b /= b.sum(axis=1, keepdims=True)
    return x, y, a, b


FIXED = dict(epsilon=0.05, tolerance=0, max_iterations=30, scheme="alternating")


def test_stacked_arrays_solve_every_problem_as_its_own_problem():
    x, y, a, b = _batch()
    results = flashot.solve_batch(x, y, a, b, backend="cpu", threads=2, **FIXED)
    assert len(results) == 3 and not results.on_device and results.input_device == "host"
    for q, r in enumerate(results):
        alone = flashot.Problem(x[q], y[q], a[q], b[q], backend="cpu", threads=2).solve(**FIXED)
        assert r.iterations == alone.iterations == 30
        # The CPU backend's alternating steps are the same sums in a batch: bit for bit.
        np.testing.assert_array_equal(r.f, alone.f)
        np.testing.assert_array_equal(r.g, alone.g)
        np.testing.assert_allclose(r.primal_cost, alone.primal_cost, rtol=1e-6)


def test_ragged_sequences_weights_and_options_per_problem():
    x, y, a, _ = _batch(seed=1)
    xs = [x[0], x[1][:150], x[2][:40]]
    ys = [y[0][:120], y[1], y[2][:200]]
    a1 = np.full(150, 1 / 150, np.float32)
    options = [flashot.SolveOptions(epsilon=0.1), flashot.SolveOptions(blur=0.2),
               flashot.SolveOptions(epsilon=0.05, reach=1.0)]
    results = flashot.solve_batch(xs, ys, a=[None, a1, None], options=options, backend="cpu", threads=2)
    assert [r.f.shape[0] for r in results] == [300, 150, 40]
    assert [r.g.shape[0] for r in results] == [120, 260, 200]
    assert results[2].reach_source == pytest.approx(1.0)
    for q, r in enumerate(results):
        alone = flashot.Problem(xs[q], ys[q], a1 if q == 1 else None, backend="cpu", threads=2).solve(options[q])
        assert r.converged == alone.converged and r.iterations == alone.iterations
        np.testing.assert_allclose(r.f, alone.f, rtol=0, atol=1e-5 * max(1.0, np.abs(alone.f).max()))
    # Keyword arguments apply to every problem (and may override the options given).
    capped = flashot.solve_batch(xs, ys, options=options, max_iterations=3, tolerance=0, backend="cpu", threads=2)
    assert all(r.reason == "fixed_iterations" for r in capped)


def test_bad_batches_are_named():
    x, y, a, b = _batch(n=50, m=40)
    with pytest.raises(ValueError, match=r"^x holds 3 problems but y holds 2"):
        flashot.solve_batch(x, y[:2], backend="cpu")
    with pytest.raises(ValueError, match=r"^x must be a 3-D array \(problems, rows, dimensions\)"):
        flashot.solve_batch(x[0], y[0], backend="cpu")
    with pytest.raises(ValueError, match=r"^a holds 2 weight vectors for 3 problems"):
        flashot.solve_batch(x, y, a[:2], backend="cpu")
    with pytest.raises(ValueError, match=r"^options holds 2 SolveOptions for 3 problems"):
        flashot.solve_batch(x, y, options=[flashot.SolveOptions()] * 2, backend="cpu")
    bad = x.copy()
    bad[1, 7, 2] = np.nan
    with pytest.raises(ValueError, match=r"^batch problem 1: x has a non-finite coordinate at row 7, column 2"):
        flashot.solve_batch(bad, y, backend="cpu", threads=2)
    negative = b.copy()
    negative[2, 5] = -1
    with pytest.raises(ValueError, match=r"^batch problem 2: b\[5\] must be a finite weight ≥ 0 \(got -1\)$"):
        flashot.solve_batch(x, y, a, negative, backend="cpu", threads=2)
    with pytest.raises(TypeError, match="unknown solve or backend option 'bogus'"):
        flashot.solve_batch(x, y, backend="cpu", bogus=1)


@pytest.fixture(scope="module")
def torch():
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available() or not flashot.cuda_compiled:
        why = "torch with a CUDA device and a CUDA build of flashot are needed"
        if os.environ.get("FLASHOT_REQUIRE_CUDA") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return torch


@pytest.mark.parametrize("d", [3, 64])
def test_cuda_tensor_batches_are_taken_in_place_with_the_numpy_results(torch, d):
    x, y, a, b = _batch(seed=2, B=8, n=512, m=384, d=d)
    options = dict(FIXED, epsilon=0.05 * d)
    host = flashot.solve_batch(x, y, a, b, backend="cuda", **options)
    dev = flashot.solve_batch(*(torch.from_numpy(t).cuda() for t in (x, y, a, b)), backend="cuda", **options)
    assert dev.on_device and dev.input_device == "cuda:0" and not host.on_device
    for rh, rd in zip(host, dev):
        assert rd.iterations == rh.iterations
        np.testing.assert_allclose(rd.f, rh.f, rtol=0, atol=ATOL * max(1.0, np.abs(rh.f).max()))
        np.testing.assert_allclose(rd.g, rh.g, rtol=0, atol=ATOL * max(1.0, np.abs(rh.g).max()))
        np.testing.assert_allclose(rd.dual_cost, rh.dual_cost, rtol=1e-5)
        np.testing.assert_allclose(rd.primal_cost, rh.primal_cost, rtol=1e-5)


def test_cuda_tensor_lists_ragged_uniform_and_warm_started(torch):
    x, y, _, _ = _batch(seed=3, B=3, n=400, m=300, d=5)
    xs = [x[0], x[1][:250], x[2][:90]]
    ys = [y[0][:111], y[1], y[2][:280]]
    options = dict(epsilon=0.1, tolerance=1e-4, check_every=5, scheme="alternating")
    host = flashot.solve_batch(xs, ys, backend="cuda", **options)
    dev = flashot.solve_batch([torch.from_numpy(t).cuda() for t in xs], [torch.from_numpy(t).cuda() for t in ys],
                              backend="cuda", **options)
    assert dev.on_device
    for rh, rd in zip(host, dev):
        assert rd.converged and abs(rd.iterations - rh.iterations) <= 5
    warm = [flashot.SolveOptions(initial_f=r.f, initial_g=r.g, **options) for r in dev]
    again = flashot.solve_batch([torch.from_numpy(t).cuda() for t in xs], [torch.from_numpy(t).cuda() for t in ys],
                                options=warm, backend="cuda")
    assert [r.iterations for r in again] == [5, 5, 5]


def test_cuda_batches_mixed_placements_take_the_copy_route(torch):
    x, y, a, b = _batch(seed=4, B=2, n=200, m=150, d=3)
    mixed = flashot.solve_batch(torch.from_numpy(x).cuda(), y, backend="cuda", **FIXED)
    assert not mixed.on_device and mixed.input_device == "cuda:0"
    host_weights = flashot.solve_batch(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda(), a, b, backend="cuda",
                                       **FIXED)
    assert not host_weights.on_device
    on_cpu = flashot.solve_batch(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda(), backend="cpu", threads=2,
                                 **FIXED)
    assert not on_cpu.on_device and on_cpu[0].backend == "cpu"
    np.testing.assert_array_equal(on_cpu[1].f, flashot.solve_batch(x, y, backend="cpu", threads=2, **FIXED)[1].f)


def test_non_finite_cuda_points_are_named_with_their_problem(torch):
    x, y, _, _ = _batch(seed=5, B=3, n=100, m=80, d=3)
    y[2, 17, 1] = np.inf
    with pytest.raises(ValueError, match=r"^batch problem 2: y has a non-finite coordinate at row 17, column 1"):
        flashot.solve_batch(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda(), backend="cuda")
