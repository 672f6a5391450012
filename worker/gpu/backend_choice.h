// Which device a worker uses (--device) and which backend a job runs on
// (JobSpec.backend), decided in one place:
//
//   --device=cpu     -> no GPU; backend AUTO/GLOO -> Gloo, NCCL -> error
//   --device=auto    -> cuda:0 when a CUDA device is present, else cpu
//   --device=cuda:N  -> that device (error if absent)
//   backend AUTO     -> NCCL when the worker has a GPU, Gloo otherwise
//   backend NCCL     -> NCCL (error without a GPU); GLOO -> Gloo
//
// CUDA-free: the device count is a parameter (CudaDeviceCount() in the
// worker, a constant in tests).
#ifndef PSHARD_WORKER_GPU_BACKEND_CHOICE_H_
#define PSHARD_WORKER_GPU_BACKEND_CHOICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pshard/v1/job_spec.pb.h"

namespace pshard::worker {

// The worker's device: -1 for the CPU, else a CUDA device index.
struct WorkerDevice {
  int cuda_device = -1;
  // "cpu" or "cuda:N" (what the worker reports to the coordinator).
  std::string name = "cpu";
  bool is_gpu() const { return cuda_device >= 0; }
};

// Resolves a --device flag value given `cuda_device_count` devices
// (`why_no_cuda` explains a count of 0). InvalidArgument for a malformed
// value; Unavailable for cuda:N without that device.
absl::StatusOr<WorkerDevice> ResolveWorkerDevice(absl::string_view flag,
                                                 int cuda_device_count,
                                                 absl::string_view why_no_cuda);

enum class CommBackend { kGloo, kNccl };

// The backend of a job on a worker with `device`. FailedPrecondition when the
// job asks for NCCL and the worker has no GPU.
absl::StatusOr<CommBackend> ChooseBackend(v1::JobSpec::Backend requested,
                                          const WorkerDevice& device);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_GPU_BACKEND_CHOICE_H_
