// pshard's CUDA kernels: the fused multi-tensor optimizer step (SGD, Adam,
// AdamW with or without AMSGrad, Adagrad, RMSprop, Lion; fp32 parameters, or bf16 parameters with fp32 master weights), dtype
// casts, scaling, synthetic values and a reference copy. One .cu file on
// purpose: nvcc time counts against CI.
//
// Arithmetic: every operation of worker/optim/cpu_kernels.h's formulas is one
// IEEE round-to-nearest intrinsic (__fmaf_rn where the CPU writes std::fma,
// __fmul_rn/__fadd_rn/__fdiv_rn/__fsqrt_rn elsewhere), so nvcc cannot contract
// or approximate anything and the GPU reproduces the CPU kernels bit for bit.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "worker/gpu/kernel_params.h"
#include "worker/gpu/kernels.h"
#include "worker/gpu/synthetic.h"
#include "worker/hook/clip_math.h"

namespace pshard::worker::gpu {
namespace {

constexpr int kThreads = 256;
// Independent 4-element vectors each thread loads before it computes: keeps
// enough bytes in flight per SM to saturate HBM.
constexpr int kIlp = 4;

// Per-chunk decisions, uniform across the block (no divergence).
struct Flags {
  bool weight_decay;  // L2: g' = fma(p, wd, g) (SGD, Adam, Adagrad, RMSprop)
  bool momentum;      // SGD, RMSprop
  bool first_step;    // SGD
  bool nesterov;      // SGD
  bool decoupled;     // AdamW, Lion: p *= decay
  bool amsgrad;       // Adam/AdamW
  bool centered;      // RMSprop
};

// torch.maximum: NaN when either is NaN.
__device__ __forceinline__ float TorchMaximum(float a, float b) {
  return (a != a || a > b) ? a : b;
}

// torch.sign: -1, 0 or 1 (+0 for zeros and NaN).
__device__ __forceinline__ float TorchSign(float x) {
  return __fsub_rn(x > 0.0f ? 1.0f : 0.0f, x < 0.0f ? 1.0f : 0.0f);
}

__device__ __forceinline__ void SgdUpdate(const GroupScalars& s, const Flags& f,
                                          float& p, float g, float& buf) {
  float d = g;
  if (f.weight_decay) d = __fmaf_rn(p, s.sgd_weight_decay, d);
  if (f.momentum) {
    const float b = f.first_step ? d
                                 : __fmaf_rn(d, s.one_minus_dampening,
                                             __fmul_rn(buf, s.momentum));
    buf = b;
    d = f.nesterov ? __fmaf_rn(b, s.momentum, d) : b;
  }
  p = __fmaf_rn(d, s.neg_lr, p);
}

__device__ __forceinline__ void AdamUpdate(const GroupScalars& s,
                                           const Flags& f, float& p, float g,
                                           float& m, float& v, float& vmax) {
  if (f.weight_decay) g = __fmaf_rn(p, s.adam_weight_decay, g);
  if (f.decoupled) p = __fmul_rn(p, s.decay);
  m = __fmaf_rn(g, s.one_minus_beta1, __fmul_rn(m, s.beta1));
  v = __fmaf_rn(__fmul_rn(s.one_minus_beta2, g), g, __fmul_rn(v, s.beta2));
  float second = v;
  if (f.amsgrad) {
    vmax = TorchMaximum(vmax, v);
    second = vmax;
  }
  const float denom =
      __fadd_rn(__fdiv_rn(__fsqrt_rn(second), s.bias_correction2_sqrt), s.eps);
  p = __fadd_rn(p, __fdiv_rn(__fmul_rn(s.neg_step_size, m), denom));
}

__device__ __forceinline__ void AdagradUpdate(const GroupScalars& s,
                                              const Flags& f, float& p,
                                              float g, float& sum) {
  if (f.weight_decay) g = __fmaf_rn(p, s.adagrad_weight_decay, g);
  sum = __fmaf_rn(g, g, sum);
  const float std_dev = __fadd_rn(__fsqrt_rn(sum), s.eps);
  p = __fadd_rn(p, __fdiv_rn(__fmul_rn(s.neg_clr, g), std_dev));
}

__device__ __forceinline__ void RmspropUpdate(const GroupScalars& s,
                                              const Flags& f, float& p,
                                              float g, float& sq, float& buf,
                                              float& ga) {
  if (f.weight_decay) g = __fmaf_rn(p, s.rmsprop_weight_decay, g);
  sq = __fmaf_rn(__fmul_rn(s.one_minus_alpha, g), g, __fmul_rn(sq, s.alpha));
  float variance = sq;
  if (f.centered) {
    ga = __fmaf_rn(g, s.one_minus_alpha, __fmul_rn(ga, s.alpha));
    variance = __fmaf_rn(-ga, ga, sq);
  }
  const float avg = __fadd_rn(__fsqrt_rn(variance), s.eps);
  if (f.momentum) {
    buf = __fadd_rn(__fmul_rn(buf, s.momentum), __fdiv_rn(g, avg));
    p = __fmaf_rn(buf, s.neg_lr, p);
  } else {
    p = __fadd_rn(p, __fdiv_rn(__fmul_rn(s.neg_lr, g), avg));
  }
}

__device__ __forceinline__ void LionUpdate(const GroupScalars& s,
                                           const Flags& f, float& p, float g,
                                           float& m) {
  if (f.decoupled) p = __fmul_rn(p, s.decay);
  const float c = __fmaf_rn(g, s.one_minus_beta1, __fmul_rn(m, s.beta1));
  p = __fmaf_rn(TorchSign(c), s.neg_lr, p);
  m = __fmaf_rn(g, s.one_minus_beta2, __fmul_rn(m, s.beta2));
}

// One element's update for launch kind kKind, over state values a, b, c
// (state arrays 0, 1, 2; unused ones are scratch).
template <int kKind>
__device__ __forceinline__ void Update(const GroupScalars& s, const Flags& f,
                                       float& p, float g, float& a, float& b,
                                       float& c) {
  if constexpr (kKind == kKernelSgd) {
    SgdUpdate(s, f, p, g, a);
  } else if constexpr (kKind == kKernelAdam) {
    AdamUpdate(s, f, p, g, a, b, c);
  } else if constexpr (kKind == kKernelAdagrad) {
    AdagradUpdate(s, f, p, g, a);
  } else if constexpr (kKind == kKernelRmsprop) {
    RmspropUpdate(s, f, p, g, a, b, c);
  } else {
    LionUpdate(s, f, p, g, a);
  }
}

// ---- element access, scalar and 4-wide, for fp32 and bf16 ----

__device__ __forceinline__ float LoadOne(const float* a, int64_t i) {
  return a[i];
}
__device__ __forceinline__ float LoadOne(const __nv_bfloat16* a, int64_t i) {
  return __bfloat162float(a[i]);
}

// Loads a[4j .. 4j+3]; `a` is 16-byte (fp32) or 8-byte (bf16) aligned.
__device__ __forceinline__ void LoadFour(const float* a, int64_t j,
                                         float out[4]) {
  const float4 x = reinterpret_cast<const float4*>(a)[j];
  out[0] = x.x;
  out[1] = x.y;
  out[2] = x.z;
  out[3] = x.w;
}
__device__ __forceinline__ void LoadFour(const __nv_bfloat16* a, int64_t j,
                                         float out[4]) {
  const uint2 raw = reinterpret_cast<const uint2*>(a)[j];
  __nv_bfloat162 lo;
  __nv_bfloat162 hi;
  static_assert(sizeof(lo) == sizeof(raw.x), "bf16x2 is 32 bits");
  memcpy(&lo, &raw.x, sizeof(lo));
  memcpy(&hi, &raw.y, sizeof(hi));
  const float2 a01 = __bfloat1622float2(lo);
  const float2 a23 = __bfloat1622float2(hi);
  out[0] = a01.x;
  out[1] = a01.y;
  out[2] = a23.x;
  out[3] = a23.y;
}

// Rounding to bf16 as the host (FloatToBFloat16) and torch do: to nearest
// even, and every NaN the canonical 0x7FC0 (__float2bfloat16_rn makes it
// 0x7FFF), so that the device's bf16 bits are the host's.
__device__ __forceinline__ __nv_bfloat16 ToBf16(float x) {
  return x != x ? __ushort_as_bfloat16(0x7FC0) : __float2bfloat16_rn(x);
}
__device__ __forceinline__ __nv_bfloat162 ToBf16x2(float a, float b) {
  if (a == a && b == b) return __floats2bfloat162_rn(a, b);
  return __halves2bfloat162(ToBf16(a), ToBf16(b));
}

__device__ __forceinline__ void StoreFour(float* a, int64_t j,
                                          const float in[4]) {
  reinterpret_cast<float4*>(a)[j] = make_float4(in[0], in[1], in[2], in[3]);
}
__device__ __forceinline__ void StoreFourBf16(__nv_bfloat16* a, int64_t j,
                                              const float in[4]) {
  const __nv_bfloat162 lo = ToBf16x2(in[0], in[1]);
  const __nv_bfloat162 hi = ToBf16x2(in[2], in[3]);
  uint2 raw;
  memcpy(&raw.x, &lo, sizeof(lo));
  memcpy(&raw.y, &hi, sizeof(hi));
  reinterpret_cast<uint2*>(a)[j] = raw;
}

__device__ __forceinline__ bool Aligned(const void* p, int bytes) {
  return (reinterpret_cast<uintptr_t>(p) & static_cast<uintptr_t>(bytes - 1)) ==
         0;
}
template <typename T>
__device__ __forceinline__ int VecBytes() {
  return 4 * static_cast<int>(sizeof(T));
}

// One block steps one chunk with launch kind kKind (OptimizerKernelKind).
// ParamT: float (params stepped in place) or __nv_bfloat16 (master stepped,
// params written rounded). GradT: float or __nv_bfloat16.
template <int kKind, typename ParamT, typename GradT>
__global__ void __launch_bounds__(kThreads)
    OptimizerKernel(OptimizerLaunchParams launch, OptimizerBuffers buffers) {
  constexpr bool kBf16Params = sizeof(ParamT) == 2;
  const ChunkDescriptor c = launch.chunks[blockIdx.x];
  const GroupScalars& s = launch.groups[c.group];
  const bool has_state = c.state_offset >= 0;

  Flags f{};
  // Which state arrays the chunk reads and writes.
  bool uses[3] = {false, false, false};
  if constexpr (kKind == kKernelSgd) {
    f.weight_decay = s.sgd_weight_decay != 0.0f;
    f.momentum = s.momentum != 0.0f && has_state;
    f.first_step = s.first_step != 0;
    f.nesterov = f.momentum && s.nesterov != 0;
    uses[0] = f.momentum;
  } else if constexpr (kKind == kKernelAdam) {
    f.decoupled = s.decoupled != 0 && s.decay != 1.0f;
    f.weight_decay = s.decoupled == 0 && s.adam_weight_decay != 0.0f;
    f.amsgrad = s.amsgrad != 0;
    uses[0] = uses[1] = true;
    uses[2] = f.amsgrad;
  } else if constexpr (kKind == kKernelAdagrad) {
    f.weight_decay = s.adagrad_weight_decay != 0.0f;
    uses[0] = true;
  } else if constexpr (kKind == kKernelRmsprop) {
    f.weight_decay = s.rmsprop_weight_decay != 0.0f;
    f.momentum = s.momentum != 0.0f;
    f.centered = s.centered != 0;
    uses[0] = true;
    uses[1] = f.momentum;
    uses[2] = f.centered;
  } else {
    f.decoupled = s.decay != 1.0f;
    uses[0] = true;
  }

  // The fp32 values stepped: the parameters themselves or the master copy.
  float* __restrict__ p = kBf16Params
                              ? buffers.master + c.offset
                              : static_cast<float*>(buffers.params) + c.offset;
  ParamT* __restrict__ out =
      static_cast<ParamT*>(buffers.params) + c.offset;  // bf16 only
  const GradT* __restrict__ g =
      static_cast<const GradT*>(buffers.grads) + c.offset;
  float* const arrays[3] = {buffers.state0, buffers.state1, buffers.state2};
  float* st[3];
#pragma unroll
  for (int k = 0; k < 3; ++k) {
    uses[k] = uses[k] && has_state;
    st[k] = uses[k] ? arrays[k] + c.state_offset : nullptr;
  }
  // Unused state values are scratch registers, never loaded or stored.
  float scratch = 0.0f;

  const int64_t n = c.numel;
  bool vec = Aligned(p, 16) && Aligned(g, VecBytes<GradT>());
  if (kBf16Params) vec = vec && Aligned(out, 8);
#pragma unroll
  for (int k = 0; k < 3; ++k) {
    if (uses[k]) vec = vec && Aligned(st[k], 16);
  }

  int64_t scalar_begin = 0;
  if (vec) {
    const int64_t n4 = n / 4;
    for (int64_t base = threadIdx.x; base < n4;
         base += static_cast<int64_t>(kThreads) * kIlp) {
      float pv[kIlp][4];
      float gv[kIlp][4];
      float sv[3][kIlp][4];
#pragma unroll
      for (int k = 0; k < kIlp; ++k) {
        const int64_t j = base + static_cast<int64_t>(k) * kThreads;
        if (j < n4) {
          LoadFour(p, j, pv[k]);
          LoadFour(g, j, gv[k]);
#pragma unroll
          for (int a = 0; a < 3; ++a) {
            if (uses[a]) LoadFour(st[a], j, sv[a][k]);
          }
        }
      }
#pragma unroll
      for (int k = 0; k < kIlp; ++k) {
        const int64_t j = base + static_cast<int64_t>(k) * kThreads;
        if (j < n4) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            Update<kKind>(s, f, pv[k][e], gv[k][e], sv[0][k][e], sv[1][k][e],
                          sv[2][k][e]);
          }
          StoreFour(p, j, pv[k]);
          if (kBf16Params) {
            StoreFourBf16(reinterpret_cast<__nv_bfloat16*>(out), j, pv[k]);
          }
#pragma unroll
          for (int a = 0; a < 3; ++a) {
            if (uses[a]) StoreFour(st[a], j, sv[a][k]);
          }
        }
      }
    }
    scalar_begin = n4 * 4;
  }
  for (int64_t i = scalar_begin + threadIdx.x; i < n; i += kThreads) {
    float pi = p[i];
    const float gi = LoadOne(g, i);
    float si[3];
#pragma unroll
    for (int a = 0; a < 3; ++a) si[a] = uses[a] ? st[a][i] : scratch;
    Update<kKind>(s, f, pi, gi, si[0], si[1], si[2]);
    p[i] = pi;
    if (kBf16Params) {
      reinterpret_cast<__nv_bfloat16*>(out)[i] = ToBf16(pi);
    }
#pragma unroll
    for (int a = 0; a < 3; ++a) {
      if (uses[a]) st[a][i] = si[a];
    }
  }
}

