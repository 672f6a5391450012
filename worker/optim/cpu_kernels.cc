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

// torch.maximum: the larger of a and b, NaN when either is NaN.
inline float TorchMaximum(float a, float b) {
  return (a != a || a > b) ? a : b;
}

// torch.sign: -1, 0 or 1 (+0 for zeros and NaN).
inline float TorchSign(float x) {
  return static_cast<float>(x > 0.0f) - static_cast<float>(x < 0.0f);
}

template <bool kWeightDecay, bool kDecoupled, bool kAmsgrad>
void AdamLoop(float* __restrict param, const float* __restrict grad,
              float* __restrict exp_avg, float* __restrict exp_avg_sq,
              float* __restrict max_exp_avg_sq, int64_t n,
              const AdamScalars& s) {
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
    float vn = v;
    if constexpr (kAmsgrad) {
      vn = TorchMaximum(max_exp_avg_sq[i], v);
      max_exp_avg_sq[i] = vn;
    }
    const float denom = std::sqrt(vn) / bc2s + eps;
    param[i] = p + (nss * m) / denom;
  }
}

template <bool kWeightDecay, bool kDecoupled>
void AdamDispatchAmsgrad(float* param, const float* grad, float* exp_avg,
                         float* exp_avg_sq, float* max_exp_avg_sq, int64_t n,
                         const AdamScalars& s) {
  if (s.amsgrad) {
    AdamLoop<kWeightDecay, kDecoupled, true>(param, grad, exp_avg, exp_avg_sq,
                                             max_exp_avg_sq, n, s);
  } else {
    AdamLoop<kWeightDecay, kDecoupled, false>(param, grad, exp_avg,
                                              exp_avg_sq, nullptr, n, s);
  }
}

template <bool kWeightDecay>
void AdagradLoop(float* __restrict param, const float* __restrict grad,
                 float* __restrict sum, int64_t n, const AdagradScalars& s) {
  const float neg_clr = s.neg_clr;
  const float wd = s.weight_decay;
  const float eps = s.eps;
  for (int64_t i = 0; i < n; ++i) {
    const float p = param[i];
    float g = grad[i];
    if constexpr (kWeightDecay) g = std::fma(p, wd, g);
    const float acc = std::fma(g, g, sum[i]);
    sum[i] = acc;
    const float std_dev = std::sqrt(acc) + eps;
    param[i] = p + (neg_clr * g) / std_dev;
  }
}

template <bool kWeightDecay, bool kCentered, bool kMomentum>
void RmspropLoop(float* __restrict param, const float* __restrict grad,
                 float* __restrict square_avg, float* __restrict buf,
                 float* __restrict grad_avg, int64_t n,
                 const RmspropScalars& s) {
  const float alpha = s.alpha;
  const float oma = s.one_minus_alpha;
  const float eps = s.eps;
  const float wd = s.weight_decay;
  const float mom = s.momentum;
  const float neg_lr = s.neg_lr;
  for (int64_t i = 0; i < n; ++i) {
    const float p = param[i];
    float g = grad[i];
    if constexpr (kWeightDecay) g = std::fma(p, wd, g);
    const float sq = std::fma(oma * g, g, square_avg[i] * alpha);
    square_avg[i] = sq;
    float avg;
    if constexpr (kCentered) {
      const float ga = std::fma(g, oma, grad_avg[i] * alpha);
      grad_avg[i] = ga;
      avg = std::sqrt(std::fma(-ga, ga, sq)) + eps;
    } else {
      avg = std::sqrt(sq) + eps;
    }
    if constexpr (kMomentum) {
      const float b = buf[i] * mom + g / avg;
      buf[i] = b;
      param[i] = std::fma(b, neg_lr, p);
    } else {
      param[i] = p + (neg_lr * g) / avg;
    }
  }
}

template <bool kWeightDecay, bool kCentered>
void RmspropDispatchMomentum(float* param, const float* grad,
                             float* square_avg, float* buf, float* grad_avg,
                             int64_t n, const RmspropScalars& s) {
  if (s.momentum != 0.0f) {
    RmspropLoop<kWeightDecay, kCentered, true>(param, grad, square_avg, buf,
                                               grad_avg, n, s);
  } else {
    RmspropLoop<kWeightDecay, kCentered, false>(param, grad, square_avg,
                                                nullptr, grad_avg, n, s);
  }
}

