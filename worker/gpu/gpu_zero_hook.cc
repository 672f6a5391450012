#include "worker/gpu/gpu_zero_hook.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/gpu/cuda_util.h"
#include "worker/gpu/kernel_params.h"
#include "worker/gpu/kernels.h"

namespace pshard::worker {
namespace {

using gpu::CudaEvent;
using gpu::CudaStatus;
using gpu::DeviceBuffer;
using gpu::ScopedDevice;

// Per bucket, device buffers for parameters and gradients; views per
// parameter (BucketStorage's layout, on the device).
class DeviceBucketStorage {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceBucketStorage>> Create(
      const BucketLayout& layout, int num_params) {
    auto storage =
        std::unique_ptr<DeviceBucketStorage>(new DeviceBucketStorage);
    storage->param_views_.assign(num_params, nullptr);
    storage->grad_views_.assign(num_params, nullptr);
    for (const Bucket& bucket : layout.buckets()) {
      const size_t bytes = static_cast<size_t>(bucket.numel) * sizeof(float);
      ASSIGN_OR_RETURN(
          DeviceBuffer params,
          DeviceBuffer::Allocate(
              bytes, absl::StrCat("bucket ", bucket.index, ": parameters (",
                                  bytes, " bytes)")));
      ASSIGN_OR_RETURN(
          DeviceBuffer grads,
          DeviceBuffer::Allocate(
              bytes, absl::StrCat("bucket ", bucket.index, ": gradients (",
                                  bytes, " bytes)")));
      for (const BucketEntry& e : bucket.entries) {
        storage->param_views_[e.param_index] = params.as<float>() + e.offset;
        storage->grad_views_[e.param_index] = grads.as<float>() + e.offset;
      }
      storage->params_.push_back(std::move(params));
      storage->grads_.push_back(std::move(grads));
    }
    return storage;
  }

  float* bucket_params(int b) const { return params_[b].as<float>(); }
  float* bucket_grads(int b) const { return grads_[b].as<float>(); }
  const std::vector<float*>& param_views() const { return param_views_; }
  const std::vector<float*>& grad_views() const { return grad_views_; }

 private:
  DeviceBucketStorage() = default;
  std::vector<DeviceBuffer> params_;
  std::vector<DeviceBuffer> grads_;
  std::vector<float*> param_views_;
  std::vector<float*> grad_views_;
};

class GpuZeroHookImpl final : public GpuZeroHook {
 public:
  GpuZeroHookImpl(std::vector<ParameterInfo> params, NcclCommunicator* comm,
                  std::unique_ptr<GpuShardOptimizer> optimizer,
                  AssignmentProvider provider,
                  const GpuZeroHookOptions& options)
      : infos_(std::move(params)),
        comm_(comm),
        optimizer_(std::move(optimizer)),
        provider_(std::move(provider)),
        options_(options),
        compute_(options.compute_stream == nullptr ? cudaStreamLegacy
                                                   : options.compute_stream) {}

  ~GpuZeroHookImpl() override {
    // Steps still queued read and write this hook's buffers: never free them
    // under a running kernel.
    bool pending = false;
    for (const auto& work : works_) pending |= !work->IsCompleted();
    if (pending) {
      comm_->Abort(absl::CancelledError("GpuZeroHook destroyed mid-step"));
      for (const auto& work : works_) (void)work->Wait(options_.timeout);
    }
  }

  absl::Status Init() {
    ScopedDevice scoped(comm_->device());
    RETURN_IF_ERROR(scoped.status());
    const int n = static_cast<int>(infos_.size());
    ASSIGN_OR_RETURN(
        BucketLayout layout,
        BucketLayout::Build(infos_, BucketLayout::DefaultReadyOrder(n),
                            CapBytes()));
    layout_ = std::make_unique<BucketLayout>(std::move(layout));
    ASSIGN_OR_RETURN(storage_, DeviceBucketStorage::Create(*layout_, n));
    param_ready_.assign(n, 0);
    return absl::OkStatus();
  }

