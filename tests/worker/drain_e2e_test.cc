// End to end, a worker's own drain (the Kubernetes preStop hook,
// `pshard-worker --drain_and_wait --control_dir=D`, docs/deploy.md "Stopping
// a worker") with the real binaries on loopback: an idle worker is drained
// at once; a busy one only once its job has ended, the coordinator showing
// it DRAINING and giving it nothing new meanwhile; a checkpointing job's
// worker once the job has committed its next checkpoint, after which
// stopping the worker restarts the job from that checkpoint.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_state.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"
#include "tests/worker/restart_testing.h"

namespace pshard::testing {
namespace {

using ::testing::HasSubstr;

class DrainE2eTest : public ::testing::Test {
 protected:
  void Start(int workers) {
    control_ = MakeTempDir("drain-control");
    ClusterOptions options;
    options.workers = workers;
    options.worker_flags = {absl::StrCat("--control_dir=", control_, "/{i}")};
    ASSERT_OK_AND_ASSIGN(cluster_, Cluster::Start(options));
  }

  // What the preStop hook runs, for worker i.
  std::unique_ptr<Subprocess> StartDrain(int i, absl::Duration timeout) {
    absl::StatusOr<std::unique_ptr<Subprocess>> drain = Subprocess::Start(
        {RunfilePath("worker/pshard-worker"), "--drain_and_wait",
         absl::StrCat("--control_dir=", control_, "/", i),
         absl::StrCat("--drain_timeout=", absl::FormatDuration(timeout))},
        {}, absl::StrCat(cluster_->dir(), "/drain", i, ".log"));
    EXPECT_OK(drain.status());
    return drain.ok() ? *std::move(drain) : nullptr;
  }

  v1::WorkerInfo WorkerNamed(const std::string& name) {
    absl::StatusOr<std::vector<v1::WorkerInfo>> workers =
        cluster_->Workers(false);
    if (workers.ok()) {
      for (const v1::WorkerInfo& w : *workers) {
        if (w.name() == name) return w;
      }
    }
    return v1::WorkerInfo();
  }
  v1::WorkerState StateOf(const std::string& name) {
    return WorkerNamed(name).state();
  }

  static int ExitCode(int wait_status) {
    return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status)
                                  : 128 + WTERMSIG(wait_status);
  }

  // A program job whose ranks run until `release` exists.
  static v1::JobSpec HeldProgram(int world_size, const std::string& release) {
    v1::JobSpec spec;
    spec.set_name("held");
    spec.set_world_size(world_size);
    spec.mutable_program()->add_argv("/bin/sh");
    spec.mutable_program()->add_argv("-c");
    spec.mutable_program()->add_argv(
        absl::StrCat("while [ ! -e '", release, "' ]; do sleep 0.05; done"));
    return spec;
  }

  static void Touch(const std::string& path) { std::ofstream(path).close(); }

  std::string control_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(DrainE2eTest, AnIdleWorkerIsDrainedAtOnceAndGetsNoNewJob) {
  Start(2);
  std::unique_ptr<Subprocess> drain = StartDrain(0, absl::Minutes(1));
  ASSERT_NE(drain, nullptr);
  ASSERT_OK_AND_ASSIGN(const int status, drain->Wait(absl::Seconds(30)));
  EXPECT_EQ(ExitCode(status), 0) << cluster_->Logs();
  EXPECT_TRUE(WaitUntil([&] { return StateOf("worker-0") == v1::DRAINING; },
                        absl::Seconds(10)));
  EXPECT_TRUE(cluster_->worker(0).running())
      << "a drained worker waits for the signal that follows the hook";

  // Two one-rank jobs both run on the other worker, one after the other.
  const std::string release = absl::StrCat(cluster_->dir(), "/release");
  Touch(release);
  for (int j = 0; j < 2; ++j) {
    ASSERT_OK_AND_ASSIGN(v1::Job job, cluster_->Submit(HeldProgram(1, release)));
    ASSERT_OK_AND_ASSIGN(v1::Job ended,
                         cluster_->WaitForEnd(job.id(), absl::Seconds(60)));
    ASSERT_EQ(ended.state(), v1::SUCCEEDED) << ended.reason();
    ASSERT_EQ(ended.members_size(), 1);
    EXPECT_EQ(ended.members(0).worker_id(), WorkerNamed("worker-1").id());
  }

  // Then Kubernetes' SIGTERM: the worker exits cleanly.
  ASSERT_OK(cluster_->worker(0).Signal(SIGTERM));
  ASSERT_OK_AND_ASSIGN(const int worker_status,
                       cluster_->worker(0).Wait(absl::Seconds(30)));
  EXPECT_EQ(ExitCode(worker_status), 0);
}

TEST_F(DrainE2eTest, ABusyWorkerIsDrainedOnceItsJobHasEnded) {
  Start(2);
  const std::string release = absl::StrCat(cluster_->dir(), "/release");
  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster_->Submit(HeldProgram(2, release)));
  // Both ranks' programs run (a program that never opens a pshard session
  // keeps its job STARTING: the workers' statuses say they run it).
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (int i = 0; i < 2; ++i) {
          absl::StatusOr<v1::GetWorkerStatusResponse> status =
              cluster_->WorkerStatus(i);
          if (!status.ok() || status->job_id() != job.id()) return false;
        }
        return true;
      },
      absl::Seconds(30)))
      << cluster_->Logs();

  std::unique_ptr<Subprocess> drain = StartDrain(0, absl::Minutes(2));
  ASSERT_NE(drain, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return StateOf("worker-0") == v1::DRAINING; },
                        absl::Seconds(10)))
      << cluster_->Logs();
  // Its job goes on, and so does the hook: the job has not ended, and it
  // has no checkpoint to restart from.
  ASSERT_OK_AND_ASSIGN(v1::Job running, cluster_->GetJob(job.id()));
  EXPECT_FALSE(IsTerminal(running.state()));
  EXPECT_FALSE(drain->Poll()) << "the hook returned while the job still ran";
  // A new 2-rank job cannot start: one of the two workers is draining.
  ASSERT_OK_AND_ASSIGN(v1::Job next, cluster_->Submit(HeldProgram(2, release)));

  Touch(release);
  ASSERT_OK_AND_ASSIGN(v1::Job ended,
                       cluster_->WaitForEnd(job.id(), absl::Seconds(60)));
  EXPECT_EQ(ended.state(), v1::SUCCEEDED) << ended.reason();
  ASSERT_OK_AND_ASSIGN(const int status, drain->Wait(absl::Seconds(30)));
  EXPECT_EQ(ExitCode(status), 0) << cluster_->Logs();
  EXPECT_EQ(StateOf("worker-0"), v1::DRAINING);
  ASSERT_OK_AND_ASSIGN(v1::Job waiting, cluster_->GetJob(next.id()));
  EXPECT_EQ(waiting.state(), v1::QUEUED);
  EXPECT_THAT(waiting.reason(),
              HasSubstr("needs 2 workers; 1 is registered and not draining"));
  ASSERT_OK(cluster_->Cancel(next.id()).status());
}

