// Host-side planning of the multi-tensor optimizer kernel: turns a bucket's
// parameter spans into chunk descriptors (offset, state offset, numel, group)
// and per-group hyper-parameters, and computes each step's fp32 scalars. No
// CUDA here, so the layout logic is tested on every machine; the
// GpuShardOptimizer uploads the descriptors once and launches per step.
//
// The state layout is exactly the CPU ShardOptimizer's (StateLayout in
// worker/optim/shard_optimizer.h): spans sorted by offset; every span with
// state takes the next span.numel elements of each state array the bucket
// keeps. So state_bytes agree between backends and state can be compared
// element by element.
#ifndef PSHARD_WORKER_GPU_OPTIMIZER_PLAN_H_
#define PSHARD_WORKER_GPU_OPTIMIZER_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/gpu/kernel_params.h"
#include "worker/optim/shard_optimizer.h"

namespace pshard::worker::gpu {

struct BucketPlan {
  // One kernel launch: chunks[first_chunk, first_chunk + num_chunks), whose
  // `group` fields index groups[first_group + group].
  struct Launch {
    int first_chunk = 0;
    int num_chunks = 0;
    int first_group = 0;
    int num_groups = 0;
  };

  // A run of one state array that does not start at zero (Adagrad's "sum"
  // at initial_accumulator_value).
  struct StateFill {
    int array = 0;
    int64_t state_offset = 0;
    int64_t numel = 0;
    float value = 0;
  };

  OptimizerKernelKind kind = kKernelSgd;
  bool decoupled = false;    // AdamW
  int64_t extent = 0;        // max(offset + numel): elements the bucket spans
  int64_t state_numel = 0;   // elements of each state array
  // Which state arrays the bucket keeps (some span's StateLayout names it).
  bool keeps[kMaxStateArrays] = {};
  int num_state_arrays = 0;  // how many of `keeps` are set
  std::vector<StateFill> fills;
  // Where each span with state keeps it (ViewState/ImportState), by offset.
  std::vector<StateSpan> state_spans;
  // Distinct hyper-parameters, in order of first appearance by offset.
  std::vector<HyperParameters> groups;
  std::vector<ChunkDescriptor> chunks;
  std::vector<Launch> launches;

  int64_t state_bytes() const {
    return num_state_arrays * state_numel * static_cast<int64_t>(sizeof(float));
  }
};

// Plans bucket `bucket_index` for `spec` (valid, see ValidateJobSpec).
// InvalidArgument, with the same rules and messages as the CPU optimizer: no
// spans, a negative or huge offset/numel, a duplicate name, overlapping spans,
// or a learning rate that resolves to <= 0 or non-finite. `chunk_elements` and
// `max_groups_per_launch` are parameters for tests.
absl::StatusOr<BucketPlan> PlanBucket(
    const v1::OptimizerSpec& spec, int bucket_index,
    std::vector<ParamSpan> spans,
    int64_t chunk_elements = kOptimizerChunkElements,
    int max_groups_per_launch = kOptimizerMaxGroupsPerLaunch);

// The fp32 scalars of `spec_hp` with the program's changes in `overrides`
// (EffectiveHyperParameters) for step `step` (1-based) of a bucket, from
// the CPU kernels' own Make*Scalars functions, so both backends step with
// identical bits; the lr is StepLearningRate(spec_hp, step, overrides).
GroupScalars MakeGroupScalars(const BucketPlan& plan,
                              const HyperParameters& spec_hp, int64_t step,
                              const HyperParameterOverrides& overrides = {});

// The kernel arguments of launch `launch_index` of `plan` at `step`;
// `device_chunks` is the device copy of plan.chunks.
OptimizerLaunchParams MakeLaunchParams(
    const BucketPlan& plan, int launch_index,
    const ChunkDescriptor* device_chunks, int64_t step,
    const HyperParameterOverrides& overrides = {});

}  // namespace pshard::worker::gpu

#endif  // PSHARD_WORKER_GPU_OPTIMIZER_PLAN_H_
