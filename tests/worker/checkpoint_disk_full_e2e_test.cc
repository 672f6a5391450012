// End to end, a checkpoint directory on a full disk: a small tmpfs holds the
// job's first checkpoint and not the second. Training goes on untouched (its
// output equals a run without checkpoints, bit for bit), every later
// checkpoint is marked FAILED with the disk's error in its record and in an
// event, and the first stays complete and verifiable.
//
// The tmpfs is mounted in a mount namespace of this test's own, which the
// cluster's processes inherit, so nothing outside the test sees it. Needs
// CAP_SYS_ADMIN; the test skips, saying so, without it.
#include "absl/strings/str_cat.h"
#include "checkpoint/catalog.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/private_mount.h"
#include "tests/worker/restart_testing.h"

namespace pshard::testing {
namespace {

using ::testing::HasSubstr;

// About 0.9 MB of parameters and Adam state per checkpoint.
v1::JobSpec MlpSpec(const std::string& output_dir) {
  return MlpJobSpec(
      {"mlp-disk-full", {256, 256}, 32, 0.1, 60, 4, 0.001, 20},
      output_dir);
}

TEST(CheckpointDiskFullE2eTest, TrainingGoesOnAndTheCheckpointIsMarkedFailed) {
  if (absl::Status ns = PrivateMountNamespace(); !ns.ok()) {
    GTEST_SKIP() << "cannot mount a small tmpfs: " << ns;
  }
  ClusterOptions options;
  options.workers = 2;
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));
  const std::string disk = absl::StrCat(cluster->dir(), "/small-disk");
  ASSERT_OK(MountTmpfs(disk, "1536k"));

  const v1::Job clean =
      RunToEnd(*cluster, MlpSpec(absl::StrCat(cluster->dir(), "/out-clean")), 2);
  ASSERT_EQ(clean.state(), v1::SUCCEEDED) << clean.reason() << cluster->Logs();

  v1::JobSpec spec = MlpSpec(absl::StrCat(cluster->dir(), "/out-full"));
  spec.mutable_checkpoint()->set_dir(absl::StrCat(disk, "/ckpt"));
  spec.mutable_checkpoint()->set_every_steps(10);
  spec.mutable_checkpoint()->set_keep_last(1);
  const v1::Job job = RunToEnd(*cluster, spec, 2);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << cluster->Logs();
  EXPECT_EQ(job.progress().step(), 60);
  EXPECT_TRUE(ReadFile(job.output_path()) == ReadFile(clean.output_path()))
      << "checkpoints that failed changed the training";

  // Steps 10..50: the first fits, the rest find the disk full.
  ASSERT_EQ(job.checkpoints_size(), 5) << job.DebugString();
  EXPECT_EQ(job.checkpoints(0).step(), 10);
  EXPECT_EQ(job.checkpoints(0).state(), v1::CheckpointRecord::COMPLETE)
      << job.checkpoints(0).reason();
  for (int i = 1; i < job.checkpoints_size(); ++i) {
    const v1::CheckpointRecord& c = job.checkpoints(i);
    EXPECT_EQ(c.step(), 10 * (i + 1));
    EXPECT_EQ(c.state(), v1::CheckpointRecord::FAILED) << c.DebugString();
    EXPECT_THAT(c.reason(), HasSubstr("No space left on device"));
  }
  ASSERT_OK_AND_ASSIGN(auto events, cluster->Events(job.id(), absl::Seconds(10)));
  int failed_events = 0;
  for (const v1::JobEvent& e : events) {
    if (e.has_checkpoint() &&
        e.checkpoint().state() == v1::CheckpointRecord::FAILED) {
      ++failed_events;
      EXPECT_THAT(e.checkpoint().reason(), HasSubstr("No space left on device"));
    }
  }
  EXPECT_EQ(failed_events, 4);
  // The complete one is still the one a restart would resume from.
  ASSERT_OK_AND_ASSIGN(checkpoint::CompleteCheckpoint latest,
                       checkpoint::LatestCompleteCheckpoint(spec.checkpoint().dir()));
  EXPECT_EQ(latest.manifest.step, 10);
}

}  // namespace
}  // namespace pshard::testing
