// AccumulatingWorkload: gradient accumulation for the built-in workloads
// (JobSpec.gradient_accumulation_steps, DDP's no_sync): each optimizer step
// runs N micro-batches of the wrapped workload, sums their gradients in the
// step's gradient buffers (the hook's buckets) without telling the sink, and
// on the last micro-batch hands each gradient over — (sum + last) / N, the
// mean over the N micro-batches, as one batch N times larger gives — as soon
// as it is final, so that only the last micro-batch's backward overlaps the
// reductions.
//
// Micro-batch m (1..N) of optimizer step s is the wrapped workload's step
// (s - 1) * N + m: its data (mlp, synthetic) or recorded gradients (replay,
// gradients/step-<(s-1)*N+m>/) are those of that step, so a job restarted
// from a checkpoint at optimizer step k resumes with micro-batch k * N + 1.
//
// The sums run where the gradients live: host memory by default, device
// memory with the GPU engine's AccumulationArithmetic (worker/gpu), the same
// float operations in the same order either way.
#ifndef PSHARD_WORKER_WORKLOAD_ACCUMULATING_WORKLOAD_H_
#define PSHARD_WORKER_WORKLOAD_ACCUMULATING_WORKLOAD_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/workload/workload.h"

namespace pshard::worker {

// The element-wise arithmetic of accumulation on the memory the wrapped
// workload's gradients live in.
class AccumulationArithmetic {
 public:
  virtual ~AccumulationArithmetic() = default;
  // Room for one micro-batch's gradients: per parameter, numel floats
  // (owned by this object, valid while it lives).
  virtual absl::StatusOr<std::vector<float*>> AllocateScratch(
      const std::vector<ParameterInfo>& params) = 0;
  // sum[k] += micro[k], k < n.
  virtual absl::Status Add(float* sum, const float* micro, int64_t n) = 0;
  // sum[k] = (sum[k] + micro[k]) / divisor, k < n (IEEE division).
  virtual absl::Status AddAndDivide(float* sum, const float* micro, int64_t n,
                                    float divisor) = 0;
};

// Host memory (the default).
std::unique_ptr<AccumulationArithmetic> NewHostAccumulationArithmetic();

class AccumulatingWorkload final : public Workload {
 public:
  // InvalidArgument: `inner` null, `micro_batches` < 1, `arithmetic` null;
  // its AllocateScratch's errors.
  static absl::StatusOr<std::unique_ptr<Workload>> Create(
      std::unique_ptr<Workload> inner, int micro_batches,
      std::unique_ptr<AccumulationArithmetic> arithmetic =
          NewHostAccumulationArithmetic());

  const std::vector<ParameterInfo>& parameters() const override {
    return inner_->parameters();
  }
  absl::Status InitializeParameters(absl::Span<float* const> params) override {
    return inner_->InitializeParameters(params);
  }
  // The N micro-batches of optimizer step `step`; `grads` gets their mean.
  // Returns the mean of the micro-batches' losses (NaN without a loss).
  absl::StatusOr<double> ComputeGradients(int64_t step,
                                          absl::Span<const float* const> params,
                                          absl::Span<float* const> grads,
                                          GradientSink& sink) override;
  // Every micro-batch's samples.
  int64_t samples_per_step() const override {
    return inner_->samples_per_step() * micro_batches_;
  }

 private:
  AccumulatingWorkload(std::unique_ptr<Workload> inner, int micro_batches,
                       std::unique_ptr<AccumulationArithmetic> arithmetic,
                       std::vector<float*> scratch);

  const std::unique_ptr<Workload> inner_;
  const int micro_batches_;
  const std::unique_ptr<AccumulationArithmetic> arithmetic_;
  // One micro-batch's gradients, per parameter (arithmetic_'s memory).
  const std::vector<float*> scratch_;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_WORKLOAD_ACCUMULATING_WORKLOAD_H_
