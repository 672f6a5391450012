// GpuJob for builds without CUDA: Create always fails with Unavailable.
#include <memory>
#include <utility>

#include "worker/gpu/cuda_status.h"
#include "worker/gpu/gpu_job.h"

namespace pshard::worker {

absl::StatusOr<std::unique_ptr<GpuJob>> GpuJob::Create(const v1::JobSpec&,
                                                       const GpuJobOptions&,
                                                       KvClient&,
                                                       AssignmentProvider) {
  return absl::UnavailableError(gpu::kBuiltWithoutCuda);
}

}  // namespace pshard::worker
