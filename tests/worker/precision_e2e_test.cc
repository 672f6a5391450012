// End to end, mixed precision (JobSpec.precision): `replay` jobs (recorded
// gradients) of 1, 2 and 3 pshard-worker processes under the real
// coordinator, with bf16 parameters and with bf16 reductions, end with the
// parameters torch gets stepping fp32 master weights on the same gradients
// (rounded to bf16 where the job reduces in bf16, the result rounded to bf16
// where the model holds bf16); the shard table reports bf16 buckets at half
// the bytes; and a bf16 job whose worker is killed resumes from its
// checkpoint (which keeps the fp32 masters) bit-identical to an
// uninterrupted run.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"
#include "tests/worker/replay_testing.h"
#include "tests/worker/restart_testing.h"

namespace pshard::testing {
namespace {

constexpr double kLr = 0.01;

// Adam, or SGD with momentum where the job reduces in bf16: the order of a
// 3-rank bf16 sum is the ring's, and Adam's m/sqrt(v) turns a last-bit
// difference in a near-zero gradient into a different step; SGD keeps it a
// last-bit difference.
v1::OptimizerSpec Optimizer(v1::PrecisionSpec::DType reduce) {
  v1::OptimizerSpec optimizer;
  optimizer.set_kind(reduce == v1::PrecisionSpec::BF16
                         ? v1::OptimizerSpec::SGD
                         : v1::OptimizerSpec::ADAM);
  optimizer.mutable_hyper_parameters()->set_lr(kLr);
  if (reduce == v1::PrecisionSpec::BF16) {
    optimizer.mutable_hyper_parameters()->set_momentum(0.9);
  }
  return optimizer;
}

std::string OptimizerJson(v1::PrecisionSpec::DType reduce) {
  return reduce == v1::PrecisionSpec::BF16
             ? absl::StrCat(R"({"kind": "SGD", "hyper_parameters": {"lr": )",
                            kLr, R"(, "momentum": 0.9}})")
             : absl::StrCat(R"({"kind": "ADAM", "hyper_parameters": {"lr": )",
                            kLr, "}}");
}

v1::JobSpec MixedSpec(Cluster& cluster, const std::string& data, int world,
                      int64_t steps, v1::PrecisionSpec::DType param,
                      v1::PrecisionSpec::DType reduce,
                      const std::string& name) {
  v1::JobSpec spec =
      ReplaySpec(cluster, data, world, steps, Optimizer(reduce), name);
  spec.set_bucket_cap_mb(0.002);  // several buckets, owned by every rank
  spec.mutable_precision()->set_param_dtype(param);
  spec.mutable_precision()->set_reduce_dtype(reduce);
  return spec;
}

const char* Flag(v1::PrecisionSpec::DType dtype) {
  return dtype == v1::PrecisionSpec::BF16 ? "bf16" : "fp32";
}

TEST(PrecisionE2eTest, ReplayJobsStepMastersLikeTorch) {
  if (!PythonHasTorch()) {
    GTEST_SKIP() << kPython << " cannot import torch (tools/setup.sh "
                 << "installs python3-torch): no torch reference";
  }
  constexpr int kSteps = 12;
  ClusterOptions options;
  options.workers = 3;
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));
  const std::string data = WriteReplayData(*cluster, "replay", kSteps, 3);
  const std::vector<std::pair<v1::PrecisionSpec::DType,
                              v1::PrecisionSpec::DType>>
      precisions = {{v1::PrecisionSpec::BF16, v1::PrecisionSpec::FP32},
                    {v1::PrecisionSpec::BF16, v1::PrecisionSpec::BF16}};
  for (const auto& [param, reduce] : precisions) {
    for (int world = 1; world <= 3; ++world) {
      const std::string name =
          absl::StrCat("params-", Flag(param), "-reduce-", Flag(reduce), "-",
                       world);
      SCOPED_TRACE(name);
      const v1::Job job = RunToEnd(
          *cluster, MixedSpec(*cluster, data, world, kSteps, param, reduce, name),
          3);
      ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << cluster->Logs();
      // The shard table: bf16 buckets, their bytes at 2 per element.
      ASSERT_OK_AND_ASSIGN(v1::ShardAssignment shards,
                           cluster->ShardAssignment(job.id()));
      ASSERT_GT(shards.buckets_size(), 0);
      for (const v1::BucketAssignment& bucket : shards.buckets()) {
        EXPECT_EQ(bucket.dtype(), "BF16");
        EXPECT_EQ(bucket.bytes(), 2 * bucket.num_elements());
      }
      // The masters match torch's fp32 steps (fp32 reduce: the same
      // gradients), and the model's values are their bf16 rounding, which a
      // difference in the last master bit can flip by one bf16 step (2^-8
      // relative). A bf16 reduction of 3 ranks adds in the ring's order, not
      // the reference's: a last-bit difference of a gradient (2^-9 of it,
      // ~1e-3 here) times lr, over the steps, with momentum: atol 1e-4.
      const double atol = reduce == v1::PrecisionSpec::BF16 ? 1e-4 : 1e-6;
      EXPECT_OK(CheckAgainstTorch(data, OptimizerJson(reduce), kSteps, kSteps,
                                  world, world, job.output_path(), 1.0 / 128,
                                  atol,
                                  {"--param_dtype", Flag(param),
                                   "--reduce_dtype", Flag(reduce)}));
    }
  }
}

TEST(PrecisionE2eTest, KilledBf16JobResumesBitIdentical) {
  constexpr int kSteps = 100;
  ClusterOptions options;
  options.workers = 3;
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));
  const std::string data = WriteReplayData(*cluster, "replay", kSteps, 2);
  const v1::Job clean = RunToEnd(
      *cluster,
      MixedSpec(*cluster, data, 2, kSteps, v1::PrecisionSpec::BF16,
                v1::PrecisionSpec::FP32, "clean"),
      3);
  ASSERT_EQ(clean.state(), v1::SUCCEEDED) << clean.reason() << cluster->Logs();

  v1::JobSpec spec = MixedSpec(*cluster, data, 2, kSteps,
                               v1::PrecisionSpec::BF16,
                               v1::PrecisionSpec::FP32, "restarted");
  CheckpointEvery10(*cluster, spec);
  const v1::Job job = RunAndKillRank(*cluster, spec, 1);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << cluster->Logs();
  const auto restarts = RestartEvents(*cluster, job.id());
  ASSERT_EQ(restarts.size(), 1u) << cluster->Logs();
  ASSERT_TRUE(restarts[0].has_resumed_from()) << cluster->Logs();
  EXPECT_GE(restarts[0].resumed_from().step(), 10);
  // Resumed from rounded bf16 values instead of the masters, the steps after
  // the checkpoint would drift from the clean run's.
  const std::string clean_bytes = ReadFile(clean.output_path());
  ASSERT_FALSE(clean_bytes.empty());
  EXPECT_TRUE(ReadFile(job.output_path()) == clean_bytes)
      << "the resumed bf16 job's parameters differ from the uninterrupted run's";
}

}  // namespace
}  // namespace pshard::testing
