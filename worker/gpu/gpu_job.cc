#include "worker/gpu/gpu_job.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/gpu/cuda_util.h"
#include "worker/gpu/gpu_shard_optimizer.h"
#include "worker/gpu/gpu_workloads.h"

namespace pshard::worker {
namespace {

class GpuJobImpl final : public GpuJob {
 public:
  GpuJobImpl(std::unique_ptr<NcclCommunicator> comm, gpu::CudaStream stream,
             absl::Duration timeout)
      : comm_(std::move(comm)), stream_(std::move(stream)), timeout_(timeout) {}

  ~GpuJobImpl() override {
    // The hook first (it may abort and wait on the communicator), then the
    // workload, the compute stream and the communicator.
    hook_.reset();
    workload_.reset();
  }

  absl::Status Init(const v1::JobSpec& spec, const GpuJobOptions& options,
                    AssignmentProvider provider) {
    if (MixedPrecision::FromSpec(spec).mixed()) {
      // Validation refuses it with backend NCCL; AUTO may still land here.
      return absl::UnimplementedError(
          "precision other than FP32 runs on CPU (Gloo) workers only for "
          "now: use backend GLOO");
    }
    ASSIGN_OR_RETURN(
        std::unique_ptr<GpuShardOptimizer> optimizer,
        GpuShardOptimizer::Create(spec.optimizer(), options.device));
    ASSIGN_OR_RETURN(workload_,
                     CreateGpuWorkload(spec, options.rank, options.world_size,
                                       options.device, stream_.get()));
    GpuZeroHookOptions hook_options;
    hook_options.comm_mode =
        spec.comm_mode() == v1::JobSpec::ALLREDUCE_BROADCAST
            ? v1::JobSpec::ALLREDUCE_BROADCAST
            : v1::JobSpec::REDUCE_BROADCAST;
    hook_options.bucket_cap_mb =
        spec.bucket_cap_mb() > 0 ? spec.bucket_cap_mb() : 25;
    hook_options.timeout = options.timeout;
    hook_options.compute_stream = stream_.get();
    hook_options.clock = options.clock;
    hook_options.clipping = GradClipping::FromSpec(spec.optimizer());
    ASSIGN_OR_RETURN(
        hook_, GpuZeroHook::Create(workload_->parameters(), comm_.get(),
                                   std::move(optimizer), std::move(provider),
                                   hook_options));
    return workload_->InitializeParameters(hook_->params());
  }

  absl::StatusOr<double> RunStep(int64_t step) override {
    std::vector<const float*> params(hook_->params().begin(),
                                     hook_->params().end());
    absl::StatusOr<double> loss =
        workload_->ComputeGradients(step, params, hook_->grads(), *hook_);
    if (!loss.ok()) {
      comm_->Abort(loss.status());
      return loss.status();
    }
    RETURN_IF_ERROR(hook_->FinishStep());
    return loss;
  }

  absl::StatusOr<double> AverageLoss(double loss) override { return loss; }

  absl::Status FinalBarrier() override {
    return comm_->Barrier()->Wait(timeout_);
  }

  NcclCommunicator& communicator() override { return *comm_; }
  GpuZeroHook& hook() override { return *hook_; }
  const Workload& workload() const override { return *workload_; }

  absl::Status CopyParameterRangeToHost(int index, int64_t offset,
                                        int64_t numel, float* out) override {
    return hook_->CopyParameterRangeToHost(index, offset, numel, out);
  }

  absl::Status UploadParameters(
      const std::vector<std::vector<float>>&) override {
    return absl::UnimplementedError(
        "resuming a GPU job from a checkpoint is not supported yet");
  }

 private:
  std::unique_ptr<NcclCommunicator> comm_;
  gpu::CudaStream stream_;
  const absl::Duration timeout_;
  std::unique_ptr<Workload> workload_;
  std::unique_ptr<GpuZeroHook> hook_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuJob>> GpuJob::Create(
    const v1::JobSpec& spec, const GpuJobOptions& options, KvClient& kv,
    AssignmentProvider provider) {
  NcclOptions nccl;
  nccl.job_id = options.job_id;
  nccl.epoch = options.epoch;
  nccl.rank = options.rank;
  nccl.world_size = options.world_size;
  nccl.device = options.device;
  nccl.timeout = options.timeout;
  nccl.key_prefix = options.key_prefix;
  nccl.clock = options.clock;
  ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> comm,
                   CreateNcclCommunicator(nccl, kv));
  gpu::ScopedDevice scoped(options.device);
  RETURN_IF_ERROR(scoped.status());
  ASSIGN_OR_RETURN(gpu::CudaStream stream,
                   gpu::CudaStream::Create(absl::StrCat("job ", options.job_id,
                                                        ": compute stream")));
  auto job = std::make_unique<GpuJobImpl>(std::move(comm), std::move(stream),
                                          options.timeout);
  RETURN_IF_ERROR(job->Init(spec, options, std::move(provider)));
  return std::unique_ptr<GpuJob>(std::move(job));
}

}  // namespace pshard::worker
