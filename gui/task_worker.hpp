#pragma once
// Runs one job off the UI thread (a registration, a slice alignment, the solve behind AlignWorker):
// progress is queued to the thread that owns the worker, Cancel sets a flag the job's progress callback reads, and no
// exception crosses the event loop (a throw becomes failed(message)).

#include <QObject>
#include <QString>
#include <QThread>

#include <atomic>
#include <exception>
#include <functional>
#include <memory>

namespace flashot::gui {

class TaskWorker : public QObject {
  Q_OBJECT

 public:
  /// Posts progress (text, value out of maximum) and answers whether the job may go on (false after cancel()).
  using Report = std::function<bool(const QString& text, int value, int maximum)>;
  /// The job: its result, or null when it stopped because it was cancelled.
  using Job = std::function<std::shared_ptr<const void>(const Report& report)>;

  explicit TaskWorker(QObject* parent = nullptr);
  /// Cancels a running job and waits for its thread.
  ~TaskWorker() override;

  /// Starts a job; returns false (and does nothing) when one is already running.
  bool start(Job job);
  void cancel() { cancel_requested_ = true; }
  /// Whether cancel() was called since the running job started (for jobs that report progress their own way).
  bool cancel_requested() const { return cancel_requested_.load(); }
  bool busy() const { return thread_ != nullptr; }
  /// Blocks until the running job (if any) has ended; its signal is then delivered by the event loop.
  void wait();

 signals:
  void progress(QString text, int value, int maximum);
  void finished(std::shared_ptr<const void> result);
  void cancelled();
  void failed(QString message);

 private:
  void on_thread_finished();

  QThread* thread_ = nullptr;
  std::atomic<bool> cancel_requested_{false};
  std::shared_ptr<const void> result_;
  std::exception_ptr error_;
};

}  // namespace flashot::gui

Q_DECLARE_METATYPE(std::shared_ptr<const void>)
