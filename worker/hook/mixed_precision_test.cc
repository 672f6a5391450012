// Mixed precision (ZeroHookOptions::precision) against the fp32 hook, on
// Gloo over TCP with 1 to 3 ranks: with gradients whose rank sums are exact
// in bf16, a bf16-parameter run's fp32 master weights end bit-identical to
// the fp32 run's parameters and its model parameters are exactly those
// rounded to bf16 (nearest even), whatever reduce dtype, comm mode and
// assignment policy; broadcasts move half the bytes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "shard/assignment.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/kv_store.h"
#include "worker/comm/rank_threads.h"
#include "worker/comm/reduce_ops.h"
#include "worker/hook/zero_hook.h"
#include "worker/optim/shard_optimizer.h"

namespace pshard::worker {
namespace {

constexpr int kSteps = 4;

// bf16 of x, round to nearest even (as the communicator's bf16 sums),
// widened back.
float RoundToBFloat16(float x) { return BFloat16ToFloat(FloatToBFloat16(x)); }

const std::vector<ParameterInfo>& Params() {
  static const auto* params = new std::vector<ParameterInfo>{
      {"w1", {37}, 37}, {"w2", {10, 13}, 130}, {"b", {5}, 5}, {"w3", {61}, 61}};
  return *params;
}

// Initial values with more precision than bf16 holds, the same on every rank.
float Initial(int param, int64_t i) {
  return 0.1f + 0.013f * static_cast<float>(param) +
         0.0007f * static_cast<float>(i % 17) - 0.0003f * static_cast<float>(i % 5);
}

// Rank r's gradient at `step`: small multiples of world * 2^-6, so every
// partial sum and the mean (a bf16 reduction rounds the mean too) are exact.
float Gradient(int world, int rank, int step, int param, int64_t i) {
  const int v = static_cast<int>((rank * 7 + step * 3 + param * 5 + i) % 17) - 8;
  return static_cast<float>(world * v) / 64.0f;
}

struct RankRun {
  std::vector<std::vector<float>> params;  // the model's, widened
  // The optimizer's values of what this rank owns: (param, offset) -> values.
  std::vector<std::tuple<int, int64_t, std::vector<float>>> owned;
  int64_t bytes_sent = 0;
};

struct Config {
  DataType param_dtype;
  DataType reduce_dtype;
  v1::JobSpec::CommMode mode;
  v1::JobSpec::AssignmentPolicy policy;
};

absl::Status RunRank(const Config& config, int world, Communicator* comm,
                     RankRun* out) {
  const int rank = comm->rank();
  v1::OptimizerSpec opt;
  opt.set_kind(v1::OptimizerSpec::ADAM);
  opt.mutable_hyper_parameters()->set_lr(0.01);
  ASSIGN_OR_RETURN(std::unique_ptr<ShardOptimizer> optimizer,
                   ShardOptimizer::Create(opt));
  ZeroHookOptions options;
  options.comm_mode = config.mode;
  options.bucket_cap_mb = 500.0 / (1 << 20);  // several buckets
  options.piece_bytes = 96;                   // pieces straddle parameters
  options.timeout = absl::Seconds(30);
  options.precision.param_dtype = config.param_dtype;
  options.precision.reduce_dtype = config.reduce_dtype;
  const v1::JobSpec::AssignmentPolicy policy = config.policy;
  ASSIGN_OR_RETURN(
      std::unique_ptr<ZeroHook> hook,
      ZeroHook::Create(
          Params(), comm, std::move(optimizer),
          [policy, world](const BucketLayout& layout)
              -> absl::StatusOr<BucketAssignment> {
            ASSIGN_OR_RETURN(
                std::vector<int> owners,
                shard::AssignBuckets(policy, layout.BucketBytes(), world));
            return BucketAssignment{1, owners};
          },
          options));
  const int count = static_cast<int>(Params().size());
  for (int p = 0; p < count; ++p) {
    std::vector<float> values(Params()[p].numel);
    for (int64_t i = 0; i < Params()[p].numel; ++i) values[i] = Initial(p, i);
    RETURN_IF_ERROR(hook->SetParameter(p, values));
  }
  for (int step = 1; step <= kSteps; ++step) {
    for (int p = count - 1; p >= 0; --p) {  // backward order
      std::vector<float> grad(Params()[p].numel);
      for (int64_t i = 0; i < Params()[p].numel; ++i) {
        grad[i] = Gradient(world, rank, step, p, i);
      }
      RETURN_IF_ERROR(hook->SetGradient(p, grad));
      RETURN_IF_ERROR(hook->MarkGradientReady(p));
    }
    RETURN_IF_ERROR(hook->FinishStep());
  }
  for (int p = 0; p < count; ++p) {
    std::vector<float>& values = out->params.emplace_back(Params()[p].numel);
    RETURN_IF_ERROR(hook->ReadParameter(p, absl::MakeSpan(values)));
    // A range reads the same elements; one past the end is refused.
    std::vector<float> tail(values.size() - 1);
    RETURN_IF_ERROR(hook->ReadParameterRange(p, 1, absl::MakeSpan(tail)));
    if (!std::equal(tail.begin(), tail.end(), values.begin() + 1)) {
      return absl::InternalError(
          absl::StrCat("parameter ", p, ": its range [1, n) differs"));
    }
    if (hook->ReadParameterRange(p, 1, absl::MakeSpan(values)).code() !=
        absl::StatusCode::kInvalidArgument) {
      return absl::InternalError(
          absl::StrCat("parameter ", p, ": a range past its end was read"));
    }
  }
  ASSIGN_OR_RETURN(std::vector<ZeroHook::OwnedParameter> owned,
                   hook->OwnedParameters());
  for (const ZeroHook::OwnedParameter& part : owned) {
    int p = 0;
    while (Params()[p].name != part.name) ++p;
    std::vector<float> values(part.numel);
    RETURN_IF_ERROR(
        hook->ReadOwnedParameter(p, part.offset, absl::MakeSpan(values)));
    out->owned.emplace_back(p, part.offset, std::move(values));
  }
  // Parameters are the model's from now on: a late SetParameter would
  // desynchronise the masters.
  std::vector<float> late(Params()[0].numel);
  if (hook->SetParameter(0, late).code() !=
      absl::StatusCode::kFailedPrecondition) {
    return absl::InternalError("SetParameter after the first step accepted");
  }
  out->bytes_sent = comm->bytes_sent();
  return comm->Barrier()->Wait(absl::Seconds(30));
}

std::vector<RankRun> RunWorld(const Config& config, int world) {
  std::vector<RankRun> runs(world);
  InMemoryKvStore store;
  EXPECT_OK(FirstError(RunRanks(world, [&](int r) -> absl::Status {
    GlooOptions gloo;
    gloo.rank = r;
    gloo.world_size = world;
    gloo.timeout = absl::Seconds(30);
    gloo.shared_memory = false;
    ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                     CreateGlooCommunicator(gloo, store));
    return RunRank(config, world, comm.get(), &runs[r]);
  })));
  return runs;
}

std::string Name(DataType dtype) {
  return dtype == DataType::kFloat32 ? "fp32" : "bf16";
}

TEST(MixedPrecisionTest, MastersEqualTheFp32RunAndParametersAreTheirRounding) {
  for (const auto mode :
       {v1::JobSpec::REDUCE_BROADCAST, v1::JobSpec::ALLREDUCE_BROADCAST}) {
    for (const auto policy : {v1::JobSpec::BALANCED, v1::JobSpec::SHARDED}) {
      for (int world = 1; world <= 3; ++world) {
        const Config fp32{DataType::kFloat32, DataType::kFloat32, mode,
                          policy};
        const std::vector<RankRun> reference = RunWorld(fp32, world);
        ASSERT_EQ(reference.size(), static_cast<size_t>(world));
        for (const DataType reduce :
             {DataType::kFloat32, DataType::kBFloat16}) {
          for (const DataType param :
               {DataType::kFloat32, DataType::kBFloat16}) {
            if (param == DataType::kFloat32 && reduce == DataType::kFloat32) {
              continue;
            }
            SCOPED_TRACE(absl::StrCat(v1::JobSpec::CommMode_Name(mode), " ",
                                      v1::JobSpec::AssignmentPolicy_Name(policy),
                                      " world ", world, " params ", Name(param),
                                      " reduce ", Name(reduce)));
            const std::vector<RankRun> mixed =
                RunWorld({param, reduce, mode, policy}, world);
            ASSERT_EQ(mixed.size(), static_cast<size_t>(world));
            const auto& want = reference[0].params;
            int64_t owned_elements = 0;
            for (int r = 0; r < world; ++r) {
              for (size_t p = 0; p < want.size(); ++p) {
                for (size_t i = 0; i < want[p].size(); ++i) {
                  const float expected = param == DataType::kBFloat16
                                             ? RoundToBFloat16(want[p][i])
                                             : want[p][i];
                  ASSERT_EQ(mixed[r].params[p][i], expected)
                      << "rank " << r << " " << Params()[p].name << "[" << i
                      << "]";
                }
              }
              // Masters: the fp32 run's values, not their rounding.
              for (const auto& [p, offset, values] : mixed[r].owned) {
                owned_elements += static_cast<int64_t>(values.size());
                for (size_t i = 0; i < values.size(); ++i) {
                  ASSERT_EQ(values[i], want[p][offset + i])
                      << "rank " << r << " master " << Params()[p].name << "["
                      << offset + i << "]";
                }
              }
            }
            // Every element is owned once.
            int64_t total = 0;
            for (const ParameterInfo& info : Params()) total += info.numel;
            EXPECT_EQ(owned_elements, total);
            // Each dtype halves its own collective's bytes: under
            // REDUCE_BROADCAST, reduce and broadcast move the same bytes.
            if (world > 1 && mode == v1::JobSpec::REDUCE_BROADCAST) {
              int64_t fp32_bytes = 0, mixed_bytes = 0;
              for (int r = 0; r < world; ++r) {
                fp32_bytes += reference[r].bytes_sent;
                mixed_bytes += mixed[r].bytes_sent;
              }
              const int halved = (param == DataType::kBFloat16) +
                                 (reduce == DataType::kBFloat16);
              EXPECT_EQ(mixed_bytes * 4, fp32_bytes * (4 - halved));
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace pshard::worker
