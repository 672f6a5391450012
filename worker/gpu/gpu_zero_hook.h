// GpuZeroHook: the ZeRO hook of worker/hook/zero_hook.h for GPU workers, on
// device memory, over an NcclCommunicator and a GpuShardOptimizer. It IS a
// ZeroHook — the same algorithm, state machine, AssignmentProvider and
// errors, run by the same code the CPU tests run — with a device HookMemory
// (hook_memory.h) that makes sure nothing inside a step waits on the host:
//
//   compute:  backward kernels ... gradients of bucket b final
//               └─ event ─┐
//   comm:                wait ─ reduce-mean(b) ─ [owner: fused optimizer
//                        step] ─ broadcast(b) ─ ... last broadcast
//                                                    └─ event ─┐
//   compute (next step):                                      wait ─ forward
//
// The owner's step is enqueued on the communication stream between the
// bucket's reduction and its broadcast (NcclCommunicator::Enqueue runs the
// hook's function at issue time; it launches the kernels), and the compute
// stream waits on the step's last operation on the device. FinishStep also
// waits for the step on the host, with the deadline, so that errors (a lost
// peer, an abort) surface in the step that caused them. With
// overlap_param_broadcast the compute stream waits at the end of the step
// for the reductions and owner steps only, and the next forward's
// WaitForParameter(i) adds a device wait for the broadcasts that carry
// parameter i (the host never blocks on a broadcast).
//
// Buckets travel whole (one NCCL call and one optimizer launch per bucket)
// and each broadcast follows its own step: every operation is on one stream,
// so pieces and deferred broadcasts could not overlap anything there.
//
// Buffers: one device allocation per bucket for parameters and one for
// gradients; params()/grads() are device views into them (valid until the end
// of the first FinishStep, which may re-pack them into the observed order).
// Workloads write gradients on options.compute_stream (gpu_workloads.h).
//
// Thread-compatible: one training thread calls GradientReady and FinishStep.
#ifndef PSHARD_WORKER_GPU_GPU_ZERO_HOOK_H_
#define PSHARD_WORKER_GPU_GPU_ZERO_HOOK_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/bucket/bucket_layout.h"
#include "worker/gpu/gpu_shard_optimizer.h"
#include "worker/gpu/nccl_communicator.h"
#include "worker/hook/zero_hook.h"
#include "worker/workload/workload.h"

// cudaStream_t is `CUstream_st*`; declared here so this header needs no CUDA.
struct CUstream_st;

namespace pshard::worker {

struct GpuZeroHookOptions {
  v1::JobSpec::CommMode comm_mode = v1::JobSpec::REDUCE_BROADCAST;
  double bucket_cap_mb = 25;
  // Deadline for FinishStep's wait on the step's communication.
  absl::Duration timeout = absl::Seconds(60);
  // The stream the workload computes gradients on (null: the legacy default
  // stream).
  CUstream_st* compute_stream = nullptr;
  // Measures the host waits for the compute stream (the re-pack, parameter
  // downloads); must outlive the hook.
  const Clock* clock = &Clock::Real();
  // Global gradient-norm clipping (zero_hook.h): off by default.
  GradClipping clipping;
  // Mixed precision (zero_hook.h): fp32 by default. bf16 buckets on the
  // device, fp32 master weights and widened gradients at the owner.
  MixedPrecision precision;
  // zero_hook.h's: FinishStep orders the compute stream after the step's
  // reductions and owner steps only, and WaitForParameter(i) makes it wait
  // (on the device, the host going on) for the broadcasts that carry
  // parameter i, so the next forward's first layers start while later
  // buckets still arrive.
  bool overlap_param_broadcast = false;
};

class GpuZeroHook : public ZeroHook {
 public:
  // `comm` must outlive the hook; `optimizer` must be on comm->device().
  // InvalidArgument for an empty parameter list or missing pieces;
  // Unavailable without CUDA; ResourceExhausted when device memory runs out.
  static absl::StatusOr<std::unique_ptr<GpuZeroHook>> Create(
      std::vector<ParameterInfo> params, NcclCommunicator* comm,
      std::unique_ptr<GpuShardOptimizer> optimizer, AssignmentProvider provider,
      const GpuZeroHookOptions& options);

  // params()/grads() (ZeroHook) are device pointers. FinishStep also orders
  // the compute stream after the step's broadcasts.

  // Copies elements [offset, offset + numel) of parameter `param_index` to
  // host memory (one device-to-host copy of that range, widened from bf16)
  // and waits (ZeroHook::ReadParameterRange). InvalidArgument: an index or a
  // range outside the parameter.
  virtual absl::Status CopyParameterRangeToHost(int param_index,
                                                int64_t offset, int64_t numel,
                                                float* out) = 0;
  // The whole parameter (its numel floats).
  absl::Status CopyParameterToHost(int param_index, float* out) {
    const std::vector<ParameterInfo>& infos = parameter_infos();
    const int64_t numel =
        param_index >= 0 && param_index < static_cast<int>(infos.size())
            ? infos[param_index].numel
            : 0;
    return CopyParameterRangeToHost(param_index, 0, numel, out);
  }

 protected:
  using ZeroHook::ZeroHook;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_GPU_GPU_ZERO_HOOK_H_
