// Private to :gpu_workloads: the one way a device workload takes its initial
// parameters from a host workload (the GPU mlp and the host adapter both
// start from exactly the CPU workload's values).
#ifndef PSHARD_WORKER_GPU_INITIAL_PARAMETERS_H_
#define PSHARD_WORKER_GPU_INITIAL_PARAMETERS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "worker/workload/workload.h"

namespace pshard::worker {

// Runs host.InitializeParameters into `host_buffers` (one per parameter, of
// its numel), copies them into the device buffers `params` on `stream` and
// waits for the copies. Errors start with `who`.
absl::Status UploadInitialParameters(Workload& host,
                                     absl::Span<float* const> host_buffers,
                                     absl::Span<float* const> params,
                                     cudaStream_t stream, absl::string_view who);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_GPU_INITIAL_PARAMETERS_H_
