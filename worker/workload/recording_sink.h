// Test helpers for workloads: a GradientSink that records the order of
// GradientReady calls and, at each call, a copy of the gradient just declared
// final, and the WaitForParameter calls (answered with `wait_status`); and
// host buffers for a workload's parameters and gradients.
#ifndef PSHARD_WORKER_WORKLOAD_RECORDING_SINK_H_
#define PSHARD_WORKER_WORKLOAD_RECORDING_SINK_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
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

  absl::Status WaitForParameter(int param_index) override {
    waited.push_back(param_index);
    return wait_status;
  }

  std::vector<int> order;
  std::vector<std::vector<float>> snapshots;
  std::vector<int> waited;
  absl::Status wait_status;

 private:
  std::vector<float*> grads_;
  std::vector<int64_t> numels_;
};

// Zeroed parameter and gradient storage for `w`, with the pointer arrays
// InitializeParameters and ComputeGradients take.
struct Buffers {
  explicit Buffers(const Workload& w) {
    for (const ParameterInfo& p : w.parameters()) {
      params.emplace_back(p.numel);
      grads.emplace_back(p.numel);
      numels.push_back(p.numel);
    }
    for (size_t i = 0; i < params.size(); ++i) {
      param_ptrs.push_back(params[i].data());
      const_param_ptrs.push_back(params[i].data());
      grad_ptrs.push_back(grads[i].data());
    }
  }
  std::vector<std::vector<float>> params, grads;
  std::vector<int64_t> numels;
  std::vector<float*> param_ptrs, grad_ptrs;
  std::vector<const float*> const_param_ptrs;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_WORKLOAD_RECORDING_SINK_H_