template <int kKind, typename ParamT, typename GradT>
cudaError_t Launch(const OptimizerLaunchParams& launch,
                   const OptimizerBuffers& buffers, cudaStream_t stream) {
  OptimizerKernel<kKind, ParamT, GradT>
      <<<static_cast<unsigned>(launch.num_chunks), kThreads, 0, stream>>>(
          launch, buffers);
  return cudaGetLastError();
}

template <int kKind>
cudaError_t DispatchDtypes(const OptimizerLaunchParams& launch,
                           const OptimizerBuffers& buffers,
                           cudaStream_t stream) {
  if (buffers.param_dtype == kKernelFloat32 &&
      buffers.grad_dtype == kKernelFloat32) {
    return Launch<kKind, float, float>(launch, buffers, stream);
  }
  if (buffers.master == nullptr) return cudaErrorInvalidValue;
  if (buffers.param_dtype == kKernelBFloat16 &&
      buffers.grad_dtype == kKernelFloat32) {
    return Launch<kKind, __nv_bfloat16, float>(launch, buffers, stream);
  }
  if (buffers.param_dtype == kKernelBFloat16 &&
      buffers.grad_dtype == kKernelBFloat16) {
    return Launch<kKind, __nv_bfloat16, __nv_bfloat16>(launch, buffers, stream);
  }
  return cudaErrorInvalidValue;
}

