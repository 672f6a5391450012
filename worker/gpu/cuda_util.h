// RAII owners of CUDA resources and the one-line CUDA -> absl::Status
// conversion used by worker/gpu's .cc files. Only compiled where CUDA is
// present (see BUILD.bazel); public headers of worker/gpu never include it.
#ifndef PSHARD_WORKER_GPU_CUDA_UTIL_H_
#define PSHARD_WORKER_GPU_CUDA_UTIL_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/gpu/cuda_status.h"

namespace pshard::worker::gpu {

// The status of a CUDA runtime call; see CudaErrorToStatus. Also clears the
// runtime's last-error slot so that a later cudaGetLastError (after a kernel
// launch) does not report this old error again.
inline absl::Status CudaStatus(cudaError_t err, absl::string_view context) {
  if (err == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();
  return CudaErrorToStatus(static_cast<int>(err), cudaGetErrorName(err),
                           cudaGetErrorString(err), context);
}

// Makes `device` current for the calling thread and restores the previous
// device on destruction (CUDA's current device is per thread, and callers'
// threads belong to the runtime).
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    status_ = previous_ == device
                  ? absl::OkStatus()
                  : CudaStatus(cudaSetDevice(device), "cudaSetDevice");
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  ~ScopedDevice() {
    int current = -1;
    if (previous_ >= 0 && cudaGetDevice(&current) == cudaSuccess &&
        current != previous_) {
      (void)cudaSetDevice(previous_);
    }
  }
  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  absl::Status status_;
};

// Device memory from cudaMalloc, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static absl::StatusOr<DeviceBuffer> Allocate(size_t bytes,
                                               absl::string_view what) {
    DeviceBuffer buffer;
    if (bytes == 0) return buffer;
    void* ptr = nullptr;
    absl::Status status = CudaStatus(cudaMalloc(&ptr, bytes), what);
    if (!status.ok()) return status;
    buffer.ptr_ = ptr;
    buffer.bytes_ = bytes;
    return buffer;
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      ptr_ = std::exchange(other.ptr_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void Reset() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A non-blocking stream (no implicit synchronisation with the legacy default
// stream), destroyed on destruction.
class CudaStream {
 public:
  CudaStream() = default;
  static absl::StatusOr<CudaStream> Create(absl::string_view what) {
    CudaStream stream;
    absl::Status status = CudaStatus(
        cudaStreamCreateWithFlags(&stream.stream_, cudaStreamNonBlocking),
        what);
    if (!status.ok()) return status;
    return stream;
  }
  CudaStream(CudaStream&& other) noexcept
      : stream_(std::exchange(other.stream_, nullptr)) {}
  CudaStream& operator=(CudaStream&& other) noexcept {
    if (this != &other) {
      Reset();
      stream_ = std::exchange(other.stream_, nullptr);
    }
    return *this;
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  ~CudaStream() { Reset(); }

  cudaStream_t get() const { return stream_; }

 private:
  void Reset() {
    // Work still queued completes; its resources are released afterwards.
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }
  cudaStream_t stream_ = nullptr;
};

// An event without timing (cheapest to record and query).
class CudaEvent {
 public:
  CudaEvent() = default;
  static absl::StatusOr<CudaEvent> Create(absl::string_view what) {
    CudaEvent event;
    absl::Status status = CudaStatus(
        cudaEventCreateWithFlags(&event.event_, cudaEventDisableTiming), what);
    if (!status.ok()) return status;
    return event;
  }
  CudaEvent(CudaEvent&& other) noexcept
      : event_(std::exchange(other.event_, nullptr)) {}
  CudaEvent& operator=(CudaEvent&& other) noexcept {
    if (this != &other) {
      Reset();
      event_ = std::exchange(other.event_, nullptr);
    }
    return *this;
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  ~CudaEvent() { Reset(); }

  cudaEvent_t get() const { return event_; }

 private:
  void Reset() {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
    event_ = nullptr;
  }
  cudaEvent_t event_ = nullptr;
};

// Page-locked host memory from cudaMallocHost (asynchronous copies to and
// from the device need it), freed on destruction.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  static absl::StatusOr<PinnedBuffer> Allocate(size_t bytes,
                                               absl::string_view what) {
    PinnedBuffer buffer;
    if (bytes == 0) return buffer;
    void* ptr = nullptr;
    absl::Status status = CudaStatus(cudaMallocHost(&ptr, bytes), what);
    if (!status.ok()) return status;
    buffer.ptr_ = ptr;
    buffer.bytes_ = bytes;
    return buffer;
  }
  PinnedBuffer(PinnedBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      ptr_ = std::exchange(other.ptr_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { Reset(); }

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void Reset() {
    if (ptr_ != nullptr) (void)cudaFreeHost(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace pshard::worker::gpu

#endif  // PSHARD_WORKER_GPU_CUDA_UTIL_H_
