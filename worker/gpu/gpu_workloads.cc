#include "worker/gpu/gpu_workloads.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "worker/gpu/cuda_util.h"
#include "worker/gpu/initial_parameters.h"
#include "worker/gpu/kernels.h"
#include "worker/gpu/synthetic.h"
#include "worker/workload/fixed_parameters_workload.h"
#include "worker/workload/synthetic_workload.h"

namespace pshard::worker {

absl::Status UploadInitialParameters(Workload& host,
                                     absl::Span<float* const> host_buffers,
                                     absl::Span<float* const> params,
                                     cudaStream_t stream,
                                     absl::string_view who) {
  RETURN_IF_ERROR(host.InitializeParameters(host_buffers));
  const auto& infos = host.parameters();
  const std::string context = absl::StrCat(who, ": upload initial parameters");
  for (size_t i = 0; i < infos.size(); ++i) {
    RETURN_IF_ERROR(gpu::CudaStatus(
        cudaMemcpyAsync(params[i], host_buffers[i],
                        infos[i].numel * sizeof(float), cudaMemcpyHostToDevice,
                        stream),
        context));
  }
  return gpu::CudaStatus(cudaStreamSynchronize(stream), context);
}

namespace {

using gpu::CudaStatus;
using gpu::DeviceBuffer;
using gpu::PinnedBuffer;
using gpu::ScopedDevice;

class GpuSyntheticWorkload final : public FixedParametersWorkload {
 public:
  GpuSyntheticWorkload(std::vector<ParameterInfo> params, uint64_t seed,
                       int rank, int device, cudaStream_t stream)
      : FixedParametersWorkload("synthetic (GPU)", std::move(params)),
        seed_(seed),
        rank_(rank),
        device_(device),
        stream_(stream) {}

  absl::Status InitializeParameters(absl::Span<float* const> params) override {
    RETURN_IF_ERROR(CheckBuffers(params.size()));
    ScopedDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    const std::vector<ParameterInfo>& infos = parameters();
    for (size_t i = 0; i < infos.size(); ++i) {
      RETURN_IF_ERROR(
          CudaStatus(gpu::LaunchSyntheticValues(
                         params[i], infos[i].numel,
                         gpu::SyntheticInitKey(seed_, static_cast<int>(i)), 0,
                         1.0f, stream_),
                     "synthetic (GPU): initial parameters"));
    }
    // Set-up: whoever reads the parameters next may use another stream.
    return CudaStatus(cudaStreamSynchronize(stream_),
                      "synthetic (GPU): initial parameters");
  }

  absl::StatusOr<double> ComputeGradients(int64_t step,
                                          absl::Span<const float* const> params,
                                          absl::Span<float* const> grads,
                                          GradientSink& sink) override {
    RETURN_IF_ERROR(CheckBuffers(params.size(), grads.size()));
    ScopedDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    const std::vector<ParameterInfo>& infos = parameters();
    for (size_t k = infos.size(); k-- > 0;) {
      RETURN_IF_ERROR(CudaStatus(
          gpu::LaunchSyntheticValues(
              grads[k], infos[k].numel,
              gpu::SyntheticGradKey(seed_, rank_, step, static_cast<int>(k)), 0,
              1.0f, stream_),
          absl::StrCat("synthetic (GPU): gradient of ", infos[k].name)));
      sink.GradientReady(static_cast<int>(k));
    }
    return std::numeric_limits<double>::quiet_NaN();
  }

  int64_t samples_per_step() const override { return 0; }

 private:
  const uint64_t seed_;
  const int rank_;
  const int device_;
  const cudaStream_t stream_;
};

class HostWorkloadAdapter final : public FixedParametersWorkload {
 public:
  HostWorkloadAdapter(std::unique_ptr<Workload> host, int device,
                      cudaStream_t stream, std::vector<PinnedBuffer> params,
                      std::vector<PinnedBuffer> grads)
      : FixedParametersWorkload("host workload", host->parameters()),
        host_(std::move(host)),
        device_(device),
        stream_(stream),
        host_params_(std::move(params)),
        host_grads_(std::move(grads)) {}

