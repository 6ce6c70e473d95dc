#pragma once
// The marginal error at every check of a solve, on a log scale, drawn with QPainter; ε stages are shaded
// alternately and the tolerance is a dashed line.

#include <QWidget>

#include <vector>

#include "flashot/flashot.hpp"

namespace flashot::gui {

class ConvergencePlot : public QWidget {
  Q_OBJECT

 public:
  explicit ConvergencePlot(QWidget* parent = nullptr);
  void clear();
  /// One check as it arrives during a solve.
  void add_check(const MarginalCheck& check);
  /// The checks of a finished solve (replaces what was added live).
  void set_checks(std::vector<MarginalCheck> checks, double tolerance);
  const std::vector<MarginalCheck>& checks() const { return checks_; }
  QSize sizeHint() const override { return {320, 180}; }

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  std::vector<MarginalCheck> checks_;
  double tolerance_ = 0;
};

}  // namespace flashot::gui
