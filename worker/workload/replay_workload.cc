#include "worker/workload/replay_workload.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "worker/io/safetensors.h"

namespace pshard::worker {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::vector<ParameterInfo> InfoOf(const std::vector<SafetensorsTensor>& tensors) {
  std::vector<ParameterInfo> infos;
  infos.reserve(tensors.size());
  for (const SafetensorsTensor& t : tensors) {
    infos.push_back(
        {t.name, t.shape, static_cast<int64_t>(t.data.size())});
  }
  return infos;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ReplayWorkload>> ReplayWorkload::Create(
    const v1::ReplayWorkload& spec, int rank) {
  if (spec.params_path().empty() || spec.gradients_dir().empty()) {
    return absl::InvalidArgumentError(
        "replay: params_path and gradients_dir are required");
  }
  ASSIGN_OR_RETURN(std::vector<SafetensorsTensor> tensors,
                   ReadSafetensors(spec.params_path()));
  if (tensors.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("replay: ", spec.params_path(), " holds no tensors"));
  }
  return std::unique_ptr<ReplayWorkload>(new ReplayWorkload(
      spec.params_path(), spec.gradients_dir(), rank, InfoOf(tensors)));
}

std::string ReplayWorkload::GradientPath(int64_t step) const {
  return absl::StrCat(gradients_dir_, "/step-", step, "/rank-", rank_,
                      ".safetensors");
}

absl::Status ReplayWorkload::InitializeParameters(
    absl::Span<float* const> params) {
  RETURN_IF_ERROR(CheckBuffers(params.size()));
  const std::vector<ParameterInfo>& expected = parameters();
  ASSIGN_OR_RETURN(std::vector<SafetensorsTensor> tensors,
                   ReadSafetensors(params_path_));
  const std::vector<ParameterInfo> now = InfoOf(tensors);
  bool same = now.size() == expected.size();
  for (size_t i = 0; same && i < now.size(); ++i) {
    same = now[i].name == expected[i].name && now[i].shape == expected[i].shape;
  }
  if (!same) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replay: ", params_path_, " changed since the job started"));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::copy(tensors[i].data.begin(), tensors[i].data.end(), params[i]);
  }
  return absl::OkStatus();
}

absl::StatusOr<double> ReplayWorkload::ComputeGradients(
    int64_t step, absl::Span<const float* const> params,
    absl::Span<float* const> grads, GradientSink& sink) {
  RETURN_IF_ERROR(CheckBuffers(params.size(), grads.size()));
  if (step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("replay: steps are 1-based, got ", step));
  }
  const std::string path = GradientPath(step);
  ASSIGN_OR_RETURN(std::vector<SafetensorsTensor> tensors,
                   ReadSafetensors(path));
  absl::flat_hash_map<std::string, SafetensorsTensor*> by_name;
  for (SafetensorsTensor& t : tensors) by_name[t.name] = &t;

  // Check everything before signalling anything.
  const std::vector<ParameterInfo>& infos = parameters();
  std::vector<const SafetensorsTensor*> found(infos.size());
  for (size_t i = 0; i < infos.size(); ++i) {
    auto it = by_name.find(infos[i].name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("replay: ", path, " has no gradient for parameter '",
                       infos[i].name, "'"));
    }
    if (it->second->shape != infos[i].shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "replay: ", path, ": gradient '", infos[i].name, "' has shape ",
          ShapeString(it->second->shape), ", the parameter has ",
          ShapeString(infos[i].shape)));
    }
    found[i] = it->second;
    by_name.erase(it);
  }
  if (!by_name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("replay: ", path, " holds tensor '",
                     by_name.begin()->first, "', which is not a parameter"));
  }
  for (size_t k = infos.size(); k-- > 0;) {
    std::copy(found[k]->data.begin(), found[k]->data.end(), grads[k]);
    sink.GradientReady(static_cast<int>(k));
  }
  return std::numeric_limits<double>::quiet_NaN();
}

}  // namespace pshard::worker
