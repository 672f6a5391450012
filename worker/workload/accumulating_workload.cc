#include "worker/workload/accumulating_workload.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pshard::worker {
namespace {

class HostArithmetic final : public AccumulationArithmetic {
 public:
  absl::StatusOr<std::vector<float*>> AllocateScratch(
      const std::vector<ParameterInfo>& params) override {
    std::vector<float*> pointers;
    for (const ParameterInfo& info : params) {
      scratch_.emplace_back(info.numel);
      pointers.push_back(scratch_.back().data());
    }
    return pointers;
  }
  absl::Status Add(float* sum, const float* micro, int64_t n) override {
    for (int64_t k = 0; k < n; ++k) sum[k] += micro[k];
    return absl::OkStatus();
  }
  absl::Status AddAndDivide(float* sum, const float* micro, int64_t n,
                            float divisor) override {
    for (int64_t k = 0; k < n; ++k) sum[k] = (sum[k] + micro[k]) / divisor;
    return absl::OkStatus();
  }

 private:
  std::vector<std::vector<float>> scratch_;
};

// The last micro-batch's sink: each gradient, as it becomes final, joins the
// sum in `grads`, is divided by the number of micro-batches, and goes on to
// the hook. The first failure is kept (the step then fails with it).
class FinishingSink final : public GradientSink {
 public:
  FinishingSink(absl::Span<float* const> grads,
                const std::vector<float*>& last,
                const std::vector<ParameterInfo>& infos, int micro_batches,
                AccumulationArithmetic& arithmetic, GradientSink& next)
      : grads_(grads), last_(last), infos_(infos),
        divisor_(static_cast<float>(micro_batches)), arithmetic_(arithmetic),
        next_(next) {}

  void GradientReady(int i) override {
    if (!error_.ok()) return;
    error_ = arithmetic_.AddAndDivide(grads_[i], last_[i], infos_[i].numel,
                                      divisor_);
    if (error_.ok()) next_.GradientReady(i);
  }
  absl::Status WaitForParameter(int i) override {
    return next_.WaitForParameter(i);
  }

  const absl::Status& error() const { return error_; }

 private:
  const absl::Span<float* const> grads_;
  const std::vector<float*>& last_;
  const std::vector<ParameterInfo>& infos_;
  const float divisor_;
  AccumulationArithmetic& arithmetic_;
  GradientSink& next_;
  absl::Status error_;
};

// The earlier micro-batches' sink: their gradients go nowhere, but their
// forwards still wait for the parameters' last updates (with
// overlap_param_broadcast the first micro-batch's forward is the first to
// read them).
class SilentSink final : public GradientSink {
 public:
  explicit SilentSink(GradientSink& next) : next_(next) {}
  void GradientReady(int) override {}
  absl::Status WaitForParameter(int i) override {
    return next_.WaitForParameter(i);
  }

 private:
  GradientSink& next_;
};

}  // namespace

std::unique_ptr<AccumulationArithmetic> NewHostAccumulationArithmetic() {
  return std::make_unique<HostArithmetic>();
}

AccumulatingWorkload::AccumulatingWorkload(
    std::unique_ptr<Workload> inner, int micro_batches,
    std::unique_ptr<AccumulationArithmetic> arithmetic,
    std::vector<float*> scratch)
    : inner_(std::move(inner)),
      micro_batches_(micro_batches),
      arithmetic_(std::move(arithmetic)),
      scratch_(std::move(scratch)) {}

absl::StatusOr<std::unique_ptr<Workload>> AccumulatingWorkload::Create(
    std::unique_ptr<Workload> inner, int micro_batches,
    std::unique_ptr<AccumulationArithmetic> arithmetic) {
  if (inner == nullptr) {
    return absl::InvalidArgumentError("no workload to accumulate");
  }
  if (micro_batches < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient_accumulation_steps must be >= 1, got ", micro_batches));
  }
  if (arithmetic == nullptr) {
    return absl::InvalidArgumentError("no accumulation arithmetic");
  }
  ASSIGN_OR_RETURN(std::vector<float*> scratch,
                   arithmetic->AllocateScratch(inner->parameters()));
  return std::unique_ptr<Workload>(
      new AccumulatingWorkload(std::move(inner), micro_batches,
                               std::move(arithmetic), std::move(scratch)));
}

absl::StatusOr<double> AccumulatingWorkload::ComputeGradients(
    int64_t step, absl::Span<const float* const> params,
    absl::Span<float* const> grads, GradientSink& sink) {
  const int n = micro_batches_;
  if (n == 1) return inner_->ComputeGradients(step, params, grads, sink);
  const int64_t first = (step - 1) * n + 1;
  const std::vector<ParameterInfo>& infos = inner_->parameters();
  const absl::Span<float* const> scratch(scratch_);
  SilentSink silent(sink);
  // Micro-batch 1 into `grads`, 2..N-1 added to it: nothing communicated.
  ASSIGN_OR_RETURN(double loss_sum,
                   inner_->ComputeGradients(first, params, grads, silent));
  for (int m = 1; m + 1 < n; ++m) {
    ASSIGN_OR_RETURN(double loss, inner_->ComputeGradients(first + m, params,
                                                           scratch, silent));
    loss_sum += loss;
    for (size_t i = 0; i < infos.size(); ++i) {
      RETURN_IF_ERROR(arithmetic_->Add(grads[i], scratch_[i], infos[i].numel));
    }
  }
  // The last: its gradients reach the hook as they become final.
  FinishingSink finish(grads, scratch_, infos, n, *arithmetic_, sink);
  ASSIGN_OR_RETURN(double loss, inner_->ComputeGradients(first + n - 1, params,
                                                         scratch, finish));
  RETURN_IF_ERROR(finish.error());
  loss_sum += loss;
  return loss_sum / n;
}

}  // namespace pshard::worker
