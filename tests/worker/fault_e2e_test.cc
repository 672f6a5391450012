// End to end, faults: a worker killed mid-job fails the job within the
// worker timeout and the survivors return to the pool (and can run the next
// job); a killed worker is LOST, and its job failed naming it, within
// seconds even with a minute's worker timeout (its Attach stream closes); a
// cancelled job stops within about a heartbeat; SIGTERM ends a worker
// cleanly. Nothing may hang: every wait below has a deadline.
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"

namespace pshard::testing {
namespace {

v1::JobSpec LongJob(int world) {
  v1::JobSpec spec;
  spec.set_name("long");
  spec.set_world_size(world);
  spec.mutable_synthetic()->set_num_parameters(200000);
  spec.mutable_synthetic()->set_tensor_numel(20000);
  spec.set_bucket_cap_mb(0.2);
  spec.set_steps(100000000);
  spec.set_progress_every(1);
  // Long on purpose: failure must come from the worker timeout or the dead
  // peer's closed connections, not from a collective timing out.
  spec.set_collective_timeout_seconds(60);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
  return spec;
}

v1::JobSpec ShortJob(int world) {
  v1::JobSpec spec = LongJob(world);
  spec.set_name("short");
  spec.set_steps(5);
  return spec;
}

bool WaitForStep(Cluster& cluster, const std::string& id, int64_t step) {
  return WaitUntil(
      [&] {
        auto job = cluster.GetJob(id);
        return job.ok() && job->state() == v1::RUNNING &&
               job->progress().step() >= step;
      },
      absl::Seconds(30));
}

TEST(FaultE2eTest, KilledWorkerFailsJobAndSurvivorsReturn) {
  ClusterOptions options;
  options.workers = 3;
  options.worker_timeout = absl::Seconds(2);
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));
  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster->Submit(LongJob(3)));
  ASSERT_TRUE(WaitForStep(*cluster, job.id(), 3)) << cluster->Logs();

  // While it runs, every worker reports what it owns.
  int64_t total_state = 0;
  int owners = 0;
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(auto status, cluster->WorkerStatus(i));
    EXPECT_EQ(status.state(), v1::BUSY);
    EXPECT_EQ(status.job_id(), job.id());
    total_state += status.optimizer_state_bytes();
    owners += status.owned_shards_size() > 0;
  }
  EXPECT_EQ(total_state, 200000 * 8);  // Adam: 2 floats per parameter, once
  EXPECT_GE(owners, 2);

  const absl::Time killed = absl::Now();
  ASSERT_OK(cluster->worker(2).Signal(SIGKILL));
  ASSERT_OK_AND_ASSIGN(v1::Job ended,
                       cluster->WaitForEnd(job.id(), absl::Seconds(15)));
  EXPECT_EQ(ended.state(), v1::FAILED);
  EXPECT_LT(absl::Now() - killed, options.worker_timeout + absl::Seconds(3))
      << "job failed only after " << absl::Now() - killed;
  // The survivors are idle again and can run the next job.
  ASSERT_TRUE(cluster->WaitForIdle(2, absl::Seconds(10))) << cluster->Logs();
  ASSERT_OK_AND_ASSIGN(v1::Job next, cluster->Submit(ShortJob(2)));
  ASSERT_OK_AND_ASSIGN(v1::Job done,
                       cluster->WaitForEnd(next.id(), absl::Seconds(30)));
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << cluster->Logs();
}

// Fast loss detection: with a worker timeout of a minute, only the killed
// worker's Attach stream (its connection closing) can explain a loss seen
// within seconds.
ClusterOptions TwoWorkersLongTimeout() {
  ClusterOptions options;
  options.workers = 2;
  options.worker_timeout = absl::Seconds(60);
  return options;
}

absl::StatusOr<v1::WorkerInfo> WorkerNamed(Cluster& cluster,
                                           const std::string& name) {
  absl::StatusOr<std::vector<v1::WorkerInfo>> workers =
      cluster.Workers(/*include_lost=*/true);
  if (!workers.ok()) return workers.status();
  for (const v1::WorkerInfo& w : *workers) {
    if (w.name() == name) return w;
  }
  return absl::NotFoundError(absl::StrCat("no worker named ", name));
}

