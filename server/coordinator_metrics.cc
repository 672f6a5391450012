#include "server/coordinator_metrics.h"

#include <string>

#include "absl/time/time.h"
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

}  // namespace

std::vector<prometheus::MetricFamily> CoordinatorMetrics::Collect() const {
  const coordinator::CoordinatorStats stats = coordinator_->Stats();
  std::vector<prometheus::MetricFamily> out;

  prometheus::MetricFamily jobs = Gauge("pshard_jobs", "Jobs by state");
  // Every state, so that a dashboard's series exist before the first job.
  for (int s = v1::JobState_MIN; s <= v1::JobState_MAX; ++s) {
    if (!v1::JobState_IsValid(s) || s == v1::JOB_STATE_UNSPECIFIED) continue;
    const auto state = static_cast<v1::JobState>(s);
    auto it = stats.jobs_by_state.find(state);
    AddSample(jobs, it == stats.jobs_by_state.end() ? 0 : it->second,
              {{"state", v1::JobState_Name(state)}});
  }
  out.push_back(std::move(jobs));

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

  prometheus::MetricFamily workers = Gauge("pshard_workers", "Workers by state");
  for (int s = v1::WorkerState_MIN; s <= v1::WorkerState_MAX; ++s) {
    if (!v1::WorkerState_IsValid(s) || s == v1::WORKER_STATE_UNSPECIFIED) {
      continue;
    }
    const auto state = static_cast<v1::WorkerState>(s);
    auto it = stats.workers_by_state.find(state);
    AddSample(workers, it == stats.workers_by_state.end() ? 0 : it->second,
              {{"state", v1::WorkerState_Name(state)}});
  }
  out.push_back(std::move(workers));

  prometheus::MetricFamily age =
      Gauge("pshard_worker_heartbeat_age_max_seconds",
            "The longest time since a live worker was last heard from");
  AddSample(age, absl::ToDoubleSeconds(stats.max_heartbeat_age));
  out.push_back(std::move(age));
  return out;
}

}  // namespace server
}  // namespace pshard
