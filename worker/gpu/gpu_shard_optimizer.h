// GpuShardOptimizer: the ShardOptimizer of a GPU worker. Optimizer state (and,
// for bf16 parameters, the fp32 master weights) lives in device memory, only
// for the buckets this rank owns; a step is one launch of a fused,
// multi-tensor CUDA kernel over the whole bucket, with exactly the CPU
// kernels' arithmetic (worker/optim/cpu_kernels.h): the same gradients give
// the same parameters, bit for bit.
//
// Inside the ZeRO hook on NCCL the step is stream-ordered between the
// bucket's reduction and its broadcast, with no host synchronisation:
//
//   comm.Reduce(grad, count, kFloat32, owner);
//   if (rank == owner) comm.Enqueue([&] {
//     return opt.EnqueueStep(bucket, params, grad, comm.stream());
//   });
//   comm.Broadcast(params, count, kFloat32, owner);
//
// All pointers are device pointers on `device()`. Thread-safe.
#ifndef PSHARD_WORKER_GPU_GPU_SHARD_OPTIMIZER_H_
#define PSHARD_WORKER_GPU_GPU_SHARD_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/optim/shard_optimizer.h"

// cudaStream_t is `CUstream_st*`; declared here so this header needs no CUDA.
struct CUstream_st;

namespace pshard::worker {

class GpuShardOptimizer final : public ShardOptimizer {
 public:
  // Element type of bf16 buckets' parameters/gradients as seen by callers.
  enum class GradType { kFloat32, kBFloat16 };

  // An optimizer for `spec` (valid) whose state lives on CUDA device
  // `device`. Unavailable without CUDA or without that device;
  // InvalidArgument for an unsupported optimizer kind.
  static absl::StatusOr<std::unique_ptr<GpuShardOptimizer>> Create(
      const v1::OptimizerSpec& spec, int device);

  ~GpuShardOptimizer() override;

  // fp32 bucket: state allocated (zeroed) on the device; parameters and
  // gradients are fp32 device arrays. Errors as the CPU optimizer's, plus
  // ResourceExhausted when device memory runs out.
  absl::Status AddBucket(int bucket_index,
                         std::vector<ParamSpan> spans) override;

  // bf16 bucket with fp32 master weights held here (only by the owner, like
  // the rest of the state). The master copy starts from `initial_params`:
  // `extent` elements (the bucket's span extent) of fp32 values
  // (initial_is_bf16 false: exact) or bf16 values (true: widened), read on
  // the legacy default stream. Blocks until the copy is done.
  absl::Status AddBf16Bucket(int bucket_index, std::vector<ParamSpan> spans,
                             const void* initial_params, bool initial_is_bf16);

  // Makes the fp32 bucket `bucket_index` (AddBucket) a bf16 one, as the ZeRO
  // hook's mixed precision needs once it knows the owned pieces: its fp32
  // master weights start from `initial` (`numel` host floats, the bucket's
  // extent; copied, waited for). InvalidArgument: another numel;
  // FailedPrecondition: the bucket is bf16 already; NotFound: not added.
  absl::Status AdoptMasterWeights(int bucket_index, const float* initial,
                                  int64_t numel);

  // Synchronous step of an fp32 bucket, for callers without streams: runs on
  // the legacy default stream (so after synchronous cudaMemcpy calls and the
  // work of blocking streams) and waits for it.
  using ShardOptimizer::Step;
  absl::Status Step(int bucket_index, float* params, const float* grads,
                    const HyperParameterOverrides& overrides) override;

  // Enqueues the step of an fp32 bucket on `stream` and returns without
  // waiting: it runs after everything issued before on `stream`. Returns
  // launch errors only (an execution error surfaces at the next sync).
  // NotFound if the bucket is not owned; FailedPrecondition for a bf16 bucket.
  absl::Status EnqueueStep(int bucket_index, float* params, const float* grads,
                           CUstream_st* stream,
                           const HyperParameterOverrides& overrides = {});

  // Enqueues the step of a bf16 bucket: reads `grads` (fp32 or bf16, as
  // `grad_type` says), steps the master weights and the state, and writes
  // the master weights rounded to nearest even into `params` (bf16), ready to
  // broadcast. FailedPrecondition for an fp32 bucket.
  absl::Status EnqueueBf16Step(int bucket_index, uint16_t* params,
                               const void* grads, GradType grad_type,
                               CUstream_st* stream,
                               const HyperParameterOverrides& overrides = {});

  // The bucket's state arrays, downloaded into a host copy kept with the
  // bucket until its next step (ShardOptimizer::ViewState), and waited
  // for. Call once the enqueued steps have finished (the ZeRO hook: after
  // FinishStep).
  absl::StatusOr<BucketStateView> ViewState(int bucket_index) const override;

  // Checks `state` (CheckStateFits), uploads it over the bucket's state
  // arrays and waits, so that steps enqueued afterwards on any stream see
  // it. Call between steps, with none in flight.
  absl::Status ImportState(int bucket_index, const BucketState& state) override;

  // Copies master weights [offset, offset + numel) of a bf16 bucket to host
  // memory at `out` and waits (a checkpoint's owned parameters; tests).
  // Call once the enqueued steps have finished (e.g. after syncing their
  // stream). FailedPrecondition for an fp32 bucket;
  // InvalidArgument for a range outside the bucket's extent.
  absl::Status CopyMasterWeightsToHost(int bucket_index, int64_t offset,
                                       int64_t numel, float* out);

  // Copies state array `which` (StateLayout's array index: e.g. Adam 0
  // exp_avg, 1 exp_avg_sq, 2 max_exp_avg_sq) of a bucket (state_numel
  // elements, CPU layout) to `out` (device) and waits: for cross-checks
  // against the CPU optimizer. InvalidArgument for an array the bucket does
  // not keep.
  absl::Status CopyState(int bucket_index, int which, float* out);

  // Optimizer state bytes held for the bucket: moments/momentum, plus the
  // fp32 master weights of a bf16 bucket.
  int64_t state_bytes(int bucket_index) const override;
  int64_t total_state_bytes() const override;

  int device() const;

  class Impl;

 private:
  explicit GpuShardOptimizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_GPU_GPU_SHARD_OPTIMIZER_H_
