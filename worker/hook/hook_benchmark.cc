// hook_benchmark: step time of the comm + optimizer path (the ZeroHook over
// Gloo on loopback, ranks as threads, synthetic gradients generated once
// outside the timed region), for tuning the communicator and the hook.
//
//   bazel run -c opt //worker/hook:hook_benchmark -- --world=2
//       --params=16777216 --bucket_mb=25 --mode=reduce_broadcast --steps=10
//   (one command line)
//
// With --max_grad_norm=X the same process measures the path without and
// with global gradient-norm clipping (--norm_type 2 or inf), alternating
// --rounds times, and prints both medians and their ratio: what deferring
// the owners' steps to the global norm costs. With --param_dtype=bf16
// and/or --reduce_dtype=bf16 it alternates fp32 runs with mixed-precision
// runs the same way and prints both medians, both runs' bytes per step and
// the ratios (what bf16 saves on the wire and what widening and narrowing
// cost).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/kv_store.h"
#include "worker/comm/rank_threads.h"
#include "shard/assignment.h"
#include "worker/hook/zero_hook.h"
#include "worker/optim/shard_optimizer.h"

ABSL_FLAG(int, world, 2, "ranks (threads)");
ABSL_FLAG(int64_t, params, 16 << 20, "fp32 parameters");
ABSL_FLAG(int64_t, tensor_numel, 1 << 20, "elements per parameter tensor");
ABSL_FLAG(double, bucket_mb, 25, "bucket cap in MiB");
ABSL_FLAG(std::string, mode, "reduce_broadcast",
          "reduce_broadcast or allreduce_broadcast");
ABSL_FLAG(bool, shared_memory, true,
          "same-host ranks exchange through shared-memory rings (false: "
          "loopback TCP only, the transport the torch peers use)");
ABSL_FLAG(int, steps, 10, "timed steps (after 2 warm-up steps)");
ABSL_FLAG(int64_t, piece_kb, 4096, "piece size in KiB (0: whole buckets)");
ABSL_FLAG(int, broadcast_lag, 4, "pieces between a reduction and its broadcast");
ABSL_FLAG(std::string, policy, "balanced",
          "assignment policy: balanced, round_robin or sharded");
ABSL_FLAG(double, max_grad_norm, 0,
          "> 0: also measure with global gradient-norm clipping at this limit "
          "and print the ratio");
ABSL_FLAG(std::string, norm_type, "2", "clipping's norm: 2 or inf");
ABSL_FLAG(int, rounds, 3,
          "with --max_grad_norm: alternating runs without and with clipping");
ABSL_FLAG(std::string, param_dtype, "fp32",
          "fp32 or bf16: the model's parameters (bf16: fp32 masters at the "
          "owner)");
ABSL_FLAG(std::string, reduce_dtype, "fp32",
          "fp32 or bf16: the gradient reduction's dtype");
ABSL_FLAG(bool, copy_grads, false,
          "copy fixed gradients into the buckets each step (as a backward "
          "pass would write them); off: the peers' convention, gradients "
          "generated once");

