// A GradientSink for tests: records the order of GradientReady calls and, at
// each call, a copy of the gradient just declared final.
#ifndef PSHARD_WORKER_WORKLOAD_RECORDING_SINK_H_
#define PSHARD_WORKER_WORKLOAD_RECORDING_SINK_H_

#include <cstdint>
#include <vector>

#include "worker/workload/workload.h"

namespace pshard::worker {

class RecordingSink : public GradientSink {
 public:
  // `grads[i]` holds `numels[i]` floats; snapshots are taken from there.
  RecordingSink(std::vector<float*> grads, std::vector<int64_t> numels)
      : grads_(std::move(grads)), numels_(std::move(numels)) {}
  RecordingSink() = default;

  void GradientReady(int param_index) override {
    order.push_back(param_index);
    if (param_index >= 0 && param_index < static_cast<int>(grads_.size())) {
      const float* g = grads_[param_index];
      snapshots.emplace_back(g, g + numels_[param_index]);
    }
  }

  std::vector<int> order;
  std::vector<std::vector<float>> snapshots;

 private:
  std::vector<float*> grads_;
  std::vector<int64_t> numels_;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_WORKLOAD_RECORDING_SINK_H_
