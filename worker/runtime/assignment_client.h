// AssignmentClient: the worker's side of the layout/assignment protocol, for
// one rank of one job attempt. In its first step a rank has seen the order
// in which its gradients became ready, i.e. its bucket layout; it reports
// it, and waits for the coordinator to publish which rank owns which bucket:
//
//   rank 0:      ReportBuckets(layout) ─────────────────┐
//   rank r > 0:  ReportBuckets(fingerprint only) ──▶ send_layout?
//                  └─ yes (no reference yet, or it differs):
//                     ReportBuckets(layout)
//   every rank:  GetAssignment(owners view), in abortable slices, until every
//                rank has reported and the assignment is published
//                ──▶ DecodeOwners ──▶ BucketAssignment
//
// Every rank normally has the same layout, so the others send only its
// fingerprint (the coordinator holds it until rank 0's layout is in) and the
// whole layout only when asked; a 4,096-rank job then sends one layout.
//
// The job runner, the C++ API's coordinator path (worker/api/trainer.h) and
// the coordinator benchmark's simulated worker use this client; a caller
// with its own transport (asynchronous) can use the request builders and
// DecodeAssignment below, which are what the client sends and reads.
#ifndef PSHARD_WORKER_RUNTIME_ASSIGNMENT_CLIENT_H_
#define PSHARD_WORKER_RUNTIME_ASSIGNMENT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "pshard/v1/job_spec.pb.h"
#include "pshard/v1/shard.pb.h"
#include "pshard/v1/worker_control.pb.h"
#include "worker/hook/zero_hook.h"
#include "worker/runtime/control_plane.h"

namespace pshard::worker {

struct AssignmentClientOptions {
  // The job attempt and this rank.
  std::string job_id;
  int64_t epoch = 0;
  int rank = 0;
  int world_size = 1;
  std::string worker_id;
  // Deadline of each ReportBuckets, and the slack added to each
  // GetAssignment slice's own wait for its RPC deadline.
  absl::Duration rpc_timeout = absl::Seconds(10);
  // The longest single GetAssignment wait (see WaitInSlices).
  absl::Duration slice = absl::Seconds(1);
  // Measures the whole wait. Must outlive the client.
  const Clock* clock = &Clock::Real();
};

// The full layout report of this rank: `buckets` as observed.
v1::ReportBucketsRequest LayoutReport(const AssignmentClientOptions& options,
                                      std::vector<v1::BucketLayout> buckets);

// Whether a rank sends its whole layout at once (rank 0, the reference) or
// first only its fingerprint.
bool SendsLayoutFirst(int rank);

// `full` reduced to its layout's fingerprint, asking the coordinator to wait
// up to `wait` for the reference layout before it answers send_layout.
v1::ReportBucketsRequest FingerprintReport(const v1::ReportBucketsRequest& full,
                                           absl::Duration wait);

// One GetAssignment wait of at most `wait`, for the owners view.
v1::GetAssignmentRequest AssignmentRequest(
    const AssignmentClientOptions& options, absl::Duration wait);

// The owners of the `num_buckets` buckets in `assignment`. FailedPrecondition
// if it is another job's or epoch's (this rank must not train with it);
// InvalidArgument as shard::DecodeOwners.
absl::StatusOr<BucketAssignment> DecodeAssignment(
    const v1::ShardAssignment& assignment,
    const AssignmentClientOptions& options, int num_buckets);

// The assignment computed on this rank instead of asked for: `policy` over
// the layout's bucket bytes, epoch 1. Every rank computes the same. For
// programs without a coordinator (tests, the C++ API's local mode).
AssignmentProvider LocalAssignmentProvider(
    v1::JobSpec::AssignmentPolicy policy, int world_size);

class AssignmentClient {
 public:
  // `rpcs` must outlive the client.
  AssignmentClient(AssignmentRpcs* rpcs, AssignmentClientOptions options);

  // Reports `buckets` and waits up to `timeout` for the assignment, calling
  // `check_abort` before every slice (a non-OK result ends the wait with it).
  // Errors: the RPCs' (a failed ReportBuckets ends it at once; GetAssignment
  // retries DeadlineExceeded and Unavailable within `timeout`);
  // DeadlineExceeded "assignment of job <j> epoch <e> not published within
  // <timeout>"; DecodeAssignment's.
  absl::StatusOr<BucketAssignment> Exchange(
      const std::vector<v1::BucketLayout>& buckets, absl::Duration timeout,
      absl::FunctionRef<absl::Status()> check_abort);

  // Exchange as the ZeroHook's AssignmentProvider. The provider refers to
  // this client, which must outlive it.
  AssignmentProvider Provider(absl::Duration timeout,
                              std::function<absl::Status()> check_abort);

  const AssignmentClientOptions& options() const { return options_; }

 private:
  AssignmentRpcs* const rpcs_;
  const AssignmentClientOptions options_;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_ASSIGNMENT_CLIENT_H_
