// End to end, restart of a `replay` job (recorded gradients, so every step's
// data is fixed by (step, rank) alone): a worker killed with SIGKILL after a
// checkpoint, and the job resumes from that checkpoint
//   - with a spare worker, at the same world: bit-identical to an
//     uninterrupted run;
//   - with no spare and min_world_size = world_size - 1, at the smaller
//     world: equal to torch.optim.Adam on the same data averaged over the
//     old world up to the resume step and over the new world after it.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/worker/replay_testing.h"
#include "tests/worker/restart_testing.h"

namespace pshard::testing {
namespace {

constexpr int kSteps = 100;
constexpr double kLr = 0.01;

// Adam at kLr, as JSON for the torch reference and as the job's spec.
std::string AdamJson() {
  return absl::StrCat(R"({"kind": "ADAM", "hyper_parameters": {"lr": )", kLr,
                      "}}");
}

v1::OptimizerSpec Adam() {
  v1::OptimizerSpec optimizer;
  optimizer.set_kind(v1::OptimizerSpec::ADAM);
  optimizer.mutable_hyper_parameters()->set_lr(kLr);
  return optimizer;
}

TEST(ReplayRestartE2eTest, KilledWorkerResumesWithASpareBitIdentical) {
  ClusterOptions options;
  options.workers = 3;
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));
  const std::string data = WriteReplayData(*cluster, "replay", kSteps, 3);

  const v1::Job clean = RunToEnd(
      *cluster, ReplaySpec(*cluster, data, 2, kSteps, Adam(), "clean"), 3);
  ASSERT_EQ(clean.state(), v1::SUCCEEDED) << clean.reason() << cluster->Logs();

  v1::JobSpec spec = ReplaySpec(*cluster, data, 2, kSteps, Adam(), "restarted");
  CheckpointEvery10(*cluster, spec);
  const v1::Job job = RunAndKillRank(*cluster, spec, 1);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << cluster->Logs();
  const auto restarts = RestartEvents(*cluster, job.id());
  ASSERT_EQ(restarts.size(), 1u) << cluster->Logs();
  EXPECT_EQ(restarts[0].world_size(), 2);
  ASSERT_TRUE(restarts[0].has_resumed_from()) << cluster->Logs();
  EXPECT_GE(restarts[0].resumed_from().step(), 10);
  const std::string clean_bytes = ReadFile(clean.output_path());
  ASSERT_FALSE(clean_bytes.empty());
  EXPECT_TRUE(ReadFile(job.output_path()) == clean_bytes)
      << "the resumed job's parameters differ from the uninterrupted run's";
}

TEST(ReplayRestartE2eTest, NoSpareResumesAtTheSmallerWorldLikeTorch) {
  if (!PythonHasTorch()) {
    GTEST_SKIP() << kPython << " cannot import torch (tools/setup.sh "
                 << "installs python3-torch): no torch reference";
  }
  ClusterOptions options;
  options.workers = 3;
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));
  const std::string data = WriteReplayData(*cluster, "replay", kSteps, 3);

  v1::JobSpec spec = ReplaySpec(*cluster, data, 3, kSteps, Adam(), "shrunk");
  CheckpointEvery10(*cluster, spec);
  spec.set_min_world_size(2);
  const v1::Job job = RunAndKillRank(*cluster, spec, 1);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << cluster->Logs();
  EXPECT_EQ(job.members_size(), 2);
  const auto restarts = RestartEvents(*cluster, job.id());
  ASSERT_EQ(restarts.size(), 1u) << cluster->Logs();
  EXPECT_EQ(restarts[0].world_size(), 2);
  ASSERT_TRUE(restarts[0].has_resumed_from()) << cluster->Logs();
  const int64_t resumed = restarts[0].resumed_from().step();
  EXPECT_GE(resumed, 10);

  EXPECT_OK(CheckAgainstTorch(data, AdamJson(), kSteps, resumed, 3, 2,
                              job.output_path(), 1e-5, 1e-6));
}

}  // namespace
}  // namespace pshard::testing
