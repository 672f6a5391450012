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
#include "worker/comm/reduce_ops.h"
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
// for gradients (BucketStorage's layout, on the device, in the parameters'
// and the reduction's dtypes), and an event that marks the bucket's
// gradients on the compute stream. Every operation is on `comm`'s stream,
// ordered after `compute` with events, and back. Mixed precision as the
// host memory's: an owner's GpuShardOptimizer keeps fp32 master weights
// for its bf16 pieces (AdoptMasterWeights) and steps them in its fused bf16
// kernel, which reads bf16 or fp32 gradients and writes the rounded update
// into the parameters; gradients that must be averaged or clipped first
// are widened into fp32 room of the owner's.
class DeviceMemory final : public HookMemory {
 public:
  DeviceMemory(NcclCommunicator* comm, GpuShardOptimizer* optimizer,
               cudaStream_t compute, absl::Duration timeout,
               const Clock& clock, const MixedPrecision& precision)
      : comm_(comm), optimizer_(optimizer), compute_(compute),
        timeout_(timeout), clock_(clock),
        param_dtype_(precision.param_dtype),
        grad_dtype_(precision.reduce_dtype) {}

  ~DeviceMemory() override {
    // Freed on their device, not on whatever device the destroying thread
    // has current (a stray context on device 0 for a program on another).
    ScopedDevice scoped(comm_->device());
    params_.clear();
    grads_.clear();
    ready_events_.clear();
    grad_room_.clear();
    norm_partials_ = DeviceBuffer();
    norm_slots_ = DeviceBuffer();
  }

