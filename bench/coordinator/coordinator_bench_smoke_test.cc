// CI smoke run of the coordinator benchmark at a tiny size: the whole
// pipeline (register, heartbeats, one job through layout reports, parked
// GetAssignment, results) must work and report sane numbers, in plaintext,
// over mutual TLS, and with access control (tokens) on.
#include "bench/coordinator/coordinator_bench.h"

#include <string>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace pshard {
namespace bench {
namespace {

BenchOptions Tiny(bool tls, bool tokens) {
  BenchOptions options;
  options.workers = 32;
  options.world_size = 24;
  options.buckets = 50;
  options.steady = absl::Seconds(2);
  options.status_qps = 20;
  options.work_dir = testing::MakeTempDir("bench_smoke");
  options.tls = tls;
  options.tokens = tokens;
  return options;
}

void TinyRun(bool tls, bool tokens = false) {
  ASSERT_OK_AND_ASSIGN(BenchReport report,
                       RunCoordinatorBenchmark(Tiny(tls, tokens)));
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
  EXPECT_EQ(report.tokens, tokens ? 33 : 0);
  EXPECT_EQ(report.refused_calls, 0);
}

TEST(CoordinatorBenchSmokeTest, TinyRun) { TinyRun(/*tls=*/false); }

// The same over mutual TLS (--tls): the benchmark's TLS mode works.
TEST(CoordinatorBenchSmokeTest, TinyRunOverMutualTls) { TinyRun(/*tls=*/true); }

// With access control (--tokens): every call carries its own worker's (or
// the bench's admin) token, over mutual TLS and over plaintext.
TEST(CoordinatorBenchSmokeTest, TinyRunOverMutualTlsWithTokens) {
  TinyRun(/*tls=*/true, /*tokens=*/true);
}

TEST(CoordinatorBenchSmokeTest, TinyRunWithTokens) {
  TinyRun(/*tls=*/false, /*tokens=*/true);
}

// The full-mesh rendezvous both ways, each rank calling with its own token
// (so the coordinator checks that the caller holds the rank it reads for):
// 24 records put, then read with 24 * 23 KvGets or with 24 KvGetMany.
TEST(CoordinatorBenchSmokeTest, MeshRendezvousByEachKeyAndByManyKeys) {
  for (const auto mode : {BenchOptions::Rendezvous::kGetEach,
                          BenchOptions::Rendezvous::kGetMany}) {
    BenchOptions options = Tiny(/*tls=*/false, /*tokens=*/true);
    options.rendezvous = mode;
    ASSERT_OK_AND_ASSIGN(BenchReport report, RunCoordinatorBenchmark(options));
    std::printf("%s", report.ToString().c_str());
    EXPECT_EQ(report.job_state, "SUCCEEDED");
    const auto& calls = report.rpcs_by_phase["job/1b_rendezvous"];
    EXPECT_EQ(calls.at("KvPut").count, 24);
    EXPECT_EQ(calls.at("KvPut").errors, 0);
    if (mode == BenchOptions::Rendezvous::kGetEach) {
      EXPECT_EQ(calls.at("KvGet").count, 24 * 23);
      EXPECT_EQ(calls.count("KvGetMany"), 0);
    } else {
      EXPECT_EQ(calls.at("KvGetMany").count, 24);
      EXPECT_EQ(calls.count("KvGet"), 0);
    }
    // Each record is 128 + 2 * 23 bytes, read by 23 peers.
    EXPECT_EQ(report.rendezvous_bytes_read, 24 * 23 * (128 + 2 * 23));
    EXPECT_EQ(report.rendezvous_cut_answers, 0);
    EXPECT_EQ(report.refused_calls, 0);
  }
}

// A refused call fails the run: workers 0 and 1 present each other's
// tokens, so the coordinator refuses both registrations.
TEST(CoordinatorBenchSmokeTest, RefusedCallsFailTheRun) {
  BenchOptions options = Tiny(/*tls=*/true, /*tokens=*/true);
  options.swap_two_tokens = true;
  absl::StatusOr<BenchReport> report = RunCoordinatorBenchmark(options);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(report.status().message().find("RegisterWorker 2"),
            std::string::npos)
      << report.status();
}

}  // namespace
}  // namespace bench
}  // namespace pshard
