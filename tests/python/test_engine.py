"""The engine's API from Python: results against a float64 dense reference written here in numpy, errors as
Python exceptions, the progress callable, the GIL released during solves, array inputs."""

import threading
import time

import numpy as np
import pytest

import flashot


def clouds(n=60, m=50, d=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = (rng.normal(size=(m, d)) * 0.8 + 0.5).astype(np.float32)
    a = rng.uniform(0.5, 1.5, n).astype(np.float32)
    b = rng.uniform(0.5, 1.5, m).astype(np.float32)
    return x, y, a / a.sum(), b / b.sum()


def reference_sinkhorn(x, y, a, b, eps, iterations=20000):
    """Log-domain alternating Sinkhorn in float64 on the dense cost: the fixed point (f, g) and the plan."""
    x, y, a, b = (np.asarray(v, dtype=np.float64) for v in (x, y, a, b))
    c = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    f = np.zeros(len(x))
    g = np.zeros(len(y))

    def lse(z, axis):
        top = z.max(axis=axis, keepdims=True)
        return (top + np.log(np.exp(z - top).sum(axis=axis, keepdims=True))).squeeze(axis)

    for _ in range(iterations):
        f_new = -eps * lse(np.log(b)[None, :] + (g[None, :] - c) / eps, 1)
        g = -eps * lse(np.log(a)[:, None] + (f_new[:, None] - c) / eps, 0)
        if np.abs(f_new - f).max() < 1e-12:
            f = f_new
            break
        f = f_new
    plan = a[:, None] * b[None, :] * np.exp((f[:, None] + g[None, :] - c) / eps)
    return f, g, plan, (a * f).sum() + (b * g).sum()


EPS = 0.5


@pytest.fixture(scope="module")
def solved():
    x, y, a, b = clouds()
    problem = flashot.Problem(x, y, a, b, backend="cpu", threads=2)
    result = problem.solve(epsilon=EPS, tolerance=1e-6, max_iterations=5000, scheme="alternating")
    return x, y, a, b, problem, result, reference_sinkhorn(x, y, a, b, EPS)


def test_solve_matches_float64_reference(solved):
    x, y, a, b, problem, result, (f, g, plan, dual) = solved
    assert result.converged and result.reason == "tolerance"
    assert result.backend == "cpu"
    assert result.f.shape == (len(x),) and result.g.shape == (len(y),)
    assert abs(result.dual_cost - dual) < 1e-4 * abs(dual) + 1e-5
    # Potentials are defined up to (f + k, g − k): compare f ⊕ g.
    np.testing.assert_allclose(result.f[:, None] + result.g[None, :], f[:, None] + g[None, :], atol=2e-4)
    assert abs(result.primal_cost - (plan * ((x[:, None] - y[None]) ** 2).sum(-1)).sum()) < 1e-3


def test_plan_operations_match_dense_plan(solved):
    x, y, a, b, problem, result, (f, g, plan, _) = solved
    rng = np.random.default_rng(1)
    v = rng.normal(size=(len(y), 4)).astype(np.float32)
    u = rng.normal(size=(len(x), 2)).astype(np.float32)
    np.testing.assert_allclose(problem.apply_plan(result, v), plan @ v, atol=2e-5)
    np.testing.assert_allclose(problem.apply_plan_transpose(result, u), plan.T @ u, atol=2e-5)
    assert problem.apply_plan(result, v[:, 0]).shape == (len(x),)
    np.testing.assert_allclose(problem.row_marginal(result), plan.sum(1), atol=1e-5)
    np.testing.assert_allclose(problem.column_marginal(result), plan.sum(0), atol=1e-5)
    bary = (plan @ y) / plan.sum(1, keepdims=True)
    np.testing.assert_allclose(problem.barycentric(result), bary, atol=2e-4)
    np.testing.assert_allclose(problem.barycentric(result, "target"), (plan.T @ x) / plan.sum(0)[:, None], atol=2e-4)
    grad = 2 * (plan.sum(1)[:, None] * x - plan @ y)
    np.testing.assert_allclose(problem.gradient(result, "source"), grad, atol=2e-4)
    top = problem.top_k(result, 3)
    np.testing.assert_array_equal(top.columns, np.argsort(-plan, axis=1)[:, :3])
    np.testing.assert_allclose(top.values, -np.sort(-plan, axis=1)[:, :3], rtol=1e-3)
    # The source points mapped out of sample equal their barycentric images.
    np.testing.assert_allclose(problem.map_points(result, x), problem.barycentric(result), atol=1e-4)


def test_label_transfer_matches_dense_plan(solved):
    x, y, a, b, problem, result, (f, g, plan, _) = solved
    labels = np.arange(len(y)) % 3
    labels[5] = -1
    t = problem.transfer_labels(result, labels, 3)
    onehot = np.zeros((len(y), 3))
    onehot[labels >= 0, labels[labels >= 0]] = 1
    mass = plan @ onehot
    probabilities = mass / mass.sum(1, keepdims=True)
    np.testing.assert_allclose(t.probabilities, probabilities, atol=1e-4)
    np.testing.assert_array_equal(t.label, probabilities.argmax(1))
    np.testing.assert_allclose(t.confidence, probabilities.max(1), atol=1e-4)


def test_divergence_gradient_matches_finite_differences():
    x, y, a, b = clouds(30, 25, 2, seed=3)
    opts = dict(epsilon=0.5, tolerance=1e-7, max_iterations=20000, backend="cpu", threads=2)

    def divergence(xx):
        return flashot.sinkhorn_divergence(xx, y, a, b, **opts).divergence

    solves = flashot.sinkhorn_divergence(x, y, a, b, **opts)
    grad = flashot.sinkhorn_divergence_gradient(x, y, a, b, solves, backend="cpu", threads=2)
    assert grad["x"].shape == x.shape
    h = 1e-2
    for i, k in [(0, 0), (7, 1), (19, 0)]:
        plus, minus = x.copy(), x.copy()
        plus[i, k] += h
        minus[i, k] -= h
        numeric = (divergence(plus) - divergence(minus)) / (2 * h)
        assert abs(grad["x"][i, k] - numeric) < 2e-3 + 2e-2 * abs(numeric), (i, k, grad["x"][i, k], numeric)


def test_hessian_product_matches_finite_differences_of_gradient():
    x, y, a, b = clouds(30, 25, 2, seed=4)
    eps = 0.5

    def gradient(xx):
        p = flashot.Problem(xx, y, a, b, backend="cpu", threads=2)
        r = p.solve(epsilon=eps, tolerance=1e-7, max_iterations=20000)
        return flashot.TransportDerivatives(xx, y, a, b, r, backend="cpu", threads=2).gradient()["x"], r

    g0, r = gradient(x)
    v = np.random.default_rng(5).normal(size=x.shape).astype(np.float32)
    hvp = flashot.TransportDerivatives(x, y, a, b, r, backend="cpu", threads=2).hessian_product(v)
    assert hvp["cg"]["converged"]
    h = 1e-2
    numeric = (gradient(x + h * v)[0] - gradient(x - h * v)[0]) / (2 * h)
    np.testing.assert_allclose(hvp["product"], numeric, atol=5e-3 + 3e-2 * np.abs(numeric).max())


def test_bad_inputs_raise_with_the_engines_messages():
    x, y, a, b = clouds()
    bad = x.copy()
    bad[7, 1] = np.nan
    with pytest.raises(ValueError, match=r"x.*row 7"):
        flashot.Problem(bad, y, backend="cpu")
    with pytest.raises(ValueError, match=r"x.d and y.d must match \(got 3 and 2\)"):
        flashot.Problem(x, y[:, :2], backend="cpu")
    negative = a.copy()
    negative[4] = -1
    with pytest.raises(ValueError, match=r"a.*4"):
        flashot.Problem(x, y, negative, b, backend="cpu")
    with pytest.raises(ValueError, match=r"x must be a 2-D array"):
        flashot.Problem(x[:, 0], y, backend="cpu")
    problem = flashot.Problem(x, y, backend="cpu", threads=1)
    with pytest.raises(ValueError, match=r"scaling must be in \(0, 1\) \(got 2\)"):
        problem.solve(scaling=2)
    with pytest.raises(TypeError, match="unknown solve option 'tolerence'"):
        problem.solve(tolerence=1e-3)
    with pytest.raises(ValueError, match="scheme"):
        problem.solve(scheme="sideways")
    with pytest.raises(ValueError, match="backend"):
        flashot.Problem(x, y, backend="tpu")
    if not flashot.cuda_compiled:
        with pytest.raises(RuntimeError, match="built without CUDA"):
            flashot.Problem(x, y, backend="cuda")


def test_progress_callable_sees_checks_and_can_cancel():
    x, y, a, b = clouds(200, 180, 3)
    problem = flashot.Problem(x, y, backend="cpu", threads=2)
    seen = []
    result = problem.solve(blur=0.3, progress=seen.append)
    assert seen and seen[-1].iteration == result.iterations
    assert [p.stage for p in seen] == sorted(p.stage for p in seen)
    final = [p for p in seen if p.stage == p.stage_count - 1]
    assert final and all(p.marginal_error == p.marginal_error for p in final)  # measured (not NaN)

    stopped = problem.solve(blur=0.3, progress=lambda p: p.stage < 2)
    assert stopped.reason == "cancelled" and "cancelled" in stopped.message
    assert stopped.iterations < result.iterations

    class Stop(Exception):
        pass

    def raising(p):
        if p.stage == 1:
            raise Stop("from the callable")

    with pytest.raises(Stop, match="from the callable"):
        problem.solve(blur=0.3, progress=raising)
    # The problem is usable after an exception.
    again = problem.solve(blur=0.3)
    assert again.dual_cost == pytest.approx(result.dual_cost, rel=1e-6)


def test_solve_releases_the_gil():
    # Judged by ratios, not by the machine's speed: while the solve runs the main thread keeps
    # executing bytecode, so the longest pause it sees is a small part of the solve's duration.
    # With the GIL held inside the solve that pause would be the whole solve.
    x, y, _, _ = clouds(2000, 2000, 3)
    problem = flashot.Problem(x, y, backend="cpu", threads=1)
    done = threading.Event()
    span = []

    def solve():
        begin = time.perf_counter()
        problem.solve(epsilon=0.05, tolerance=0, max_iterations=400, diagnostics=False)
        span.append(time.perf_counter() - begin)
        done.set()

    thread = threading.Thread(target=solve)
    thread.start()
    last = time.perf_counter()
    longest_pause = 0.0
    while not done.is_set():
        now = time.perf_counter()
        longest_pause = max(longest_pause, now - last)
        last = now
    thread.join()
    assert longest_pause < 0.5 * span[0], (longest_pause, span[0])


def test_inputs_of_other_layouts_and_types_give_the_same_result():
    x, y, a, b = clouds(80, 70, 3)
    opts = dict(epsilon=0.3, tolerance=0, max_iterations=50)
    base = flashot.Problem(x, y, backend="cpu", threads=2).solve(**opts)
    for xx, yy in [(x.astype(np.float64), y.astype(np.float64)), (np.asfortranarray(x), np.asfortranarray(y)),
                   (x.tolist(), y.tolist()), (x[::1], np.repeat(y, 2, axis=0)[::2])]:
        other = flashot.Problem(xx, yy, backend="cpu", threads=2).solve(**opts)
        np.testing.assert_array_equal(other.f, base.f)
        np.testing.assert_array_equal(other.g, base.g)
    # Results are numpy arrays the Python side owns; f and g are read-only views of the result.
    assert isinstance(base.f, np.ndarray) and not base.f.flags.writeable


def test_options_objects_and_warm_start():
    x, y, a, b = clouds()
    options = flashot.SolveOptions(epsilon=0.5, tolerance=1e-6, max_iterations=5000)
    assert options.scheme == "symmetric" and options.cost == "sqeuclidean"
    backend = flashot.BackendOptions(backend="cpu", threads=2)
    problem = flashot.Problem(x, y, a, b, options=backend)
    cold = problem.solve(options)
    options.initial_f = cold.f
    options.initial_g = cold.g
    warm = problem.solve(options)
    assert warm.iterations <= 10 and warm.converged
    # A result rebuilt from its potentials drives the plan operations the same way.
    rebuilt = flashot.SolveResult(cold.f, cold.g, cold.epsilon)
    np.testing.assert_array_equal(problem.barycentric(rebuilt), problem.barycentric(cold))


def test_module_reports_backends():
    assert "cpu" in flashot.available_backends()
    assert flashot.version() == flashot.__version__
    assert flashot.cuda_available() == ("cuda" in flashot.available_backends())
    memory = flashot.device_memory()
    assert set(memory) == {"current_bytes", "peak_bytes"}
    group = flashot.process_group_from_environment()
    assert group.ranks >= 1
    options = flashot.rank_options(group, None, flashot.BackendOptions(threads=2))
    assert options.backend == "cuda" and options.rank == group.rank


def test_progress_bar_follows_the_solve():
    tqdm = pytest.importorskip("tqdm")
    import io

    x, y, _, _ = clouds(200, 180, 3)
    problem = flashot.Problem(x, y, backend="cpu", threads=2)
    stream = io.StringIO()
    with flashot.ProgressBar(file=stream, desc="solve") as bar:
        result = problem.solve(blur=0.3, progress=bar)
        assert bar._bar.n == result.iterations and bar._bar.total == seen_budget(result)
    assert "solve" in stream.getvalue() and result.reason == "tolerance"
    assert tqdm is not None


def seen_budget(result):
    """The iteration budget Progress.max_iterations reports: the intermediate stages' iterations plus the final
    stage's budget."""
    return sum(i for _, i in result.stages[:-1]) + 1000


def test_multiscale_from_python_matches_dense():
    # Two samples of a circle in 3-D (a curve: the cluster hierarchy prunes), small blur: the multiscale solver's
    # cost equals the dense solver's within the tolerance's reach, and its report comes back as a dict.
    rng = np.random.default_rng(3)
    t = rng.uniform(0, 2 * np.pi, 2600)
    u = rng.uniform(0, 2 * np.pi, 2300)
    x = np.stack([np.cos(t), np.sin(t), 0.05 * np.sin(3 * t)], 1).astype(np.float32)
    y = np.stack([1.1 * np.cos(u) + 0.1, np.sin(u), 0.05 * np.cos(2 * u)], 1).astype(np.float32)
    problem = flashot.Problem(x, y, options=flashot.BackendOptions(backend="cpu", threads=2))
    results = {}
    for mode in ("on", "off"):
        options = flashot.SolveOptions(blur=0.03, tolerance=1e-4, max_iterations=5000, scheme="alternating",
                                       multiscale=mode)
        assert options.multiscale == mode
        results[mode] = problem.solve(options)
        assert results[mode].converged
    on, off = results["on"], results["off"]
    assert on.multiscale["used"] and not off.multiscale["used"]
    stages = on.multiscale["stages"]
    assert stages and all(0 < s["kept_fraction"] <= 1 for s in stages)
    assert any(not s["dense"] for s in stages), stages  # some stage ran on block lists
    assert on.multiscale["truncation"] == pytest.approx(np.log(1e3 / 1e-4))  # automatic: ln(10³ / tolerance)
    assert abs(on.dual_cost - off.dual_cost) <= 1e-4 * abs(off.dual_cost)
    np.testing.assert_allclose(problem.barycentric(on), problem.barycentric(off), atol=2e-3)
    with pytest.raises(ValueError, match="sometimes"):
        flashot.SolveOptions(multiscale="sometimes")
