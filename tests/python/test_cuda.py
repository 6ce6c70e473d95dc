"""CUDA arrays through DLPack (torch tensors on the GPU): taken, copied once to the host, solved with the same
results as the same values from numpy. Skipped without torch and a CUDA device; FLASHOT_REQUIRE_CUDA=1 (the GPU
machine's run) turns the skip into a failure, so a GPU run can never pass by skipping."""

import os

import numpy as np
import pytest

import flashot


def _torch_cuda():
    try:
        import torch
    except ImportError:
        torch = None
    ok = torch is not None and torch.cuda.is_available() and flashot.cuda_compiled
    if not ok:
        why = "torch with a CUDA device and a CUDA build of flashot are needed"
        if os.environ.get("FLASHOT_REQUIRE_CUDA") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return torch


@pytest.fixture(scope="module")
def torch():
    return _torch_cuda()


def test_cuda_tensors_give_the_numpy_results(torch):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 16)).astype(np.float32)
    y = rng.normal(size=(2500, 16)).astype(np.float32)
    for backend in ("cuda", "cpu"):
        from_numpy = flashot.Problem(x, y, backend=backend, threads=2)
        from_torch = flashot.Problem(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda(), backend=backend,
                                     threads=2)
        assert from_numpy.input_device == "host"
        assert from_torch.input_device == "cuda:0"
        r1 = from_numpy.solve(blur=0.5)
        r2 = from_torch.solve(blur=0.5)
        assert r2.backend == backend
        # The CPU backend is deterministic: the copied points give bit-identical results. The CUDA backend's
        # reductions are not bitwise reproducible from one Problem to another (seen on the H200: up to 5e-6 on
        # potentials of about 5, with numpy inputs on both sides too), hence a tolerance there.
        tolerance = 0 if backend == "cpu" else 5e-5
        np.testing.assert_allclose(r2.f, r1.f, rtol=0, atol=tolerance)
        np.testing.assert_allclose(r2.g, r1.g, rtol=0, atol=tolerance)
        queries = torch.from_numpy(x[:100]).cuda()
        np.testing.assert_allclose(from_torch.map_points(r1, queries), from_numpy.map_points(r1, x[:100]), rtol=0,
                                   atol=tolerance)


def test_cuda_tensors_of_other_layouts_are_refused_by_name(torch):
    x = torch.randn(100, 3, device="cuda")
    with pytest.raises(ValueError, match="y is a CUDA array that is not C-contiguous"):
        flashot.Problem(x, torch.randn(3, 100, device="cuda").T, backend="cuda")
    with pytest.raises(ValueError, match="y is a CUDA array of another dtype than float32"):
        flashot.Problem(x, torch.randn(100, 3, device="cuda", dtype=torch.float64), backend="cuda")
