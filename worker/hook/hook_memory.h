// HookMemory: what the ZeRO hook (zero_hook.h) needs from the memory its
// buckets live in. The hook owns the algorithm — which collective is issued,
// when, on which piece, by whom; the state machine; the errors — and a
// HookMemory owns the buffers and the few things that differ between host and
// device memory, much as PyTorch's Reducer keeps the bucketing logic apart
// from the process group and NCCL keeps its algorithms apart from transports:
//
//   storage      flat parameter and gradient buffers per bucket of a layout
//                (each in its dtype), views per parameter, and the re-pack
//                into a new layout;
//   owner step   averaging and the optimizer step on one piece (in fp32:
//                mixed precision keeps the owner's fp32 master weights and
//                widens bf16 gradients here), run from a
//                function the hook Enqueue()s on its communicator: host
//                memory runs it there (on the communicator's thread, after
//                the reduction); device memory enqueues kernels on the
//                communication stream at issue time (no host sync);
//   norms        global gradient-norm clipping (clip_math.h): each owned
//                piece's partial norm after its reduction, the rank's
//                partial into its slot of a small vector that the hook
//                all-reduces, the clipped step, and the total for progress;
//   ordering     before a bucket's first collective, after whatever wrote
//                its gradients (device: the communication stream waits for
//                the compute stream); after a step's last collective, before
//                the next forward (device: the compute stream waits for it).
//
// Host memory: ZeroHook::Create (zero_hook.cc). Device memory: GpuZeroHook
// (worker/gpu/gpu_zero_hook.cc). Every call but OwnerStep comes from the
// training thread.
#ifndef PSHARD_WORKER_HOOK_HOOK_MEMORY_H_
#define PSHARD_WORKER_HOOK_HOOK_MEMORY_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "worker/bucket/bucket_layout.h"
#include "worker/comm/communicator.h"
#include "worker/hook/clip_math.h"
#include "worker/optim/shard_optimizer.h"

namespace pshard::worker {

class HookMemory {
 public:
  virtual ~HookMemory() = default;

  // Lays the buffers out as `layout`. The first call allocates them
  // (contents unspecified). A later call re-packs: every parameter's values
  // and gradient move to their places in the new layout, complete when it
  // returns (host memory re-packs in place, through a temporary copy, so
  // memory once handed out stays allocated; device memory copies into new
  // buffers and frees the old ones). ResourceExhausted when memory runs
  // out; other errors from the memory's runtime.
  virtual absl::Status Arrange(const BucketLayout& layout) = 0;

  // The dtypes of the parameter and gradient buffers.
  virtual DataType param_dtype() const = 0;
  virtual DataType grad_dtype() const = 0;

  // Start of bucket b's parameters / gradients in the current layout.
  virtual void* bucket_params(int b) = 0;
  virtual void* bucket_grads(int b) = 0;

  // Per parameter (registration order), its values / gradient inside its
  // bucket. Valid until the next Arrange().
  virtual const std::vector<void*>& param_views() const = 0;
  virtual const std::vector<void*>& grad_views() const = 0;

  // ---- Values from and to the host ----
  // SetParameter/SetGradient, ReadParameterRange and the owners' first
  // master weights, from the training thread: `n` host floats into `dst`
  // (this memory; elements of `dtype`, rounded to nearest even for bf16),
  // and `n` elements of `dtype` at `src` (this memory) widened exactly into
  // host floats. Each returns once the values have landed (device memory
  // copies on its compute stream and waits).
  virtual absl::Status WriteFloats(void* dst, DataType dtype,
                                   const float* values, int64_t n) = 0;
  virtual absl::Status ReadFloats(const void* src, DataType dtype, int64_t n,
                                  float* out) = 0;

  // ---- Mixed precision (dtypes other than fp32) ----
  // Once per owned piece, before its first step (from the training
  // thread): piece `index`'s fp32 master weights start as `initial`
  // (`numel` host floats, copied into this memory), and room for its fp32
  // gradients is made. The
  // owner then steps the master weights and writes them, rounded, into the
  // piece's parameters. Called only when a dtype is not fp32. Unimplemented
  // where the memory has no mixed precision (the default).
  virtual absl::Status AdoptOwnedPiece(int index, const float* initial,
                                       int64_t numel) {
    (void)index, (void)initial, (void)numel;
    return absl::UnimplementedError(
        "this memory has no mixed precision (fp32 parameters and gradients "
        "only)");
  }
  // Copies elements [offset, offset + n) of piece `index`'s master weights
  // to host memory at `out` (a checkpoint's owned parameters), between
  // steps only. FailedPrecondition where the piece keeps none (fp32
  // parameters, or not owned; the default).
  virtual absl::Status ReadMasterParams(int index, int64_t offset, int64_t n,
                                        float* out) {
    (void)offset, (void)n, (void)out;
    return absl::FailedPreconditionError(
        absl::StrCat("piece ", index, " keeps no master weights"));
  }

