#include "worker/runtime/cpu_job.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/optim/shard_optimizer.h"
#include "worker/workload/workload.h"

namespace pshard::worker {
namespace {

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
    ASSIGN_OR_RETURN(hook_, ZeroHook::Create(workload_->parameters(),
                                             comm_.get(), std::move(optimizer),
                                             std::move(provider), hook_options));
    return workload_->InitializeParameters(hook_->params());
  }

  absl::StatusOr<double> RunStep(int64_t step) override {
    std::vector<const float*> params(hook_->params().begin(),
                                     hook_->params().end());
    ASSIGN_OR_RETURN(double loss, workload_->ComputeGradients(
                                      step, params, hook_->grads(), *hook_));
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

  absl::Status CopyParameterRangeToHost(int index, int64_t offset,
                                        int64_t numel, float* out) override {
    RETURN_IF_ERROR(hook_->WaitForParameter(index));
    const float* p = hook_->params()[index] + offset;
    std::copy(p, p + numel, out);
    return absl::OkStatus();
  }

  absl::Status UploadParameters(
      const std::vector<std::vector<float>>& values) override {
    const auto& infos = workload_->parameters();
    if (values.size() != infos.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameters to load: ", values.size(),
                       " tensors for a model of ", infos.size()));
    }
    for (size_t i = 0; i < infos.size(); ++i) {
      if (static_cast<int64_t>(values[i].size()) != infos[i].numel) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter \"", infos[i].name, "\" to load has ",
            values[i].size(), " elements, the model's has ", infos[i].numel));
      }
      std::copy(values[i].begin(), values[i].end(), hook_->params()[i]);
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