TEST_F(DrainE2eTest, ACheckpointingJobsWorkerIsDrainedAtTheNextCheckpoint) {
  Start(3);  // two ranks and a spare
  v1::JobSpec spec = MlpJobSpec(
      {"drained", {64}, 32, 0, 100000000, 3, 0.003, 20, 10},
      absl::StrCat(cluster_->dir(), "/out"));
  spec.set_max_restarts(1);
  spec.mutable_checkpoint()->set_dir(absl::StrCat(cluster_->dir(), "/ckpt"));
  spec.mutable_checkpoint()->set_every_steps(50);
  spec.mutable_checkpoint()->set_keep_last(2);
  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster_->Submit(spec));
  // Drain once the job has a complete checkpoint: the hook waits for a
  // newer one.
  int64_t before = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        absl::StatusOr<v1::Job> now = cluster_->GetJob(job.id());
        if (!now.ok() || !HasCompleteCheckpoint(*now)) return false;
        job = *now;
        return true;
      },
      absl::Seconds(60)))
      << cluster_->Logs();
  for (const v1::CheckpointRecord& r : job.checkpoints()) {
    if (r.state() == v1::CheckpointRecord::COMPLETE) before = std::max(before, r.step());
  }
  const int drained = WorkerIndexOfRank(*cluster_, job, 0);
  ASSERT_GE(drained, 0);
  std::unique_ptr<Subprocess> drain = StartDrain(drained, absl::Minutes(2));
  ASSERT_NE(drain, nullptr);
  ASSERT_OK_AND_ASSIGN(const int status, drain->Wait(absl::Seconds(90)));
  EXPECT_EQ(ExitCode(status), 0) << cluster_->Logs();
  ASSERT_OK_AND_ASSIGN(job, cluster_->GetJob(job.id()));
  EXPECT_EQ(job.state(), v1::RUNNING) << "the job goes on until the signal";
  int64_t after = 0;
  for (const v1::CheckpointRecord& r : job.checkpoints()) {
    if (r.state() == v1::CheckpointRecord::COMPLETE) after = std::max(after, r.step());
  }
  EXPECT_GT(after, before);

  // Kubernetes' SIGTERM: the job loses the rank and restarts from a
  // checkpoint at least as new as the one the drain waited for, on the
  // survivor and the spare.
  ASSERT_OK(cluster_->worker(drained).Signal(SIGTERM));
  ASSERT_OK(cluster_->worker(drained).Wait(absl::Seconds(30)).status());
  ASSERT_TRUE(WaitUntil(
      [&] {
        absl::StatusOr<v1::Job> now = cluster_->GetJob(job.id());
        if (!now.ok() || now->epoch() < 2 || now->state() != v1::RUNNING) {
          return false;
        }
        job = *now;
        return true;
      },
      absl::Seconds(60)))
      << cluster_->Logs();
  EXPECT_GE(job.resumed_from().step(), after);
  const std::string drained_id =
      WorkerNamed(absl::StrCat("worker-", drained)).id();
  for (const v1::JobMember& m : job.members()) {
    EXPECT_NE(m.worker_id(), drained_id);
  }
  ASSERT_OK(cluster_->Cancel(job.id()).status());
}

}  // namespace
}  // namespace pshard::testing