  absl::Status Arrange(const BucketLayout& layout) override {
    ScopedDevice scoped(comm_->device());
    RETURN_IF_ERROR(scoped.status());
    const size_t num_params = layout.ready_order().size();
    std::vector<DeviceBuffer> params, grads;
    std::vector<void*> param_views(num_params, nullptr);
    std::vector<void*> grad_views(num_params, nullptr);
    std::vector<CudaEvent> events;
    for (const Bucket& bucket : layout.buckets()) {
      const size_t param_bytes =
          static_cast<size_t>(bucket.numel) * DataTypeSize(param_dtype_);
      const size_t grad_bytes =
          static_cast<size_t>(bucket.numel) * DataTypeSize(grad_dtype_);
      const std::string what = absl::StrCat("bucket ", bucket.index, ": ");
      ASSIGN_OR_RETURN(DeviceBuffer p,
                       DeviceBuffer::Allocate(param_bytes, absl::StrCat(
                           what, "parameters (", param_bytes, " bytes)")));
      ASSIGN_OR_RETURN(DeviceBuffer g,
                       DeviceBuffer::Allocate(grad_bytes, absl::StrCat(
                           what, "gradients (", grad_bytes, " bytes)")));
      ASSIGN_OR_RETURN(CudaEvent event,
                       CudaEvent::Create(absl::StrCat(what, "event")));
      for (const BucketEntry& e : bucket.entries) {
        param_views[e.param_index] =
            AdvanceElements(p.get(), e.offset, param_dtype_);
        grad_views[e.param_index] =
            AdvanceElements(g.get(), e.offset, grad_dtype_);
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
          const int i = e.param_index;
          RETURN_IF_ERROR(CudaStatus(
              cudaMemcpyAsync(param_views[i], param_views_[i],
                              e.numel * DataTypeSize(param_dtype_),
                              cudaMemcpyDeviceToDevice, compute_),
              "re-pack parameters"));
          RETURN_IF_ERROR(CudaStatus(
              cudaMemcpyAsync(grad_views[i], grad_views_[i],
                              e.numel * DataTypeSize(grad_dtype_),
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

  DataType param_dtype() const override { return param_dtype_; }
  DataType grad_dtype() const override { return grad_dtype_; }
  void* bucket_params(int b) override { return params_[b].get(); }
  void* bucket_grads(int b) override { return grads_[b].get(); }
  const std::vector<void*>& param_views() const override {
    return param_views_;
  }
  const std::vector<void*>& grad_views() const override {
    return grad_views_;
  }

  // On the compute stream (after what the workload wrote there), waited for.
  absl::Status WriteFloats(void* dst, DataType dtype, const float* values,
                           int64_t n) override {
    if (n == 0) return absl::OkStatus();
    ScopedDevice scoped(comm_->device());
    RETURN_IF_ERROR(scoped.status());
    // bf16: rounded on the host, half the bytes uploaded.
    std::vector<uint16_t> staged;
    const void* src = values;
    if (dtype != DataType::kFloat32) {
      staged.resize(n);
      FromFloats(values, dtype, n, staged.data());
      src = staged.data();
    }
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(dst, src, n * DataTypeSize(dtype),
                        cudaMemcpyHostToDevice, compute_),
        "upload values"));
    return SynchronizeStream(compute_, timeout_, "upload values", clock_);
  }

  absl::Status ReadFloats(const void* src, DataType dtype, int64_t n,
                          float* out) override {
    if (n == 0) return absl::OkStatus();
    ScopedDevice scoped(comm_->device());
    RETURN_IF_ERROR(scoped.status());
    // bf16: downloaded as is, widened on the host.
    std::vector<uint16_t> staged;
    void* dst = out;
    if (dtype != DataType::kFloat32) {
      staged.resize(n);
      dst = staged.data();
    }
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(dst, src, n * DataTypeSize(dtype),
                        cudaMemcpyDeviceToHost, compute_),
        "download values"));
    RETURN_IF_ERROR(
        SynchronizeStream(compute_, timeout_, "download values", clock_));
    if (!staged.empty()) ToFloats(staged.data(), dtype, n, out);
    return absl::OkStatus();
  }

  absl::Status AdoptOwnedPiece(int index, const float* initial,
                               int64_t numel) override {
    if (index < 0 || numel < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("piece ", index, " of ", numel, " elements"));
    }
    ScopedDevice scoped(comm_->device());
    RETURN_IF_ERROR(scoped.status());
    if (index >= static_cast<int>(grad_room_.size())) {
      grad_room_.resize(index + 1);
    }
    if (param_dtype_ != DataType::kFloat32) {
      RETURN_IF_ERROR(optimizer_->AdoptMasterWeights(index, initial, numel));
    }
    if (grad_dtype_ != DataType::kFloat32) {
      const size_t bytes = static_cast<size_t>(numel) * sizeof(float);
      ASSIGN_OR_RETURN(grad_room_[index],
                       DeviceBuffer::Allocate(bytes, absl::StrCat(
                           "piece ", index, ": fp32 gradients (", bytes,
                           " bytes)")));
    }
    return absl::OkStatus();
  }

  // The owner's GpuShardOptimizer keeps them (optimizer bucket = piece).
  absl::Status ReadMasterParams(int index, int64_t offset, int64_t n,
                                float* out) override {
    if (param_dtype_ == DataType::kFloat32) {
      return HookMemory::ReadMasterParams(index, offset, n, out);
    }
    return optimizer_->CopyMasterWeightsToHost(index, offset, n, out);
  }

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
                         int64_t numel, float divisor,
                         const HyperParameterOverrides& overrides) override {
    if (divisor == 1 && param_dtype_ != DataType::kFloat32 &&
        grad_dtype_ != DataType::kFloat32) {
      // The fused kernel widens the bf16 gradients as it reads them.
      return optimizer_->EnqueueBf16Step(
          index, static_cast<uint16_t*>(param_data), grad_data,
          GpuShardOptimizer::GradType::kBFloat16, comm_->stream(), overrides);
    }
    ASSIGN_OR_RETURN(float* grads,
                     WidenedGradients(index, grad_data, numel));
    if (divisor != 1) {
      // The average as the CPU hook computes it: g / n, rounded (g * (1/n)
      // could differ in the last bit for n not a power of two).
      RETURN_IF_ERROR(CudaStatus(
          gpu::LaunchDivide(grads, gpu::kKernelFloat32, numel, divisor,
                            comm_->stream()),
          absl::StrCat("piece ", index, ": average gradient")));
    }
    return Step(index, param_data, grads, overrides);
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
    // Pieces this rank does not own keep 0, which combines as nothing. On
    // the communication stream, which computes and gathers the norms (a
    // plain cudaMemset, on the legacy stream, is not ordered before a
    // non-blocking stream's work).
    RETURN_IF_ERROR(CudaStatus(
        cudaMemsetAsync(norm_partials_.get(), 0, partial_bytes,
                        comm_->stream()),
        "zero the gradient-norm partials"));
    RETURN_IF_ERROR(CudaStatus(
        cudaMemsetAsync(norm_slots_.get(), 0, world_size * sizeof(float),
                        comm_->stream()),
        "zero the gradient-norm slots"));
    num_norm_partials_ = static_cast<int64_t>(num_pieces) * gpu::kNormBlocks;
    world_size_ = world_size;
    return absl::OkStatus();
  }

