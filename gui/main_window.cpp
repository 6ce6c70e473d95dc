#include "main_window.hpp"

#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QCloseEvent>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QDir>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSlider>
#include <QSpinBox>
#include <QSplitter>
#include <QStatusBar>
#include <QTimer>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "alignment.hpp"
#include "convergence_plot.hpp"
#include "flashot/workflow/report.hpp"
#include "legend.hpp"
#include "point_cloud_scene.hpp"
#include "save.hpp"
#include "vtk_image_view.hpp"

namespace flashot::gui {
namespace {

constexpr int kSliderSteps = 100;
constexpr std::size_t kDefaultLines = 1500;  // more hides the clouds behind the lines at sample sizes
constexpr double kDefaultPointSize = 3.0;
constexpr const char* kNoTransfer = "(none)";
constexpr double kStackElevation = 62;  // degrees from looking straight down on the slice planes
constexpr double kStackAzimuth = 20;

QString q(const std::string& s) { return QString::fromStdString(s); }

void set_items(QComboBox* box, const std::vector<std::string>& items, const QString& keep) {
  box->clear();
  for (const auto& item : items) box->addItem(q(item));
  const int at = box->findText(keep);
  if (at >= 0) box->setCurrentIndex(at);
}

QDoubleSpinBox* double_box(double min, double max, double value, int decimals, double step) {
  auto* box = new QDoubleSpinBox;
  box->setRange(min, max);
  box->setDecimals(decimals);
  box->setSingleStep(step);
  box->setValue(value);
  return box;
}

// The open dialogs pick files; a zarr folder store (docs/io-zarr.md) is opened by picking its root metadata file
// (zarr.json, or .zgroup for format 2), which stands for the store around it.
const char* kDataSetFilter = "Data sets (*.h5ad *.ply *.zarr.zip zarr.json .zgroup)";

QString data_set_path(const QString& chosen) {
  const QFileInfo file(chosen);
  if ((file.fileName() == "zarr.json" || file.fileName() == ".zgroup") &&
      file.dir().dirName().endsWith(".zarr", Qt::CaseInsensitive)) {
    return file.dir().absolutePath();
  }
  return chosen;
}

}  // namespace

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent),
      scene_(std::make_unique<PointCloudScene>()),
      worker_(new AlignWorker(this)),
      task_(new TaskWorker(this)) {
  setWindowTitle(tr("flashot"));
  setAcceptDrops(true);
  view_ = new VtkImageView(*scene_, this);
  view_->set_overlay([this](QPainter& painter, const QRect& area) {
    if (source_ || target_) paint_legend(painter, area, legend_);
    paint_caption(painter, area, caption());
  });

  auto* scroll = new QScrollArea;
  scroll->setWidget(build_controls());
  scroll->setWidgetResizable(true);
  scroll->setMinimumWidth(340);
  auto* splitter = new QSplitter;
  splitter->addWidget(view_);
  splitter->addWidget(scroll);
  splitter->setStretchFactor(0, 1);
  splitter->setStretchFactor(1, 0);
  setCentralWidget(splitter);
  build_menus();

  connect(worker_, &AlignWorker::progress, this, &MainWindow::on_progress);
  connect(worker_, &AlignWorker::finished, this, &MainWindow::on_finished);
  connect(worker_, &AlignWorker::cancelled, this, &MainWindow::on_cancelled);
  connect(worker_, &AlignWorker::failed, this, &MainWindow::on_failed);
  connect(task_, &TaskWorker::progress, this, &MainWindow::on_task_progress);
  connect(task_, &TaskWorker::finished, this, &MainWindow::on_task_finished);
  connect(task_, &TaskWorker::cancelled, this, &MainWindow::on_task_cancelled);
  connect(task_, &TaskWorker::failed, this, &MainWindow::on_task_failed);
  update_actions();
  statusBar()->showMessage(tr("Open a source and a target (.h5ad or .ply): File menu, command line, or drop them "
                              "here."));
}

MainWindow::~MainWindow() {
  // The worker's thread must end before the scene and data it does not touch go, and before the window does.
  delete worker_;
  worker_ = nullptr;
  delete task_;
  task_ = nullptr;
  delete view_;
  view_ = nullptr;
}

void MainWindow::build_menus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("Open &source…"), QKeySequence::Open, this, [this] {
    const QString path = data_set_path(QFileDialog::getOpenFileName(this, tr("Open source"), {}, tr(kDataSetFilter)));
    if (!path.isEmpty()) open_source(path);
  });
  file->addAction(tr("Open &target…"), this, [this] {
    const QString path = data_set_path(QFileDialog::getOpenFileName(this, tr("Open target"), {}, tr(kDataSetFilter)));
    if (!path.isEmpty()) open_target(path);
  });
  file->addSeparator();
  save_aligned_ = file->addAction(tr("Save &aligned data…"), QKeySequence::Save, this,
                                  &MainWindow::save_aligned_dialog);
  save_coupling_ = file->addAction(tr("Save &coupling…"), this, &MainWindow::save_coupling_dialog);
  save_report_ = file->addAction(tr("Save &report…"), this, &MainWindow::save_report_dialog);
  save_registered_ = file->addAction(tr("Save re&gistered cloud…"), this, &MainWindow::save_registered_dialog);
  file->addAction(tr("Open coup&ling for the stacked slices…"), this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open coupling"), {}, tr("AnnData (*.h5ad)"));
    if (!path.isEmpty()) load_coupling(path);
  });
  file->addAction(tr("Save scree&nshot…"), this, &MainWindow::save_screenshot_dialog);
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);
  QMenu* view = menuBar()->addMenu(tr("&View"));
  view->addAction(tr("&Full detail now"), QKeySequence(Qt::Key_F), this, [this] { view_->render_full_now(); });
  view->addAction(tr("&Reset camera"), this, [this] {
    scene_->reset_camera();
    view_->request_render();
  });
}

