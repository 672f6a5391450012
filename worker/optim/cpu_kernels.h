// Fused CPU optimizer kernels: one pass over parameter, gradient and state per
// call, for SGD, Adam and AdamW (with or without AMSGrad), Adagrad, RMSprop
// and Lion, with PyTorch 1.13's single-tensor arithmetic reproduced operation
// by operation in fp32 (Lion, which torch 1.13 lacks, as lion-pytorch writes
// it in torch operations).
//
// These formulas are the contract for every backend (the CUDA kernels use
// exactly the same ones). Notation: fma(a, b, c) is a*b + c rounded once
// (fmaf / __fmaf_rn); every other operator rounds to fp32 after each
// operation; "(float)x" is a double computed on the host, rounded to fp32.
//
// Why fma where torch writes "add": torch's CPU `Tensor.add(other, alpha)` is
// vec::fmadd(other, alpha, self), and its `addcmul` (self + s*t1*t2) is
// contracted by the compiler to fma(s*t1, t2, self) in the AVX2 build that
// Debian ships (checked bit for bit against torch 1.13 in
// worker/optim/testdata/make_golden.py). `mul_`, `sqrt`, division by a scalar
// and `addcdiv` (self + (s*t1)/t2) are not fused.
//
// Per-step host scalars (double, as torch computes them in Python):
//   SGD:   neg_lr = (float)(-lr), weight_decay = (float)wd,
//          momentum = (float)mom, one_minus_dampening = (float)(1 - dampening)
//   Adam/AdamW, with `step` the 1-based step count of the tensor:
//          bias_correction1 = 1 - beta1^step,  bias_correction2 = 1 - beta2^step
//          neg_step_size    = (float)(-(lr / bias_correction1))
//          bias_correction2_sqrt = (float)sqrt(bias_correction2)
//          beta1 = (float)beta1, one_minus_beta1 = (float)(1 - beta1), same
//          for beta2; eps = (float)eps; weight_decay = (float)wd (Adam's L2);
//          decay = (float)(1 - lr * wd) (AdamW's decoupled decay)
//   Adagrad, with `step` the 1-based step count:
//          neg_clr = (float)(-(lr / (1 + (step - 1) * lr_decay)))
//          weight_decay = (float)wd, eps = (float)eps
//   RMSprop: alpha = (float)alpha, one_minus_alpha = (float)(1 - alpha),
//          eps = (float)eps, weight_decay = (float)wd,
//          momentum = (float)mom, neg_lr = (float)(-lr)
//   Lion:  beta1, one_minus_beta1, beta2, one_minus_beta2 as Adam's;
//          neg_lr = (float)(-lr), decay = (float)(1 - lr * wd)
//
// SGD, per element (torch.optim.SGD, foreach=False, maximize=False):
//   d = g                                     (weight_decay == 0)
//   d = fma(p, weight_decay, g)               (weight_decay != 0)
//   if momentum != 0:
//     buf = d                                 (first step: clone, no dampening)
//     buf = fma(d, one_minus_dampening, buf * momentum)   (later steps)
//     d = fma(buf, momentum, d)               (nesterov)
//     d = buf                                 (otherwise)
//   p = fma(d, neg_lr, p)
//
// Adam, per element (torch.optim.Adam, amsgrad=False, foreach=False):
//   g' = g                                    (weight_decay == 0)
//   g' = fma(p, weight_decay, g)              (weight_decay != 0)
//   m = fma(g', one_minus_beta1, m * beta1)
//   v = fma(one_minus_beta2 * g', g', v * beta2)
//   denom = sqrt(v) / bias_correction2_sqrt + eps
//   p = p + (neg_step_size * m) / denom
//
// AdamW, per element (torch.optim.AdamW, amsgrad=False, foreach=False):
//   p = p * decay                             (skipped when decay == 1: exact)
//   then Adam's lines with g' = g.
//
// AMSGrad (Adam/AdamW, amsgrad=True): after v, with vmax the state
// "max_exp_avg_sq",
//   vmax = max(vmax, v)                       (NaN if either is: torch.maximum)
//   denom = sqrt(vmax) / bias_correction2_sqrt + eps
//
// Adagrad, per element (torch.optim.Adagrad, foreach=False; "sum" starts at
// initial_accumulator_value):
//   g' = g  or  fma(p, weight_decay, g)       (as Adam's)
//   sum = fma(g', g', sum)
//   p = p + (neg_clr * g') / (sqrt(sum) + eps)
//
// RMSprop, per element (torch.optim.RMSprop, foreach=False):
//   g' = g  or  fma(p, weight_decay, g)
//   sq = fma(one_minus_alpha * g', g', sq * alpha)
//   centered: ga = fma(g', one_minus_alpha, ga * alpha)
//             avg = sqrt(fma(-ga, ga, sq)) + eps
//   otherwise avg = sqrt(sq) + eps
//   momentum != 0: buf = buf * momentum + g' / avg;  p = fma(buf, neg_lr, p)
//   otherwise:     p = p + (neg_lr * g') / avg
//
// Lion, per element (lion-pytorch's update_fn in torch operations):
//   p = p * decay                             (skipped when decay == 1: exact)
//   c = fma(g, one_minus_beta1, m * beta1)
//   p = fma(sign(c), neg_lr, p)               (sign: -1, 0 or 1; 0 for NaN)
//   m = fma(g, one_minus_beta2, m * beta2)
//
// All kernels are element-wise, so any split of [0, n) into chunks (threads,
// CUDA blocks) gives bit-identical results. Arrays must not alias each other.
#ifndef PSHARD_WORKER_OPTIM_CPU_KERNELS_H_
#define PSHARD_WORKER_OPTIM_CPU_KERNELS_H_

