#include "worker/gpu/gpu_shard_optimizer.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "worker/gpu/cuda_util.h"
#include "worker/gpu/device.h"
#include "worker/gpu/kernel_params.h"
#include "worker/gpu/kernels.h"
#include "worker/gpu/optimizer_plan.h"

namespace pshard::worker {

using gpu::BucketPlan;
using gpu::ChunkDescriptor;
using gpu::CudaStatus;
using gpu::CudaStream;
using gpu::DeviceBuffer;
using gpu::ScopedDevice;

namespace {

struct GpuBucket {
  BucketPlan plan;
  bool bf16 = false;
  DeviceBuffer chunks;  // plan.chunks on the device
  DeviceBuffer state[kMaxStateArrays];  // empty where the plan keeps none
  DeviceBuffer master;  // bf16 buckets: fp32 master weights, extent elements
  int64_t state_bytes = 0;
  int64_t steps = 0;  // guarded by the optimizer's mutex
  // ViewState's host copy of `state` (guarded by the optimizer's mutex):
  // valid until the bucket's next step, which frees it.
  std::vector<float> host_state[kMaxStateArrays];

  void ReleaseHostState() {
    for (std::vector<float>& host : host_state) {
      if (host.capacity() > 0) std::vector<float>().swap(host);
    }
  }
};

}  // namespace

class GpuShardOptimizer::Impl {
 public:
  Impl(v1::OptimizerSpec spec, int device, CudaStream stream)
      : spec_(std::move(spec)), device_(device), stream_(std::move(stream)) {}

  ~Impl() {
    // Steps may still be queued on callers' streams; freeing their buffers
    // under them would be a use-after-free on the device.
    ScopedDevice scoped(device_);
    (void)cudaDeviceSynchronize();
    // Released here, on their device, rather than after this scope on
    // whatever device the destroying thread has current (a stray context
    // on device 0 for a program on another).
    absl::MutexLock lock(&mu_);
    buckets_.clear();
    stream_ = CudaStream();
  }

  int device() const { return device_; }

