#include "worker/runtime/cpu_job.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/optim/shard_optimizer.h"
#include "worker/workload/workload.h"

namespace pshard::worker {
namespace {

// Mixed precision on the host: the workload computes in fp32 (as torch's
// autocast keeps its inputs' dtype at the boundary) on copies of the
// model's parameters, widened from the hook's bf16 buffers when it waits for
// them; its fp32 gradients are narrowed into the hook's reduce dtype as each
// becomes final.
class Fp32Compute final : public GradientSink {
 public:
  Fp32Compute(ZeroHook* hook, const std::vector<ParameterInfo>& infos)
      : hook_(hook) {
    for (const ParameterInfo& info : infos) {
      params_.emplace_back(info.numel);
      grads_.emplace_back(info.numel);
      param_ptrs_.push_back(params_.back().data());
      init_ptrs_.push_back(params_.back().data());
      grad_ptrs_.push_back(grads_.back().data());
    }
  }

  // The workload's initial values become the model's (and the owners'
  // masters').
  absl::Status Initialize(Workload& workload) {
    RETURN_IF_ERROR(workload.InitializeParameters(init_ptrs_));
    for (size_t i = 0; i < params_.size(); ++i) {
      RETURN_IF_ERROR(hook_->SetParameter(static_cast<int>(i), params_[i]));
    }
    return absl::OkStatus();
  }

  absl::Span<const float* const> params() const { return param_ptrs_; }
  absl::Span<float* const> grads() const { return grad_ptrs_; }

  void GradientReady(int param_index) override {
    absl::Status set = hook_->SetGradient(param_index, grads_[param_index]);
    if (!set.ok()) {
      if (error_.ok()) error_ = set;
      return;
    }
    hook_->GradientReady(param_index);
  }

  // The first gradient that could not be handed over this step, if any.
  absl::Status TakeError() { return std::exchange(error_, absl::OkStatus()); }

  absl::Status WaitForParameter(int param_index) override {
    RETURN_IF_ERROR(hook_->WaitForParameter(param_index));
    return hook_->ReadParameter(param_index, absl::MakeSpan(params_[param_index]));
  }

 private:
  ZeroHook* const hook_;
  std::vector<std::vector<float>> params_;
  std::vector<std::vector<float>> grads_;
  std::vector<const float*> param_ptrs_;
  std::vector<float*> init_ptrs_;  // the same, writable
  std::vector<float*> grad_ptrs_;
  absl::Status error_;
};

class CpuJobImpl final : public CpuJob {
 public:
  CpuJobImpl(int world_size, absl::Duration timeout)
      : world_size_(world_size), timeout_(timeout) {}

  // The communicator goes before the hook, whose buffers an aborted
  // transport may still hold until then.
  ~CpuJobImpl() override { comm_.reset(); }

  absl::Status Init(const v1::JobSpec& spec, const CpuJobOptions& options,
                    KvClient& kv, AssignmentProvider provider) {
    ASSIGN_OR_RETURN(workload_,
                     CreateWorkload(spec, options.rank, options.world_size));
    ASSIGN_OR_RETURN(std::unique_ptr<ShardOptimizer> optimizer,
                     ShardOptimizer::Create(spec.optimizer()));
    GlooOptions gloo;
    gloo.rank = options.rank;
    gloo.world_size = options.world_size;
    gloo.hostname = options.hostname;
    gloo.timeout = options.timeout;
    gloo.key_prefix = options.key_prefix;
    ASSIGN_OR_RETURN(comm_, CreateGlooCommunicator(gloo, kv));
    ZeroHookOptions hook_options;
    hook_options.comm_mode = spec.comm_mode();
    hook_options.bucket_cap_mb = spec.bucket_cap_mb();
    hook_options.timeout = options.timeout;
    hook_options.overlap_param_broadcast = spec.overlap_param_broadcast();
    hook_options.clipping = GradClipping::FromSpec(spec.optimizer());
    hook_options.precision = MixedPrecision::FromSpec(spec);
    ASSIGN_OR_RETURN(hook_, ZeroHook::Create(workload_->parameters(),
                                             comm_.get(), std::move(optimizer),
                                             std::move(provider), hook_options));
    if (hook_options.precision.mixed()) {
      fp32_compute_ =
          std::make_unique<Fp32Compute>(hook_.get(), workload_->parameters());
      return fp32_compute_->Initialize(*workload_);
    }
    return workload_->InitializeParameters(hook_->params());
  }

  absl::StatusOr<double> RunStep(int64_t step) override {
    double loss;
    if (fp32_compute_ != nullptr) {
      ASSIGN_OR_RETURN(loss, workload_->ComputeGradients(
                                 step, fp32_compute_->params(),
                                 fp32_compute_->grads(), *fp32_compute_));
      RETURN_IF_ERROR(fp32_compute_->TakeError());
    } else {
      // The views move when the first step re-packs the buckets.
      std::vector<const float*> params(hook_->params().begin(),
                                       hook_->params().end());
      ASSIGN_OR_RETURN(loss, workload_->ComputeGradients(
                                 step, params, hook_->grads(), *hook_));
    }
    RETURN_IF_ERROR(hook_->FinishStep());
    return loss;
  }

  absl::StatusOr<double> AverageLoss(double loss) override {
    if (world_size_ == 1) return loss;
    float sum = static_cast<float>(loss);
    RETURN_IF_ERROR(
        comm_->AllReduce(&sum, 1, DataType::kFloat32)->Wait(timeout_));
    return sum / world_size_;
  }

  absl::Status FinalBarrier() override {
    return comm_->Barrier()->Wait(timeout_);
  }

  Communicator& communicator() override { return *comm_; }
  ZeroHook& hook() override { return *hook_; }
  const Workload& workload() const override { return *workload_; }

  absl::Status UploadParameters(
      const std::vector<std::vector<float>>& values) override {
    const auto& infos = workload_->parameters();
    RETURN_IF_ERROR(CheckValuesToUpload(infos, values));
    for (size_t i = 0; i < infos.size(); ++i) {
      if (fp32_compute_ != nullptr) {
        RETURN_IF_ERROR(hook_->SetParameter(static_cast<int>(i), values[i]));
      } else {
        std::copy(values[i].begin(), values[i].end(), hook_->params()[i]);
      }
    }
    return absl::OkStatus();
  }

 private:
  const int world_size_;
  const absl::Duration timeout_;
  // Destroyed in reverse: the communicator first (see the destructor), then
  // the hook, then the workload.
  std::unique_ptr<Workload> workload_;
  std::unique_ptr<ZeroHook> hook_;
  std::unique_ptr<Communicator> comm_;
  // Set under mixed precision: the workload's fp32 side, over hook_.
  std::unique_ptr<Fp32Compute> fp32_compute_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CpuJob>> CpuJob::Create(
    const v1::JobSpec& spec, const CpuJobOptions& options, KvClient& kv,
    AssignmentProvider provider) {
  auto job = std::make_unique<CpuJobImpl>(options.world_size, options.timeout);
  RETURN_IF_ERROR(job->Init(spec, options, kv, std::move(provider)));
  return std::unique_ptr<CpuJob>(std::move(job));
}

}  // namespace pshard::worker