// ---- element-wise helpers ----

// Grid size for a grid-stride loop over n items: enough blocks to fill any
// current GPU, never more than needed.
unsigned GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 4096 ? (blocks > 0 ? blocks : 1)
                                             : 4096);
}

__global__ void FloatToBf16Kernel(const float* __restrict__ in,
                                  __nv_bfloat16* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = ToBf16(in[i]);
  }
}

__global__ void Bf16ToFloatKernel(const __nv_bfloat16* __restrict__ in,
                                  float* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __bfloat162float(in[i]);
  }
}

__global__ void ScaleFloatKernel(float* __restrict__ data, int64_t n,
                                 float factor) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    data[i] = __fmul_rn(data[i], factor);
  }
}

__global__ void DivideFloatKernel(float* __restrict__ data, int64_t n,
                                  float divisor) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    data[i] = __fdiv_rn(data[i], divisor);
  }
}

__global__ void DivideBf16Kernel(__nv_bfloat16* __restrict__ data, int64_t n,
                                 float divisor) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    data[i] = ToBf16(__fdiv_rn(__bfloat162float(data[i]), divisor));
  }
}

// divisor 0: no division (a plain sum).
__global__ void AccumulateKernel(float* __restrict__ sum,
                                 const float* __restrict__ micro, int64_t n,
                                 float divisor) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float s = __fadd_rn(sum[i], micro[i]);
    sum[i] = divisor == 0.0f ? s : __fdiv_rn(s, divisor);
  }
}

