#include "worker/workload/fixed_parameters_workload.h"

#include "absl/strings/str_cat.h"

namespace pshard::worker {

absl::Status FixedParametersWorkload::CheckBuffers(size_t num_params) const {
  if (num_params == params_.size()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      kind_, ": expected ", params_.size(), " parameter buffers, got ",
      num_params));
}

absl::Status FixedParametersWorkload::CheckBuffers(size_t num_params,
                                                   size_t num_grads) const {
  if (num_params == params_.size() && num_grads == params_.size()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      kind_, ": expected ", params_.size(),
      " parameter and gradient buffers, got ", num_params, " and ",
      num_grads));
}

}  // namespace pshard::worker
