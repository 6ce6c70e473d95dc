#pragma once
// flashot-gui's command line: files to open, choices to preselect, and the headless mode
//   flashot-gui SOURCE TARGET [--key KEY] [--show KEY] [--color-by COL] --align --screenshot FILE.png
// which opens the window, aligns, renders, writes the PNG and exits (0, or 1 with a message).

#include <QString>
#include <QStringList>

#include <optional>

namespace flashot::gui {

struct CommandLine {
  QString source;
  QString target;
  QString key;        ///< alignment space; empty = the data sets' preferred one
  QString show;       ///< display space; empty = X_umap / spatial / first 3
  QString color_by;   ///< obs column, "source / target", "PLY colors", "transferred labels"; empty = default
  QString transfer;   ///< target column whose labels go to the source
  QString backend;    ///< auto/cpu/cuda; empty = auto
  std::optional<double> blur;
  bool align = false;
  QString register_model;  ///< rigid/similarity/affine/nonrigid: register as soon as the files are open
  QString multiscale;      ///< with register_model: auto/on/off; empty = the panel's default (auto)
  QString stack;           ///< obsm key: show the slices stacked in 3-D
  QString coupling;        ///< with stack: a coupling .h5ad to draw
  QString screenshot;  ///< PNG path: headless mode
  bool whole_window = false;  ///< the screenshot shows the whole window, not only the 3-D view
  int width = 1280;    ///< window size in headless mode
  int height = 800;
  bool help = false;
  bool version = false;
  bool headless() const { return !screenshot.isEmpty(); }
};

/// Parses the arguments (arguments[0] is the program). Throws std::invalid_argument with a one-line message for
/// unknown options, missing values, a bad --size or --blur, --align without two files, too many files.
CommandLine parse_command_line(const QStringList& arguments);
QString usage_text();

}  // namespace flashot::gui