template <bool kWeightDecay>
void RmspropDispatchCentered(float* param, const float* grad,
                             float* square_avg, float* buf, float* grad_avg,
                             int64_t n, const RmspropScalars& s) {
  if (s.centered) {
    RmspropDispatchMomentum<kWeightDecay, true>(param, grad, square_avg, buf,
                                                grad_avg, n, s);
  } else {
    RmspropDispatchMomentum<kWeightDecay, false>(param, grad, square_avg, buf,
                                                 nullptr, n, s);
  }
}

template <bool kDecay>
void LionLoop(float* __restrict param, const float* __restrict grad,
              float* __restrict exp_avg, int64_t n, const LionScalars& s) {
  const float b1 = s.beta1;
  const float omb1 = s.one_minus_beta1;
  const float b2 = s.beta2;
  const float omb2 = s.one_minus_beta2;
  const float neg_lr = s.neg_lr;
  const float decay = s.decay;
  for (int64_t i = 0; i < n; ++i) {
    float p = param[i];
    const float g = grad[i];
    const float m = exp_avg[i];
    if constexpr (kDecay) p = p * decay;
    const float c = std::fma(g, omb1, m * b1);
    param[i] = std::fma(TorchSign(c), neg_lr, p);
    exp_avg[i] = std::fma(g, omb2, m * b2);
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
                            int64_t step, bool amsgrad) {
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
  s.amsgrad = amsgrad;
  return s;
}

AdagradScalars MakeAdagradScalars(double lr, double lr_decay,
                                  double weight_decay, double eps,
                                  int64_t step) {
  // torch: clr = lr / (1 + (step - 1) * lr_decay), step a Python float.
  const double clr =
      lr / (1.0 + (static_cast<double>(step) - 1.0) * lr_decay);
  AdagradScalars s;
  s.neg_clr = static_cast<float>(-clr);
  s.weight_decay = static_cast<float>(weight_decay);
  s.eps = static_cast<float>(eps);
  return s;
}

RmspropScalars MakeRmspropScalars(double lr, double alpha, double eps,
                                  double weight_decay, double momentum,
                                  bool centered) {
  RmspropScalars s;
  s.alpha = static_cast<float>(alpha);
  s.one_minus_alpha = static_cast<float>(1.0 - alpha);
  s.eps = static_cast<float>(eps);
  s.weight_decay = static_cast<float>(weight_decay);
  s.momentum = static_cast<float>(momentum);
  s.neg_lr = static_cast<float>(-lr);
  s.centered = centered;
  return s;
}

LionScalars MakeLionScalars(double lr, double beta1, double beta2,
                            double weight_decay) {
  LionScalars s;
  s.beta1 = static_cast<float>(beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  s.neg_lr = static_cast<float>(-lr);
  s.decay = static_cast<float>(1.0 - lr * weight_decay);
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
              float* exp_avg_sq, float* max_exp_avg_sq, int64_t n,
              const AdamScalars& s) {
  // AdamW with decay == 1 (weight_decay 0) is bit-identical to skipping the
  // multiplication: p * 1.0f == p for every p.
  const bool decoupled = s.decoupled && s.decay != 1.0f;
  const bool l2 = !s.decoupled && s.weight_decay != 0.0f;
  if (decoupled) {
    AdamDispatchAmsgrad<false, true>(param, grad, exp_avg, exp_avg_sq,
                                     max_exp_avg_sq, n, s);
  } else if (l2) {
    AdamDispatchAmsgrad<true, false>(param, grad, exp_avg, exp_avg_sq,
                                     max_exp_avg_sq, n, s);
  } else {
    AdamDispatchAmsgrad<false, false>(param, grad, exp_avg, exp_avg_sq,
                                      max_exp_avg_sq, n, s);
  }
}

void AdagradStep(float* param, const float* grad, float* sum, int64_t n,
                 const AdagradScalars& s) {
  if (s.weight_decay != 0.0f) {
    AdagradLoop<true>(param, grad, sum, n, s);
  } else {
    AdagradLoop<false>(param, grad, sum, n, s);
  }
}

void RmspropStep(float* param, const float* grad, float* square_avg,
                 float* momentum_buffer, float* grad_avg, int64_t n,
                 const RmspropScalars& s) {
  if (s.weight_decay != 0.0f) {
    RmspropDispatchCentered<true>(param, grad, square_avg, momentum_buffer,
                                  grad_avg, n, s);
  } else {
    RmspropDispatchCentered<false>(param, grad, square_avg, momentum_buffer,
                                   grad_avg, n, s);
  }
}

void LionStep(float* param, const float* grad, float* exp_avg, int64_t n,
              const LionScalars& s) {
  // decay == 1 (weight_decay 0): p * 1.0f == p, skip it.
  if (s.decay != 1.0f) {
    LionLoop<true>(param, grad, exp_avg, n, s);
  } else {
    LionLoop<false>(param, grad, exp_avg, n, s);
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
    float* max_exp_avg_sq, int64_t n, const AdamScalars& s) {
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
    float second = exp_avg_sq[i];
    if (s.amsgrad) {
      if (!std::isnan(max_exp_avg_sq[i]) &&
          (std::isnan(second) || second > max_exp_avg_sq[i])) {
        max_exp_avg_sq[i] = second;
      }
      second = max_exp_avg_sq[i];
    }
    const float root = std::sqrt(second);
    const float denom = root / s.bias_correction2_sqrt + s.eps;
    const float numer = s.neg_step_size * exp_avg[i];
    param[i] = param[i] + numer / denom;
  }
}

__attribute__((optimize("no-tree-vectorize"))) void AdagradStepReference(
    float* param, const float* grad, float* sum, int64_t n,
    const AdagradScalars& s) {
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i];
    if (s.weight_decay != 0.0f) g = std::fma(param[i], s.weight_decay, g);
    sum[i] = std::fma(g, g, sum[i]);
    const float root = std::sqrt(sum[i]);
    const float denom = root + s.eps;
    const float numer = s.neg_clr * g;
    param[i] = param[i] + numer / denom;
  }
}

