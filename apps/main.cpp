// flashot: entropic optimal transport between single-cell data sets (.h5ad) and point clouds (.ply).
// Every error is caught here: one line on stderr, exit 1; usage errors exit 2 (cli.hpp).

#include <algorithm>
#include <exception>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"
#ifdef FLASHOT_WITH_IO
#include "flow.hpp"
#endif
#include "flashot/flashot.hpp"

namespace {

struct Command {
  std::string_view name;
  std::string_view summary;
  int (*run)(const std::vector<std::string>&);
};

constexpr Command kCommands[] = {
#ifdef FLASHOT_WITH_IO
    {"align", "align SOURCE to TARGET (.h5ad or .ply): mapped points, label transfer, coupling, report",
     flashot::cli::align_main},
    {"map", "map new points through a saved solution (no re-solve)", flashot::cli::map_main},
    {"register", "rigid / similarity / affine registration of two PLY clouds by OT correspondences",
     flashot::cli::register_main},
    {"flow", "gradient / Newton flow of a source cloud onto a target through the OT cost (trajectory PLY)",
     flashot::cli::flow_main},
    {"info", "summary of an .h5ad or .ply file (--json for scripts)", flashot::cli::info_main},
#endif
    {"bench", "time fixed-epsilon Sinkhorn iterations on seeded random points", flashot::cli::bench_main},
};

void print_overview(std::ostream& out) {
  out << "usage: flashot <command> [options]   (flashot <command> --help for details)\n\ncommands:\n";
  for (const Command& c : kCommands) {
    out << "  " << c.name << std::string(10 - std::min<std::size_t>(c.name.size(), 9), ' ') << c.summary << "\n";
  }
#ifndef FLASHOT_WITH_IO
  out << "\n(this build has no file support: configured with FLASHOT_IO=OFF)\n";
#endif
  out << "\noptions:\n  --help      this overview\n  --version   version and backends\n";
}

// An error message is printed as one line: a multi-line what() (e.g. from a library) is folded.
std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::replace(text.begin(), text.end(), '\r', ' ');
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> words(argv + 1, argv + argc);
  if (words.empty()) {
    print_overview(std::cerr);
    return 2;
  }
  const std::string& first = words.front();
  if (first == "--help" || first == "-h" || first == "help") {
    print_overview(std::cout);
    return 0;
  }
  if (first == "--version") {
    std::cout << "flashot " << flashot::version() << "\nbackends compiled in and usable:";
    for (const std::string& b : flashot::available_backends()) std::cout << " " << b;
    std::cout << std::endl;
    return 0;
  }
  const auto command = std::find_if(std::begin(kCommands), std::end(kCommands),
                                    [&](const Command& c) { return c.name == first; });
  if (command == std::end(kCommands)) {
    std::cerr << "flashot: unknown command '" << one_line(first) << "' (see flashot --help)" << std::endl;
    return 2;
  }
  const std::string name(command->name);
  try {
    return command->run(std::vector<std::string>(words.begin() + 1, words.end()));
  } catch (const flashot::cli::UsageError& e) {
    std::cerr << "flashot " << name << ": " << one_line(e.what()) << " (see flashot " << name << " --help)"
              << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "flashot " << name << ": error: " << one_line(e.what()) << std::endl;
    return 1;
  }
}
