#pragma once
// Shared plumbing of the `flashot` subcommands: option parsing with Boost.Program_options, usage errors, and the
// subcommand table. Exit codes: 0 success, 1 error (an exception caught at main), 2 usage error.

#include <boost/program_options.hpp>
#include <chrono>
#include <filesystem>
#include <initializer_list>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "flashot/flashot.hpp"

namespace flashot::cli {

namespace po = boost::program_options;

/// A command line that cannot be understood: main prints it with a pointer to --help and exits 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Parses `args` (the words after the subcommand name) against `options` plus the positional names in
/// `positional`. Adds and handles nothing itself: callers check "help" before "notify" semantics matter, so this
/// stores, and only then runs notify() unless help was asked for. Boost's errors become UsageError.
po::variables_map parse(const std::vector<std::string>& args, const po::options_description& options,
                        const po::positional_options_description& positional = {});

/// Prints "usage: <synopsis>\n\n<description>\n\n<options>" on stdout (the answer to --help).
void print_help(const std::string& synopsis, const std::string& description, const po::options_description& options);

/// Range checks that throw UsageError naming the option and the value given.
long long require_positive(const po::variables_map& vm, const std::string& option);
double require_positive_double(const po::variables_map& vm, const std::string& option);

/// Shortest decimal text that reads back as the same double ("0.1", "1e-05", "123.4").
std::string format_double(double value);
/// Four significant digits, for people ("2.347", "46.94").
std::string format_short(double value);

/// The subcommands. Each returns the process exit code (0) or throws (UsageError → 2, anything else → 1).
int bench_main(const std::vector<std::string>& args);
#ifdef FLASHOT_WITH_IO
int info_main(const std::vector<std::string>& args);
int align_main(const std::vector<std::string>& args);
int map_main(const std::vector<std::string>& args);
int register_main(const std::vector<std::string>& args);
#endif

}  // namespace flashot::cli

namespace flashot::cli {

/// Seconds since `start` on the steady clock.
double seconds_since(std::chrono::steady_clock::time_point start);
/// Ctrl-C during a solve: after catch_interrupt(), the first SIGINT makes interrupted() true (the solve's progress
/// callback returns false, the run ends as an ordinary error and leaves no output) and restores the default handler,
/// so a second Ctrl-C ends the process at once.
void catch_interrupt();
bool interrupted();

/// --backend and --threads, shared by the commands that solve.
void add_backend_options(po::options_description& options);
BackendOptions backend_options(const po::variables_map& vm);
/// --multiscale auto|on|off (docs/multiscale.md) and its parsed value.
void add_multiscale_option(po::options_description& options);
Multiscale multiscale_option(const po::variables_map& vm);
/// --overrelaxation auto|off|W (docs/engine.md, "Over-relaxation") and its parsed value (SolveOptions::overrelaxation).
void add_overrelaxation_option(po::options_description& options);
double overrelaxation_option(const po::variables_map& vm);
/// Every path the command reads and writes, checked before any data is read (workflow::RunPlan, docs/cli.md):
/// `inputs` as (role, path); `outputs` the option names whose values are written ("output" is -o; options not
/// given are skipped). An output that is an input or another output, names a folder, or whose folder is missing or
/// not writable is a UsageError naming the option, the path and the conflict. In cli.cpp (builds with io only).
void check_paths(const po::variables_map& vm,
                 std::initializer_list<std::pair<const char*, std::filesystem::path>> inputs,
                 std::initializer_list<const char*> outputs);

/// SOURCE.ply and TARGET.ply, the positional arguments of the point-cloud commands (register, flow); their -o is
/// the command's own option "output". In ply_pair.cpp (builds with io only).
void add_ply_pair_options(po::options_description& options, po::positional_options_description& positional);
struct PlyPair {
  std::filesystem::path source, target, output;
};
/// The three paths, each required to be .ply, then check_paths over SOURCE, TARGET, -o and --report.
PlyPair ply_pair(const po::variables_map& vm);

/// Reads an option that must be ≥ 0 (reach, …); throws UsageError naming it.
double require_non_negative_double(const po::variables_map& vm, const std::string& option);

}  // namespace flashot::cli
