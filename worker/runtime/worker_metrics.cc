#include "worker/runtime/worker_metrics.h"

namespace pshard::worker {
namespace {

// 1 ms .. 60 s: a tiny model's steps to a large one's.
prometheus::Histogram::BucketBoundaries StepBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
          0.5,   1,      2.5,   5,    10,    30,   60};
}

// 100 us .. 60 s: communication the backward pass hid almost all of, to a
// step spent waiting on a slow peer.
prometheus::Histogram::BucketBoundaries WaitBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1,      2.5,   10,    60};
}

}  // namespace

WorkerMetrics::WorkerMetrics(prometheus::Registry& registry)
    : steps_(prometheus::BuildCounter()
                 .Name("pshard_worker_steps_total")
                 .Help("Training steps this worker ran")
                 .Register(registry)
                 .Add({})),
      step_seconds_(prometheus::BuildHistogram()
                        .Name("pshard_worker_step_seconds")
                        .Help("Time of one training step on this worker")
                        .Register(registry)
                        .Add({}, StepBuckets())),
      collective_wait_seconds_(
          prometheus::BuildHistogram()
              .Name("pshard_worker_collective_wait_seconds")
              .Help("Time a step waited for its collectives (reduce, owner "
                    "step, broadcast) after its backward pass")
              .Register(registry)
              .Add({}, WaitBuckets())),
      bytes_sent_(prometheus::BuildCounter()
                      .Name("pshard_worker_bytes_sent_total")
                      .Help("Bytes this worker sent in collectives")
                      .Register(registry)
                      .Add({})),
      optimizer_state_bytes_(
          prometheus::BuildGauge()
              .Name("pshard_worker_optimizer_state_bytes")
              .Help("Optimizer state held for the buckets this worker owns")
              .Register(registry)
              .Add({})),
      checkpoint_stall_seconds_(
          prometheus::BuildHistogram()
              .Name("pshard_worker_checkpoint_stall_seconds")
              .Help("Training time a checkpoint's snapshot took")
              .Register(registry)
              .Add({}, StepBuckets())) {}

void WorkerMetrics::ObserveStep(absl::Duration step_time,
                                absl::Duration collective_wait,
                                int64_t bytes_sent) {
  steps_.Increment();
  step_seconds_.Observe(absl::ToDoubleSeconds(step_time));
  collective_wait_seconds_.Observe(absl::ToDoubleSeconds(collective_wait));
  if (bytes_sent > 0) bytes_sent_.Increment(static_cast<double>(bytes_sent));
}

void WorkerMetrics::SetOptimizerStateBytes(int64_t bytes) {
  optimizer_state_bytes_.Set(static_cast<double>(bytes));
}

void WorkerMetrics::ObserveCheckpointStall(absl::Duration stall) {
  checkpoint_stall_seconds_.Observe(absl::ToDoubleSeconds(stall));
}

}  // namespace pshard::worker
