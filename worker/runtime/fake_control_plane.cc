#include "worker/runtime/fake_control_plane.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/proto_time.h"
#include "shard/assignment.h"
#include "shard/layout.h"
#include "shard/layout_fingerprint.h"

namespace pshard::worker {

absl::StatusOr<v1::RegisterWorkerResponse> FakeControlPlane::RegisterWorker(
    const v1::RegisterWorkerRequest& request, absl::Duration) {
  absl::MutexLock lock(&mu_);
  ++registrations_;
  v1::RegisterWorkerResponse response;
  response.set_worker_id("w-" + request.name());
  response.mutable_heartbeat_interval()->set_nanos(20 * 1000 * 1000);
  return response;
}

absl::StatusOr<v1::HeartbeatResponse> FakeControlPlane::Heartbeat(
    const v1::HeartbeatRequest& request, absl::Duration) {
  absl::MutexLock lock(&mu_);
  heartbeats_.push_back(request);
  if (not_found_next_) {
    not_found_next_ = false;
    return absl::NotFoundError("unknown worker");
  }
  v1::HeartbeatResponse response;
  while (!directives_.empty()) {
    *response.add_directives() = directives_.front();
    directives_.pop_front();
  }
  return response;
}

absl::Status FakeControlPlane::KvPut(const v1::KvPutRequest& request,
                                     absl::Duration) {
  absl::MutexLock lock(&mu_);
  kv_[{request.job_id(), request.epoch(), request.key()}] = request.value();
  return absl::OkStatus();
}

absl::StatusOr<v1::KvGetResponse> FakeControlPlane::KvGet(
    const v1::KvGetRequest& request, absl::Duration deadline) {
  const auto key = std::make_tuple(request.job_id(), request.epoch(),
                                   request.key());
  absl::MutexLock lock(&mu_);
  ++kv_gets_;
  auto present = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return kv_.count(key) > 0;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&present),
                            std::min(deadline, FromProto(request.timeout())))) {
    return absl::DeadlineExceededError("key did not appear");
  }
  v1::KvGetResponse response;
  response.set_value(kv_[key]);
  return response;
}

absl::StatusOr<v1::ReportBucketsResponse> FakeControlPlane::ReportBuckets(
    const v1::ReportBucketsRequest& request, absl::Duration) {
  absl::MutexLock lock(&mu_);
  auto& reports = reports_[{request.job_id(), request.epoch()}];
  v1::ReportBucketsResponse response;
  if (request.buckets().empty() && !request.layout_fingerprint().empty()) {
    for (const auto& [rank, report] : reports) {
      if (!report.buckets().empty() &&
          shard::LayoutFingerprint(report.buckets()) ==
              request.layout_fingerprint()) {
        v1::ReportBucketsRequest full = report;
        full.set_rank(request.rank());
        reports[request.rank()] = std::move(full);
        return response;
      }
    }
    response.set_send_layout(true);
    return response;
  }
  reports[request.rank()] = request;
  return response;
}

absl::StatusOr<v1::ShardAssignment> FakeControlPlane::GetAssignment(
    const v1::GetAssignmentRequest& request, absl::Duration deadline) {
  const auto job = std::make_pair(request.job_id(), request.epoch());
  absl::MutexLock lock(&mu_);
  auto all_in = [this, &job]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = reports_.find(job);
    return it != reports_.end() &&
           static_cast<int>(it->second.size()) == world_size_;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&all_in),
                            std::min(deadline, FromProto(request.timeout())))) {
    return absl::DeadlineExceededError("assignment not published");
  }
  const v1::ReportBucketsRequest& report = reports_[job].begin()->second;
  const std::vector<int64_t> bytes = shard::BucketBytes(report.buckets());
  auto owners = shard::AssignBuckets(v1::JobSpec::ROUND_ROBIN, bytes, world_size_);
  if (!owners.ok()) return owners.status();
  v1::ShardAssignment assignment;
  assignment.set_job_id(request.job_id());
  assignment.set_epoch(request.epoch() + epoch_offset_);
  for (size_t b = 0; b < bytes.size(); ++b) {
    v1::BucketAssignment* a = assignment.add_buckets();
    a->set_index(static_cast<int>(b));
    a->set_bytes(bytes[b]);
    a->set_owner_rank((*owners)[b]);
  }
  return assignment;
}

absl::StatusOr<v1::ReportProgressResponse> FakeControlPlane::ReportProgress(
    const v1::ReportProgressRequest& request, absl::Duration) {
  absl::MutexLock lock(&mu_);
  progress_.push_back(request);
  v1::ReportProgressResponse response;
  response.set_abort(abort_on_progress_);
  return response;
}

absl::Status FakeControlPlane::ReportResult(
    const v1::ReportResultRequest& request, absl::Duration) {
  absl::MutexLock lock(&mu_);
  results_.push_back(request);
  return absl::OkStatus();
}

void FakeControlPlane::QueueDirective(v1::Directive directive) {
  absl::MutexLock lock(&mu_);
  directives_.push_back(std::move(directive));
}

void FakeControlPlane::set_assignment_epoch_offset(int64_t offset) {
  absl::MutexLock lock(&mu_);
  epoch_offset_ = offset;
}

void FakeControlPlane::set_abort_on_progress(bool abort) {
  absl::MutexLock lock(&mu_);
  abort_on_progress_ = abort;
}

void FakeControlPlane::FailNextHeartbeatWithNotFound() {
  absl::MutexLock lock(&mu_);
  not_found_next_ = true;
}

int FakeControlPlane::registrations() const {
  absl::MutexLock lock(&mu_);
  return registrations_;
}

int FakeControlPlane::heartbeats() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(heartbeats_.size());
}

std::vector<v1::HeartbeatRequest> FakeControlPlane::heartbeat_log() const {
  absl::MutexLock lock(&mu_);
  return heartbeats_;
}

std::vector<v1::ReportProgressRequest> FakeControlPlane::progress() const {
  absl::MutexLock lock(&mu_);
  return progress_;
}

std::vector<v1::ReportResultRequest> FakeControlPlane::results() const {
  absl::MutexLock lock(&mu_);
  return results_;
}

bool FakeControlPlane::WaitForResults(size_t n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return results_.size() >= n;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

bool FakeControlPlane::WaitForKvGets(int n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return kv_gets_ >= n;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

}  // namespace pshard::worker
