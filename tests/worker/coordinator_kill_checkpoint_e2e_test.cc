// End to end, kill -9 of the coordinator while a job checkpoints every few
// steps, three times, each time restarted on its state file: every
// checkpoint is complete or absent, never half — each step directory with a
// manifest has a COMPLETE record and verifies, no other record is COMPLETE,
// none stays WRITING — and the job still ends SUCCEEDED with the output of
// an uninterrupted run, bit for bit. (Which kill lands inside a commit is
// chance here; coordinator_checkpoints_test cuts each commit point exactly.)
#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/catalog.h"
#include "checkpoint/manifest.h"
#include "common/job_state.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/worker/restart_testing.h"

namespace pshard::testing {
namespace {

constexpr int64_t kSteps = 1000;

v1::JobSpec MlpSpec(const std::string& output_dir) {
  return MlpJobSpec(
      {"mlp-coordinator-kill", {512, 512}, 64, 0.01, kSteps, 9, 0.003, 30, 1},
      output_dir);
}

TEST(CoordinatorKillCheckpointE2eTest, EveryCheckpointIsCompleteOrAbsent) {
  ClusterOptions options;
  options.workers = 2;
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));
  const absl::Time start = absl::Now();
  const v1::Job clean = RunToEnd(
      *cluster, MlpSpec(absl::StrCat(cluster->dir(), "/out-clean")), 2);
  printf("uninterrupted run: %.0f ms\n", absl::ToDoubleMilliseconds(absl::Now() - start));
  ASSERT_EQ(clean.state(), v1::SUCCEEDED) << clean.reason() << cluster->Logs();

  v1::JobSpec spec = MlpSpec(absl::StrCat(cluster->dir(), "/out-killed"));
  const std::string root = absl::StrCat(cluster->dir(), "/ckpt");
  spec.mutable_checkpoint()->set_dir(root);
  spec.mutable_checkpoint()->set_every_steps(10);
  spec.mutable_checkpoint()->set_keep_last(3);
  ASSERT_OK_AND_ASSIGN(const v1::Job submitted, cluster->Submit(spec));
  for (int64_t kill_at : {150, 400, 650}) {
    ASSERT_TRUE(WaitUntil(
        [&] {
          auto job = cluster->GetJob(submitted.id());
          return job.ok() && (IsTerminal(job->state()) ||
                              job->progress().step() >= kill_at);
        },
        absl::Seconds(60)))
        << cluster->Logs();
    ASSERT_OK_AND_ASSIGN(const v1::Job before, cluster->GetJob(submitted.id()));
    ASSERT_FALSE(IsTerminal(before.state()))
        << "ended before the kill at step " << kill_at << ": " << before.reason();
    ASSERT_OK(cluster->KillAndRestartCoordinator());
  }
  ASSERT_OK_AND_ASSIGN(const v1::Job job,
                       cluster->WaitForEnd(submitted.id(), absl::Seconds(120)));
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << cluster->Logs();
  EXPECT_TRUE(ReadFile(job.output_path()) == ReadFile(clean.output_path()))
      << "the job's parameters differ from the uninterrupted run's";

  int64_t newest_complete = -1;
  int settled = 0;
  int writing = 0;
  for (const v1::CheckpointRecord& c : job.checkpoints()) {
    settled += absl::StrContains(c.reason(), "coordinator restarted") ? 1 : 0;
    writing += c.state() == v1::CheckpointRecord::WRITING ? 1 : 0;
    EXPECT_NE(c.state(), v1::CheckpointRecord::WRITING) << c.DebugString();
    if (c.state() != v1::CheckpointRecord::COMPLETE) continue;
    newest_complete = std::max(newest_complete, c.step());
    EXPECT_OK(checkpoint::VerifyCheckpoint(c.path()).status()) << c.DebugString();
  }
  ASSERT_OK_AND_ASSIGN(std::vector<int64_t> on_disk,
                       checkpoint::ListCheckpointSteps(root));
  for (int64_t step : on_disk) {
    const std::string dir = checkpoint::StepDirectory(root, step);
    if (!checkpoint::ReadManifest(dir).ok()) continue;  // incomplete: never counts
    bool recorded_complete = false;
    for (const v1::CheckpointRecord& c : job.checkpoints()) {
      recorded_complete |= c.path() == dir &&
                           c.state() == v1::CheckpointRecord::COMPLETE;
    }
    EXPECT_TRUE(recorded_complete)
        << dir << " has a manifest but no COMPLETE record: " << job.DebugString();
  }
  // Once, with the processes' logs: where a shard's report went.
  EXPECT_EQ(writing, 0) << cluster->Logs();
  printf("%d checkpoint records, %d of them settled by a coordinator restart\n",
         job.checkpoints_size(), settled);
  ASSERT_OK_AND_ASSIGN(checkpoint::CompleteCheckpoint latest,
                       checkpoint::LatestCompleteCheckpoint(root));
  EXPECT_EQ(latest.manifest.step, newest_complete);
}

}  // namespace
}  // namespace pshard::testing
