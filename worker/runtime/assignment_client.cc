#include "worker/runtime/assignment_client.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "shard/assignment.h"
#include "shard/layout.h"
#include "shard/layout_fingerprint.h"
#include "worker/runtime/sliced_wait.h"

namespace pshard::worker {

v1::ReportBucketsRequest LayoutReport(const AssignmentClientOptions& options,
                                      std::vector<v1::BucketLayout> buckets) {
  v1::ReportBucketsRequest report;
  report.set_job_id(options.job_id);
  report.set_epoch(options.epoch);
  report.set_rank(options.rank);
  report.set_worker_id(options.worker_id);
  for (v1::BucketLayout& bucket : buckets) {
    *report.add_buckets() = std::move(bucket);
  }
  return report;
}

bool SendsLayoutFirst(int rank) { return rank == 0; }

v1::ReportBucketsRequest FingerprintReport(const v1::ReportBucketsRequest& full,
                                           absl::Duration wait) {
  v1::ReportBucketsRequest by_fingerprint = full;
  by_fingerprint.set_layout_fingerprint(
      shard::LayoutFingerprint(full.buckets()));
  by_fingerprint.clear_buckets();
  *by_fingerprint.mutable_timeout() = ToProto(wait);
  return by_fingerprint;
}

v1::GetAssignmentRequest AssignmentRequest(
    const AssignmentClientOptions& options, absl::Duration wait) {
  v1::GetAssignmentRequest request;
  request.set_job_id(options.job_id);
  request.set_epoch(options.epoch);
  // Only each bucket's owner: the rank knows its own layout.
  request.set_view(v1::ASSIGNMENT_VIEW_OWNERS);
  *request.mutable_timeout() = ToProto(wait);
  return request;
}

absl::StatusOr<BucketAssignment> DecodeAssignment(
    const v1::ShardAssignment& assignment,
    const AssignmentClientOptions& options, int num_buckets) {
  if (assignment.job_id() != options.job_id ||
      assignment.epoch() != options.epoch) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing the assignment of job ", assignment.job_id(), " epoch ",
        assignment.epoch(), ": this rank runs job ", options.job_id,
        " epoch ", options.epoch));
  }
  BucketAssignment result;
  result.epoch = assignment.epoch();
  ASSIGN_OR_RETURN(result.owners, shard::DecodeOwners(assignment, num_buckets,
                                                      options.world_size));
  return result;
}

AssignmentProvider LocalAssignmentProvider(
    v1::JobSpec::AssignmentPolicy policy, int world_size) {
  return [policy, world_size](
             const BucketLayout& layout) -> absl::StatusOr<BucketAssignment> {
    BucketAssignment assignment;
    assignment.epoch = 1;
    ASSIGN_OR_RETURN(assignment.owners,
                     shard::AssignBuckets(policy, layout.BucketBytes(),
                                          world_size));
    return assignment;
  };
}

AssignmentClient::AssignmentClient(AssignmentRpcs* rpcs,
                                   AssignmentClientOptions options)
    : rpcs_(rpcs), options_(std::move(options)) {}

absl::StatusOr<BucketAssignment> AssignmentClient::Exchange(
    const std::vector<v1::BucketLayout>& buckets, absl::Duration timeout,
    absl::FunctionRef<absl::Status()> check_abort) {
  const v1::ReportBucketsRequest report = LayoutReport(options_, buckets);
  bool send_layout = SendsLayoutFirst(options_.rank);
  if (!send_layout) {
    // Half the RPC deadline for the coordinator's wait on rank 0's layout,
    // so that its answer comes back within the deadline.
    ASSIGN_OR_RETURN(
        v1::ReportBucketsResponse response,
        rpcs_->ReportBuckets(FingerprintReport(report, options_.rpc_timeout / 2),
                             options_.rpc_timeout));
    send_layout = response.send_layout();
  }
  if (send_layout) {
    RETURN_IF_ERROR(rpcs_->ReportBuckets(report, options_.rpc_timeout).status());
  }
  // Every rank must finish its first backward first: allow the whole
  // timeout, waiting in slices so that an abort is noticed.
  SlicedWaitOptions wait;
  wait.timeout = timeout;
  wait.slice = options_.slice;
  wait.clock = options_.clock;
  absl::StatusOr<v1::ShardAssignment> assignment;
  RETURN_IF_ERROR(WaitInSlices(
      wait,
      absl::StrCat("assignment of job ", options_.job_id, " epoch ",
                   options_.epoch, " not published"),
      check_abort, [&](absl::Duration slice) {
        assignment = rpcs_->GetAssignment(AssignmentRequest(options_, slice),
                                          slice + options_.rpc_timeout);
        return assignment.status();
      }));
  return DecodeAssignment(*assignment, options_,
                          static_cast<int>(buckets.size()));
}

AssignmentProvider AssignmentClient::Provider(
    absl::Duration timeout, std::function<absl::Status()> check_abort) {
  return [this, timeout, check_abort = std::move(check_abort)](
             const BucketLayout& layout) -> absl::StatusOr<BucketAssignment> {
    return Exchange(layout.ToProto(), timeout, check_abort);
  };
}

}  // namespace pshard::worker
