// Bindings of the application layer the CLI uses (workflow/) and of io/: registration, saved solutions, PLY and
// .h5ad reading, so that Python gets the CLI's behaviour and the C++ readers' coverage of every file generation.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>

#include "arrays.hpp"
#include "bindings.hpp"
#include "flashot/io/anndata.hpp"
#include "flashot/io/ply.hpp"
#include "flashot/workflow/dataset.hpp"
#include "flashot/workflow/registration.hpp"
#include "flashot/workflow/solution.hpp"

namespace flashot::python {

using namespace nb::literals;

namespace {

nb::object column_object(io::Column&& c) {
  nb::dict out;
  switch (c.kind) {
    case io::Column::Kind::kCategorical: {
      out["kind"] = "categorical";
      const std::size_t n = c.codes.size();
      out["codes"] = to_numpy(std::move(c.codes), {n});
      out["categories"] = c.categories;
      out["ordered"] = c.ordered;
      break;
    }
    case io::Column::Kind::kNumeric: {
      out["kind"] = "numeric";
      nb::module_ numpy = nb::module_::import_("numpy");
      nb::object values = numpy.attr("empty")(c.numbers.size(), "dtype"_a = "float64");
      auto view = nb::cast<nb::ndarray<double, nb::c_contig, nb::device::cpu>>(values);
      std::memcpy(view.data(), c.numbers.data(), c.numbers.size() * sizeof(double));
      out["values"] = values;
      break;
    }
    case io::Column::Kind::kString:
      out["kind"] = "string";
      out["values"] = c.strings;
      break;
    case io::Column::Kind::kBoolean: {
      out["kind"] = "boolean";
      nb::list flags;
      for (std::uint8_t f : c.flags) flags.append(f != 0);
      out["values"] = flags;
      break;
    }
  }
  if (!c.missing.empty()) {
    nb::list missing;
    for (std::uint8_t f : c.missing) missing.append(f != 0);
    out["missing"] = missing;
  } else {
    out["missing"] = nb::none();
  }
  out["encoding"] = c.encoding;
  return out;
}

nb::object dense(io::DenseMatrix&& d) {
  return to_numpy(std::move(d.values), {d.rows, d.cols});
}

nb::dict transform_dict(const workflow::Transform& t) {
  std::vector<float> matrix(16, 0.0f);
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) matrix[std::size_t(r * 4 + c)] = float(t.linear[std::size_t(r * 3 + c)]);
    matrix[std::size_t(r * 4 + 3)] = float(t.translation[std::size_t(r)]);
  }
  matrix[15] = 1.0f;
  nb::dict out;
  nb::module_ numpy = nb::module_::import_("numpy");
  out["matrix"] = numpy.attr("asarray")(to_numpy(std::move(matrix), {4, 4}), "dtype"_a = "float64");
  out["scale"] = t.scale;
  out["rotation_degrees"] = t.rotation_degrees();
  return out;
}

}  // namespace

