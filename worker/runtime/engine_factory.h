// CreateStepEngine: the one place that turns a job's spec and the worker's
// device into a StepEngine: GpuJob (NCCL + CUDA) when ChooseBackend
// (worker/gpu/backend_choice.h) picks NCCL, CpuJob (Gloo) otherwise.
#ifndef PSHARD_WORKER_RUNTIME_ENGINE_FACTORY_H_
#define PSHARD_WORKER_RUNTIME_ENGINE_FACTORY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/comm/kv_store.h"
#include "worker/gpu/backend_choice.h"
#include "worker/hook/zero_hook.h"
#include "worker/runtime/step_engine.h"

namespace pshard::worker {

struct StepEngineOptions {
  std::string job_id;
  int64_t epoch = 0;
  int rank = 0;
  int world_size = 1;
  // The worker's device (--device).
  WorkerDevice device;
  // Where Gloo listens and what it publishes to peers (CPU engine only).
  std::string gloo_hostname = "127.0.0.1";
  // JobSpec.collective_timeout_seconds.
  absl::Duration timeout = absl::Seconds(60);
};

// `spec` valid with defaults applied. Errors: FailedPrecondition when the
// job asks for NCCL on a worker without a GPU (ChooseBackend); Unavailable
// for NCCL in a build without CUDA; otherwise those of CpuJob::Create or
// GpuJob::Create.
absl::StatusOr<std::unique_ptr<StepEngine>> CreateStepEngine(
    const v1::JobSpec& spec, const StepEngineOptions& options, KvClient& kv,
    AssignmentProvider provider);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_ENGINE_FACTORY_H_