#include <cstdint>

namespace pshard::worker::cpu {

// fp32 scalars of one SGD step; see the formulas above.
struct SgdScalars {
  float neg_lr = 0;
  float weight_decay = 0;
  float momentum = 0;
  float one_minus_dampening = 1;
  bool nesterov = false;
  // True on the tensor's first step with momentum: buf = d (no dampening).
  bool first_step = false;
};

// fp32 scalars of one Adam or AdamW step; see the formulas above.
struct AdamScalars {
  float beta1 = 0;
  float one_minus_beta1 = 0;
  float beta2 = 0;
  float one_minus_beta2 = 0;
  float eps = 0;
  float neg_step_size = 0;
  float bias_correction2_sqrt = 1;
  // Adam's L2 term (0: none). Must be 0 when `decoupled` is set.
  float weight_decay = 0;
  // AdamW: p *= decay before the moments.
  bool decoupled = false;
  float decay = 1;
  // AMSGrad: normalise by the running maximum of exp_avg_sq.
  bool amsgrad = false;
};

// fp32 scalars of one Adagrad step.
struct AdagradScalars {
  float neg_clr = 0;
  float weight_decay = 0;
  float eps = 0;
};

// fp32 scalars of one RMSprop step.
struct RmspropScalars {
  float alpha = 0;
  float one_minus_alpha = 0;
  float eps = 0;
  float weight_decay = 0;
  float momentum = 0;
  float neg_lr = 0;
  bool centered = false;
};

// fp32 scalars of one Lion step.
struct LionScalars {
  float beta1 = 0;
  float one_minus_beta1 = 0;
  float beta2 = 0;
  float one_minus_beta2 = 0;
  float neg_lr = 0;
  float decay = 1;
};

// Host-side computation of the scalars, in double exactly as PyTorch's Python
// code does, then rounded to fp32. `step` is 1-based.
SgdScalars MakeSgdScalars(double lr, double momentum, double dampening,
                          bool nesterov, double weight_decay, bool first_step);
AdamScalars MakeAdamScalars(double lr, double beta1, double beta2, double eps,
                            double weight_decay, bool decoupled, int64_t step,
                            bool amsgrad = false);
AdagradScalars MakeAdagradScalars(double lr, double lr_decay,
                                  double weight_decay, double eps,
                                  int64_t step);
RmspropScalars MakeRmspropScalars(double lr, double alpha, double eps,
                                  double weight_decay, double momentum,
                                  bool centered);
LionScalars MakeLionScalars(double lr, double beta1, double beta2,
                            double weight_decay);

// One SGD step over n elements. `momentum_buffer` may be null only when
// s.momentum == 0.
void SgdStep(float* param, const float* grad, float* momentum_buffer,
             int64_t n, const SgdScalars& s);

// One Adam/AdamW step over n elements. `max_exp_avg_sq` may be null only
// when !s.amsgrad.
void AdamStep(float* param, const float* grad, float* exp_avg,
              float* exp_avg_sq, float* max_exp_avg_sq, int64_t n,
              const AdamScalars& s);

// One Adagrad step over n elements.
void AdagradStep(float* param, const float* grad, float* sum, int64_t n,
                 const AdagradScalars& s);

// One RMSprop step over n elements. `momentum_buffer` may be null only when
// s.momentum == 0, `grad_avg` only when !s.centered.
void RmspropStep(float* param, const float* grad, float* square_avg,
                 float* momentum_buffer, float* grad_avg, int64_t n,
                 const RmspropScalars& s);

// One Lion step over n elements.
void LionStep(float* param, const float* grad, float* exp_avg, int64_t n,
              const LionScalars& s);

// Reference implementations: the same formulas as plain scalar loops, without
// any vectorisation hints. Used by tests to check the fast kernels bit for bit.
void SgdStepReference(float* param, const float* grad, float* momentum_buffer,
                      int64_t n, const SgdScalars& s);
void AdamStepReference(float* param, const float* grad, float* exp_avg,
                       float* exp_avg_sq, float* max_exp_avg_sq, int64_t n,
                       const AdamScalars& s);
void AdagradStepReference(float* param, const float* grad, float* sum,
                          int64_t n, const AdagradScalars& s);
void RmspropStepReference(float* param, const float* grad, float* square_avg,
                          float* momentum_buffer, float* grad_avg, int64_t n,
                          const RmspropScalars& s);
void LionStepReference(float* param, const float* grad, float* exp_avg,
                       int64_t n, const LionScalars& s);

}  // namespace pshard::worker::cpu

#endif  // PSHARD_WORKER_OPTIM_CPU_KERNELS_H_
