// Shared pieces of the coordinator's multi-process tests: the real
// pshard-coordinator binary as they start it, and small gRPC client helpers.
#ifndef PSHARD_TESTS_COORDINATOR_HELPERS_H_
#define PSHARD_TESTS_COORDINATOR_HELPERS_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "common/job_state.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "pshard/v1/job.grpc.pb.h"
#include "tests/testing/coordinator.h"
#include "tests/testing/subprocess.h"

namespace pshard {
namespace coordinator_test {

using testing::RunningCoordinator;

// The coordinator these tests run: state in `dir`/state.db, a 3 s worker
// timeout; `port` 0 picks a free one.
inline absl::StatusOr<RunningCoordinator> StartTestCoordinator(
    const std::string& dir, int port = 0) {
  testing::CoordinatorOptions options;
  options.dir = dir;
  options.state_path = dir + "/state.db";
  options.port = port;
  options.worker_timeout = absl::Seconds(3);
  return testing::StartCoordinator(options);
}

inline absl::StatusOr<v1::Job> GetJob(v1::JobService::Stub* stub,
                                      const std::string& id) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::GetJobRequest req;
  req.set_job_id(id);
  v1::Job job;
  RETURN_IF_ERROR(FromGrpcStatus(stub->GetJob(&ctx, req, &job), "GetJob"));
  return job;
}

// Polls the job until it is SUCCEEDED, FAILED or CANCELLED; returns it then.
// DeadlineExceeded (with its last state) if it does not end within `timeout`.
inline absl::StatusOr<v1::Job> WaitForEnd(v1::JobService::Stub* stub,
                                          const std::string& id,
                                          absl::Duration timeout) {
  absl::StatusOr<v1::Job> job;
  const bool ended = testing::WaitUntil(
      [&] {
        job = GetJob(stub, id);
        return job.ok() && IsTerminal(job->state());
      },
      timeout);
  if (!job.ok() || ended) return job;
  return absl::DeadlineExceededError(
      absl::StrCat("job ", id, " still ", v1::JobState_Name(job->state()),
                   " after ", absl::FormatDuration(timeout)));
}

inline absl::StatusOr<v1::Job> SubmitJob(v1::JobService::Stub* stub,
                                         const std::string& name,
                                         int world_size, int64_t steps) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::SubmitJobRequest req;
  v1::JobSpec* spec = req.mutable_spec();
  spec->set_name(name);
  spec->set_world_size(world_size);
  spec->mutable_synthetic()->set_num_parameters(1 << 20);
  spec->mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
  spec->set_steps(steps);
  v1::Job job;
  RETURN_IF_ERROR(FromGrpcStatus(stub->SubmitJob(&ctx, req, &job), "SubmitJob"));
  return job;
}

}  // namespace coordinator_test
}  // namespace pshard

#endif  // PSHARD_TESTS_COORDINATOR_HELPERS_H_
