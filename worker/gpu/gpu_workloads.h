// Workloads for a GPU worker: parameter and gradient buffers are device
// memory on `device`, and gradients are produced in order on `stream` (the
// compute stream the GpuZeroHook orders its collectives after).
//
//   - synthetic: generated on the GPU by a kernel, with exactly the CPU
//     SyntheticWorkload's values (worker/gpu/synthetic.h), so CPU and GPU jobs
//     step identical numbers;
//   - mlp: cuBLAS forward/backward on the CPU workload's problem;
//   - any host workload (replay; mlp too, bit for bit): adapted: the
//     parameters are copied to pinned host memory before each step, and each
//     gradient is copied to the device as soon as the host workload declares
//     it final, so the hook still overlaps communication with backward.
//     CreateGpuWorkload runs mlp on the GPU (cuBLAS) and replay adapted.
#ifndef PSHARD_WORKER_GPU_GPU_WORKLOADS_H_
#define PSHARD_WORKER_GPU_GPU_WORKLOADS_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/workload/accumulating_workload.h"
#include "worker/workload/workload.h"

struct CUstream_st;

namespace pshard::worker {

// The synthetic workload on the GPU. InvalidArgument as SyntheticWorkload;
// Unavailable without CUDA.
absl::StatusOr<std::unique_ptr<Workload>> CreateGpuSyntheticWorkload(
    const v1::SyntheticWorkload& spec, uint64_t seed, int rank, int device,
    CUstream_st* stream);

// The mlp workload on the GPU: cuBLAS matrix products, the CPU workload's
// initial parameters, teacher and batches (gpu_mlp_workload.cc). Results
// match the CPU workload to rounding. InvalidArgument as MlpWorkload;
// Unavailable without CUDA.
absl::StatusOr<std::unique_ptr<Workload>> CreateGpuMlpWorkload(
    const v1::MlpWorkload& spec, uint64_t seed, int rank, int device,
    CUstream_st* stream);

// Runs `host` (a Workload on host memory) for callers that pass device
// buffers. Unavailable without CUDA.
absl::StatusOr<std::unique_ptr<Workload>> AdaptHostWorkloadToDevice(
    std::unique_ptr<Workload> host, int device, CUstream_st* stream);

// Gradient accumulation's arithmetic (AccumulatingWorkload) on device memory
// of `device`: scratch from cudaMalloc, the sums as kernels on `stream`
// (the workload's compute stream, so they follow the gradients they add and
// precede the hook's collectives), the host arithmetic's operations bit for
// bit. Unavailable without CUDA.
absl::StatusOr<std::unique_ptr<AccumulationArithmetic>>
NewDeviceAccumulationArithmetic(int device, CUstream_st* stream);

// The workload `spec` names, on device memory: synthetic and mlp on the GPU
// (with gradient_accumulation_steps > 1 wrapped in an AccumulatingWorkload
// on the device), replay through AdaptHostWorkloadToDevice(CreateWorkload(
// ...)) (which accumulates on the host).
absl::StatusOr<std::unique_ptr<Workload>> CreateGpuWorkload(
    const v1::JobSpec& spec, int rank, int world_size, int device,
    CUstream_st* stream);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_GPU_GPU_WORKLOADS_H_