__global__ void ScaleBf16Kernel(__nv_bfloat16* __restrict__ data, int64_t n,
                                float factor) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    data[i] = ToBf16(__fmul_rn(__bfloat162float(data[i]), factor));
  }
}

__global__ void SyntheticKernel(float* __restrict__ out, int64_t n,
                                uint64_t key, int64_t first_index,
                                float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __fmul_rn(SymmetricUniformAt(key, first_index + i), scale);
  }
}

__global__ void AddBiasKernel(float* __restrict__ y,
                              const float* __restrict__ b, int64_t rows,
                              int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = __fadd_rn(y[i], b[i % cols]);
  }
}

__global__ void ReluKernel(const float* in, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = in[i];
    out[i] = v > 0.0f ? v : 0.0f;
  }
}

__global__ void ReluBackwardKernel(const float* __restrict__ pre,
                                   float* __restrict__ delta, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (!(pre[i] > 0.0f)) delta[i] = 0.0f;
  }
}

__global__ void MseGradKernel(const float* __restrict__ out,
                              const float* __restrict__ target, int64_t n,
                              float scale, float* __restrict__ delta,
                              double* __restrict__ sum) {
  double local = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float diff = __fsub_rn(out[i], target[i]);
    local += static_cast<double>(diff) * diff;
    delta[i] = __fmul_rn(scale, diff);
  }
  // Warp, then block reduction; one atomic per block.
  for (int offset = 16; offset > 0; offset /= 2) {
    local += __shfl_down_sync(0xffffffffu, local, offset);
  }
  __shared__ double warp_sums[kThreads / 32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = local;
  __syncthreads();
  if (warp == 0) {
    local = lane < kThreads / 32 ? warp_sums[lane] : 0.0;
    for (int offset = 16; offset > 0; offset /= 2) {
      local += __shfl_down_sync(0xffffffffu, local, offset);
    }
    if (lane == 0) atomicAdd(sum, local);
  }
}

