#pragma once
// What flashot-gui saves, in the CLI's formats (workflow): the aligned source, the top-k coupling, the JSON
// report, a screenshot. Every file goes through a temporary file in its folder, renamed at the end. Before anything
// is written, the CLI's path check (workflow::RunPlan) refuses a destination that is an input data set (however
// spelled: link, hard link, ./) or whose folder is missing or not writable: workflow::PathError, an
// std::invalid_argument naming the destination and the conflict.

#include <filesystem>

#include <QImage>

#include "alignment.hpp"
#include "dataset.hpp"

namespace flashot::gui {

/// The enriched copy of the source as `flashot align -o` writes it: .h5ad obsm `<key>_flashot` (+ obs
/// `<COL>_flashot`, `<COL>_flashot_confidence` when labels were transferred); .ply mapped x, y, z with the
/// originals kept. Throws std::invalid_argument when the extension does not match the source's kind, or when
/// `path` is the source or the target (the path check above covers both inputs).
void save_aligned(const Dataset& source, const Dataset& target, const std::string& key,
                  const AlignmentOutcome& outcome, const std::filesystem::path& path);
/// The top-k coupling as an .h5ad: X = CSR (obs = source points, var = target points).
void save_coupling(const Dataset& source, const Dataset& target, const AlignmentOutcome& outcome,
                   const std::filesystem::path& path);
/// The JSON report (the CLI's keys: epsilon, cost, converged, iterations, marginal_error, backend, …, plus the
/// inputs and the GUI's parameters).
void save_report(const Dataset& source, const Dataset& target, const std::string& key,
                 const AlignmentOutcome& outcome, const std::filesystem::path& path);
/// A PNG. Throws std::runtime_error naming the path when it cannot be written.
void save_image(const QImage& image, const std::filesystem::path& path);

}  // namespace flashot::gui
