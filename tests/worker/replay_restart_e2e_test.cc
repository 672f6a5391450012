// End to end, restart of a `replay` job (recorded gradients, so every step's
// data is fixed by (step, rank) alone): a worker killed with SIGKILL after a
// checkpoint, and the job resumes from that checkpoint
//   - with a spare worker, at the same world: bit-identical to an
//     uninterrupted run;
//   - with no spare and min_world_size = world_size - 1, at the smaller
//     world: equal to torch.optim.Adam on the same data averaged over the
//     old world up to the resume step and over the new world after it.
#include <sys/wait.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/worker/restart_testing.h"

namespace pshard::testing {
namespace {

constexpr char kPython[] = "/usr/bin/python3";
constexpr int kSteps = 100;
constexpr double kLr = 0.01;

// Recorded gradients for 3 ranks and kSteps steps (examples/make_replay_data.py).
std::string WriteReplayData(Cluster& cluster) {
  return WriteReplayData(cluster, kSteps, 3);
}

v1::JobSpec ReplaySpec(Cluster& cluster, const std::string& data, int world,
                       const std::string& name) {
  return ReplayAdamSpec(cluster, data, world, name, kSteps, kLr, 0.05);
}

void CheckpointEvery10(Cluster& cluster, v1::JobSpec& spec) {
  spec.set_max_restarts(1);
  spec.mutable_checkpoint()->set_dir(
      absl::StrCat(cluster.dir(), "/ckpt-", spec.name()));
  spec.mutable_checkpoint()->set_every_steps(10);
  spec.mutable_checkpoint()->set_keep_last(2);
}

TEST(ReplayRestartE2eTest, KilledWorkerResumesWithASpareBitIdentical) {
  ClusterOptions options;
  options.workers = 3;
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));
  const std::string data = WriteReplayData(*cluster);

  const v1::Job clean = RunToEnd(*cluster, ReplaySpec(*cluster, data, 2, "clean"), 3);
  ASSERT_EQ(clean.state(), v1::SUCCEEDED) << clean.reason() << cluster->Logs();

  v1::JobSpec spec = ReplaySpec(*cluster, data, 2, "restarted");
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
  if (!RunPython({"-c", "import torch"}, ::testing::TempDir() + "/torch.log")
           .ok()) {
    GTEST_SKIP() << kPython << " cannot import torch (tools/setup.sh "
                 << "installs python3-torch): no torch reference";
  }
  ClusterOptions options;
  options.workers = 3;
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));
  const std::string data = WriteReplayData(*cluster);

  v1::JobSpec spec = ReplaySpec(*cluster, data, 3, "shrunk");
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

  const std::string log = absl::StrCat(cluster->dir(), "/reference.log");
  EXPECT_OK(RunPython(
      {RunfilePath("tests/worker/replay_torch_reference.py"),
       "--replay_tools", RunfilePath("examples/make_replay_data.py"),
       "--data", data, "--steps", absl::StrCat(kSteps), "--switch_step",
       absl::StrCat(resumed), "--world_before", "3", "--world_after", "2",
       "--lr", absl::StrCat(kLr), "--actual", job.output_path()},
      log));
  printf("%s", ReadFile(log).c_str());
}

}  // namespace
}  // namespace pshard::testing
