// The `mlp` workload on the GPU: worker/workload/mlp_workload.h's model,
// data and loss, with cuBLAS for the matrix products and small kernels
// (kernels.cu) for bias, ReLU and the loss. Parameters start from the CPU
// workload's exact values and every batch is generated on the host with the
// CPU's random functions, so CPU and GPU train the same problem; sums inside
// the matrix products run in another order, so results agree to rounding, not
// bit for bit.
//
// Row-major matrices are column-major transposes for cuBLAS: with M[r, c]
// row-major (leading dimension c) seen as M^T column-major,
//   forward  Y[b, out] = X[b, in] W[out, in]^T  ->  gemm(T, N, out, b, in, W,
//   X) dW[out, in] = D[b, out]^T X[b, in]          ->  gemm(N, T, in, out, b,
//   X, D) dX[b, in] = D[b, out] W[out, in]            ->  gemm(N, N, in, b,
//   out, W, D) db[out] = column sums of D                  ->  gemv(N, out, b,
//   D, ones)
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "worker/gpu/cuda_util.h"
#include "worker/gpu/gpu_workloads.h"
#include "worker/gpu/initial_parameters.h"
#include "worker/gpu/kernels.h"
#include "worker/workload/fixed_parameters_workload.h"
#include "worker/workload/mlp_workload.h"

