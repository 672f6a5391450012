// Fused CPU optimizer kernels: one pass over parameter, gradient and state per
// call, for SGD, Adam and AdamW, with PyTorch 1.13's single-tensor arithmetic
// reproduced operation by operation in fp32.
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
};

// Host-side computation of the scalars, in double exactly as PyTorch's Python
// code does, then rounded to fp32. `step` is 1-based.
SgdScalars MakeSgdScalars(double lr, double momentum, double dampening,
                          bool nesterov, double weight_decay, bool first_step);
AdamScalars MakeAdamScalars(double lr, double beta1, double beta2, double eps,
                            double weight_decay, bool decoupled, int64_t step);

// One SGD step over n elements. `momentum_buffer` may be null only when
// s.momentum == 0.
void SgdStep(float* param, const float* grad, float* momentum_buffer,
             int64_t n, const SgdScalars& s);

// One Adam/AdamW step over n elements.
void AdamStep(float* param, const float* grad, float* exp_avg,
              float* exp_avg_sq, int64_t n, const AdamScalars& s);

// Reference implementations: the same formulas as plain scalar loops, without
// any vectorisation hints. Used by tests to check the fast kernels bit for bit.
void SgdStepReference(float* param, const float* grad, float* momentum_buffer,
                      int64_t n, const SgdScalars& s);
void AdamStepReference(float* param, const float* grad, float* exp_avg,
                       float* exp_avg_sq, int64_t n, const AdamScalars& s);

}  // namespace pshard::worker::cpu

#endif  // PSHARD_WORKER_OPTIM_CPU_KERNELS_H_
