// GpuJob: one rank of a job on a GPU, assembled from the job spec: the NCCL
// communicator (rendezvous through the job's KvClient), the GPU optimizer,
// the device-memory workload on a compute stream, and the GpuZeroHook. It is
// the StepEngine (worker/runtime/step_engine.h) of backend NCCL (see
// ChooseBackend), as CpuJob (worker/runtime/cpu_job.h) is Gloo's on the CPU;
// CreateStepEngine picks one:
//
//   ASSIGN_OR_RETURN(auto job, GpuJob::Create(spec, options, kv, provider));
//   // publish &job->communicator() so that Abort() can reach it
//   for (step = 1..N) { ASSIGN_OR_RETURN(double loss, job->RunStep(step)); }
//   RETURN_IF_ERROR(job->FinalBarrier());
//   ASSIGN_OR_RETURN(auto params, job->DownloadParameters());  // output
#ifndef PSHARD_WORKER_GPU_GPU_JOB_H_
#define PSHARD_WORKER_GPU_GPU_JOB_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/comm/kv_store.h"
#include "worker/gpu/gpu_zero_hook.h"
#include "worker/gpu/nccl_communicator.h"
#include "worker/hook/zero_hook.h"
#include "worker/runtime/step_engine.h"
#include "worker/workload/workload.h"

namespace pshard::worker {

struct GpuJobOptions {
  std::string job_id;
  int64_t epoch = 0;
  int rank = 0;
  int world_size = 1;
  // CUDA device of this rank (WorkerDevice::cuda_device).
  int device = 0;
  // JobSpec.collective_timeout_seconds: rendezvous, NCCL initialisation and
  // every step's wait.
  absl::Duration timeout = absl::Seconds(60);
  // Prefix of the NCCL rendezvous key in the job's store.
  std::string key_prefix = "nccl/";
  // Measures every timeout of the communicator and the hook; must outlive
  // the job.
  const Clock* clock = &Clock::Real();
};

class GpuJob : public StepEngine {
 public:
  // `spec` valid with defaults applied. Errors from the communicator (e.g.
  // DeadlineExceeded when peers do not show up), the optimizer, the workload
  // and the hook; Unavailable without CUDA.
  static absl::StatusOr<std::unique_ptr<GpuJob>> Create(
      const v1::JobSpec& spec, const GpuJobOptions& options, KvClient& kv,
      AssignmentProvider provider);

  ~GpuJob() override = default;

  // StepEngine. RunStep: the workload's gradients on the device, the hook's
  // reduce -> owner's step -> broadcast per bucket, and the end of the step.
  // AverageLoss returns this rank's loss as it is: the NCCL communicator
  // reduces device memory only, and the job reports rank 0's loss.
  // FinalBarrier: an NCCL barrier bounded by GpuJobOptions::timeout.

  // For Abort() (any thread) and bytes_sent().
  NcclCommunicator& communicator() override = 0;
  GpuZeroHook& hook() override = 0;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_GPU_GPU_JOB_H_
