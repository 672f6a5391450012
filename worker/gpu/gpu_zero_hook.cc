#include "worker/gpu/gpu_zero_hook.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/gpu/cuda_util.h"
#include "worker/gpu/kernels.h"
#include "worker/hook/hook_memory.h"

namespace pshard::worker {
namespace {

using gpu::CudaEvent;
using gpu::CudaStatus;
using gpu::DeviceBuffer;
using gpu::ScopedDevice;
using gpu::SynchronizeStream;

// Buckets in device memory: per bucket one allocation for parameters and one
// for gradients (BucketStorage's layout, on the device), and an event that
// marks the bucket's gradients on the compute stream. Every operation is on
// `comm`'s stream, ordered after `compute` with events, and back.
class DeviceMemory final : public HookMemory {
 public:
  DeviceMemory(NcclCommunicator* comm, GpuShardOptimizer* optimizer,
               cudaStream_t compute, absl::Duration timeout,
               const Clock& clock)
      : comm_(comm), optimizer_(optimizer), compute_(compute),
        timeout_(timeout), clock_(clock) {}

  absl::Status Arrange(const BucketLayout& layout) override {
    ScopedDevice scoped(comm_->device());
    RETURN_IF_ERROR(scoped.status());
    const size_t num_params = layout.ready_order().size();
    std::vector<DeviceBuffer> params, grads;
    std::vector<void*> param_views(num_params, nullptr);
    std::vector<void*> grad_views(num_params, nullptr);
    std::vector<CudaEvent> events;
    for (const Bucket& bucket : layout.buckets()) {
      const size_t bytes = static_cast<size_t>(bucket.numel) * sizeof(float);
      const std::string what = absl::StrCat("bucket ", bucket.index, ": ");
      ASSIGN_OR_RETURN(DeviceBuffer p,
                       DeviceBuffer::Allocate(bytes, absl::StrCat(
                           what, "parameters (", bytes, " bytes)")));
      ASSIGN_OR_RETURN(DeviceBuffer g,
                       DeviceBuffer::Allocate(bytes, absl::StrCat(
                           what, "gradients (", bytes, " bytes)")));
      ASSIGN_OR_RETURN(CudaEvent event,
                       CudaEvent::Create(absl::StrCat(what, "event")));
      for (const BucketEntry& e : bucket.entries) {
        param_views[e.param_index] = p.as<float>() + e.offset;
        grad_views[e.param_index] = g.as<float>() + e.offset;
      }
      params.push_back(std::move(p));
      grads.push_back(std::move(g));
      events.push_back(std::move(event));
    }
    if (!params_.empty()) {
      // Re-pack: copy on the compute stream (after the gradients written
      // there), and wait, since the old buffers go when this returns.
      for (const Bucket& bucket : layout.buckets()) {
        for (const BucketEntry& e : bucket.entries) {
          const size_t bytes = e.numel * sizeof(float);
          const int i = e.param_index;
          RETURN_IF_ERROR(CudaStatus(
              cudaMemcpyAsync(param_views[i], param_views_[i], bytes,
                              cudaMemcpyDeviceToDevice, compute_),
              "re-pack parameters"));
          RETURN_IF_ERROR(CudaStatus(
              cudaMemcpyAsync(grad_views[i], grad_views_[i], bytes,
                              cudaMemcpyDeviceToDevice, compute_),
              "re-pack gradients"));
        }
      }
      // The old buffers are freed below; a timeout leaves them (and the
      // hook) to the caller's abort.
      RETURN_IF_ERROR(SynchronizeStream(compute_, timeout_, "re-pack buckets",
                                        clock_));
    }
    params_ = std::move(params);
    grads_ = std::move(grads);
    param_views_ = std::move(param_views);
    grad_views_ = std::move(grad_views);
    ready_events_ = std::move(events);
    return absl::OkStatus();
  }

  // fp32 only: GpuShardOptimizer's bf16 path is not wired in yet.
  DataType param_dtype() const override { return DataType::kFloat32; }
  DataType grad_dtype() const override { return DataType::kFloat32; }
  void* bucket_params(int b) override { return params_[b].as<float>(); }
  void* bucket_grads(int b) override { return grads_[b].as<float>(); }
  const std::vector<void*>& param_views() const override {
    return param_views_;
  }
  const std::vector<void*>& grad_views() const override {
    return grad_views_;
  }
  bool on_host() const override { return false; }

