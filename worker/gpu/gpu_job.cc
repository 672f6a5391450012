#include "worker/gpu/gpu_job.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/gpu/cuda_util.h"
#include "worker/gpu/gpu_shard_optimizer.h"
#include "worker/gpu/gpu_workloads.h"
#include "worker/gpu/kernels.h"

namespace pshard::worker {
namespace {

// Mixed precision (JobSpec.precision), as CpuJob's Fp32Compute: the
// workloads compute in fp32, on device copies of the bf16 parameters (each
// widened on the compute stream when the forward asks for it: after the
// hook's WaitForParameter, so after its update has arrived) into device
// fp32 gradients that are rounded into the bf16 buckets as each becomes
// final. A dtype that is fp32 is used in place.
class DeviceFp32Compute final : public GradientSink {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceFp32Compute>> Create(
      GpuZeroHook* hook, int device, cudaStream_t stream) {
    gpu::ScopedDevice scoped(device);
    RETURN_IF_ERROR(scoped.status());
    std::unique_ptr<DeviceFp32Compute> compute(
        new DeviceFp32Compute(hook, device, stream));
    for (const ParameterInfo& info : hook->parameter_infos()) {
      const size_t bytes = static_cast<size_t>(info.numel) * sizeof(float);
      if (hook->param_dtype() != DataType::kFloat32) {
        ASSIGN_OR_RETURN(gpu::DeviceBuffer p,
                         gpu::DeviceBuffer::Allocate(bytes, absl::StrCat(
                             "fp32 parameter ", info.name)));
        compute->params_.push_back(std::move(p));
      }
      if (hook->grad_dtype() != DataType::kFloat32) {
        ASSIGN_OR_RETURN(gpu::DeviceBuffer g,
                         gpu::DeviceBuffer::Allocate(bytes, absl::StrCat(
                             "fp32 gradient ", info.name)));
        compute->grads_.push_back(std::move(g));
      }
    }
    return compute;
  }

  // The workload's initial values, in fp32, become the model's and the
  // owners' masters' (ZeroHook::SetParameter rounds them into bf16
  // buckets).
  absl::Status Initialize(Workload& workload) {
    if (params_.empty()) return workload.InitializeParameters(hook_->params());
    gpu::ScopedDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    std::vector<float*> params;
    for (gpu::DeviceBuffer& p : params_) params.push_back(p.as<float>());
    RETURN_IF_ERROR(workload.InitializeParameters(params));
    const std::vector<ParameterInfo>& infos = hook_->parameter_infos();
    std::vector<float> values;
    for (size_t i = 0; i < infos.size(); ++i) {
      values.resize(infos[i].numel);
      RETURN_IF_ERROR(gpu::CudaStatus(
          cudaMemcpyAsync(values.data(), params[i], values.size() * 4,
                          cudaMemcpyDeviceToHost, stream_),
          "download the initial parameters"));
      RETURN_IF_ERROR(gpu::CudaStatus(cudaStreamSynchronize(stream_),
                                      "download the initial parameters"));
      RETURN_IF_ERROR(hook_->SetParameter(static_cast<int>(i), values));
    }
    return absl::OkStatus();
  }

  // Before a step's compute: the views (the buckets may have moved after
  // the first step), no parameter widened yet.
  void PrepareStep() {
    const std::vector<ParameterInfo>& infos = hook_->parameter_infos();
    compute_params_.assign(infos.size(), nullptr);
    compute_grads_.assign(infos.size(), nullptr);
    widened_.assign(infos.size(), 0);
    for (size_t i = 0; i < infos.size(); ++i) {
      compute_params_[i] =
          params_.empty() ? hook_->params()[i] : params_[i].as<float>();
      compute_grads_[i] =
          grads_.empty() ? hook_->grads()[i] : grads_[i].as<float>();
    }
  }

  absl::Span<const float* const> params() const { return compute_params_; }
  absl::Span<float* const> grads() const { return compute_grads_; }

  // Rounds the gradient into its bf16 bucket (on the compute stream, which
  // the hook's collectives follow) and hands it over.
  void GradientReady(int i) override {
    if (!grads_.empty()) {
      gpu::ScopedDevice scoped(device_);
      absl::Status narrowed = scoped.status();
      if (narrowed.ok()) narrowed = gpu::CudaStatus(
          gpu::LaunchFloatToBFloat16(
              grads_[i].as<float>(),
              static_cast<uint16_t*>(hook_->grad_data()[i]),
              hook_->parameter_infos()[i].numel, stream_),
          "round a gradient");
      if (!narrowed.ok()) {
        if (error_.ok()) error_ = narrowed;
        return;
      }
    }
    hook_->GradientReady(i);
  }