QWidget* MainWindow::build_controls() {
  auto* panel = new QWidget;
  auto* layout = new QVBoxLayout(panel);

  auto* data = new QGroupBox(tr("Data"));
  auto* data_form = new QFormLayout(data);
  source_label_ = new QLabel(tr("(none)"));
  target_label_ = new QLabel(tr("(none)"));
  source_label_->setWordWrap(true);
  target_label_->setWordWrap(true);
  auto* open_source_button = new QPushButton(tr("Open…"));
  auto* open_target_button = new QPushButton(tr("Open…"));
  connect(open_source_button, &QPushButton::clicked, this, [this] {
    const QString path = data_set_path(QFileDialog::getOpenFileName(this, tr("Open source"), {}, tr(kDataSetFilter)));
    if (!path.isEmpty()) open_source(path);
  });
  connect(open_target_button, &QPushButton::clicked, this, [this] {
    const QString path = data_set_path(QFileDialog::getOpenFileName(this, tr("Open target"), {}, tr(kDataSetFilter)));
    if (!path.isEmpty()) open_target(path);
  });
  auto* source_row = new QHBoxLayout;
  source_row->addWidget(source_label_, 1);
  source_row->addWidget(open_source_button);
  auto* target_row = new QHBoxLayout;
  target_row->addWidget(target_label_, 1);
  target_row->addWidget(open_target_button);
  data_form->addRow(tr("Source"), source_row);
  data_form->addRow(tr("Target"), target_row);
  key_box_ = new QComboBox;
  show_box_ = new QComboBox;
  color_box_ = new QComboBox;
  color_box_->setObjectName("color_by");
  key_box_->setToolTip(tr("The space the transport is computed in (obsm entry, X on shared genes, PLY xyz)"));
  show_box_->setToolTip(tr("The space the clouds are drawn in"));
  data_form->addRow(tr("Align in"), key_box_);
  data_form->addRow(tr("Show in"), show_box_);
  data_form->addRow(tr("Color by"), color_box_);
  connect(show_box_, &QComboBox::currentTextChanged, this, [this] {
    if (!updating_choices_) refresh_display();
  });
  connect(key_box_, &QComboBox::currentTextChanged, this, [this] {
    if (!updating_choices_ && show_box_->currentText() == kSpaceFirstThree) refresh_display();
  });
  connect(color_box_, &QComboBox::currentTextChanged, this, [this] {
    if (!updating_choices_) refresh_colors();
  });
  layout->addWidget(data);

  auto* params = new QGroupBox(tr("Parameters"));
  auto* form = new QFormLayout(params);
  blur_box_ = double_box(0, 1e9, 0, 4, 0.01);
  blur_box_->setObjectName("blur");
  blur_box_->setSpecialValueText(tr("auto (%1% of diameter)").arg(kDefaultBlurRelative * 100));
  blur_box_->setToolTip(tr("ε = blur², in the data's units; 0 = %1% of the diameter of both clouds").arg(kDefaultBlurRelative * 100));
  scaling_box_ = double_box(0.05, 0.99, 0.5, 2, 0.05);
  reach_box_ = double_box(0, 1e9, 0, 4, 0.1);
  reach_box_->setSpecialValueText(tr("balanced"));
  reach_box_->setToolTip(tr("Unbalanced transport: mass may be created or destroyed at cost reach²; 0 = balanced"));
  tolerance_box_ = double_box(0, 1, 1e-3, 6, 1e-4);
  tolerance_box_->setObjectName("tolerance");
  iterations_box_ = new QSpinBox;
  iterations_box_->setRange(1, 1'000'000);
  iterations_box_->setValue(1000);
  scheme_box_ = new QComboBox;
  scheme_box_->addItems({"alternating", "symmetric"});
  backend_box_ = new QComboBox;
  backend_box_->addItem("auto");
  for (const std::string& b : available_backends()) backend_box_->addItem(q(b));
  top_k_box_ = new QSpinBox;
  top_k_box_->setRange(1, static_cast<int>(kMaxTopK));
  top_k_box_->setValue(3);
  lines_box_ = new QSpinBox;
  lines_box_->setRange(0, static_cast<int>(kMaxLines));
  lines_box_->setValue(static_cast<int>(kDefaultLines));
  lines_box_->setSingleStep(1000);
  transfer_box_ = new QComboBox;
  transfer_box_->setObjectName("transfer");
  form->addRow(tr("Blur"), blur_box_);
  form->addRow(tr("Scaling"), scaling_box_);
  form->addRow(tr("Reach"), reach_box_);
  form->addRow(tr("Tolerance"), tolerance_box_);
  form->addRow(tr("Max iterations"), iterations_box_);
  form->addRow(tr("Scheme"), scheme_box_);
  form->addRow(tr("Backend"), backend_box_);
  form->addRow(tr("Top-k couplings"), top_k_box_);
  form->addRow(tr("Lines drawn (max)"), lines_box_);
  form->addRow(tr("Transfer labels"), transfer_box_);
  connect(lines_box_, &QSpinBox::valueChanged, this, [this] { refresh_links(); });
  layout->addWidget(params);

  auto* run = new QHBoxLayout;
  align_button_ = new QPushButton(tr("Align"));
  align_button_->setObjectName("align");
  cancel_button_ = new QPushButton(tr("Cancel"));
  cancel_button_->setObjectName("cancel");
  align_button_->setDefault(true);
  connect(align_button_, &QPushButton::clicked, this, &MainWindow::align);
  connect(cancel_button_, &QPushButton::clicked, this, [this] {
    worker_->cancel();
    task_->cancel();
    progress_label_->setText(tr("cancelling…"));
  });
  run->addWidget(align_button_);
  run->addWidget(cancel_button_);
  layout->addLayout(run);
  progress_bar_ = new QProgressBar;
  progress_bar_->setRange(0, 1);
  progress_bar_->setValue(0);
  progress_label_ = new QLabel;
  progress_label_->setObjectName("progress_text");
  progress_label_->setWordWrap(true);
  layout->addWidget(progress_bar_);
  layout->addWidget(progress_label_);

  // ---- Registration of point clouds (flashot register) ----------------------------------------------------------
  auto* reg = new QGroupBox(tr("Register (3-D point clouds)"));
  auto* reg_form = new QFormLayout(reg);
  reg_model_box_ = new QComboBox;
  reg_model_box_->setObjectName("reg_model");
  for (const char* model : kRegistrationModels) reg_model_box_->addItem(model);
  reg_model_box_->setToolTip(tr("flashot register --model: a transform fitted to OT correspondences, blur "
                                "annealed from coarse to fine; nonrigid: a smooth displacement field"));
  reg_blur_box_ = double_box(0, 1e9, 0, 5, 0.001);
  reg_blur_box_->setObjectName("reg_blur");
  reg_blur_box_->setSpecialValueText(tr("auto (1% of diameter)"));
  reg_reach_box_ = double_box(0, 1e9, 0, 5, 0.01);
  reg_reach_box_->setObjectName("reg_reach");
  reg_reach_box_->setSpecialValueText(tr("auto (target: 2% of diameter)"));
  reg_reach_box_->setToolTip(tr("Partial overlap: reach on both sides in data units; auto = the CLI's default, "
                                "the target unbalanced with a reach of 0.02 × the diameter"));
  reg_rounds_box_ = new QSpinBox;
  reg_rounds_box_->setRange(1, 100'000);
  reg_rounds_box_->setValue(60);
  reg_kernel_box_ = double_box(0, 1e9, 0, 5, 0.01);
  reg_kernel_box_->setSpecialValueText(tr("auto (10% of diameter)"));
  reg_control_box_ = new QSpinBox;
  reg_control_box_->setRange(1, 100'000);
  reg_control_box_->setValue(200);
  reg_form->addRow(tr("Model"), reg_model_box_);
  reg_form->addRow(tr("Final blur"), reg_blur_box_);
  reg_form->addRow(tr("Reach"), reg_reach_box_);
  reg_form->addRow(tr("Max rounds"), reg_rounds_box_);
  reg_form->addRow(tr("Kernel width (nonrigid)"), reg_kernel_box_);
  reg_form->addRow(tr("Control points (nonrigid)"), reg_control_box_);
  reg_multiscale_box_ = new QComboBox;
  reg_multiscale_box_->setObjectName("reg_multiscale");
  for (const char* choice : kMultiscaleChoices) reg_multiscale_box_->addItem(choice);
  reg_multiscale_box_->setToolTip(tr("flashot register --multiscale: each round's solve visits only the block pairs "
                                     "a certified bound keeps (docs/multiscale.md); auto = from 10¹⁰ point pairs on "
                                     "the CPU, 10¹² on a GPU"));
  reg_form->addRow(tr("Multiscale"), reg_multiscale_box_);
  register_button_ = new QPushButton(tr("Register"));
  register_button_->setObjectName("register");
  connect(register_button_, &QPushButton::clicked, this, &MainWindow::register_clouds);
  reg_form->addRow(register_button_);
  reg_text_ = new QPlainTextEdit;
  reg_text_->setObjectName("registration");
  reg_text_->setReadOnly(true);
  reg_text_->setMinimumHeight(150);
  QFont mono(QStringLiteral("monospace"));
  mono.setStyleHint(QFont::TypeWriter);
  reg_text_->setFont(mono);
  reg_form->addRow(reg_text_);
  layout->addWidget(reg);

  // ---- Two tissue slices stacked in 3-D (flashot align --spatial) --------------------------------------------
  auto* slices = new QGroupBox(tr("Slices stacked in 3-D"));
  auto* slices_form = new QFormLayout(slices);
  stack_box_ = new QCheckBox(tr("stack the slices"));
  stack_box_->setObjectName("stack");
  stack_key_box_ = new QComboBox;
  stack_key_box_->setObjectName("stack_key");
  stack_key_box_->setToolTip(tr("The slices' coordinates (obsm, 2 or 3 columns)"));
  stack_spacing_box_ = double_box(0, 10, 0.35, 2, 0.05);
  stack_spacing_box_->setObjectName("stack_spacing");
  stack_spacing_box_->setToolTip(tr("Gap between the slice planes, × the target slice's extent"));
  stack_aligned_box_ = new QCheckBox(tr("aligned source coordinates"));
  stack_aligned_box_->setObjectName("stack_aligned");
  stack_aligned_box_->setChecked(true);
  stack_aligned_box_->setToolTip(tr("The source at its aligned coordinates (obsm KEY_flashot of an align --spatial "
                                    "output, or the slice alignment run here); off: raw, centred over the target"));
  stack_lines_box_ = new QSpinBox;
  stack_lines_box_->setObjectName("stack_lines");
  stack_lines_box_->setRange(0, static_cast<int>(kMaxLines));
  stack_lines_box_->setValue(2000);
  stack_lines_box_->setSingleStep(500);
  stack_lines_box_->setToolTip(tr("The heaviest couplings drawn, opacity by plan weight"));
  slices_form->addRow(stack_box_);
  slices_form->addRow(tr("Coordinates"), stack_key_box_);
  slices_form->addRow(tr("Spacing"), stack_spacing_box_);
  slices_form->addRow(stack_aligned_box_);
  slices_form->addRow(tr("Lines drawn (max)"), stack_lines_box_);
  slice_alpha_box_ = double_box(0, 1, 0.5, 2, 0.05);
  slice_alpha_box_->setToolTip(tr("Weight of the spatial (GW) term; 1 - alpha weighs the embedding"));
  slice_embedding_box_ = new QComboBox;
  slice_embedding_box_->setToolTip(tr("An embedding both slices have (--key EMB); none = coordinates only"));
  slice_model_box_ = new QComboBox;
  slice_model_box_->addItems({"rigid", "affine", "nonrigid"});
  slices_form->addRow(tr("Alpha"), slice_alpha_box_);
  slices_form->addRow(tr("Embedding"), slice_embedding_box_);
  slices_form->addRow(tr("Model"), slice_model_box_);
  align_slices_button_ = new QPushButton(tr("Align slices (fused GW)"));
  align_slices_button_->setObjectName("align_slices");
  connect(align_slices_button_, &QPushButton::clicked, this, &MainWindow::align_slices);
  slices_form->addRow(align_slices_button_);
  stack_info_ = new QLabel;
  stack_info_->setObjectName("stack_info");
  stack_info_->setWordWrap(true);
  slices_form->addRow(stack_info_);
  connect(stack_box_, &QCheckBox::toggled, this, [this] {
    if (!updating_choices_) refresh_display();
  });
  connect(stack_key_box_, &QComboBox::currentTextChanged, this, [this] {
    if (!updating_choices_ && stacked()) refresh_display();
  });
  connect(stack_spacing_box_, &QDoubleSpinBox::valueChanged, this, [this] {
    if (stacked()) refresh_display();
  });
  connect(stack_aligned_box_, &QCheckBox::toggled, this, [this] {
    if (stacked()) {
      rebuild_stack();
      refresh_colors();
      refresh_links();
    }
  });
  connect(stack_lines_box_, &QSpinBox::valueChanged, this, [this] {
    if (stacked()) {
      rebuild_stack();
      refresh_links();
    }
  });
  layout->addWidget(slices);

  auto* show = new QGroupBox(tr("View"));
  auto* show_form = new QFormLayout(show);
  show_source_ = new QCheckBox(tr("source"));
  show_target_ = new QCheckBox(tr("target"));
  show_mapped_ = new QCheckBox(tr("mapped source"));
  show_links_ = new QCheckBox(tr("coupling lines"));
  for (auto* box : {show_source_, show_target_, show_mapped_, show_links_}) box->setChecked(true);
  auto* toggles = new QHBoxLayout;
  for (auto* box : {show_source_, show_target_}) toggles->addWidget(box);
  auto* toggles2 = new QHBoxLayout;
  for (auto* box : {show_mapped_, show_links_}) toggles2->addWidget(box);
  show_form->addRow(toggles);
  show_form->addRow(toggles2);
  const std::pair<QCheckBox*, Layer> layers[] = {{show_source_, Layer::kSource},
                                                 {show_target_, Layer::kTarget},
                                                 {show_mapped_, Layer::kMapped},
                                                 {show_links_, Layer::kLinks}};
  for (const auto& [box, layer] : layers) {
    connect(box, &QCheckBox::toggled, this, [this, layer = layer](bool on) {
      scene_->set_visible(layer, on);
      view_->request_render();
    });
  }
  t_slider_ = new QSlider(Qt::Horizontal);
  t_slider_->setObjectName("t");
  t_slider_->setRange(0, kSliderSteps);
  t_slider_->setValue(kSliderSteps);
  t_slider_->setToolTip(tr("Moves every source point from where it is (0) to where it maps (1)"));
  connect(t_slider_, &QSlider::valueChanged, this, [this](int value) {
    scene_->set_morph_t(static_cast<double>(value) / kSliderSteps);
    refresh_links();
    view_->request_render();
  });
  // While the slider is dragged, draw with level of detail like a moving camera.
  connect(t_slider_, &QSlider::sliderPressed, this, [this] { scene_->set_interactive(true); });
  connect(t_slider_, &QSlider::sliderReleased, this, [this] {
    scene_->set_interactive(false);
    view_->request_render();
  });
  show_form->addRow(tr("t (source → mapped)"), t_slider_);
  point_size_box_ = double_box(1, 10, kDefaultPointSize, 1, 0.5);
  scene_->set_point_size(static_cast<float>(kDefaultPointSize));
  connect(point_size_box_, &QDoubleSpinBox::valueChanged, this, [this](double size) {
    scene_->set_point_size(static_cast<float>(size));
    view_->request_render();
  });
  show_form->addRow(tr("Point size"), point_size_box_);
  layout->addWidget(show);

  auto* result = new QGroupBox(tr("Convergence"));
  auto* result_layout = new QVBoxLayout(result);
  plot_ = new ConvergencePlot;
  summary_ = new QPlainTextEdit;
  summary_->setObjectName("summary");
  summary_->setReadOnly(true);
  summary_->setMinimumHeight(120);
  result_layout->addWidget(plot_);
  result_layout->addWidget(summary_);
  layout->addWidget(result);
  layout->addStretch(1);
  return panel;
}

bool MainWindow::open_source(const QString& path) { return open_dataset(path, true); }
bool MainWindow::open_target(const QString& path) { return open_dataset(path, false); }

bool MainWindow::open_dataset(const QString& path, bool as_source) {
  if (busy()) {
    show_error(tr("Busy"), tr("An alignment is running; cancel it before opening another file."));
    return false;
  }
  try {
    Dataset dataset = Dataset::open(path.toStdString());
    (as_source ? source_ : target_) = std::move(dataset);
  } catch (const std::exception& e) {
    show_error(tr("Cannot open %1").arg(QFileInfo(path).fileName()), q(e.what()));
    return false;
  }
  outcome_.reset();
  registration_.reset();
  slice_alignment_.reset();
  loaded_coupling_.reset();
  stack_ = {};
  reg_text_->clear();
  scene_->clear(Layer::kMapped);
  scene_->clear(Layer::kLinks);
  plot_->clear();
  summary_->clear();
  (as_source ? source_label_ : target_label_)->setText(q((as_source ? source_ : target_)->summary()));
  statusBar()->showMessage(source_ && target_ ? tr("Ready: press Align.") : tr("Open the other data set too."));
  refresh_choices();
  refresh_display();
  scene_->reset_camera();
  view_->request_render();
  update_actions();
  return true;
}

void MainWindow::refresh_choices() {
  updating_choices_ = true;
  const QString key = key_box_->currentText();
  const QString show = show_box_->currentText();
  const QString color = color_box_->currentText();
  const QString transfer = transfer_box_->currentText();

  std::vector<std::string> keys;
  if (source_ && target_) {
    keys = common_alignment_spaces(*source_, *target_);
  } else if (source_ || target_) {
    keys = (source_ ? *source_ : *target_).alignment_spaces();
  }
  set_items(key_box_, keys, key);

  std::vector<std::string> shows;
  for (const auto* d : {&source_, &target_}) {
    if (!*d) continue;
    for (const std::string& s : (*d)->display_spaces()) {
      if (std::find(shows.begin(), shows.end(), s) == shows.end()) shows.push_back(s);
    }
  }
  // kSpaceFirstThree last: a named 2-D/3-D embedding is what people expect to see first.
  std::stable_partition(shows.begin(), shows.end(), [](const std::string& s) { return s != kSpaceFirstThree; });
  set_items(show_box_, shows, show);

  std::vector<std::string> colors = {kColorBySide};
  if ((source_ && source_->has_ply_colors()) || (target_ && target_->has_ply_colors())) colors.push_back(kColorByPly);
  if (outcome_ && outcome_->transfer) colors.push_back(kColorByTransferred);
  std::vector<std::string> transfers = {kNoTransfer};
  for (const auto* d : {&source_, &target_}) {
    if (!*d) continue;
    for (const std::string& c : (*d)->color_columns()) {
      if (std::find(colors.begin(), colors.end(), c) == colors.end()) colors.push_back(c);
    }
  }
  if (target_) {
    for (const std::string& c : target_->color_columns()) transfers.push_back(c);
  }
  set_items(color_box_, colors, color);
  set_items(transfer_box_, transfers, transfer);
  updating_choices_ = false;
  refresh_stack_choices();
}

void MainWindow::refresh_stack_choices() {
  updating_choices_ = true;
  const QString key = stack_key_box_->currentText();
  const QString embedding = slice_embedding_box_->currentText();
  std::vector<std::string> keys, embeddings = {kNoTransfer};
  if (source_ && target_) {
    keys = common_spatial_keys(*source_, *target_);
    for (const std::string& k : common_alignment_spaces(*source_, *target_)) {
      if (k != kSpaceX && k != kSpacePly && std::find(keys.begin(), keys.end(), k) == keys.end()) embeddings.push_back(k);
    }
  }
  set_items(stack_key_box_, keys, key);
  set_items(slice_embedding_box_, embeddings, embedding);
  const bool slices = !keys.empty();
  for (QWidget* w : std::initializer_list<QWidget*>{stack_box_, stack_key_box_, stack_spacing_box_, stack_aligned_box_,
                                                    stack_lines_box_, slice_alpha_box_, slice_embedding_box_,
                                                    slice_model_box_}) {
    w->setEnabled(slices);
  }
  if (!slices && stack_box_->isChecked()) stack_box_->setChecked(false);
  updating_choices_ = false;
  update_actions();
}

bool MainWindow::stacked() const {
  return stack_box_ != nullptr && stack_box_->isChecked() && source_ && target_ &&
         !stack_key_box_->currentText().isEmpty();
}

bool MainWindow::set_stacked(const QString& key) {
  if (key.isEmpty()) {
    stack_box_->setChecked(false);
    return true;
  }
  const int at = stack_key_box_->findText(key);
  if (at < 0) {
    QStringList items;
    for (int i = 0; i < stack_key_box_->count(); ++i) items << stack_key_box_->itemText(i);
    show_error(tr("Cannot stack the slices"),
               tr("'%1' is not an obsm entry with 2 or 3 columns in both slices (choices: %2)")
                   .arg(key, items.isEmpty() ? tr("none") : items.join(", ")));
    return false;
  }
  updating_choices_ = true;
  stack_key_box_->setCurrentIndex(at);
  stack_box_->setChecked(true);
  updating_choices_ = false;
  refresh_display();
  return true;
}

bool MainWindow::rebuild_stack() {
  const std::string key = stack_key_box_->currentText().toStdString();
  try {
    const Matrix x = source_->read_space(key);
    const Matrix y = target_->read_space(key);
    if (x.cols != y.cols) {
      throw std::invalid_argument("obsm['" + key + "'] has " + std::to_string(x.cols) + " columns in " +
                                  source_->path().filename().string() + " and " + std::to_string(y.cols) + " in " +
                                  target_->path().filename().string());
    }
    SliceStackInput in;
    in.source.assign(x.values.begin(), x.values.end());
    in.target.assign(y.values.begin(), y.values.end());
    in.dims = x.cols;
    in.spacing = stack_spacing_box_->value();
    in.max_lines = static_cast<std::size_t>(stack_lines_box_->value());
    in.use_aligned = stack_aligned_box_->isChecked();
    QString aligned_from, coupling_from;
    if (slice_alignment_ && slice_alignment_key_ == key) {
      in.source_aligned = slice_alignment_->aligned;
      aligned_from = tr("the slice alignment run here");
    } else if (source_->space_width(key + "_flashot") == x.cols) {
      const Matrix a = source_->read_space(key + "_flashot");
      in.source_aligned.assign(a.values.begin(), a.values.end());
      aligned_from = tr("obsm %1_flashot").arg(q(key));
    }
    if (slice_alignment_ && slice_alignment_key_ == key) {
      in.coupling = &slice_alignment_->coupling;
      coupling_from = tr("the slice alignment");
    } else if (loaded_coupling_) {
      in.coupling = &*loaded_coupling_;
      coupling_from = tr("the coupling file");
    } else if (outcome_ && outcome_->n == x.rows && outcome_->m == y.rows) {
      in.coupling = &outcome_->coupling;
      coupling_from = tr("the alignment in %1").arg(q(outcome_key_));
    }
    stack_ = build_slice_stack(in);
    source_show_ = stack_.source_xyz;
    target_show_ = stack_.target_xyz;
    shown_key_ = "stacked " + key;
    QString info = tr("planes %1 apart (%2 × extent %3); source at %4 coordinates")
                       .arg(stack_.gap, 0, 'g', 4)
                       .arg(in.spacing)
                       .arg(stack_.extent, 0, 'g', 4)
                       .arg(stack_.aligned ? tr("aligned (%1)").arg(aligned_from)
                                           : (in.source_aligned.empty() ? tr("raw (no aligned ones)") : tr("raw")));
    info += coupling_from.isEmpty() ? tr("; no coupling (align, align slices, or open a coupling file)")
                                    : tr("; %1 lines from %2").arg(stacked_lines()).arg(coupling_from);
    stack_info_->setText(info);
  } catch (const std::exception& e) {
    stack_ = {};
    stack_info_->setText(q(e.what()));
    show_error(tr("Cannot stack the slices"), q(e.what()));
    return false;
  }
  return true;
}

void MainWindow::refresh_display() {
  if (stacked()) {
    if (!rebuild_stack()) return;
    scene_->clear(Layer::kMapped);
    refresh_colors();
    refresh_links();
    scene_->set_oblique_view(kStackElevation, kStackAzimuth);
    view_->request_render();
    return;
  }
  stack_ = {};
  if (stack_info_ != nullptr) stack_info_->clear();
  const std::string show = show_box_->currentText().toStdString();
  const std::string key = key_box_->currentText().toStdString();
  auto read = [&](const Dataset& d) {
    const std::vector<std::string> spaces = d.display_spaces();
    // A space the other file has but this one lacks falls back to this file's first choice.
    const bool has = std::find(spaces.begin(), spaces.end(), show) != spaces.end();
    const std::string used = has ? show : spaces.front();
    const std::vector<std::string> keys = d.alignment_spaces();
    const std::string align_key =
        std::find(keys.begin(), keys.end(), key) != keys.end() ? key : keys.front();
    return d.read_display(used, align_key);
  };
  try {
    source_show_ = source_ ? read(*source_) : std::vector<float>{};
    target_show_ = target_ ? read(*target_) : std::vector<float>{};
  } catch (const std::exception& e) {
    show_error(tr("Cannot show this space"), q(e.what()));
    return;
  }
  shown_key_ = show;
  refresh_colors();
  if (source_show_.empty()) scene_->clear(Layer::kSource);
  if (target_show_.empty()) scene_->clear(Layer::kTarget);
  refresh_mapped();
  scene_->reset_camera();
  view_->request_render();
}

void MainWindow::refresh_colors() {
  const std::string choice = color_box_->currentText().toStdString();
  const std::size_t n = source_ ? source_->size() : 0;
  const std::size_t m = target_ ? target_->size() : 0;
  try {
    if (choice == kColorByPly) {
      source_colors_ = source_ && source_->has_ply_colors() ? direct_coloring(source_->ply_colors(), choice)
                                                           : solid_coloring(n, kSourceColor, "source");
      target_colors_ = target_ && target_->has_ply_colors() ? direct_coloring(target_->ply_colors(), choice)
                                                           : solid_coloring(m, kTargetColor, "target");
      legend_ = direct_coloring({}, choice);
    } else if (choice == kColorByTransferred && outcome_ && outcome_->transfer && outcome_->labels) {
      const LabelTransfer& t = *outcome_->transfer;
      const std::string title = outcome_->labels->column + " (transferred; faded = low confidence)";
      source_colors_ = confidence_coloring(t.label, t.confidence, outcome_->labels->categories, title);
      target_colors_ = categorical_coloring(outcome_->labels->codes, outcome_->labels->categories, title);
      legend_ = target_colors_;
      legend_.title = title;
    } else if (choice.empty() || choice == kColorBySide || choice == kColorByTransferred) {
      source_colors_ = solid_coloring(n, kSourceColor, "source");
      target_colors_ = solid_coloring(m, kTargetColor, "target");
      legend_ = source_colors_;
      legend_.title = "";
      legend_.legend.clear();
      if (source_) legend_.legend.push_back({"source: " + source_->path().filename().string(), kSourceColor, n});
      if (target_) legend_.legend.push_back({"target: " + target_->path().filename().string(), kTargetColor, m});
      if (outcome_) legend_.legend.push_back({"mapped source", kMappedColor, n});
      if (registration_ && !outcome_) legend_.legend.push_back({"registered source", kMappedColor, n});
    } else {
      std::optional<io::Column> a, b;
      auto has = [&](const Dataset& d) {
        const auto cols = d.color_columns();
        return std::find(cols.begin(), cols.end(), choice) != cols.end();
      };
      if (source_ && has(*source_)) a = source_->read_column(choice);
      if (target_ && has(*target_)) b = target_->read_column(choice);
      auto [first, second] = joint_coloring(a ? &*a : nullptr, n, b ? &*b : nullptr, m, choice);
      source_colors_ = std::move(first);
      target_colors_ = std::move(second);
      legend_ = source_colors_;
    }
  } catch (const std::exception& e) {
    show_error(tr("Cannot color by %1").arg(q(choice)), q(e.what()));
    return;
  }
  if (!source_show_.empty()) scene_->set_points(Layer::kSource, source_show_, source_colors_.rgb);
  if (!target_show_.empty()) scene_->set_points(Layer::kTarget, target_show_, target_colors_.rgb);
  if (scene_->point_count(Layer::kMapped) == n && n > 0) {
    std::vector<std::uint8_t> mapped = source_colors_.rgb;
    if (choice == kColorBySide || choice.empty()) {
      const QColor c = kMappedColor;
      for (std::size_t i = 0; i < n; ++i) {
        mapped[3 * i] = static_cast<std::uint8_t>(c.red());
        mapped[3 * i + 1] = static_cast<std::uint8_t>(c.green());
        mapped[3 * i + 2] = static_cast<std::uint8_t>(c.blue());
      }
    }
    scene_->set_colors(Layer::kMapped, mapped);
  }
  view_->request_render();
}

void MainWindow::refresh_mapped() {
  scene_->clear(Layer::kMapped);
  scene_->clear(Layer::kLinks);
  if (stacked()) {
    refresh_links();
    return;
  }
  if (registration_ && !outcome_ && !source_show_.empty()) {
    if (shown_key_ != registration_->key || registration_->registered.size() != source_show_.size()) {
      statusBar()->showMessage(tr("The registration was computed in %1; show %1 to see it.").arg(q(registration_->key)));
      return;
    }
    scene_->set_morph(source_show_, registration_->registered, source_colors_.rgb);
    scene_->set_morph_t(static_cast<double>(t_slider_->value()) / kSliderSteps);
    refresh_colors();
    return;
  }
  if (!outcome_ || source_show_.empty()) return;
  std::vector<float> to;
  if (shown_key_ == outcome_show_key_ && !outcome_->mapped_display.empty()) {
    to = outcome_->mapped_display;
  } else if (shown_key_ == kSpaceFirstThree && outcome_key_ == key_box_->currentText().toStdString()) {
    // The barycentric map is linear in the target's coordinates, so its first 3 columns are the mapped display.
    to.assign(outcome_->n * 3, 0.0f);
    for (std::size_t i = 0; i < outcome_->n; ++i) {
      for (std::size_t c = 0; c < std::min<std::size_t>(3, outcome_->d); ++c) {
        to[3 * i + c] = outcome_->mapped[i * outcome_->d + c];
      }
    }
  } else {
    statusBar()->showMessage(tr("The mapped source was computed in another display space; align again to map "
                                "into %1.").arg(q(shown_key_)));
    return;
  }
  scene_->set_morph(source_show_, to, source_colors_.rgb);
  scene_->set_morph_t(static_cast<double>(t_slider_->value()) / kSliderSteps);
  refresh_colors();
  refresh_links();
}

void MainWindow::refresh_links() {
  if (stacked()) {
    if (stack_.line_endpoints.empty()) {
      scene_->clear(Layer::kLinks);
    } else {
      scene_->set_links(stack_.line_endpoints, stack_.line_rgba);
    }
    view_->request_render();
    return;
  }
  if (!outcome_ || source_show_.empty() || target_show_.empty() ||
      scene_->point_count(Layer::kMapped) != outcome_->n) {
    scene_->clear(Layer::kLinks);
    return;
  }
  // Lines start where the mapped points currently are, so they shorten as t goes to 1.
  const double t = static_cast<double>(t_slider_->value()) / kSliderSteps;
  std::vector<float> from = source_show_;
  if (shown_key_ == outcome_show_key_ && !outcome_->mapped_display.empty()) {
    for (std::size_t i = 0; i < from.size(); ++i) {
      from[i] = static_cast<float>(from[i] + t * (outcome_->mapped_display[i] - from[i]));
    }
  }
  try {
    const CouplingLines lines =
        coupling_lines(outcome_->coupling, from, target_show_, static_cast<std::size_t>(lines_box_->value()));
    scene_->set_links(lines.endpoints, lines.rgba);
  } catch (const std::exception& e) {
    scene_->clear(Layer::kLinks);
    statusBar()->showMessage(q(e.what()));
  }
  view_->request_render();
}

AlignParameters MainWindow::parameters() const {
  AlignParameters p;
  p.blur = blur_box_->value();
  p.scaling = scaling_box_->value();
  p.reach = reach_box_->value();
  p.tolerance = tolerance_box_->value();
  p.max_iterations = iterations_box_->value();
  p.scheme = scheme_box_->currentText().toStdString();
  p.backend = backend_box_->currentText().toStdString();
  p.top_k = static_cast<std::size_t>(top_k_box_->value());
  p.max_lines = static_cast<std::size_t>(lines_box_->value());
  const QString transfer = transfer_box_->currentText();
  if (transfer != kNoTransfer) p.transfer_column = transfer.toStdString();
  return p;
}

void MainWindow::align() {
  if (busy()) return;
  if (!source_ || !target_) {
    show_error(tr("Cannot align"), tr("Open a source and a target first."));
    return;
  }
  auto input = std::make_shared<AlignmentInput>();
  const std::string key = key_box_->currentText().toStdString();
  try {
    input->parameters = parameters();
    const std::vector<std::string> problems = validate(input->parameters);
    if (!problems.empty()) throw std::invalid_argument(problems.front());
    if (key.empty()) {
      throw std::invalid_argument(source_->path().filename().string() + " and " +
                                  target_->path().filename().string() + " share no space to align in");
    }
    auto [x, y] = read_alignment_pair(*source_, *target_, key);
    input->source = std::move(x);
    input->target = std::move(y);
    input->source_display = source_show_;
    input->target_display = target_show_;
    if (!input->parameters.transfer_column.empty()) {
      input->target_labels = target_->read_labels(input->parameters.transfer_column);
    }
  } catch (const std::exception& e) {
    show_error(tr("Cannot align"), q(e.what()));
    return;
  }
  outcome_key_ = key;
  outcome_show_key_ = shown_key_;
  plot_->clear();
  summary_->clear();
  progress_bar_->setRange(0, input->parameters.max_iterations);
  progress_bar_->setValue(0);
  progress_label_->setText(tr("solving %1 × %2 points in %3 (%4-d)…")
                               .arg(input->source.rows)
                               .arg(input->target.rows)
                               .arg(q(key))
                               .arg(input->source.cols));
  worker_->start(std::move(input));
  update_actions();
}

void MainWindow::on_progress(int stage, int stage_count, int iteration, int max_iterations, double error,
                             double epsilon) {
  progress_bar_->setRange(0, std::max(1, max_iterations));
  progress_bar_->setValue(std::min(iteration, max_iterations));
  progress_label_->setText(tr("stage %1/%2 · ε %3 · iteration %4 · marginal error %5")
                               .arg(stage + 1)
                               .arg(stage_count)
                               .arg(epsilon, 0, 'g', 3)
                               .arg(iteration)
                               .arg(error, 0, 'e', 2));
  plot_->add_check({iteration, epsilon, error});
}

void MainWindow::on_finished(std::shared_ptr<const AlignmentOutcome> outcome) {
  if (outcome->result.reason == StopReason::kNonFinite) {
    // Potentials that became NaN/Inf map nothing: a failure with the engine's message, not a result to draw.
    on_failed(q(outcome->result.message) + tr(" (try a larger blur)"));
    return;
  }
  outcome_ = std::move(outcome);
  registration_.reset();
  reg_text_->clear();
  const SolveResult& r = outcome_->result;
  plot_->set_checks(r.checks, outcome_->options.tolerance);
  progress_bar_->setValue(progress_bar_->maximum());
  progress_label_->setText(r.converged ? tr("converged in %1 iterations (%2 s)").arg(r.iterations).arg(r.seconds, 0, 'f', 2)
                                       : tr("stopped: %1").arg(q(r.message.empty() ? to_string(r.reason) : r.message)));
  QString summary = q(workflow::solve_summary(r));
  summary += tr("\nblur %1 (diameter %2), %3 × %4 points, %5-d")
                 .arg(std::sqrt(r.epsilon), 0, 'g', 4)
                 .arg(outcome_->diameter, 0, 'g', 4)
                 .arg(outcome_->n)
                 .arg(outcome_->m)
                 .arg(outcome_->d);
  if (outcome_->transfer && outcome_->labels) {
    const LabelTransfer& t = *outcome_->transfer;
    double confidence = 0;
    std::vector<std::size_t> counts(outcome_->labels->categories.size(), 0);
    for (std::size_t i = 0; i < t.points; ++i) {
      confidence += t.confidence[i];
      if (t.label[i] >= 0) ++counts[static_cast<std::size_t>(t.label[i])];
    }
    summary += tr("\ntransferred '%1' to %2 source points, mean confidence %3")
                   .arg(q(outcome_->labels->column))
                   .arg(t.points)
                   .arg(t.points ? confidence / static_cast<double>(t.points) : 0.0, 0, 'f', 3);
    for (std::size_t k = 0; k < counts.size(); ++k) {
      summary += QStringLiteral("\n  %1: %2").arg(q(outcome_->labels->categories[k])).arg(counts[k]);
    }
  }
  summary_->setPlainText(summary);
  statusBar()->showMessage(tr("Aligned. File ▸ Save writes the aligned data, the coupling, the report."));
  refresh_choices();
  if (outcome_->transfer && (headless_ ? headless_->color_by.isEmpty() : true)) {
    color_box_->setCurrentText(kColorByTransferred);
  }
  if (stacked()) {
    refresh_display();  // the alignment's coupling becomes the stack's lines when no other is there
  } else {
    refresh_mapped();
  }
  view_->request_render();
  update_actions();
  if (headless_) QTimer::singleShot(0, this, &MainWindow::finish_headless);
}

void MainWindow::on_cancelled() {
  progress_label_->setText(tr("cancelled"));
  progress_bar_->setValue(0);
  update_actions();
  if (headless_) quit_headless(1, tr("the alignment was cancelled"));
}

void MainWindow::on_failed(const QString& message) {
  progress_label_->setText(tr("failed"));
  progress_bar_->setValue(0);
  update_actions();
  show_error(tr("Alignment failed"), message);
}

bool MainWindow::busy() const {
  return (worker_ != nullptr && worker_->busy()) || (task_ != nullptr && task_->busy());
}

void MainWindow::update_actions() {
  const bool busy = this->busy();
  const bool done = outcome_ != nullptr;
  align_button_->setEnabled(!busy && source_ && target_);
  if (register_button_ != nullptr) register_button_->setEnabled(!busy && source_ && target_);
  if (save_registered_ != nullptr) save_registered_->setEnabled(registration_ != nullptr && !busy);
  if (align_slices_button_ != nullptr) align_slices_button_->setEnabled(!busy && stack_key_box_->count() > 0);
  cancel_button_->setEnabled(busy);
  save_aligned_->setEnabled(done && !busy);
  save_coupling_->setEnabled(done && !busy);
  save_report_->setEnabled(done && !busy);
}

void MainWindow::save_aligned_dialog() {
  if (!outcome_ || !source_ || !target_) return;
  const bool ply = source_->kind() == workflow::FileKind::kPly;
  const QString path = QFileDialog::getSaveFileName(this, tr("Save aligned data"), {},
                                                    ply ? tr("PLY (*.ply)") : tr("AnnData (*.h5ad *.zarr *.zarr.zip)"));
  if (path.isEmpty()) return;
  try {
    save_aligned(*source_, *target_, outcome_key_, *outcome_, path.toStdString());
    statusBar()->showMessage(tr("wrote %1").arg(path));
  } catch (const std::exception& e) {
    show_error(tr("Cannot save"), q(e.what()));
  }
}

void MainWindow::save_coupling_dialog() {
  if (!outcome_ || !source_ || !target_) return;
  const QString path = QFileDialog::getSaveFileName(this, tr("Save coupling"), {}, tr("AnnData (*.h5ad *.zarr *.zarr.zip)"));
  if (path.isEmpty()) return;
  try {
    save_coupling(*source_, *target_, *outcome_, path.toStdString());
    statusBar()->showMessage(tr("wrote %1").arg(path));
  } catch (const std::exception& e) {
    show_error(tr("Cannot save"), q(e.what()));
  }
}

void MainWindow::save_report_dialog() {
  if (!outcome_ || !source_ || !target_) return;
  const QString path = QFileDialog::getSaveFileName(this, tr("Save report"), {}, tr("JSON (*.json)"));
  if (path.isEmpty()) return;
  try {
    save_report(*source_, *target_, outcome_key_, *outcome_, path.toStdString());
    statusBar()->showMessage(tr("wrote %1").arg(path));
  } catch (const std::exception& e) {
    show_error(tr("Cannot save"), q(e.what()));
  }
}

void MainWindow::save_screenshot_dialog() {
  const QString path = QFileDialog::getSaveFileName(this, tr("Save screenshot"), {}, tr("PNG (*.png)"));
  if (path.isEmpty()) return;
  try {
    save_image(view_->composed_image(), path.toStdString());
    statusBar()->showMessage(tr("wrote %1").arg(path));
  } catch (const std::exception& e) {
    show_error(tr("Cannot save"), q(e.what()));
  }
}

void MainWindow::register_clouds() {
  if (busy()) return;
  if (!source_ || !target_) {
    show_error(tr("Cannot register"), tr("Open a source and a target first."));
    return;
  }
  RegistrationParameters p;
  p.model = reg_model_box_->currentText().toStdString();
  p.blur = reg_blur_box_->value();
  p.reach = reg_reach_box_->value();
  p.max_rounds = reg_rounds_box_->value();
  p.kernel_width = reg_kernel_box_->value();
  p.control_points = static_cast<std::size_t>(reg_control_box_->value());
  p.backend = backend_box_->currentText().toStdString();
  p.multiscale = reg_multiscale_box_->currentText().toStdString();
  const std::string key = key_box_->currentText().toStdString();
  std::shared_ptr<const RegistrationInput> input;
  try {
    const std::vector<std::string> problems = validate(p);
    if (!problems.empty()) throw std::invalid_argument(problems.front());
    if (key.empty()) {
      throw std::invalid_argument(source_->path().filename().string() + " and " +
                                  target_->path().filename().string() + " share no space to register in");
    }
    input = std::make_shared<const RegistrationInput>(registration_input(*source_, *target_, key, p));
  } catch (const std::exception& e) {
    show_error(tr("Cannot register"), q(e.what()));
    return;
  }
  // The registration is drawn in its own space: show it there (PLY: xyz; .h5ad: the 3-column obsm entry).
  if (!stacked() && shown_key_ != key) {
    const int at = show_box_->findText(q(key));
    if (at >= 0) show_box_->setCurrentIndex(at);  // refresh_display follows
  }
  progress_bar_->setRange(0, p.max_rounds);
  progress_bar_->setValue(0);
  progress_label_->setText(tr("registering %1 onto %2 points in %3 (%4, multiscale %5)…")
                               .arg(input->source.size() / 3)
                               .arg(input->target.size() / 3)
                               .arg(q(key))
                               .arg(q(p.model))
                               .arg(q(p.multiscale)));
  task_kind_ = Task::kRegistration;
  task_->start(registration_job(input));  // progress at every round and every check of its solve
  update_actions();
}

void MainWindow::align_slices() {
  if (busy()) return;
  if (!source_ || !target_ || stack_key_box_->count() == 0) {
    show_error(tr("Cannot align the slices"), tr("Open two .h5ad slices with 2-D or 3-D coordinates first."));
    return;
  }
  const std::string key = stack_key_box_->currentText().toStdString();
  const std::string embedding = slice_embedding_box_->currentText().toStdString();
  SliceAlignParameters p;
  p.alpha = slice_alpha_box_->value();
  p.model = slice_model_box_->currentText().toStdString();
  p.top_k = static_cast<std::size_t>(top_k_box_->value());
  p.backend = backend_box_->currentText().toStdString();
  struct Data {
    Matrix x, y, u, v;
    bool embedded = false;
  };
  auto data = std::make_shared<Data>();
  try {
    data->x = source_->read_space(key);
    data->y = target_->read_space(key);
    if (embedding != kNoTransfer && !embedding.empty()) {
      std::tie(data->u, data->v) = read_alignment_pair(*source_, *target_, embedding);
      data->embedded = true;
    } else {
      p.alpha = 1;  // coordinates only
    }
  } catch (const std::exception& e) {
    show_error(tr("Cannot align the slices"), q(e.what()));
    return;
  }
  slice_alignment_key_ = key;
  progress_bar_->setRange(0, 100);
  progress_bar_->setValue(0);
  progress_label_->setText(tr("aligning the slices by fused Gromov–Wasserstein in %1%2…")
                               .arg(q(key))
                               .arg(data->embedded ? tr(" + %1, alpha %2").arg(q(embedding)).arg(p.alpha) : QString()));
  task_kind_ = Task::kSlices;
  task_->start([data, p](const TaskWorker::Report& report) -> std::shared_ptr<const void> {
    auto outcome = std::make_shared<SliceAlignmentOutcome>(run_slice_alignment(
        data->x, data->y, data->embedded ? &data->u : nullptr, data->embedded ? &data->v : nullptr, p,
        [&](int outer, int max_outer, double objective) {
          return report(QStringLiteral("outer iteration %1/%2 · objective %3").arg(outer).arg(max_outer).arg(objective, 0, 'g', 5),
                        outer, max_outer);
        }));
    if (outcome->aligned.empty()) return nullptr;
    return outcome;
  });
  update_actions();
}

bool MainWindow::load_coupling(const QString& path) {
  if (!source_ || !target_) {
    show_error(tr("Cannot open the coupling"), tr("Open the two slices first."));
    return false;
  }
  try {
    loaded_coupling_ = read_coupling(path.toStdString(), source_->size(), target_->size());
  } catch (const std::exception& e) {
    show_error(tr("Cannot open %1").arg(QFileInfo(path).fileName()), q(e.what()));
    return false;
  }
  statusBar()->showMessage(tr("coupling: %1 source cells, %2 entries each at most").arg(loaded_coupling_->rows).arg(loaded_coupling_->k));
  if (stacked()) refresh_display();
  return true;
}

void MainWindow::on_task_progress(const QString& text, int value, int maximum) {
  progress_bar_->setRange(0, std::max(1, maximum));
  progress_bar_->setValue(std::min(value, maximum));
  progress_label_->setText(text);
}

void MainWindow::on_task_finished(std::shared_ptr<const void> result) {
  const Task kind = task_kind_;
  task_kind_ = Task::kNone;
  progress_bar_->setValue(progress_bar_->maximum());
  if (kind == Task::kRegistration) {
    registration_ = std::static_pointer_cast<const RegistrationOutcome>(result);
    outcome_.reset();  // one result drawn at a time: the registered cloud replaces the barycentric map
    summary_->clear();
    plot_->clear();
    reg_text_->setPlainText(q(describe(*registration_)));
    progress_label_->setText(tr("registered (%1): rms %2, %3 rounds, %4 s")
                                 .arg(q(registration_->model))
                                 .arg(registration_->rms, 0, 'g', 4)
                                 .arg(registration_->rounds.size())
                                 .arg(registration_->seconds, 0, 'f', 2));
    statusBar()->showMessage(tr("Registered. File ▸ Save registered cloud writes it."));
    refresh_choices();
    refresh_mapped();
  } else if (kind == Task::kSlices) {
    slice_alignment_ = std::static_pointer_cast<const SliceAlignmentOutcome>(result);
    const SliceAlignmentOutcome& o = *slice_alignment_;
    progress_label_->setText(tr("slices aligned (%1): %2 · %3 outer iterations · rms %4%5")
                                 .arg(q(o.model))
                                 .arg(o.converged ? tr("converged") : tr("NOT converged"))
                                 .arg(o.outer_iterations)
                                 .arg(o.rms, 0, 'g', 4)
                                 .arg(o.model == "rigid" ? tr(" · rotation %1°").arg(o.rotation_degrees, 0, 'f', 2) : QString()));
    if (!stacked()) {
      stack_box_->setChecked(true);  // refresh_display follows
    } else {
      refresh_display();
    }
  }
  view_->request_render();
  update_actions();
  if (headless_) QTimer::singleShot(0, this, &MainWindow::finish_headless);
}

void MainWindow::on_task_cancelled() {
  task_kind_ = Task::kNone;
  progress_label_->setText(tr("cancelled"));
  progress_bar_->setValue(0);
  update_actions();
  if (headless_) quit_headless(1, tr("the run was cancelled"));
}

void MainWindow::on_task_failed(const QString& message) {
  const Task kind = task_kind_;
  task_kind_ = Task::kNone;
  progress_label_->setText(tr("failed"));
  progress_bar_->setValue(0);
  update_actions();
  show_error(kind == Task::kSlices ? tr("Slice alignment failed") : tr("Registration failed"), message);
}

void MainWindow::save_registered_dialog() {
  if (!registration_ || !source_ || !target_) return;
  const bool ply = source_->kind() == workflow::FileKind::kPly;
  const QString path = QFileDialog::getSaveFileName(this, tr("Save registered cloud"), {},
                                                    ply ? tr("PLY (*.ply)") : tr("AnnData (*.h5ad)"));
  if (path.isEmpty()) return;
  try {
    save_registered(*source_, *target_, *registration_, path.toStdString());
    statusBar()->showMessage(tr("wrote %1").arg(path));
  } catch (const std::exception& e) {
    show_error(tr("Cannot save"), q(e.what()));
  }
}

QString MainWindow::caption() const {
  QStringList parts;
  if (!shown_key_.empty()) parts << (stacked() ? q(shown_key_) : tr("shown in %1").arg(q(shown_key_)));
  if (registration_ && !outcome_ && scene_->point_count(Layer::kMapped) > 0) {
    parts << tr("registered (%1)").arg(q(registration_->model));
  }
  if (outcome_ && scene_->point_count(Layer::kMapped) > 0) {
    parts << tr("t = %1").arg(static_cast<double>(t_slider_->value()) / kSliderSteps, 0, 'f', 2);
  }
  std::size_t points = 0;
  for (Layer layer : {Layer::kSource, Layer::kTarget, Layer::kMapped}) points += scene_->point_count(layer);
  if (points > 0) parts << tr("%1 points").arg(points);
  if (view_ != nullptr && view_->last_frame_ms() > 0) parts << tr("%1 ms/frame").arg(view_->last_frame_ms(), 0, 'f', 0);
  return parts.join(QStringLiteral(" · "));
}

void MainWindow::show_error(const QString& title, const QString& message) {
  if (headless_) {
    quit_headless(1, title + ": " + message);
    return;
  }
  // Window-modal but not blocking: the event loop (and a running solve's progress) keeps going behind it.
  auto* box = new QMessageBox(QMessageBox::Critical, title, message, QMessageBox::Ok, this);
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->setObjectName("error");
  box->open();
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  if (!event->mimeData()->hasUrls()) return;
  for (const QUrl& url : event->mimeData()->urls()) {
    const QString suffix = QFileInfo(url.toLocalFile()).suffix().toLower();
    if (suffix != "h5ad" && suffix != "ply") return;
  }
  event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
  const QList<QUrl> urls = event->mimeData()->urls();
  // Two files: source then target. One file: the source if none is open yet, else the target.
  if (urls.size() >= 2) {
    if (open_source(urls[0].toLocalFile())) open_target(urls[1].toLocalFile());
  } else if (urls.size() == 1) {
    if (!source_) {
      open_source(urls[0].toLocalFile());
    } else {
      open_target(urls[0].toLocalFile());
    }
  }
  event->acceptProposedAction();
}

void MainWindow::closeEvent(QCloseEvent* event) {
  if (worker_->busy()) {
    worker_->cancel();
    worker_->wait();
  }
  if (task_->busy()) {
    task_->cancel();
    task_->wait();
  }
  event->accept();
}

void MainWindow::apply_command_line(const CommandLine& c) {
  if (c.headless()) headless_ = c;
  if (!c.source.isEmpty() && !open_source(c.source)) return;
  if (!c.target.isEmpty() && !open_target(c.target)) return;
  updating_choices_ = true;
  auto choose = [&](QComboBox* box, const QString& text, const char* option) {
    if (text.isEmpty()) return true;
    const int at = box->findText(text);
    if (at < 0) {
      QStringList items;
      for (int i = 0; i < box->count(); ++i) items << box->itemText(i);
      updating_choices_ = false;
      show_error(tr("Bad %1").arg(option), tr("'%1' is not offered (choices: %2)").arg(text, items.join(", ")));
      return false;
    }
    box->setCurrentIndex(at);
    return true;
  };
  QString show = c.show == "first 3" ? QString(kSpaceFirstThree) : c.show;
  if (!choose(key_box_, c.key, "--key") || !choose(show_box_, show, "--show") ||
      !choose(transfer_box_, c.transfer, "--transfer-labels") || !choose(backend_box_, c.backend, "--backend")) {
    return;
  }
  if (!c.color_by.isEmpty() && c.color_by != kColorByTransferred && !choose(color_box_, c.color_by, "--color-by")) {
    return;
  }
  updating_choices_ = false;
  if (c.blur) blur_box_->setValue(*c.blur);
  refresh_display();
  if (!c.stack.isEmpty()) {
    if (!c.coupling.isEmpty() && !load_coupling(c.coupling)) return;
    if (!set_stacked(c.stack)) return;
  }
  if (!c.register_model.isEmpty()) {
    reg_model_box_->setCurrentText(c.register_model);
    if (!c.multiscale.isEmpty()) reg_multiscale_box_->setCurrentText(c.multiscale);
    register_clouds();
    if (!task_->busy() && headless_) quit_headless(1, tr("the registration did not start"));
    return;
  }
  if (c.align) {
    align();
    if (!worker_->busy() && headless_) quit_headless(1, tr("the alignment did not start"));
    return;
  }
  if (headless_) QTimer::singleShot(0, this, &MainWindow::finish_headless);
}

void MainWindow::finish_headless() {
  if (!headless_) return;
  if (headless_->color_by == kColorByTransferred) {
    const int at = color_box_->findText(kColorByTransferred);
    if (at < 0) {
      quit_headless(1, tr("--color-by 'transferred labels' needs --transfer-labels COL"));
      return;
    }
    color_box_->setCurrentIndex(at);
  }
  try {
    view_->render_now();
    save_image(headless_->whole_window ? grab().toImage() : view_->composed_image(),
               headless_->screenshot.toStdString());
  } catch (const std::exception& e) {
    quit_headless(1, q(e.what()));
    return;
  }
  std::fprintf(stderr, "flashot-gui: wrote %s (%d×%d, %.0f ms per frame)\n",
               headless_->screenshot.toLocal8Bit().constData(), view_->frame().width(), view_->frame().height(),
               view_->last_frame_ms());
  quit_headless(0, {});
}

void MainWindow::quit_headless(int code, const QString& message) {
  if (!message.isEmpty()) std::fprintf(stderr, "flashot-gui: %s\n", message.toLocal8Bit().constData());
  headless_.reset();
  // exit() from inside a slot ends the loop once control returns to it; if the loop is not running yet
  // (apply_command_line before exec), the queued call still reaches it.
  QMetaObject::invokeMethod(qApp, [code] { QCoreApplication::exit(code); }, Qt::QueuedConnection);
}

}  // namespace flashot::gui