namespace pshard::worker {
namespace {

using gpu::CudaStatus;
using gpu::DeviceBuffer;
using gpu::PinnedBuffer;
using gpu::ScopedDevice;

absl::Status CublasStatus(cublasStatus_t status, absl::string_view context) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message = absl::StrCat(
      context, ": ", cublasGetStatusName(status), " (",
      static_cast<int>(status), "): ", cublasGetStatusString(status));
  if (status == CUBLAS_STATUS_ALLOC_FAILED) {
    return absl::ResourceExhaustedError(message);
  }
  if (status == CUBLAS_STATUS_INVALID_VALUE) {
    return absl::InvalidArgumentError(message);
  }
  return absl::InternalError(message);
}

// A cuBLAS handle bound to one stream, destroyed on destruction.
class CublasHandle {
 public:
  CublasHandle() = default;
  static absl::StatusOr<CublasHandle> Create(cudaStream_t stream) {
    CublasHandle h;
    RETURN_IF_ERROR(CublasStatus(cublasCreate(&h.handle_), "cublasCreate"));
    RETURN_IF_ERROR(
        CublasStatus(cublasSetStream(h.handle_, stream), "cublasSetStream"));
    // Plain fp32 products (no TF32), like the CPU workload's sgemm.
    RETURN_IF_ERROR(CublasStatus(
        cublasSetMathMode(h.handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
    return h;
  }
  CublasHandle(CublasHandle&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)) {}
  CublasHandle& operator=(CublasHandle&& other) noexcept {
    if (this != &other) {
      Reset();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  ~CublasHandle() { Reset(); }
  cublasHandle_t get() const { return handle_; }

 private:
  void Reset() {
    if (handle_ != nullptr) (void)cublasDestroy(handle_);
    handle_ = nullptr;
  }
  cublasHandle_t handle_ = nullptr;
};

absl::StatusOr<DeviceBuffer> Floats(int64_t n, absl::string_view what) {
  return DeviceBuffer::Allocate(static_cast<size_t>(n) * sizeof(float),
                                absl::StrCat("mlp (GPU): ", what));
}

class GpuMlpWorkload final : public FixedParametersWorkload {
 public:
  GpuMlpWorkload(std::unique_ptr<MlpWorkload> host, std::vector<int> dims,
                 int batch, int device, cudaStream_t stream)
      : FixedParametersWorkload("mlp (GPU)", host->parameters()),
        host_(std::move(host)),
        dims_(std::move(dims)),
        batch_(batch),
        device_(device),
        stream_(stream) {}

  ~GpuMlpWorkload() override {
    // Kernels still queued use these buffers.
    ScopedDevice scoped(device_);
    (void)cudaStreamSynchronize(stream_);
  }

  absl::Status Init() {
    ScopedDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    ASSIGN_OR_RETURN(cublas_, CublasHandle::Create(stream_));
    const int layers = static_cast<int>(dims_.size()) - 1;
    int max_width = 0;
    for (int d : dims_) max_width = std::max(max_width, d);
    for (int l = 0; l < layers; ++l) {
      const int in = dims_[l], out = dims_[l + 1];
      // The CPU workload's teacher.
      ASSIGN_OR_RETURN(DeviceBuffer dw,
                       Upload(host_->teacher()[2 * l], "teacher weight"));
      ASSIGN_OR_RETURN(DeviceBuffer db,
                       Upload(host_->teacher()[2 * l + 1], "teacher bias"));
      teacher_.push_back(std::move(dw));
      teacher_.push_back(std::move(db));
      ASSIGN_OR_RETURN(DeviceBuffer act, Floats(int64_t{batch_} * in, "act"));
      ASSIGN_OR_RETURN(DeviceBuffer pre, Floats(int64_t{batch_} * out, "pre"));
      act_.push_back(std::move(act));
      pre_.push_back(std::move(pre));
    }
    for (DeviceBuffer& t : teacher_act_) {
      ASSIGN_OR_RETURN(DeviceBuffer buf,
                       Floats(int64_t{batch_} * max_width, "teacher act"));
      t = std::move(buf);
    }
    ASSIGN_OR_RETURN(target_, Floats(int64_t{batch_} * dims_.back(), "target"));
    ASSIGN_OR_RETURN(delta_, Floats(int64_t{batch_} * max_width, "delta"));
    ASSIGN_OR_RETURN(delta_prev_, Floats(int64_t{batch_} * max_width, "delta"));
    ASSIGN_OR_RETURN(ones_, Upload(std::vector<float>(batch_, 1.0f), "ones"));
    ASSIGN_OR_RETURN(loss_sum_,
                     DeviceBuffer::Allocate(sizeof(double), "mlp (GPU): loss"));
    ASSIGN_OR_RETURN(x_host_,
                     PinnedBuffer::Allocate(
                         static_cast<size_t>(batch_) * dims_[0] * sizeof(float),
                         "mlp (GPU): pinned inputs"));
    ASSIGN_OR_RETURN(loss_host_, PinnedBuffer::Allocate(
                                     sizeof(double), "mlp (GPU): pinned loss"));
    return CudaStatus(cudaStreamSynchronize(stream_), "mlp (GPU): set-up");
  }

  absl::Status InitializeParameters(absl::Span<float* const> params) override {
    RETURN_IF_ERROR(CheckBuffers(params.size()));
    const auto& infos = parameters();
    ScopedDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    std::vector<std::vector<float>> values(infos.size());
    std::vector<float*> host(infos.size());
    for (size_t i = 0; i < infos.size(); ++i) {
      values[i].resize(infos[i].numel);
      host[i] = values[i].data();
    }
    return UploadInitialParameters(*host_, host, params, stream_, "mlp (GPU)");
  }

  absl::StatusOr<double> ComputeGradients(int64_t step,
                                          absl::Span<const float* const> params,
                                          absl::Span<float* const> grads,
                                          GradientSink& sink) override {
    RETURN_IF_ERROR(CheckBuffers(params.size(), grads.size()));
    ScopedDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    const int layers = static_cast<int>(dims_.size()) - 1;

    // The batch: inputs on the host (the CPU's normal draws), uploaded; the
    // previous step's upload finished (ComputeGradients ends with a sync).
    float* x = x_host_.as<float>();
    const int64_t x_count = int64_t{batch_} * dims_[0];
    host_->BatchInputs(step, x);
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(act_[0].get(), x, x_count * sizeof(float),
                                   cudaMemcpyHostToDevice, stream_),
                   "mlp (GPU): upload inputs"));
    // Targets: the teacher's forward pass.
    const float* in = act_[0].as<float>();
    for (int l = 0; l < layers; ++l) {
      float* out = l == layers - 1 ? target_.as<float>()
                                   : teacher_act_[l % 2].as<float>();
      RETURN_IF_ERROR(Linear(in, teacher_[2 * l].as<float>(),
                             teacher_[2 * l + 1].as<float>(), dims_[l],
                             dims_[l + 1], out));
      if (l < layers - 1) {
        RETURN_IF_ERROR(CudaStatus(
            gpu::LaunchRelu(out, out, int64_t{batch_} * dims_[l + 1], stream_),
            "mlp (GPU): teacher ReLU"));
      }
      in = out;
    }
    // The student's forward pass. Each layer's parameters may still be on
    // their way (overlap_param_broadcast): the stream waits for them.
    for (int l = 0; l < layers; ++l) {
      RETURN_IF_ERROR(sink.WaitForParameter(2 * l));
      RETURN_IF_ERROR(sink.WaitForParameter(2 * l + 1));
      RETURN_IF_ERROR(Linear(act_[l].as<float>(), params[2 * l],
                             params[2 * l + 1], dims_[l], dims_[l + 1],
                             pre_[l].as<float>()));
      if (l < layers - 1) {
        RETURN_IF_ERROR(CudaStatus(
            gpu::LaunchRelu(pre_[l].as<float>(), act_[l + 1].as<float>(),
                            int64_t{batch_} * dims_[l + 1], stream_),
            "mlp (GPU): ReLU"));
      }
    }
    // MSE (mean over batch and outputs); delta = dL/d(output).
    const int64_t count = int64_t{batch_} * dims_.back();
    RETURN_IF_ERROR(
        CudaStatus(cudaMemsetAsync(loss_sum_.get(), 0, sizeof(double), stream_),
                   "mlp (GPU): loss"));
    RETURN_IF_ERROR(CudaStatus(
        gpu::LaunchMseGrad(pre_[layers - 1].as<float>(), target_.as<float>(),
                           count, 2.0f / static_cast<float>(count),
                           delta_.as<float>(), loss_sum_.as<double>(), stream_),
        "mlp (GPU): loss"));

    // Backward, last layer first. A gradient is announced once its kernels
    // are enqueued and its parameter is no longer read by this backward pass
    // (the hook may then update the parameter on the communication stream):
    // so a weight's gradient only after the input gradient that reads the
    // weight, as autograd fires DDP's hooks.
    const float one = 1.0f, zero = 0.0f;
    float* delta = delta_.as<float>();
    float* delta_prev = delta_prev_.as<float>();
    for (int l = layers - 1; l >= 0; --l) {
      const int fan_in = dims_[l], fan_out = dims_[l + 1];
      RETURN_IF_ERROR(CublasStatus(
          cublasSgemv(cublas_.get(), CUBLAS_OP_N, fan_out, batch_, &one, delta,
                      fan_out, ones_.as<float>(), 1, &zero, grads[2 * l + 1],
                      1),
          "mlp (GPU): bias gradient"));
      sink.GradientReady(2 * l + 1);
      RETURN_IF_ERROR(CublasStatus(
          cublasSgemm(cublas_.get(), CUBLAS_OP_N, CUBLAS_OP_T, fan_in, fan_out,
                      batch_, &one, act_[l].as<float>(), fan_in, delta,
                      fan_out, &zero, grads[2 * l], fan_in),
          "mlp (GPU): weight gradient"));
      if (l > 0) {
        RETURN_IF_ERROR(CublasStatus(
            cublasSgemm(cublas_.get(), CUBLAS_OP_N, CUBLAS_OP_N, fan_in,
                        batch_, fan_out, &one, params[2 * l], fan_in, delta,
                        fan_out, &zero, delta_prev, fan_in),
            "mlp (GPU): input gradient"));
        RETURN_IF_ERROR(CudaStatus(
            gpu::LaunchReluBackward(pre_[l - 1].as<float>(), delta_prev,
                                    int64_t{batch_} * fan_in, stream_),
            "mlp (GPU): ReLU gradient"));
      }
      sink.GradientReady(2 * l);
      std::swap(delta, delta_prev);
    }
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(loss_host_.as<void>(), loss_sum_.get(), sizeof(double),
                        cudaMemcpyDeviceToHost, stream_),
        "mlp (GPU): loss"));
    RETURN_IF_ERROR(
        CudaStatus(cudaStreamSynchronize(stream_), "mlp (GPU): step"));
    return *loss_host_.as<double>() / static_cast<double>(count);
  }

