// CpuJob: one rank of a job on the CPU, assembled from the job spec: the
// Gloo communicator (rendezvous through the job's KvClient), the optimizer,
// the workload and the ZeroHook on host memory. The StepEngine of backend
// Gloo, as GpuJob (worker/gpu/gpu_job.h) is NCCL's; CreateStepEngine
// (engine_factory.h) picks one:
//
//   ASSIGN_OR_RETURN(auto job, CpuJob::Create(spec, options, kv, provider));
//   // publish &job->communicator() so that Abort() can reach it
//   for (step = 1..N) { ASSIGN_OR_RETURN(double loss, job->RunStep(step)); }
//   RETURN_IF_ERROR(job->FinalBarrier());
//   ASSIGN_OR_RETURN(auto params, job->DownloadParameters());  // output
#ifndef PSHARD_WORKER_RUNTIME_CPU_JOB_H_
#define PSHARD_WORKER_RUNTIME_CPU_JOB_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/comm/kv_store.h"
#include "worker/hook/zero_hook.h"
#include "worker/runtime/step_engine.h"

namespace pshard::worker {

struct CpuJobOptions {
  int rank = 0;
  int world_size = 1;
  // Address Gloo listens on and publishes to peers (the worker's --host).
  std::string hostname = "127.0.0.1";
  // JobSpec.collective_timeout_seconds: rendezvous and every step's wait.
  absl::Duration timeout = absl::Seconds(60);
  // Prefix of the Gloo rendezvous keys in the job's store.
  std::string key_prefix = "gloo/";
};

class CpuJob : public StepEngine {
 public:
  // `spec` valid with defaults applied. Errors from the workload, the
  // optimizer (InvalidArgument), the communicator (e.g. DeadlineExceeded
  // when peers do not show up) and the hook.
  static absl::StatusOr<std::unique_ptr<CpuJob>> Create(
      const v1::JobSpec& spec, const CpuJobOptions& options, KvClient& kv,
      AssignmentProvider provider);

  ~CpuJob() override = default;

  // StepEngine. AverageLoss: an all-reduce of the loss over Gloo when
  // world > 1. FinalBarrier: a Gloo barrier bounded by
  // CpuJobOptions::timeout.
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_CPU_JOB_H_