TEST(FaultE2eTest, KilledIdleWorkerIsLostAtOnce) {
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(TwoWorkersLongTimeout()));
  // An agent attaches the moment it has registered; a job run to the end
  // first leaves seconds for that (no API shows an attachment).
  ASSERT_OK_AND_ASSIGN(v1::Job warmup, cluster->Submit(ShortJob(2)));
  ASSERT_OK_AND_ASSIGN(v1::Job done,
                       cluster->WaitForEnd(warmup.id(), absl::Seconds(30)));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << cluster->Logs();
  ASSERT_TRUE(cluster->WaitForIdle(2, absl::Seconds(10))) << cluster->Logs();
  const absl::Time killed = absl::Now();
  ASSERT_OK(cluster->worker(1).Signal(SIGKILL));
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto w = WorkerNamed(*cluster, "worker-1");
        return w.ok() && w->state() == v1::LOST;
      },
      absl::Seconds(20)))
      << cluster->Logs();
  const absl::Duration detection = absl::Now() - killed;
  printf("kill -9 of an idle worker to LOST: %.0f ms\n",
         absl::ToDoubleMilliseconds(detection));
  EXPECT_LT(detection, absl::Seconds(10));
  ASSERT_OK_AND_ASSIGN(v1::WorkerInfo survivor,
                       WorkerNamed(*cluster, "worker-0"));
  EXPECT_EQ(survivor.state(), v1::IDLE);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::WorkerInfo> live,
                       cluster->Workers(/*include_lost=*/false));
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].name(), "worker-0");
}

TEST(FaultE2eTest, KilledBusyWorkerFailsItsJobPromptlyNamingIt) {
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(TwoWorkersLongTimeout()));
  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster->Submit(LongJob(2)));
  ASSERT_TRUE(WaitForStep(*cluster, job.id(), 3)) << cluster->Logs();
  ASSERT_OK_AND_ASSIGN(v1::WorkerInfo victim,
                       WorkerNamed(*cluster, "worker-1"));
  const absl::Time killed = absl::Now();
  ASSERT_OK(cluster->worker(1).Signal(SIGKILL));
  ASSERT_OK_AND_ASSIGN(v1::Job ended,
                       cluster->WaitForEnd(job.id(), absl::Seconds(20)));
  const absl::Duration to_failed = absl::Now() - killed;
  printf("kill -9 of a busy worker to its job FAILED: %.0f ms\n",
         absl::ToDoubleMilliseconds(to_failed));
  EXPECT_EQ(ended.state(), v1::FAILED);
  EXPECT_LT(to_failed, absl::Seconds(10));
  // Named first, whether the loss came before the survivor's own failure or
  // within its blame window.
  EXPECT_THAT(ended.reason(), ::testing::AnyOf(
                                  ::testing::StartsWith(absl::StrCat(
                                      "worker ", victim.id(), " (rank ")),
                                  ::testing::StartsWith("rank ")));
  EXPECT_THAT(ended.reason(), ::testing::HasSubstr(victim.id()));
  EXPECT_THAT(ended.reason(),
              ::testing::HasSubstr(
                  "lost: its connection to the coordinator closed"))
      << ended.reason();
  ASSERT_OK_AND_ASSIGN(v1::WorkerInfo lost, WorkerNamed(*cluster, "worker-1"));
  EXPECT_EQ(lost.state(), v1::LOST);
}

TEST(FaultE2eTest, CancelStopsWorkersWithinAHeartbeat) {
  ClusterOptions options;
  options.workers = 2;
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));
  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster->Submit(LongJob(2)));
  ASSERT_TRUE(WaitForStep(*cluster, job.id(), 2)) << cluster->Logs();
  const absl::Time cancelled = absl::Now();
  ASSERT_OK(cluster->Cancel(job.id()).status());
  // Both workers abort and report IDLE themselves.
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (int i = 0; i < 2; ++i) {
          auto status = cluster->WorkerStatus(i);
          if (!status.ok() || status->state() != v1::IDLE) return false;
        }
        return true;
      },
      absl::Seconds(10)))
      << cluster->Logs();
  // A heartbeat is 100 ms here; the bound leaves room for a loaded CI host.
  EXPECT_LT(absl::Now() - cancelled, absl::Seconds(4));
  ASSERT_OK_AND_ASSIGN(v1::Job ended, cluster->GetJob(job.id()));
  EXPECT_EQ(ended.state(), v1::CANCELLED);
}

TEST(FaultE2eTest, SigtermAbortsJobAndExitsZero) {
  ClusterOptions options;
  options.workers = 2;
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));
  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster->Submit(LongJob(2)));
  ASSERT_TRUE(WaitForStep(*cluster, job.id(), 2)) << cluster->Logs();
  ASSERT_OK(cluster->worker(1).Signal(SIGTERM));
  ASSERT_OK_AND_ASSIGN(int wait_status,
                       cluster->worker(1).Wait(absl::Seconds(10)));
  ASSERT_TRUE(WIFEXITED(wait_status))
      << "killed by signal " << WTERMSIG(wait_status) << "\n"
      << cluster->Logs();
  EXPECT_EQ(WEXITSTATUS(wait_status), 0);
  ASSERT_OK_AND_ASSIGN(v1::Job ended,
                       cluster->WaitForEnd(job.id(), absl::Seconds(15)));
  EXPECT_EQ(ended.state(), v1::FAILED);
  ASSERT_TRUE(cluster->WaitForIdle(1, absl::Seconds(10)));
}

}  // namespace
}  // namespace pshard::testing
