#include "worker/runtime/intercepting_control_plane.h"

#include <utility>

namespace pshard::worker {

absl::StatusOr<v1::RegisterWorkerResponse>
InterceptingControlPlane::RegisterWorker(
    const v1::RegisterWorkerRequest& request, absl::Duration deadline) {
  {
    absl::MutexLock lock(&mu_);
    ++registrations_;
  }
  return next_->RegisterWorker(request, deadline);
}

absl::StatusOr<v1::HeartbeatResponse> InterceptingControlPlane::Heartbeat(
    const v1::HeartbeatRequest& request, absl::Duration deadline) {
  {
    absl::MutexLock lock(&mu_);
    ++heartbeats_;
    heartbeat_log_.push_back(request);
  }
  absl::StatusOr<v1::HeartbeatResponse> response =
      next_->Heartbeat(request, deadline);
  if (!response.ok()) return response;
  bool has_run_job = false;
  for (const v1::Directive& d : response->directives()) {
    has_run_job |= d.has_run_job();
  }
  absl::MutexLock lock(&mu_);
  if (has_run_job && append_to_run_job_.has_value()) {
    *response->add_directives() = *std::move(append_to_run_job_);
    append_to_run_job_.reset();
  }
  return response;
}

absl::Status InterceptingControlPlane::KvPut(const v1::KvPutRequest& request,
                                             absl::Duration deadline) {
  return next_->KvPut(request, deadline);
}

absl::StatusOr<v1::KvGetResponse> InterceptingControlPlane::KvGet(
    const v1::KvGetRequest& request, absl::Duration deadline) {
  {
    absl::MutexLock lock(&mu_);
    ++kv_gets_;
  }
  return next_->KvGet(request, deadline);
}

absl::StatusOr<v1::KvGetManyResponse> InterceptingControlPlane::KvGetMany(
    const v1::KvGetManyRequest& request, absl::Duration deadline) {
  {
    absl::MutexLock lock(&mu_);
    ++kv_gets_;
  }
  return next_->KvGetMany(request, deadline);
}

absl::StatusOr<v1::ReportBucketsResponse>
InterceptingControlPlane::ReportBuckets(const v1::ReportBucketsRequest& request,
                                        absl::Duration deadline) {
  return next_->ReportBuckets(request, deadline);
}

absl::StatusOr<v1::ShardAssignment> InterceptingControlPlane::GetAssignment(
    const v1::GetAssignmentRequest& request, absl::Duration deadline) {
  absl::StatusOr<v1::ShardAssignment> assignment =
      next_->GetAssignment(request, deadline);
  if (!assignment.ok()) return assignment;
  absl::MutexLock lock(&mu_);
  assignment->set_epoch(assignment->epoch() + epoch_offset_);
  return assignment;
}

absl::StatusOr<v1::ReportProgressResponse>
InterceptingControlPlane::ReportProgress(
    const v1::ReportProgressRequest& request, absl::Duration deadline) {
  {
    absl::MutexLock lock(&mu_);
    ++progress_count_;
    progress_.push_back(request);
  }
  return next_->ReportProgress(request, deadline);
}

void InterceptingControlPlane::HoldResults() {
  absl::MutexLock lock(&mu_);
  results_held_ = true;
}

void InterceptingControlPlane::ReleaseResults() {
  absl::MutexLock lock(&mu_);
  results_held_ = false;
}

absl::Status InterceptingControlPlane::ReportResult(
    const v1::ReportResultRequest& request, absl::Duration deadline) {
  {
    absl::MutexLock lock(&mu_);
    auto released = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !results_held_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&released), deadline);
  }
  // Recorded once the coordinator has it, so that a test that saw the
  // result can rely on the coordinator's state reflecting it.
  absl::Status status = next_->ReportResult(request, deadline);
  absl::MutexLock lock(&mu_);
  ++result_count_;
  results_.push_back(request);
  return status;
}

absl::StatusOr<v1::ReportCheckpointResponse>
InterceptingControlPlane::ReportCheckpoint(
    const v1::ReportCheckpointRequest& request, absl::Duration deadline) {
  absl::StatusOr<v1::ReportCheckpointResponse> response =
      next_->ReportCheckpoint(request, deadline);
  absl::MutexLock lock(&mu_);
  checkpoints_.push_back(request);
  return response;
}

absl::StatusOr<std::unique_ptr<Attachment>> InterceptingControlPlane::Attach(
    const v1::AttachRequest& request, absl::Duration deadline) {
  absl::StatusOr<std::unique_ptr<Attachment>> attachment =
      next_->Attach(request, deadline);
  if (attachment.ok()) {
    absl::MutexLock lock(&mu_);
    ++attachments_;
  }
  return attachment;
}

void InterceptingControlPlane::AppendToNextRunJobReply(
    v1::Directive directive) {
  absl::MutexLock lock(&mu_);
  append_to_run_job_ = std::move(directive);
}

void InterceptingControlPlane::set_assignment_epoch_offset(int64_t offset) {
  absl::MutexLock lock(&mu_);
  epoch_offset_ = offset;
}

int InterceptingControlPlane::registrations() const {
  absl::MutexLock lock(&mu_);
  return registrations_;
}

int InterceptingControlPlane::attachments() const {
  absl::MutexLock lock(&mu_);
  return attachments_;
}

std::vector<v1::HeartbeatRequest> InterceptingControlPlane::heartbeat_log()
    const {
  absl::MutexLock lock(&mu_);
  return heartbeat_log_;
}

std::vector<v1::ReportProgressRequest> InterceptingControlPlane::progress()
    const {
  absl::MutexLock lock(&mu_);
  return progress_;
}

std::vector<v1::ReportResultRequest> InterceptingControlPlane::results()
    const {
  absl::MutexLock lock(&mu_);
  return results_;
}

std::vector<v1::ReportCheckpointRequest>
InterceptingControlPlane::checkpoints() const {
  absl::MutexLock lock(&mu_);
  return checkpoints_;
}

bool InterceptingControlPlane::WaitFor(const int* count, int n,
                                       absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  const auto enough = [count, n]() { return *count >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

bool InterceptingControlPlane::WaitForRegistrations(
    int n, absl::Duration timeout) const {
  return WaitFor(&registrations_, n, timeout);
}

bool InterceptingControlPlane::WaitForAttachments(
    int n, absl::Duration timeout) const {
  return WaitFor(&attachments_, n, timeout);
}

bool InterceptingControlPlane::WaitForHeartbeats(int n,
                                                 absl::Duration timeout) const {
  return WaitFor(&heartbeats_, n, timeout);
}

bool InterceptingControlPlane::WaitForKvGets(int n,
                                             absl::Duration timeout) const {
  return WaitFor(&kv_gets_, n, timeout);
}

bool InterceptingControlPlane::WaitForProgress(int n,
                                               absl::Duration timeout) const {
  return WaitFor(&progress_count_, n, timeout);
}

bool InterceptingControlPlane::WaitForResults(int n,
                                              absl::Duration timeout) const {
  return WaitFor(&result_count_, n, timeout);
}

}  // namespace pshard::worker