  // The communication stream waits (on the device) for the compute stream
  // to have produced the bucket's gradients.
  absl::StatusOr<std::shared_ptr<Work>> OrderAfterGradients(int b) override {
    // From GradientReady on the training thread: the legacy default stream
    // and the events are per device, so make ours current.
    ScopedDevice scoped(comm_->device());
    RETURN_IF_ERROR(scoped.status());
    cudaEvent_t ready = ready_events_[b].get();
    RETURN_IF_ERROR(
        CudaStatus(cudaEventRecord(ready, compute_),
                   absl::StrCat("bucket ", b, ": gradients ready")));
    NcclCommunicator* comm = comm_;
    return comm->Enqueue([comm, ready, b] {
      return CudaStatus(cudaStreamWaitEvent(comm->stream(), ready, 0),
                        absl::StrCat("bucket ", b, ": wait for gradients"));
    });
  }

  // Runs inside NcclCommunicator::Enqueue, at issue time, with the device
  // set: only enqueues kernels on the communication stream.
  absl::Status OwnerStep(int index, void* param_data, void* grad_data,
                         int64_t numel, float divisor) override {
    float* params = static_cast<float*>(param_data);
    float* grads = static_cast<float*>(grad_data);
    if (divisor != 1) {
      // The average as the CPU hook computes it: g / n, rounded (g * (1/n)
      // could differ in the last bit for n not a power of two).
      RETURN_IF_ERROR(CudaStatus(
          gpu::LaunchDivide(grads, numel, divisor, comm_->stream()),
          absl::StrCat("piece ", index, ": average gradient")));
    }
    return optimizer_->EnqueueStep(index, params, grads, comm_->stream());
  }

  // Clipping: per piece kNormBlocks partials, and the slots, on the device;
  // every call below but PrepareNorms and TotalGradNorm runs inside
  // NcclCommunicator::Enqueue and only enqueues kernels on its stream.
  absl::Status PrepareNorms(int num_pieces, int world_size) override {
    ScopedDevice scoped(comm_->device());
    RETURN_IF_ERROR(scoped.status());
    const size_t partial_bytes =
        static_cast<size_t>(num_pieces) * gpu::kNormBlocks * sizeof(double);
    ASSIGN_OR_RETURN(norm_partials_,
                     DeviceBuffer::Allocate(partial_bytes,
                                            "gradient-norm partials"));
    ASSIGN_OR_RETURN(norm_slots_,
                     DeviceBuffer::Allocate(world_size * sizeof(float),
                                            "gradient-norm slots"));
    // Pieces this rank does not own keep 0, which combines as nothing.
    RETURN_IF_ERROR(CudaStatus(
        cudaMemset(norm_partials_.get(), 0, partial_bytes),
        "zero the gradient-norm partials"));
    RETURN_IF_ERROR(CudaStatus(
        cudaMemset(norm_slots_.get(), 0, world_size * sizeof(float)),
        "zero the gradient-norm slots"));
    num_norm_partials_ = static_cast<int64_t>(num_pieces) * gpu::kNormBlocks;
    world_size_ = world_size;
    return absl::OkStatus();
  }

  absl::Status PartialNorm(int index, void* grad_data, int64_t numel,
                           float divisor, NormKind kind) override {
    float* grads = static_cast<float*>(grad_data);
    const std::string what = absl::StrCat("piece ", index, ": gradient norm");
    if (divisor != 1) {
      RETURN_IF_ERROR(CudaStatus(
          gpu::LaunchDivide(grads, numel, divisor, comm_->stream()), what));
    }
    return CudaStatus(
        gpu::LaunchPartialNorm(
            grads, numel, kind == NormKind::kInf,
            norm_partials_.as<double>() +
                static_cast<int64_t>(index) * gpu::kNormBlocks,
            comm_->stream()),
        what);
  }

  absl::Status GatherNorms(int rank, NormKind kind) override {
    return CudaStatus(
        gpu::LaunchGatherNorms(norm_partials_.as<double>(), num_norm_partials_,
                               kind == NormKind::kInf, norm_slots_.as<float>(),
                               world_size_, rank, comm_->stream()),
        "gather the gradient norm");
  }

  float* norm_slots() override { return norm_slots_.as<float>(); }

  absl::Status ClippedOwnerStep(int index, void* param_data, void* grad_data,
                                int64_t numel, double max_norm,
                                NormKind kind) override {
    float* params = static_cast<float*>(param_data);
    float* grads = static_cast<float*>(grad_data);
    RETURN_IF_ERROR(CudaStatus(
        gpu::LaunchClipScale(grads, numel, norm_slots_.as<float>(), world_size_,
                             kind == NormKind::kInf, max_norm,
                             comm_->stream()),
        absl::StrCat("piece ", index, ": clip gradient")));
    return optimizer_->EnqueueStep(index, params, grads, comm_->stream());
  }

