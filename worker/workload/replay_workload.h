// The `replay` workload: parameters and per-step gradients read from
// safetensors files, so pshard's results can be checked exactly against
// another implementation fed the same gradients.
//
// Parameters: every tensor of params_path, ordered by data offset in the file,
// with the names and shapes stored there (F32 only). Gradients of step s
// (1-based) on rank r: <gradients_dir>/step-<s>/rank-<r>.safetensors, holding
// exactly one F32 tensor per parameter, keyed by parameter name, of the same
// shape. A step's file is read and checked completely before any gradient is
// reported ready, so a bad file fails the step without half-signalling it.
#ifndef PSHARD_WORKER_WORKLOAD_REPLAY_WORKLOAD_H_
#define PSHARD_WORKER_WORKLOAD_REPLAY_WORKLOAD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/workload/fixed_parameters_workload.h"

namespace pshard::worker {

class ReplayWorkload final : public FixedParametersWorkload {
 public:
  // Reads the parameters file. NotFound: no such file; InvalidArgument: not a
  // valid F32 safetensors file, or it holds no tensors.
  static absl::StatusOr<std::unique_ptr<ReplayWorkload>> Create(
      const v1::ReplayWorkload& spec, int rank);

  // Re-reads the parameters file. InvalidArgument if its tensors changed
  // since Create.
  absl::Status InitializeParameters(absl::Span<float* const> params) override;
  // NotFound: the step's file is missing. InvalidArgument (naming the file
  // and the tensor): a tensor missing, extra or of the wrong shape; step < 1.
  // Returns NaN: there is no loss.
  absl::StatusOr<double> ComputeGradients(int64_t step,
                                          absl::Span<const float* const> params,
                                          absl::Span<float* const> grads,
                                          GradientSink& sink) override;
  int64_t samples_per_step() const override { return 0; }

  // The gradient file of `step` for this rank.
  std::string GradientPath(int64_t step) const;

 private:
  ReplayWorkload(std::string params_path, std::string gradients_dir, int rank,
                 std::vector<ParameterInfo> params)
      : FixedParametersWorkload("replay", std::move(params)),
        params_path_(std::move(params_path)),
        gradients_dir_(std::move(gradients_dir)),
        rank_(rank) {}

  std::string params_path_;
  std::string gradients_dir_;
  int rank_;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_WORKLOAD_REPLAY_WORKLOAD_H_
