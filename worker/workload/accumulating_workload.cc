#include "worker/workload/accumulating_workload.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pshard::worker {
namespace {

// The last micro-batch's sink: each gradient, as it becomes final, joins the
// sum in `grads`, is divided by the number of micro-batches, and goes on to
// the hook.
class FinishingSink final : public GradientSink {
 public:
  FinishingSink(absl::Span<float* const> grads,
                const std::vector<float*>& last,
                const std::vector<ParameterInfo>& infos, int micro_batches,
                GradientSink& next)
      : grads_(grads), last_(last), infos_(infos),
        divisor_(static_cast<float>(micro_batches)), next_(next) {}

  void GradientReady(int i) override {
    float* g = grads_[i];
    const float* s = last_[i];
    for (int64_t k = 0; k < infos_[i].numel; ++k) g[k] = (g[k] + s[k]) / divisor_;
    next_.GradientReady(i);
  }

 private:
  const absl::Span<float* const> grads_;
  const std::vector<float*>& last_;
  const std::vector<ParameterInfo>& infos_;
  const float divisor_;
  GradientSink& next_;
};

class SilentSink final : public GradientSink {
 public:
  void GradientReady(int) override {}
};

}  // namespace

AccumulatingWorkload::AccumulatingWorkload(std::unique_ptr<Workload> inner,
                                           int micro_batches)
    : inner_(std::move(inner)), micro_batches_(micro_batches) {
  for (const ParameterInfo& info : inner_->parameters()) {
    scratch_.emplace_back(info.numel);
    scratch_ptrs_.push_back(scratch_.back().data());
  }
}

absl::StatusOr<std::unique_ptr<Workload>> AccumulatingWorkload::Create(
    std::unique_ptr<Workload> inner, int micro_batches) {
  if (inner == nullptr) {
    return absl::InvalidArgumentError("no workload to accumulate");
  }
  if (micro_batches < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient_accumulation_steps must be >= 1, got ", micro_batches));
  }
  return std::unique_ptr<Workload>(
      new AccumulatingWorkload(std::move(inner), micro_batches));
}

absl::StatusOr<double> AccumulatingWorkload::ComputeGradients(
    int64_t step, absl::Span<const float* const> params,
    absl::Span<float* const> grads, GradientSink& sink) {
  const int n = micro_batches_;
  if (n == 1) return inner_->ComputeGradients(step, params, grads, sink);
  const int64_t first = (step - 1) * n + 1;
  const std::vector<ParameterInfo>& infos = inner_->parameters();
  const absl::Span<float* const> scratch(scratch_ptrs_);
  SilentSink silent;
  // Micro-batch 1 into `grads`, 2..N-1 added to it: nothing communicated.
  ASSIGN_OR_RETURN(double loss_sum,
                   inner_->ComputeGradients(first, params, grads, silent));
  for (int m = 1; m + 1 < n; ++m) {
    ASSIGN_OR_RETURN(double loss, inner_->ComputeGradients(first + m, params,
                                                           scratch, silent));
    loss_sum += loss;
    for (size_t i = 0; i < infos.size(); ++i) {
      float* g = grads[i];
      const float* s = scratch_ptrs_[i];
      for (int64_t k = 0; k < infos[i].numel; ++k) g[k] += s[k];
    }
  }
  // The last: its gradients reach the hook as they become final.
  FinishingSink finish(grads, scratch_ptrs_, infos, n, sink);
  ASSIGN_OR_RETURN(double loss, inner_->ComputeGradients(first + n - 1, params,
                                                         scratch, finish));
  loss_sum += loss;
  return loss_sum / n;
}

}  // namespace pshard::worker
