#include "align_worker.hpp"

namespace flashot::gui {

AlignWorker::AlignWorker(QObject* parent) : QObject(parent), task_(new TaskWorker(this)) {
  qRegisterMetaType<std::shared_ptr<const AlignmentOutcome>>();
  connect(task_, &TaskWorker::finished, this, [this](std::shared_ptr<const void> result) {
    emit finished(std::static_pointer_cast<const AlignmentOutcome>(result));
  });
  connect(task_, &TaskWorker::cancelled, this, &AlignWorker::cancelled);
  connect(task_, &TaskWorker::failed, this, &AlignWorker::failed);
}

AlignWorker::~AlignWorker() {
  // The job emits this worker's progress signal: it must end before this object starts to go away (the child
  // TaskWorker's own destructor would wait only after it).
  task_->cancel();
  task_->wait();
}

bool AlignWorker::start(std::shared_ptr<const AlignmentInput> input) {
  return task_->start([this, input = std::move(input)](const TaskWorker::Report&) -> std::shared_ptr<const void> {
    auto outcome = std::make_shared<const AlignmentOutcome>(run_alignment(*input, [this](const Progress& p) {
      emit progress(p.stage, p.stage_count, p.iteration, p.max_iterations, p.marginal_error, p.epsilon);
      return !task_->cancel_requested();
    }));
    if (outcome->cancelled()) return nullptr;  // TaskWorker answers a null result with cancelled()
    return outcome;
  });
}

}  // namespace flashot::gui
