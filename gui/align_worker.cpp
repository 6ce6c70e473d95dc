#include "align_worker.hpp"

#include <stdexcept>

namespace flashot::gui {

AlignWorker::AlignWorker(QObject* parent) : QObject(parent) {
  qRegisterMetaType<std::shared_ptr<const AlignmentOutcome>>();
}

AlignWorker::~AlignWorker() {
  if (thread_ != nullptr) {
    cancel_requested_ = true;
    thread_->wait();
    delete thread_;
  }
}

bool AlignWorker::start(std::shared_ptr<const AlignmentInput> input) {
  if (thread_ != nullptr) return false;
  cancel_requested_ = false;
  outcome_.reset();
  error_ = nullptr;
  thread_ = QThread::create([this, input = std::move(input)] {
    try {
      auto outcome = std::make_shared<AlignmentOutcome>(run_alignment(*input, [this](const Progress& p) {
        emit progress(p.stage, p.stage_count, p.iteration, p.max_iterations, p.marginal_error, p.epsilon);
        return !cancel_requested_.load();
      }));
      outcome_ = std::move(outcome);
    } catch (...) {
      error_ = std::current_exception();
    }
  });
  connect(thread_, &QThread::finished, this, &AlignWorker::on_thread_finished);
  thread_->start();
  return true;
}

void AlignWorker::cancel() { cancel_requested_ = true; }

void AlignWorker::wait() {
  if (thread_ != nullptr) thread_->wait();
}

void AlignWorker::on_thread_finished() {
  QThread* done = thread_;
  thread_ = nullptr;
  done->deleteLater();
  if (error_) {
    QString message;
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      message = QString::fromStdString(e.what());
    } catch (...) {
      message = QStringLiteral("the solve failed with an unknown error");
    }
    error_ = nullptr;
    emit failed(message);
    return;
  }
  std::shared_ptr<const AlignmentOutcome> outcome = std::move(outcome_);
  if (!outcome || outcome->cancelled()) {
    emit cancelled();
    return;
  }
  emit finished(outcome);
}

}  // namespace flashot::gui
