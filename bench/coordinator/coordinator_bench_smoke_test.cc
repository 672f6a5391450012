// CI smoke run of the coordinator benchmark at a tiny size: the whole
// pipeline (register, heartbeats, one job through layout reports, parked
// GetAssignment, results) must work and report sane numbers.
#include "bench/coordinator/coordinator_bench.h"

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace pshard {
namespace bench {
namespace {

void TinyRun(bool tls) {
  BenchOptions options;
  options.workers = 32;
  options.world_size = 24;
  options.buckets = 50;
  options.steady = absl::Seconds(2);
  options.status_qps = 20;
  options.work_dir = testing::MakeTempDir("bench_smoke");
  options.tls = tls;
  ASSERT_OK_AND_ASSIGN(BenchReport report, RunCoordinatorBenchmark(options));
  std::printf("%s", report.ToString().c_str());
  EXPECT_EQ(report.job_state, "SUCCEEDED");
  EXPECT_EQ(report.rpcs["RegisterWorker"].count, 32);
  EXPECT_EQ(report.rpcs["ReportBuckets"].count, 24);
  EXPECT_EQ(report.rpcs["ReportBuckets"].errors, 0);
  EXPECT_EQ(report.rpcs["Heartbeat"].errors, 0);
  EXPECT_GT(report.rpcs["Heartbeat"].count, 32);
  EXPECT_GT(report.rpcs["ListWorkers"].count, 0);
  EXPECT_GE(report.assignment_all_ms, report.assignment_first_ms);
  EXPECT_GT(report.imbalance, 0.99);
  EXPECT_GT(report.peak_rss_mb, 1);
}

TEST(CoordinatorBenchSmokeTest, TinyRun) { TinyRun(/*tls=*/false); }

// The same over mutual TLS (--tls): the benchmark's TLS mode works.
TEST(CoordinatorBenchSmokeTest, TinyRunOverMutualTls) { TinyRun(/*tls=*/true); }

}  // namespace
}  // namespace bench
}  // namespace pshard
