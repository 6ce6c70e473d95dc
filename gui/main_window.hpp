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
#include "registration.hpp"
#include "slice_stack.hpp"
#include "task_worker.hpp"

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
  /// Registers the source onto the target in the "Align in" space (3 columns) with the panel's model and
  /// parameters, on a worker thread; a problem found before starting shows a dialog.
  void register_clouds();
  const RegistrationOutcome* registration() const { return registration_.get(); }
  /// Shows the two .h5ad slices stacked in 3-D by obsm `key` (empty: off). Returns false (after a dialog) when
  /// the slices have no such 2-D/3-D entry.
  bool set_stacked(const QString& key);
  bool stacked() const;
  /// Runs the fused-GW slice alignment (align --spatial's solve) on a worker thread with the panel's choices.
  void align_slices();
  /// Reads a coupling .h5ad (flashot align --coupling) for the stacked view.
  bool load_coupling(const QString& path);
  /// Coupling lines the stacked view draws now (0 when not stacked).
  std::size_t stacked_lines() const { return stack_.line_rgba.size() / 4; }

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
  void save_registered_dialog();
  void on_task_progress(const QString& text, int value, int maximum);
  void on_task_finished(std::shared_ptr<const void> result);
  void on_task_cancelled();
  void on_task_failed(const QString& message);
  bool busy() const;
  /// In the stacked view: rebuilds source_show_/target_show_ and the lines from the current choices.
  bool rebuild_stack();
  void refresh_stack_choices();
  void finish_headless();
  void quit_headless(int code, const QString& message);
  QString caption() const;

  std::unique_ptr<PointCloudScene> scene_;
  VtkImageView* view_ = nullptr;
  AlignWorker* worker_ = nullptr;
  TaskWorker* task_ = nullptr;  ///< registrations and slice alignments
  enum class Task { kNone, kRegistration, kSlices } task_kind_ = Task::kNone;

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
  std::shared_ptr<const RegistrationOutcome> registration_;
  std::shared_ptr<const SliceAlignmentOutcome> slice_alignment_;  ///< run here, in stack_key_ coordinates
  std::string slice_alignment_key_;
  std::optional<TopKCoupling> loaded_coupling_;  ///< read from a file
  SliceStack stack_;

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
  QAction* save_registered_ = nullptr;
  // Registration panel.
  QComboBox* reg_model_box_ = nullptr;
  QDoubleSpinBox* reg_blur_box_ = nullptr;
  QDoubleSpinBox* reg_reach_box_ = nullptr;
  QSpinBox* reg_rounds_box_ = nullptr;
  QDoubleSpinBox* reg_kernel_box_ = nullptr;
  QSpinBox* reg_control_box_ = nullptr;
  QComboBox* reg_multiscale_box_ = nullptr;
  QPushButton* register_button_ = nullptr;
  QPlainTextEdit* reg_text_ = nullptr;
  // Stacked slices panel.
  QCheckBox* stack_box_ = nullptr;
  QComboBox* stack_key_box_ = nullptr;
  QDoubleSpinBox* stack_spacing_box_ = nullptr;
  QCheckBox* stack_aligned_box_ = nullptr;
  QSpinBox* stack_lines_box_ = nullptr;
  QDoubleSpinBox* slice_alpha_box_ = nullptr;
  QComboBox* slice_embedding_box_ = nullptr;
  QComboBox* slice_model_box_ = nullptr;
  QPushButton* align_slices_button_ = nullptr;
  QLabel* stack_info_ = nullptr;

  bool updating_choices_ = false;
  std::optional<CommandLine> headless_;
};

}  // namespace flashot::gui