  absl::Status AddBucket(int bucket_index, std::vector<ParamSpan> spans,
                         bool bf16, const void* initial, bool initial_is_bf16) {
    ScopedDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    ASSIGN_OR_RETURN(BucketPlan plan,
                     gpu::PlanBucket(spec_, bucket_index, std::move(spans)));
    {
      absl::MutexLock lock(&mu_);
      if (buckets_.count(bucket_index) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("bucket ", bucket_index, " was already added"));
      }
    }
    auto bucket = std::make_unique<GpuBucket>();
    const std::string what = absl::StrCat("bucket ", bucket_index);
    cudaStream_t s = stream_.get();
    ASSIGN_OR_RETURN(
        bucket->chunks,
        DeviceBuffer::Allocate(
            plan.chunks.size() * sizeof(ChunkDescriptor),
            absl::StrCat(what, ": cudaMalloc(chunk descriptors)")));
    if (!plan.chunks.empty()) {
      RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(bucket->chunks.get(), plan.chunks.data(),
                          bucket->chunks.bytes(), cudaMemcpyHostToDevice, s),
          absl::StrCat(what, ": upload chunk descriptors")));
    }
    // Host copies of arrays that do not start at zero (Adagrad's "sum"):
    // kept alive until the set-up sync below.
    std::vector<float> initial_state[kMaxStateArrays];
    for (const BucketPlan::StateFill& fill : plan.fills) {
      std::vector<float>& host = initial_state[fill.array];
      if (host.empty()) host.assign(plan.state_numel, 0.0f);
      std::fill(host.begin() + fill.state_offset,
                host.begin() + fill.state_offset + fill.numel, fill.value);
    }
    for (int i = 0; i < kMaxStateArrays; ++i) {
      if (!plan.keeps[i]) continue;
      const size_t bytes =
          static_cast<size_t>(plan.state_numel) * sizeof(float);
      ASSIGN_OR_RETURN(bucket->state[i],
                       DeviceBuffer::Allocate(
                           bytes, absl::StrCat(what, ": cudaMalloc(state ", i,
                                               ", ", bytes, " bytes)")));
      if (bytes == 0) continue;
      if (!initial_state[i].empty()) {
        RETURN_IF_ERROR(CudaStatus(
            cudaMemcpyAsync(bucket->state[i].get(), initial_state[i].data(),
                            bytes, cudaMemcpyHostToDevice, s),
            absl::StrCat(what, ": initial state ", i)));
      } else {
        RETURN_IF_ERROR(
            CudaStatus(cudaMemsetAsync(bucket->state[i].get(), 0, bytes, s),
                       absl::StrCat(what, ": zero state")));
      }
    }
    bucket->state_bytes = plan.state_bytes();
    if (bf16) {
      if (initial == nullptr && plan.extent > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": null initial parameters for a bf16 bucket"));
      }
      const size_t bytes = static_cast<size_t>(plan.extent) * sizeof(float);
      ASSIGN_OR_RETURN(bucket->master,
                       DeviceBuffer::Allocate(
                           bytes, absl::StrCat(what, ": cudaMalloc(master ",
                                               bytes, " bytes)")));
      if (bytes > 0) {
        // On the legacy default stream, ordered after whatever produced
        // `initial` with synchronous copies or on blocking streams.
        RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(s),
                                   absl::StrCat(what, ": set-up")));
        s = cudaStreamLegacy;
        if (initial_is_bf16) {
          RETURN_IF_ERROR(CudaStatus(
              gpu::LaunchBFloat16ToFloat(static_cast<const uint16_t*>(initial),
                                         bucket->master.as<float>(),
                                         plan.extent, s),
              absl::StrCat(what, ": widen initial bf16 parameters")));
        } else {
          RETURN_IF_ERROR(
              CudaStatus(cudaMemcpyAsync(bucket->master.get(), initial, bytes,
                                         cudaMemcpyDeviceToDevice, s),
                         absl::StrCat(what, ": copy initial parameters")));
        }
      }
      bucket->state_bytes += static_cast<int64_t>(bytes);
      bucket->bf16 = true;
    }
    // Setup time: wait here so the host plan vector may go and errors show.
    RETURN_IF_ERROR(
        CudaStatus(cudaStreamSynchronize(s), absl::StrCat(what, ": set-up")));
    bucket->plan = std::move(plan);

    absl::MutexLock lock(&mu_);
    auto [it, inserted] = buckets_.try_emplace(bucket_index, nullptr);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat("bucket ", bucket_index, " was already added"));
    }
    it->second = std::move(bucket);
    return absl::OkStatus();
  }

  absl::Status AdoptMasterWeights(int bucket_index, const float* initial,
                                  int64_t numel) {
    ScopedDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(GpuBucket* found, FindBucket(bucket_index));
    GpuBucket& bucket = *found;
    const std::string what = absl::StrCat("bucket ", bucket_index);
    if (bucket.bf16) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, " already has master weights"));
    }
    if (numel != bucket.plan.extent || (numel > 0 && initial == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": ", numel, " initial master weights, the bucket spans ",
          bucket.plan.extent));
    }
    const size_t bytes = static_cast<size_t>(numel) * sizeof(float);
    ASSIGN_OR_RETURN(bucket.master,
                     DeviceBuffer::Allocate(bytes, absl::StrCat(
                         what, ": cudaMalloc(master ", bytes, " bytes)")));
    if (bytes > 0) {
      RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(bucket.master.get(), initial, bytes,
                          cudaMemcpyHostToDevice, stream_.get()),
          absl::StrCat(what, ": upload master weights")));
      RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_.get()),
                                 absl::StrCat(what, ": upload master weights")));
    }
    bucket.state_bytes += static_cast<int64_t>(bytes);
    bucket.bf16 = true;
    return absl::OkStatus();
  }

  absl::Status Enqueue(int bucket_index, void* params, const void* grads,
                       bool bf16_params, bool bf16_grads, cudaStream_t stream,
                       const HyperParameterOverrides& overrides) {
    if (params == nullptr || grads == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bucket ", bucket_index, ": null parameter or gradient buffer"));
    }
    ScopedDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(GpuBucket* found, FindBucket(bucket_index));
    GpuBucket& bucket = *found;
    if (bucket.bf16 != bf16_params) {
      return absl::FailedPreconditionError(
          absl::StrCat("bucket ", bucket_index, " holds ",
                       bucket.bf16 ? "bf16" : "fp32", " parameters; use ",
                       bucket.bf16 ? "EnqueueBf16Step" : "EnqueueStep/Step"));
    }
    const int64_t step = bucket.steps + 1;
    gpu::OptimizerBuffers buffers{};
    buffers.params = params;
    buffers.param_dtype =
        bf16_params ? gpu::kKernelBFloat16 : gpu::kKernelFloat32;
    buffers.grads = grads;
    buffers.grad_dtype =
        bf16_grads ? gpu::kKernelBFloat16 : gpu::kKernelFloat32;
    buffers.master = bucket.master.as<float>();
    buffers.state0 = bucket.state[0].as<float>();
    buffers.state1 = bucket.state[1].as<float>();
    buffers.state2 = bucket.state[2].as<float>();
    const auto* chunks = bucket.chunks.as<const ChunkDescriptor>();
    for (int i = 0; i < static_cast<int>(bucket.plan.launches.size()); ++i) {
      const gpu::OptimizerLaunchParams launch =
          gpu::MakeLaunchParams(bucket.plan, i, chunks, step, overrides);
      RETURN_IF_ERROR(CudaStatus(
          gpu::LaunchOptimizerStep(launch, buffers, stream),
          absl::StrCat("bucket ", bucket_index, ": optimizer step ", step)));
    }
    bucket.steps = step;
    // ViewState's views end here (a checkpoint copied them already).
    bucket.ReleaseHostState();
    return absl::OkStatus();
  }

  absl::Status Sync(cudaStream_t stream, absl::string_view what) {
    ScopedDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    return CudaStatus(cudaStreamSynchronize(stream), what);
  }

  absl::Status CopyStateOut(int bucket_index, int which, float* out) {
    ScopedDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(GpuBucket* bucket, FindBucket(bucket_index));
    if (which < 0 || which >= kMaxStateArrays || !bucket->plan.keeps[which]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bucket ", bucket_index, " keeps no state array ", which));
    }
    const DeviceBuffer* src = &bucket->state[which];
    if (src->bytes() == 0) return absl::OkStatus();
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(out, src->get(), src->bytes(),
                                   cudaMemcpyDeviceToDevice, stream_.get()),
                   absl::StrCat("bucket ", bucket_index, ": copy out")));
    return CudaStatus(cudaStreamSynchronize(stream_.get()),
                      absl::StrCat("bucket ", bucket_index, ": copy out"));
  }

  absl::StatusOr<BucketStateView> ViewState(int bucket_index) {
    ScopedDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(GpuBucket* bucket, FindBucket(bucket_index));
    ASSIGN_OR_RETURN(const StateArrays arrays,
                     DownloadState(bucket_index, *bucket));
    return ViewStateArrays(bucket->plan.state_spans, bucket->steps, arrays);
  }

  absl::Status ImportState(int bucket_index, const BucketState& state) {
    ScopedDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(GpuBucket* bucket, FindBucket(bucket_index));
    RETURN_IF_ERROR(
        CheckStateFits(bucket_index, bucket->plan.state_spans, state));
    // Over the current arrays, so that elements outside the spans keep
    // their values, as on the CPU.
    ASSIGN_OR_RETURN(const StateArrays arrays,
                     DownloadState(bucket_index, *bucket));
    ScatterState(bucket->plan.state_spans, state, arrays);
    const std::string what = absl::StrCat("bucket ", bucket_index,
                                          ": upload optimizer state");
    for (int k = 0; k < kMaxStateArrays; ++k) {
      if (arrays[k] == nullptr || bucket->state[k].bytes() == 0) continue;
      RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(bucket->state[k].get(), arrays[k],
                          bucket->state[k].bytes(), cudaMemcpyHostToDevice,
                          stream_.get()),
          what));
    }
    RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_.get()), what));
    bucket->steps = state.steps;
    bucket->ReleaseHostState();
    return absl::OkStatus();
  }

  absl::Status CopyMasterToHost(int bucket_index, int64_t offset,
                                int64_t numel, float* out) {
    ScopedDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(GpuBucket* bucket, FindBucket(bucket_index));
    const std::string what =
        absl::StrCat("bucket ", bucket_index, ": download master weights");
    if (!bucket->bf16) {
      return absl::FailedPreconditionError(absl::StrCat(
          "bucket ", bucket_index, " has no master weights (fp32 bucket)"));
    }
    if (offset < 0 || numel < 0 || offset > bucket->plan.extent ||
        numel > bucket->plan.extent - offset ||
        (numel > 0 && out == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": elements [", offset, ", ", offset + numel,
          ") are outside [0, ", bucket->plan.extent, ")"));
    }
    if (numel == 0) return absl::OkStatus();
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(out, bucket->master.as<float>() + offset,
                        static_cast<size_t>(numel) * sizeof(float),
                        cudaMemcpyDeviceToHost, stream_.get()),
        what));
    return CudaStatus(cudaStreamSynchronize(stream_.get()), what);
  }

  cudaStream_t stream() const { return stream_.get(); }

  int64_t state_bytes(int bucket_index) const {
    absl::MutexLock lock(&mu_);
    auto it = buckets_.find(bucket_index);
    return it == buckets_.end() ? 0 : it->second->state_bytes;
  }

  int64_t total_state_bytes() const {
    absl::MutexLock lock(&mu_);
    int64_t total = 0;
    for (const auto& [index, bucket] : buckets_) total += bucket->state_bytes;
    return total;
  }

 private:
  // NotFound if this rank does not own bucket `bucket_index`.
  absl::StatusOr<GpuBucket*> FindBucket(int bucket_index)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = buckets_.find(bucket_index);
    if (it == buckets_.end()) {
      return absl::NotFoundError(
          absl::StrCat("bucket ", bucket_index, " is not owned by this rank"));
    }
    return it->second.get();
  }

  // Copies every state array the bucket keeps into its host copy and waits;
  // returns the copies (null where none is kept).
  absl::StatusOr<StateArrays> DownloadState(int bucket_index,
                                            GpuBucket& bucket)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    StateArrays arrays{};
    const std::string what = absl::StrCat("bucket ", bucket_index,
                                          ": download optimizer state");
    for (int k = 0; k < kMaxStateArrays; ++k) {
      if (!bucket.plan.keeps[k]) continue;
      std::vector<float>& host = bucket.host_state[k];
      host.resize(static_cast<size_t>(bucket.plan.state_numel));
      arrays[k] = host.data();
      if (bucket.state[k].bytes() == 0) continue;
      RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(host.data(), bucket.state[k].get(),
                          bucket.state[k].bytes(), cudaMemcpyDeviceToHost,
                          stream_.get()),
          what));
    }
    RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_.get()), what));
    return arrays;
  }

  const v1::OptimizerSpec spec_;
  const int device_;
  CudaStream stream_;  // for set-up copies and the synchronous Step()
  mutable absl::Mutex mu_;
  // Held while enqueueing: launches of one bucket are issued in step order.
  std::map<int, std::unique_ptr<GpuBucket>> buckets_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<GpuShardOptimizer>> GpuShardOptimizer::Create(
    const v1::OptimizerSpec& spec, int device) {
  if (!IsSupportedOptimizerKind(spec.kind())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer kind ", v1::OptimizerSpec::Kind_Name(spec.kind()),
        " is not supported; use SGD, ADAM, ADAMW, ADAGRAD, RMSPROP or LION"));
  }
  std::string why;
  const int count = CudaDeviceCount(&why);
  if (count == 0) {
    return absl::UnavailableError(
        absl::StrCat("no CUDA device for the GPU optimizer: ", why));
  }
  if (device < 0 || device >= count) {
    return absl::UnavailableError(absl::StrCat(
        "CUDA device ", device, " does not exist (", count, " present)"));
  }
  ScopedDevice scoped(device);
  RETURN_IF_ERROR(scoped.status());
  ASSIGN_OR_RETURN(CudaStream stream,
                   CudaStream::Create("GPU optimizer: cudaStreamCreate"));
  return std::unique_ptr<GpuShardOptimizer>(new GpuShardOptimizer(
      std::make_unique<Impl>(spec, device, std::move(stream))));
}

