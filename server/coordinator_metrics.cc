#include "server/coordinator_metrics.h"

#include <map>
#include <string>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/rpc_metrics.h"
#include "pshard/v1/cluster.pb.h"
#include "pshard/v1/job.pb.h"

namespace pshard {
namespace server {
namespace {

prometheus::MetricFamily Gauge(std::string name, std::string help) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = prometheus::MetricType::Gauge;
  return family;
}

void AddSample(prometheus::MetricFamily& family, double value,
               std::vector<prometheus::ClientMetric::Label> labels = {}) {
  prometheus::ClientMetric& metric = family.metric.emplace_back();
  metric.label = std::move(labels);
  metric.gauge.value = value;
}

// One sample per named value of an enum (UNSPECIFIED left out), so that a
// dashboard's series exist before the first job or worker: its count in
// `counts`, 0 when absent.
template <typename State, typename IsValid, typename Name>
prometheus::MetricFamily ByState(std::string name, std::string help,
                                 const std::map<State, int64_t>& counts,
                                 int min, int max, IsValid is_valid,
                                 Name state_name) {
  prometheus::MetricFamily family = Gauge(std::move(name), std::move(help));
  for (int s = min + 1; s <= max; ++s) {  // min is UNSPECIFIED (0)
    if (!is_valid(s)) continue;
    const auto state = static_cast<State>(s);
    auto it = counts.find(state);
    AddSample(family, it == counts.end() ? 0 : it->second,
              {{"state", state_name(state)}});
  }
  return family;
}

}  // namespace

std::vector<prometheus::MetricFamily> CoordinatorMetrics::Collect() const {
  const coordinator::CoordinatorStats stats = coordinator_->Stats();
  std::vector<prometheus::MetricFamily> out;

  out.push_back(ByState("pshard_jobs", "Jobs by state", stats.jobs_by_state,
                        v1::JobState_MIN, v1::JobState_MAX, v1::JobState_IsValid,
                        [](v1::JobState s) { return v1::JobState_Name(s); }));

  prometheus::MetricFamily depth =
      Gauge("pshard_job_queue_depth", "Jobs waiting for workers (QUEUED)");
  auto queued = stats.jobs_by_state.find(v1::QUEUED);
  AddSample(depth, queued == stats.jobs_by_state.end() ? 0 : queued->second);
  out.push_back(std::move(depth));

  prometheus::MetricFamily wait =
      Gauge("pshard_job_queue_oldest_wait_seconds",
            "Time since the oldest QUEUED job was submitted (0: none queued)");
  AddSample(wait, absl::ToDoubleSeconds(stats.oldest_queued_wait));
  out.push_back(std::move(wait));

  out.push_back(ByState("pshard_workers", "Workers by state",
                        stats.workers_by_state, v1::WorkerState_MIN,
                        v1::WorkerState_MAX, v1::WorkerState_IsValid,
                        [](v1::WorkerState s) { return v1::WorkerState_Name(s); }));

  prometheus::MetricFamily age =
      Gauge("pshard_worker_heartbeat_age_max_seconds",
            "The longest time since a live worker was last heard from");
  AddSample(age, absl::ToDoubleSeconds(stats.max_heartbeat_age));
  out.push_back(std::move(age));
  return out;
}

TimedStateStore::TimedStateStore(std::unique_ptr<coordinator::StateStore> store,
                                 prometheus::Registry& registry)
    : store_(std::move(store)),
      commit_seconds_(prometheus::BuildHistogram()
                          .Name("pshard_state_commit_seconds")
                          .Help("Time of each commit to the coordinator's "
                                "state store (one commit holds a group of "
                                "changes)")
                          .Register(registry)
                          .Add({}, LatencyBuckets())),
      commit_failures_(prometheus::BuildCounter()
                           .Name("pshard_state_commit_failures_total")
                           .Help("Commits the state store refused (disk full, "
                                 "I/O error)")
                           .Register(registry)
                           .Add({})) {}

absl::Status TimedStateStore::Commit(const Batch& batch) {
  const absl::Time start = absl::Now();
  absl::Status status = store_->Commit(batch);
  commit_seconds_.Observe(absl::ToDoubleSeconds(absl::Now() - start));
  if (!status.ok()) commit_failures_.Increment();
  return status;
}

}  // namespace server
}  // namespace pshard