  const std::vector<float*>& params() const override {
    return storage_->param_views();
  }
  const std::vector<float*>& grads() const override {
    return storage_->grad_views();
  }

  void GradientReady(int param_index) override {
    if (!error_.ok()) return;
    absl::Status status = MarkGradientReady(param_index);
    if (!status.ok()) error_ = status;
  }

  absl::Status MarkGradientReady(int param_index) override {
    if (!error_.ok()) return error_;
    const int n = static_cast<int>(infos_.size());
    if (param_index < 0 || param_index >= n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter index ", param_index, " is outside [0, ", n, ")"));
    }
    if (param_ready_[param_index]) {
      return absl::FailedPreconditionError(
          absl::StrCat("gradient of parameter \"", infos_[param_index].name,
                       "\" marked ready twice in one step"));
    }
    param_ready_[param_index] = 1;
    if (state_ != HookState::kInitialized) {
      observed_order_.push_back(param_index);  // rebuild phase: hold
      return absl::OkStatus();
    }
    const int b = layout_->bucket_of(param_index);
    if (--bucket_pending_[b] == 0) {
      // In bucket order only: every rank issues the same collectives in the
      // same order whatever its ready order.
      while (next_bucket_ < layout_->num_buckets() &&
             bucket_pending_[next_bucket_] == 0) {
        RETURN_IF_ERROR(LaunchBucket(next_bucket_++));
      }
    }
    return absl::OkStatus();
  }

  absl::Status FinishStep() override {
    if (!error_.ok()) return Fail(error_);
    ScopedDevice scoped(comm_->device());
    if (!scoped.status().ok()) return Fail(scoped.status());
    for (size_t i = 0; i < infos_.size(); ++i) {
      if (!param_ready_[i]) {
        return Fail(absl::FailedPreconditionError(absl::StrCat(
            "step ", steps_finished_ + 1, " finished before the gradient of \"",
            infos_[i].name, "\" was marked ready")));
      }
    }
    if (state_ != HookState::kInitialized) {
      absl::Status status = Initialize();
      if (!status.ok()) return Fail(status);
      for (int b = 0; b < layout_->num_buckets(); ++b) {
        status = LaunchBucket(b);
        if (!status.ok()) return Fail(status);
      }
    }
    // The next forward runs after this step's broadcasts, on the device.
    if (!works_.empty()) {
      absl::Status status =
          StreamWaitFor(*works_.back(), compute_, options_.timeout);
      if (!status.ok()) return Fail(status);
    }
    for (const auto& work : works_) {
      absl::Status status = work->Wait(options_.timeout);
      if (!status.ok()) {
        return Fail(absl::Status(
            status.code(), absl::StrCat("step ", steps_finished_ + 1, ": ",
                                        status.message())));
      }
    }
    works_.clear();
    std::fill(param_ready_.begin(), param_ready_.end(), 0);
    for (const Bucket& bucket : layout_->buckets()) {
      bucket_pending_[bucket.index] = static_cast<int>(bucket.entries.size());
    }
    next_bucket_ = 0;
    observed_order_.clear();
    ++steps_finished_;
    return absl::OkStatus();
  }

  absl::Status CopyParameterToHost(int param_index, float* out) override {
    if (param_index < 0 || param_index >= static_cast<int>(infos_.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter index ", param_index, " is out of range"));
    }
    ScopedDevice scoped(comm_->device());
    RETURN_IF_ERROR(scoped.status());
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(out, storage_->param_views()[param_index],
                        infos_[param_index].numel * sizeof(float),
                        cudaMemcpyDeviceToHost, compute_),
        absl::StrCat("download parameter ", infos_[param_index].name)));
    return CudaStatus(
        cudaStreamSynchronize(compute_),
        absl::StrCat("download parameter ", infos_[param_index].name));
  }

