// Workload: something that produces gradients for the hook — a real model
// (mlp), deterministic synthetic gradients, or gradients replayed from files.
#ifndef PSHARD_WORKER_WORKLOAD_WORKLOAD_H_
#define PSHARD_WORKER_WORKLOAD_WORKLOAD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pshard/v1/job_spec.pb.h"

namespace pshard::worker {

struct ParameterInfo {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
};

// Told when a parameter's gradient is final, so its bucket can be reduced
// while backward continues (DDP's autograd hook); and asked, before the
// forward reads a parameter, to make sure its last update has arrived (the
// hook's overlap of the parameter broadcast with the next forward).
class GradientSink {
 public:
  virtual ~GradientSink() = default;
  virtual void GradientReady(int param_index) = 0;
  // Returns once parameter `param_index` may be read. The default: at once
  // (every update arrived before the step ended).
  virtual absl::Status WaitForParameter(int param_index) {
    (void)param_index;
    return absl::OkStatus();
  }
};

class Workload {
 public:
  virtual ~Workload() = default;

  // Parameters in model (forward) order. Stable for the workload's life.
  virtual const std::vector<ParameterInfo>& parameters() const = 0;

  // Writes initial values: params[i] points at parameters()[i].numel floats.
  // Every rank writes the same values (from the job seed, or a file).
  virtual absl::Status InitializeParameters(absl::Span<float* const> params) = 0;

  // Forward and backward of step `step` (1-based) on this rank's data.
  // Calls sink.WaitForParameter(i) before its forward first reads
  // parameter i (a workload that reads none needs not). Overwrites grads[i]
  // with the gradient of parameter i and calls
  // sink.GradientReady(i) as soon as it is final, in backward order (last
  // parameter first). Returns the loss, or NaN when the workload has none.
  virtual absl::StatusOr<double> ComputeGradients(
      int64_t step, absl::Span<const float* const> params,
      absl::Span<float* const> grads, GradientSink& sink) = 0;

  // Samples this rank processes per step (0 when not meaningful).
  virtual int64_t samples_per_step() const = 0;
};

// Builds the workload that `spec` (valid, defaults applied) names, for `rank`
// of `world_size`, running gradient_accumulation_steps micro-batches per step
// when that is > 1 (accumulating_workload.h). InvalidArgument/NotFound for
// unreadable replay files.
absl::StatusOr<std::unique_ptr<Workload>> CreateWorkload(
    const v1::JobSpec& spec, int rank, int world_size);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_WORKLOAD_WORKLOAD_H_
