// flashot info FILE... [--json]: what .h5ad and .ply files hold, read without loading the big arrays.

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.hpp"
#include "flashot/workflow/dataset.hpp"
#include "flashot/io/anndata.hpp"
#include "flashot/io/ply.hpp"

namespace flashot::cli {
namespace {

// Keys in file order (properties, obs columns), not sorted.
using Json = nlohmann::ordered_json;

std::string kind_name(io::Column::Kind kind) {
  switch (kind) {
    case io::Column::Kind::kCategorical: return "categorical";
    case io::Column::Kind::kNumeric: return "numeric";
    case io::Column::Kind::kString: return "string";
    case io::Column::Kind::kBoolean: return "boolean";
  }
  return "unknown";
}

Json shape(std::size_t rows, std::size_t cols) { return Json::array({rows, cols}); }

Json h5ad_info(const std::filesystem::path& path) {
  const io::H5adReader reader(path);
  Json j;
  j["file"] = path.string();
  j["type"] = io::is_zarr_path(path) ? "zarr" : "h5ad";  // AnnData either way (docs/io-zarr.md)
  j["writer"] = reader.writer_generation();
  j["n_obs"] = reader.n_obs();
  j["n_vars"] = reader.n_vars();
  if (const auto x = reader.x_info()) {
    j["x"] = {{"encoding", x->encoding}, {"dtype", x->dtype}, {"shape", shape(x->rows, x->cols)}};
  } else {
    j["x"] = nullptr;
  }
  j["obsm"] = Json::object();
  for (const std::string& key : reader.obsm_keys()) {
    const auto info = reader.obsm_info(key);
    j["obsm"][key] = info ? shape(info->rows, info->cols) : Json();
  }
  j["obs"] = Json::object();
  for (const std::string& name : reader.obs_columns()) {
    const io::Column column = reader.read_obs(name);
    Json c = {{"kind", kind_name(column.kind)}};
    if (column.kind == io::Column::Kind::kCategorical) {
      c["categories"] = column.categories;
      c["ordered"] = column.ordered;
    }
    j["obs"][name] = c;
  }
  j["var_columns"] = reader.var_columns();
  j["layers"] = reader.layer_keys();
  j["uns"] = reader.uns_keys();
  return j;
}

Json ply_info(const std::filesystem::path& path) {
  const io::PlyFile ply = io::read_ply(path);
  Json j;
  j["file"] = path.string();
  j["type"] = "ply";
  j["format"] = io::to_string(ply.format);
  const io::PlyElement* vertex = ply.find("vertex");
  j["n_vertices"] = vertex ? vertex->count : 0;
  j["properties"] = Json::object();
  j["elements"] = Json::object();
  for (const io::PlyElement& element : ply.elements) {
    if (&element == vertex) {
      for (const io::PlyProperty& p : element.properties) {
        j["properties"][p.name] =
            p.is_list ? "list " + io::to_string(p.count_type) + " " + io::to_string(p.type) : io::to_string(p.type);
      }
    } else {
      j["elements"][element.name] = element.count;
    }
  }
  j["comments"] = ply.comments;
  j["obj_info"] = ply.obj_info;
  return j;
}

void print_text(const Json& j) {
  std::cout << j["file"].get<std::string>() << ": ";
  if (j["type"] == "ply") {
    std::cout << "PLY " << j["format"].get<std::string>() << ", " << j["n_vertices"] << " vertices\n  properties:";
    for (const auto& [name, type] : j["properties"].items()) std::cout << " " << name << " (" << type.get<std::string>() << ")";
    std::cout << "\n";
    for (const auto& [name, count] : j["elements"].items()) std::cout << "  element " << name << ": " << count << "\n";
    for (const auto& comment : j["comments"]) std::cout << "  comment " << comment.get<std::string>() << "\n";
    return;
  }
  std::cout << "AnnData " << j["writer"].get<std::string>() << ", " << j["n_obs"] << " cells × " << j["n_vars"]
            << " genes\n  X: ";
  if (j["x"].is_null()) {
    std::cout << "absent\n";
  } else {
    std::cout << j["x"]["encoding"].get<std::string>() << " " << j["x"]["dtype"].get<std::string>() << " "
              << j["x"]["shape"][0] << "×" << j["x"]["shape"][1] << "\n";
  }
  for (const auto& [key, s] : j["obsm"].items()) {
    std::cout << "  obsm " << key << ": " << (s.is_null() ? std::string("?") : s[0].dump() + "×" + s[1].dump()) << "\n";
  }
  for (const auto& [name, c] : j["obs"].items()) {
    std::cout << "  obs " << name << ": " << c["kind"].get<std::string>();
    if (c.contains("categories")) {
      const auto& cats = c["categories"];
      std::cout << " (" << cats.size() << ":";
      for (std::size_t i = 0; i < cats.size() && i < 8; ++i) std::cout << " " << cats[i].get<std::string>();
      std::cout << (cats.size() > 8 ? " …)" : ")");
    }
    std::cout << "\n";
  }
  if (!j["layers"].empty()) std::cout << "  layers: " << j["layers"].size() << "\n";
}

}  // namespace

int info_main(const std::vector<std::string>& args) {
  po::options_description options("info options");
  options.add_options()
      ("help,h", "this help")
      ("json", "JSON on stdout: one object for one FILE, an array of them (in the order given) for several")
      ("file", po::value<std::vector<std::string>>()->required(), "the .h5ad or .ply files");
  po::positional_options_description positional;
  positional.add("file", -1);
  const po::variables_map vm = parse(args, options, positional);
  if (vm.count("help")) {
    print_help("flashot info FILE... [--json]",
               "Summary of each .h5ad (cells, genes, X encoding, obsm shapes, obs columns) or .ply file (format,\n"
               "vertices, properties, other elements), in the order given. A file that cannot be read is one error\n"
               "line on stderr; the others are still described, and the exit status is then 1.",
               options);
    return 0;
  }
  const std::vector<std::string> files = vm["file"].as<std::vector<std::string>>();
  Json all = Json::array();
  bool failed = false;
  for (const std::string& file : files) {
    const std::filesystem::path path = file;
    try {
      Json j = workflow::file_kind(path) == workflow::FileKind::kH5ad ? h5ad_info(path) : ply_info(path);
      if (!vm.count("json")) print_text(j);
      all.push_back(std::move(j));
    } catch (const std::exception& e) {
      // One line, as main prints an error, so several files give one line each.
      std::string message = e.what();
      std::replace(message.begin(), message.end(), '\n', ' ');
      std::cout << std::flush;
      std::cerr << "flashot info: error: " << message << std::endl;
      failed = true;
    }
  }
  if (vm.count("json") && !all.empty()) {
    const Json& shown = files.size() == 1 ? all.front() : all;
    std::cout << shown.dump(2, ' ', false, Json::error_handler_t::replace) << std::endl;
  }
  return failed ? 1 : 0;
}

}  // namespace flashot::cli
