#include "worker/runtime/engine_factory.h"

#include <utility>

#include "common/status_macros.h"
#include "worker/gpu/gpu_job.h"
#include "worker/runtime/cpu_job.h"

namespace pshard::worker {

absl::StatusOr<std::unique_ptr<StepEngine>> CreateStepEngine(
    const v1::JobSpec& spec, const StepEngineOptions& options, KvClient& kv,
    AssignmentProvider provider) {
  ASSIGN_OR_RETURN(CommBackend backend,
                   ChooseBackend(spec.backend(), options.device));
  if (backend == CommBackend::kNccl) {
    GpuJobOptions gpu;
    gpu.job_id = options.job_id;
    gpu.epoch = options.epoch;
    gpu.rank = options.rank;
    gpu.world_size = options.world_size;
    gpu.device = options.device.cuda_device;
    gpu.timeout = options.timeout;
    ASSIGN_OR_RETURN(std::unique_ptr<GpuJob> job,
                     GpuJob::Create(spec, gpu, kv, std::move(provider)));
    return std::unique_ptr<StepEngine>(std::move(job));
  }
  CpuJobOptions cpu;
  cpu.rank = options.rank;
  cpu.world_size = options.world_size;
  cpu.hostname = options.gloo_hostname;
  cpu.timeout = options.timeout;
  ASSIGN_OR_RETURN(std::unique_ptr<CpuJob> job,
                   CpuJob::Create(spec, cpu, kv, std::move(provider)));
  return std::unique_ptr<StepEngine>(std::move(job));
}

}  // namespace pshard::worker
