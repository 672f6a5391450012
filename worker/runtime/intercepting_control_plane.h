// InterceptingControlPlane: for tests of the agent and the job runner, a
// ControlPlane that forwards every call to another one (the real coordinator,
// through tests/testing's InProcessCoordinator), records what the worker
// sent, and injects the few things a real coordinator does not do on demand
// (a Drain directive, a stale assignment epoch). It decides nothing itself:
// every answer that is not an injected fault is the coordinator's.
#ifndef PSHARD_WORKER_RUNTIME_INTERCEPTING_CONTROL_PLANE_H_
#define PSHARD_WORKER_RUNTIME_INTERCEPTING_CONTROL_PLANE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/runtime/control_plane.h"

namespace pshard::worker {

class InterceptingControlPlane : public ControlPlane {
 public:
  explicit InterceptingControlPlane(std::unique_ptr<ControlPlane> next)
      : next_(std::move(next)) {}

  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request,
      absl::Duration deadline) override;
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request, absl::Duration deadline) override;
  absl::Status KvPut(const v1::KvPutRequest& request,
                     absl::Duration deadline) override;
  absl::StatusOr<v1::KvGetResponse> KvGet(const v1::KvGetRequest& request,
                                          absl::Duration deadline) override;
  absl::StatusOr<v1::KvGetManyResponse> KvGetMany(
      const v1::KvGetManyRequest& request, absl::Duration deadline) override;
  absl::StatusOr<v1::ReportBucketsResponse> ReportBuckets(
      const v1::ReportBucketsRequest& request,
      absl::Duration deadline) override;
  absl::StatusOr<v1::ShardAssignment> GetAssignment(
      const v1::GetAssignmentRequest& request,
      absl::Duration deadline) override;
  absl::StatusOr<v1::ReportProgressResponse> ReportProgress(
      const v1::ReportProgressRequest& request,
      absl::Duration deadline) override;
  absl::Status ReportResult(const v1::ReportResultRequest& request,
                            absl::Duration deadline) override;
  absl::StatusOr<v1::ReportCheckpointResponse> ReportCheckpoint(
      const v1::ReportCheckpointRequest& request,
      absl::Duration deadline) override;
  absl::StatusOr<std::unique_ptr<Attachment>> Attach(
      const v1::AttachRequest& request, absl::Duration deadline) override;

  // ---- Faults ----
  // Appends `directive` to the first heartbeat reply from now on that
  // carries a RunJob (the coordinator never sends Drain itself).
  void AppendToNextRunJobReply(v1::Directive directive);
  // Assignments come back with their epoch moved by `offset`.
  void set_assignment_epoch_offset(int64_t offset);
  // While held, ReportResult waits (up to its deadline) before it forwards
  // the result: a job cannot end meanwhile, so a test can observe what the
  // worker does while its job is still running.
  void HoldResults();
  void ReleaseResults();

  // ---- Observations ----
  int registrations() const;
  // Attach calls that the coordinator accepted.
  int attachments() const;
  std::vector<v1::HeartbeatRequest> heartbeat_log() const;
  std::vector<v1::ReportProgressRequest> progress() const;
  std::vector<v1::ReportResultRequest> results() const;
  std::vector<v1::ReportCheckpointRequest> checkpoints() const;
  // Wait (real time, up to `timeout`) until at least `n` such calls have
  // started; false on timeout.
  bool WaitForRegistrations(int n, absl::Duration timeout) const;
  bool WaitForAttachments(int n, absl::Duration timeout) const;
  bool WaitForHeartbeats(int n, absl::Duration timeout) const;
  // KvGet and KvGetMany calls together.
  bool WaitForKvGets(int n, absl::Duration timeout) const;
  bool WaitForProgress(int n, absl::Duration timeout) const;
  bool WaitForResults(int n, absl::Duration timeout) const;

 private:
  bool WaitFor(const int* count, int n, absl::Duration timeout) const;

  const std::unique_ptr<ControlPlane> next_;
  mutable absl::Mutex mu_;
  std::optional<v1::Directive> append_to_run_job_ ABSL_GUARDED_BY(mu_);
  int64_t epoch_offset_ ABSL_GUARDED_BY(mu_) = 0;
  bool results_held_ ABSL_GUARDED_BY(mu_) = false;
  int registrations_ ABSL_GUARDED_BY(mu_) = 0;
  int attachments_ ABSL_GUARDED_BY(mu_) = 0;
  int heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
  int kv_gets_ ABSL_GUARDED_BY(mu_) = 0;
  int progress_count_ ABSL_GUARDED_BY(mu_) = 0;
  int result_count_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<v1::HeartbeatRequest> heartbeat_log_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReportProgressRequest> progress_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReportResultRequest> results_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReportCheckpointRequest> checkpoints_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_INTERCEPTING_CONTROL_PLANE_H_
