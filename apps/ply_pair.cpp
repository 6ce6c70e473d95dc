// The arguments shared by the point-cloud commands (register, flow): SOURCE.ply TARGET.ply -o OUT.ply.
#include <string>
#include <utility>

#include "cli.hpp"
#include "flashot/workflow/dataset.hpp"

namespace flashot::cli {

void add_ply_pair_options(po::options_description& options, po::positional_options_description& positional) {
  options.add_options()
      ("source", po::value<std::string>()->required(), "SOURCE.ply (moved)")
      ("target", po::value<std::string>()->required(), "TARGET.ply (fixed)");
  positional.add("source", 1).add("target", 1);
}

PlyPair ply_pair(const po::variables_map& vm) {
  PlyPair paths{vm["source"].as<std::string>(), vm["target"].as<std::string>(), vm["output"].as<std::string>()};
  check_paths(vm, {{"SOURCE", paths.source}, {"TARGET", paths.target}}, {"output", "report"});
  try {
    for (const auto& [path, what] : {std::pair{paths.source, "SOURCE"}, std::pair{paths.target, "TARGET"},
                                     std::pair{paths.output, "-o"}})
      if (workflow::file_kind(path) != workflow::FileKind::kPly) throw UsageError(std::string(what) + " must be a .ply file");
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  return paths;
}

}  // namespace flashot::cli
