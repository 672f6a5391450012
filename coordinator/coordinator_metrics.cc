// Coordinator::Stats: what the metrics endpoint shows of the coordinator
// (server/coordinator_metrics.h), counted under the lock at each scrape.
#include <algorithm>

#include "common/proto_time.h"
#include "coordinator/coordinator.h"

namespace pshard {
namespace coordinator {

CoordinatorStats Coordinator::Stats() const {
  CoordinatorStats stats;
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  jobs_.ForEach([&](const JobRec& j) {
    ++stats.jobs_by_state[j.job.state()];
    if (j.job.state() == v1::QUEUED && j.job.has_submit_time()) {
      stats.oldest_queued_wait = std::max(
          stats.oldest_queued_wait, now - FromProto(j.job.submit_time()));
    }
  });
  workers_.ForEach([&](const WorkerRec& w) {
    ++stats.workers_by_state[WorkerRegistry::StateOf(w)];
    if (!w.lost && w.confirmed) {
      stats.max_heartbeat_age =
          std::max(stats.max_heartbeat_age, now - w.last_heartbeat);
    }
  });
  return stats;
}

}  // namespace coordinator
}  // namespace pshard
