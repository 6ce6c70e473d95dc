#pragma once
// What flashot-gui saves, in the CLI's formats (workflow): the aligned source, the top-k coupling, the JSON
// report, a screenshot. Every file goes through a temporary file in its folder, renamed at the end.

#include <filesystem>

#include <QImage>

#include "alignment.hpp"
#include "dataset.hpp"

namespace flashot::gui {

/// Inputs are never modified: throws std::invalid_argument naming the file when `destination` exists and is the
/// same file as the loaded source or target (std::filesystem::equivalent: links and other spellings too). Every
/// save_* below except save_image checks this first.
void refuse_overwriting_inputs(const std::filesystem::path& destination, const Dataset& source, const Dataset& target);

/// The enriched copy of the source as `flashot align -o` writes it: .h5ad obsm `<key>_flashot` (+ obs
/// `<COL>_flashot`, `<COL>_flashot_confidence` when labels were transferred); .ply mapped x, y, z with the
/// originals kept. Throws std::invalid_argument when the extension does not match the source's kind.
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