  // Before bucket b's first collective in a step: orders the hook's
  // communicator after whatever wrote the bucket's gradients. Returns the
  // Work of that ordering, or null when nothing is needed (host memory: the
  // training thread wrote them before announcing them).
  virtual absl::StatusOr<std::shared_ptr<Work>> OrderAfterGradients(int b) = 0;

  // The owner's step on `numel` elements at `params`/`grads`, optimizer
  // bucket `index`: grads /= divisor (an IEEE division, unless divisor is 1),
  // then the optimizer step with the hyper-parameter changes in `overrides`
  // (the snapshot the hook took when it issued the step). Called from a
  // function Enqueue()d on the hook's communicator, so it sits between the
  // reduction and the broadcast.
  virtual absl::Status OwnerStep(int index, void* params, void* grads,
                                 int64_t numel, float divisor,
                                 const HyperParameterOverrides& overrides) = 0;

  // ---- Global gradient-norm clipping (ZeroHookOptions::clipping) ----
  // Per step: PartialNorm on each owned piece after its reduction, then
  // GatherNorms, an AllReduce of norm_slots() by the hook, ClippedOwnerStep
  // on each owned piece, and TotalNorm once the step has been waited for.
  //
  // Once, before the first clipped step: room for the partial norms of
  // `num_pieces` pieces and for `world_size` norm slots, all zero.
  virtual absl::Status PrepareNorms(int num_pieces, int world_size) = 0;

  // Piece `index`'s partial norm of its averaged gradient, kept for
  // GatherNorms: grads /= divisor (as OwnerStep's), then its sum of squares
  // (L2, in double) or largest |g| (infinity). Enqueue()d after the piece's
  // reduction, on its owner.
  virtual absl::Status PartialNorm(int index, void* grads, int64_t numel,
                                   float divisor, NormKind kind) = 0;

  // This rank's partial into norm slot `rank` — the partials of every piece
  // combined in piece order, a piece PartialNorm never ran on counting 0 —
  // and 0 into every other slot, so that summing the slots over ranks gives
  // every rank every partial. Enqueue()d after the step's PartialNorms, on
  // every rank (one that owns nothing writes 0).
  virtual absl::Status GatherNorms(int rank, NormKind kind) = 0;

  // The norm slots (world_size floats in this memory) the hook all-reduces.
  virtual float* norm_slots() = 0;

  // OwnerStep after the slots' all-reduce, on gradients PartialNorm already
  // averaged: grads *= ClipCoefficient(TotalNorm(slots), max_norm), then
  // the optimizer step (with `overrides`, as OwnerStep's).
  virtual absl::Status ClippedOwnerStep(
      int index, void* params, void* grads, int64_t numel, double max_norm,
      NormKind kind, const HyperParameterOverrides& overrides) = 0;

  // After the host has waited for the step: its total norm before clipping
  // (the slots combined). Errors from the memory's runtime.
  virtual absl::StatusOr<double> TotalGradNorm(NormKind kind) = 0;

  // After the step's last operation `last` has been issued and before the
  // host waits for the step: orders the training's next computation after
  // it (device memory: the compute stream waits for it on the device). Host
  // memory: nothing (the host wait orders it).
  virtual absl::Status OrderComputeAfter(Work& last) = 0;

  // overlap_param_broadcast (WaitForParameter): before the training reads
  // what broadcast `work` writes. Host memory waits for it, for at most
  // `timeout`; device memory makes the compute stream wait for it on the
  // device and returns at once (errors surface in FinishStep, or in the
  // communicator's timeout).
  virtual absl::Status OrderComputeAfterBroadcast(Work& work,
                                                  absl::Duration timeout) = 0;
};

// Host memory (what ZeroHook::Create uses): BucketStorage buffers of
// `param_dtype` and `grad_dtype`; the owner's step runs `optimizer` (which
// must outlive it) right there, on the communicator's thread, on fp32
// master weights when the parameters are bf16 and on widened gradients
// when they are; nothing to order with (the training thread writes the
// gradients and waits for the step on the host).
std::unique_ptr<HookMemory> NewHostMemory(
    ShardOptimizer* optimizer, DataType param_dtype = DataType::kFloat32,
    DataType grad_dtype = DataType::kFloat32);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_HOOK_HOOK_MEMORY_H_
