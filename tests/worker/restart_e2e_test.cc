// End to end, restart: a worker killed (SIGKILL) mid-job no longer fails a
// job with max_restarts: the coordinator restarts it in a new epoch on the
// survivor plus the spare (or, with min_world_size 1 and no spare, on the
// survivor alone), and it SUCCEEDS. Without checkpoints the restart runs
// from step 0; with them, from the latest complete one; either way its
// output equals an uninterrupted run's bit for bit.
#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/worker/restart_testing.h"

namespace pshard::testing {
namespace {

// Long enough (about 2 s here) that the kill after step 20 cannot miss the
// job on a loaded CI machine; 400 steps once could.
constexpr int64_t kSteps = 1200;

v1::JobSpec MlpSpec(const std::string& output_dir) {
  return MlpJobSpec(
      {"mlp-restart", {256, 256}, 64, 0.01, kSteps, 3, 0.003, 20, 1},
      output_dir);
}

// The job as it ends when nothing is killed (its 3 workers idle again).
v1::Job RunUninterrupted(Cluster& cluster) {
  return RunToEnd(cluster, MlpSpec(absl::StrCat(cluster.dir(), "/out-clean")),
                  3);
}

TEST(RestartE2eTest, KilledWorkerRestartsOnSurvivorAndSpareBitIdentical) {
  ClusterOptions options;
  options.workers = 3;
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));

  const v1::Job clean = RunUninterrupted(*cluster);
  ASSERT_EQ(clean.state(), v1::SUCCEEDED) << clean.reason() << cluster->Logs();

  // The same job, one worker killed mid-run.
  v1::JobSpec spec = MlpSpec(absl::StrCat(cluster->dir(), "/out-restarted"));
  spec.set_max_restarts(1);
  const v1::Job job = RunAndKillRank(*cluster, spec, 1);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << cluster->Logs();
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_EQ(job.progress().step(), kSteps);
  EXPECT_EQ(job.members_size(), 2);
  const auto restarts = RestartEvents(*cluster, job.id());
  ASSERT_EQ(restarts.size(), 1u) << cluster->Logs();
  EXPECT_EQ(restarts[0].restart(), 1);
  EXPECT_EQ(restarts[0].world_size(), 2);
  EXPECT_THAT(restarts[0].cause(), ::testing::HasSubstr("rank 1"));

  const std::string clean_bytes = ReadFile(clean.output_path());
  ASSERT_FALSE(clean_bytes.empty());
  EXPECT_TRUE(ReadFile(job.output_path()) == clean_bytes)
      << "the restarted job's parameters differ from the uninterrupted run's";
}

// With checkpoints the restart resumes from the latest complete one, not
// from step 0, and still ends bit-identical to the uninterrupted run.
TEST(RestartE2eTest, KilledWorkerResumesFromTheLatestCheckpointBitIdentical) {
  ClusterOptions options;
  options.workers = 3;
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));
  const v1::Job clean = RunUninterrupted(*cluster);
  ASSERT_EQ(clean.state(), v1::SUCCEEDED) << clean.reason() << cluster->Logs();

  v1::JobSpec spec = MlpSpec(absl::StrCat(cluster->dir(), "/out-resumed"));
  spec.set_max_restarts(1);
  spec.mutable_checkpoint()->set_dir(absl::StrCat(cluster->dir(), "/ckpt"));
  spec.mutable_checkpoint()->set_every_steps(10);
  spec.mutable_checkpoint()->set_keep_last(2);
  const v1::Job job = RunAndKillRank(*cluster, spec, 1);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << cluster->Logs();
  const auto restarts = RestartEvents(*cluster, job.id());
  ASSERT_EQ(restarts.size(), 1u) << cluster->Logs();
  ASSERT_TRUE(restarts[0].has_resumed_from()) << cluster->Logs();
  EXPECT_GE(restarts[0].resumed_from().step(), 10);
  EXPECT_EQ(restarts[0].resumed_from().step() % 10, 0);
  EXPECT_EQ(job.resumed_from().step(), restarts[0].resumed_from().step());
  EXPECT_TRUE(ReadFile(job.output_path()) == ReadFile(clean.output_path()))
      << "the resumed job's parameters differ from the uninterrupted run's";
}

// Fast loss detection: with a worker timeout of a minute, the job trains
// again within seconds (the killed worker's Attach stream closing), resumed
// from its latest checkpoint, at world 2 and 4 with a spare each.
class RestartAfterKillTest : public ::testing::TestWithParam<int> {};

TEST_P(RestartAfterKillTest, TrainsAgainWithoutWaitingForTheWorkerTimeout) {
  const int world = GetParam();
  ClusterOptions options;
  options.workers = world + 1;
  options.worker_timeout = absl::Seconds(60);
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));
  v1::JobSpec spec = MlpSpec(absl::StrCat(cluster->dir(), "/out"));
  spec.set_world_size(world);
  spec.set_max_restarts(1);
  spec.mutable_checkpoint()->set_dir(absl::StrCat(cluster->dir(), "/ckpt"));
  spec.mutable_checkpoint()->set_every_steps(10);
  spec.mutable_checkpoint()->set_keep_last(2);
  absl::Duration to_training = absl::InfiniteDuration();
  const v1::Job job = RunAndKillRank(*cluster, spec, 1, &to_training);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << cluster->Logs();
  EXPECT_LT(to_training, absl::Seconds(10));
  const auto restarts = RestartEvents(*cluster, job.id());
  ASSERT_EQ(restarts.size(), 1u) << cluster->Logs();
  EXPECT_EQ(restarts[0].world_size(), world);
  EXPECT_TRUE(restarts[0].has_resumed_from());
  EXPECT_THAT(restarts[0].cause(),
              ::testing::HasSubstr(
                  "lost: its connection to the coordinator closed"));
}

INSTANTIATE_TEST_SUITE_P(World, RestartAfterKillTest, ::testing::Values(2, 4));

TEST(RestartE2eTest, NoSpareRestartsAtMinWorldSize) {
  ClusterOptions options;
  options.workers = 2;
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));
  v1::JobSpec spec = MlpSpec(absl::StrCat(cluster->dir(), "/out"));
  spec.set_max_restarts(1);
  spec.set_min_world_size(1);
  const v1::Job job = RunAndKillRank(*cluster, spec, 1);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << cluster->Logs();
  EXPECT_EQ(job.members_size(), 1);
  const auto restarts = RestartEvents(*cluster, job.id());
  ASSERT_EQ(restarts.size(), 1u);
  EXPECT_EQ(restarts[0].world_size(), 1);
}

}  // namespace
}  // namespace pshard::testing
