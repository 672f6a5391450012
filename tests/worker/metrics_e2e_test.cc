// End to end: the Prometheus endpoints of the real coordinator and workers
// (--metrics_listen), scraped over loopback while a job runs and after it:
// jobs and workers by state, RPCs by method and code with their latency
// histograms, and the workers' steps, step times, bytes sent, optimizer
// state and checkpoint stalls.
#include <string>

#include "absl/strings/str_cat.h"
#include "common/job_state.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/metrics_scrape.h"
#include "tests/testing/subprocess.h"
#include "tests/worker/restart_testing.h"

namespace pshard::testing {
namespace {

constexpr int64_t kSteps = 300;

double Sample(const std::string& text, const std::string& series) {
  absl::StatusOr<double> value = SampleValue(text, series);
  EXPECT_OK(value) << text;
  return value.ok() ? *value : -1;
}

TEST(MetricsE2eTest, CoordinatorAndWorkersExposeTheJobTheyRun) {
  const std::string dir = MakeTempDir("metrics");
  ClusterOptions options;
  options.workers = 2;
  options.coordinator_flags = {
      "--metrics_listen=127.0.0.1:0",
      absl::StrCat("--metrics_port_file=", dir, "/coordinator.port")};
  options.worker_flags = {
      "--metrics_listen=127.0.0.1:0",
      absl::StrCat("--metrics_port_file=", dir, "/worker-{i}.port")};
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));
  ASSERT_OK_AND_ASSIGN(
      const int coordinator,
      WaitForPortFile(dir + "/coordinator.port", absl::Seconds(10)));
  int workers[2];
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(
        workers[i],
        WaitForPortFile(absl::StrCat(dir, "/worker-", i, ".port"),
                        absl::Seconds(10)));
  }

  ASSERT_OK_AND_ASSIGN(std::string text, ScrapeMetrics(coordinator));
  EXPECT_EQ(Sample(text, R"(pshard_workers{state="IDLE"})"), 2);
  EXPECT_EQ(Sample(text, R"(pshard_jobs{state="SUCCEEDED"})"), 0);
  EXPECT_LT(Sample(text, "pshard_worker_heartbeat_age_max_seconds"), 2);

  v1::JobSpec spec = MlpJobSpec(
      {"mlp-metrics", {256, 256}, 64, 0.01, kSteps, 5, 0.003, 30, 1},
      absl::StrCat(cluster->dir(), "/out"));
  spec.mutable_checkpoint()->set_dir(absl::StrCat(cluster->dir(), "/ckpt"));
  spec.mutable_checkpoint()->set_every_steps(100);
  ASSERT_OK_AND_ASSIGN(const v1::Job submitted, cluster->Submit(spec));

  // While it runs.
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto job = cluster->GetJob(submitted.id());
        return job.ok() && (IsTerminal(job->state()) ||
                            (job->state() == v1::RUNNING &&
                             job->progress().step() >= 10));
      },
      absl::Seconds(30)))
      << cluster->Logs();
  ASSERT_OK_AND_ASSIGN(text, ScrapeMetrics(coordinator));
  ASSERT_OK_AND_ASSIGN(std::string worker_text, ScrapeMetrics(workers[0]));
  ASSERT_OK_AND_ASSIGN(v1::Job after_scrape, cluster->GetJob(submitted.id()));
  if (after_scrape.state() == v1::RUNNING) {  // it ran through the scrapes
    EXPECT_EQ(Sample(text, R"(pshard_jobs{state="RUNNING"})"), 1);
    EXPECT_EQ(Sample(text, R"(pshard_workers{state="BUSY"})"), 2);
    EXPECT_GE(Sample(worker_text, "pshard_worker_steps_total"), 10);
  }

  ASSERT_OK_AND_ASSIGN(const v1::Job ended,
                       cluster->WaitForEnd(submitted.id(), absl::Seconds(60)));
  ASSERT_EQ(ended.state(), v1::SUCCEEDED) << ended.reason() << cluster->Logs();
  ASSERT_TRUE(cluster->WaitForIdle(2, absl::Seconds(10))) << cluster->Logs();

  ASSERT_OK_AND_ASSIGN(text, ScrapeMetrics(coordinator));
  EXPECT_EQ(Sample(text, R"(pshard_jobs{state="SUCCEEDED"})"), 1);
  EXPECT_EQ(Sample(text, R"(pshard_jobs{state="RUNNING"})"), 0);
  EXPECT_EQ(Sample(text, "pshard_job_queue_depth"), 0);
  EXPECT_EQ(Sample(text, R"(pshard_workers{state="IDLE"})"), 2);
  EXPECT_EQ(Sample(text, R"(pshard_rpc_total{code="OK",method="/pshard.v1.JobService/SubmitJob"})"),
            1);
  EXPECT_EQ(Sample(text, R"(pshard_rpc_duration_seconds_count{method="/pshard.v1.JobService/SubmitJob"})"),
            1);
  EXPECT_GE(Sample(text, R"(pshard_rpc_total{code="OK",method="/pshard.v1.WorkerControl/ReportCheckpoint"})"),
            4);  // 2 checkpoints x 2 ranks
  EXPECT_EQ(Sample(text, R"(pshard_rpc_total{code="OK",method="/pshard.v1.WorkerControl/RegisterWorker"})"),
            2);
  EXPECT_GT(Sample(text, R"(pshard_rpc_total{code="OK",method="/pshard.v1.WorkerControl/Heartbeat"})"),
            0);
  // The submit, the job's transitions and the checkpoints were written.
  EXPECT_GE(Sample(text, "pshard_state_commit_seconds_count"), 3);
  EXPECT_EQ(Sample(text, "pshard_state_commit_failures_total"), 0);

  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(worker_text, ScrapeMetrics(workers[i]));
    SCOPED_TRACE(absl::StrCat("worker ", i));
    EXPECT_EQ(Sample(worker_text, "pshard_worker_steps_total"), kSteps);
    EXPECT_EQ(Sample(worker_text, "pshard_worker_step_seconds_count"), kSteps);
    EXPECT_GT(Sample(worker_text, "pshard_worker_step_seconds_sum"), 0);
    // Every step waits for its broadcasts, for less than the step takes.
    EXPECT_EQ(Sample(worker_text, "pshard_worker_collective_wait_seconds_count"),
              kSteps);
    EXPECT_GT(Sample(worker_text, "pshard_worker_collective_wait_seconds_sum"), 0);
    EXPECT_LT(Sample(worker_text, "pshard_worker_collective_wait_seconds_sum"),
              Sample(worker_text, "pshard_worker_step_seconds_sum"));
    EXPECT_GT(Sample(worker_text, "pshard_worker_bytes_sent_total"), 0);
    EXPECT_GT(Sample(worker_text, "pshard_worker_optimizer_state_bytes"), 0);
    EXPECT_EQ(Sample(worker_text, "pshard_worker_checkpoint_stall_seconds_count"),
              2);  // steps 100 and 200 (never the last)
  }
}

}  // namespace
}  // namespace pshard::testing
