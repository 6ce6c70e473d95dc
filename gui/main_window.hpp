#pragma once
// The flashot-gui main window: files, choices and parameters on the right, the 3-D view on the left, a
// convergence plot and the report's summary below the controls.

#include <QMainWindow>
#include <QString>

#include <memory>
#include <optional>
#include <vector>

#include "align_worker.hpp"
#include "colors.hpp"
#include "command_line.hpp"
#include "dataset.hpp"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSlider;
class QSpinBox;
class QAction;

namespace flashot::gui {

class ConvergencePlot;
class PointCloudScene;
class VtkImageView;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  /// Opens the files named on the command line, preselects the choices, and aligns if asked. In headless mode
  /// (a screenshot path) it then writes the screenshot and ends the event loop with 0, or 1 after printing the
  /// problem to stderr.
  void apply_command_line(const CommandLine& command_line);
  /// Opens a data set as source or target; a failure shows a dialog (stderr in headless mode) and returns false.
  bool open_source(const QString& path);
  bool open_target(const QString& path);
  /// Starts a solve with the current choices; a problem found before starting shows a dialog.
  void align();
  /// What the view draws (for tests and for saving views).
  const PointCloudScene& scene() const { return *scene_; }
  bool has_source() const { return source_.has_value(); }
  bool has_target() const { return target_.has_value(); }
  bool has_alignment() const { return outcome_ != nullptr; }

 protected:
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;
  void closeEvent(QCloseEvent* event) override;

 private:
  void build_menus();
  QWidget* build_controls();
  bool open_dataset(const QString& path, bool as_source);
  void refresh_choices();
  void refresh_display();
  void refresh_colors();
  void refresh_mapped();
  void refresh_links();
  void update_actions();
  AlignParameters parameters() const;
  void show_error(const QString& title, const QString& message);
  void on_progress(int stage, int stage_count, int iteration, int max_iterations, double error, double epsilon);
  void on_finished(std::shared_ptr<const AlignmentOutcome> outcome);
  void on_cancelled();
  void on_failed(const QString& message);
  void save_aligned_dialog();
  void save_coupling_dialog();
  void save_report_dialog();
  void save_screenshot_dialog();
  void finish_headless();
  void quit_headless(int code, const QString& message);
  QString caption() const;

  std::unique_ptr<PointCloudScene> scene_;
  VtkImageView* view_ = nullptr;
  AlignWorker* worker_ = nullptr;

  std::optional<Dataset> source_;
  std::optional<Dataset> target_;
  std::vector<float> source_show_;  ///< (n × 3) the source in the display space
  std::vector<float> target_show_;
  std::string shown_key_;           ///< the display space source_show_ was read in
  std::shared_ptr<const AlignmentOutcome> outcome_;
  std::string outcome_key_;         ///< the alignment space of outcome_
  std::string outcome_show_key_;    ///< the display space outcome_->mapped_display is in
  Coloring source_colors_;
  Coloring target_colors_;
  Coloring legend_;

  // Controls.
  QLabel* source_label_ = nullptr;
  QLabel* target_label_ = nullptr;
  QComboBox* key_box_ = nullptr;
  QComboBox* show_box_ = nullptr;
  QComboBox* color_box_ = nullptr;
  QComboBox* transfer_box_ = nullptr;
  QDoubleSpinBox* blur_box_ = nullptr;
  QDoubleSpinBox* scaling_box_ = nullptr;
  QDoubleSpinBox* reach_box_ = nullptr;
  QDoubleSpinBox* tolerance_box_ = nullptr;
  QSpinBox* iterations_box_ = nullptr;
  QComboBox* scheme_box_ = nullptr;
  QComboBox* backend_box_ = nullptr;
  QSpinBox* top_k_box_ = nullptr;
  QSpinBox* lines_box_ = nullptr;
  QPushButton* align_button_ = nullptr;
  QPushButton* cancel_button_ = nullptr;
  QProgressBar* progress_bar_ = nullptr;
  QLabel* progress_label_ = nullptr;
  QCheckBox* show_source_ = nullptr;
  QCheckBox* show_target_ = nullptr;
  QCheckBox* show_mapped_ = nullptr;
  QCheckBox* show_links_ = nullptr;
  QSlider* t_slider_ = nullptr;
  QDoubleSpinBox* point_size_box_ = nullptr;
  ConvergencePlot* plot_ = nullptr;
  QPlainTextEdit* summary_ = nullptr;
  QAction* save_aligned_ = nullptr;
  QAction* save_coupling_ = nullptr;
  QAction* save_report_ = nullptr;

  bool updating_choices_ = false;
  std::optional<CommandLine> headless_;
};

}  // namespace flashot::gui
