#include "cli.hpp"

#include <charconv>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <iostream>

#ifdef FLASHOT_WITH_IO
#include "flashot/workflow/run_plan.hpp"
#endif

namespace flashot::cli {
namespace {
volatile std::sig_atomic_t interrupt_seen = 0;
extern "C" void on_interrupt(int) {
  interrupt_seen = 1;
  std::signal(SIGINT, SIG_DFL);
}
}  // namespace

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
void catch_interrupt() { std::signal(SIGINT, on_interrupt); }
bool interrupted() { return interrupt_seen != 0; }

po::variables_map parse(const std::vector<std::string>& args, const po::options_description& options,
                        const po::positional_options_description& positional) {
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(options).positional(positional).run(), vm);
    if (vm.count("help") == 0) po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  return vm;
}

void print_help(const std::string& synopsis, const std::string& description, const po::options_description& options) {
  std::cout << "usage: " << synopsis << "\n\n" << description << "\n\n" << options << std::flush;
}

long long require_positive(const po::variables_map& vm, const std::string& option) {
  const long long value = vm[option].as<long long>();
  if (value <= 0) throw UsageError("--" + option + " must be > 0 (got " + std::to_string(value) + ")");
  return value;
}

double require_positive_double(const po::variables_map& vm, const std::string& option) {
  const double value = vm[option].as<double>();
  if (!(value > 0) || !std::isfinite(value)) {
    throw UsageError("--" + option + " must be a finite number > 0 (got " + format_double(value) + ")");
  }
  return value;
}

std::string format_double(double value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

std::string format_short(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.4g", value);
  return buffer;
}

}  // namespace flashot::cli

namespace flashot::cli {

void add_backend_options(po::options_description& options) {
  options.add_options()
      ("backend", po::value<std::string>()->default_value("auto"), "auto | cpu | cuda (auto: CUDA when a GPU answers)")
      ("threads", po::value<long long>()->default_value(0), "CPU threads (0 = all)")
      ("precision", po::value<std::string>()->default_value("default"),
       "CUDA score arithmetic: default | fp32 | tf32 | bf16 (default meets docs/engine.md's accuracy)")
      ("screening", po::value<std::string>()->default_value("auto"),
       "CUDA tile screening of the default tensor-core scores: auto | off | on (docs/engine.md)")
      ("point-order", po::value<std::string>()->default_value("auto"),
       "each side's internal point order: auto | input | locality (locality: sorted so that the CUDA tile screen "
       "skips far regions; results in the caller's order either way; auto: locality for clustered data on CUDA from "
       "n*m = 1e9 and d = 5 up; docs/engine.md, \"Point order\")")
      ("gpus", po::value<long long>()->default_value(1),
       "CUDA devices to shard the source rows over (docs/multi-gpu.md); 1 = one device");
}

BackendOptions backend_options(const po::variables_map& vm) {
  BackendOptions backend;
  try {
    backend.backend = parse_backend(vm["backend"].as<std::string>());
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  const long long threads = vm["threads"].as<long long>();
  if (threads < 0 || threads > 1'000'000) {
    throw UsageError("--threads must be >= 0 (got " + std::to_string(threads) + ")");
  }
  backend.threads = static_cast<int>(threads);
  try {
    backend.precision = parse_precision(vm["precision"].as<std::string>());
    backend.screening = parse_screening(vm["screening"].as<std::string>());
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  const std::string order = vm["point-order"].as<std::string>();
  if (order != "auto" && order != "input" && order != "locality")
    throw UsageError("--point-order must be auto, input or locality (got '" + order + "')");
  backend.point_order = parse_point_order(order);
  const long long gpus = vm["gpus"].as<long long>();
  if (gpus < 1 || gpus > 1024) throw UsageError("--gpus must be >= 1 (got " + std::to_string(gpus) + ")");
  if (gpus > 1) {
    backend.devices.clear();
    for (long long g = 0; g < gpus; ++g) backend.devices.push_back(static_cast<int>(g));
  }
  return backend;
}

void add_multiscale_option(po::options_description& options) {
  options.add_options()("multiscale", po::value<std::string>()->default_value("auto"),
                        "multiscale block-sparse solve: auto | on | off (auto: from n*m = 1e10 up; docs/multiscale.md)");
}

Multiscale multiscale_option(const po::variables_map& vm) {
  try {
    return parse_multiscale(vm["multiscale"].as<std::string>());
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--") + e.what());
  }
}

void add_overrelaxation_option(po::options_description& options) {
  options.add_options()("overrelaxation", po::value<std::string>()->default_value("auto"),
                        "over-relaxation of the final stage: auto (omega from the marginal checks) | off | a fixed "
                        "omega in [1, 2) (docs/engine.md)");
}

double overrelaxation_option(const po::variables_map& vm) {
  const std::string text = vm["overrelaxation"].as<std::string>();
  if (text == "auto") return kOverrelaxationAuto;
  if (text == "off") return 1;
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !(value >= 1 && value < 2))
    throw UsageError("--overrelaxation must be auto, off or a number in [1, 2) (got '" + text + "')");
  return value;
}

double require_non_negative_double(const po::variables_map& vm, const std::string& option) {
  const double value = vm[option].as<double>();
  if (!(value >= 0) || !std::isfinite(value)) {
    throw UsageError("--" + option + " must be a finite number >= 0 (got " + format_double(value) + ")");
  }
  return value;
}

#ifdef FLASHOT_WITH_IO
void check_paths(const po::variables_map& vm,
                 std::initializer_list<std::pair<const char*, std::filesystem::path>> inputs,
                 std::initializer_list<const char*> outputs) {
  workflow::RunPlan plan;
  for (const auto& [role, path] : inputs) plan.input(role, path);
  for (const char* name : outputs) {
    if (vm.count(name) == 0) continue;
    plan.output(std::string(name) == "output" ? "-o" : "--" + std::string(name), vm[name].as<std::string>());
  }
  try {
    plan.check();
  } catch (const workflow::PathError& e) {
    throw UsageError(e.what());
  }
}
#endif

}  // namespace flashot::cli