  absl::Status InitializeParameters(absl::Span<float* const> params) override {
    RETURN_IF_ERROR(CheckBuffers(params.size()));
    const auto& infos = parameters();
    ScopedDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    std::vector<float*> host(infos.size());
    for (size_t i = 0; i < infos.size(); ++i)
      host[i] = host_params_[i].as<float>();
    return UploadInitialParameters(*host_, host, params, stream_,
                                   "host workload");
  }

  absl::StatusOr<double> ComputeGradients(int64_t step,
                                          absl::Span<const float* const> params,
                                          absl::Span<float* const> grads,
                                          GradientSink& sink) override {
    RETURN_IF_ERROR(CheckBuffers(params.size(), grads.size()));
    const auto& infos = parameters();
    ScopedDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    // The host needs this step's parameters; the stream orders the copies
    // after the previous step's broadcasts (the hook made it wait on them at
    // the end of the step, or does now with overlap_param_broadcast).
    for (size_t i = 0; i < infos.size(); ++i) {
      RETURN_IF_ERROR(sink.WaitForParameter(static_cast<int>(i)));
    }
    for (size_t i = 0; i < infos.size(); ++i) {
      RETURN_IF_ERROR(
          CudaStatus(cudaMemcpyAsync(host_params_[i].as<float>(), params[i],
                                     infos[i].numel * sizeof(float),
                                     cudaMemcpyDeviceToHost, stream_),
                     "host workload: download parameters"));
    }
    RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_),
                               "host workload: download parameters"));

    // Forwards each final gradient to the device, then to the hook.
    struct UploadingSink : GradientSink {
      HostWorkloadAdapter* self;
      absl::Span<float* const> device_grads;
      GradientSink* next;
      absl::Status status;
      void GradientReady(int i) override {
        if (!status.ok()) return;
        if (i < 0 || i >= static_cast<int>(device_grads.size())) {
          status = absl::InvalidArgumentError(
              absl::StrCat("host workload: gradient index ", i));
          return;
        }
        status = CudaStatus(
            cudaMemcpyAsync(device_grads[i], self->host_grads_[i].as<float>(),
                            self->host_->parameters()[i].numel * sizeof(float),
                            cudaMemcpyHostToDevice, self->stream_),
            "host workload: upload gradient");
        if (status.ok()) next->GradientReady(i);
      }
    } uploading;
    uploading.self = this;
    uploading.device_grads = grads;
    uploading.next = &sink;
    std::vector<const float*> host_params(infos.size());
    std::vector<float*> host_grads(infos.size());
    for (size_t i = 0; i < infos.size(); ++i) {
      host_params[i] = host_params_[i].as<float>();
      host_grads[i] = host_grads_[i].as<float>();
    }
    absl::StatusOr<double> loss =
        host_->ComputeGradients(step, host_params, host_grads, uploading);
    RETURN_IF_ERROR(uploading.status);
    // The next step's host workload rewrites the pinned gradients: the
    // uploads must be done by then.
    RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_),
                               "host workload: upload gradients"));
    return loss;
  }

  int64_t samples_per_step() const override {
    return host_->samples_per_step();
  }

 private:
  const std::unique_ptr<Workload> host_;
  const int device_;
  const cudaStream_t stream_;
  std::vector<PinnedBuffer> host_params_;
  std::vector<PinnedBuffer> host_grads_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Workload>> CreateGpuSyntheticWorkload(
    const v1::SyntheticWorkload& spec, uint64_t seed, int rank, int device,
    CUstream_st* stream) {
  // The CPU workload defines the tensors (names, sizes, limits).
  ASSIGN_OR_RETURN(std::unique_ptr<SyntheticWorkload> cpu,
                   SyntheticWorkload::Create(spec, seed, rank));
  return std::unique_ptr<Workload>(
      new GpuSyntheticWorkload(cpu->parameters(), seed, rank, device, stream));
}

absl::StatusOr<std::unique_ptr<Workload>> AdaptHostWorkloadToDevice(
    std::unique_ptr<Workload> host, int device, CUstream_st* stream) {
  if (host == nullptr) {
    return absl::InvalidArgumentError("AdaptHostWorkloadToDevice: no workload");
  }
  ScopedDevice scoped(device);
  RETURN_IF_ERROR(scoped.status());
  std::vector<PinnedBuffer> params, grads;
  for (const ParameterInfo& info : host->parameters()) {
    const size_t bytes = static_cast<size_t>(info.numel) * sizeof(float);
    ASSIGN_OR_RETURN(PinnedBuffer p,
                     PinnedBuffer::Allocate(
                         bytes, absl::StrCat("pinned parameter ", info.name)));
    ASSIGN_OR_RETURN(PinnedBuffer g,
                     PinnedBuffer::Allocate(
                         bytes, absl::StrCat("pinned gradient ", info.name)));
    params.push_back(std::move(p));
    grads.push_back(std::move(g));
  }
  return std::unique_ptr<Workload>(new HostWorkloadAdapter(
      std::move(host), device, stream, std::move(params), std::move(grads)));
}

