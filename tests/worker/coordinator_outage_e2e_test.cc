// End to end: a job whose ranks all finish while the coordinator is down
// (kill -9) is SUCCEEDED once a new coordinator starts on the state file —
// in its first epoch, with its output — because each worker keeps its
// rank's result and retries it until the coordinator takes it, and recovery
// re-runs no rank whose result comes.
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/worker/restart_testing.h"

namespace pshard::testing {
namespace {

constexpr int64_t kSteps = 300;

v1::JobSpec MlpSpec(const std::string& output_dir) {
  return MlpJobSpec(
      {"mlp-outage", {64}, 32, 0.01, kSteps, 12, 0.003, 30},
      output_dir);
}

TEST(CoordinatorOutageE2eTest, AJobThatEndsWhileTheCoordinatorIsDownSucceeds) {
  ClusterOptions options;
  options.workers = 2;
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));
  const v1::Job clean = RunToEnd(
      *cluster, MlpSpec(absl::StrCat(cluster->dir(), "/out-clean")), 2);
  ASSERT_EQ(clean.state(), v1::SUCCEEDED) << clean.reason() << cluster->Logs();

  ASSERT_OK_AND_ASSIGN(
      const v1::Job submitted,
      cluster->Submit(MlpSpec(absl::StrCat(cluster->dir(), "/out-outage"))));
  int64_t running_epoch = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto job = cluster->GetJob(submitted.id());
        running_epoch = job.ok() ? job->epoch() : 0;
        // RUNNING alone is not enough: GetJob can show it before the
        // commit that releases the assignment replies, and ranks killed
        // off before they have the assignment never train. A reported step
        // means both ranks had it.
        return job.ok() && job->state() == v1::RUNNING &&
               job->progress().step() >= 1;
      },
      absl::Seconds(30)))
      << cluster->Logs();
  ASSERT_OK(cluster->KillCoordinator());
  // Both ranks train on and finish with no coordinator: each worker's own
  // status shows its rank at the last step, holding its result.
  // (The same work as the clean run, on a machine other tests load too.)
  std::string last_seen;
  ASSERT_TRUE(WaitUntil(
      [&] {
        last_seen.clear();
        bool all_done = true;
        for (int i = 0; i < cluster->num_workers(); ++i) {
          auto status = cluster->WorkerStatus(i);
          absl::StrAppend(&last_seen, "worker ", i, ": ",
                          status.ok() ? status->ShortDebugString()
                                      : status.status().ToString(),
                          "\n");
          all_done = all_done && status.ok() &&
                     status->job_id() == submitted.id() &&
                     status->step() == kSteps;
        }
        return all_done;
      },
      absl::Seconds(120)))
      << last_seen << cluster->Logs();

  ASSERT_OK(cluster->RestartCoordinator());
  ASSERT_OK_AND_ASSIGN(const v1::Job job,
                       cluster->WaitForEnd(submitted.id(), absl::Seconds(60)));
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << cluster->Logs();
  EXPECT_EQ(job.epoch(), running_epoch) << "a second epoch ran";
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_EQ(job.progress().step(), kSteps);
  EXPECT_TRUE(ReadFile(job.output_path()) == ReadFile(clean.output_path()))
      << "the output differs from an uninterrupted run's";
  EXPECT_TRUE(RestartEvents(*cluster, job.id()).empty());
}

}  // namespace
}  // namespace pshard::testing
