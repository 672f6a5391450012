// The worker's metrics for its Prometheus endpoint (--metrics_listen), fed
// by the built-in job runner as it steps (a program job's steps run in the
// program's process and are not counted here; its RPCs to the worker are):
//
//   pshard_worker_steps_total                    steps this worker ran
//   pshard_worker_step_seconds                   step time (histogram)
//   pshard_worker_collective_wait_seconds        time a step waited for its
//                                                collectives after the
//                                                backward pass (histogram)
//   pshard_worker_bytes_sent_total               collective bytes sent
//   pshard_worker_optimizer_state_bytes          state held for owned buckets
//   pshard_worker_checkpoint_stall_seconds       training time a checkpoint
//                                                snapshot took (histogram)
#ifndef PSHARD_WORKER_RUNTIME_WORKER_METRICS_H_
#define PSHARD_WORKER_RUNTIME_WORKER_METRICS_H_

#include <cstdint>

#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace pshard::worker {

class WorkerMetrics {
 public:
  // Registers the families in `registry`, which must outlive this object.
  explicit WorkerMetrics(prometheus::Registry& registry);

  // Thread-safe (prometheus-cpp's metrics are atomic).
  void ObserveStep(absl::Duration step_time, absl::Duration collective_wait,
                   int64_t bytes_sent);
  void SetOptimizerStateBytes(int64_t bytes);
  void ObserveCheckpointStall(absl::Duration stall);

 private:
  prometheus::Counter& steps_;
  prometheus::Histogram& step_seconds_;
  prometheus::Histogram& collective_wait_seconds_;
  prometheus::Counter& bytes_sent_;
  prometheus::Gauge& optimizer_state_bytes_;
  prometheus::Histogram& checkpoint_stall_seconds_;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_WORKER_METRICS_H_
