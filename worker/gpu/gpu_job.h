// GpuJob: one rank of a job on a GPU, assembled from the job spec: the NCCL
// communicator (rendezvous through the job's KvClient), the GPU optimizer,
// the device-memory workload on a compute stream, and the GpuZeroHook. The
// worker runtime's JobRunner uses it for backend NCCL (see ChooseBackend)
// where it uses ZeroHook + Gloo on the CPU:
//
//   ASSIGN_OR_RETURN(auto job, GpuJob::Create(spec, options, kv, provider));
//   // publish &job->communicator() so that Abort() can reach it
//   for (step = 1..N) { ASSIGN_OR_RETURN(double loss, job->RunStep(step)); }
//   ASSIGN_OR_RETURN(auto params, job->DownloadParameters());  // output
#ifndef PSHARD_WORKER_GPU_GPU_JOB_H_
#define PSHARD_WORKER_GPU_GPU_JOB_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/comm/kv_store.h"
#include "worker/gpu/gpu_zero_hook.h"
#include "worker/gpu/nccl_communicator.h"
#include "worker/hook/zero_hook.h"
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
};

class GpuJob {
 public:
  // `spec` valid with defaults applied. Errors from the communicator (e.g.
  // DeadlineExceeded when peers do not show up), the optimizer, the workload
  // and the hook; Unavailable without CUDA.
  static absl::StatusOr<std::unique_ptr<GpuJob>> Create(
      const v1::JobSpec& spec, const GpuJobOptions& options, KvClient& kv,
      AssignmentProvider provider);

  virtual ~GpuJob() = default;

  // Step `step` (1-based): the workload's gradients on the device, the
  // hook's reduce -> owner's step -> broadcast per bucket, and the end of the
  // step. Returns the workload's loss (NaN when it has none). On error the
  // communicator has been aborted.
  virtual absl::StatusOr<double> RunStep(int64_t step) = 0;

  // For Abort() (any thread) and bytes_sent().
  virtual NcclCommunicator& communicator() = 0;
  virtual GpuZeroHook& hook() = 0;
  virtual const Workload& workload() const = 0;

  // Every parameter's values on the host, in parameters() order.
  virtual absl::StatusOr<std::vector<std::vector<float>>>
  DownloadParameters() = 0;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_GPU_GPU_JOB_H_
