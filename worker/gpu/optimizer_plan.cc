#include "worker/gpu/optimizer_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/lr_schedule.h"
#include "common/status_macros.h"
#include "worker/optim/cpu_kernels.h"

namespace pshard::worker::gpu {
namespace {

// A run of contiguous elements of one group (neighbouring spans merged).
struct Segment {
  int64_t offset;
  int64_t numel;
  int64_t state_offset;  // -1: no state
  int group;
};

}  // namespace

absl::StatusOr<BucketPlan> PlanBucket(const v1::OptimizerSpec& spec,
                                      int bucket_index,
                                      std::vector<ParamSpan> spans,
                                      int64_t chunk_elements,
                                      int max_groups_per_launch) {
  if (chunk_elements < 4 || chunk_elements > kOptimizerChunkElements ||
      chunk_elements % 4 != 0 || max_groups_per_launch < 1 ||
      max_groups_per_launch > kOptimizerMaxGroupsPerLaunch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad optimizer plan limits: chunk_elements ", chunk_elements,
        ", max_groups_per_launch ", max_groups_per_launch));
  }
  BucketPlan plan;
  switch (spec.kind()) {
    case v1::OptimizerSpec::SGD:
      plan.kind = kKernelSgd;
      break;
    case v1::OptimizerSpec::ADAM:
      plan.kind = kKernelAdam;
      break;
    case v1::OptimizerSpec::ADAMW:
      plan.kind = kKernelAdam;
      plan.decoupled = true;
      break;
    case v1::OptimizerSpec::ADAGRAD:
      plan.kind = kKernelAdagrad;
      break;
    case v1::OptimizerSpec::RMSPROP:
      plan.kind = kKernelRmsprop;
      break;
    case v1::OptimizerSpec::LION:
      plan.kind = kKernelLion;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer kind ", v1::OptimizerSpec::Kind_Name(spec.kind()),
          " is not supported; use SGD, ADAM, ADAMW, ADAGRAD, RMSPROP or "
          "LION"));
  }

  RETURN_IF_ERROR(SortAndCheckSpans(bucket_index, spans));

  std::vector<Segment> segments;
  for (const ParamSpan& span : spans) {
    plan.extent = std::max(plan.extent, span.offset + span.numel);
    if (span.numel == 0) continue;
    ASSIGN_OR_RETURN(const HyperParameters hp,
                     ResolveSpanHyperParameters(spec, bucket_index, span));
    int group = 0;
    while (group < static_cast<int>(plan.groups.size()) &&
           !(plan.groups[group] == hp)) {
      ++group;
    }
    if (group == static_cast<int>(plan.groups.size()))
      plan.groups.push_back(hp);
    const StateLayout layout = ParameterStateLayout(spec.kind(), hp);
    const bool has_state = !layout.empty();
    const int64_t state_offset = has_state ? plan.state_numel : -1;
    if (has_state) {
      for (int k = 0; k < kMaxStateArrays; ++k) {
        if (layout.names[k] == nullptr) continue;
        plan.keeps[k] = true;
        if (layout.initial[k] != 0) {
          plan.fills.push_back(
              {k, plan.state_numel, span.numel, layout.initial[k]});
        }
      }
      plan.state_spans.push_back(
          StateSpan{span.name, span.numel, plan.state_numel, layout});
      plan.state_numel += span.numel;
    }
    if (!segments.empty()) {
      Segment& last = segments.back();
      if (last.group == group && last.offset + last.numel == span.offset &&
          (last.state_offset < 0) == (state_offset < 0)) {
        last.numel += span.numel;  // state, if any, is contiguous too
        continue;
      }
    }
    segments.push_back(Segment{span.offset, span.numel, state_offset, group});
  }
  for (bool keeps : plan.keeps) plan.num_state_arrays += keeps ? 1 : 0;
  if (plan.num_state_arrays == 0) plan.state_numel = 0;

  // Chunks, batched by launch: launch b covers groups
  // [b * max_groups_per_launch, (b + 1) * max_groups_per_launch).
  const int num_groups = static_cast<int>(plan.groups.size());
  for (int first_group = 0; first_group < num_groups;
       first_group += max_groups_per_launch) {
    BucketPlan::Launch launch;
    launch.first_chunk = static_cast<int>(plan.chunks.size());
    launch.first_group = first_group;
    launch.num_groups =
        std::min(max_groups_per_launch, num_groups - first_group);
    for (const Segment& seg : segments) {
      if (seg.group < first_group ||
          seg.group >= first_group + launch.num_groups) {
        continue;
      }
      int64_t done = 0;
      while (done < seg.numel) {
        // A short first chunk brings later chunks to a multiple of 4
        // elements from the bucket start, so that with 16-byte aligned
        // buffers they take the kernel's vectorised path.
        const int64_t start = seg.offset + done;
        int64_t len = (start % 4 == 0) ? chunk_elements : 4 - start % 4;
        len = std::min(len, seg.numel - done);
        ChunkDescriptor c;
        c.offset = start;
        c.state_offset = seg.state_offset < 0 ? -1 : seg.state_offset + done;
        c.numel = static_cast<int32_t>(len);
        c.group = seg.group - first_group;
        plan.chunks.push_back(c);
        done += len;
      }
    }
    launch.num_chunks =
        static_cast<int>(plan.chunks.size()) - launch.first_chunk;
    plan.launches.push_back(launch);
  }
  if (plan.chunks.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bucket ", bucket_index, " is too large"));
  }
  return plan;
}

