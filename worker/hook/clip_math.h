// The arithmetic of global gradient-norm clipping (torch.nn.utils.
// clip_grad_norm_ of PyTorch 1.13), in one place for the host memory
// (zero_hook.cc) and the CUDA kernels (worker/gpu/kernels.cu): plain C++
// with no library, callable from device code when nvcc compiles it.
//
// Each rank reduces the gradients it owns to one partial norm (L2: the
// square root of its sum of squares; infinity: its largest |g|); every rank
// ends with all the partials (slot r holds rank r's) and combines them in
// rank order, so every rank computes the same total bit for bit.
#ifndef PSHARD_WORKER_HOOK_CLIP_MATH_H_
#define PSHARD_WORKER_HOOK_CLIP_MATH_H_

#include <cmath>

#ifdef __CUDACC__
#define PSHARD_HOST_DEVICE __host__ __device__
#else
#define PSHARD_HOST_DEVICE
#endif

namespace pshard::worker {

// The norms clipping supports (OptimizerSpec.norm_type 2 or infinity).
enum class NormKind { kL2, kInf };

// One more element into a running partial: `acc` is a sum of squares (L2)
// or a largest |g| (infinity). NaN sticks, as in torch's norm and max.
PSHARD_HOST_DEVICE inline double AccumulateNorm(double acc, float g,
                                                NormKind kind) {
  const double v = static_cast<double>(g);
  if (kind == NormKind::kL2) return acc + v * v;
  const double a = std::fabs(v);
  return (a > acc || a != a) && acc == acc ? a : acc;
}

// Two running partials into one (the same meaning as AccumulateNorm's).
PSHARD_HOST_DEVICE inline double CombineNorms(double a, double b,
                                              NormKind kind) {
  if (kind == NormKind::kL2) return a + b;
  if (a != a) return a;
  return (b > a || b != b) ? b : a;
}

// A rank's accumulated partial as the value of its slot: the norm itself.
PSHARD_HOST_DEVICE inline float PartialNormValue(double acc, NormKind kind) {
  return static_cast<float>(kind == NormKind::kL2 ? std::sqrt(acc) : acc);
}

// The total norm from every rank's slot, combined in rank order.
PSHARD_HOST_DEVICE inline double TotalNorm(const float* slots, int world_size,
                                           NormKind kind) {
  double acc = 0;
  for (int r = 0; r < world_size; ++r) {
    const double s = static_cast<double>(slots[r]);
    acc = CombineNorms(acc, kind == NormKind::kL2 ? s * s : s, kind);
  }
  return kind == NormKind::kL2 ? std::sqrt(acc) : acc;
}

// What every gradient is multiplied by: min(max_norm / (total + 1e-6), 1),
// NaN when the total is NaN (torch clamps NaN to NaN, and the step goes on
// with NaN gradients: error_if_nonfinite=False).
PSHARD_HOST_DEVICE inline float ClipCoefficient(double total_norm,
                                                double max_norm) {
  const double coef = max_norm / (total_norm + 1e-6);
  return static_cast<float>(coef > 1.0 ? 1.0 : coef);
}

}  // namespace pshard::worker

#undef PSHARD_HOST_DEVICE

#endif  // PSHARD_WORKER_HOOK_CLIP_MATH_H_
