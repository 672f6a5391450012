// GpuZeroHook: the ZeRO hook of worker/hook/zero_hook.h for GPU workers, on
// device memory, over an NcclCommunicator and a GpuShardOptimizer. Same
// algorithm, state machine and AssignmentProvider as ZeroHook; the difference
// is that nothing inside a step waits on the host:
//
//   compute:  backward kernels ... gradients of bucket b final
//               └─ event ─┐
//   comm:                wait ─ reduce(b) ─ [owner: grad /= n, fused
//                        optimizer step] ─ broadcast(b) ─ ... last broadcast
//                                                              └─ event ─┐
//   compute (next step):                                      wait ─ forward
//
// The owner's step is enqueued on the communication stream between the
// bucket's reduction and its broadcast (NcclCommunicator::Enqueue), and the
// compute stream waits on the step's last broadcast on the device. FinishStep
// also waits for the step on the host, with the deadline, so that errors (a
// lost peer, an abort) surface in the step that caused them.
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
#include "pshard/v1/job_spec.pb.h"
#include "worker/bucket/bucket_layout.h"
#include "worker/gpu/gpu_shard_optimizer.h"
#include "worker/gpu/nccl_communicator.h"
#include "worker/hook/zero_hook.h"
#include "worker/workload/workload.h"

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
};

class GpuZeroHook : public GradientSink {
 public:
  // `comm` must outlive the hook; `optimizer` must be on comm->device().
  // InvalidArgument for an empty parameter list or missing pieces;
  // Unavailable without CUDA; ResourceExhausted when device memory runs out.
  static absl::StatusOr<std::unique_ptr<GpuZeroHook>> Create(
      std::vector<ParameterInfo> params, NcclCommunicator* comm,
      std::unique_ptr<GpuShardOptimizer> optimizer, AssignmentProvider provider,
      const GpuZeroHookOptions& options);

  ~GpuZeroHook() override = default;

  // Device views of each parameter and its gradient inside the buckets.
  virtual const std::vector<float*>& params() const = 0;
  virtual const std::vector<float*>& grads() const = 0;

  // GradientSink: as ZeroHook (launches a bucket's communication once all of
  // its gradients are final, after the first step).
  void GradientReady(int param_index) override = 0;
  virtual absl::Status MarkGradientReady(int param_index) = 0;

  // Ends the step; see ZeroHook::FinishStep. On return the parameters hold
  // the step's update on every rank and the compute stream is ordered after
  // the step's broadcasts.
  virtual absl::Status FinishStep() = 0;

  // Copies parameter `param_index` (numel floats) to host memory and waits.
  virtual absl::Status CopyParameterToHost(int param_index, float* out) = 0;

  virtual HookState state() const = 0;
  virtual int64_t epoch() const = 0;
  virtual const BucketLayout& layout() const = 0;
  virtual const std::vector<int>& owners() const = 0;
  virtual GpuShardOptimizer& optimizer() = 0;
  virtual int64_t steps_finished() const = 0;
  // Optimizer steps this rank has enqueued for bucket b.
  virtual int64_t bucket_steps(int b) const = 0;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_GPU_GPU_ZERO_HOOK_H_