GroupScalars MakeGroupScalars(const BucketPlan& plan,
                              const HyperParameters& spec_hp, int64_t step,
                              const HyperParameterOverrides& overrides) {
  GroupScalars g{};
  g.bias_correction2_sqrt = 1.0f;
  g.decay = 1.0f;
  g.one_minus_dampening = 1.0f;
  // The group's hyper-parameters with the program's changes, and its lr
  // for this step (set by the program, or scheduled), as the CPU
  // optimizer's.
  const HyperParameters& hp = EffectiveHyperParameters(spec_hp, overrides);
  const double lr = StepLearningRate(spec_hp, step, overrides);
  switch (plan.kind) {
    case kKernelSgd: {
      const cpu::SgdScalars s =
          cpu::MakeSgdScalars(lr, hp.momentum, hp.dampening, hp.nesterov,
                              hp.weight_decay, /*first_step=*/step == 1);
      g.neg_lr = s.neg_lr;
      g.sgd_weight_decay = s.weight_decay;
      g.momentum = s.momentum;
      g.one_minus_dampening = s.one_minus_dampening;
      g.nesterov = s.nesterov ? 1 : 0;
      g.first_step = s.first_step ? 1 : 0;
      break;
    }
    case kKernelAdam: {
      const cpu::AdamScalars s =
          cpu::MakeAdamScalars(lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay,
                               plan.decoupled, step, hp.amsgrad);
      g.beta1 = s.beta1;
      g.one_minus_beta1 = s.one_minus_beta1;
      g.beta2 = s.beta2;
      g.one_minus_beta2 = s.one_minus_beta2;
      g.eps = s.eps;
      g.neg_step_size = s.neg_step_size;
      g.bias_correction2_sqrt = s.bias_correction2_sqrt;
      g.adam_weight_decay = s.weight_decay;
      g.decay = s.decay;
      g.decoupled = s.decoupled ? 1 : 0;
      g.amsgrad = s.amsgrad ? 1 : 0;
      break;
    }
    case kKernelAdagrad: {
      const cpu::AdagradScalars s = cpu::MakeAdagradScalars(
          lr, hp.lr_decay, hp.weight_decay, hp.eps, step);
      g.neg_clr = s.neg_clr;
      g.adagrad_weight_decay = s.weight_decay;
      g.eps = s.eps;
      break;
    }
    case kKernelRmsprop: {
      const cpu::RmspropScalars s = cpu::MakeRmspropScalars(
          lr, hp.alpha, hp.eps, hp.weight_decay, hp.momentum, hp.centered);
      g.alpha = s.alpha;
      g.one_minus_alpha = s.one_minus_alpha;
      g.eps = s.eps;
      g.rmsprop_weight_decay = s.weight_decay;
      g.momentum = s.momentum;
      g.neg_lr = s.neg_lr;
      g.centered = s.centered ? 1 : 0;
      break;
    }
    case kKernelLion: {
      const cpu::LionScalars s =
          cpu::MakeLionScalars(lr, hp.beta1, hp.beta2, hp.weight_decay);
      g.beta1 = s.beta1;
      g.one_minus_beta1 = s.one_minus_beta1;
      g.beta2 = s.beta2;
      g.one_minus_beta2 = s.one_minus_beta2;
      g.neg_lr = s.neg_lr;
      g.decay = s.decay;
      break;
    }
  }
  return g;
}

OptimizerLaunchParams MakeLaunchParams(
    const BucketPlan& plan, int launch_index,
    const ChunkDescriptor* device_chunks, int64_t step,
    const HyperParameterOverrides& overrides) {
  const BucketPlan::Launch& launch = plan.launches[launch_index];
  OptimizerLaunchParams params{};
  params.kind = plan.kind;
  params.num_chunks = launch.num_chunks;
  params.chunks = device_chunks + launch.first_chunk;
  for (int i = 0; i < launch.num_groups; ++i) {
    params.groups[i] =
        MakeGroupScalars(plan, plan.groups[launch.first_group + i], step,
                         overrides);
  }
  return params;
}

}  // namespace pshard::worker::gpu
