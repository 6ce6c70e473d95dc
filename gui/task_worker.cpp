#include "task_worker.hpp"

#include <stdexcept>

namespace flashot::gui {

TaskWorker::TaskWorker(QObject* parent) : QObject(parent) { qRegisterMetaType<std::shared_ptr<const void>>(); }

TaskWorker::~TaskWorker() {
  if (thread_ != nullptr) {
    cancel_requested_ = true;
    thread_->wait();
    delete thread_;
  }
}

bool TaskWorker::start(Job job) {
  if (thread_ != nullptr) return false;
  cancel_requested_ = false;
  result_.reset();
  error_ = nullptr;
  thread_ = QThread::create([this, job = std::move(job)] {
    try {
      result_ = job([this](const QString& text, int value, int maximum) {
        emit progress(text, value, maximum);
        return !cancel_requested_.load();
      });
    } catch (...) {
      error_ = std::current_exception();
    }
  });
  connect(thread_, &QThread::finished, this, &TaskWorker::on_thread_finished);
  thread_->start();
  return true;
}

void TaskWorker::wait() {
  if (thread_ != nullptr) thread_->wait();
}

void TaskWorker::on_thread_finished() {
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
      message = QStringLiteral("the job failed with an unknown error");
    }
    error_ = nullptr;
    emit failed(message);
    return;
  }
  std::shared_ptr<const void> result = std::move(result_);
  if (!result || cancel_requested_) {
    emit cancelled();
    return;
  }
  emit finished(result);
}

}  // namespace flashot::gui
