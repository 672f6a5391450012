// Deterministic pseudo-random values, identical on host and device: the
// synthetic workload's gradients on GPU (kernels.cu) and any host code or test
// that must reproduce them bit for bit. Counter-based (no state), so any
// element can be generated independently by any thread.
//
//   SyntheticValue(key, i) = (float)(top 24 bits of SplitMix64(key + i * G))
//                            * 2^-23 - 1            in [-1, 1), exact in fp32
//
// with G = 0x9E3779B97F4A7C15 and SplitMix64 Vigna's finaliser. The key
// derives from (seed, step, rank, tensor) with SyntheticKey.
#ifndef PSHARD_WORKER_GPU_SYNTHETIC_H_
#define PSHARD_WORKER_GPU_SYNTHETIC_H_

#include <cstdint>

#if defined(__CUDACC__)
#define PSHARD_HOST_DEVICE __host__ __device__
#else
#define PSHARD_HOST_DEVICE
#endif

namespace pshard::worker::gpu {

PSHARD_HOST_DEVICE inline uint64_t SplitMix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

PSHARD_HOST_DEVICE inline float SyntheticValue(uint64_t key, int64_t index) {
  const uint64_t bits =
      SplitMix64(key + static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull);
  // 24 random bits -> [0, 2) in steps of 2^-23 -> [-1, 1); every step exact.
  const float unit = static_cast<float>(bits >> 40) * (1.0f / 8388608.0f);
  return unit - 1.0f;
}

// The key of one tensor's values at one step on one rank.
PSHARD_HOST_DEVICE inline uint64_t SyntheticKey(uint64_t seed, int64_t step,
                                                int rank, int tensor) {
  uint64_t k = SplitMix64(seed ^ 0x5053484152440001ull);  // "PSHARD" tag
  k = SplitMix64(k ^ static_cast<uint64_t>(step));
  k = SplitMix64(k ^ static_cast<uint64_t>(static_cast<uint32_t>(rank)));
  k = SplitMix64(k ^ static_cast<uint64_t>(static_cast<uint32_t>(tensor)));
  return k;
}

}  // namespace pshard::worker::gpu

#endif  // PSHARD_WORKER_GPU_SYNTHETIC_H_
