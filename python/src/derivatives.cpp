// Bindings of flashot/differentiation.hpp: gradients, Hessian-vector products, implicit gradients.
#include <nanobind/stl/string.h>

#include <mutex>

#include "arrays.hpp"
#include "bindings.hpp"
#include "flashot/differentiation.hpp"

namespace flashot::python {

using namespace nb::literals;

namespace {

struct PyDerivatives {
  explicit PyDerivatives(TransportDerivatives&& t) : derivatives(std::move(t)) {}
  TransportDerivatives derivatives;
  std::mutex lock;
};

template <typename F>
auto released(PyDerivatives& p, F&& f) {
  nb::gil_scoped_release release;
  std::lock_guard<std::mutex> guard(p.lock);
  return f(p.derivatives);
}

CgOptions cg_options(double tolerance, int max_iterations) {
  CgOptions cg;
  cg.tolerance = tolerance;
  cg.max_iterations = max_iterations;
  return cg;
}

FloatInput weights(nb::handle w, const char* name) {
  if (w.is_none()) return {};
  return FloatInput::from(w, name, 1);
}

nb::dict cg_dict(const CgReport& r) {
  nb::dict out;
  out["converged"] = r.converged;
  out["iterations"] = r.iterations;
  out["residual"] = r.residual;
  out["initial_residual"] = r.initial_residual;
  return out;
}

/// The inputs both derivative entry points take: x, y (2-D float32), weights a, b, and the backend options given as an
/// object and/or keyword arguments.
struct PairInput {
  FloatInput x, y, a, b;
  BackendOptions engine;
};
PairInput pair_input(nb::handle x, nb::handle y, nb::handle a, nb::handle b, const PyBackendOptions* options,
                     const nb::kwargs& kwargs) {
  PyBackendOptions o = options != nullptr ? *options : PyBackendOptions{};
  apply_kwargs(nb::cast(&o, nb::rv_policy::reference), kwargs, "backend option");
  return {FloatInput::from(x, "x", 2), FloatInput::from(y, "y", 2), weights(a, "a"), weights(b, "b"), o.engine()};
}

}  // namespace

void bind_derivatives(nb::module_& m) {
  nb::class_<PyDerivatives>(m, "TransportDerivatives",
                            "Derivatives of OT_ε at one solution (flashot::TransportDerivatives, "
                            "docs/differentiation.md). x, y, a, b: the solved problem's inputs; solution: its "
                            "SolveResult. Keyword arguments are BackendOptions fields.")
      .def("__init__",
           [](PyDerivatives* self, nb::handle x, nb::handle y, nb::handle a, nb::handle b, const SolveResult& s,
              const PyBackendOptions* options, nb::kwargs kwargs) {
             const PairInput in = pair_input(x, y, a, b, options, kwargs);
             const FloatInput &xi = in.x, &yi = in.y, &ai = in.a, &bi = in.b;
             const BackendOptions& engine = in.engine;
             nb::gil_scoped_release release;
             new (self) PyDerivatives(
                 TransportDerivatives(xi.points(), yi.points(), ai.values(), bi.values(), s, engine));
           },
           "x"_a, "y"_a, "a"_a.none(), "b"_a.none(), "solution"_a, "options"_a.none() = nb::none(), "kwargs"_a)
      .def_prop_ro("n", [](PyDerivatives& p) { return p.derivatives.n(); })
      .def_prop_ro("m", [](PyDerivatives& p) { return p.derivatives.m(); })
      .def_prop_ro("d", [](PyDerivatives& p) { return p.derivatives.d(); })
      .def("cost", [](PyDerivatives& p) { return released(p, [](TransportDerivatives& t) { return t.cost(); }); },
           "OT_ε at the solution")
      .def(
          "gradient",
          [](PyDerivatives& p) {
            TransportGradient g = released(p, [](TransportDerivatives& t) { return t.gradient(); });
            const std::size_t n = p.derivatives.n(), m_ = p.derivatives.m(), d = p.derivatives.d();
            nb::dict out;
            out["cost"] = g.cost;
            out["x"] = to_numpy(std::move(g.x), {n, d});
            out["y"] = to_numpy(std::move(g.y), {m_, d});
            out["a"] = to_numpy(std::move(g.a), {n});
            out["b"] = to_numpy(std::move(g.b), {m_});
            return out;
          },
          "{'cost', 'x' (n, d), 'y' (m, d), 'a' (n), 'b' (m)}: OT_ε and its gradients")
      .def(
          "hessian_product",
          [](PyDerivatives& p, nb::handle v, double tolerance, int max_iterations) {
            const FloatInput vi = FloatInput::from(v, "v", 2, p.derivatives.d());
            const CgOptions cg = cg_options(tolerance, max_iterations);
            HessianProduct h = released(p, [&](TransportDerivatives& t) { return t.hessian_product(vi.values(), cg); });
            nb::dict out;
            out["product"] = to_numpy(std::move(h.product), {p.derivatives.n(), p.derivatives.d()});
            out["cg"] = cg_dict(h.cg);
            return out;
          },
          "v"_a, "tolerance"_a = 1e-6, "max_iterations"_a = 300,
          "{'product' (n, d), 'cg'}: ∇²_x OT_ε · v by conjugate gradient over streaming passes")
      .def(
          "potential_tangent",
          [](PyDerivatives& p, nb::handle v, double tolerance, int max_iterations) {
            const FloatInput vi = FloatInput::from(v, "v", 2, p.derivatives.d());
            const CgOptions cg = cg_options(tolerance, max_iterations);
            PotentialTangent t = released(p, [&](TransportDerivatives& d) { return d.potential_tangent(vi.values(), cg); });
            nb::dict out;
            out["f"] = to_numpy(std::move(t.f), {p.derivatives.n()});
            out["g"] = to_numpy(std::move(t.g), {p.derivatives.m()});
            out["cg"] = cg_dict(t.cg);
            return out;
          },
          "v"_a, "tolerance"_a = 1e-6, "max_iterations"_a = 300, "{'f' (n), 'g' (m), 'cg'}: d(f, g)/dx · v")
      .def(
          "implicit_gradient",
          [](PyDerivatives& p, nb::handle df, nb::handle dg, double tolerance, int max_iterations) {
            const FloatInput fi = FloatInput::from(df, "df", 1);
            const FloatInput gi = FloatInput::from(dg, "dg", 1);
            const CgOptions cg = cg_options(tolerance, max_iterations);
            ImplicitGradient g = released(
                p, [&](TransportDerivatives& d) { return d.implicit_gradient(fi.values(), gi.values(), cg); });
            nb::dict out;
            out["x"] = to_numpy(std::move(g.x), {p.derivatives.n(), p.derivatives.d()});
            out["cg"] = cg_dict(g.cg);
            return out;
          },
          "df"_a, "dg"_a, "tolerance"_a = 1e-6, "max_iterations"_a = 300,
          "{'x' (n, d), 'cg'}: ∇_x L for a loss of the potentials with ∂L/∂f = df, ∂L/∂g = dg")
      .def_prop_ro("backend", [](PyDerivatives& p) { return p.derivatives.backend_name(); });

  m.def(
      "sinkhorn_divergence_gradient",
      [](nb::handle x, nb::handle y, nb::handle a, nb::handle b, const DivergenceResult& solves,
         const PyBackendOptions* options, nb::kwargs kwargs) {
        const PairInput in = pair_input(x, y, a, b, options, kwargs);
        const FloatInput &xi = in.x, &yi = in.y, &ai = in.a, &bi = in.b;
        const BackendOptions& engine = in.engine;
        DivergenceGradient g;
        {
          nb::gil_scoped_release release;
          g = sinkhorn_divergence_gradient(xi.points(), yi.points(), ai.values(), bi.values(), solves, engine);
        }
        nb::dict out;
        out["divergence"] = g.divergence;
        out["x"] = to_numpy(std::move(g.x), {xi.rows(), xi.cols()});
        out["y"] = to_numpy(std::move(g.y), {yi.rows(), yi.cols()});
        out["a"] = to_numpy(std::move(g.a), {xi.rows()});
        out["b"] = to_numpy(std::move(g.b), {yi.rows()});
        return out;
      },
      "x"_a, "y"_a, "a"_a.none(), "b"_a.none(), "solves"_a, "options"_a.none() = nb::none(), "kwargs"_a,
      "{'divergence', 'x', 'y', 'a', 'b'}: gradients of the debiased Sinkhorn divergence from sinkhorn_divergence's "
      "three solves (same inputs)");
}

}  // namespace flashot::python