namespace pshard::worker {
namespace {

struct Result {
  std::vector<double> times;  // rank 0's timed steps, ms
  int64_t bytes_per_step = 0;
  double imbalance = 1;  // max / mean elements owned
};

// One run of --steps timed steps (after 2 warm-up steps), ranks as threads.
absl::StatusOr<Result> Run(v1::JobSpec::AssignmentPolicy policy,
                           const GradClipping& clipping,
                           const MixedPrecision& precision) {
  const int world = absl::GetFlag(FLAGS_world);
  const int64_t total = absl::GetFlag(FLAGS_params);
  const int64_t per = absl::GetFlag(FLAGS_tensor_numel);
  std::vector<ParameterInfo> infos;
  for (int64_t off = 0, i = 0; off < total; off += per, ++i) {
    const int64_t n = std::min(per, total - off);
    infos.push_back({absl::StrCat("t", i), {n}, n});
  }
  const bool allreduce = absl::GetFlag(FLAGS_mode) == "allreduce_broadcast";
  const int steps = absl::GetFlag(FLAGS_steps);
  InMemoryKvStore store;
  std::vector<std::vector<double>> times(world);
  std::vector<int64_t> bytes(world);
  std::vector<int64_t> owned(world);
  std::vector<absl::Status> statuses =
      RunRanks(world, [&](int r) -> absl::Status {
        GlooOptions gloo;
        gloo.shared_memory = absl::GetFlag(FLAGS_shared_memory);
        gloo.rank = r;
        gloo.world_size = world;
        auto comm = CreateGlooCommunicator(gloo, store);
        if (!comm.ok()) return comm.status();
        v1::OptimizerSpec opt;
        opt.set_kind(v1::OptimizerSpec::ADAM);
        auto optimizer = ShardOptimizer::Create(opt);
        ZeroHookOptions options;
        options.bucket_cap_mb = absl::GetFlag(FLAGS_bucket_mb);
        options.piece_bytes = absl::GetFlag(FLAGS_piece_kb) * 1024;
        options.broadcast_lag = absl::GetFlag(FLAGS_broadcast_lag);
        options.comm_mode = allreduce ? v1::JobSpec::ALLREDUCE_BROADCAST
                                      : v1::JobSpec::REDUCE_BROADCAST;
        options.clipping = clipping;
        options.precision = precision;
        auto hook = ZeroHook::Create(
            infos, comm->get(), *std::move(optimizer),
            [world, policy](const BucketLayout& layout)
                -> absl::StatusOr<BucketAssignment> {
              auto owners =
                  shard::AssignBuckets(policy, layout.BucketBytes(), world);
              if (!owners.ok()) return owners.status();
              return BucketAssignment{1, *owners};
            },
            options);
        if (!hook.ok()) return hook.status();
        std::mt19937 rng(r);
        std::uniform_real_distribution<float> u(-1, 1);
        std::vector<std::vector<float>> grads(infos.size());
        for (size_t i = 0; i < infos.size(); ++i) {
          grads[i].resize(infos[i].numel);
          for (float& g : grads[i]) g = u(rng);
        }
        const bool copy_grads = absl::GetFlag(FLAGS_copy_grads);
        for (int step = 0; step < steps + 2; ++step) {
          // Gradients are reduced in place, so without copying each step they
          // drift (sums of sums); harmless for timing.
          // A benchmark measures real elapsed time: absl::Now, not a Clock.
          const absl::Time start = absl::Now();
          for (int i = static_cast<int>(infos.size()) - 1; i >= 0; --i) {
            if (copy_grads || step == 0) {
              if (precision.mixed()) {
                // Narrowed to the reduce dtype, as the CPU job hands them over.
                if (absl::Status s = (*hook)->SetGradient(i, grads[i]); !s.ok()) {
                  return s;
                }
              } else {
                std::copy(grads[i].begin(), grads[i].end(),
                          (*hook)->grads()[i]);
              }
            }
            (*hook)->GradientReady(i);
          }
          if (absl::Status s = (*hook)->FinishStep(); !s.ok()) return s;
          if (step >= 2) {
            times[r].push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
          }
        }
        bytes[r] = (*comm)->bytes_sent();
        for (int b = 0; b < (*hook)->layout().num_buckets(); ++b) {
          owned[r] += (*hook)->owned_elements(b);
        }
        (void)(*comm)->Barrier()->Wait(absl::Seconds(60));
        return absl::OkStatus();
      });
  if (absl::Status error = FirstError(statuses); !error.ok()) return error;
  return Result{times[0], bytes[0] / (steps + 2), shard::Imbalance(owned)};
}

double Median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int Main() {
  v1::JobSpec::AssignmentPolicy policy;
  if (!v1::JobSpec::AssignmentPolicy_Parse(
          absl::AsciiStrToUpper(absl::GetFlag(FLAGS_policy)), &policy)) {
    std::fprintf(stderr, "--policy: unknown policy \"%s\"\n",
                 absl::GetFlag(FLAGS_policy).c_str());
    return 2;
  }
  const double max_norm = absl::GetFlag(FLAGS_max_grad_norm);
  GradClipping clipping;
  clipping.max_norm = max_norm;
  clipping.kind =
      absl::GetFlag(FLAGS_norm_type) == "inf" ? NormKind::kInf : NormKind::kL2;
  MixedPrecision precision;
  for (const auto& [flag, dtype] :
       {std::pair<std::string, DataType*>{absl::GetFlag(FLAGS_param_dtype),
                                          &precision.param_dtype},
        std::pair<std::string, DataType*>{absl::GetFlag(FLAGS_reduce_dtype),
                                          &precision.reduce_dtype}}) {
    if (flag == "bf16") {
      *dtype = DataType::kBFloat16;
    } else if (flag != "fp32") {
      std::fprintf(stderr, "--param_dtype/--reduce_dtype: fp32 or bf16, got "
                   "\"%s\"\n", flag.c_str());
      return 2;
    }
  }
  const bool compare = max_norm > 0 || precision.mixed();
  const int rounds = compare ? std::max(1, absl::GetFlag(FLAGS_rounds)) : 1;
  std::vector<double> plain, clipped, mixed;
  int64_t bytes = 0, mixed_bytes = 0;
  double imbalance = 1;
  for (int round = 0; round < rounds; ++round) {
    absl::StatusOr<Result> off = Run(policy, GradClipping(), MixedPrecision());
    if (!off.ok()) {
      std::fprintf(stderr, "%s\n", off.status().ToString().c_str());
      return 1;
    }
    plain.insert(plain.end(), off->times.begin(), off->times.end());
    bytes = off->bytes_per_step;
    imbalance = off->imbalance;
    if (max_norm > 0) {
      absl::StatusOr<Result> on = Run(policy, clipping, MixedPrecision());
      if (!on.ok()) {
        std::fprintf(stderr, "%s\n", on.status().ToString().c_str());
        return 1;
      }
      clipped.insert(clipped.end(), on->times.begin(), on->times.end());
    }
    if (precision.mixed()) {
      absl::StatusOr<Result> on = Run(policy, GradClipping(), precision);
      if (!on.ok()) {
        std::fprintf(stderr, "%s\n", on.status().ToString().c_str());
        return 1;
      }
      mixed.insert(mixed.end(), on->times.begin(), on->times.end());
      mixed_bytes = on->bytes_per_step;
    }
  }
  std::printf(
      "{\"impl\": \"pshard-hook\", \"world\": %d, \"params\": %lld, "
      "\"bucket_mb\": %g, \"mode\": \"%s\", \"policy\": \"%s\", "
      "\"imbalance\": %.4f, \"step_time_ms_median\": %.1f, "
      "\"step_time_ms_min\": %.1f, \"bytes_sent_per_step_rank0\": %lld",
      absl::GetFlag(FLAGS_world),
      static_cast<long long>(absl::GetFlag(FLAGS_params)),
      absl::GetFlag(FLAGS_bucket_mb), absl::GetFlag(FLAGS_mode).c_str(),
      absl::GetFlag(FLAGS_policy).c_str(), imbalance,
      Median(plain), *std::min_element(plain.begin(), plain.end()),
      static_cast<long long>(bytes));
  if (max_norm > 0) {
    std::printf(
        ", \"max_grad_norm\": %g, \"norm_type\": \"%s\", \"rounds\": %d, "
        "\"clipped_step_time_ms_median\": %.1f, \"clipped_step_time_ms_min\": "
        "%.1f, \"clipping_ratio\": %.3f",
        max_norm, absl::GetFlag(FLAGS_norm_type).c_str(), rounds,
        Median(clipped), *std::min_element(clipped.begin(), clipped.end()),
        Median(clipped) / Median(plain));
  }
  if (precision.mixed()) {
    std::printf(
        ", \"param_dtype\": \"%s\", \"reduce_dtype\": \"%s\", \"rounds\": %d, "
        "\"mixed_step_time_ms_median\": %.1f, \"mixed_step_time_ms_min\": "
        "%.1f, \"mixed_ratio\": %.3f, \"mixed_bytes_sent_per_step_rank0\": "
        "%lld, \"mixed_bytes_ratio\": %.4f",
        absl::GetFlag(FLAGS_param_dtype).c_str(),
        absl::GetFlag(FLAGS_reduce_dtype).c_str(), rounds, Median(mixed),
        *std::min_element(mixed.begin(), mixed.end()),
        Median(mixed) / Median(plain), static_cast<long long>(mixed_bytes),
        static_cast<double>(mixed_bytes) / static_cast<double>(bytes));
  }
  std::printf("}\n");
  return 0;
}

}  // namespace
}  // namespace pshard::worker

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pshard::worker::Main();
}
