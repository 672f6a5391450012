#include "tests/worker/reference.h"

#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "worker/hook/clip_reference.h"
#include "worker/optim/shard_optimizer.h"
#include "worker/workload/workload.h"

namespace pshard::testing {

absl::StatusOr<std::vector<worker::SafetensorsTensor>> ReferenceParameters(
    const v1::JobSpec& spec, std::vector<double>* grad_norms) {
  const int world = spec.world_size();
  std::vector<std::unique_ptr<worker::Workload>> workloads;
  for (int r = 0; r < world; ++r) {
    ASSIGN_OR_RETURN(auto w, worker::CreateWorkload(spec, r, world));
    workloads.push_back(std::move(w));
  }
  const auto& infos = workloads[0]->parameters();
  const int n = static_cast<int>(infos.size());
  std::vector<worker::SafetensorsTensor> params(n);
  std::vector<float*> ptrs;
  for (int i = 0; i < n; ++i) {
    params[i].name = infos[i].name;
    params[i].shape = infos[i].shape.empty()
                          ? std::vector<int64_t>{infos[i].numel}
                          : infos[i].shape;
    params[i].data.resize(infos[i].numel);
    ptrs.push_back(params[i].data.data());
  }
  RETURN_IF_ERROR(workloads[0]->InitializeParameters(ptrs));
  ASSIGN_OR_RETURN(auto optimizer,
                   worker::ShardOptimizer::Create(spec.optimizer()));
  for (int i = 0; i < n; ++i) {
    RETURN_IF_ERROR(
        optimizer->AddBucket(i, {{infos[i].name, 0, infos[i].numel}}));
  }
  struct NullSink : worker::GradientSink {
    void GradientReady(int) override {}
  } sink;
  std::vector<const float*> cptrs(ptrs.begin(), ptrs.end());
  for (int64_t step = 1; step <= spec.steps(); ++step) {
    std::vector<std::vector<float>> sum(n);
    for (int r = 0; r < world; ++r) {
      std::vector<std::vector<float>> grads(n);
      std::vector<float*> gptrs;
      for (int i = 0; i < n; ++i) {
        grads[i].resize(infos[i].numel);
        gptrs.push_back(grads[i].data());
      }
      RETURN_IF_ERROR(
          workloads[r]->ComputeGradients(step, cptrs, gptrs, sink).status());
      for (int i = 0; i < n; ++i) {
        if (r == 0) {
          sum[i] = std::move(grads[i]);
        } else {
          for (size_t k = 0; k < sum[i].size(); ++k) sum[i][k] += grads[i][k];
        }
      }
    }
    for (int i = 0; i < n; ++i) {
      for (float& g : sum[i]) g /= static_cast<float>(world);
    }
    if (spec.optimizer().has_max_grad_norm()) {
      const double norm_type = spec.optimizer().norm_type();
      const double total = worker::ClipGradNormLikeTorch(
          sum, spec.optimizer().max_grad_norm(), norm_type == 0 ? 2 : norm_type);
      if (grad_norms != nullptr) grad_norms->push_back(total);
    }
    for (int i = 0; i < n; ++i) {
      RETURN_IF_ERROR(optimizer->Step(i, ptrs[i], sum[i].data()));
    }
  }
  return params;
}

absl::Status CompareParameters(
    const std::vector<worker::SafetensorsTensor>& actual,
    const std::vector<worker::SafetensorsTensor>& expected) {
  if (actual.size() != expected.size()) {
    return absl::InternalError(absl::StrCat("got ", actual.size(),
                                            " tensors, expected ",
                                            expected.size()));
  }
  for (size_t i = 0; i < actual.size(); ++i) {
    const auto& a = actual[i];
    const auto& e = expected[i];
    if (a.name != e.name || a.shape != e.shape) {
      return absl::InternalError(absl::StrCat(
          "tensor ", i, " is ", a.name, "[", absl::StrJoin(a.shape, ","),
          "], expected ", e.name, "[", absl::StrJoin(e.shape, ","), "]"));
    }
    for (size_t k = 0; k < a.data.size(); ++k) {
      const double x = a.data[k], y = e.data[k];
      if (!(std::abs(x - y) <= 1e-6 * std::max(1.0, std::abs(y)))) {
        return absl::InternalError(absl::StrCat(a.name, "[", k, "] is ", x,
                                                ", expected ", y));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace pshard::testing
