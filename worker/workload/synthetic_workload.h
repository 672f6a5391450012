// The `synthetic` workload: deterministic pseudo-random gradients of a
// configured size, to measure the communication and optimizer path alone.
//
// Parameters are 1-D tensors "t0", "t1", ... of tensor_numel elements each
// (the last one shorter when tensor_numel does not divide num_parameters).
// Initial values are uniform in [-1, 1) from the seed, identical on every
// rank; the gradient of tensor i at step s on rank r is uniform in [-1, 1)
// from (seed, r, s, i). Generation is a vectorised counter hash (random.h),
// so it costs far less than the collectives it feeds.
#ifndef PSHARD_WORKER_WORKLOAD_SYNTHETIC_WORKLOAD_H_
#define PSHARD_WORKER_WORKLOAD_SYNTHETIC_WORKLOAD_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/workload/fixed_parameters_workload.h"

namespace pshard::worker {

class SyntheticWorkload final : public FixedParametersWorkload {
 public:
  // tensor_numel 0 means the default, 1048576. InvalidArgument for
  // num_parameters < 1 or tensor_numel < 0.
  static absl::StatusOr<std::unique_ptr<SyntheticWorkload>> Create(
      const v1::SyntheticWorkload& spec, uint64_t seed, int rank);

  absl::Status InitializeParameters(absl::Span<float* const> params) override;
  // Returns NaN: there is no loss.
  absl::StatusOr<double> ComputeGradients(int64_t step,
                                          absl::Span<const float* const> params,
                                          absl::Span<float* const> grads,
                                          GradientSink& sink) override;
  int64_t samples_per_step() const override { return 0; }

 private:
  SyntheticWorkload(std::vector<ParameterInfo> params, uint64_t seed, int rank)
      : FixedParametersWorkload("synthetic", std::move(params)),
        seed_(seed),
        rank_(rank) {}

  uint64_t seed_;
  int rank_;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_WORKLOAD_SYNTHETIC_WORKLOAD_H_
