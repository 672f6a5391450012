// RAII owners of CUDA resources and the one-line CUDA -> absl::Status
// conversion used by worker/gpu's .cc files. Only compiled where CUDA is
// present (see BUILD.bazel); public headers of worker/gpu never include it.
#ifndef PSHARD_WORKER_GPU_CUDA_UTIL_H_
#define PSHARD_WORKER_GPU_CUDA_UTIL_H_

#include <cuda.h>  // types of the one driver function used, not linked
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"
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

// cudaEventQuery without its side effect. cudaErrorNotReady means "not yet",
// but the runtime also leaves it in the calling thread's last-error slot,
// where the next kernel launch's cudaGetLastError (kernels.h), or a library
// that checks the slot after its own launches (cuBLAS, NCCL), would report it
// as that launch's failure; PyTorch clears it the same way. Returns
// cudaSuccess, cudaErrorNotReady, or the error the query found.
inline cudaError_t QueryEvent(cudaEvent_t event) {
  const cudaError_t err = cudaEventQuery(event);
  if (err == cudaErrorNotReady) (void)cudaGetLastError();
  return err;
}

// Whether CUDA device `device`'s primary context exists in this process;
// nullopt when that cannot be told (no driver, or one without the entry
// point). Through the runtime's driver entry points: pshard links only
// libcudart.
inline std::optional<bool> PrimaryContextActive(int device) {
  using GetState = CUresult (*)(CUdevice, unsigned int*, int*);
  static const GetState get_state = []() -> GetState {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &fn,
                                         12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    return reinterpret_cast<GetState>(fn);
  }();
  if (get_state == nullptr) return std::nullopt;
  unsigned int flags = 0;
  int active = 0;
  if (get_state(static_cast<CUdevice>(device), &flags, &active) !=
      CUDA_SUCCESS) {
    return std::nullopt;
  }
  return active != 0;
}

// Makes `device` current for the calling thread and, on destruction, makes
// the previous device current again if it has a context (CUDA's current
// device is per thread, and callers' threads belong to the runtime). Since
// CUDA 12, cudaSetDevice creates the device's primary context: restoring a
// thread's untouched default, device 0, would give every rank of a
// multi-GPU node a context (about 0.5 GiB) on GPU 0. PyTorch's device guard
// skips that restore the same way.
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
        current != previous_ &&
        PrimaryContextActive(previous_).value_or(true)) {
      (void)cudaSetDevice(previous_);
    }
  }
  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  absl::Status status_;
};

namespace internal {

// Owns memory from `Alloc` (cudaMalloc, cudaMallocHost), released with `Free`
// on destruction; move-only. Use DeviceBuffer and PinnedBuffer below.
template <cudaError_t (*Alloc)(void**, size_t), cudaError_t (*Free)(void*)>
class CudaMemory {
 public:
  CudaMemory() = default;
  static absl::StatusOr<CudaMemory> Allocate(size_t bytes,
                                             absl::string_view what) {
    CudaMemory buffer;
    if (bytes == 0) return buffer;
    void* ptr = nullptr;
    absl::Status status = CudaStatus(Alloc(&ptr, bytes), what);
    if (!status.ok()) return status;
    buffer.ptr_ = ptr;
    buffer.bytes_ = bytes;
    return buffer;
  }
  CudaMemory(CudaMemory&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)) {}
  CudaMemory& operator=(CudaMemory&& other) noexcept {
    if (this != &other) {
      Reset();
      ptr_ = std::exchange(other.ptr_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;
  ~CudaMemory() { Reset(); }

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void Reset() {
    if (ptr_ != nullptr) (void)Free(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Owns a stream or event handle, released with `Destroy` on destruction;
// move-only. The subclasses add the factory.
template <typename Handle, cudaError_t (*Destroy)(Handle)>
class CudaHandle {
 public:
  CudaHandle() = default;
  CudaHandle(CudaHandle&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)) {}
  CudaHandle& operator=(CudaHandle&& other) noexcept {
    if (this != &other) {
      Reset();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  CudaHandle(const CudaHandle&) = delete;
  CudaHandle& operator=(const CudaHandle&) = delete;
  ~CudaHandle() { Reset(); }

  Handle get() const { return handle_; }

 protected:
  Handle handle_ = nullptr;

 private:
  void Reset() {
    if (handle_ != nullptr) (void)Destroy(handle_);
    handle_ = nullptr;
  }
};

}  // namespace internal

// Device memory from cudaMalloc, freed on destruction.
using DeviceBuffer = internal::CudaMemory<cudaMalloc, cudaFree>;

// Page-locked host memory from cudaMallocHost (asynchronous copies to and
// from the device need it), freed on destruction.
using PinnedBuffer = internal::CudaMemory<cudaMallocHost, cudaFreeHost>;

// A non-blocking stream (no implicit synchronisation with the legacy default
// stream), destroyed on destruction. Work still queued when it is destroyed
// completes; its resources are released afterwards.
class CudaStream
    : public internal::CudaHandle<cudaStream_t, cudaStreamDestroy> {
 public:
  static absl::StatusOr<CudaStream> Create(absl::string_view what) {
    CudaStream stream;
    absl::Status status = CudaStatus(
        cudaStreamCreateWithFlags(&stream.handle_, cudaStreamNonBlocking),
        what);
    if (!status.ok()) return status;
    return stream;
  }
};

// An event without timing (cheapest to record and query).
class CudaEvent : public internal::CudaHandle<cudaEvent_t, cudaEventDestroy> {
 public:
  static absl::StatusOr<CudaEvent> Create(absl::string_view what) {
    CudaEvent event;
    absl::Status status = CudaStatus(
        cudaEventCreateWithFlags(&event.handle_, cudaEventDisableTiming),
        what);
    if (!status.ok()) return status;
    return event;
  }
};

// Host-side polling of device work: a short spin, then sleeps on `clock`
// growing to 1 ms: cheap for the common case (done in microseconds), gentle
// on the CPU for long waits. `clock` must outlive the Backoff.
class Backoff {
 public:
  explicit Backoff(const Clock& clock) : clock_(clock) {}

  void Pause() {
    if (spins_ < 64) {
      ++spins_;
      std::this_thread::yield();
      return;
    }
    clock_.SleepFor(sleep_);
    sleep_ = std::min(sleep_ * 2, absl::Milliseconds(1));
  }

 private:
  const Clock& clock_;
  int spins_ = 0;
  absl::Duration sleep_ = absl::Microseconds(10);
};

// cudaStreamSynchronize with a deadline: waits on the host until the work
// queued on `stream` so far has finished, or `timeout` has passed
// (DeadlineExceeded naming `what`), measured on `clock`. After a timeout the
// work may still be running: the caller must not free what it uses (abort
// the communicator that holds it up first).
inline absl::Status SynchronizeStream(cudaStream_t stream,
                                      absl::Duration timeout,
                                      absl::string_view what,
                                      const Clock& clock) {
  const absl::Time deadline = clock.Now() + timeout;
  absl::StatusOr<CudaEvent> done = CudaEvent::Create(what);
  if (!done.ok()) return done.status();
  absl::Status status = CudaStatus(cudaEventRecord(done->get(), stream), what);
  if (!status.ok()) return status;
  Backoff backoff(clock);
  for (;;) {
    const cudaError_t err = QueryEvent(done->get());
    if (err != cudaErrorNotReady) return CudaStatus(err, what);
    if (clock.Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": device work did not finish within ",
                       absl::FormatDuration(timeout)));
    }
    backoff.Pause();
  }
}

}  // namespace pshard::worker::gpu

#endif  // PSHARD_WORKER_GPU_CUDA_UTIL_H_
