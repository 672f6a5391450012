#include "worker/optim/cpu_kernels.h"

#include <cmath>
#include <cstdint>

// Built with -ffp-contract=off and -fno-math-errno (see BUILD.bazel): every
// fused multiply-add below is an explicit std::fma, nothing else is fused, and
// sqrt vectorises. With -march=x86-64-v3 GCC turns each loop into 8-wide AVX2
// code (check with --copt=-fopt-info-vec-optimized).

namespace pshard::worker::cpu {
namespace {

// One template instance per combination of the flags, so that each inner loop
// is branch-free and vectorises.
template <bool kWeightDecay, bool kMomentum, bool kFirst, bool kNesterov>
void SgdLoop(float* __restrict param, const float* __restrict grad,
             float* __restrict buf, int64_t n, const SgdScalars& s) {
  const float neg_lr = s.neg_lr;
  const float wd = s.weight_decay;
  const float mom = s.momentum;
  const float omd = s.one_minus_dampening;
  for (int64_t i = 0; i < n; ++i) {
    const float p = param[i];
    float d = grad[i];
    if constexpr (kWeightDecay) d = std::fma(p, wd, d);
    if constexpr (kMomentum) {
      float b;
      if constexpr (kFirst) {
        b = d;
      } else {
        b = std::fma(d, omd, buf[i] * mom);
      }
      buf[i] = b;
      if constexpr (kNesterov) {
        d = std::fma(b, mom, d);
      } else {
        d = b;
      }
    }
    param[i] = std::fma(d, neg_lr, p);
  }
}

template <bool kWeightDecay, bool kMomentum, bool kFirst>
void SgdDispatchNesterov(float* param, const float* grad, float* buf,
                         int64_t n, const SgdScalars& s) {
  if (kMomentum && s.nesterov) {
    SgdLoop<kWeightDecay, kMomentum, kFirst, true>(param, grad, buf, n, s);
  } else {
    SgdLoop<kWeightDecay, kMomentum, kFirst, false>(param, grad, buf, n, s);
  }
}

template <bool kWeightDecay>
void SgdDispatchMomentum(float* param, const float* grad, float* buf,
                         int64_t n, const SgdScalars& s) {
  if (s.momentum == 0.0f) {
    SgdLoop<kWeightDecay, false, false, false>(param, grad, buf, n, s);
  } else if (s.first_step) {
    SgdDispatchNesterov<kWeightDecay, true, true>(param, grad, buf, n, s);
  } else {
    SgdDispatchNesterov<kWeightDecay, true, false>(param, grad, buf, n, s);
  }
}

template <bool kWeightDecay, bool kDecoupled>
void AdamLoop(float* __restrict param, const float* __restrict grad,
              float* __restrict exp_avg, float* __restrict exp_avg_sq,
              int64_t n, const AdamScalars& s) {
  const float b1 = s.beta1;
  const float omb1 = s.one_minus_beta1;
  const float b2 = s.beta2;
  const float omb2 = s.one_minus_beta2;
  const float eps = s.eps;
  const float nss = s.neg_step_size;
  const float bc2s = s.bias_correction2_sqrt;
  const float wd = s.weight_decay;
  const float decay = s.decay;
  for (int64_t i = 0; i < n; ++i) {
    float p = param[i];
    float g = grad[i];
    if constexpr (kWeightDecay) g = std::fma(p, wd, g);
    if constexpr (kDecoupled) p = p * decay;
    const float m = std::fma(g, omb1, exp_avg[i] * b1);
    const float v = std::fma(omb2 * g, g, exp_avg_sq[i] * b2);
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const float denom = std::sqrt(v) / bc2s + eps;
    param[i] = p + (nss * m) / denom;
  }
}

}  // namespace

SgdScalars MakeSgdScalars(double lr, double momentum, double dampening,
                          bool nesterov, double weight_decay,
                          bool first_step) {
  SgdScalars s;
  s.neg_lr = static_cast<float>(-lr);
  s.weight_decay = static_cast<float>(weight_decay);
  s.momentum = static_cast<float>(momentum);
  s.one_minus_dampening = static_cast<float>(1.0 - dampening);
  s.nesterov = nesterov;
  s.first_step = first_step;
  return s;
}

AdamScalars MakeAdamScalars(double lr, double beta1, double beta2, double eps,
                            double weight_decay, bool decoupled,
                            int64_t step) {
  // torch keeps `step` as a float tensor and reads it with .item(): a double
  // holding a small integer, so beta ** step is C pow() on doubles.
  const double step_d = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(beta1, step_d);
  const double bias_correction2 = 1.0 - std::pow(beta2, step_d);
  const double step_size = lr / bias_correction1;
  AdamScalars s;
  s.beta1 = static_cast<float>(beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  s.eps = static_cast<float>(eps);
  s.neg_step_size = static_cast<float>(-step_size);
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  if (decoupled) {
    s.decoupled = true;
    s.decay = static_cast<float>(1.0 - lr * weight_decay);
    s.weight_decay = 0;
  } else {
    s.weight_decay = static_cast<float>(weight_decay);
  }
  return s;
}

void SgdStep(float* param, const float* grad, float* momentum_buffer,
             int64_t n, const SgdScalars& s) {
  if (s.weight_decay != 0.0f) {
    SgdDispatchMomentum<true>(param, grad, momentum_buffer, n, s);
  } else {
    SgdDispatchMomentum<false>(param, grad, momentum_buffer, n, s);
  }
}

void AdamStep(float* param, const float* grad, float* exp_avg,
              float* exp_avg_sq, int64_t n, const AdamScalars& s) {
  // AdamW with decay == 1 (weight_decay 0) is bit-identical to skipping the
  // multiplication: p * 1.0f == p for every p.
  const bool decoupled = s.decoupled && s.decay != 1.0f;
  const bool l2 = !s.decoupled && s.weight_decay != 0.0f;
  if (decoupled) {
    AdamLoop<false, true>(param, grad, exp_avg, exp_avg_sq, n, s);
  } else if (l2) {
    AdamLoop<true, false>(param, grad, exp_avg, exp_avg_sq, n, s);
  } else {
    AdamLoop<false, false>(param, grad, exp_avg, exp_avg_sq, n, s);
  }
}

// The reference loops keep the branches inside the loop and are compiled
// without vectorisation, so they are an independent transcription of the
// formulas in cpu_kernels.h.
__attribute__((optimize("no-tree-vectorize"))) void SgdStepReference(
    float* param, const float* grad, float* momentum_buffer, int64_t n,
    const SgdScalars& s) {
  for (int64_t i = 0; i < n; ++i) {
    float d = grad[i];
    if (s.weight_decay != 0.0f) d = std::fma(param[i], s.weight_decay, d);
    if (s.momentum != 0.0f) {
      if (s.first_step) {
        momentum_buffer[i] = d;
      } else {
        const float scaled = momentum_buffer[i] * s.momentum;
        momentum_buffer[i] = std::fma(d, s.one_minus_dampening, scaled);
      }
      d = s.nesterov ? std::fma(momentum_buffer[i], s.momentum, d)
                     : momentum_buffer[i];
    }
    param[i] = std::fma(d, s.neg_lr, param[i]);
  }
}

__attribute__((optimize("no-tree-vectorize"))) void AdamStepReference(
    float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
    int64_t n, const AdamScalars& s) {
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i];
    if (!s.decoupled && s.weight_decay != 0.0f) {
      g = std::fma(param[i], s.weight_decay, g);
    }
    if (s.decoupled) param[i] = param[i] * s.decay;
    const float m_scaled = exp_avg[i] * s.beta1;
    exp_avg[i] = std::fma(g, s.one_minus_beta1, m_scaled);
    const float v_scaled = exp_avg_sq[i] * s.beta2;
    const float g_scaled = s.one_minus_beta2 * g;
    exp_avg_sq[i] = std::fma(g_scaled, g, v_scaled);
    const float root = std::sqrt(exp_avg_sq[i]);
    const float denom = root / s.bias_correction2_sqrt + s.eps;
    const float numer = s.neg_step_size * exp_avg[i];
    param[i] = param[i] + numer / denom;
  }
}

}  // namespace pshard::worker::cpu
