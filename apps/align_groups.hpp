#pragma once
// `flashot align --groupby COL` (apps/align_groups.cpp): the groups of SOURCE aligned to TARGET's groups of the same
// value in one batched solve.

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

#include "cli.hpp"
#include "flashot/workflow/dataset.hpp"

namespace flashot::cli {

/// What align_main has parsed and loaded when --groupby is given.
struct GroupedAlign {
  std::string column;                        // --groupby COL
  const workflow::PointCloud& source;
  const workflow::PointCloud& target;
  SolveOptions solve;                        // blur or blur_relative set; progress unset
  std::string blur_origin;                   // "--blur" or "--rel-blur F x each group's diameter"
  BackendOptions backend;
  std::optional<workflow::Labels> labels;    // --transfer-labels (TARGET)
  std::optional<workflow::Labels> truth;     // --compare-labels (SOURCE)
  std::filesystem::path out_path, report_path;
  bool quiet = false;
  std::chrono::steady_clock::time_point start;
  double load_seconds = 0;
};

/// Solves and writes; throws std::invalid_argument naming the column and the value for a SOURCE group with no TARGET
/// rows, or SOURCE rows without a value.
int align_groups(const GroupedAlign& g);

}  // namespace flashot::cli
