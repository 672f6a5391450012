// A simulated pshard worker: speaks the WorkerControl protocol over gRPC
// exactly as a real worker does (register, heartbeat, RunJob/AbortJob
// directives, rendezvous, bucket report, assignment, progress, result) but
// trains nothing. Used by the coordinator's multi-process tests and its
// benchmark.
#ifndef PSHARD_BENCH_COORDINATOR_SIM_WORKER_H_
#define PSHARD_BENCH_COORDINATOR_SIM_WORKER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "pshard/v1/worker_control.grpc.pb.h"

namespace pshard {
namespace bench {

struct SimWorkerOptions {
  std::string name;
  std::string host = "sim-host";
  // Bucket sizes (elements, F32) reported for every job.
  std::vector<int64_t> bucket_elements = {1024, 2048, 4096};
  // Parameters per bucket in the report.
  int parameters_per_bucket = 1;
  // Wall time of one simulated step.
  absl::Duration step_time = absl::Milliseconds(1);
  // Jobs whose name starts with this fail on rank 1 with an error.
  std::string fail_prefix = "fail";
  // Per-RPC deadline; failed job RPCs are retried until job_rpc_patience.
  absl::Duration rpc_timeout = absl::Seconds(10);
  absl::Duration job_rpc_patience = absl::Seconds(60);
};

class SimWorker {
 public:
  using LatencySink = std::function<void(const char* method, absl::Duration)>;

  SimWorker(std::shared_ptr<grpc::Channel> channel, SimWorkerOptions options,
            LatencySink sink = nullptr);
  ~SimWorker();  // stops heartbeats and the job thread

  // Points later calls at another coordinator address (after a restart).
  void SetChannel(std::shared_ptr<grpc::Channel> channel);

  absl::Status Register();
  // One heartbeat; follows the directives in the reply. NotFound makes the
  // worker register again (same name and incarnation).
  absl::Status Heartbeat();
  // Heartbeats every `interval` on a thread until StopHeartbeats().
  void StartHeartbeats(absl::Duration interval);
  void StopHeartbeats();

  const std::string& id() const { return id_; }
  int jobs_finished() const { return jobs_finished_.load(); }

 private:
  std::shared_ptr<v1::WorkerControl::Stub> Stub();
  void RunJob(v1::RunJobDirective run);
  // Retries `call` (UNAVAILABLE, and NotFound from a restarting server) until
  // it succeeds or the patience runs out. Each attempt's deadline is
  // `deadline`, or options.rpc_timeout when zero.
  grpc::Status Retry(const char* method,
                     const std::function<grpc::Status(grpc::ClientContext*)>& call,
                     absl::Duration deadline = absl::ZeroDuration());
  // The layout report and the assignment, over Stub() and Retry.
  friend class SimAssignmentRpcs;
  void JoinJob();

  const SimWorkerOptions options_;
  const std::string incarnation_;
  const LatencySink sink_;
  std::string id_;

  absl::Mutex mu_;
  std::shared_ptr<v1::WorkerControl::Stub> stub_ ABSL_GUARDED_BY(mu_);
  std::string job_id_ ABSL_GUARDED_BY(mu_);
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;

  std::atomic<bool> abort_{false};
  std::atomic<bool> stop_{false};
  std::atomic<int> jobs_finished_{0};
  std::thread job_thread_;
  std::thread heartbeat_thread_;
  std::atomic<bool> heartbeats_on_{false};
};

}  // namespace bench
}  // namespace pshard

#endif  // PSHARD_BENCH_COORDINATOR_SIM_WORKER_H_