GpuShardOptimizer::GpuShardOptimizer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

GpuShardOptimizer::~GpuShardOptimizer() = default;

absl::Status GpuShardOptimizer::AddBucket(int bucket_index,
                                          std::vector<ParamSpan> spans) {
  return impl_->AddBucket(bucket_index, std::move(spans), /*bf16=*/false,
                          nullptr, false);
}

absl::Status GpuShardOptimizer::AddBf16Bucket(int bucket_index,
                                              std::vector<ParamSpan> spans,
                                              const void* initial_params,
                                              bool initial_is_bf16) {
  return impl_->AddBucket(bucket_index, std::move(spans), /*bf16=*/true,
                          initial_params, initial_is_bf16);
}

absl::Status GpuShardOptimizer::AdoptMasterWeights(int bucket_index,
                                                   const float* initial,
                                                   int64_t numel) {
  return impl_->AdoptMasterWeights(bucket_index, initial, numel);
}

absl::Status GpuShardOptimizer::Step(int bucket_index, float* params,
                                     const float* grads,
                                     const HyperParameterOverrides& overrides) {
  // The legacy default stream: ordered after synchronous cudaMemcpy calls
  // (whose DMA may still be running when they return) and after the work of
  // every blocking stream.
  RETURN_IF_ERROR(impl_->Enqueue(bucket_index, params, grads,
                                 /*bf16_params=*/false, /*bf16_grads=*/false,
                                 cudaStreamLegacy, overrides));
  return impl_->Sync(cudaStreamLegacy,
                     absl::StrCat("bucket ", bucket_index, ": optimizer step"));
}