// ---- global gradient-norm clipping ----

__device__ inline NormKind KindOf(int32_t inf) {
  return inf != 0 ? NormKind::kInf : NormKind::kL2;
}

// Combines the block's per-thread partials in a fixed tree order; thread 0
// gets the result.
__device__ double BlockCombine(double local, NormKind kind) {
  __shared__ double partial[kThreads];
  partial[threadIdx.x] = local;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) {
      partial[threadIdx.x] = CombineNorms(
          partial[threadIdx.x], partial[threadIdx.x + width], kind);
    }
    __syncthreads();
  }
  return partial[0];
}

__global__ void PartialNormKernel(const float* __restrict__ grads, int64_t n,
                                  int32_t inf, double* __restrict__ partials) {
  const NormKind kind = KindOf(inf);
  double local = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    local = AccumulateNorm(local, grads[i], kind);
  }
  const double total = BlockCombine(local, kind);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void GatherNormsKernel(const double* __restrict__ partials,
                                  int64_t count, int32_t inf,
                                  float* __restrict__ slots, int world_size,
                                  int rank) {
  const NormKind kind = KindOf(inf);
  double local = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    local = CombineNorms(local, partials[i], kind);
  }
  const double total = BlockCombine(local, kind);
  for (int r = threadIdx.x; r < world_size; r += blockDim.x) {
    slots[r] = r == rank ? PartialNormValue(total, kind) : 0.0f;
  }
}

