// FixedParametersWorkload: what the built-in workloads (mlp, synthetic,
// replay) share — a parameter list fixed when the workload is created, and
// the check that each call was handed one buffer per parameter, with an
// error that names the workload.
#ifndef PSHARD_WORKER_WORKLOAD_FIXED_PARAMETERS_WORKLOAD_H_
#define PSHARD_WORKER_WORKLOAD_FIXED_PARAMETERS_WORKLOAD_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "worker/workload/workload.h"

namespace pshard::worker {

class FixedParametersWorkload : public Workload {
 public:
  const std::vector<ParameterInfo>& parameters() const final {
    return params_;
  }

 protected:
  // `kind` ("mlp", "synthetic", ...) starts every error message.
  FixedParametersWorkload(std::string kind, std::vector<ParameterInfo> params)
      : kind_(std::move(kind)), params_(std::move(params)) {}

  // InvalidArgument "<kind>: expected N parameter buffers, got M" unless
  // `num_params` is the number of parameters.
  absl::Status CheckBuffers(size_t num_params) const;
  // InvalidArgument "<kind>: expected N parameter and gradient buffers, got
  // M and K" unless both counts are the number of parameters.
  absl::Status CheckBuffers(size_t num_params, size_t num_grads) const;

 private:
  const std::string kind_;
  const std::vector<ParameterInfo> params_;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_WORKLOAD_FIXED_PARAMETERS_WORKLOAD_H_