void bind_workflow(nb::module_& m) {
  m.def("value_text", &workflow::value_text, "value"_a,
        "How flashot writes a number read from a file as a label (shortest round-trip text: 3, 0.5, 1e-07)");
  m.def(
      "bounding_diameter",
      [](nb::handle x, nb::handle y) {
        const FloatInput xi = FloatInput::from(x, "x", 2);
        const FloatInput yi = FloatInput::from(y, "y", 2, xi.cols());
        return workflow::bounding_diameter(xi.points(), yi.points());
      },
      "x"_a, "y"_a, "Diagonal of the bounding box of both clouds (the scale align derives ε from)");

  m.def(
      "register_clouds",
      [](nb::handle source, nb::handle target, const std::string& model, double blur, double start_blur,
         double anneal, int max_rounds, double tolerance, int round_iterations, const std::string& cost,
         double reach, double reach_source, double reach_target, const std::string& scheme, nb::object progress,
         const PyBackendOptions* backend, const std::string& multiscale) {
        const FloatInput si = FloatInput::from(source, "source", 2, 3);
        const FloatInput ti = FloatInput::from(target, "target", 2, 3);
        workflow::RegistrationOptions o;
        o.model = workflow::parse_transform_model(model);
        o.blur = blur;
        o.start_blur = start_blur;
        o.anneal = anneal;
        o.max_rounds = max_rounds;
        o.tolerance = tolerance;
        o.round_iterations = round_iterations;
        if (cost == "half_sqeuclidean")
          o.cost = Cost::kHalfSquaredEuclidean;
        else if (cost != "sqeuclidean")
          throw std::invalid_argument("cost must be 'sqeuclidean' or 'half_sqeuclidean' (got '" + cost + "')");
        o.reach = reach;
        o.reach_source = reach_source;
        o.reach_target = reach_target;
        o.scheme = parse_scheme(scheme);
        o.multiscale = parse_multiscale(multiscale);
        if (backend != nullptr) o.backend = backend->engine();
        std::exception_ptr error;
        workflow::RegistrationProgress watch;
        if (!progress.is_none()) {
          watch = [&](int round, int rounds, double epsilon, double rms) {
            nb::gil_scoped_acquire gil;
            try {
              if (PyErr_CheckSignals() != 0) throw nb::python_error();
              nb::object answer = progress(round, rounds, epsilon, rms);
              return answer.is_none() || nb::cast<bool>(nb::bool_(answer));
            } catch (...) {
              error = std::current_exception();
              return false;
            }
          };
        } else {
          watch = [&](int, int, double, double) {
            nb::gil_scoped_acquire gil;
            if (PyErr_CheckSignals() != 0) {
              error = std::make_exception_ptr(nb::python_error());
              return false;
            }
            return true;
          };
        }
        workflow::RegistrationResult r;
        std::vector<float> moved;
        {
          nb::gil_scoped_release release;
          r = workflow::register_clouds(si.points(), ti.points(), o, watch);
          moved = r.transform.apply(si.values());
        }
        if (error) std::rethrow_exception(error);
        nb::dict out = transform_dict(r.transform);
        out["points"] = to_numpy(std::move(moved), {si.rows(), 3});
        out["rms"] = r.rms;
        out["diameter"] = r.diameter;
        out["converged"] = r.converged;
        out["iterations"] = r.iterations;
        out["backend"] = r.backend;
        out["device"] = r.device;
        out["seconds"] = r.seconds;
        nb::list rounds;
        for (const auto& round : r.rounds) {
          nb::dict d;
          d["epsilon"] = round.epsilon;
          d["iterations"] = round.iterations;
          d["rms"] = round.rms;
          d["displacement"] = round.displacement;
          d["converged"] = round.converged;
          d["multiscale"] = round.multiscale;
          rounds.append(d);
        }
        out["rounds"] = rounds;
        out["last_solve"] = nb::cast(std::move(r.last_solve));
        return out;
      },
      "source"_a, "target"_a, "model"_a = "rigid", "blur"_a = 0.0, "start_blur"_a = 0.0, "anneal"_a = 0.7,
      "max_rounds"_a = 60, "tolerance"_a = 1e-4, "round_iterations"_a = 200, "cost"_a = "sqeuclidean",
      "reach"_a = 0.0, "reach_source"_a = 0.0, "reach_target"_a = 0.0, "scheme"_a = "alternating",
      "progress"_a.none() = nb::none(), "backend_options"_a.none() = nb::none(), "multiscale"_a = "auto",
      "OT registration (workflow::register_clouds, what `flashot register` runs)");

  m.def(
      "load_solution",
      [](const std::string& path) {
        workflow::Solution s;
        {
          nb::gil_scoped_release release;
          s = workflow::load_solution(path);
        }
        nb::dict out;
        out["key"] = s.key;
        out["representation"] = s.representation;
        out["source"] = s.source;
        out["target"] = s.target;
        out["result"] = nb::cast(s.result());
        out["x"] = to_numpy(std::move(s.x), {s.n, s.d});
        out["a"] = to_numpy(std::move(s.a), {s.n});
        out["y"] = to_numpy(std::move(s.y), {s.m, s.d});
        out["b"] = to_numpy(std::move(s.b), {s.m});
        return out;
      },
      "path"_a, "A file written by `flashot align --save-solution` (or save_solution)");

  m.def(
      "save_solution",
      [](const std::string& path, nb::handle x, nb::handle a, nb::handle y, nb::handle b, const SolveResult& r,
         const std::string& key, const std::string& representation, const std::string& source,
         const std::string& target) {
        const FloatInput xi = FloatInput::from(x, "x", 2);
        const FloatInput yi = FloatInput::from(y, "y", 2, xi.cols());
        const FloatInput ai = FloatInput::from(a, "a", 1);
        const FloatInput bi = FloatInput::from(b, "b", 1);
        workflow::Solution s;
        s.key = key;
        s.representation = representation;
        s.source = source;
        s.target = target;
        s.cost = r.cost;
        s.epsilon = r.epsilon;
        s.reach_source = r.reach_source;
        s.reach_target = r.reach_target;
        s.n = xi.rows();
        s.m = yi.rows();
        s.d = xi.cols();
        s.x.assign(xi.values().begin(), xi.values().end());
        s.a.assign(ai.values().begin(), ai.values().end());
        s.f = r.f;
        s.y.assign(yi.values().begin(), yi.values().end());
        s.b.assign(bi.values().begin(), bi.values().end());
        s.g = r.g;
        nb::gil_scoped_release release;
        workflow::save_solution(path, s);
      },
      "path"_a, "x"_a, "a"_a, "y"_a, "b"_a, "result"_a, "key"_a = "", "representation"_a = "", "source"_a = "",
      "target"_a = "", "Writes the solution file format of docs/cli.md (what `flashot map --solution` reads)");

  m.def(
      "read_ply",
      [](const std::string& path) {
        io::PlyFile ply;
        {
          nb::gil_scoped_release release;
          ply = io::read_ply(path);
        }
        nb::dict out;
        out["format"] = io::to_string(ply.format);
        out["comments"] = ply.comments;
        nb::dict elements;
        for (auto& e : ply.elements) {
          nb::dict props;
          for (auto& p : e.properties) {
            if (p.is_list) continue;  // faces and other lists are kept by the CLI's copies, not offered here
            nb::module_ numpy = nb::module_::import_("numpy");
            nb::object values = numpy.attr("empty")(p.values.size(), "dtype"_a = "float64");
            auto view = nb::cast<nb::ndarray<double, nb::c_contig, nb::device::cpu>>(values);
            std::memcpy(view.data(), p.values.data(), p.values.size() * sizeof(double));
            props[p.name.c_str()] = values;
          }
          elements[e.name.c_str()] = props;
        }
        out["elements"] = elements;
        const std::vector<float> xyz = io::vertex_positions(ply, path);
        out["points"] = to_numpy(std::vector<float>(xyz), {xyz.size() / 3, 3});
        return out;
      },
      "path"_a, "{'points' (n, 3) float32, 'elements': {element: {property: float64 array}}, 'format', 'comments'}");

  m.def(
      "write_ply",
      [](const std::string& path, nb::handle points, nb::dict properties, bool ascii) {
        const FloatInput pi = FloatInput::from(points, "points", 2, 3);
        io::PlyFile ply = io::make_point_cloud(pi.values(), pi.rows());
        if (ascii) ply.format = io::PlyFormat::kAscii;
        io::PlyElement* vertex = ply.find("vertex");
        for (auto [key, value] : properties) {
          const std::string name = nb::cast<std::string>(key);
          const FloatInput vi = FloatInput::from(value, name.c_str(), 1);
          if (vi.rows() != pi.rows())
            throw std::invalid_argument("property '" + name + "' must hold one value per point, " +
                                        std::to_string(pi.rows()) + " (got " + std::to_string(vi.rows()) + ")");
          io::PlyProperty p{name, io::PlyType::kFloat32, false, io::PlyType::kUint8, {}, {}};
          p.values.assign(vi.values().begin(), vi.values().end());
          vertex->properties.push_back(std::move(p));
        }
        nb::gil_scoped_release release;
        io::write_ply(path, ply);
      },
      "path"_a, "points"_a, "properties"_a = nb::dict(), "ascii"_a = false,
      "Writes points (n, 3) and float vertex properties as a PLY file (atomically: temporary file, then rename)");

  nb::class_<io::H5adReader>(m, "H5adReader",
                             "An .h5ad file opened read-only by flashot's C++ reader (every anndata generation from "
                             "≤0.6 to 0.12, pandas-3 strings; docs/io-h5ad.md). Each method reads only what it "
                             "returns.")
      .def("__init__", [](io::H5adReader* self, const std::string& path) { new (self) io::H5adReader(path); },
           "path"_a)
      .def_prop_ro("n_obs", &io::H5adReader::n_obs)
      .def_prop_ro("n_vars", &io::H5adReader::n_vars)
      .def_prop_ro("writer", &io::H5adReader::writer_generation)
      .def("obs_names", &io::H5adReader::obs_names)
      .def("var_names", &io::H5adReader::var_names)
      .def("x_info", [](const io::H5adReader& r) -> nb::object {
        const auto info = r.x_info();
        if (!info) return nb::none();
        nb::dict d;
        d["encoding"] = info->encoding;
        d["dtype"] = info->dtype;
        d["shape"] = nb::make_tuple(info->rows, info->cols);
        return d;
      })
      .def("read_x_dense", [](const io::H5adReader& r) { return dense(r.read_x_dense()); })
      .def("read_x_sparse", [](const io::H5adReader& r) {
        io::SparseMatrix s = r.read_x_sparse();
        nb::dict d;
        nb::module_ numpy = nb::module_::import_("numpy");
        d["data"] = to_numpy(std::move(s.data), {s.data.size()});
        d["indices"] = numpy.attr("asarray")(s.indices, "dtype"_a = "int64");
        d["indptr"] = numpy.attr("asarray")(s.indptr, "dtype"_a = "int64");
        d["shape"] = nb::make_tuple(s.rows, s.cols);
        d["csc"] = s.csc;
        return d;
      })
      .def("obsm_keys", &io::H5adReader::obsm_keys)
      .def(
          "read_obsm",
          [](const io::H5adReader& r, const std::string& key) {
            const io::ArrayInfo info = r.obsm_shape(key);
            std::vector<float> values(info.rows * info.cols);
            {
              nb::gil_scoped_release release;
              r.read_obsm_into(key, values);
            }
            return to_numpy(std::move(values), {info.rows, info.cols});
          },
          "key"_a, "obsm[key] as float32 (rows, cols), read by HDF5 straight into the array's memory")
      .def("obs_columns", &io::H5adReader::obs_columns)
      .def("read_obs", [](const io::H5adReader& r, const std::string& c) { return column_object(r.read_obs(c)); },
           "column"_a)
      .def("var_columns", &io::H5adReader::var_columns)
      .def("read_var", [](const io::H5adReader& r, const std::string& c) { return column_object(r.read_var(c)); },
           "column"_a)
      .def("layer_keys", &io::H5adReader::layer_keys)
      .def("read_layer", [](const io::H5adReader& r, const std::string& k) { return dense(r.read_layer(k)); }, "key"_a)
      .def("uns_keys", &io::H5adReader::uns_keys)
      .def(
          "read_uns",
          [](const io::H5adReader& r, const std::string& key) -> nb::object {
            const io::UnsValue v = r.read_uns(key);
            if (const double* d = std::get_if<double>(&v)) return nb::float_(*d);
            if (const std::int64_t* i = std::get_if<std::int64_t>(&v)) return nb::int_(*i);
            if (const std::string* s = std::get_if<std::string>(&v)) return nb::str(s->c_str());
            return nb::cast(std::get<std::vector<double>>(v));
          },
          "key"_a);
}

}  // namespace flashot::python
