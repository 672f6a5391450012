// Shared pieces of the coordinator's multi-process tests: start the real
// pshard-coordinator binary on a free loopback port, and small gRPC client
// helpers.
#ifndef PSHARD_TESTS_COORDINATOR_HELPERS_H_
#define PSHARD_TESTS_COORDINATOR_HELPERS_H_

#include <chrono>
#include <cstdio>
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
#include "tests/testing/subprocess.h"

namespace pshard {
namespace coordinator_test {

struct RunningCoordinator {
  std::unique_ptr<testing::Subprocess> process;
  int port = 0;
  std::string address() const { return absl::StrCat("127.0.0.1:", port); }
  std::shared_ptr<grpc::Channel> Channel() const {
    return grpc::CreateChannel(address(), grpc::InsecureChannelCredentials());
  }
};

// Starts pshard-coordinator on 127.0.0.1:<port> (0: a free one) with its
// state in `state_path`, logging to `dir`/coordinator.log.
inline absl::StatusOr<RunningCoordinator> StartCoordinator(
    const std::string& dir, const std::string& state_path, int port = 0) {
  const std::string port_file = absl::StrCat(dir, "/port");
  std::remove(port_file.c_str());
  RunningCoordinator c;
  ASSIGN_OR_RETURN(
      c.process,
      testing::Subprocess::Start(
          {testing::RunfilePath("server/pshard-coordinator"),
           absl::StrCat("--listen=127.0.0.1:", port),
           "--port_file=" + port_file, "--state_path=" + state_path,
           "--heartbeat_interval=100ms", "--worker_timeout=3s"},
          {}, absl::StrCat(dir, "/coordinator.log")));
  ASSIGN_OR_RETURN(c.port, testing::WaitForPortFile(port_file, absl::Seconds(30)));
  return c;
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
