// The `mlp` workload: a real multi-layer perceptron trained by regression on a
// fixed random teacher network, so the loss really falls.
//
// Model: Linear(with bias) layers with ReLU between them (none after the
// last), parameters named as PyTorch's nn.Sequential names them —
// "layers.0.weight" [out, in] (row-major), "layers.0.bias" [out],
// "layers.2.weight", ... (odd indices are the ReLUs). Initialised like
// nn.Linear: weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), from the
// job seed, identical on every rank.
//
// Data: inputs x ~ N(0, 1) drawn per (seed, rank, step); targets y =
// teacher(x), where the teacher has the same shape and weights ~
// U(-sqrt(6/fan_in), sqrt(6/fan_in)) (Kaiming for ReLU, so its outputs have
// unit-order variance) from the seed. Loss: mean squared error over the
// rank's batch and outputs (nn.MSELoss(reduction="mean")); the hook averages
// gradients over ranks.
//
// Learning it: for a 32 -> 64 -> 64 -> 8 net with batch 32, the loss on a
// held-out batch falls to about a third within 100 steps with plain SGD lr
// 0.2 (mlp_workload_test); examples/mlp_adam_2workers.json's 64 -> 256 -> 256
// -> 16, batch 128, Adam lr 1e-3 reaches 15% of the initial loss in 100 steps.
//
// Backward signals a layer's bias, then its weight, once both gradients are
// computed and the layer's weight has been read for the last time, so a hook
// may update those parameters in place as soon as it is told.
//
// Forward and backward use OpenBLAS sgemm; see blas_threads.h for threads.
#ifndef PSHARD_WORKER_WORKLOAD_MLP_WORKLOAD_H_
#define PSHARD_WORKER_WORKLOAD_MLP_WORKLOAD_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/workload/fixed_parameters_workload.h"

namespace pshard::worker {

class MlpWorkload final : public FixedParametersWorkload {
 public:
  // `spec` must be valid (ValidateJobSpec). InvalidArgument for a shape that
  // is out of range or whose buffers would exceed the address space.
  static absl::StatusOr<std::unique_ptr<MlpWorkload>> Create(
      const v1::MlpWorkload& spec, uint64_t seed, int rank);

  absl::Status InitializeParameters(absl::Span<float* const> params) override;
  // Not thread-safe: one call at a time (it reuses activation buffers).
  absl::StatusOr<double> ComputeGradients(int64_t step,
                                          absl::Span<const float* const> params,
                                          absl::Span<float* const> grads,
                                          GradientSink& sink) override;
  int64_t samples_per_step() const override { return batch_; }

  // The problem itself, for a device implementation that must step the same
  // numbers (worker/gpu): the teacher's weight and bias of each layer, in
  // that order, and the inputs of `step`'s batch (batch x input_dim floats
  // into `x`).
  const std::vector<std::vector<float>>& teacher() const { return teacher_; }
  void BatchInputs(int64_t step, float* x) const;

  // The loss of `params` on an arbitrary batch: the forward pass only. For
  // tests and evaluation; `step` selects the batch as in ComputeGradients.
  absl::StatusOr<double> Loss(int64_t step,
                              absl::Span<const float* const> params);

 private:
  MlpWorkload(std::vector<int> dims, int batch, uint64_t seed, int rank);

  // Writes x (inputs) and y (teacher outputs) of `step` into x_ and target_.
  void MakeBatch(int64_t step);
  // Forward through the student; fills pre_[l] and act_[l]; returns the loss
  // and leaves dL/d(output) in grad_out_. With a sink, waits for each
  // layer's parameters before reading them.
  absl::StatusOr<double> Forward(absl::Span<const float* const> params,
                                 GradientSink* sink = nullptr);

  std::vector<int> dims_;  // input, hidden..., output
  int batch_;
  uint64_t seed_;
  int rank_;
  std::vector<std::vector<float>> teacher_;  // weight, bias per layer
  // Buffers: act_[0] = x, act_[l] = relu(pre_[l-1]); pre_[l] = layer l's
  // pre-activation [batch, dims_[l+1]].
  std::vector<std::vector<float>> act_;
  std::vector<std::vector<float>> pre_;
  std::vector<float> target_;
  std::vector<float> teacher_act_[2];
  std::vector<float> delta_;       // dL/d(pre) of the current layer
  std::vector<float> delta_prev_;  // dL/d(act) of the layer below
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_WORKLOAD_MLP_WORKLOAD_H_
