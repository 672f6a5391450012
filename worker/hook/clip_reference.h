// What sharded clipping is checked against: torch.nn.utils.clip_grad_norm_
// of PyTorch 1.13 written out for one process holding every gradient — the
// norm of the per-parameter norms (L2), or the largest of them (infinity);
// coef = max_norm / (total + 1e-6), clamped to 1; every gradient *= coef.
// For tests (the hook's equivalence suite, the end-to-end references).
#ifndef PSHARD_WORKER_HOOK_CLIP_REFERENCE_H_
#define PSHARD_WORKER_HOOK_CLIP_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <vector>

namespace pshard::worker {

// Clips `grads` (one vector per parameter) in place; returns the total norm
// before clipping. `norm_type` is 2 or infinity.
inline double ClipGradNormLikeTorch(std::vector<std::vector<float>>& grads,
                                    double max_norm, double norm_type) {
  const bool inf = std::isinf(norm_type);
  double total = 0;
  for (const std::vector<float>& g : grads) {
    double norm = 0;
    for (float v : g) {
      norm = inf ? std::max(norm, std::abs(double{v})) : norm + double{v} * v;
    }
    total = inf ? std::max(total, norm) : total + norm;
  }
  if (!inf) total = std::sqrt(total);
  const float coef =
      static_cast<float>(std::min(1.0, max_norm / (total + 1e-6)));
  for (std::vector<float>& g : grads) {
    for (float& v : g) v *= coef;
  }
  return total;
}

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_HOOK_CLIP_REFERENCE_H_
