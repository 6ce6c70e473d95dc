"""Zero-copy CUDA inputs (docs/python.md, "CUDA arrays"): float32 C-order torch tensors on one device are taken in
place (Problem::on_device): statistics()["input_host_bytes"] stays 0 (CUDA weights included) through the solve and
every plan operation, and the results equal those of the same values from numpy. Mixed placements take the copy
route and say so. Skipped without torch and a CUDA device; FLASHOT_REQUIRE_CUDA=1 (the GPU machine's run) turns the
skip into a failure. The host path's byte count is checked everywhere."""

import os

import numpy as np
import pytest

import flashot

# The CUDA backend's plan applications sum with atomics, so two Problems agree to rounding, not bit for bit
# (tests/python/test_cuda.py measured up to 5e-6 on potentials of about 5 between two numpy-built Problems).
ATOL = 5e-5


def _points(seed=0, n=2000, m=1500, d=8):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)).astype(np.float32), (rng.normal(size=(m, d)) * 0.8 + 0.3).astype(np.float32)


def test_host_inputs_count_the_bytes_they_stage():
    x, y = _points(n=300, m=200, d=3)
    p = flashot.Problem(x, y, backend="cpu", threads=2)
    assert not p.on_device
    assert p.statistics()["input_host_bytes"] == (300 + 200) * 3 * 4
    a = np.full(300, 1 / 300, np.float32)
    assert flashot.Problem(x, y, a=a, backend="cpu", threads=2).statistics()["input_host_bytes"] == (500 * 3 + 300) * 4


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


def test_cuda_tensors_are_taken_in_place_with_the_numpy_results(torch):
    x, y = _points()
    host = flashot.Problem(x, y, backend="cuda")
    dev = flashot.Problem(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda(), backend="cuda")
    assert dev.on_device and dev.input_device == "cuda:0"
    assert dev.statistics()["input_host_bytes"] == 0
    assert host.statistics()["input_host_bytes"] == (2000 + 1500) * 8 * 4
    options = dict(blur=0.1, scaling=0.7, tolerance=0, max_iterations=100)
    rh, rd = host.solve(**options), dev.solve(**options)
    np.testing.assert_allclose(rd.f, rh.f, rtol=0, atol=ATOL)
    np.testing.assert_allclose(rd.g, rh.g, rtol=0, atol=ATOL)
    np.testing.assert_allclose(rd.primal_cost, rh.primal_cost, rtol=1e-5)
    v = np.random.default_rng(1).normal(size=(1500, 3)).astype(np.float32)
    np.testing.assert_allclose(dev.apply_plan(rh, v), host.apply_plan(rh, v), rtol=1e-5, atol=1e-9)
    for side in ("source", "target"):
        np.testing.assert_allclose(dev.barycentric(rh, side), host.barycentric(rh, side), rtol=0, atol=1e-5)
        np.testing.assert_allclose(dev.gradient(rh, side), host.gradient(rh, side), rtol=0, atol=1e-8)
    np.testing.assert_allclose(dev.map_points(rh, x[:50]), host.map_points(rh, x[:50]), rtol=0, atol=1e-5)
    labels = np.random.default_rng(2).integers(0, 4, size=1500)
    np.testing.assert_array_equal(dev.transfer_labels(rh, labels).label, host.transfer_labels(rh, labels).label)
    np.testing.assert_array_equal(dev.top_k(rh, 3).columns, host.top_k(rh, 3).columns)
    # Every operation above read the resident points: nothing of x or y passed through host memory.
    assert dev.statistics()["input_host_bytes"] == 0


def test_cuda_weights_stay_on_the_device(torch):
    x, y = _points(seed=3, n=500, m=400, d=4)
    rng = np.random.default_rng(4)
    a = rng.uniform(0.5, 1.5, 500).astype(np.float32)
    b = rng.uniform(0.5, 1.5, 400).astype(np.float32)
    a *= b.sum() / a.sum()
    host = flashot.Problem(x, y, a=a, b=b, backend="cuda")
    dev = flashot.Problem(*(torch.from_numpy(t).cuda() for t in (x, y)), a=torch.from_numpy(a).cuda(),
                          b=torch.from_numpy(b).cuda(), backend="cuda")
    assert dev.on_device
    assert dev.statistics()["input_host_bytes"] == 0  # validated and reduced on the device
    rh, rd = host.solve(blur=0.1), dev.solve(blur=0.1)
    np.testing.assert_allclose(rd.f, rh.f, rtol=0, atol=ATOL)
    assert rd.iterations == rh.iterations
    np.testing.assert_allclose(rd.dual_cost, rh.dual_cost, rtol=1e-5)
    # The marginal error is a sum of |differences| of near-equal masses: the symmetric scheme's atomic column sums
    # and the device's weight logarithms (one ulp on a rare weight) move it by ~1e-4 of itself (H200, 2026-12-01:
    # 0.009954 vs 0.009953), while f agrees to ATOL.
    np.testing.assert_allclose(rd.marginal_error, rh.marginal_error, rtol=1e-3, atol=0)
    assert dev.statistics()["input_host_bytes"] == 0
    bad = a.copy()
    bad[7] = -1.0
    with pytest.raises(ValueError, match=r"^a\[7\] must be a finite weight ≥ 0 \(got -1\)$"):
        flashot.Problem(*(torch.from_numpy(t).cuda() for t in (x, y)), a=torch.from_numpy(bad).cuda(),
                        b=torch.from_numpy(b).cuda(), backend="cuda")


def test_mixed_placements_take_the_copy_route(torch):
    x, y = _points(seed=5, n=400, m=300, d=3)
    mixed = flashot.Problem(torch.from_numpy(x).cuda(), y, backend="cuda")
    assert not mixed.on_device and mixed.input_device == "cuda:0"
    assert mixed.statistics()["input_host_bytes"] == (400 + 300) * 3 * 4
    on_cpu = flashot.Problem(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda(), backend="cpu", threads=2)
    assert not on_cpu.on_device and on_cpu.backend == "cpu"
    np.testing.assert_array_equal(on_cpu.solve(blur=0.2).f, flashot.Problem(x, y, backend="cpu", threads=2)
                                  .solve(blur=0.2).f)


def test_divergence_takes_cuda_tensors_in_place(torch):
    x, y = _points(seed=7, n=600, m=500, d=3)
    host = flashot.sinkhorn_divergence(x, y, backend="cuda", blur=0.1)
    dev = flashot.sinkhorn_divergence(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda(), backend="cuda", blur=0.1)
    np.testing.assert_allclose(dev.divergence, host.divergence, rtol=0, atol=1e-5 * abs(host.xy.dual_cost))


def test_non_finite_device_points_are_named(torch):
    x, y = _points(seed=6, n=100, m=80, d=3)
    x[17, 1] = np.nan
    with pytest.raises(ValueError, match=r"x has a non-finite coordinate at row 17, column 1 \(got nan\)"):
        flashot.Problem(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda(), backend="cuda")