namespace {

class DeviceAccumulationArithmetic final : public AccumulationArithmetic {
 public:
  DeviceAccumulationArithmetic(int device, cudaStream_t stream)
      : device_(device), stream_(stream) {}

  absl::StatusOr<std::vector<float*>> AllocateScratch(
      const std::vector<ParameterInfo>& params) override {
    ScopedDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    std::vector<float*> pointers;
    for (const ParameterInfo& info : params) {
      const size_t bytes = static_cast<size_t>(info.numel) * sizeof(float);
      ASSIGN_OR_RETURN(
          DeviceBuffer buffer,
          DeviceBuffer::Allocate(bytes, absl::StrCat(
              "micro-batch gradient of ", info.name, " (", bytes,
              " bytes)")));
      pointers.push_back(buffer.as<float>());
      scratch_.push_back(std::move(buffer));
    }
    return pointers;
  }

  // (The device is set for each launch: the accumulating workload calls
  // these outside the inner workload's ScopedDevice.)
  absl::Status Add(float* sum, const float* micro, int64_t n) override {
    ScopedDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    return gpu::CudaStatus(gpu::LaunchAccumulate(sum, micro, n, stream_),
                           "accumulate a micro-batch's gradient");
  }

  absl::Status AddAndDivide(float* sum, const float* micro, int64_t n,
                            float divisor) override {
    ScopedDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    return gpu::CudaStatus(
        gpu::LaunchAccumulateAndDivide(sum, micro, n, divisor, stream_),
        "average the micro-batches' gradient");
  }

 private:
  const int device_;
  const cudaStream_t stream_;
  std::vector<DeviceBuffer> scratch_;
};

// `workload` accumulating spec.gradient_accumulation_steps micro-batches
// on the device (itself when 1).
absl::StatusOr<std::unique_ptr<Workload>> AccumulateOnDevice(
    const v1::JobSpec& spec, std::unique_ptr<Workload> workload, int device,
    CUstream_st* stream) {
  if (spec.gradient_accumulation_steps() <= 1) return workload;
  ASSIGN_OR_RETURN(std::unique_ptr<AccumulationArithmetic> arithmetic,
                   NewDeviceAccumulationArithmetic(device, stream));
  return AccumulatingWorkload::Create(std::move(workload),
                                      spec.gradient_accumulation_steps(),
                                      std::move(arithmetic));
}

}  // namespace

absl::StatusOr<std::unique_ptr<AccumulationArithmetic>>
NewDeviceAccumulationArithmetic(int device, CUstream_st* stream) {
  return std::unique_ptr<AccumulationArithmetic>(
      new DeviceAccumulationArithmetic(device, stream));
}

absl::StatusOr<std::unique_ptr<Workload>> CreateGpuWorkload(
    const v1::JobSpec& spec, int rank, int world_size, int device,
    CUstream_st* stream) {
  if (spec.workload_case() == v1::JobSpec::kSynthetic) {
    ASSIGN_OR_RETURN(std::unique_ptr<Workload> synthetic,
                     CreateGpuSyntheticWorkload(spec.synthetic(), spec.seed(),
                                                rank, device, stream));
    return AccumulateOnDevice(spec, std::move(synthetic), device, stream);
  }
  if (spec.workload_case() == v1::JobSpec::kMlp) {
    ASSIGN_OR_RETURN(std::unique_ptr<Workload> mlp,
                     CreateGpuMlpWorkload(spec.mlp(), spec.seed(), rank,
                                          device, stream));
    return AccumulateOnDevice(spec, std::move(mlp), device, stream);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Workload> host,
                   CreateWorkload(spec, rank, world_size));
  return AdaptHostWorkloadToDevice(std::move(host), device, stream);
}

}  // namespace pshard::worker