__global__ void ClipScaleKernel(float* __restrict__ grads, int64_t n,
                                const float* __restrict__ slots,
                                int world_size, int32_t inf, double max_norm) {
  __shared__ float coef;
  if (threadIdx.x == 0) {
    coef = ClipCoefficient(TotalNorm(slots, world_size, KindOf(inf)),
                           max_norm);
  }
  __syncthreads();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    grads[i] = __fmul_rn(grads[i], coef);
  }
}

__global__ void CopyKernel(const float4* __restrict__ src,
                           float4* __restrict__ dst, int64_t n4) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n4; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

__global__ void CopyScalarKernel(const float* __restrict__ src,
                                 float* __restrict__ dst, int64_t begin,
                                 int64_t n) {
  for (int64_t i =
           begin + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

// Launch errors reach the caller only through the thread's last-error slot,
// which cudaGetLastError() reads after the launch. Every launcher clears it
// first (the CUDA programming guide's advice), so that it returns its own
// launch's error and never what an earlier call left there (an ignored
// failure, or a cudaErrorNotReady from a query).
void ClearLastError() { (void)cudaGetLastError(); }

}  // namespace

cudaError_t LaunchOptimizerStep(const OptimizerLaunchParams& launch,
                                const OptimizerBuffers& buffers,
                                cudaStream_t stream) {
  ClearLastError();
  if (launch.num_chunks < 0 ||
      (launch.num_chunks > 0 && launch.chunks == nullptr) ||
      buffers.params == nullptr || buffers.grads == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (launch.num_chunks == 0) return cudaSuccess;
  // The arrays every chunk of the kind reads (the optional ones, SGD's
  // momentum and the amsgrad/RMSprop extras, are checked by the planner).
  switch (launch.kind) {
    case kKernelSgd:
      return DispatchDtypes<kKernelSgd>(launch, buffers, stream);
    case kKernelAdam:
      if (buffers.state0 == nullptr || buffers.state1 == nullptr) {
        return cudaErrorInvalidValue;
      }
      return DispatchDtypes<kKernelAdam>(launch, buffers, stream);
    case kKernelAdagrad:
      if (buffers.state0 == nullptr) return cudaErrorInvalidValue;
      return DispatchDtypes<kKernelAdagrad>(launch, buffers, stream);
    case kKernelRmsprop:
      if (buffers.state0 == nullptr) return cudaErrorInvalidValue;
      return DispatchDtypes<kKernelRmsprop>(launch, buffers, stream);
    case kKernelLion:
      if (buffers.state0 == nullptr) return cudaErrorInvalidValue;
      return DispatchDtypes<kKernelLion>(launch, buffers, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t LaunchFloatToBFloat16(const float* in, uint16_t* out, int64_t n,
                                  cudaStream_t stream) {
  ClearLastError();
  if (n <= 0) return cudaSuccess;
  FloatToBf16Kernel<<<GridFor(n), kThreads, 0, stream>>>(
      in, reinterpret_cast<__nv_bfloat16*>(out), n);
  return cudaGetLastError();
}

cudaError_t LaunchBFloat16ToFloat(const uint16_t* in, float* out, int64_t n,
                                  cudaStream_t stream) {
  ClearLastError();
  if (n <= 0) return cudaSuccess;
  Bf16ToFloatKernel<<<GridFor(n), kThreads, 0, stream>>>(
      reinterpret_cast<const __nv_bfloat16*>(in), out, n);
  return cudaGetLastError();
}

cudaError_t LaunchScale(void* data, int32_t dtype, int64_t n, float factor,
                        cudaStream_t stream) {
  ClearLastError();
  if (n <= 0) return cudaSuccess;
  if (dtype == kKernelFloat32) {
    ScaleFloatKernel<<<GridFor(n), kThreads, 0, stream>>>(
        static_cast<float*>(data), n, factor);
  } else if (dtype == kKernelBFloat16) {
    ScaleBf16Kernel<<<GridFor(n), kThreads, 0, stream>>>(
        static_cast<__nv_bfloat16*>(data), n, factor);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchDivide(void* data, int32_t dtype, int64_t n, float divisor,
                         cudaStream_t stream) {
  ClearLastError();
  if (n <= 0) return cudaSuccess;
  if (dtype == kKernelFloat32) {
    DivideFloatKernel<<<GridFor(n), kThreads, 0, stream>>>(
        static_cast<float*>(data), n, divisor);
  } else if (dtype == kKernelBFloat16) {
    DivideBf16Kernel<<<GridFor(n), kThreads, 0, stream>>>(
        static_cast<__nv_bfloat16*>(data), n, divisor);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchAccumulate(float* sum, const float* micro, int64_t n,
                             cudaStream_t stream) {
  ClearLastError();
  if (n <= 0) return cudaSuccess;
  AccumulateKernel<<<GridFor(n), kThreads, 0, stream>>>(sum, micro, n, 0.0f);
  return cudaGetLastError();
}

cudaError_t LaunchAccumulateAndDivide(float* sum, const float* micro,
                                      int64_t n, float divisor,
                                      cudaStream_t stream) {
  ClearLastError();
  if (n <= 0) return cudaSuccess;
  if (divisor == 0.0f) return cudaErrorInvalidValue;
  AccumulateKernel<<<GridFor(n), kThreads, 0, stream>>>(sum, micro, n,
                                                        divisor);
  return cudaGetLastError();
}

cudaError_t LaunchPartialNorm(const float* grads, int64_t n, int32_t inf,
                              double* partials, cudaStream_t stream) {
  ClearLastError();
  PartialNormKernel<<<kNormBlocks, kThreads, 0, stream>>>(grads, n, inf,
                                                          partials);
  return cudaGetLastError();
}

cudaError_t LaunchGatherNorms(const double* partials, int64_t count,
                              int32_t inf, float* slots, int world_size,
                              int rank, cudaStream_t stream) {
  ClearLastError();
  GatherNormsKernel<<<1, kThreads, 0, stream>>>(partials, count, inf, slots,
                                               world_size, rank);
  return cudaGetLastError();
}

cudaError_t LaunchClipScale(float* grads, int64_t n, const float* slots,
                            int world_size, int32_t inf, double max_norm,
                            cudaStream_t stream) {
  ClearLastError();
  if (n <= 0) return cudaSuccess;
  ClipScaleKernel<<<GridFor(n), kThreads, 0, stream>>>(grads, n, slots,
                                                      world_size, inf,
                                                      max_norm);
  return cudaGetLastError();
}

cudaError_t LaunchSyntheticValues(float* out, int64_t n, uint64_t key,
                                  int64_t first_index, float scale,
                                  cudaStream_t stream) {
  ClearLastError();
  if (n <= 0) return cudaSuccess;
  SyntheticKernel<<<GridFor(n), kThreads, 0, stream>>>(out, n, key, first_index,
                                                       scale);
  return cudaGetLastError();
}

cudaError_t LaunchAddBias(float* y, const float* b, int64_t rows, int64_t cols,
                          cudaStream_t stream) {
  ClearLastError();
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  AddBiasKernel<<<GridFor(rows * cols), kThreads, 0, stream>>>(y, b, rows,
                                                               cols);
  return cudaGetLastError();
}

cudaError_t LaunchRelu(const float* in, float* out, int64_t n,
                       cudaStream_t stream) {
  ClearLastError();
  if (n <= 0) return cudaSuccess;
  ReluKernel<<<GridFor(n), kThreads, 0, stream>>>(in, out, n);
  return cudaGetLastError();
}

cudaError_t LaunchReluBackward(const float* pre, float* delta, int64_t n,
                               cudaStream_t stream) {
  ClearLastError();
  if (n <= 0) return cudaSuccess;
  ReluBackwardKernel<<<GridFor(n), kThreads, 0, stream>>>(pre, delta, n);
  return cudaGetLastError();
}

cudaError_t LaunchMseGrad(const float* out, const float* target, int64_t n,
                          float scale, float* delta, double* sum,
                          cudaStream_t stream) {
  ClearLastError();
  if (n <= 0) return cudaSuccess;
  // Every thread of every block reaches the block reduction: the grid is
  // sized by GridFor and the loop above has no early exit.
  MseGradKernel<<<GridFor(n), kThreads, 0, stream>>>(out, target, n, scale,
                                                     delta, sum);
  return cudaGetLastError();
}

cudaError_t LaunchCopy(const float* src, float* dst, int64_t n,
                       cudaStream_t stream) {
  ClearLastError();
  if (n <= 0) return cudaSuccess;
  const bool aligned = (reinterpret_cast<uintptr_t>(src) % 16 == 0) &&
                       (reinterpret_cast<uintptr_t>(dst) % 16 == 0);
  const int64_t n4 = aligned ? n / 4 : 0;
  if (n4 > 0) {
    // More blocks than the element-wise helpers: this is the bandwidth
    // reference, it must not be latency-bound.
    const int64_t blocks = (n4 + kThreads - 1) / kThreads;
    CopyKernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535),
                 kThreads, 0, stream>>>(reinterpret_cast<const float4*>(src),
                                        reinterpret_cast<float4*>(dst), n4);
  }
  const int64_t begin = n4 * 4;
  if (begin < n) {
    CopyScalarKernel<<<GridFor(n - begin), kThreads, 0, stream>>>(src, dst,
                                                                  begin, n);
  }
  return cudaGetLastError();
}

}  // namespace pshard::worker::gpu
