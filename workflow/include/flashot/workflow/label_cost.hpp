#pragma once
// The label-augmented cost of `flashot align --label-cost COL` (flashot/label_cost.hpp, docs/cli.md): classes from
// obs COL (or a PLY vertex property) of both clouds, matched by their text, and W from a CSV table or the default.

#include <filesystem>
#include <string>

#include "flashot/label_cost.hpp"
#include "flashot/workflow/dataset.hpp"

namespace flashot::workflow {

/// Classes are the union of both sides' label texts (source's first, in their order); a class present on one side
/// only is fine (it is empty on the other). table: empty for the default W = 1 − δ, else a CSV file whose header
/// row names TARGET classes (first cell ignored) and whose rows start with a SOURCE class, then its costs; every
/// class present in the data must be in it (rows for SOURCE's, columns for TARGET's). Throws std::invalid_argument
/// naming the file, the column and the value: a row without a label, a class missing from the table, a cell that
/// is not a finite number, a ragged row, a repeated class.
LabelCost label_cost_from(const PointCloud& source, const PointCloud& target, const std::string& column,
                          double weight, const std::filesystem::path& table);

}  // namespace flashot::workflow
