#pragma once
// Runs run_alignment() off the UI thread, on a TaskWorker (task_worker.hpp: the thread, cancel flag and error
// handling). Signals arrive on the thread that owns the worker (the UI thread); no exception crosses the event
// loop: a throw in the solve becomes failed(message).

#include <QObject>
#include <QString>

#include <memory>

#include "alignment.hpp"
#include "task_worker.hpp"

namespace flashot::gui {

class AlignWorker : public QObject {
  Q_OBJECT

 public:
  explicit AlignWorker(QObject* parent = nullptr);
  /// Cancels a running solve and waits for its thread.
  ~AlignWorker() override;

  /// Starts a solve; returns false (and does nothing) when one is already running.
  bool start(std::shared_ptr<const AlignmentInput> input);
  /// Asks the running solve to stop at its next check; cancelled() follows.
  void cancel() { task_->cancel(); }
  bool busy() const { return task_->busy(); }
  /// Blocks until the running solve (if any) has ended; its signal is then delivered by the event loop.
  void wait() { task_->wait(); }

 signals:
  /// At every marginal-error check (queued from the solver thread).
  void progress(int stage, int stage_count, int iteration, int max_iterations, double marginal_error,
                double epsilon);
  void finished(std::shared_ptr<const flashot::gui::AlignmentOutcome> outcome);
  void cancelled();
  void failed(QString message);

 private:
  TaskWorker* task_;  ///< a child of this worker
};

}  // namespace flashot::gui

Q_DECLARE_METATYPE(std::shared_ptr<const flashot::gui::AlignmentOutcome>)