__attribute__((optimize("no-tree-vectorize"))) void RmspropStepReference(
    float* param, const float* grad, float* square_avg, float* momentum_buffer,
    float* grad_avg, int64_t n, const RmspropScalars& s) {
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i];
    if (s.weight_decay != 0.0f) g = std::fma(param[i], s.weight_decay, g);
    const float sq_scaled = square_avg[i] * s.alpha;
    square_avg[i] = std::fma(s.one_minus_alpha * g, g, sq_scaled);
    float variance = square_avg[i];
    if (s.centered) {
      const float ga_scaled = grad_avg[i] * s.alpha;
      grad_avg[i] = std::fma(g, s.one_minus_alpha, ga_scaled);
      variance = std::fma(-grad_avg[i], grad_avg[i], variance);
    }
    const float avg = std::sqrt(variance) + s.eps;
    if (s.momentum != 0.0f) {
      const float scaled = momentum_buffer[i] * s.momentum;
      momentum_buffer[i] = scaled + g / avg;
      param[i] = std::fma(momentum_buffer[i], s.neg_lr, param[i]);
    } else {
      const float numer = s.neg_lr * g;
      param[i] = param[i] + numer / avg;
    }
  }
}

__attribute__((optimize("no-tree-vectorize"))) void LionStepReference(
    float* param, const float* grad, float* exp_avg, int64_t n,
    const LionScalars& s) {
  for (int64_t i = 0; i < n; ++i) {
    if (s.decay != 1.0f) param[i] = param[i] * s.decay;
    const float c = std::fma(grad[i], s.one_minus_beta1, exp_avg[i] * s.beta1);
    const float sign = c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : 0.0f);
    param[i] = std::fma(sign, s.neg_lr, param[i]);
    exp_avg[i] = std::fma(grad[i], s.one_minus_beta2, exp_avg[i] * s.beta2);
  }
}

}  // namespace pshard::worker::cpu
