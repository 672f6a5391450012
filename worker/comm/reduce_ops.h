// Element-wise arithmetic on flat buffers of a DataType, shared by the host
// communicators: summing received gradients into a local buffer.
#ifndef PSHARD_WORKER_COMM_REDUCE_OPS_H_
#define PSHARD_WORKER_COMM_REDUCE_OPS_H_

#include <cstdint>
#include <cstring>

#include "worker/comm/communicator.h"

namespace pshard::worker {

inline float BFloat16ToFloat(uint16_t value) {
  uint32_t bits = static_cast<uint32_t>(value) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

// Round to nearest even, as PyTorch's c10::BFloat16 does; NaN stays NaN.
inline uint16_t FloatToBFloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

// `n` elements of `dtype` at `src` as floats (bf16 widened: exact).
inline void ToFloats(const void* src, DataType dtype, int64_t n, float* out) {
  if (dtype == DataType::kFloat32) {
    std::memcpy(out, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) out[i] = BFloat16ToFloat(s[i]);
}

// `n` floats as elements of `dtype` at `dst` (bf16 rounded to nearest even).
inline void FromFloats(const float* values, DataType dtype, int64_t n,
                       void* dst) {
  if (dtype == DataType::kFloat32) {
    std::memcpy(dst, values, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  auto* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = FloatToBFloat16(values[i]);
}

// dst[i] += src[i] for `count` elements of `dtype`.
inline void AddInto(void* dst, const void* src, int64_t count,
                    DataType dtype) {
  if (dtype == DataType::kFloat32) {
    float* __restrict d = static_cast<float*>(dst);
    const float* __restrict s = static_cast<const float*>(src);
    for (int64_t i = 0; i < count; ++i) d[i] += s[i];
  } else {
    uint16_t* d = static_cast<uint16_t*>(dst);
    const uint16_t* s = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < count; ++i) {
      d[i] = FloatToBFloat16(BFloat16ToFloat(d[i]) + BFloat16ToFloat(s[i]));
    }
  }
}

// dst[i] = (dst[i] + src[i]) / divisor: the last addition of a mean, fused
// with its division (the same two roundings as doing them apart).
inline void AddIntoAndDivide(void* dst, const void* src, int64_t count,
                             DataType dtype, float divisor) {
  if (dtype == DataType::kFloat32) {
    float* __restrict d = static_cast<float*>(dst);
    const float* __restrict s = static_cast<const float*>(src);
    for (int64_t i = 0; i < count; ++i) d[i] = (d[i] + s[i]) / divisor;
  } else {
    uint16_t* d = static_cast<uint16_t*>(dst);
    const uint16_t* s = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < count; ++i) {
      // Summed in bf16 as AddInto does, then divided.
      const float sum =
          BFloat16ToFloat(FloatToBFloat16(BFloat16ToFloat(d[i]) + BFloat16ToFloat(s[i])));
      d[i] = FloatToBFloat16(sum / divisor);
    }
  }
}

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_COMM_REDUCE_OPS_H_