absl::Status GpuShardOptimizer::EnqueueStep(
    int bucket_index, float* params, const float* grads, CUstream_st* stream,
    const HyperParameterOverrides& overrides) {
  return impl_->Enqueue(bucket_index, params, grads, /*bf16_params=*/false,
                        /*bf16_grads=*/false, stream, overrides);
}

absl::Status GpuShardOptimizer::EnqueueBf16Step(
    int bucket_index, uint16_t* params, const void* grads, GradType grad_type,
    CUstream_st* stream, const HyperParameterOverrides& overrides) {
  return impl_->Enqueue(bucket_index, params, grads, /*bf16_params=*/true,
                        grad_type == GradType::kBFloat16, stream, overrides);
}

absl::StatusOr<BucketStateView> GpuShardOptimizer::ViewState(
    int bucket_index) const {
  return impl_->ViewState(bucket_index);
}

absl::Status GpuShardOptimizer::ImportState(int bucket_index,
                                            const BucketState& state) {
  return impl_->ImportState(bucket_index, state);
}

absl::Status GpuShardOptimizer::CopyMasterWeightsToHost(int bucket_index,
                                                        int64_t offset,
                                                        int64_t numel,
                                                        float* out) {
  return impl_->CopyMasterToHost(bucket_index, offset, numel, out);
}

absl::Status GpuShardOptimizer::CopyState(int bucket_index, int which,
                                          float* out) {
  return impl_->CopyStateOut(bucket_index, which, out);
}

int64_t GpuShardOptimizer::state_bytes(int bucket_index) const {
  return impl_->state_bytes(bucket_index);
}

int64_t GpuShardOptimizer::total_state_bytes() const {
  return impl_->total_state_bytes();
}

int GpuShardOptimizer::device() const { return impl_->device(); }

}  // namespace pshard::worker
