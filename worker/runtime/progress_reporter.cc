#include "worker/runtime/progress_reporter.h"

#include <cmath>

#include <utility>

namespace pshard::worker {

bool ProgressSaysStop(
    const absl::StatusOr<v1::ReportProgressResponse>& response) {
  if (response.ok()) return response->abort();
  return response.status().code() == absl::StatusCode::kNotFound ||
         response.status().code() == absl::StatusCode::kFailedPrecondition;
}

void SetGradNorm(std::optional<double> grad_norm, v1::JobProgress& progress) {
  if (grad_norm.has_value() && std::isfinite(*grad_norm)) {
    progress.set_grad_norm(*grad_norm);
  }
}

ProgressReporter::ProgressReporter(ControlPlane* control,
                                   ProgressSource source,
                                   absl::Duration rpc_timeout,
                                   std::function<void()> on_stop,
                                   const Clock& clock)
    : control_(control),
      source_(std::move(source)),
      rpc_timeout_(rpc_timeout),
      on_stop_(std::move(on_stop)),
      clock_(clock),
      thread_([this] { Loop(); }) {}

ProgressReporter::~ProgressReporter() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void ProgressReporter::Post(const v1::JobProgress& progress) {
  v1::ReportProgressRequest request;
  request.set_job_id(source_.job_id);
  request.set_epoch(source_.epoch);
  request.set_rank(source_.rank);
  request.set_worker_id(source_.worker_id);
  *request.mutable_progress() = progress;
  absl::MutexLock lock(&mu_);
  pending_ = std::move(request);
}

bool ProgressReporter::Flush(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !pending_.has_value() && !sending_;
  };
  return clock_.AwaitWithTimeout(mu_, absl::Condition(&idle), timeout);
}

void ProgressReporter::Loop() {
  while (true) {
    v1::ReportProgressRequest request;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || pending_.has_value();
      };
      mu_.Await(absl::Condition(&ready));
      // Stopping still sends what was posted: the last step's progress.
      if (!pending_.has_value()) return;
      request = *std::move(pending_);
      pending_.reset();
      sending_ = true;
    }
    if (ProgressSaysStop(control_->ReportProgress(request, rpc_timeout_))) {
      on_stop_();
    }
    absl::MutexLock lock(&mu_);
    sending_ = false;
  }
}

}  // namespace pshard::worker