  absl::Status PartialNorm(int index, void* grad_data, int64_t numel,
                           float divisor, NormKind kind) override {
    ASSIGN_OR_RETURN(float* grads,
                     WidenedGradients(index, grad_data, numel));
    const std::string what = absl::StrCat("piece ", index, ": gradient norm");
    if (divisor != 1) {
      RETURN_IF_ERROR(CudaStatus(
          gpu::LaunchDivide(grads, gpu::kKernelFloat32, numel, divisor,
                            comm_->stream()), what));
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

  absl::Status ClippedOwnerStep(
      int index, void* param_data, void* grad_data, int64_t numel,
      double max_norm, NormKind kind,
      const HyperParameterOverrides& overrides) override {
    // PartialNorm already widened and averaged them.
    float* grads = grad_dtype_ == DataType::kFloat32
                       ? static_cast<float*>(grad_data)
                       : grad_room_[index].as<float>();
    RETURN_IF_ERROR(CudaStatus(
        gpu::LaunchClipScale(grads, numel, norm_slots_.as<float>(), world_size_,
                             kind == NormKind::kInf, max_norm,
                             comm_->stream()),
        absl::StrCat("piece ", index, ": clip gradient")));
    return Step(index, param_data, grads, overrides);
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

  // The forward's kernels wait on the device; the host goes on.
  absl::Status OrderComputeAfterBroadcast(Work& work,
                                          absl::Duration timeout) override {
    ScopedDevice scoped(comm_->device());
    RETURN_IF_ERROR(scoped.status());
    return StreamWaitFor(work, compute_, timeout);
  }

 private:
  // Piece `index`'s gradients as fp32: in place, or widened into its room
  // (enqueued on the communication stream).
  absl::StatusOr<float*> WidenedGradients(int index, void* grads,
                                          int64_t numel) {
    if (grad_dtype_ == DataType::kFloat32) return static_cast<float*>(grads);
    if (index >= static_cast<int>(grad_room_.size()) ||
        grad_room_[index].get() == nullptr) {
      return absl::InternalError(absl::StrCat(
          "piece ", index, " has no room for its fp32 gradients"));
    }
    float* room = grad_room_[index].as<float>();
    RETURN_IF_ERROR(CudaStatus(
        gpu::LaunchBFloat16ToFloat(static_cast<const uint16_t*>(grads), room,
                                   numel, comm_->stream()),
        absl::StrCat("piece ", index, ": widen gradient")));
    return room;
  }

  // The optimizer's step on fp32 gradients `grads`, enqueued on the
  // communication stream: on the parameters, or (bf16) on the master
  // weights, rounded into the parameters by the same kernel.
  absl::Status Step(int index, void* params, const float* grads,
                    const HyperParameterOverrides& overrides) {
    if (param_dtype_ == DataType::kFloat32) {
      return optimizer_->EnqueueStep(index, static_cast<float*>(params), grads,
                                     comm_->stream(), overrides);
    }
    return optimizer_->EnqueueBf16Step(
        index, static_cast<uint16_t*>(params), grads,
        GpuShardOptimizer::GradType::kFloat32, comm_->stream(), overrides);
  }

  NcclCommunicator* const comm_;
  GpuShardOptimizer* const optimizer_;
  const cudaStream_t compute_;
  const absl::Duration timeout_;
  const Clock& clock_;
  const DataType param_dtype_;
  const DataType grad_dtype_;
  std::vector<DeviceBuffer> params_;
  std::vector<DeviceBuffer> grads_;
  std::vector<void*> param_views_;
  std::vector<void*> grad_views_;
  std::vector<CudaEvent> ready_events_;  // per bucket, re-recorded each step
  // bf16 gradients: each owned piece's fp32 room (AdoptOwnedPiece), by
  // piece index.
  std::vector<DeviceBuffer> grad_room_;
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
    if (numel < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(numel, " elements of parameter ", param_index));
    }
    return ReadParameterRange(param_index, offset, absl::MakeSpan(out, numel));
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
  hook_options.precision = options.precision;
  hook_options.overlap_param_broadcast = options.overlap_param_broadcast;
  // Whole buckets, each broadcast right after its step (see the header).
  hook_options.piece_bytes = 0;
  hook_options.broadcast_lag = 0;
  auto memory = std::make_unique<DeviceMemory>(
      comm, optimizer.get(),
      options.compute_stream == nullptr ? cudaStreamLegacy
                                        : options.compute_stream,
      options.timeout, *options.clock, options.precision);
  auto hook = std::make_unique<GpuZeroHookImpl>(
      std::move(params), comm, std::move(optimizer), std::move(memory),
      std::move(provider), hook_options);
  RETURN_IF_ERROR(hook->Init());
  return std::unique_ptr<GpuZeroHook>(std::move(hook));
}

}  // namespace pshard::worker