  HookState state() const override { return state_; }
  int64_t epoch() const override { return assignment_.epoch; }
  const BucketLayout& layout() const override { return *layout_; }
  const std::vector<int>& owners() const override { return assignment_.owners; }
  GpuShardOptimizer& optimizer() override { return *optimizer_; }
  int64_t steps_finished() const override { return steps_finished_; }
  int64_t bucket_steps(int b) const override {
    return b >= 0 && b < static_cast<int>(bucket_steps_.size())
               ? bucket_steps_[b]
               : 0;
  }

 private:
  int64_t CapBytes() const {
    return std::max<int64_t>(
        1, static_cast<int64_t>(options_.bucket_cap_mb * 1024 * 1024));
  }

  absl::Status Fail(absl::Status status) {
    if (error_.ok()) error_ = status;
    comm_->Abort(error_);
    return error_;
  }

  absl::Status LaunchBucket(int b) {
    // Called from GradientReady on the training thread: the legacy default
    // stream and the events are per device, so make ours current.
    ScopedDevice scoped(comm_->device());
    RETURN_IF_ERROR(scoped.status());
    const int owner = assignment_.owners[b];
    const int64_t numel = layout_->buckets()[b].numel;
    float* grads = storage_->bucket_grads(b);
    float* params = storage_->bucket_params(b);
    // The communication stream waits (on the device) for the compute stream
    // to have produced the bucket's gradients.
    cudaEvent_t ready = ready_events_[b].get();
    RETURN_IF_ERROR(
        CudaStatus(cudaEventRecord(ready, compute_),
                   absl::StrCat("bucket ", b, ": gradients ready")));
    NcclCommunicator* comm = comm_;
    works_.push_back(comm->Enqueue([comm, ready, b] {
      return CudaStatus(cudaStreamWaitEvent(comm->stream(), ready, 0),
                        absl::StrCat("bucket ", b, ": wait for gradients"));
    }));
    if (options_.comm_mode == v1::JobSpec::ALLREDUCE_BROADCAST) {
      works_.push_back(comm->AllReduce(grads, numel, DataType::kFloat32));
    } else {
      works_.push_back(comm->Reduce(grads, numel, DataType::kFloat32, owner));
    }
    if (comm->rank() == owner) {
      const int world = comm->world_size();
      GpuShardOptimizer* optimizer = optimizer_.get();
      int64_t* counter = &bucket_steps_[b];
      works_.push_back(comm->Enqueue([comm, optimizer, counter, b, grads,
                                      params, numel, world]() -> absl::Status {
        if (world > 1) {
          // The average, as the CPU hook computes it: g / n, rounded.
          // (g * (1/n) could differ in the last bit for n not a power
          // of two, so divide.)
          RETURN_IF_ERROR(CudaStatus(
              gpu::LaunchDivide(grads, numel, static_cast<float>(world),
                                comm->stream()),
              absl::StrCat("bucket ", b, ": average gradient")));
        }
        RETURN_IF_ERROR(
            optimizer->EnqueueStep(b, params, grads, comm->stream()));
        ++*counter;
        return absl::OkStatus();
      }));
    }
    works_.push_back(comm->Broadcast(params, numel, DataType::kFloat32, owner));
    return absl::OkStatus();
  }

