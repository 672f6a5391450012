// The definition sharded training is checked against: one process, the
// unsharded optimizer, stepping every parameter on the gradient averaged over
// all ranks (each rank's gradients from its own instance of the job's
// workload).
#ifndef PSHARD_TESTS_WORKER_REFERENCE_H_
#define PSHARD_TESTS_WORKER_REFERENCE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/io/safetensors.h"

namespace pshard::testing {

// Parameters (names, shapes, values) after spec.steps() steps on
// spec.world_size() ranks; with the optimizer's max_grad_norm, the averaged
// gradients clipped as torch's clip_grad_norm_ does, each step's total norm
// before clipping appended to `grad_norms` when given.
absl::StatusOr<std::vector<worker::SafetensorsTensor>> ReferenceParameters(
    const v1::JobSpec& spec, std::vector<double>* grad_norms = nullptr);

// OK if `actual` has the same names and shapes in the same order and every
// value is within 1e-6 relative (absolute below 1) of `expected`.
absl::Status CompareParameters(
    const std::vector<worker::SafetensorsTensor>& actual,
    const std::vector<worker::SafetensorsTensor>& expected);

}  // namespace pshard::testing

#endif  // PSHARD_TESTS_WORKER_REFERENCE_H_
