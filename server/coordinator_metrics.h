// The coordinator's own metrics, computed at each scrape from
// Coordinator::Stats (its RPCs are counted by common/rpc_metrics.h):
//
//   pshard_jobs{state}                          jobs by state
//   pshard_job_queue_depth                      QUEUED jobs
//   pshard_job_queue_oldest_wait_seconds        the oldest QUEUED job's wait
//   pshard_workers{state}                       workers by state
//   pshard_worker_heartbeat_age_max_seconds     the stalest live worker
#ifndef PSHARD_SERVER_COORDINATOR_METRICS_H_
#define PSHARD_SERVER_COORDINATOR_METRICS_H_

#include <vector>

#include "coordinator/coordinator.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

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

}  // namespace server
}  // namespace pshard

#endif  // PSHARD_SERVER_COORDINATOR_METRICS_H_