  absl::Status Initialize() {
    // The layout is final only now that the ready order has been observed.
    if (observed_order_ != layout_->ready_order()) {
      ASSIGN_OR_RETURN(
          BucketLayout rebuilt,
          BucketLayout::Build(infos_, observed_order_, CapBytes()));
      ASSIGN_OR_RETURN(std::unique_ptr<DeviceBucketStorage> storage,
                       DeviceBucketStorage::Create(
                           rebuilt, static_cast<int>(infos_.size())));
      for (size_t i = 0; i < infos_.size(); ++i) {
        const size_t bytes = infos_[i].numel * sizeof(float);
        RETURN_IF_ERROR(
            CudaStatus(cudaMemcpyAsync(storage->param_views()[i],
                                       storage_->param_views()[i], bytes,
                                       cudaMemcpyDeviceToDevice, compute_),
                       "re-pack parameters"));
        RETURN_IF_ERROR(CudaStatus(
            cudaMemcpyAsync(storage->grad_views()[i], storage_->grad_views()[i],
                            bytes, cudaMemcpyDeviceToDevice, compute_),
            "re-pack gradients"));
      }
      // The old buffers go when this returns.
      RETURN_IF_ERROR(
          CudaStatus(cudaStreamSynchronize(compute_), "re-pack buckets"));
      layout_ = std::make_unique<BucketLayout>(std::move(rebuilt));
      storage_ = std::move(storage);
    }
    state_ = HookState::kLayoutReported;

    ASSIGN_OR_RETURN(BucketAssignment assignment, provider_(*layout_));
    const int num_buckets = layout_->num_buckets();
    if (static_cast<int>(assignment.owners.size()) != num_buckets) {
      return absl::InvalidArgumentError(absl::StrCat(
          "assignment (epoch ", assignment.epoch, ") has ",
          assignment.owners.size(), " buckets, the layout has ", num_buckets));
    }
    for (int b = 0; b < num_buckets; ++b) {
      const int owner = assignment.owners[b];
      if (owner < 0 || owner >= comm_->world_size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "assignment (epoch ", assignment.epoch, ") gives bucket ", b,
            " to rank ", owner, ", outside [0, ", comm_->world_size(), ")"));
      }
    }
    for (int b = 0; b < num_buckets; ++b) {
      if (assignment.owners[b] == comm_->rank()) {
        RETURN_IF_ERROR(optimizer_->AddBucket(b, layout_->Spans(b)));
      }
    }
    ready_events_.clear();
    for (int b = 0; b < num_buckets; ++b) {
      ASSIGN_OR_RETURN(CudaEvent event, CudaEvent::Create(absl::StrCat(
                                            "bucket ", b, ": event")));
      ready_events_.push_back(std::move(event));
    }
    assignment_ = std::move(assignment);
    bucket_steps_.assign(num_buckets, 0);
    bucket_pending_.assign(num_buckets, 0);
    state_ = HookState::kInitialized;
    return absl::OkStatus();
  }

  std::vector<ParameterInfo> infos_;
  NcclCommunicator* const comm_;
  std::unique_ptr<GpuShardOptimizer> optimizer_;
  AssignmentProvider provider_;
  const GpuZeroHookOptions options_;
  const cudaStream_t compute_;

  HookState state_ = HookState::kUninitialized;
  std::unique_ptr<BucketLayout> layout_;
  std::unique_ptr<DeviceBucketStorage> storage_;
  BucketAssignment assignment_;
  std::vector<CudaEvent> ready_events_;  // per bucket, re-recorded each step
  std::vector<int64_t> bucket_steps_;
  absl::Status error_;
  int64_t steps_finished_ = 0;

  // Per iteration (cleared by FinishStep).
  std::vector<int> observed_order_;
  std::vector<char> param_ready_;
  std::vector<int> bucket_pending_;
  int next_bucket_ = 0;
  std::vector<std::shared_ptr<Work>> works_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuZeroHook>> GpuZeroHook::Create(
    std::vector<ParameterInfo> params, NcclCommunicator* comm,
    std::unique_ptr<GpuShardOptimizer> optimizer, AssignmentProvider provider,
    const GpuZeroHookOptions& options) {
  if (params.empty()) {
    return absl::InvalidArgumentError("the model has no parameters");
  }
  if (comm == nullptr || optimizer == nullptr || !provider) {
    return absl::InvalidArgumentError(
        "a communicator, an optimizer and an assignment provider are needed");
  }
  if (optimizer->device() != comm->device()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the optimizer is on CUDA device ", optimizer->device(),
                     ", the communicator on ", comm->device()));
  }
  if (!(options.bucket_cap_mb > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bucket_cap_mb must be > 0, got ", options.bucket_cap_mb));
  }
  auto hook = std::make_unique<GpuZeroHookImpl>(std::move(params), comm,
                                                std::move(optimizer),
                                                std::move(provider), options);
  RETURN_IF_ERROR(hook->Init());
  return std::unique_ptr<GpuZeroHook>(std::move(hook));
}

}  // namespace pshard::worker