  // The compute stream is ordered after parameter i's update (the hook's
  // wait); bf16: its fp32 copy is widened from it there, once a step (every
  // micro-batch's forward asks).
  absl::Status WaitForParameter(int i) override {
    RETURN_IF_ERROR(hook_->WaitForParameter(i));
    if (params_.empty() || widened_[i]) return absl::OkStatus();
    widened_[i] = 1;
    gpu::ScopedDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    return gpu::CudaStatus(
        gpu::LaunchBFloat16ToFloat(
            static_cast<const uint16_t*>(hook_->param_data()[i]),
            params_[i].as<float>(), hook_->parameter_infos()[i].numel,
            stream_),
        "widen a parameter");
  }

  // The first gradient that could not be handed over this step, if any.
  absl::Status TakeError() { return std::exchange(error_, absl::OkStatus()); }

 private:
  DeviceFp32Compute(GpuZeroHook* hook, int device, cudaStream_t stream)
      : hook_(hook), device_(device), stream_(stream) {}

  GpuZeroHook* const hook_;
  const int device_;
  const cudaStream_t stream_;
  // Empty where the dtype is fp32 (the buckets are used in place).
  std::vector<gpu::DeviceBuffer> params_;
  std::vector<gpu::DeviceBuffer> grads_;
  // This step's views for the workload, and which bf16 parameters are
  // widened into them already.
  std::vector<const float*> compute_params_;
  std::vector<float*> compute_grads_;
  std::vector<char> widened_;
  absl::Status error_;
};

class GpuJobImpl final : public GpuJob {
 public:
  GpuJobImpl(std::unique_ptr<NcclCommunicator> comm, gpu::CudaStream stream,
             absl::Duration timeout)
      : comm_(std::move(comm)), stream_(std::move(stream)), timeout_(timeout) {}

  ~GpuJobImpl() override {
    // The hook first (it may abort and wait on the communicator), then the
    // workload, the compute stream and the communicator.
    fp32_compute_.reset();
    hook_.reset();
    workload_.reset();
  }

  absl::Status Init(const v1::JobSpec& spec, const GpuJobOptions& options,
                    AssignmentProvider provider) {
    ASSIGN_OR_RETURN(
        std::unique_ptr<GpuShardOptimizer> optimizer,
        GpuShardOptimizer::Create(spec.optimizer(), options.device));
    ASSIGN_OR_RETURN(workload_,
                     CreateGpuWorkload(spec, options.rank, options.world_size,
                                       options.device, stream_.get()));
    GpuZeroHookOptions hook_options;
    // The spec has its defaults (Create's contract), as CpuJob's.
    hook_options.comm_mode = spec.comm_mode();
    hook_options.bucket_cap_mb = spec.bucket_cap_mb();
    hook_options.timeout = options.timeout;
    hook_options.compute_stream = stream_.get();
    hook_options.clock = options.clock;
    hook_options.clipping = GradClipping::FromSpec(spec.optimizer());
    hook_options.precision = MixedPrecision::FromSpec(spec);
    hook_options.overlap_param_broadcast = spec.overlap_param_broadcast();
    ASSIGN_OR_RETURN(
        hook_, GpuZeroHook::Create(workload_->parameters(), comm_.get(),
                                   std::move(optimizer), std::move(provider),
                                   hook_options));
    if (!hook_options.precision.mixed()) {
      return workload_->InitializeParameters(hook_->params());
    }
    ASSIGN_OR_RETURN(fp32_compute_,
                     DeviceFp32Compute::Create(hook_.get(), options.device,
                                               stream_.get()));
    return fp32_compute_->Initialize(*workload_);
  }

  absl::StatusOr<double> RunStep(int64_t step) override {
    absl::StatusOr<double> loss;
    if (fp32_compute_ != nullptr) {
      fp32_compute_->PrepareStep();
      loss = workload_->ComputeGradients(step, fp32_compute_->params(),
                                         fp32_compute_->grads(),
                                         *fp32_compute_);
      if (loss.ok()) {
        if (absl::Status handed = fp32_compute_->TakeError(); !handed.ok()) {
          loss = handed;
        }
      }
    } else {
      std::vector<const float*> params(hook_->params().begin(),
                                       hook_->params().end());
      loss = workload_->ComputeGradients(step, params, hook_->grads(), *hook_);
    }
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

  // A resume, before the first step: uploaded on the compute stream (bf16:
  // rounded, the owners' masters from the exact values), over what the
  // workload initialised.
  absl::Status UploadParameters(
      const std::vector<std::vector<float>>& values) override {
    const std::vector<ParameterInfo>& infos = hook_->parameter_infos();
    RETURN_IF_ERROR(CheckValuesToUpload(infos, values));
    for (size_t i = 0; i < infos.size(); ++i) {
      RETURN_IF_ERROR(hook_->SetParameter(static_cast<int>(i), values[i]));
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<NcclCommunicator> comm_;
  gpu::CudaStream stream_;
  const absl::Duration timeout_;
  std::unique_ptr<Workload> workload_;
  std::unique_ptr<GpuZeroHook> hook_;
  // Mixed precision only.
  std::unique_ptr<DeviceFp32Compute> fp32_compute_;
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