  int64_t samples_per_step() const override { return batch_; }

 private:
  absl::StatusOr<DeviceBuffer> Upload(const std::vector<float>& values,
                                      absl::string_view what) {
    ASSIGN_OR_RETURN(DeviceBuffer buf,
                     Floats(static_cast<int64_t>(values.size()), what));
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(buf.get(), values.data(), values.size() * sizeof(float),
                        cudaMemcpyHostToDevice, stream_),
        absl::StrCat("mlp (GPU): upload ", what)));
    // `values` is pageable and goes away: finish the copy now (set-up only).
    RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_),
                               absl::StrCat("mlp (GPU): upload ", what)));
    return buf;
  }

  // y[batch, out] = x[batch, in] w[out, in]^T + b[out].
  absl::Status Linear(const float* x, const float* w, const float* b, int in,
                      int out, float* y) {
    const float one = 1.0f, zero = 0.0f;
    RETURN_IF_ERROR(
        CublasStatus(cublasSgemm(cublas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, out,
                                 batch_, in, &one, w, in, x, in, &zero, y, out),
                     "mlp (GPU): forward"));
    return CudaStatus(gpu::LaunchAddBias(y, b, batch_, out, stream_),
                      "mlp (GPU): bias");
  }

  // The problem: parameters, initial values, teacher, batch inputs.
  const std::unique_ptr<MlpWorkload> host_;
  const std::vector<int> dims_;
  const int batch_;
  const int device_;
  const cudaStream_t stream_;
  CublasHandle cublas_;
  std::vector<DeviceBuffer> teacher_;  // weight, bias per layer
  std::vector<DeviceBuffer> act_;      // act_[0] = x; act_[l] = relu(pre_[l-1])
  std::vector<DeviceBuffer> pre_;      // pre-activations per layer
  DeviceBuffer teacher_act_[2];
  DeviceBuffer target_;
  DeviceBuffer delta_;
  DeviceBuffer delta_prev_;
  DeviceBuffer ones_;
  DeviceBuffer loss_sum_;
  PinnedBuffer x_host_;
  PinnedBuffer loss_host_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Workload>> CreateGpuMlpWorkload(
    const v1::MlpWorkload& spec, uint64_t seed, int rank, int device,
    CUstream_st* stream) {
  // The CPU workload validates the shape and defines the parameters.
  ASSIGN_OR_RETURN(std::unique_ptr<MlpWorkload> host,
                   MlpWorkload::Create(spec, seed, rank));
  std::vector<int> dims;
  dims.push_back(spec.input_dim());
  for (int h : spec.hidden_dims()) dims.push_back(h);
  dims.push_back(spec.output_dim());
  auto workload = std::make_unique<GpuMlpWorkload>(
      std::move(host), std::move(dims), spec.batch_size(), device, stream);
  RETURN_IF_ERROR(workload->Init());
  return std::unique_ptr<Workload>(std::move(workload));
}

}  // namespace pshard::worker
