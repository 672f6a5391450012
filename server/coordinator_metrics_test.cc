// TimedStateStore: every commit of the store it wraps is timed, a refused
// one is also counted, and the outcome passes through unchanged.
#include "server/coordinator_metrics.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "common/status_matchers.h"
#include "coordinator/fault_state_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"

namespace pshard::server {
namespace {

using ::testing::HasSubstr;

coordinator::StateStore::Batch OneJob(int64_t num) {
  coordinator::StateStore::Batch batch;
  v1::Job job;
  job.set_id("job-" + std::to_string(num));
  batch.jobs.emplace_back(num, job);
  return batch;
}

// The one sample of family `name` (a histogram's count, a counter's value).
double Sample(prometheus::Registry& registry, const std::string& name) {
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != name || family.metric.size() != 1) continue;
    const prometheus::ClientMetric& metric = family.metric[0];
    return family.type == prometheus::MetricType::Histogram
               ? static_cast<double>(metric.histogram.sample_count)
               : metric.counter.value;
  }
  ADD_FAILURE() << "no single-sample family " << name;
  return -1;
}

TEST(TimedStateStoreTest, TimesEveryCommitAndCountsTheRefusedOnes) {
  ASSERT_OK_AND_ASSIGN(auto memory, coordinator::StateStore::Open(":memory:"));
  auto faults = std::make_unique<coordinator::FaultStateStore>(std::move(memory));
  coordinator::FaultStateStore* const fault = faults.get();
  prometheus::Registry registry;
  TimedStateStore store(std::move(faults), registry);
  EXPECT_EQ(Sample(registry, "pshard_state_commit_seconds"), 0);

  ASSERT_OK(store.Commit(OneJob(1)));
  EXPECT_EQ(Sample(registry, "pshard_state_commit_seconds"), 1);
  EXPECT_EQ(Sample(registry, "pshard_state_commit_failures_total"), 0);

  fault->FailCommits(1, absl::InternalError("database or disk is full"));
  const absl::Status refused = store.Commit(OneJob(2));
  EXPECT_EQ(refused.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(refused.message(), HasSubstr("database or disk is full"));
  EXPECT_EQ(Sample(registry, "pshard_state_commit_seconds"), 2);
  EXPECT_EQ(Sample(registry, "pshard_state_commit_failures_total"), 1);

  // What was committed is what Load returns: job 1 only.
  ASSERT_OK_AND_ASSIGN(const coordinator::StateStore::Snapshot snapshot,
                       store.Load());
  ASSERT_EQ(snapshot.jobs.size(), 1u);
  EXPECT_EQ(snapshot.jobs.begin()->second.id(), "job-1");
  ASSERT_OK(store.Probe());
}

}  // namespace
}  // namespace pshard::server
