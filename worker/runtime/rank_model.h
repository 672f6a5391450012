// RankModel: one rank's parameters and its ZeRO hook, as a checkpoint sees
// them. CheckpointSaver writes this rank's shard from one, and
// ResumeFromCheckpoint loads a checkpoint into one, so that a built-in job
// (its StepEngine) and a program of the user's own (its Session,
// worker/api/session.h) write and read checkpoints the same way.
#ifndef PSHARD_WORKER_RUNTIME_RANK_MODEL_H_
#define PSHARD_WORKER_RUNTIME_RANK_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "worker/hook/zero_hook.h"
#include "worker/workload/workload.h"

namespace pshard::worker {

class RankModel {
 public:
  virtual ~RankModel() = default;

  // The hook (host or device memory: GpuZeroHook is a ZeroHook), for the
  // layout, the owners and the optimizer state once the first step ran.
  virtual ZeroHook& hook() = 0;

  // The parameters, in registration (forward) order.
  virtual const std::vector<ParameterInfo>& parameters() const = 0;

  // Copies elements [offset, offset + numel) of parameter `index` (index
  // into parameters(); the caller keeps the index and the range inside the
  // parameter) to host memory at `out`, which holds numel floats: only
  // those elements are read (a checkpoint under SHARDED copies the slice
  // this rank owns, not the whole parameter). Once the parameter's last
  // update has landed (overlap_param_broadcast); bf16 widened exactly.
  virtual absl::Status CopyParameterRangeToHost(int index, int64_t offset,
                                                int64_t numel, float* out) {
    if (numel < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(numel, " elements of parameter ", index));
    }
    absl::Status landed = hook().WaitForParameter(index);
    if (!landed.ok()) return landed;
    return hook().ReadParameterRange(index, offset,
                                     absl::MakeSpan(out, numel));
  }

  // The same for a range this rank owns, as its optimizer holds it: what a
  // checkpoint keeps. Under mixed precision these are the fp32 master
  // weights, not the (rounded) model values; otherwise the parameters
  // (ZeroHook::ReadOwnedParameter, once the parameter's update has
  // landed).
  virtual absl::Status CopyOwnedParameterRangeToHost(int index, int64_t offset,
                                                     int64_t numel,
                                                     float* out) {
    absl::Status landed = hook().WaitForParameter(index);
    if (!landed.ok()) return landed;
    return hook().ReadOwnedParameter(index, offset,
                                     absl::MakeSpan(out, numel));
  }

  // The whole parameter `index` (its numel floats at `out`).
  absl::Status CopyParameterToHost(int index, float* out) {
    return CopyParameterRangeToHost(index, 0, parameters()[index].numel, out);
  }

  // Before the first step: replaces every parameter's values (a resume from
  // a checkpoint), in parameters() order, each of its numel.
  // InvalidArgument: the wrong count or size (CheckValuesToUpload), and
  // then nothing is changed.
  virtual absl::Status UploadParameters(
      const std::vector<std::vector<float>>& values) = 0;

 protected:
  // UploadParameters' checks: one vector per parameter, each of its numel.
  // InvalidArgument names the count or the parameter.
  static absl::Status CheckValuesToUpload(
      const std::vector<ParameterInfo>& params,
      const std::vector<std::vector<float>>& values) {
    if (values.size() != params.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameters to load: ", values.size(),
                       " tensors for a model of ", params.size()));
    }
    for (size_t i = 0; i < params.size(); ++i) {
      if (static_cast<int64_t>(values[i].size()) != params[i].numel) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter \"", params[i].name, "\" to load has ",
            values[i].size(), " elements, the model's has ", params[i].numel));
      }
    }
    return absl::OkStatus();
  }
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_RANK_MODEL_H_
