// The coordinator's own metrics, computed at each scrape from
// Coordinator::Stats (its RPCs are counted by common/rpc_metrics.h):
//
//   pshard_jobs{state}                          jobs by state
//   pshard_job_queue_depth                      QUEUED jobs
//   pshard_job_queue_oldest_wait_seconds        the oldest QUEUED job's wait
//   pshard_workers{state}                       workers by state
//   pshard_worker_heartbeat_age_max_seconds     the stalest live worker
//
// and, through TimedStateStore, its writes to the state store:
//
//   pshard_state_commit_seconds                 each commit (histogram)
//   pshard_state_commit_failures_total          commits the store refused
#ifndef PSHARD_SERVER_COORDINATOR_METRICS_H_
#define PSHARD_SERVER_COORDINATOR_METRICS_H_

#include <memory>
#include <vector>

#include "coordinator/coordinator.h"
#include "coordinator/state_store.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"

namespace pshard {
namespace server {

class CoordinatorMetrics final : public prometheus::Collectable {
 public:
  // `coordinator` must outlive the collector's last scrape.
  explicit CoordinatorMetrics(const coordinator::Coordinator* coordinator)
      : coordinator_(coordinator) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const coordinator::Coordinator* const coordinator_;
};

// A StateStore that times the commits of the one it wraps (a group commit
// writes many changes in one); Load and Probe pass through.
class TimedStateStore final : public coordinator::StateStore {
 public:
  // `registry` outlives this.
  TimedStateStore(std::unique_ptr<coordinator::StateStore> store,
                  prometheus::Registry& registry);

  absl::StatusOr<Snapshot> Load() override { return store_->Load(); }
  absl::Status Commit(const Batch& batch) override;
  absl::Status Probe() override { return store_->Probe(); }

 private:
  const std::unique_ptr<coordinator::StateStore> store_;
  prometheus::Histogram& commit_seconds_;
  prometheus::Counter& commit_failures_;
};

}  // namespace server
}  // namespace pshard

#endif  // PSHARD_SERVER_COORDINATOR_METRICS_H_
