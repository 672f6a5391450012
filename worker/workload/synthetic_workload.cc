#include "worker/workload/synthetic_workload.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/workload/random.h"

namespace pshard::worker {
namespace {

constexpr int64_t kDefaultTensorNumel = 1048576;
// At most this many tensors: keeps the parameter list (and the hook's
// per-parameter bookkeeping) bounded whatever the spec says.
constexpr int64_t kMaxTensors = 1 << 20;

constexpr uint64_t kTagInit = 0x73796e2d696e6974ULL;  // "syn-init"
constexpr uint64_t kTagGrad = 0x73796e2d67726164ULL;  // "syn-grad"

}  // namespace

absl::StatusOr<std::unique_ptr<SyntheticWorkload>> SyntheticWorkload::Create(
    const v1::SyntheticWorkload& spec, uint64_t seed, int rank) {
  const int64_t total = spec.num_parameters();
  const int64_t per_tensor =
      spec.tensor_numel() == 0 ? kDefaultTensorNumel : spec.tensor_numel();
  if (total < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic: num_parameters must be >= 1, got ", total));
  }
  if (per_tensor < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic: tensor_numel must be >= 1, got ", per_tensor));
  }
  const int64_t count = (total - 1) / per_tensor + 1;
  if (count > kMaxTensors) {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic: ", total, " parameters in tensors of ", per_tensor,
        " make ", count, " tensors, more than ", kMaxTensors));
  }
  std::vector<ParameterInfo> params;
  params.reserve(count);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t numel = std::min(per_tensor, total - i * per_tensor);
    params.push_back({absl::StrCat("t", i), {numel}, numel});
  }
  return std::unique_ptr<SyntheticWorkload>(
      new SyntheticWorkload(std::move(params), seed, rank));
}

absl::Status SyntheticWorkload::InitializeParameters(
    absl::Span<float* const> params) {
  RETURN_IF_ERROR(CheckBuffers(params.size()));
  for (size_t i = 0; i < parameters().size(); ++i) {
    FillUniformSymmetric(StreamKey(seed_, {kTagInit, i}), params[i],
                         parameters()[i].numel);
  }
  return absl::OkStatus();
}

absl::StatusOr<double> SyntheticWorkload::ComputeGradients(
    int64_t step, absl::Span<const float* const> params,
    absl::Span<float* const> grads, GradientSink& sink) {
  RETURN_IF_ERROR(CheckBuffers(params.size(), grads.size()));
  for (size_t k = parameters().size(); k-- > 0;) {
    FillUniformSymmetric(
        StreamKey(seed_, {kTagGrad, uint64_t(rank_), uint64_t(step), k}),
        grads[k], parameters()[k].numel);
    sink.GradientReady(static_cast<int>(k));
  }
  return std::numeric_limits<double>::quiet_NaN();
}

}  // namespace pshard::worker