  // FinishStep has waited for the step: the slots are final.
  absl::StatusOr<double> TotalGradNorm(NormKind kind) override {
    ScopedDevice scoped(comm_->device());
    RETURN_IF_ERROR(scoped.status());
    std::vector<float> slots(world_size_);
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(slots.data(), norm_slots_.get(),
                        slots.size() * sizeof(float), cudaMemcpyDeviceToHost,
                        comm_->stream()),
        "download the gradient norm"));
    RETURN_IF_ERROR(SynchronizeStream(comm_->stream(), timeout_,
                                      "download the gradient norm", clock_));
    return TotalNorm(slots.data(), world_size_, kind);
  }

  // The next forward runs after this step's broadcasts, on the device.
  absl::Status OrderComputeAfter(Work& last) override {
    return StreamWaitFor(last, compute_, timeout_);
  }

  absl::Status CopyToHost(int param_index, int64_t offset, int64_t numel,
                          float* out) {
    ScopedDevice scoped(comm_->device());
    RETURN_IF_ERROR(scoped.status());
    const std::string what = absl::StrCat("download parameter ", param_index);
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(out, param_views_[param_index] + offset,
                        numel * sizeof(float), cudaMemcpyDeviceToHost,
                        compute_),
        what));
    return SynchronizeStream(compute_, timeout_, what, clock_);
  }

 private:
  NcclCommunicator* const comm_;
  GpuShardOptimizer* const optimizer_;
  const cudaStream_t compute_;
  const absl::Duration timeout_;
  const Clock& clock_;
  std::vector<DeviceBuffer> params_;
  std::vector<DeviceBuffer> grads_;
  std::vector<void*> param_views_;
  std::vector<void*> grad_views_;
  std::vector<CudaEvent> ready_events_;  // per bucket, re-recorded each step
  // Clipping (PrepareNorms).
  DeviceBuffer norm_partials_;  // doubles, kNormBlocks per piece
  DeviceBuffer norm_slots_;     // world_size floats
  int64_t num_norm_partials_ = 0;
  int world_size_ = 0;
};

class GpuZeroHookImpl final : public GpuZeroHook {
 public:
  GpuZeroHookImpl(std::vector<ParameterInfo> params, NcclCommunicator* comm,
                  std::unique_ptr<GpuShardOptimizer> optimizer,
                  std::unique_ptr<DeviceMemory> memory,
                  AssignmentProvider provider, const ZeroHookOptions& options)
      : GpuZeroHook(std::move(params), comm, std::move(optimizer),
                    std::move(memory), std::move(provider), options) {}

  absl::Status CopyParameterRangeToHost(int param_index, int64_t offset,
                                        int64_t numel, float* out) override {
    const std::vector<ParameterInfo>& infos = parameter_infos();
    if (param_index < 0 || param_index >= static_cast<int>(infos.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter index ", param_index, " is outside [0, ", infos.size(),
          ")"));
    }
    if (offset < 0 || numel < 0 || offset > infos[param_index].numel - numel) {
      return absl::InvalidArgumentError(absl::StrCat(
          "elements [", offset, ", ", offset + numel, ") of parameter \"",
          infos[param_index].name, "\" are outside its ",
          infos[param_index].numel));
    }
    if (numel == 0) return absl::OkStatus();
    // Create() gave this hook a DeviceMemory.
    return static_cast<DeviceMemory&>(memory())
        .CopyToHost(param_index, offset, numel, out);
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuZeroHook>> GpuZeroHook::Create(
    std::vector<ParameterInfo> params, NcclCommunicator* comm,
    std::unique_ptr<GpuShardOptimizer> optimizer, AssignmentProvider provider,
    const GpuZeroHookOptions& options) {
  if (comm == nullptr || optimizer == nullptr) {
    return absl::InvalidArgumentError(
        "a communicator, an optimizer and an assignment provider are needed");
  }
  if (options.clock == nullptr) {
    return absl::InvalidArgumentError("GpuZeroHookOptions: no clock");
  }
  if (optimizer->device() != comm->device()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the optimizer is on CUDA device ", optimizer->device(),
                     ", the communicator on ", comm->device()));
  }
  ZeroHookOptions hook_options;
  hook_options.comm_mode = options.comm_mode;
  hook_options.bucket_cap_mb = options.bucket_cap_mb;
  hook_options.timeout = options.timeout;
  hook_options.clipping = options.clipping;
  // Whole buckets, each broadcast right after its step (see the header).
  hook_options.piece_bytes = 0;
  hook_options.broadcast_lag = 0;
  auto memory = std::make_unique<DeviceMemory>(
      comm, optimizer.get(),
      options.compute_stream == nullptr ? cudaStreamLegacy
                                        : options.compute_stream,
      options.timeout, *options.clock);
  auto hook = std::make_unique<GpuZeroHookImpl>(
      std::move(params), comm, std::move(optimizer), std::move(memory),
      std::move(provider), hook_options);
  RETURN_IF_ERROR(hook->Init());
  return std::unique_ptr<GpuZeroHook>(std::move(hook));
}

}  // namespace pshard::worker
