// FakeControlPlane: an in-memory coordinator for unit tests of the job
// runner and the agent: job-scoped KV with waiting gets, a bucket report
// barrier that publishes an assignment (computed with the local policy), and
// a record of every registration, heartbeat, progress report and result.
// Knobs let tests inject faults (stale epochs, aborts, NOT_FOUND).
#ifndef PSHARD_WORKER_RUNTIME_FAKE_CONTROL_PLANE_H_
#define PSHARD_WORKER_RUNTIME_FAKE_CONTROL_PLANE_H_

#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "worker/runtime/control_plane.h"

namespace pshard::worker {

class FakeControlPlane : public ControlPlane {
 public:
  // `world_size`: ranks whose bucket reports GetAssignment waits for.
  explicit FakeControlPlane(int world_size) : world_size_(world_size) {}

  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request,
      absl::Duration deadline) override;
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request, absl::Duration deadline) override;
  absl::Status KvPut(const v1::KvPutRequest& request,
                     absl::Duration deadline) override;
  absl::StatusOr<v1::KvGetResponse> KvGet(const v1::KvGetRequest& request,
                                          absl::Duration deadline) override;
  // A fingerprint-only report is accepted when another rank of the job sent
  // that layout already, and answered send_layout=true otherwise.
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

  // Knobs.
  void QueueDirective(v1::Directive directive);
  void set_assignment_epoch_offset(int64_t offset);
  void set_abort_on_progress(bool abort);
  void FailNextHeartbeatWithNotFound();

  // Observations.
  int registrations() const;
  int heartbeats() const;
  std::vector<v1::HeartbeatRequest> heartbeat_log() const;
  std::vector<v1::ReportProgressRequest> progress() const;
  std::vector<v1::ReportResultRequest> results() const;
  // Waits until `n` results are in.
  bool WaitForResults(size_t n, absl::Duration timeout) const;
  // Waits until `n` KvGet calls have started (e.g. a rank blocked in the
  // rendezvous).
  bool WaitForKvGets(int n, absl::Duration timeout) const;

 private:
  const int world_size_;
  mutable absl::Mutex mu_;
  std::map<std::tuple<std::string, int64_t, std::string>, std::string> kv_
      ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, int64_t>,
           std::map<int, v1::ReportBucketsRequest>>
      reports_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::Directive> directives_ ABSL_GUARDED_BY(mu_);
  int64_t epoch_offset_ ABSL_GUARDED_BY(mu_) = 0;
  bool abort_on_progress_ ABSL_GUARDED_BY(mu_) = false;
  bool not_found_next_ ABSL_GUARDED_BY(mu_) = false;
  int registrations_ ABSL_GUARDED_BY(mu_) = 0;
  int kv_gets_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<v1::HeartbeatRequest> heartbeats_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReportProgressRequest> progress_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReportResultRequest> results_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_FAKE_CONTROL_PLANE_H_
