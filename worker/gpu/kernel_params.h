// Plain-old-data types shared by the CUDA kernels (kernels.cu, compiled by
// nvcc) and the host code that plans and launches them (compiled by g++).
// Deliberately free of CUDA, Abseil and protobuf headers: nvcc sees only this
// and kernels.h, and the host planning code (optimizer_plan.h) is testable on
// machines without CUDA.
#ifndef PSHARD_WORKER_GPU_KERNEL_PARAMS_H_
#define PSHARD_WORKER_GPU_KERNEL_PARAMS_H_

#include <cstdint>

namespace pshard::worker::gpu {

// Elements per chunk of the multi-tensor optimizer kernel: one CUDA block
// (256 threads, 4-element vectors, 2 iterations of 4 vectors in flight) steps
// one chunk. 8K elements keeps blocks numerous enough that a 25 MiB bucket
// (~800 chunks) runs in several waves on an H100/H200's 132 SMs, so the last,
// partly filled wave costs little, and long enough to amortise block start-up.
inline constexpr int64_t kOptimizerChunkElements = 8192;

// Hyper-parameter groups one launch can address (their scalars are passed by
// value in the kernel's parameter block). A bucket with more distinct groups is
// stepped with several launches.
inline constexpr int kOptimizerMaxGroupsPerLaunch = 16;

// Element types of parameter and gradient buffers.
enum KernelDType : int32_t {
  kKernelFloat32 = 0,
  kKernelBFloat16 = 1,
};

// Which update rule a launch applies. AdamW is kAdam with `decoupled` set in
// the group scalars.
enum OptimizerKernelKind : int32_t {
  kKernelSgd = 0,
  kKernelAdam = 1,
  kKernelAdagrad = 2,
  kKernelRmsprop = 3,
  kKernelLion = 4,
};

// The fp32 scalars of one hyper-parameter group for one step, exactly the
// fields of worker/optim/cpu_kernels.h's SgdScalars, AdamScalars,
// AdagradScalars, RmspropScalars and LionScalars (computed on the host by the
// same functions, so CPU and GPU see identical bits). Fields shared by kinds
// are noted.
struct GroupScalars {
  // SGD (neg_lr and momentum also RMSprop's; neg_lr also Lion's).
  float neg_lr;
  float sgd_weight_decay;
  float momentum;
  float one_minus_dampening;
  int32_t nesterov;
  int32_t first_step;
  // Adam / AdamW (the betas also Lion's; eps also Adagrad's and RMSprop's).
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float eps;
  float neg_step_size;
  float bias_correction2_sqrt;
  float adam_weight_decay;  // Adam's L2 term; 0 for AdamW
  float decay;              // AdamW, Lion: p *= decay first
  int32_t decoupled;
  int32_t amsgrad;          // Adam/AdamW: normalise by max_exp_avg_sq
  // Adagrad.
  float neg_clr;
  float adagrad_weight_decay;
  // RMSprop.
  float alpha;
  float one_minus_alpha;
  float rmsprop_weight_decay;
  int32_t centered;
};

// One chunk of at most kOptimizerChunkElements contiguous elements of a
// bucket, all of one parameter group.
struct ChunkDescriptor {
  int64_t offset;        // first element, from the start of the bucket
  int64_t state_offset;  // first element in the state arrays; -1: no state
  int32_t numel;         // 1..kOptimizerChunkElements
  int32_t group;         // index into OptimizerLaunchParams::groups
};

// Everything one launch of the optimizer kernel needs besides the buffers.
// Passed by value (about 1.5 KiB, well under the 4 KiB parameter limit).
struct OptimizerLaunchParams {
  int32_t kind;  // OptimizerKernelKind
  int32_t num_chunks;
  const ChunkDescriptor* chunks;  // device memory, num_chunks entries
  GroupScalars groups[kOptimizerMaxGroupsPerLaunch];
};
static_assert(sizeof(OptimizerLaunchParams) < 4096,
              "kernel parameters are limited to 4 KiB");

// The buffers of one bucket step. Element i of the bucket is params[i],
// grads[i] and, when the chunk has state, state0/1/2[state index] (the
// arrays of worker/optim/shard_optimizer.h's StateLayout).
struct OptimizerBuffers {
  // The parameters, updated in place: fp32, or bf16 (then `master` holds the
  // fp32 values that are actually stepped, and params receive them rounded to
  // nearest even).
  void* params;
  int32_t param_dtype;  // KernelDType
  // The (averaged) gradient: fp32, or bf16 (only with bf16 params).
  const void* grads;
  int32_t grad_dtype;  // KernelDType
  // fp32 master weights, indexed like params; only with bf16 params.
  float* master;
  // SGD: state0 momentum buffer. Adam/AdamW: exp_avg, exp_avg_sq,
  // max_exp_avg_sq (amsgrad). Adagrad: state0 sum. RMSprop: square_avg,
  // momentum_buffer (momentum > 0), grad_avg (centered). Lion: state0
  // exp_avg. Null where no group of the launch uses the array.
  float* state0;
  float* state1;
  float* state2;
};

}  // namespace pshard::worker::gpu

#endif  // PSHARD_WORKER_GPU_KERNEL_PARAMS_H_
